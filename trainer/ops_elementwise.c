/* Elementwise ops: residual add, embedding lookup, SwiGLU.
 *
 * SwiGLU (Shazeer 2020): h = silu(g) * u, silu(g) = g * s, s = sigmoid(g).
 *   du = dh * silu(g)
 *   dg = dh * u * s * (1 + g * (1 - s))
 * Embedding backward: each vocabulary row's gradient is the fp32 sum of the
 * output gradients of the positions holding that token, in position order; the
 * first position of each token owns the row, so no two threads write it. */
#include <math.h>

#include "ops.h"
#include "parallel.h"

void tr_cpu_add(void *y, const void *x, int64_t n, tr_dtype dt) {
    TR_PAR_FOR(n)
    for (int64_t i = 0; i < n; i++) tr_st(y, i, tr_ld(y, i, dt) + tr_ld(x, i, dt), dt);
}

void tr_cpu_embedding_fwd(void *out, const int32_t *tokens, const void *wte, int64_t n, int64_t h,
                          tr_dtype dt) {
    TR_PAR_FOR(n * h)
    for (int64_t i = 0; i < n; i++) {
        int64_t v = tokens[i];
        for (int64_t j = 0; j < h; j++) tr_st(out, i * h + j, tr_ld(wte, v * h + j, dt), dt);
    }
}

void tr_cpu_embedding_bwd(void *dwte, const void *dout, const int32_t *tokens, int64_t n, int64_t h,
                          tr_dtype dt) {
    TR_PAR_FOR(n * (n + h))
    for (int64_t i = 0; i < n; i++) {
        int32_t v = tokens[i];
        int first = 1;
        for (int64_t p = 0; p < i && first; p++)
            if (tokens[p] == v) first = 0;
        if (!first) continue;
        for (int64_t j0 = 0; j0 < h; j0 += 64) {
            int64_t jn = h - j0 < 64 ? h - j0 : 64;
            float acc[64] = {0};
            for (int64_t p = i; p < n; p++) {
                if (tokens[p] != v) continue;
                for (int64_t j = 0; j < jn; j++) acc[j] += tr_ld(dout, p * h + j0 + j, dt);
            }
            for (int64_t j = 0; j < jn; j++) {
                int64_t k = (int64_t)v * h + j0 + j;
                tr_st(dwte, k, tr_ld(dwte, k, dt) + acc[j], dt);
            }
        }
    }
}

static inline float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

void tr_cpu_swiglu_fwd(void *hact, const void *gu, int64_t n, int64_t I, tr_dtype dt) {
    TR_PAR_FOR(n * I)
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < I; j++) {
            float g = tr_ld(gu, i * 2 * I + j, dt), u = tr_ld(gu, i * 2 * I + I + j, dt);
            tr_st(hact, i * I + j, g * sigmoidf(g) * u, dt);
        }
}

void tr_cpu_swiglu_bwd(void *dgu, const void *dhact, const void *gu, int64_t n, int64_t I,
                       tr_dtype dt) {
    TR_PAR_FOR(n * I)
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < I; j++) {
            float g = tr_ld(gu, i * 2 * I + j, dt), u = tr_ld(gu, i * 2 * I + I + j, dt);
            float dh = tr_ld(dhact, i * I + j, dt), s = sigmoidf(g);
            tr_st(dgu, i * 2 * I + j, dh * u * s * (1.0f + g * (1.0f - s)), dt);
            tr_st(dgu, i * 2 * I + I + j, dh * g * s, dt);
        }
}
