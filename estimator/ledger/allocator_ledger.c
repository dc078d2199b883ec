#include "allocator_ledger.h"

#include <stdlib.h>
#include <string.h>

#include "json_util.h"

/* Anonymous blocks of one category, most recent last. */
typedef struct anon_stack {
    est_alloc_handle *h;
    int64_t *bytes;
    size_t n, cap;
} anon_stack;

typedef struct replay {
    est_alloc *a;
    est_alloc_handle *handle; /* per tensor id */
    anon_stack anon[EST_CAT_COUNT];
    est_alloc_replay *out;
    size_t moment;
    int64_t reserved_peak;
    bool stop_at_oom;         /* a verdict only: the first out-of-memory ends the walk */
} replay;

static bool anon_push(anon_stack *s, est_alloc_handle h, int64_t bytes) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        est_alloc_handle *nh = realloc(s->h, cap * sizeof *nh);
        if (nh) s->h = nh;
        int64_t *nb = realloc(s->bytes, cap * sizeof *nb);
        if (nb) s->bytes = nb;
        if (!nh || !nb) return false;
        s->cap = cap;
    }
    s->h[s->n] = h;
    s->bytes[s->n++] = bytes;
    return true;
}

static void note_oom(replay *r, int64_t bytes) {
    if (r->out->oom) return;
    r->out->oom = true;
    r->out->oom_request_bytes = bytes;
    r->out->oom_moment = r->moment;
}

/* Releases `bytes` of a category's anonymous blocks, newest first; a block
 * freed in part is freed and its rest allocated again. */
static int anon_free(replay *r, anon_stack *s, int64_t bytes) {
    while (bytes > 0 && s->n > 0) {
        const size_t top = s->n - 1;
        const int64_t b = s->bytes[top];
        if (est_alloc_release(r->a, s->h[top]) != EST_ALLOC_OK) return -1;
        s->n--;
        if (b > bytes) {
            est_alloc_handle h = EST_ALLOC_NULL;
            int rc = est_alloc_malloc(r->a, b - bytes, 0, &h);
            if (rc == EST_ALLOC_OOM) note_oom(r, b - bytes);
            else if (rc != EST_ALLOC_OK || !anon_push(s, h, b - bytes)) return -1;
        }
        bytes -= b;
    }
    return 0;
}

static int on_alloc(replay *r, const est_step *st, const est_event *e) {
    est_alloc_handle h = EST_ALLOC_NULL;
    int rc = est_alloc_malloc(r->a, e->u.mem.bytes, e->u.mem.stream, &h);
    if (rc == EST_ALLOC_OOM) {
        note_oom(r, e->u.mem.bytes);
        return 0;
    }
    if (rc != EST_ALLOC_OK) return -1;
    if (e->u.mem.id >= 0 && e->u.mem.id < st->tensor_count) r->handle[e->u.mem.id] = h;
    else if (!anon_push(&r->anon[e->u.mem.category], h, e->u.mem.bytes)) return -1;
    const int64_t reserved = est_alloc_reserved_now(r->a);
    if (reserved > r->reserved_peak) {
        r->reserved_peak = reserved;
        r->out->reserved_peak_moment = r->moment;
    }
    return 0;
}

static int on_free(replay *r, const est_step *st, const est_event *e) {
    if (e->u.mem.id < 0 || e->u.mem.id >= st->tensor_count)
        return anon_free(r, &r->anon[e->u.mem.category], e->u.mem.bytes);
    const est_alloc_handle h = r->handle[e->u.mem.id];
    if (h == EST_ALLOC_NULL) return 0; /* it never got a block (an OOM) */
    r->handle[e->u.mem.id] = EST_ALLOC_NULL;
    /* a side stream's block used on the compute stream, or the reverse, or
     * the stream the seam names (a virtual one, events.h) */
    const int32_t use = e->u.mem.use_stream >= 0 ? e->u.mem.use_stream : e->u.mem.stream == 0 ? 1 : 0;
    const int rc = e->u.mem.pending ? est_alloc_release_pending(r->a, h, use) : est_alloc_release(r->a, h);
    return rc == EST_ALLOC_OK ? 0 : -1;
}

/* Every real stream (a virtual one only by name: events.h EST_STREAM_VIRTUAL). */
static int on_sync(replay *r, const est_event *e) {
    if (e->u.mem.stream >= 0) return est_alloc_sync_stream(r->a, e->u.mem.stream) == EST_ALLOC_OK ? 0 : -1;
    for (int32_t s = 0; s < EST_STREAM_VIRTUAL; s++)
        if (est_alloc_sync_stream(r->a, s) != EST_ALLOC_OK) return -1;
    return 0;
}

static int walk(replay *r, const est_step *st) {
    for (size_t i = 0; i < st->count; i++) {
        const est_event *e = &st->events[i];
        int rc = 0;
        switch (e->kind) {
        case EST_EV_ALLOC: rc = on_alloc(r, st, e); break;
        case EST_EV_FREE: rc = on_free(r, st, e); break;
        case EST_EV_SYNC: rc = on_sync(r, e); break;
        case EST_EV_EMPTY_CACHE: rc = est_alloc_empty_cache(r->a) == EST_ALLOC_OK ? 0 : -1; break;
        case EST_EV_MOMENT: r->moment++; break;
        default: break;
        }
        if (rc) return -1;
        if (r->stop_at_oom && r->out->oom) break;
    }
    return 0;
}

struct est_replayer {
    est_alloc *a;
    est_alloc_handle *handle;
    size_t handle_cap;
    anon_stack anon[EST_CAT_COUNT];
};

est_replayer *est_replayer_new(void) { return calloc(1, sizeof(est_replayer)); }

void est_replayer_free(est_replayer *p) {
    if (!p) return;
    for (int c = 0; c < EST_CAT_COUNT; c++) {
        free(p->anon[c].h);
        free(p->anon[c].bytes);
    }
    free(p->handle);
    est_alloc_free(p->a);
    free(p);
}

/* p's allocator configured by cfg and a cleared handle per tensor of st; 0, or -1. */
static int prepare(est_replayer *p, const est_step *st, const est_alloc_config *cfg, char *err,
                   size_t errlen) {
    if (!p->a) p->a = est_alloc_new(cfg, err, errlen);
    else if (est_alloc_reconfigure(p->a, cfg, err, errlen) < 0) return -1;
    if (!p->a) return -1;
    const size_t need = (size_t)st->tensor_count + 1;
    if (need > p->handle_cap) {
        est_alloc_handle *h = realloc(p->handle, need * sizeof *h);
        if (!h) return ft_errorf(err, errlen, "out of memory");
        p->handle = h;
        p->handle_cap = need;
    }
    memset(p->handle, 0, need * sizeof *p->handle);
    for (int c = 0; c < EST_CAT_COUNT; c++) p->anon[c].n = 0;
    return 0;
}

int est_replayer_run(est_replayer *p, const est_step *st, const est_alloc_config *cfg, bool until_oom,
                     est_alloc_replay *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (st->oom) return ft_errorf(err, errlen, "out of memory building the step");
    if (prepare(p, st, cfg, err, errlen) < 0) return -1;
    replay r;
    memset(&r, 0, sizeof r);
    r.out = out;
    r.stop_at_oom = until_oom;
    r.moment = (size_t)-1; /* the first MOMENT makes it 0 */
    r.a = p->a;
    r.handle = p->handle;
    memcpy(r.anon, p->anon, sizeof r.anon);
    int rc = walk(&r, st);
    memcpy(p->anon, r.anon, sizeof r.anon); /* the stacks may have grown */
    if (rc) ft_errorf(err, errlen, "allocator replay: %s", est_alloc_error(r.a));
    est_alloc_stats stats;
    est_alloc_stats_get(r.a, &stats);
    out->peak_allocated_bytes = stats.allocated_bytes[EST_ALLOC_ALL].peak;
    out->peak_active_bytes = stats.active_bytes[EST_ALLOC_ALL].peak;
    out->peak_reserved_bytes = stats.reserved_bytes[EST_ALLOC_ALL].peak;
    out->num_alloc_retries = stats.num_alloc_retries;
    out->capacity_reached = stats.num_capacity_refusals > 0;
    if (out->reserved_peak_moment == (size_t)-1) out->reserved_peak_moment = 0;
    return rc;
}

static int ledger(const est_step *st, const est_alloc_config *cfg, bool until_oom, est_alloc_replay *out,
                  char *err, size_t errlen) {
    est_replayer *p = est_replayer_new();
    if (!p) {
        memset(out, 0, sizeof *out);
        return ft_errorf(err, errlen, "out of memory");
    }
    int rc = est_replayer_run(p, st, cfg, until_oom, out, err, errlen);
    est_replayer_free(p);
    return rc;
}

int est_allocator_ledger(const est_step *st, const est_alloc_config *cfg, est_alloc_replay *out,
                         char *err, size_t errlen) {
    return ledger(st, cfg, false, out, err, errlen);
}

int est_allocator_ledger_until_oom(const est_step *st, const est_alloc_config *cfg,
                                   est_alloc_replay *out, char *err, size_t errlen) {
    return ledger(st, cfg, true, out, err, errlen);
}
