/* The CPU backend's operations: forward and backward of every op of a Llama
 * block, written for clarity first (each file walks through its math), with
 * the thread pool of parallel.h over independent outputs. Shapes in comments use B (batch), T (seq),
 * N (rows = B*T unless said), h (hidden), V (vocab), I (intermediate), nh/nkv
 * (query/kv heads), hd (head dim), qd = nh*hd, kvd = nkv*hd.
 *
 * Conventions: `dt` is the storage dtype of activations, weights and their
 * gradients (fp32, or bf16 rounded to nearest-even); per-row statistics
 * (rstd, logsumexp, losses) are always fp32; every sum is accumulated in fp32
 * in a fixed order (the BLAS matmul: a fixed order for a given CPU and
 * shape). Backward functions overwrite activation gradients unless
 * they say "accumulates", and always accumulate into weight gradients (which
 * gather over micro-batches). The backend table (backend.h) points at these. */
#ifndef TR_OPS_H
#define TR_OPS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "dtype.h"
#include "parallel.h"

/* Loop bodies the kernels need inlined into each dtype's range function, so
 * the dtype is a literal there (ops_matmul.c says why). */
#define TR_INLINE static inline __attribute__((always_inline))

/* Two range functions for tr_par_for (parallel.h) from one TR_INLINE body
 * `void body(void *args, int64_t i0, int64_t i1, tr_dtype dt)`: body_f32 and
 * body_bf16 pass the dtype as a literal, so the inner loops lose the dtype
 * test and vectorize. TR_BY_DTYPE picks one. */
#define TR_RANGE_BY_DTYPE(body)                                                               \
    static void body##_f32(void *a, int64_t i0, int64_t i1) { body(a, i0, i1, TR_F32); }      \
    static void body##_bf16(void *a, int64_t i0, int64_t i1) { body(a, i0, i1, TR_BF16); }
#define TR_BY_DTYPE(body, dt) ((dt) == TR_BF16 ? body##_bf16 : body##_f32)

/* e^x in fp32 without a library call, so loops over it vectorize (libm's
 * expf is a call per element). Cephes' expf (Moshier, cephes/single/expf.c):
 * x = n ln2 + r with |r| <= ln2/2 (ln2 split in two constants so n ln2 is
 * exact), e^r by its degree-7 minimax polynomial, times 2^n built in the
 * exponent bits. Error within 2 ulp of the exact value over the normal
 * range (the op tests check it against exp in double). x above 88.376 gives
 * +inf, below -87.336 (e^x under FLT_MIN) gives 0, NaN stays NaN. The
 * rounding of x log2(e) to n adds and subtracts 1.5 * 2^23, which rounds to
 * nearest in fp32 arithmetic. */
TR_INLINE float tr_expf(float x) {
    const float hi = 88.3762626647949f, lo = -87.3365447504019f;
    float xc = x > lo ? x : lo; /* also maps NaN to lo; restored below */
    xc = xc < hi ? xc : hi;
    const float shift = 12582912.0f; /* 1.5 * 2^23 */
    float n = (xc * 1.44269504088896341f + shift) - shift;
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * r * r + r + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    y *= scale;
    y = x < lo ? 0.0f : y;
    y = x > hi ? (float)INFINITY : y;
    return x != x ? x : y;
}

/* 1 / (1 + e^-x). */
TR_INLINE float tr_sigmoidf(float x) { return 1.0f / (1.0f + tr_expf(-x)); }

/* a . b over n elements of dtype dt, summed in fp32 as eight interleaved
 * partial sums (element i into sum i mod 8) added pairwise at the end, then
 * the tail: a fixed order that the compiler turns into vector multiply-adds
 * (a single running sum would be a serial chain of scalar adds, since fp32
 * addition may not be reordered). The attention kernels' dot product. */
TR_INLINE float tr_dotn(const void *a, const void *b, int64_t n, tr_dtype dt) {
    float s[8] = {0};
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
        TR_SIMD
        for (int l = 0; l < 8; l++) s[l] += tr_ld(a, k + l, dt) * tr_ld(b, k + l, dt);
    }
    float tail = 0;
    for (; k < n; k++) tail += tr_ld(a, k, dt) * tr_ld(b, k, dt);
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7])) + tail;
}

/* y = round(y + x), elementwise over n. */
void tr_cpu_add(void *y, const void *x, int64_t n, tr_dtype dt);

/* out (N,h) = wte[tokens] ; dwte (V,h) accumulates the rows of dout by token. */
void tr_cpu_embedding_fwd(void *out, const int32_t *tokens, const void *wte, int64_t n, int64_t h,
                          tr_dtype dt);
void tr_cpu_embedding_bwd(void *dwte, const void *dout, const int32_t *tokens, int64_t n, int64_t h,
                          tr_dtype dt);

/* out (N,h) = inp * rstd * w, rstd (N) = 1/sqrt(mean(inp^2) + eps). Backward
 * accumulates into dinp (the residual stream's gradient) and dw. */
void tr_cpu_rmsnorm_fwd(void *out, float *rstd, const void *inp, const void *w, int64_t n, int64_t h,
                        double eps, tr_dtype dt);
void tr_cpu_rmsnorm_bwd(void *dinp, void *dw, const void *dout, const void *inp, const void *w,
                        const float *rstd, int64_t n, int64_t h, tr_dtype dt);

/* out (N,OC) = inp (N,C) @ w(OC,C)^T + bias(OC). Backward: dinp (N,C) is
 * overwritten (skipped when NULL), dw and dbias accumulate (skipped when NULL).
 * fp32 goes through OpenBLAS's sgemm (ops_matmul_blas.c): fp32 sums in the
 * BLAS's blocked order with fused multiply-adds where the CPU has them, so
 * it matches the reference to rounding, not bitwise. */
void tr_cpu_matmul_fwd(void *out, const void *inp, const void *w, const void *bias, int64_t n,
                       int64_t c, int64_t oc, tr_dtype dt);
void tr_cpu_matmul_bwd(void *dinp, void *dw, void *dbias, const void *dout, const void *inp,
                       const void *w, int64_t n, int64_t c, int64_t oc, tr_dtype dt);
/* The same, with the hand-written kernels only: the reference the BLAS path
 * is tested against (ops_matmul.c), and the path bf16 always takes. */
void tr_cpu_matmul_fwd_ref(void *out, const void *inp, const void *w, const void *bias, int64_t n,
                           int64_t c, int64_t oc, tr_dtype dt);
void tr_cpu_matmul_bwd_ref(void *dinp, void *dw, void *dbias, const void *dout, const void *inp,
                           const void *w, int64_t n, int64_t c, int64_t oc, tr_dtype dt);

/* Rotary embeddings (HF rotate_half convention) applied in place to the q and
 * k parts of qkv (B,T,qd+2kvd); position = index within the sequence. The
 * backward applies the inverse rotation to dq and dk in place. */
void tr_cpu_rope_fwd(void *qkv, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                     double theta, tr_dtype dt);
void tr_cpu_rope_bwd(void *dqkv, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                     double theta, tr_dtype dt);

/* Causal attention over qkv (B,T,qd+2kvd) with grouped-query heads: query head
 * hq reads kv head hq / (nh/nkv) in place (K and V are never copied).
 *
 * Eager: materializes the probabilities P (B,nh,T,T) (zero above the
 * diagonal); out (B,T,qd) may be NULL to only recompute P. Its backward needs
 * a dP workspace the size of P and writes dqkv (all three parts).
 *
 * Flash: online softmax over key tiles; keeps only the row logsumexp lse
 * (B,nh,T) fp32; out may be NULL to only recompute lse. Its backward
 * recomputes the probabilities from q, k and lse and needs no workspace. */
void tr_cpu_attn_eager_fwd(void *out, void *probs, const void *qkv, int64_t B, int64_t T,
                           int64_t nh, int64_t nkv, int64_t hd, tr_dtype dt);
void tr_cpu_attn_eager_bwd(void *dqkv, void *dprobs, const void *dout, const void *qkv,
                           const void *probs, int64_t B, int64_t T, int64_t nh, int64_t nkv,
                           int64_t hd, tr_dtype dt);
void tr_cpu_attn_flash_fwd(void *out, float *lse, const void *qkv, int64_t B, int64_t T,
                           int64_t nh, int64_t nkv, int64_t hd, tr_dtype dt);
void tr_cpu_attn_flash_bwd(void *dqkv, const void *dout, const void *qkv, const void *out,
                           const float *lse, int64_t B, int64_t T, int64_t nh, int64_t nkv,
                           int64_t hd, tr_dtype dt);
/* Flash attention row by row: the reference of the fp32 path, which runs the
 * same online softmax on tiles of queries and keys with BLAS products
 * (ops_attn_flash_blas.c); bf16 always takes this path. */
void tr_cpu_attn_flash_fwd_ref(void *out, float *lse, const void *qkv, int64_t B, int64_t T,
                               int64_t nh, int64_t nkv, int64_t hd, tr_dtype dt);
void tr_cpu_attn_flash_bwd_ref(void *dqkv, const void *dout, const void *qkv, const void *out,
                               const float *lse, int64_t B, int64_t T, int64_t nh, int64_t nkv,
                               int64_t hd, tr_dtype dt);

/* hact (N,I) = silu(gate) * up with gu (N,2I) = [gate | up] per row. */
void tr_cpu_swiglu_fwd(void *hact, const void *gu, int64_t n, int64_t I, tr_dtype dt);
void tr_cpu_swiglu_bwd(void *dgu, const void *dhact, const void *gu, int64_t n, int64_t I,
                       tr_dtype dt);

/* losses (N) = logsumexp(logits row) - logits[target]. Backward writes
 * scale * (softmax - onehot) over the logits in place. */
void tr_cpu_ce_fwd(float *losses, const void *logits, const int32_t *targets, int64_t n, int64_t V,
                   tr_dtype dt);
void tr_cpu_ce_bwd(void *logits, const int32_t *targets, int64_t n, int64_t V, float scale,
                   tr_dtype dt);

#endif
