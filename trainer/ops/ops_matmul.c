/* Linear layers: out = inp @ w^T + bias, the PyTorch nn.Linear convention
 * (w is (out_features, in_features), rows contiguous).
 *
 * Two implementations. tr_cpu_matmul_fwd/_bwd, which the backend uses, hand
 * fp32 to a BLAS (ops_matmul_blas.c). The kernels of this file,
 * tr_cpu_matmul_fwd_ref/_bwd_ref, are the reference the op tests compare the
 * BLAS against, and the bf16 path (no BLAS multiplies bf16 storage with fp32
 * sums the way this backend defines them).
 *
 * Forward: every output element is one dot product of an input row with a
 * weight row; eight partial sums in a fixed order keep it fast and bitwise
 * reproducible. Backward:
 *   dinp[i,k]  = sum_o dout[i,o] * w[o,k]      (one thread per block of rows and columns)
 *   dw[o,k]   += sum_i dout[i,o] * inp[i,k]    (one thread per block of weight rows)
 *   dbias[o]  += sum_i dout[i,o]
 * Sums run over fixed-size column tiles of fp32 accumulators on the stack,
 * always in the same order, whatever the thread count.
 *
 * Each kernel is a loop body taking the dtype as an argument, inlined into
 * one range function per dtype that passes it as a literal: only a literal
 * lets the compiler drop the dtype test from the inner loops and vectorize
 * them (a dtype read from the loop's argument struct would not). */
#include <stdint.h>

#include "ops.h"
#include "parallel.h"

#define TILE 64 /* columns summed together: 64 fp32 accumulators */
#define RB 8    /* rows sharing each tile read */

TR_INLINE float dot(const void *a, const void *b, int64_t n, tr_dtype dt) {
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

/* Output feature o for every row: the weight row stays in cache. */
TR_INLINE void fwd_col(void *out, const void *inp, const void *w, const void *bias, int64_t o, int64_t n,
                       int64_t c, int64_t oc, tr_dtype dt) {
    const void *wr = tr_cat(w, o * c, dt);
    const float b = bias ? tr_ld(bias, o, dt) : 0.0f;
    for (int64_t i = 0; i < n; i++) {
        float acc = dot(tr_cat(inp, i * c, dt), wr, c, dt);
        if (bias) acc += b;
        tr_st(out, i * oc + o, acc, dt);
    }
}

/* Rows [ib*RB, +RB) x columns [kt*TILE, +TILE) of dinp. */
TR_INLINE void bwd_inp_block(void *dinp, const void *dout, const void *w, int64_t ib, int64_t kt, int64_t n,
                             int64_t c, int64_t oc, tr_dtype dt) {
    const int64_t i0 = ib * RB, rn = n - i0 < RB ? n - i0 : RB;
    const int64_t k0 = kt * TILE, kn = c - k0 < TILE ? c - k0 : TILE;
    float acc[RB][TILE] = {{0}};
    for (int64_t o = 0; o < oc; o++) {
        const void *wr = tr_cat(w, o * c + k0, dt);
        for (int64_t r = 0; r < rn; r++) {
            const float d = tr_ld(dout, (i0 + r) * oc + o, dt);
            TR_SIMD
            for (int64_t k = 0; k < kn; k++) acc[r][k] += d * tr_ld(wr, k, dt);
        }
    }
    for (int64_t r = 0; r < rn; r++)
        for (int64_t k = 0; k < kn; k++) tr_st(dinp, (i0 + r) * c + k0 + k, acc[r][k], dt);
}

/* Weight rows [ob*RB, +RB): the RB gradient values of one input row are
 * adjacent in dout, so walking dout's columns costs one cache line per row. */
TR_INLINE void bwd_w_block(void *dw, void *dbias, const void *dout, const void *inp, int64_t ob, int64_t n,
                           int64_t c, int64_t oc, tr_dtype dt) {
    const int64_t o0 = ob * RB, on = oc - o0 < RB ? oc - o0 : RB;
    for (int64_t k0 = 0; dw && k0 < c; k0 += TILE) {
        const int64_t kn = c - k0 < TILE ? c - k0 : TILE;
        float acc[RB][TILE] = {{0}};
        for (int64_t i = 0; i < n; i++) {
            const void *xr = tr_cat(inp, i * c + k0, dt);
            for (int64_t r = 0; r < on; r++) {
                const float d = tr_ld(dout, i * oc + o0 + r, dt);
                TR_SIMD
                for (int64_t k = 0; k < kn; k++) acc[r][k] += d * tr_ld(xr, k, dt);
            }
        }
        for (int64_t r = 0; r < on; r++)
            for (int64_t k = 0; k < kn; k++) {
                const int64_t j = (o0 + r) * c + k0 + k;
                tr_st(dw, j, tr_ld(dw, j, dt) + acc[r][k], dt);
            }
    }
    for (int64_t r = 0; dbias && r < on; r++) {
        float acc = 0;
        for (int64_t i = 0; i < n; i++) acc += tr_ld(dout, i * oc + o0 + r, dt);
        tr_st(dbias, o0 + r, tr_ld(dbias, o0 + r, dt) + acc, dt);
    }
}

/* The loops' arguments, and one range function per loop and dtype (the
 * dtype a literal, so the inner loops lose the dtype test and vectorize). */
typedef struct mm_args {
    void *out, *dinp, *dw, *dbias;
    const void *inp, *w, *bias, *dout;
    int64_t n, c, oc, nt;
} mm_args;

#define MM_RANGE_FNS(DT, SUF)                                                                      \
    static void fwd_range_##SUF(void *p, int64_t o0, int64_t o1) {                                 \
        const mm_args *a = p;                                                                      \
        for (int64_t o = o0; o < o1; o++) fwd_col(a->out, a->inp, a->w, a->bias, o, a->n, a->c, a->oc, DT); \
    }                                                                                              \
    static void bwd_inp_range_##SUF(void *p, int64_t b0, int64_t b1) {                            \
        const mm_args *a = p;                                                                      \
        for (int64_t b = b0; b < b1; b++)                                                          \
            bwd_inp_block(a->dinp, a->dout, a->w, b / a->nt, b % a->nt, a->n, a->c, a->oc, DT);     \
    }                                                                                              \
    static void bwd_w_range_##SUF(void *p, int64_t b0, int64_t b1) {                              \
        const mm_args *a = p;                                                                      \
        for (int64_t b = b0; b < b1; b++) bwd_w_block(a->dw, a->dbias, a->dout, a->inp, b, a->n, a->c, a->oc, DT); \
    }
MM_RANGE_FNS(TR_F32, f32)
MM_RANGE_FNS(TR_BF16, bf16)

void tr_cpu_matmul_fwd_ref(void *out, const void *inp, const void *w, const void *bias, int64_t n,
                           int64_t c, int64_t oc, tr_dtype dt) {
    mm_args a = {.out = out, .inp = inp, .w = w, .bias = bias, .n = n, .c = c, .oc = oc};
    tr_par_for(oc, n * c * oc, dt == TR_BF16 ? fwd_range_bf16 : fwd_range_f32, &a);
}

void tr_cpu_matmul_bwd_ref(void *dinp, void *dw, void *dbias, const void *dout, const void *inp,
                           const void *w, int64_t n, int64_t c, int64_t oc, tr_dtype dt) {
    mm_args a = {.dinp = dinp, .dw = dw, .dbias = dbias, .dout = dout, .inp = inp, .w = w,
                 .n = n, .c = c, .oc = oc, .nt = (c + TILE - 1) / TILE};
    if (dinp)
        tr_par_for(((n + RB - 1) / RB) * a.nt, n * c * oc, dt == TR_BF16 ? bwd_inp_range_bf16 : bwd_inp_range_f32,
                   &a);
    if (dw || dbias)
        tr_par_for((oc + RB - 1) / RB, n * c * oc, dt == TR_BF16 ? bwd_w_range_bf16 : bwd_w_range_f32, &a);
}

