/* The plan's memo (plan_memo.h): probes (a run less its GPU, at one
 * micro-batch), the allocator replays of their steps, and step times. */
#include "plan_memo.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "estimate.h"
#include "fw_registry.h"
#include "step_build.h"

/* What tells two probes of one plan apart (the rest of the run is the
 * request's, the same for all): what a strategy sets, the ranks, the batch, and
 * the constants by value (kv indexes the distinct ones). The GPU, host and
 * network are not part of it: no step reads them. The ranks are named by the
 * world alone (gpus_per_node 0, nodes the world): the frameworks' steps see
 * the world, not how it is split into nodes, but for FSDP's loading (one copy
 * of the model per node: seam_fsdp.c), whose probes keep both;
 * tests/plan_memo.c checks it for every framework. */
typedef struct probe_key {
    int32_t framework, zero, offload, checkpointing, attention, kv;
    int64_t gpus_per_node, nodes, micro_batch, grad_accum;
} probe_key;

typedef struct probe {
    probe_key key;
    int rc;                  /* the estimate's status up to its memory ledger */
    bool no_allocator;       /* ftrain: its arena is its own allocator */
    int64_t allocated_bytes; /* the timeline's allocated peak */
    int64_t context_bytes;
    int64_t cpu_bytes, cpu_load_bytes;
    int32_t step;            /* its replays (steps[]), -1 until its step is hashed */
} probe;

/* One replay within a card: capacity (less the context) and the card. */
typedef struct pressed {
    int64_t capacity_bytes, device_bytes, reserved_bytes;
    bool oom;
} pressed;

/* The replays of one step (steps alike share them). */
typedef struct step_replays {
    uint64_t hash[2];
    bool roomy_known;
    int64_t roomy_bytes;     /* the reserved peak without a capacity */
    int64_t above_bytes;     /* the roomy reserved peak is known to exceed this; -1 */
    pressed *p;
    size_t np, cap;
} step_replays;

/* The work of one step, for its time (est_time_ledger reads nothing else). */
typedef struct timed {
    probe_key key;
    int rc;
    bool oom;
    est_unit_ref *units;
    est_event *work;
    size_t unit_count, work_count;
} timed;

/* A step kept built: the probe whose step it is (-1: none) and when it was
 * last used. */
typedef struct built_step {
    est_estimate e;
    int32_t probe;
    uint64_t used;
} built_step;

/* Steps kept built at once. A probe's step is built when the probe is new; a
 * later card that needs it replayed needs it built again unless it is still
 * kept. The plan asks the probes of one world and strategy card after card
 * (plan.c, cmp_work), so the last few cover them: in the 8B plan's table, one
 * kept step built 116 steps again, four build 6 (8 MB more). */
#define MEMO_BUILT 4

/* An index of entries by a 64-bit hash: open addressing, -1 empty. */
typedef struct index_table {
    int32_t *slot;
    size_t cap, n;
} index_table;

struct est_plan_memo {
    double (*kv)[EST_K_COUNT];
    size_t nkv, capkv;
    probe *probes;
    size_t nprobes, capprobes;
    index_table probe_index;
    step_replays *steps;
    size_t nsteps, capsteps;
    index_table step_index;
    timed *times;
    size_t ntimes, captimes;
    index_table time_index;
    built_step built[MEMO_BUILT];
    uint64_t tick;           /* uses of built steps so far */
    est_estimate *e;         /* the step being looked at (one of built[]) */
    est_step tstep;          /* a step built for its time only */
    est_probe_answer last;   /* the last successful probe's answer */
    int32_t last_probe;      /* its probe, when its device_used_bytes is still to be worked out */
    size_t probes_asked, builds, replays;
    struct { int64_t world, bytes; } largest[32]; /* no card asked of a world is larger */
    size_t nlargest;
};

static bool grow(void **v, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap * 2 : 64;
    while (c < need) c *= 2;
    void *p = realloc(*v, c * elem);
    if (!p) return false;
    *v = p;
    *cap = c;
    return true;
}

/* ------------------------------------------------------------ index tables */

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

static uint64_t key_hash(const probe_key *k) {
    const int64_t w[] = {k->framework, k->zero, k->offload, k->checkpointing, k->attention, k->kv,
                         k->gpus_per_node, k->nodes, k->micro_batch, k->grad_accum};
    uint64_t h = 0x9e3779b97f4a7c15ULL;
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) h = mix64(h ^ (uint64_t)w[i]);
    return h;
}

static bool key_eq(const probe_key *a, const probe_key *b) {
    return a->framework == b->framework && a->zero == b->zero && a->offload == b->offload &&
           a->checkpointing == b->checkpointing && a->attention == b->attention && a->kv == b->kv &&
           a->gpus_per_node == b->gpus_per_node && a->nodes == b->nodes &&
           a->micro_batch == b->micro_batch && a->grad_accum == b->grad_accum;
}

/* An entry's hash, and whether entry i is what `query` asks for. */
typedef uint64_t (*hash_fn)(const est_plan_memo *m, int32_t i);
typedef bool (*match_fn)(const est_plan_memo *m, int32_t i, const void *query);

/* The slot of the entry `query` asks for (hash h), or the empty slot where it goes. */
static size_t index_find(const est_plan_memo *m, const index_table *t, uint64_t h, match_fn match,
                         const void *query) {
    size_t s = (size_t)h & (t->cap - 1);
    while (t->slot[s] >= 0 && !match(m, t->slot[s], query)) s = (s + 1) & (t->cap - 1);
    return s;
}

/* Room for one more entry (rehashing); false out of memory. */
static bool index_room(const est_plan_memo *m, index_table *t, hash_fn hash_of) {
    if (t->cap && 2 * (t->n + 1) <= t->cap) return true;
    size_t cap = t->cap ? t->cap * 2 : 256;
    int32_t *slot = malloc(cap * sizeof *slot);
    if (!slot) return false;
    for (size_t i = 0; i < cap; i++) slot[i] = -1;
    for (size_t i = 0; i < t->cap; i++) {
        if (t->slot[i] < 0) continue;
        size_t s = (size_t)hash_of(m, t->slot[i]) & (cap - 1);
        while (slot[s] >= 0) s = (s + 1) & (cap - 1);
        slot[s] = t->slot[i];
    }
    free(t->slot);
    t->slot = slot;
    t->cap = cap;
    return true;
}

static uint64_t probe_hash_of(const est_plan_memo *m, int32_t i) { return key_hash(&m->probes[i].key); }
static bool probe_match(const est_plan_memo *m, int32_t i, const void *q) {
    return key_eq(&m->probes[i].key, q);
}
static uint64_t time_hash_of(const est_plan_memo *m, int32_t i) { return key_hash(&m->times[i].key); }
static bool time_match(const est_plan_memo *m, int32_t i, const void *q) { return key_eq(&m->times[i].key, q); }
static uint64_t step_hash_of(const est_plan_memo *m, int32_t i) { return m->steps[i].hash[0]; }
static bool step_match(const est_plan_memo *m, int32_t i, const void *q) {
    const uint64_t *h = q;
    return m->steps[i].hash[0] == h[0] && m->steps[i].hash[1] == h[1];
}

/* -------------------------------------------------------------- the memo */

est_plan_memo *est_plan_memo_new(void) {
    est_plan_memo *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    for (size_t j = 0; j < MEMO_BUILT; j++) {
        est_estimate_init(&m->built[j].e);
        m->built[j].probe = -1;
    }
    m->e = &m->built[0].e;
    est_step_init(&m->tstep);
    m->last_probe = -1;
    m->last.rc = -1;
    return m;
}

void est_plan_memo_free(est_plan_memo *m) {
    if (!m) return;
    for (size_t i = 0; i < m->nsteps; i++) free(m->steps[i].p);
    for (size_t i = 0; i < m->ntimes; i++) {
        free(m->times[i].units);
        free(m->times[i].work);
    }
    free(m->kv);
    free(m->probes);
    free(m->steps);
    free(m->times);
    free(m->probe_index.slot);
    free(m->step_index.slot);
    free(m->time_index.slot);
    for (size_t j = 0; j < MEMO_BUILT; j++) est_estimate_free(&m->built[j].e);
    est_step_free(&m->tstep);
    free(m);
}

void est_plan_memo_largest_card(est_plan_memo *m, int64_t world, int64_t bytes) {
    for (size_t j = 0; j < m->nlargest; j++)
        if (m->largest[j].world == world) {
            if (bytes > m->largest[j].bytes) m->largest[j].bytes = bytes;
            return;
        }
    if (m->nlargest < sizeof m->largest / sizeof m->largest[0]) {
        m->largest[m->nlargest].world = world;
        m->largest[m->nlargest++].bytes = bytes;
    }
}

/* The largest card asked of run's world; 0 when not known. */
static int64_t largest_card(const est_plan_memo *m, const est_run *run) {
    const int64_t world = est_run_world(run);
    for (size_t j = 0; j < m->nlargest; j++)
        if (m->largest[j].world == world) return m->largest[j].bytes;
    return 0;
}

void est_plan_memo_counts(const est_plan_memo *m, size_t *probes, size_t *builds, size_t *replays) {
    *probes = m->nprobes;
    *builds = m->builds;
    *replays = m->replays;
}

int est_plan_memo_constants(const est_run *run, est_constants *k) {
    return est_estimate_constants(run, k, NULL, 0);
}

/* The index of k's values among those seen (bit for bit), -1 out of memory. */
static int32_t kv_index(est_plan_memo *m, const est_constants *k) {
    for (size_t i = 0; i < m->nkv; i++)
        if (!memcmp(m->kv[i], k->value, sizeof k->value)) return (int32_t)i;
    if (!grow((void **)&m->kv, &m->capkv, m->nkv + 1, sizeof *m->kv)) return -1;
    memcpy(m->kv[m->nkv], k->value, sizeof k->value);
    return (int32_t)m->nkv++;
}

static probe_key key_of(const est_run *run, int32_t kv) {
    return (probe_key){.framework = run->framework, .zero = run->zero_stage, .offload = run->offload,
                       .checkpointing = run->checkpointing, .attention = run->attention, .kv = kv,
                       .gpus_per_node = run->gpus_per_node, .nodes = run->nodes,
                       .micro_batch = run->micro_batch, .grad_accum = run->grad_accum};
}

/* A step's work (its time) sees only the world; so does its memory, but where
 * the framework's host memory depends on the ranks per node (fw_registry.h). */
static probe_key world_key_of(const est_run *run, int32_t kv) {
    probe_key k = key_of(run, kv);
    k.gpus_per_node = 0;
    k.nodes = est_run_world(run);
    return k;
}

static probe_key memory_key_of(const est_run *run, int32_t kv) {
    return est_fw_of(run)->memory_by_node ? key_of(run, kv) : world_key_of(run, kv);
}

/* ------------------------------------------------------------------- times */

/* Remembers the work of the step in `st` (built with status rc) under `key`. */
static int remember_time(est_plan_memo *m, const probe_key *key, int rc, const est_step *st) {
    if (!index_room(m, &m->time_index, time_hash_of) ||
        !grow((void **)&m->times, &m->captimes, m->ntimes + 1, sizeof *m->times))
        return -1;
    const uint64_t h = key_hash(key);
    size_t s = index_find(m, &m->time_index, h, time_match, key);
    if (m->time_index.slot[s] >= 0) return m->time_index.slot[s];
    timed *t = &m->times[m->ntimes];
    memset(t, 0, sizeof *t);
    t->key = *key;
    t->rc = rc;
    t->oom = st->oom;
    if (rc == 0 && !st->oom) {
        t->units = malloc((st->unit_count ? st->unit_count : 1) * sizeof *t->units);
        t->work = malloc((st->work_count ? st->work_count : 1) * sizeof *t->work);
        if (!t->units || !t->work) {
            free(t->units);
            free(t->work);
            return -1;
        }
        memcpy(t->units, st->units, st->unit_count * sizeof *t->units);
        memcpy(t->work, st->work, st->work_count * sizeof *t->work);
        t->unit_count = st->unit_count;
        t->work_count = st->work_count;
    }
    m->time_index.slot[s] = (int32_t)m->ntimes;
    m->time_index.n++;
    return (int32_t)m->ntimes++;
}

void est_plan_memo_time(est_plan_memo *m, const est_run *run, const est_constants *k,
                        est_time_detail *out) {
    memset(out, 0, sizeof *out);
    const int32_t kv = kv_index(m, k);
    if (kv < 0) return;
    const probe_key key = world_key_of(run, kv);
    int32_t i = -1;
    if (m->time_index.cap) i = m->time_index.slot[index_find(m, &m->time_index, key_hash(&key), time_match, &key)];
    if (i < 0) {
        char err[160] = "";
        m->builds++;
        const int rc = est_step_build(run, k, &m->tstep, err, sizeof err);
        i = remember_time(m, &key, rc, &m->tstep);
        if (i < 0) { /* out of host memory: price it from the step just built */
            if (rc == 0) est_time_ledger(run, &m->tstep, k, out, NULL);
            return;
        }
    }
    const timed *t = &m->times[i];
    if (t->rc != 0) return;
    est_step view;
    est_step_init(&view);
    view.units = t->units;
    view.unit_count = t->unit_count;
    view.work = t->work;
    view.work_count = t->work_count;
    view.oom = t->oom;
    est_time_ledger(run, &view, k, out, NULL);
}

/* ------------------------------------------------------------------ probes */

/* 128 bits over what the allocator sees of a step: its memory events in order,
 * two words each, into two 64-bit lanes mixed differently (a multiply carries
 * a word's bits upward, the rotation brings the high ones back down), then
 * both lanes avalanched together. */
static uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static void step_hash(const est_step *st, uint64_t out[2]) {
    uint64_t a = 0x243f6a8885a308d3ULL, b = 0x13198a2e03707344ULL;
    for (size_t i = 0; i < st->count; i++) {
        const est_event *e = &st->events[i];
        uint64_t w0 = (uint64_t)e->kind, w1 = 0;
        if (e->kind == EST_EV_ALLOC || e->kind == EST_EV_FREE) {
            w0 |= (uint64_t)(uint32_t)e->u.mem.id << 8 | (uint64_t)(uint8_t)e->u.mem.stream << 40 |
                  (uint64_t)e->u.mem.pending << 48 | (uint64_t)(uint8_t)e->u.mem.category << 56;
            w1 = (uint64_t)e->u.mem.bytes ^ (uint64_t)(uint8_t)e->u.mem.use_stream << 56;
        } else if (e->kind == EST_EV_SYNC) {
            w1 = (uint64_t)(uint8_t)e->u.mem.stream;
        } else if (e->kind != EST_EV_EMPTY_CACHE) {
            continue; /* moments and units: not the allocator's */
        }
        a = (a ^ w0) * 0x9e3779b97f4a7c15ULL;
        a = (a ^ w1) * 0xbf58476d1ce4e5b9ULL;
        b = rotl64(b ^ w1, 23) * 0x94d049bb133111ebULL + w0;
    }
    out[0] = mix64(a ^ (uint64_t)st->tensor_count);
    out[1] = mix64(b + mix64(a));
}

/* Points m->e at probe i's step, built into the least recently used of the
 * built steps unless it is kept (run is the probe's run). The build stops
 * once its allocated peak passes stop_bytes (> 0). 0; 1 when it stopped (the
 * step is not kept); -1 when the build fails. */
static int make_current(est_plan_memo *m, int32_t i, const est_run *run, int64_t stop_bytes) {
    size_t old = 0;
    for (size_t j = 0; j < MEMO_BUILT; j++) {
        if (m->built[j].probe == i) {
            m->built[j].used = ++m->tick;
            m->e = &m->built[j].e;
            return 0;
        }
        if (m->built[j].used < m->built[old].used) old = j;
    }
    built_step *b = &m->built[old];
    b->probe = -1;
    b->used = ++m->tick;
    m->e = &b->e;
    m->builds++;
    char err[160] = ""; /* unread, but the emitters need one (seam_hf.c reads err[0]) */
    m->e->step.stop_above_bytes = stop_bytes;
    m->e->step.stopped = false; /* a build that fails before the step is cleared leaves it */
    const int rc = est_estimate_step(run, m->e, err, sizeof err);
    if (m->e->step.stopped) return 1;
    if (rc < 0) return -1;
    b->probe = i;
    return 0;
}

/* The replays of probe i's step (found by its hash, or new); NULL out of memory. */
static step_replays *replays_of(est_plan_memo *m, int32_t i, const est_run *run) {
    if (m->probes[i].step >= 0) return &m->steps[m->probes[i].step];
    if (make_current(m, i, run, 0) < 0) return NULL;
    uint64_t h[2];
    step_hash(&m->e->step, h);
    if (!index_room(m, &m->step_index, step_hash_of) ||
        !grow((void **)&m->steps, &m->capsteps, m->nsteps + 1, sizeof *m->steps))
        return NULL;
    size_t s = index_find(m, &m->step_index, h[0], step_match, h);
    if (m->step_index.slot[s] < 0) {
        step_replays *r = &m->steps[m->nsteps];
        memset(r, 0, sizeof *r);
        r->hash[0] = h[0];
        r->hash[1] = h[1];
        r->above_bytes = -1;
        m->step_index.slot[s] = (int32_t)m->nsteps++;
        m->step_index.n++;
    }
    m->probes[i].step = m->step_index.slot[s];
    return &m->steps[m->probes[i].step];
}

/* The probe of `run` (built when new); -1 out of memory. */
static int32_t probe_of(est_plan_memo *m, const est_run *run) {
    est_constants k;
    const bool k_ok = est_estimate_constants(run, &k, NULL, 0) == 0;
    const int32_t kv = k_ok ? kv_index(m, &k) : -2; /* -2: the constants failed to load */
    if (kv == -1) return -1;
    const probe_key key = memory_key_of(run, kv);
    if (!index_room(m, &m->probe_index, probe_hash_of) ||
        !grow((void **)&m->probes, &m->capprobes, m->nprobes + 1, sizeof *m->probes))
        return -1;
    size_t s = index_find(m, &m->probe_index, key_hash(&key), probe_match, &key);
    if (m->probe_index.slot[s] >= 0) return m->probe_index.slot[s];
    const int32_t i = (int32_t)m->nprobes;
    probe *p = &m->probes[i];
    memset(p, 0, sizeof *p);
    p->key = key;
    p->step = -1;
    /* A build whose allocated peak passes every card of its world (less the
     * context) can stop there: every card finds it cannot hold it, from that
     * peak alone. */
    const int64_t ctx = k_ok ? (int64_t)llround(k.value[EST_K_CUDA_CONTEXT_BYTES]) : 0;
    const int64_t largest = largest_card(m, run);
    const int64_t stop = largest > ctx ? largest - ctx : 0;
    const int built = k_ok ? make_current(m, i, run, stop) : -1;
    const est_step *st = &m->e->step;
    p->rc = built < 0 || (built == 0 && (st->oom || st->moments == 0)) ? -1 : 0; /* and the ledger's */
    if (p->rc == 0) {
        p->no_allocator = !est_fw_of(run)->caching_allocator;
        p->allocated_bytes = st->peak_allocated_bytes;
        p->context_bytes = (int64_t)llround(m->e->k.value[EST_K_CUDA_CONTEXT_BYTES]);
        p->cpu_bytes = st->cpu_bytes;
        p->cpu_load_bytes = st->cpu_load_bytes;
        /* its work too: the plan prices the steps it probes (est_time_model) */
        const probe_key tkey = world_key_of(run, kv);
        if (built == 0 && remember_time(m, &tkey, 0, st) < 0) return -1;
    }
    m->probe_index.slot[s] = i;
    m->probe_index.n++;
    m->nprobes++;
    /* its step is hashed (its replays found) only when a card first needs a
     * replay: about half the probes never do (no card they are asked for can
     * hold their allocated peak), and the cards that do come soon after
     * (plan.c works the cards of a world in turn), while the step is kept */
    return i;
}

/* ----------------------------------------------------------------- replays */

/* The reserved peak of probe i's step without a capacity; -1 out of memory. */
static int64_t roomy_of(est_plan_memo *m, int32_t i, const est_run *run) {
    step_replays *r = replays_of(m, i, run);
    if (!r) return -1;
    if (r->roomy_known) return r->roomy_bytes;
    est_alloc_replay out;
    if (make_current(m, i, run, 0) < 0 || est_estimate_replay(m->e, run, 0, false, &out, NULL, 0) < 0)
        return -1;
    m->replays++;
    r = &m->steps[m->probes[i].step];
    r->roomy_known = true;
    r->roomy_bytes = out.peak_reserved_bytes;
    return r->roomy_bytes;
}

/* The replay of probe i's step within run's card, remembered; NULL out of memory.
 * Without expandable segments and while the roomy peak is not known to be above
 * the card, a replay that never reaches the capacity is the roomy one: it is
 * kept as that too. */
static const pressed *within_card(est_plan_memo *m, int32_t i, const est_run *run) {
    step_replays *r = replays_of(m, i, run);
    if (!r) return NULL;
    const int64_t card = run->gpu.memory_bytes, room = card - m->probes[i].context_bytes;
    for (size_t j = 0; j < r->np; j++)
        if (r->p[j].capacity_bytes == room && r->p[j].device_bytes == card) return &r->p[j];
    est_alloc_replay out;
    if (make_current(m, i, run, 0) < 0 || est_estimate_replay(m->e, run, card, true, &out, NULL, 0) < 0)
        return NULL;
    m->replays++;
    r = &m->steps[m->probes[i].step];
    if (!grow((void **)&r->p, &r->cap, r->np + 1, sizeof *r->p)) return NULL;
    pressed *p = &r->p[r->np++];
    *p = (pressed){.capacity_bytes = room, .device_bytes = card, .reserved_bytes = out.peak_reserved_bytes,
                   .oom = out.oom};
    if (!out.capacity_reached && !run->expandable_segments && room > 0) {
        r->roomy_known = true;
        r->roomy_bytes = out.peak_reserved_bytes;
    } else if (out.capacity_reached && room > r->above_bytes) {
        r->above_bytes = room;
    }
    return p;
}

/* est_estimate_run's allocator_of for probe i on run's card (its allocated
 * peak fits the card, which has a capacity): the verdict, and the device
 * bytes used (-1: not known yet, it needs the roomy replay). 0, or -1 out of
 * memory. */
static int card_verdict(est_plan_memo *m, int32_t i, const est_run *run, bool *fits, int64_t *used) {
    const probe *p = &m->probes[i];
    const int64_t ctx = p->context_bytes, room = run->gpu.memory_bytes - ctx;
    const step_replays *r = replays_of(m, i, run);
    if (!r) return -1;
    /* Without expandable segments a replay within the card that never reaches
     * its capacity is the roomy replay: try the card first. */
    const bool card_first = !run->expandable_segments && room > 0;
    if (!r->roomy_known && !card_first && roomy_of(m, i, run) < 0) return -1;
    r = &m->steps[m->probes[i].step];
    if (r->roomy_known && r->roomy_bytes <= room) { /* no pressure */
        *fits = true;
        *used = r->roomy_bytes + ctx;
        return 0;
    }
    /* Pressure (the roomy peak exceeds the card), or not known yet: within the card. */
    const pressed *q = within_card(m, i, run);
    if (!q) return -1;
    r = &m->steps[m->probes[i].step];
    if (r->roomy_known && r->roomy_bytes <= room) { /* that replay was the roomy one */
        *fits = true;
        *used = r->roomy_bytes + ctx;
        return 0;
    }
    *fits = !q->oom;
    *used = q->oom ? (r->roomy_known ? r->roomy_bytes + ctx : -1) : q->reserved_bytes + ctx;
    return 0;
}

/* ------------------------------------------------------------------ the API */

int est_plan_memo_probe(est_plan_memo *m, const est_run *run, est_probe_answer *out) {
    m->probes_asked++;
    const int32_t i = probe_of(m, run);
    if (i < 0) return -1;
    const probe p = m->probes[i];
    if (p.rc < 0) { /* est_estimate_run failed: its estimate keeps the last one's fields */
        *out = m->last;
        out->rc = -1;
        return 0;
    }
    const int64_t card = run->gpu.memory_bytes, need = p.allocated_bytes + p.context_bytes;
    bool fits = false;
    int64_t used = need;
    if (p.no_allocator || (card > 0 && need > card)) { /* ftrain's arena, or hopeless */
        fits = card > 0 && need <= card;
    } else if (card <= 0) { /* no capacity to fit: the roomy reserved peak */
        used = -1;
    } else if (card_verdict(m, i, run, &fits, &used) < 0) {
        return -1;
    }
    m->last = (est_probe_answer){.rc = 0, .fits = fits, .device_used_bytes = used,
                                 .cpu_bytes = p.cpu_bytes, .cpu_load_bytes = p.cpu_load_bytes,
                                 .capacity_bytes = card};
    m->last_probe = used < 0 ? i : -1;
    *out = m->last;
    return 0;
}

int est_plan_memo_host(est_plan_memo *m, const est_run *run, est_probe_host *out) {
    m->probes_asked++;
    const int32_t i = probe_of(m, run);
    if (i < 0) return -2;
    const probe *p = &m->probes[i];
    if (p->rc < 0) return -1;
    *out = (est_probe_host){.cpu_bytes = p->cpu_bytes, .cpu_load_bytes = p->cpu_load_bytes,
                            .least_device_bytes = p->allocated_bytes + p->context_bytes};
    return 0;
}

int64_t est_plan_memo_device_used(est_plan_memo *m, const est_run *run) {
    if (m->last_probe < 0) return m->last.device_used_bytes;
    /* the roomy reserved peak of the last successful probe (its own batch) */
    const probe *p = &m->probes[m->last_probe];
    est_run own = *run;
    own.micro_batch = p->key.micro_batch;
    own.grad_accum = p->key.grad_accum;
    const int64_t roomy = roomy_of(m, m->last_probe, &own);
    if (roomy < 0) return -1;
    m->last.device_used_bytes = roomy + m->probes[m->last_probe].context_bytes;
    m->last_probe = -1;
    return m->last.device_used_bytes;
}
