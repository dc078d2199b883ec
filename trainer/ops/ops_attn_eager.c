/* Eager (naive) causal attention: materializes the probabilities.
 *
 * For each batch b, query head hq (reading kv head g = hq / (nh/nkv)) and
 * query position t, with scale = 1/sqrt(hd):
 *   s_j = scale * q_t . k_j            for j <= t
 *   P_tj = exp(s_j - max) / sum        stored (B,nh,T,T), 0 above the diagonal
 *   o_t = sum_j P_tj v_j
 * Backward, with dP and dS kept in the dP workspace (B,nh,T,T):
 *   dP_tj = do_t . v_j
 *   dS_tj = P_tj (dP_tj - sum_k P_tk dP_tk)
 *   dq_t  = scale * sum_j dS_tj k_j
 *   dk_j  = scale * sum_{hq in group g} sum_{t>=j} dS_tj q_t
 *   dv_j  =         sum_{hq in group g} sum_{t>=j} P_tj do_t
 * dk and dv of one kv head are summed by one thread over its whole group. */
#include <math.h>

#include "config.h"
#include "ops.h"

typedef struct eager_args {
    void *out, *probs, *dqkv, *dprobs;
    const void *qkv, *dout, *p_in;
    int64_t B, T, nh, nkv, hd;
} eager_args;

#define SHAPES(a)                                                                                  \
    const int64_t T = (a)->T, nh = (a)->nh, nkv = (a)->nkv, hd = (a)->hd;                         \
    const int64_t qd = nh * hd, kvd = nkv * hd, row = qd + 2 * kvd, group = nh / nkv;             \
    const float scale = 1.0f / sqrtf((float)hd);                                                   \
    (void)nkv; (void)kvd; (void)group; (void)scale

/* Query rows [r0, r1) of the flattened (b, hq, t). */
TR_INLINE void fwd_rows(void *p, int64_t r0, int64_t r1, tr_dtype dt) {
    const eager_args *a = p;
    SHAPES(a);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t b = r / (nh * T), hq = r / T % nh, t = r % T, g = hq / group;
        const void *q = tr_cat(a->qkv, (b * T + t) * row + hq * hd, dt);
        const void *kbase = tr_cat(a->qkv, b * T * row + qd + g * hd, dt);
        void *pr = tr_at(a->probs, ((b * nh + hq) * T + t) * T, dt);
        /* Three passes over the keys (max, sum, normalize) keep the row
         * exact in fp32 without a scratch row. */
        float mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j <= t; j++) {
            float s = scale * tr_dotn(q, tr_cat(kbase, j * row, dt), hd, dt);
            if (s > mx) mx = s;
        }
        for (int64_t j = 0; j <= t; j++)
            sum += tr_expf(scale * tr_dotn(q, tr_cat(kbase, j * row, dt), hd, dt) - mx);
        for (int64_t j = 0; j < T; j++) {
            float pj = 0;
            if (j <= t) pj = tr_expf(scale * tr_dotn(q, tr_cat(kbase, j * row, dt), hd, dt) - mx) / sum;
            tr_st(pr, j, pj, dt);
        }
        if (!a->out) continue;
        float acc[TR_MAX_HEAD_DIM] = {0};
        for (int64_t j = 0; j <= t; j++) {
            float pj = tr_ld(pr, j, dt);
            const void *v = tr_cat(a->qkv, (b * T + j) * row + qd + kvd + g * hd, dt);
            TR_SIMD
            for (int64_t d = 0; d < hd; d++) acc[d] += pj * tr_ld(v, d, dt);
        }
        void *o = tr_at(a->out, (b * T + t) * qd + hq * hd, dt);
        TR_SIMD
        for (int64_t d = 0; d < hd; d++) tr_st(o, d, acc[d], dt);
    }
}
TR_RANGE_BY_DTYPE(fwd_rows)

/* dP, then dS in place, for rows [r0, r1). */
TR_INLINE void bwd_ds_rows(void *p, int64_t r0, int64_t r1, tr_dtype dt) {
    const eager_args *a = p;
    SHAPES(a);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t b = r / (nh * T), hq = r / T % nh, t = r % T, g = hq / group;
        const void *dO = tr_cat(a->dout, (b * T + t) * qd + hq * hd, dt);
        const void *pr = tr_cat(a->p_in, ((b * nh + hq) * T + t) * T, dt);
        void *ds = tr_at(a->dprobs, ((b * nh + hq) * T + t) * T, dt);
        float rowsum = 0;
        for (int64_t j = 0; j <= t; j++) {
            tr_st(ds, j, tr_dotn(dO, tr_cat(a->qkv, (b * T + j) * row + qd + kvd + g * hd, dt), hd, dt), dt);
            rowsum += tr_ld(pr, j, dt) * tr_ld(ds, j, dt);
        }
        TR_SIMD
        for (int64_t j = 0; j < T; j++)
            tr_st(ds, j, j <= t ? tr_ld(pr, j, dt) * (tr_ld(ds, j, dt) - rowsum) : 0.0f, dt);
    }
}
TR_RANGE_BY_DTYPE(bwd_ds_rows)

TR_INLINE void bwd_q_rows(void *p, int64_t r0, int64_t r1, tr_dtype dt) {
    const eager_args *a = p;
    SHAPES(a);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t b = r / (nh * T), hq = r / T % nh, t = r % T, g = hq / group;
        const void *ds = tr_cat(a->dprobs, ((b * nh + hq) * T + t) * T, dt);
        float acc[TR_MAX_HEAD_DIM] = {0};
        for (int64_t j = 0; j <= t; j++) {
            float w = tr_ld(ds, j, dt);
            const void *k = tr_cat(a->qkv, (b * T + j) * row + qd + g * hd, dt);
            TR_SIMD
            for (int64_t d = 0; d < hd; d++) acc[d] += w * tr_ld(k, d, dt);
        }
        void *dq = tr_at(a->dqkv, (b * T + t) * row + hq * hd, dt);
        TR_SIMD
        for (int64_t d = 0; d < hd; d++) tr_st(dq, d, scale * acc[d], dt);
    }
}
TR_RANGE_BY_DTYPE(bwd_q_rows)

/* dk, dv of key rows [r0, r1) of the flattened (b, kv head, key position). */
TR_INLINE void bwd_kv_rows(void *p, int64_t r0, int64_t r1, tr_dtype dt) {
    const eager_args *a = p;
    SHAPES(a);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t b = r / (nkv * T), g = r / T % nkv, j = r % T;
        float ak[TR_MAX_HEAD_DIM] = {0}, av[TR_MAX_HEAD_DIM] = {0};
        for (int64_t hq = g * group; hq < (g + 1) * group; hq++)
            for (int64_t t = j; t < T; t++) {
                int64_t pi = ((b * nh + hq) * T + t) * T + j;
                float ds = tr_ld(a->dprobs, pi, dt), pj = tr_ld(a->p_in, pi, dt);
                const void *q = tr_cat(a->qkv, (b * T + t) * row + hq * hd, dt);
                const void *dO = tr_cat(a->dout, (b * T + t) * qd + hq * hd, dt);
                TR_SIMD
                for (int64_t d = 0; d < hd; d++) {
                    ak[d] += ds * tr_ld(q, d, dt);
                    av[d] += pj * tr_ld(dO, d, dt);
                }
            }
        void *dk = tr_at(a->dqkv, (b * T + j) * row + qd + g * hd, dt);
        void *dv = tr_at(dk, kvd, dt);
        TR_SIMD
        for (int64_t d = 0; d < hd; d++) {
            tr_st(dk, d, scale * ak[d], dt);
            tr_st(dv, d, av[d], dt);
        }
    }
}
TR_RANGE_BY_DTYPE(bwd_kv_rows)

void tr_cpu_attn_eager_fwd(void *out, void *probs, const void *qkv, int64_t B, int64_t T,
                           int64_t nh, int64_t nkv, int64_t hd, tr_dtype dt) {
    eager_args a = {.out = out, .probs = probs, .qkv = qkv, .B = B, .T = T, .nh = nh, .nkv = nkv, .hd = hd};
    tr_par_for(B * nh * T, B * nh * T * T * hd, TR_BY_DTYPE(fwd_rows, dt), &a);
}

void tr_cpu_attn_eager_bwd(void *dqkv, void *dprobs, const void *dout, const void *qkv,
                           const void *probs, int64_t B, int64_t T, int64_t nh, int64_t nkv,
                           int64_t hd, tr_dtype dt) {
    eager_args a = {.dqkv = dqkv, .dprobs = dprobs, .qkv = qkv, .dout = dout, .p_in = probs,
                    .B = B, .T = T, .nh = nh, .nkv = nkv, .hd = hd};
    tr_par_for(B * nh * T, B * nh * T * T * hd, TR_BY_DTYPE(bwd_ds_rows, dt), &a);
    tr_par_for(B * nh * T, B * nh * T * T * hd, TR_BY_DTYPE(bwd_q_rows, dt), &a);
    tr_par_for(B * nkv * T, B * nh * T * T * hd, TR_BY_DTYPE(bwd_kv_rows, dt), &a);
}
