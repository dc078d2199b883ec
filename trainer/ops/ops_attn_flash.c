/* The reference flash attention, one query or key row at a time (the bf16
 * path; fp32 runs the same algorithm on BLAS tiles, ops_attn_flash_blas.c).
 *
 * Tiled causal attention with an online softmax (Dao et al. 2022, "FlashAttention";
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
 *   dk_j = scale sum_{hq,t} dS_tj q_t;  dv_j = sum_{hq,t} P_tj do_t  (one thread per tile of KT keys) */
#include <math.h>

#include "config.h"
#include "ops.h"

#define TILE 32 /* keys per online-softmax step */
#define KT 8     /* key rows per backward dk/dv task: their accumulators stay on the stack */

typedef struct flash_args {
    void *out, *dqkv;
    float *lse;
    const float *lse_in;
    const void *qkv, *dout, *o;
    int64_t B, T, nh, nkv, hd;
} flash_args;

/* Query rows [r0, r1) of the flattened (b, hq, t). */
TR_INLINE void fwd_rows(void *p, int64_t r0, int64_t r1, tr_dtype dt) {
    const flash_args *a = p;
    const int64_t T = a->T, nh = a->nh, hd = a->hd;
    const int64_t qd = nh * hd, kvd = a->nkv * hd, row = qd + 2 * kvd, group = nh / a->nkv;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t b = r / (nh * T), hq = r / T % nh, t = r % T, g = hq / group;
        const void *q = tr_cat(a->qkv, (b * T + t) * row + hq * hd, dt);
        const void *kbase = tr_cat(a->qkv, b * T * row + qd + g * hd, dt);
        const void *vbase = tr_cat(a->qkv, b * T * row + qd + kvd + g * hd, dt);
        float m = -INFINITY, l = 0, acc[TR_MAX_HEAD_DIM] = {0}, s[TILE];
        for (int64_t j0 = 0; j0 <= t; j0 += TILE) {
            int64_t jn = t + 1 - j0 < TILE ? t + 1 - j0 : TILE;
            float mt = -INFINITY;
            for (int64_t j = 0; j < jn; j++) {
                s[j] = scale * tr_dotn(q, tr_cat(kbase, (j0 + j) * row, dt), hd, dt);
                if (s[j] > mt) mt = s[j];
            }
            float mn = m > mt ? m : mt, c = tr_expf(m - mn);
            l *= c;
            if (a->out) {
                TR_SIMD
                for (int64_t d = 0; d < hd; d++) acc[d] *= c;
            }
            for (int64_t j = 0; j < jn; j++) {
                float e = tr_expf(s[j] - mn);
                l += e;
                if (!a->out) continue;
                const void *v = tr_cat(vbase, (j0 + j) * row, dt);
                TR_SIMD
                for (int64_t d = 0; d < hd; d++) acc[d] += e * tr_ld(v, d, dt);
            }
            m = mn;
        }
        a->lse[(b * nh + hq) * T + t] = m + logf(l);
        if (a->out) {
            void *o = tr_at(a->out, (b * T + t) * qd + hq * hd, dt);
            TR_SIMD
            for (int64_t d = 0; d < hd; d++) tr_st(o, d, acc[d] / l, dt);
        }
    }
}
TR_RANGE_BY_DTYPE(fwd_rows)

/* dq of query rows [r0, r1) of the flattened (b, hq, t). */
TR_INLINE void bwd_q_rows(void *p, int64_t r0, int64_t r1, tr_dtype dt) {
    const flash_args *a = p;
    const int64_t T = a->T, nh = a->nh, hd = a->hd;
    const int64_t qd = nh * hd, kvd = a->nkv * hd, row = qd + 2 * kvd, group = nh / a->nkv;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t b = r / (nh * T), hq = r / T % nh, t = r % T, g = hq / group;
        const void *q = tr_cat(a->qkv, (b * T + t) * row + hq * hd, dt);
        const void *dO = tr_cat(a->dout, (b * T + t) * qd + hq * hd, dt);
        const float D = tr_dotn(dO, tr_cat(a->o, (b * T + t) * qd + hq * hd, dt), hd, dt);
        const float L = a->lse_in[(b * nh + hq) * T + t];
        float acc[TR_MAX_HEAD_DIM] = {0};
        for (int64_t j = 0; j <= t; j++) {
            const void *k = tr_cat(a->qkv, (b * T + j) * row + qd + g * hd, dt);
            const void *v = tr_cat(a->qkv, (b * T + j) * row + qd + kvd + g * hd, dt);
            float pj = tr_expf(scale * tr_dotn(q, k, hd, dt) - L);
            float ds = pj * (tr_dotn(dO, v, hd, dt) - D);
            TR_SIMD
            for (int64_t d = 0; d < hd; d++) acc[d] += ds * tr_ld(k, d, dt);
        }
        void *dq = tr_at(a->dqkv, (b * T + t) * row + hq * hd, dt);
        TR_SIMD
        for (int64_t d = 0; d < hd; d++) tr_st(dq, d, scale * acc[d], dt);
    }
}
TR_RANGE_BY_DTYPE(bwd_q_rows)

/* dk and dv of key tiles [k0, k1) of the flattened (b, g, tile of KT keys).
 * Each key sums over the query heads of its group, then the query positions
 * in order; a query's D is computed once per tile. */
TR_INLINE void bwd_kv_tiles(void *p, int64_t k0, int64_t k1, tr_dtype dt) {
    const flash_args *a = p;
    const int64_t T = a->T, nh = a->nh, nkv = a->nkv, hd = a->hd, tiles = (T + KT - 1) / KT;
    const int64_t qd = nh * hd, kvd = nkv * hd, row = qd + 2 * kvd, group = nh / nkv;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int64_t kt = k0; kt < k1; kt++) {
        const int64_t b = kt / (nkv * tiles), g = kt / tiles % nkv, j0 = kt % tiles * KT;
        const int64_t jn = T - j0 < KT ? T - j0 : KT;
        float ak[KT][TR_MAX_HEAD_DIM], av[KT][TR_MAX_HEAD_DIM];
        for (int64_t jj = 0; jj < jn; jj++)
            for (int64_t d = 0; d < hd; d++) ak[jj][d] = av[jj][d] = 0;
        for (int64_t hq = g * group; hq < (g + 1) * group; hq++)
            for (int64_t t = j0; t < T; t++) {
                const void *q = tr_cat(a->qkv, (b * T + t) * row + hq * hd, dt);
                const void *dO = tr_cat(a->dout, (b * T + t) * qd + hq * hd, dt);
                const float D = tr_dotn(dO, tr_cat(a->o, (b * T + t) * qd + hq * hd, dt), hd, dt);
                const float L = a->lse_in[(b * nh + hq) * T + t];
                const int64_t jend = t - j0 + 1 < jn ? t - j0 + 1 : jn; /* keys j <= t */
                for (int64_t jj = 0; jj < jend; jj++) {
                    const void *k = tr_cat(a->qkv, (b * T + j0 + jj) * row + qd + g * hd, dt);
                    const void *v = tr_cat(a->qkv, (b * T + j0 + jj) * row + qd + kvd + g * hd, dt);
                    float pj = tr_expf(scale * tr_dotn(q, k, hd, dt) - L);
                    float ds = pj * (tr_dotn(dO, v, hd, dt) - D);
                    TR_SIMD
                    for (int64_t d = 0; d < hd; d++) {
                        ak[jj][d] += ds * tr_ld(q, d, dt);
                        av[jj][d] += pj * tr_ld(dO, d, dt);
                    }
                }
            }
        for (int64_t jj = 0; jj < jn; jj++) {
            void *dk = tr_at(a->dqkv, (b * T + j0 + jj) * row + qd + g * hd, dt);
            void *dv = tr_at(dk, kvd, dt);
            TR_SIMD
            for (int64_t d = 0; d < hd; d++) {
                tr_st(dk, d, scale * ak[jj][d], dt);
                tr_st(dv, d, av[jj][d], dt);
            }
        }
    }
}
TR_RANGE_BY_DTYPE(bwd_kv_tiles)

void tr_cpu_attn_flash_fwd_ref(void *out, float *lse, const void *qkv, int64_t B, int64_t T,
                               int64_t nh, int64_t nkv, int64_t hd, tr_dtype dt) {
    flash_args a = {.out = out, .lse = lse, .qkv = qkv, .B = B, .T = T, .nh = nh, .nkv = nkv, .hd = hd};
    tr_par_for(B * nh * T, B * nh * T * T * hd, TR_BY_DTYPE(fwd_rows, dt), &a);
}

void tr_cpu_attn_flash_bwd_ref(void *dqkv, const void *dout, const void *qkv, const void *out,
                               const float *lse, int64_t B, int64_t T, int64_t nh, int64_t nkv,
                               int64_t hd, tr_dtype dt) {
    flash_args a = {.dqkv = dqkv, .lse_in = lse, .qkv = qkv, .dout = dout, .o = out,
                    .B = B, .T = T, .nh = nh, .nkv = nkv, .hd = hd};
    tr_par_for(B * nh * T, B * nh * T * T * hd, TR_BY_DTYPE(bwd_q_rows, dt), &a);
    tr_par_for(B * nkv * ((T + KT - 1) / KT), B * nh * T * T * hd, TR_BY_DTYPE(bwd_kv_tiles, dt), &a);
}
