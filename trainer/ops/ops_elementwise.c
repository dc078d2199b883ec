/* Elementwise ops: residual add, embedding lookup, SwiGLU.
 *
 * SwiGLU (Shazeer 2020): h = silu(g) * u, silu(g) = g * s, s = sigmoid(g).
 *   du = dh * silu(g)
 *   dg = dh * u * s * (1 + g * (1 - s))
 * Embedding backward: each vocabulary row's gradient is the fp32 sum of the
 * output gradients of the positions holding that token, in position order; the
 * first position of each token owns the row, so no two threads write it. */
#include "ops.h"

typedef struct ew_args {
    void *y;
    const void *x, *g;
    const int32_t *tokens;
    int64_t n, h;
} ew_args;

TR_INLINE void add_range(void *p, int64_t i0, int64_t i1, tr_dtype dt) {
    const ew_args *a = p;
    TR_SIMD
    for (int64_t i = i0; i < i1; i++) tr_st(a->y, i, tr_ld(a->y, i, dt) + tr_ld(a->x, i, dt), dt);
}
TR_RANGE_BY_DTYPE(add_range)

void tr_cpu_add(void *y, const void *x, int64_t n, tr_dtype dt) {
    ew_args a = {.y = y, .x = x};
    tr_par_for(n, n, TR_BY_DTYPE(add_range, dt), &a);
}

TR_INLINE void emb_fwd_range(void *p, int64_t i0, int64_t i1, tr_dtype dt) {
    const ew_args *a = p;
    const int64_t h = a->h;
    for (int64_t i = i0; i < i1; i++) {
        const int64_t v = a->tokens[i];
        TR_SIMD
        for (int64_t j = 0; j < h; j++) tr_st(a->y, i * h + j, tr_ld(a->x, v * h + j, dt), dt);
    }
}
TR_RANGE_BY_DTYPE(emb_fwd_range)

void tr_cpu_embedding_fwd(void *out, const int32_t *tokens, const void *wte, int64_t n, int64_t h,
                          tr_dtype dt) {
    ew_args a = {.y = out, .x = wte, .tokens = tokens, .h = h};
    tr_par_for(n, n * h, TR_BY_DTYPE(emb_fwd_range, dt), &a);
}

TR_INLINE void emb_bwd_range(void *p, int64_t i0, int64_t i1, tr_dtype dt) {
    const ew_args *a = p;
    const int64_t n = a->n, h = a->h;
    const int32_t *tokens = a->tokens;
    for (int64_t i = i0; i < i1; i++) {
        int32_t v = tokens[i];
        int first = 1;
        for (int64_t q = 0; q < i && first; q++)
            if (tokens[q] == v) first = 0;
        if (!first) continue;
        for (int64_t j0 = 0; j0 < h; j0 += 64) {
            int64_t jn = h - j0 < 64 ? h - j0 : 64;
            float acc[64] = {0};
            for (int64_t q = i; q < n; q++) {
                if (tokens[q] != v) continue;
                TR_SIMD
                for (int64_t j = 0; j < jn; j++) acc[j] += tr_ld(a->x, q * h + j0 + j, dt);
            }
            for (int64_t j = 0; j < jn; j++) {
                int64_t k = (int64_t)v * h + j0 + j;
                tr_st(a->y, k, tr_ld(a->y, k, dt) + acc[j], dt);
            }
        }
    }
}
TR_RANGE_BY_DTYPE(emb_bwd_range)

void tr_cpu_embedding_bwd(void *dwte, const void *dout, const int32_t *tokens, int64_t n, int64_t h,
                          tr_dtype dt) {
    ew_args a = {.y = dwte, .x = dout, .tokens = tokens, .n = n, .h = h};
    tr_par_for(n, n * (n + h), TR_BY_DTYPE(emb_bwd_range, dt), &a);
}

/* The rows [i0, i1) of hact, from gu = [gate | up] per row. */
TR_INLINE void swiglu_fwd_range(void *p, int64_t i0, int64_t i1, tr_dtype dt) {
    const ew_args *a = p;
    const int64_t I = a->h;
    for (int64_t i = i0; i < i1; i++) {
        const void *g = tr_cat(a->g, i * 2 * I, dt), *u = tr_cat(a->g, i * 2 * I + I, dt);
        void *y = tr_at(a->y, i * I, dt);
        TR_SIMD
        for (int64_t j = 0; j < I; j++) {
            float gj = tr_ld(g, j, dt);
            tr_st(y, j, gj * tr_sigmoidf(gj) * tr_ld(u, j, dt), dt);
        }
    }
}
TR_RANGE_BY_DTYPE(swiglu_fwd_range)

void tr_cpu_swiglu_fwd(void *hact, const void *gu, int64_t n, int64_t I, tr_dtype dt) {
    ew_args a = {.y = hact, .g = gu, .h = I};
    tr_par_for(n, n * I, TR_BY_DTYPE(swiglu_fwd_range, dt), &a);
}

TR_INLINE void swiglu_bwd_range(void *p, int64_t i0, int64_t i1, tr_dtype dt) {
    const ew_args *a = p;
    const int64_t I = a->h;
    for (int64_t i = i0; i < i1; i++) {
        const void *g = tr_cat(a->g, i * 2 * I, dt), *u = tr_cat(a->g, i * 2 * I + I, dt);
        const void *dh = tr_cat(a->x, i * I, dt);
        void *dg = tr_at(a->y, i * 2 * I, dt), *du = tr_at(a->y, i * 2 * I + I, dt);
        TR_SIMD
        for (int64_t j = 0; j < I; j++) {
            float gj = tr_ld(g, j, dt), uj = tr_ld(u, j, dt), d = tr_ld(dh, j, dt), s = tr_sigmoidf(gj);
            tr_st(dg, j, d * uj * s * (1.0f + gj * (1.0f - s)), dt);
            tr_st(du, j, d * gj * s, dt);
        }
    }
}
TR_RANGE_BY_DTYPE(swiglu_bwd_range)

void tr_cpu_swiglu_bwd(void *dgu, const void *dhact, const void *gu, int64_t n, int64_t I,
                       tr_dtype dt) {
    ew_args a = {.y = dgu, .x = dhact, .g = gu, .h = I};
    tr_par_for(n, n * I, TR_BY_DTYPE(swiglu_bwd_range, dt), &a);
}
