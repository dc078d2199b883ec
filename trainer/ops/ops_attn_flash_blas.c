/* fp32 flash attention on tiles: the algorithm of ops_attn_flash.c (online
 * softmax forward keeping only lse; backward recomputing P from lse), with
 * the products of a tile of QT queries and a block of KB keys done by sgemm
 * (ops_matmul_blas.c says which BLAS and why it runs one thread per call).
 *
 * Forward, per (b, query head, query tile), over key blocks up to the tile's
 * last query (all on the stack: S (QT,KB), the output accumulator (QT,hd)):
 *   S = scale Q K_blk^T;  per row: m' = max(m, max_valid S), c = e^(m - m'),
 *   P = e^(S - m') on keys j <= t (0 above the diagonal), l = l c + sum P,
 *   O = O c;  then O += P V_blk.  Finally o = O / l, lse = m + log l.
 * Backward, per (b, kv head), which owns that head's dk and dv, over its query
 * heads and query tiles, then key blocks:
 *   P = e^(scale Q K^T - lse) masked;  dP = dO V^T;  dS = P (dP - D), D = do.o
 *   dQ += dS K_blk;  dK_blk += scale dS^T Q;  dV_blk += P^T dO
 * and dq = scale dQ. The order of every sum is fixed by the tiling alone, so
 * results do not depend on the thread count; they match the row-by-row
 * reference to fp32 rounding (the op tests state the tolerance). */
#include <math.h>

#include "config.h"
#include "ops.h"
#include "parallel.h"

#include <cblas.h>

#define QT 64 /* queries per tile */
#define KB 64 /* keys per block */

typedef struct fb_args {
    float *out, *lse, *dqkv;
    const float *qkv, *dout, *o, *lse_in;
    int64_t B, T, nh, nkv, hd;
} fb_args;

#define FB_SHAPES(a)                                                                               \
    const int64_t T = (a)->T, nh = (a)->nh, nkv = (a)->nkv, hd = (a)->hd;                         \
    const int64_t qd = nh * hd, kvd = nkv * hd, row = qd + 2 * kvd, group = nh / nkv;             \
    const float scale = 1.0f / sqrtf((float)hd)

static void sgemm_nt(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                     int64_t ldb, float beta, float *c, int64_t ldc) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb,
                beta, c, (int)ldc);
}
static void sgemm_nn(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                     int64_t ldb, float beta, float *c, int64_t ldc) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb,
                beta, c, (int)ldc);
}
static void sgemm_tn(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                     int64_t ldb, float beta, float *c, int64_t ldc) {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)m, (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb,
                beta, c, (int)ldc);
}

/* Tasks [k0, k1) of the flattened (b, query head, query tile). */
static void fwd_tiles(void *p, int64_t k0, int64_t k1) {
    const fb_args *a = p;
    FB_SHAPES(a);
    const int64_t tiles = (T + QT - 1) / QT;
    float S[QT * KB], O[QT * TR_MAX_HEAD_DIM], m[QT], l[QT];
    for (int64_t task = k0; task < k1; task++) {
        const int64_t b = task / (nh * tiles), hq = task / tiles % nh, t0 = task % tiles * QT;
        const int64_t qn = T - t0 < QT ? T - t0 : QT, g = hq / group;
        const float *Q = a->qkv + (b * T + t0) * row + hq * hd;
        const float *K = a->qkv + b * T * row + qd + g * hd, *V = K + kvd;
        for (int64_t r = 0; r < qn; r++) m[r] = -INFINITY, l[r] = 0;
        if (a->out)
            for (int64_t i = 0; i < qn * hd; i++) O[i] = 0;
        for (int64_t j0 = 0; j0 < t0 + qn; j0 += KB) {
            const int64_t jn = t0 + qn - j0 < KB ? t0 + qn - j0 : KB;
            sgemm_nt(qn, jn, hd, scale, Q, row, K + j0 * row, row, 0.0f, S, KB);
            for (int64_t r = 0; r < qn; r++) {
                float *s = S + r * KB;
                const int64_t jv = t0 + r - j0 + 1 < jn ? t0 + r - j0 + 1 : jn; /* keys j <= t */
                float mt = -INFINITY;
                for (int64_t j = 0; j < jv; j++) mt = s[j] > mt ? s[j] : mt;
                const float mn = m[r] > mt ? m[r] : mt, c = tr_expf(m[r] - mn);
                float sum = 0;
                for (int64_t j = 0; j < jn; j++) {
                    s[j] = j < jv ? tr_expf(s[j] - mn) : 0.0f;
                    sum += s[j];
                }
                l[r] = l[r] * c + sum;
                m[r] = mn;
                if (a->out) {
                    float *o = O + r * hd;
                    TR_SIMD
                    for (int64_t d = 0; d < hd; d++) o[d] *= c;
                }
            }
            if (a->out) sgemm_nn(qn, hd, jn, 1.0f, S, KB, V + j0 * row, row, 1.0f, O, hd);
        }
        for (int64_t r = 0; r < qn; r++) {
            a->lse[(b * nh + hq) * T + t0 + r] = m[r] + logf(l[r]);
            if (!a->out) continue;
            float *dst = a->out + (b * T + t0 + r) * qd + hq * hd;
            const float lsum = l[r];
            TR_SIMD
            for (int64_t d = 0; d < hd; d++) dst[d] = O[r * hd + d] / lsum;
        }
    }
}

/* Tasks [k0, k1) of the flattened (b, kv head). */
static void bwd_heads(void *p, int64_t k0, int64_t k1) {
    const fb_args *a = p;
    FB_SHAPES(a);
    float S[QT * KB], dP[QT * KB], dQ[QT * TR_MAX_HEAD_DIM], D[QT];
    for (int64_t task = k0; task < k1; task++) {
        const int64_t b = task / nkv, g = task % nkv;
        const float *K = a->qkv + b * T * row + qd + g * hd, *V = K + kvd;
        float *dK = a->dqkv + b * T * row + qd + g * hd, *dV = dK + kvd;
        for (int64_t j = 0; j < T; j++)
            for (int64_t d = 0; d < hd; d++) dK[j * row + d] = dV[j * row + d] = 0;
        for (int64_t hq = g * group; hq < (g + 1) * group; hq++)
            for (int64_t t0 = 0; t0 < T; t0 += QT) {
                const int64_t qn = T - t0 < QT ? T - t0 : QT;
                const float *Q = a->qkv + (b * T + t0) * row + hq * hd;
                const float *dO = a->dout + (b * T + t0) * qd + hq * hd, *O = a->o + (b * T + t0) * qd + hq * hd;
                const float *L = a->lse_in + (b * nh + hq) * T + t0;
                for (int64_t r = 0; r < qn; r++) D[r] = tr_dotn(dO + r * qd, O + r * qd, hd, TR_F32);
                for (int64_t i = 0; i < qn * hd; i++) dQ[i] = 0;
                for (int64_t j0 = 0; j0 < t0 + qn; j0 += KB) {
                    const int64_t jn = t0 + qn - j0 < KB ? t0 + qn - j0 : KB;
                    sgemm_nt(qn, jn, hd, scale, Q, row, K + j0 * row, row, 0.0f, S, KB);
                    sgemm_nt(qn, jn, hd, 1.0f, dO, qd, V + j0 * row, row, 0.0f, dP, KB);
                    for (int64_t r = 0; r < qn; r++) {
                        float *s = S + r * KB, *dp = dP + r * KB;
                        const int64_t jv = t0 + r - j0 + 1 < jn ? t0 + r - j0 + 1 : jn;
                        const float Lr = L[r], Dr = D[r];
                        TR_SIMD
                        for (int64_t j = 0; j < jn; j++) {
                            const float pj = j < jv ? tr_expf(s[j] - Lr) : 0.0f;
                            s[j] = pj;
                            dp[j] = pj * (dp[j] - Dr);
                        }
                    }
                    sgemm_nn(qn, hd, jn, 1.0f, dP, KB, K + j0 * row, row, 1.0f, dQ, hd);
                    sgemm_tn(jn, hd, qn, scale, dP, KB, Q, row, 1.0f, dK + j0 * row, row);
                    sgemm_tn(jn, hd, qn, 1.0f, S, KB, dO, qd, 1.0f, dV + j0 * row, row);
                }
                for (int64_t r = 0; r < qn; r++) {
                    float *dq = a->dqkv + (b * T + t0 + r) * row + hq * hd;
                    TR_SIMD
                    for (int64_t d = 0; d < hd; d++) dq[d] = scale * dQ[r * hd + d];
                }
            }
    }
}

/* sgemm takes int dimensions: larger shapes stay on the reference. */
static int fits(int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd) {
    const int64_t row = (nh + 2 * nkv) * hd;
    return B > 0 && T > 0 && hd > 0 && hd <= TR_MAX_HEAD_DIM && row <= 0x7fffffff && T * row <= 0x7fffffff;
}

void tr_cpu_attn_flash_fwd(void *out, float *lse, const void *qkv, int64_t B, int64_t T,
                           int64_t nh, int64_t nkv, int64_t hd, tr_dtype dt) {
    if (dt != TR_F32 || !fits(B, T, nh, nkv, hd)) {
        tr_cpu_attn_flash_fwd_ref(out, lse, qkv, B, T, nh, nkv, hd, dt);
        return;
    }
    fb_args a = {.out = out, .lse = lse, .qkv = qkv, .B = B, .T = T, .nh = nh, .nkv = nkv, .hd = hd};
    tr_par_for(B * nh * ((T + QT - 1) / QT), B * nh * T * T * hd, fwd_tiles, &a);
}

void tr_cpu_attn_flash_bwd(void *dqkv, const void *dout, const void *qkv, const void *out,
                           const float *lse, int64_t B, int64_t T, int64_t nh, int64_t nkv,
                           int64_t hd, tr_dtype dt) {
    if (dt != TR_F32 || !fits(B, T, nh, nkv, hd)) {
        tr_cpu_attn_flash_bwd_ref(dqkv, dout, qkv, out, lse, B, T, nh, nkv, hd, dt);
        return;
    }
    fb_args a = {.dqkv = dqkv, .qkv = qkv, .dout = dout, .o = out, .lse_in = lse,
                 .B = B, .T = T, .nh = nh, .nkv = nkv, .hd = hd};
    tr_par_for(B * nkv, B * nh * T * T * hd, bwd_heads, &a);
}
