#include "events.h"

#include <stdlib.h>
#include <string.h>

#include "json_util.h"

const char *const est_unit_names[EST_UNIT_COUNT] = {
    "embedding_forward", "block_forward",      "head_and_loss_forward",
    "loss_backward",     "head_backward",      "block_backward",
    "embedding_backward", "gradient_reduction", "optimizer_step",
};

void est_step_init(est_step *st) { memset(st, 0, sizeof *st); }

void est_step_free(est_step *st) {
    free(st->events);
    free(st->work);
    free(st->units);
    free(st->tensor_cat);
    free(st->tensor_bytes);
    free(st->tensor_stream);
    memset(st, 0, sizeof *st);
}

void est_step_clear(est_step *st) {
    est_step kept = *st;
    memset(st, 0, sizeof *st);
    st->keep_names = kept.keep_names;
    st->stop_above_bytes = kept.stop_above_bytes;
    st->events = kept.events;
    st->capacity = kept.capacity;
    st->work = kept.work;
    st->work_capacity = kept.work_capacity;
    st->units = kept.units;
    st->unit_capacity = kept.unit_capacity;
    st->tensor_cat = kept.tensor_cat;
    st->tensor_bytes = kept.tensor_bytes;
    st->tensor_stream = kept.tensor_stream;
    st->tensor_capacity = kept.tensor_capacity;
}

/* Room for one more event in `*list`; NULL when out of memory. */
static est_event *append(est_event **list, size_t *count, size_t *capacity) {
    if (*count == *capacity) {
        size_t cap = *capacity ? *capacity * 2 : 256;
        est_event *ne = realloc(*list, cap * sizeof *ne);
        if (!ne) return NULL;
        *list = ne;
        *capacity = cap;
    }
    return &(*list)[(*count)++];
}

est_event *est_step_add(est_step *st, est_event_kind kind) {
    if (st->oom) return NULL;
    if (st->quiet && (kind == EST_EV_MOMENT || kind >= EST_EV_UNIT)) return NULL;
    const bool work = kind > EST_EV_UNIT;
    if (work && !st->unit_open) { /* work outside a unit: a bug of the emitter */
        st->oom = true;
        return NULL;
    }
    est_event *e = work ? append(&st->work, &st->work_count, &st->work_capacity)
                        : append(&st->events, &st->count, &st->capacity);
    if (!e) {
        st->oom = true;
        return NULL;
    }
    memset(e, 0, sizeof *e);
    e->kind = kind;
    return e;
}

/* Room for one memory event (ALLOC or FREE) at the end of the events; the
 * caller sets every field of u.mem (nothing is cleared: a step holds tens of
 * thousands of them). NULL when out of memory (st->oom). */
static est_event *mem_event(est_step *st, est_event_kind kind) {
    est_event *e = append(&st->events, &st->count, &st->capacity);
    if (!e) {
        st->oom = true;
        return NULL;
    }
    e->kind = kind;
    return e;
}

/* The allocated peak rises to the live bytes; past stop_above_bytes the build stops. */
static void peak_rises(est_step *st) {
    st->peak_allocated_bytes = st->allocated_now;
    if (st->stop_above_bytes > 0 && st->peak_allocated_bytes > st->stop_above_bytes)
        st->stopped = st->oom = true;
}

/* `bytes` (negative: freed) of `cat` change: the live bytes and est_step's peak
 * fields (events.h), as the memory ledger will see them. */
static void track(est_step *st, est_category cat, int64_t bytes) {
    st->live[cat] += bytes;
    if (cat >= EST_CAT_ALLOCATED_COUNT) return;
    st->allocated_now += bytes;
    if (bytes >= 0 && st->span_open && st->allocated_now > st->peak_allocated_bytes) peak_rises(st);
}

/* A moment's row (a span: while it is open, every allocation may raise it). */
static void row_opens(est_step *st, bool span) {
    st->span_open = span;
    if (st->allocated_now > st->peak_allocated_bytes) peak_rises(st);
}

void est_step_alloc(est_step *st, est_category cat, int64_t bytes) {
    if (bytes == 0 || st->oom) return;
    if (st->unit_open) est_step_unit_end(st);
    est_event *e = mem_event(st, bytes > 0 ? EST_EV_ALLOC : EST_EV_FREE);
    if (!e) return;
    e->u.mem.category = cat;
    e->u.mem.bytes = bytes > 0 ? bytes : -bytes;
    e->u.mem.id = -1;
    e->u.mem.stream = 0;
    e->u.mem.pending = false;
    e->u.mem.use_stream = -1;
    e->u.mem.name[0] = '\0';
    track(st, cat, bytes);
}

static bool tensor_room(est_step *st) {
    if (st->tensor_count < st->tensor_capacity) return true;
    int32_t cap = st->tensor_capacity ? st->tensor_capacity * 2 : 1024;
    int8_t *c = realloc(st->tensor_cat, (size_t)cap * sizeof *c);
    if (c) st->tensor_cat = c;
    int64_t *b = realloc(st->tensor_bytes, (size_t)cap * sizeof *b);
    if (b) st->tensor_bytes = b;
    int8_t *s = realloc(st->tensor_stream, (size_t)cap * sizeof *s);
    if (s) st->tensor_stream = s;
    if (!c || !b || !s) return false;
    st->tensor_capacity = cap;
    return true;
}

int32_t est_step_tensor(est_step *st, est_category cat, int64_t bytes, const char *name,
                        int stream) {
    if (st->oom) return -1;
    if (!tensor_room(st)) {
        st->oom = true;
        return -1;
    }
    if (st->unit_open) est_step_unit_end(st);
    est_event *e = mem_event(st, EST_EV_ALLOC);
    if (!e) return -1;
    const int32_t id = st->tensor_count++;
    st->tensor_cat[id] = (int8_t)cat;
    st->tensor_bytes[id] = bytes;
    st->tensor_stream[id] = (int8_t)stream;
    e->u.mem.category = cat;
    e->u.mem.bytes = bytes;
    e->u.mem.id = id;
    e->u.mem.stream = (int8_t)stream;
    e->u.mem.pending = false;
    e->u.mem.use_stream = -1;
    if (st->keep_names) ft_strlcpy(e->u.mem.name, name ? name : "", sizeof e->u.mem.name);
    else e->u.mem.name[0] = '\0';
    track(st, cat, bytes);
    return id;
}

void est_step_tensor_free(est_step *st, int32_t id, bool pending) {
    if (st->oom || id < 0 || id >= st->tensor_count || st->tensor_bytes[id] < 0) return;
    if (st->unit_open) est_step_unit_end(st);
    est_event *e = mem_event(st, EST_EV_FREE);
    if (!e) return;
    const est_category cat = (est_category)st->tensor_cat[id];
    e->u.mem.category = cat;
    e->u.mem.bytes = st->tensor_bytes[id];
    e->u.mem.id = id;
    e->u.mem.stream = st->tensor_stream[id];
    e->u.mem.pending = pending;
    e->u.mem.use_stream = -1;
    e->u.mem.name[0] = '\0';
    track(st, cat, -st->tensor_bytes[id]);
    st->tensor_bytes[id] = -1 - st->tensor_bytes[id]; /* freed: a second free is ignored */
}

void est_step_tensor_free_on(est_step *st, int32_t id, int use_stream) {
    const size_t before = st->count;
    est_step_tensor_free(st, id, true);
    if (st->count > before) st->events[st->count - 1].u.mem.use_stream = (int8_t)use_stream;
}

int64_t est_step_tensor_bytes(const est_step *st, int32_t id) {
    if (id < 0 || id >= st->tensor_count) return 0;
    int64_t b = st->tensor_bytes[id];
    return b >= 0 ? b : -1 - b;
}

void est_step_span(est_step *st, est_phase_kind phase, int32_t layer, const char *label) {
    if (st->quiet) return;
    if (st->unit_open) est_step_unit_end(st);
    est_event *e = est_step_add(st, EST_EV_MOMENT);
    if (!e) return;
    e->u.moment.phase = phase;
    e->u.moment.layer = layer;
    e->u.moment.span = true;
    ft_strlcpy(e->u.moment.label, label, sizeof e->u.moment.label);
    st->moments++;
    row_opens(st, true);
}

static void sync_event(est_step *st, int stream) {
    if (st->unit_open) est_step_unit_end(st);
    est_event *e = est_step_add(st, EST_EV_SYNC);
    if (e) e->u.mem.stream = (int8_t)stream;
}

void est_step_sync(est_step *st) { sync_event(st, -1); }
void est_step_sync_stream(est_step *st, int stream) { sync_event(st, stream); }

void est_step_empty_cache(est_step *st) {
    if (st->unit_open) est_step_unit_end(st);
    est_step_add(st, EST_EV_EMPTY_CACHE);
}

void est_step_free_bytes(est_step *st, est_category cat, int64_t bytes) {
    est_step_alloc(st, cat, -bytes);
}

void est_step_moment(est_step *st, est_phase_kind phase, int32_t layer, const char *label,
                     const int64_t live[EST_CAT_COUNT]) {
    if (st->unit_open) est_step_unit_end(st);
    for (int c = 0; c < EST_CAT_COUNT; c++)
        est_step_alloc(st, (est_category)c, live[c] - st->live[c]);
    est_event *e = est_step_add(st, EST_EV_MOMENT);
    if (!e) return;
    e->u.moment.phase = phase;
    e->u.moment.layer = layer;
    ft_strlcpy(e->u.moment.label, label, sizeof e->u.moment.label);
    st->moments++;
    row_opens(st, false);
}

void est_step_unit(est_step *st, est_unit unit, int32_t layer) {
    if (st->unit_open) est_step_unit_end(st);
    if (st->oom || st->quiet) return;
    if (st->unit_count == st->unit_capacity) {
        size_t cap = st->unit_capacity ? st->unit_capacity * 2 : 64;
        est_unit_ref *nu = realloc(st->units, cap * sizeof *nu);
        if (!nu) {
            st->oom = true;
            return;
        }
        st->units = nu;
        st->unit_capacity = cap;
    }
    est_event *e = est_step_add(st, EST_EV_UNIT);
    if (!e) return;
    e->u.unit.ref = st->unit_count;
    st->units[st->unit_count++] = (est_unit_ref){
        .unit = unit,
        .layer = layer,
        .body = st->work_count,
        .moment = st->moments ? st->moments - 1 : 0,
    };
    st->unit_open = true;
}

bool est_step_unit_repeat(est_step *st, est_unit unit, int32_t layer) {
    if (st->quiet) return true;
    if (st->oom || st->last_body_len[unit] == 0) return false;
    const size_t body = st->last_body[unit], len = st->last_body_len[unit];
    est_step_unit(st, unit, layer);
    if (st->oom) return true;
    st->unit_open = false;
    st->units[st->unit_count - 1].body = body;
    st->units[st->unit_count - 1].body_len = len;
    return true;
}

void est_step_unit_end(est_step *st) {
    if (!st->unit_open || st->oom) return;
    st->unit_open = false;
    est_unit_ref *r = &st->units[st->unit_count - 1];
    r->body_len = st->work_count - r->body;
    st->last_body[r->unit] = r->body;
    st->last_body_len[r->unit] = r->body_len;
}

void est_step_gemm(est_step *st, double M, double K, double N, double elem_bytes, double count,
                   double kernels) {
    est_event *e = est_step_add(st, EST_EV_GEMM);
    if (!e) return;
    e->u.gemm.M = M;
    e->u.gemm.K = K;
    e->u.gemm.N = N;
    e->u.gemm.elem_bytes = elem_bytes;
    e->u.gemm.count = count;
    e->u.gemm.kernels = kernels;
}

void est_step_memory_op(est_step *st, double bytes, double kernels) {
    est_event *e = est_step_add(st, EST_EV_MEMORY_OP);
    if (!e) return;
    e->u.op.bytes = bytes;
    e->u.op.kernels = kernels;
}

void est_step_kernel_op(est_step *st, int32_t cpu_kernel, double elems, double bytes) {
    est_event *e = est_step_add(st, EST_EV_MEMORY_OP);
    if (!e) return;
    e->u.op.bytes = bytes;
    e->u.op.kernels = 1;
    e->u.op.elems = elems;
    e->u.op.cpu_kernel = cpu_kernel;
}
