/* Softmax cross-entropy over the vocabulary, one row per token:
 *   loss = log(sum_v exp(z_v - m)) + m - z_target,  m = max_v z_v
 *   dz_v = scale * (softmax(z)_v - [v == target])
 * The backward recomputes m and the sum from the logits, then overwrites the
 * logits with their gradient (as llm.c's fused classifier), so the logits
 * buffer is the only vocabulary-sized buffer of the loss. */
#include <math.h>

#include "ops.h"
#include "parallel.h"

static void row_stats(const void *z, int64_t V, tr_dtype dt, float *m, float *sum) {
    float mx = -INFINITY;
    for (int64_t v = 0; v < V; v++) {
        float x = tr_ld(z, v, dt);
        if (x > mx) mx = x;
    }
    float s = 0;
    for (int64_t v = 0; v < V; v++) s += expf(tr_ld(z, v, dt) - mx);
    *m = mx;
    *sum = s;
}

void tr_cpu_ce_fwd(float *losses, const void *logits, const int32_t *targets, int64_t n, int64_t V,
                   tr_dtype dt) {
    TR_PAR_FOR(n * V)
    for (int64_t i = 0; i < n; i++) {
        const void *z = tr_cat(logits, i * V, dt);
        float m, s;
        row_stats(z, V, dt, &m, &s);
        losses[i] = logf(s) + m - tr_ld(z, targets[i], dt);
    }
}

void tr_cpu_ce_bwd(void *logits, const int32_t *targets, int64_t n, int64_t V, float scale,
                   tr_dtype dt) {
    TR_PAR_FOR(n * V)
    for (int64_t i = 0; i < n; i++) {
        void *z = tr_at(logits, i * V, dt);
        float m, s;
        row_stats(z, V, dt, &m, &s);
        for (int64_t v = 0; v < V; v++) {
            float p = expf(tr_ld(z, v, dt) - m) / s;
            tr_st(z, v, scale * (p - (v == targets[i] ? 1.0f : 0.0f)), dt);
        }
    }
}
