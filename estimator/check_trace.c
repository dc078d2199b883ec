#include "check_trace.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

int est_trace_phase_index(const char *name) {
    for (int p = 0; p < EST_TRACE_PHASES; p++)
        if (!strcmp(name, est_trace_phase_names[p])) return p;
    return -1;
}

int est_trace_phase_of(const est_phase *p) {
    switch (p->kind) {
    case EST_PHASE_INIT:
        /* the warm-up step's row holds a whole step: it is no phase of its own */
        return strstr(p->label, "warm-up") ? -1 : 0;
    case EST_PHASE_FORWARD: return 1;
    case EST_PHASE_LOSS: return strstr(p->label, "backward") ? 2 : 1;
    case EST_PHASE_BACKWARD:
    case EST_PHASE_REDUCE: return 2;
    case EST_PHASE_OPTIMIZER: return 3;
    default: return -1;
    }
}

/* cuBLAS workspaces live at moment p: the forward's from the row the seam
 * books it in, the backward thread's from the warm-up step's row (the step's
 * cublas_rows); a timeline built by hand, with neither row known, holds one
 * throughout. */
static int64_t cublas_live(const est_phase *p, const est_estimate *e) {
    const int64_t one = (int64_t)e->k.value[EST_K_CUBLAS_WORKSPACE_BYTES];
    const int32_t *rows = e->step.cublas_rows;
    if (rows[0] == 0 && rows[1] == 0) return one;
    const ptrdiff_t row = p - e->tl.phases;
    int64_t n = 0;
    for (int i = 0; i < 2; i++) n += rows[i] > 0 && row >= rows[i] - 1;
    return n * one;
}

int64_t est_trace_visible_bytes(const est_phase *p, const est_estimate *e, int64_t *unseen) {
    const int64_t cublas = cublas_live(p, e);
    const int64_t ws = p->bytes[EST_CAT_WORKSPACE];
    const int64_t cut = ws < cublas ? ws : cublas;
    /* ZeRO-3's stream-ordered frees still pending (the GPU's lag behind the
     * host, a resident comm term, e->rank_spread_bytes): one CPU process has
     * no streams, and a released storage goes at once */
    const int64_t comm = p->bytes[EST_CAT_COMM];
    const int64_t lag = e->rank_spread_bytes < comm ? e->rank_spread_bytes : comm;
    if (unseen) *unseen = cut + (lag > 0 ? lag : 0);
    return est_phase_allocated(p) - cut - (lag > 0 ? lag : 0);
}

static double rel_err(int64_t est, int64_t traced) {
    return traced > 0 ? ((double)est - (double)traced) / (double)traced : NAN;
}

/* The layer moments against the record's samples of the same moments: an
 * estimated "forward layer i" is what stays live after block i's forward (the
 * trace's sample at that boundary); "backward layer i" is block i's backward
 * at its fullest (the trace's peak while that backward runs). */
static void compare_boundaries(const est_rank_trace *t, const est_estimate *e, est_trace_compare *out) {
    out->boundaries = 0;
    out->boundary_worst_rel = 0;
    for (size_t i = 0; i < e->tl.count; i++) {
        const est_phase *p = &e->tl.phases[i];
        if (p->layer < 0 || p->layer >= t->layers) continue;
        const int64_t *side = p->kind == EST_PHASE_FORWARD ? t->forward_layer
                              : p->kind == EST_PHASE_BACKWARD ? t->backward_layer_peak : NULL;
        if (!side || side[p->layer] < 0) continue;
        const double r = rel_err(est_trace_visible_bytes(p, e, NULL), side[p->layer]);
        if (isnan(r)) continue;
        out->boundaries++;
        if (fabs(r) > fabs(out->boundary_worst_rel)) out->boundary_worst_rel = r;
    }
}

void est_trace_compare_rank(const est_rank_measure *m, const est_estimate *e, est_trace_compare *out) {
    int64_t phase_max[EST_TRACE_PHASES];
    for (int p = 0; p < EST_TRACE_PHASES; p++) phase_max[p] = -1;
    out->estimated_bytes = -1;
    out->unseen_bytes = 0;
    out->estimated_phase = -1;
    for (size_t i = 0; i < e->tl.count; i++) {
        const est_phase *p = &e->tl.phases[i];
        int64_t unseen = 0;
        const int64_t v = est_trace_visible_bytes(p, e, &unseen);
        const int ph = est_trace_phase_of(p);
        if (ph >= 0 && v > phase_max[ph]) phase_max[ph] = v;
        if (ph >= 0 && (v > out->estimated_bytes || (v == out->estimated_bytes && out->estimated_phase == 0))) {
            out->estimated_bytes = v;
            out->unseen_bytes = unseen;
            out->estimated_phase = ph;
        }
    }
    out->traced_bytes = est_record_peak(m);
    out->rel = rel_err(out->estimated_bytes, out->traced_bytes);
    out->traced_phase = est_trace_phase_index(m->peak_phase);
    for (int p = 0; p < EST_TRACE_PHASES; p++) {
        const int64_t traced = m->trace.phase_peak[p];
        out->phase_rel[p] = traced > 0 && phase_max[p] >= 0 ? rel_err(phase_max[p], traced) : NAN;
    }
    compare_boundaries(&m->trace, e, out);
}
