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
#include "parallel.h"

TR_INLINE void eager_fwd(void *out, void *probs, const void *qkv, int64_t B, int64_t T, int64_t nh,
                         int64_t nkv, int64_t hd, tr_dtype dt) {
    const int64_t qd = nh * hd, kvd = nkv * hd, row = qd + 2 * kvd, group = nh / nkv;
    const float scale = 1.0f / sqrtf((float)hd);
    TR_PAR_FOR3(B * nh * T * T * hd)
    for (int64_t b = 0; b < B; b++)
        for (int64_t hq = 0; hq < nh; hq++)
            for (int64_t t = 0; t < T; t++) {
                int64_t g = hq / group;
                const void *q = tr_cat(qkv, (b * T + t) * row + hq * hd, dt);
                void *p = tr_at(probs, ((b * nh + hq) * T + t) * T, dt);
                /* Three passes over the keys (max, sum, normalize) keep the row
                 * exact in fp32 without a scratch row. */
                float mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j <= t; j++) {
                    float s = scale * tr_dotn(q, tr_cat(qkv, (b * T + j) * row + qd + g * hd, dt), hd, dt);
                    if (s > mx) mx = s;
                }
                for (int64_t j = 0; j <= t; j++) {
                    float s = scale * tr_dotn(q, tr_cat(qkv, (b * T + j) * row + qd + g * hd, dt), hd, dt);
                    sum += expf(s - mx);
                }
                for (int64_t j = 0; j < T; j++) {
                    float pj = 0;
                    if (j <= t) {
                        float s = scale * tr_dotn(q, tr_cat(qkv, (b * T + j) * row + qd + g * hd, dt), hd, dt);
                        pj = expf(s - mx) / sum;
                    }
                    tr_st(p, j, pj, dt);
                }
                if (!out) continue;
                float acc[TR_MAX_HEAD_DIM] = {0};
                for (int64_t j = 0; j <= t; j++) {
                    float pj = tr_ld(p, j, dt);
                    const void *v = tr_cat(qkv, (b * T + j) * row + qd + kvd + g * hd, dt);
                    for (int64_t d = 0; d < hd; d++) acc[d] += pj * tr_ld(v, d, dt);
                }
                for (int64_t d = 0; d < hd; d++) tr_st(out, (b * T + t) * qd + hq * hd + d, acc[d], dt);
            }
}

TR_INLINE void eager_bwd(void *dqkv, void *dprobs, const void *dout, const void *qkv, const void *probs,
                         int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd, tr_dtype dt) {
    const int64_t qd = nh * hd, kvd = nkv * hd, row = qd + 2 * kvd, group = nh / nkv;
    const float scale = 1.0f / sqrtf((float)hd);
    /* dP, then dS in place. */
    TR_PAR_FOR3(B * nh * T * T * hd)
    for (int64_t b = 0; b < B; b++)
        for (int64_t hq = 0; hq < nh; hq++)
            for (int64_t t = 0; t < T; t++) {
                int64_t g = hq / group;
                const void *dO = tr_cat(dout, (b * T + t) * qd + hq * hd, dt);
                const void *p = tr_cat(probs, ((b * nh + hq) * T + t) * T, dt);
                void *ds = tr_at(dprobs, ((b * nh + hq) * T + t) * T, dt);
                float rowsum = 0;
                for (int64_t j = 0; j <= t; j++) {
                    tr_st(ds, j, tr_dotn(dO, tr_cat(qkv, (b * T + j) * row + qd + kvd + g * hd, dt), hd, dt), dt);
                    rowsum += tr_ld(p, j, dt) * tr_ld(ds, j, dt);
                }
                for (int64_t j = 0; j < T; j++)
                    tr_st(ds, j, j <= t ? tr_ld(p, j, dt) * (tr_ld(ds, j, dt) - rowsum) : 0.0f, dt);
            }
    /* dq. */
    TR_PAR_FOR3(B * nh * T * T * hd)
    for (int64_t b = 0; b < B; b++)
        for (int64_t hq = 0; hq < nh; hq++)
            for (int64_t t = 0; t < T; t++) {
                int64_t g = hq / group;
                const void *ds = tr_cat(dprobs, ((b * nh + hq) * T + t) * T, dt);
                float acc[TR_MAX_HEAD_DIM] = {0};
                for (int64_t j = 0; j <= t; j++) {
                    float w = tr_ld(ds, j, dt);
                    const void *k = tr_cat(qkv, (b * T + j) * row + qd + g * hd, dt);
                    for (int64_t d = 0; d < hd; d++) acc[d] += w * tr_ld(k, d, dt);
                }
                for (int64_t d = 0; d < hd; d++) tr_st(dqkv, (b * T + t) * row + hq * hd + d, scale * acc[d], dt);
            }
    /* dk, dv: one thread per (b, kv head, key position). */
    TR_PAR_FOR3(B * nh * T * T * hd)
    for (int64_t b = 0; b < B; b++)
        for (int64_t g = 0; g < nkv; g++)
            for (int64_t j = 0; j < T; j++) {
                float ak[TR_MAX_HEAD_DIM] = {0}, av[TR_MAX_HEAD_DIM] = {0};
                for (int64_t hq = g * group; hq < (g + 1) * group; hq++)
                    for (int64_t t = j; t < T; t++) {
                        int64_t pi = ((b * nh + hq) * T + t) * T + j;
                        float ds = tr_ld(dprobs, pi, dt), p = tr_ld(probs, pi, dt);
                        const void *q = tr_cat(qkv, (b * T + t) * row + hq * hd, dt);
                        const void *dO = tr_cat(dout, (b * T + t) * qd + hq * hd, dt);
                        for (int64_t d = 0; d < hd; d++) {
                            ak[d] += ds * tr_ld(q, d, dt);
                            av[d] += p * tr_ld(dO, d, dt);
                        }
                    }
                int64_t base = (b * T + j) * row + qd + g * hd;
                for (int64_t d = 0; d < hd; d++) {
                    tr_st(dqkv, base + d, scale * ak[d], dt);
                    tr_st(dqkv, base + kvd + d, av[d], dt);
                }
            }
}

void tr_cpu_attn_eager_fwd(void *out, void *probs, const void *qkv, int64_t B, int64_t T,
                           int64_t nh, int64_t nkv, int64_t hd, tr_dtype dt) {
    if (dt == TR_BF16) eager_fwd(out, probs, qkv, B, T, nh, nkv, hd, TR_BF16);
    else eager_fwd(out, probs, qkv, B, T, nh, nkv, hd, TR_F32);
}

void tr_cpu_attn_eager_bwd(void *dqkv, void *dprobs, const void *dout, const void *qkv,
                           const void *probs, int64_t B, int64_t T, int64_t nh, int64_t nkv,
                           int64_t hd, tr_dtype dt) {
    if (dt == TR_BF16) eager_bwd(dqkv, dprobs, dout, qkv, probs, B, T, nh, nkv, hd, TR_BF16);
    else eager_bwd(dqkv, dprobs, dout, qkv, probs, B, T, nh, nkv, hd, TR_F32);
}
