#include "timeline.h"

#include <stdlib.h>
#include <string.h>

#include "json_util.h"

const char *const est_category_names[EST_CAT_COUNT] = {
    "params", "master", "grads", "optimizer", "activations",
    "logits", "comm",   "workspace", "context", "allocator",
};

const char *const est_phase_names[EST_PHASE_COUNT] = {
    "init", "forward", "loss", "backward", "reduce", "optimizer",
};

void est_timeline_init(est_timeline *tl) { memset(tl, 0, sizeof *tl); }

void est_timeline_free(est_timeline *tl) {
    free(tl->phases);
    memset(tl, 0, sizeof *tl);
}

void est_timeline_clear(est_timeline *tl) {
    tl->count = 0;
    tl->cpu_bytes = 0;
    tl->cpu_load_bytes = 0;
    tl->rank_spread_bytes = 0;
}

est_phase *est_timeline_push(est_timeline *tl, est_phase_kind kind, int32_t layer,
                             const char *label, const int64_t live[EST_CAT_COUNT]) {
    if (tl->count == tl->capacity) {
        size_t cap = tl->capacity ? tl->capacity * 2 : 64;
        est_phase *np = realloc(tl->phases, cap * sizeof *np);
        if (!np) return NULL;
        tl->phases = np;
        tl->capacity = cap;
    }
    est_phase *p = &tl->phases[tl->count++];
    memset(p, 0, sizeof *p);
    p->kind = kind;
    p->layer = layer;
    ft_strlcpy(p->label, label, sizeof p->label);
    memcpy(p->bytes, live, sizeof p->bytes);
    memcpy(p->own_max, live, sizeof p->own_max);
    return p;
}

int64_t est_phase_allocated(const est_phase *p) {
    int64_t sum = 0;
    for (int c = 0; c < EST_CAT_ALLOCATED_COUNT; c++) sum += p->bytes[c];
    return sum;
}

size_t est_timeline_peak(const est_timeline *tl) {
    size_t best = 0;
    for (size_t i = 1; i < tl->count; i++) {
        const int64_t a = est_phase_allocated(&tl->phases[i]), b = est_phase_allocated(&tl->phases[best]);
        /* a warm-up step's row ties with the step it foreshadows: name the step's moment */
        if (a > b || (a == b && tl->phases[best].kind == EST_PHASE_INIT)) best = i;
    }
    return best;
}

void est_timeline_category_peaks(const est_timeline *tl, int64_t out[EST_CAT_COUNT]) {
    memset(out, 0, sizeof(int64_t) * EST_CAT_COUNT);
    for (size_t i = 0; i < tl->count; i++)
        for (int c = 0; c < EST_CAT_COUNT; c++)
            if (tl->phases[i].own_max[c] > out[c]) out[c] = tl->phases[i].own_max[c];
}

int64_t est_timeline_after_step(const est_timeline *tl) {
    for (size_t i = tl->count; i-- > 0;)
        if (!strcmp(tl->phases[i].label, EST_AFTER_STEP_LABEL)) return est_phase_allocated(&tl->phases[i]);
    return -1;
}
