/* RMSNorm (Zhang & Sennrich 2019), as in HF LlamaRMSNorm:
 *   r   = 1 / sqrt(mean_j x_j^2 + eps)
 *   y_j = w_j * x_j * r
 * Backward, with g_j = dy_j * w_j:
 *   dx_j = r * g_j - x_j * r^3 / h * sum_k g_k x_k
 *   dw_j += sum_rows dy_j * x_j * r */
#include <math.h>

#include "ops.h"

#define COLS 64 /* dw columns summed together */

typedef struct norm_args {
    void *out, *dinp, *dw;
    float *rstd;
    const float *rstd_in;
    const void *inp, *w, *dout;
    int64_t n, h;
    float eps;
} norm_args;

TR_INLINE void fwd_rows(void *p, int64_t i0, int64_t i1, tr_dtype dt) {
    const norm_args *a = p;
    const int64_t h = a->h;
    for (int64_t i = i0; i < i1; i++) {
        const void *x = tr_cat(a->inp, i * h, dt);
        void *y = tr_at(a->out, i * h, dt);
        float r = 1.0f / sqrtf(tr_dotn(x, x, h, dt) / (float)h + a->eps);
        a->rstd[i] = r;
        TR_SIMD
        for (int64_t j = 0; j < h; j++) tr_st(y, j, tr_ld(x, j, dt) * r * tr_ld(a->w, j, dt), dt);
    }
}
TR_RANGE_BY_DTYPE(fwd_rows)

void tr_cpu_rmsnorm_fwd(void *out, float *rstd, const void *inp, const void *w, int64_t n, int64_t h,
                        double eps, tr_dtype dt) {
    norm_args a = {.out = out, .rstd = rstd, .inp = inp, .w = w, .h = h, .eps = (float)eps};
    tr_par_for(n, n * h, TR_BY_DTYPE(fwd_rows, dt), &a);
}

/* sum_j dy_j w_j x_j in eight interleaved partial sums (as tr_dotn). */
TR_INLINE float dot3(const void *dy, const void *w, const void *x, int64_t h, tr_dtype dt) {
    float s[8] = {0};
    int64_t j = 0;
    for (; j + 8 <= h; j += 8) {
        TR_SIMD
        for (int l = 0; l < 8; l++) s[l] += tr_ld(dy, j + l, dt) * tr_ld(w, j + l, dt) * tr_ld(x, j + l, dt);
    }
    float tail = 0;
    for (; j < h; j++) tail += tr_ld(dy, j, dt) * tr_ld(w, j, dt) * tr_ld(x, j, dt);
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7])) + tail;
}

TR_INLINE void bwd_rows(void *p, int64_t i0, int64_t i1, tr_dtype dt) {
    const norm_args *a = p;
    const int64_t h = a->h;
    for (int64_t i = i0; i < i1; i++) {
        const void *x = tr_cat(a->inp, i * h, dt), *dy = tr_cat(a->dout, i * h, dt);
        void *dx = tr_at(a->dinp, i * h, dt);
        const float r = a->rstd_in[i];
        const float c = r * r * r / (float)h * dot3(dy, a->w, x, h, dt);
        TR_SIMD
        for (int64_t j = 0; j < h; j++) {
            float d = r * tr_ld(dy, j, dt) * tr_ld(a->w, j, dt) - tr_ld(x, j, dt) * c;
            tr_st(dx, j, tr_ld(dx, j, dt) + d, dt);
        }
    }
}
TR_RANGE_BY_DTYPE(bwd_rows)

/* Column tiles [t0, t1) of dw: each column sums its rows in order. */
TR_INLINE void bwd_w_cols(void *p, int64_t t0, int64_t t1, tr_dtype dt) {
    const norm_args *a = p;
    const int64_t h = a->h;
    for (int64_t t = t0; t < t1; t++) {
        const int64_t j0 = t * COLS, jn = h - j0 < COLS ? h - j0 : COLS;
        float acc[COLS] = {0};
        for (int64_t i = 0; i < a->n; i++) {
            const void *dy = tr_cat(a->dout, i * h + j0, dt), *x = tr_cat(a->inp, i * h + j0, dt);
            const float r = a->rstd_in[i];
            TR_SIMD
            for (int64_t j = 0; j < jn; j++) acc[j] += tr_ld(dy, j, dt) * tr_ld(x, j, dt) * r;
        }
        for (int64_t j = 0; j < jn; j++) tr_st(a->dw, j0 + j, tr_ld(a->dw, j0 + j, dt) + acc[j], dt);
    }
}
TR_RANGE_BY_DTYPE(bwd_w_cols)

void tr_cpu_rmsnorm_bwd(void *dinp, void *dw, const void *dout, const void *inp, const void *w,
                        const float *rstd, int64_t n, int64_t h, tr_dtype dt) {
    norm_args a = {.dinp = dinp, .dw = dw, .rstd_in = rstd, .inp = inp, .w = w, .dout = dout, .n = n, .h = h};
    tr_par_for(n, n * h, TR_BY_DTYPE(bwd_rows, dt), &a);
    tr_par_for((h + COLS - 1) / COLS, n * h, TR_BY_DTYPE(bwd_w_cols, dt), &a);
}
