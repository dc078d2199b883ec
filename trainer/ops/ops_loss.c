/* Softmax cross-entropy over the vocabulary, one row per token:
 *   loss = log(sum_v exp(z_v - m)) + m - z_target,  m = max_v z_v
 *   dz_v = scale * (softmax(z)_v - [v == target])
 * The backward recomputes m and the sum from the logits, then overwrites the
 * logits with their gradient (as llm.c's fused classifier), so the logits
 * buffer is the only vocabulary-sized buffer of the loss. */
#include <math.h>

#include "ops.h"

/* Row max and sum of exp(z - max), each in eight interleaved lanes combined
 * pairwise (the max is exact in any order; the sum's order is fixed). */
TR_INLINE void row_stats(const void *z, int64_t V, tr_dtype dt, float *m, float *sum) {
    float mx[8], s[8] = {0};
    for (int l = 0; l < 8; l++) mx[l] = -INFINITY;
    int64_t v = 0;
    for (; v + 8 <= V; v += 8) {
        TR_SIMD
        for (int l = 0; l < 8; l++) {
            float x = tr_ld(z, v + l, dt);
            mx[l] = x > mx[l] ? x : mx[l];
        }
    }
    float M = -INFINITY;
    for (int l = 0; l < 8; l++) M = mx[l] > M ? mx[l] : M;
    for (int64_t k = v; k < V; k++) {
        float x = tr_ld(z, k, dt);
        M = x > M ? x : M;
    }
    for (v = 0; v + 8 <= V; v += 8) {
        TR_SIMD
        for (int l = 0; l < 8; l++) s[l] += tr_expf(tr_ld(z, v + l, dt) - M);
    }
    float tail = 0;
    for (int64_t k = v; k < V; k++) tail += tr_expf(tr_ld(z, k, dt) - M);
    *m = M;
    *sum = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7])) + tail;
}

typedef struct ce_args {
    float *losses;
    void *logits;
    const int32_t *targets;
    int64_t V;
    float scale;
} ce_args;

TR_INLINE void fwd_rows(void *p, int64_t i0, int64_t i1, tr_dtype dt) {
    const ce_args *a = p;
    for (int64_t i = i0; i < i1; i++) {
        const void *z = tr_cat(a->logits, i * a->V, dt);
        float m, s;
        row_stats(z, a->V, dt, &m, &s);
        a->losses[i] = logf(s) + m - tr_ld(z, a->targets[i], dt);
    }
}
TR_RANGE_BY_DTYPE(fwd_rows)

void tr_cpu_ce_fwd(float *losses, const void *logits, const int32_t *targets, int64_t n, int64_t V,
                   tr_dtype dt) {
    ce_args a = {.losses = losses, .logits = (void *)logits, .targets = targets, .V = V};
    tr_par_for(n, n * V, TR_BY_DTYPE(fwd_rows, dt), &a);
}

TR_INLINE void bwd_rows(void *p, int64_t i0, int64_t i1, tr_dtype dt) {
    const ce_args *a = p;
    const int64_t V = a->V;
    for (int64_t i = i0; i < i1; i++) {
        void *z = tr_at(a->logits, i * V, dt);
        float m, s;
        row_stats(z, V, dt, &m, &s);
        /* scale * (p_v - [v == target]), p_v = e^(z_v - m) / s; the target's
         * logit is read before the row is overwritten. */
        const int64_t t = a->targets[i];
        const float zt = tr_ld(z, t, dt);
        TR_SIMD
        for (int64_t v = 0; v < V; v++) tr_st(z, v, a->scale * (tr_expf(tr_ld(z, v, dt) - m) / s), dt);
        tr_st(z, t, a->scale * (tr_expf(zt - m) / s - 1.0f), dt);
    }
}
TR_RANGE_BY_DTYPE(bwd_rows)

void tr_cpu_ce_bwd(void *logits, const int32_t *targets, int64_t n, int64_t V, float scale,
                   tr_dtype dt) {
    ce_args a = {.logits = logits, .targets = targets, .V = V, .scale = scale};
    tr_par_for(n, n * V, TR_BY_DTYPE(bwd_rows, dt), &a);
}
