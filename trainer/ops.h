/* The CPU backend's operations: forward and backward of every op of a Llama
 * block, written for clarity first (each file walks through its math), with
 * OpenMP over independent outputs. Shapes in comments use B (batch), T (seq),
 * N (rows = B*T unless said), h (hidden), V (vocab), I (intermediate), nh/nkv
 * (query/kv heads), hd (head dim), qd = nh*hd, kvd = nkv*hd.
 *
 * Conventions: `dt` is the storage dtype of activations, weights and their
 * gradients (fp32, or bf16 rounded to nearest-even); per-row statistics
 * (rstd, logsumexp, losses) are always fp32; every sum is accumulated in fp32
 * in a fixed order. Backward functions overwrite activation gradients unless
 * they say "accumulates", and always accumulate into weight gradients (which
 * gather over micro-batches). The backend table (backend.h) points at these. */
#ifndef TR_OPS_H
#define TR_OPS_H

#include <stdint.h>

#include "dtype.h"

/* Loop bodies the kernels need inlined even inside OpenMP's outlined loops
 * (ops_matmul.c says why). */
#define TR_INLINE static inline __attribute__((always_inline))

/* a . b over n elements of dtype dt, summed in fp32 in index order: the
 * attention kernels' dot product (one head row). */
TR_INLINE float tr_dotn(const void *a, const void *b, int64_t n, tr_dtype dt) {
    float s = 0;
    for (int64_t i = 0; i < n; i++) s += tr_ld(a, i, dt) * tr_ld(b, i, dt);
    return s;
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
 * overwritten (skipped when NULL), dw and dbias accumulate (skipped when NULL). */
void tr_cpu_matmul_fwd(void *out, const void *inp, const void *w, const void *bias, int64_t n,
                       int64_t c, int64_t oc, tr_dtype dt);
void tr_cpu_matmul_bwd(void *dinp, void *dw, void *dbias, const void *dout, const void *inp,
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
