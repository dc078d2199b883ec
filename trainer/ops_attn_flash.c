/* Tiled causal attention with an online softmax (Dao et al. 2022, "FlashAttention";
 * Milakov & Gimelshein 2018 for the online normalizer). The memory behaviour is
 * flash attention's: nothing of size T x T is stored, only each row's
 * logsumexp lse (B,nh,T) in fp32.
 *
 * Forward, per query row, over key tiles of TILE keys, keeping the running max
 * m, normalizer l and unnormalized output acc (one head row, on the stack):
 *   m' = max(m, max_tile s_j);  c = exp(m - m')
 *   l  = l c + sum_tile exp(s_j - m');   acc = acc c + sum_tile exp(s_j - m') v_j
 *   o  = acc / l;   lse = m + log l
 * Backward recomputes P_tj = exp(s_tj - lse_t) and uses D_t = do_t . o_t
 * (= sum_j P_tj dP_tj), so dS_tj = P_tj (do_t . v_j - D_t):
 *   dq_t = scale sum_j dS_tj k_j      (one thread per query row)
 *   dk_j = scale sum_{hq,t} dS_tj q_t;  dv_j = sum_{hq,t} P_tj do_t  (one thread per key row) */
#include <math.h>

#include "config.h"
#include "ops.h"
#include "parallel.h"

#define TILE 32
TR_INLINE void flash_fwd(void *out, float *lse, const void *qkv, int64_t B, int64_t T, int64_t nh,
                         int64_t nkv, int64_t hd, tr_dtype dt) {
    const int64_t qd = nh * hd, kvd = nkv * hd, row = qd + 2 * kvd, group = nh / nkv;
    const float scale = 1.0f / sqrtf((float)hd);
    TR_PAR_FOR3(B * nh * T * T * hd)
    for (int64_t b = 0; b < B; b++)
        for (int64_t hq = 0; hq < nh; hq++)
            for (int64_t t = 0; t < T; t++) {
                int64_t g = hq / group;
                const void *q = tr_cat(qkv, (b * T + t) * row + hq * hd, dt);
                float m = -INFINITY, l = 0, acc[TR_MAX_HEAD_DIM] = {0}, s[TILE];
                for (int64_t j0 = 0; j0 <= t; j0 += TILE) {
                    int64_t jn = t + 1 - j0 < TILE ? t + 1 - j0 : TILE;
                    float mt = -INFINITY;
                    for (int64_t j = 0; j < jn; j++) {
                        s[j] = scale * tr_dotn(q, tr_cat(qkv, (b * T + j0 + j) * row + qd + g * hd, dt), hd, dt);
                        if (s[j] > mt) mt = s[j];
                    }
                    float mn = m > mt ? m : mt, c = expf(m - mn);
                    l *= c;
                    if (out)
                        for (int64_t d = 0; d < hd; d++) acc[d] *= c;
                    for (int64_t j = 0; j < jn; j++) {
                        float e = expf(s[j] - mn);
                        l += e;
                        if (!out) continue;
                        const void *v = tr_cat(qkv, (b * T + j0 + j) * row + qd + kvd + g * hd, dt);
                        for (int64_t d = 0; d < hd; d++) acc[d] += e * tr_ld(v, d, dt);
                    }
                    m = mn;
                }
                lse[(b * nh + hq) * T + t] = m + logf(l);
                if (out)
                    for (int64_t d = 0; d < hd; d++) tr_st(out, (b * T + t) * qd + hq * hd + d, acc[d] / l, dt);
            }
}

TR_INLINE void flash_bwd(void *dqkv, const void *dout, const void *qkv, const void *out, const float *lse,
                         int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd, tr_dtype dt) {
    const int64_t qd = nh * hd, kvd = nkv * hd, row = qd + 2 * kvd, group = nh / nkv;
    const float scale = 1.0f / sqrtf((float)hd);
    TR_PAR_FOR3(B * nh * T * T * hd)
    for (int64_t b = 0; b < B; b++)
        for (int64_t hq = 0; hq < nh; hq++)
            for (int64_t t = 0; t < T; t++) {
                int64_t g = hq / group;
                const void *q = tr_cat(qkv, (b * T + t) * row + hq * hd, dt);
                const void *dO = tr_cat(dout, (b * T + t) * qd + hq * hd, dt);
                float D = tr_dotn(dO, tr_cat(out, (b * T + t) * qd + hq * hd, dt), hd, dt);
                float L = lse[(b * nh + hq) * T + t], acc[TR_MAX_HEAD_DIM] = {0};
                for (int64_t j = 0; j <= t; j++) {
                    const void *k = tr_cat(qkv, (b * T + j) * row + qd + g * hd, dt);
                    const void *v = tr_cat(qkv, (b * T + j) * row + qd + kvd + g * hd, dt);
                    float p = expf(scale * tr_dotn(q, k, hd, dt) - L);
                    float ds = p * (tr_dotn(dO, v, hd, dt) - D);
                    for (int64_t d = 0; d < hd; d++) acc[d] += ds * tr_ld(k, d, dt);
                }
                for (int64_t d = 0; d < hd; d++) tr_st(dqkv, (b * T + t) * row + hq * hd + d, scale * acc[d], dt);
            }
    TR_PAR_FOR3(B * nh * T * T * hd)
    for (int64_t b = 0; b < B; b++)
        for (int64_t g = 0; g < nkv; g++)
            for (int64_t j = 0; j < T; j++) {
                const void *k = tr_cat(qkv, (b * T + j) * row + qd + g * hd, dt);
                const void *v = tr_cat(qkv, (b * T + j) * row + qd + kvd + g * hd, dt);
                float ak[TR_MAX_HEAD_DIM] = {0}, av[TR_MAX_HEAD_DIM] = {0};
                for (int64_t hq = g * group; hq < (g + 1) * group; hq++)
                    for (int64_t t = j; t < T; t++) {
                        const void *q = tr_cat(qkv, (b * T + t) * row + hq * hd, dt);
                        const void *dO = tr_cat(dout, (b * T + t) * qd + hq * hd, dt);
                        float D = tr_dotn(dO, tr_cat(out, (b * T + t) * qd + hq * hd, dt), hd, dt);
                        float p = expf(scale * tr_dotn(q, k, hd, dt) - lse[(b * nh + hq) * T + t]);
                        float ds = p * (tr_dotn(dO, v, hd, dt) - D);
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

void tr_cpu_attn_flash_fwd(void *out, float *lse, const void *qkv, int64_t B, int64_t T,
                           int64_t nh, int64_t nkv, int64_t hd, tr_dtype dt) {
    if (dt == TR_BF16) flash_fwd(out, lse, qkv, B, T, nh, nkv, hd, TR_BF16);
    else flash_fwd(out, lse, qkv, B, T, nh, nkv, hd, TR_F32);
}

void tr_cpu_attn_flash_bwd(void *dqkv, const void *dout, const void *qkv, const void *out,
                           const float *lse, int64_t B, int64_t T, int64_t nh, int64_t nkv,
                           int64_t hd, tr_dtype dt) {
    if (dt == TR_BF16) flash_bwd(dqkv, dout, qkv, out, lse, B, T, nh, nkv, hd, TR_BF16);
    else flash_bwd(dqkv, dout, qkv, out, lse, B, T, nh, nkv, hd, TR_F32);
}
