/* RMSNorm (Zhang & Sennrich 2019), as in HF LlamaRMSNorm:
 *   r   = 1 / sqrt(mean_j x_j^2 + eps)
 *   y_j = w_j * x_j * r
 * Backward, with g_j = dy_j * w_j:
 *   dx_j = r * g_j - x_j * r^3 / h * sum_k g_k x_k
 *   dw_j += sum_rows dy_j * x_j * r */
#include <math.h>

#include "ops.h"
#include "parallel.h"

void tr_cpu_rmsnorm_fwd(void *out, float *rstd, const void *inp, const void *w, int64_t n, int64_t h,
                        double eps, tr_dtype dt) {
    TR_PAR_FOR(n * h)
    for (int64_t i = 0; i < n; i++) {
        const void *x = tr_cat(inp, i * h, dt);
        float ss = 0;
        for (int64_t j = 0; j < h; j++) {
            float v = tr_ld(x, j, dt);
            ss += v * v;
        }
        float r = 1.0f / sqrtf(ss / (float)h + (float)eps);
        rstd[i] = r;
        for (int64_t j = 0; j < h; j++) tr_st(out, i * h + j, tr_ld(x, j, dt) * r * tr_ld(w, j, dt), dt);
    }
}

void tr_cpu_rmsnorm_bwd(void *dinp, void *dw, const void *dout, const void *inp, const void *w,
                        const float *rstd, int64_t n, int64_t h, tr_dtype dt) {
    TR_PAR_FOR(n * h)
    for (int64_t i = 0; i < n; i++) {
        const void *x = tr_cat(inp, i * h, dt), *dy = tr_cat(dout, i * h, dt);
        float r = rstd[i], gx = 0;
        for (int64_t j = 0; j < h; j++) gx += tr_ld(dy, j, dt) * tr_ld(w, j, dt) * tr_ld(x, j, dt);
        float c = r * r * r / (float)h * gx;
        for (int64_t j = 0; j < h; j++) {
            float dx = r * tr_ld(dy, j, dt) * tr_ld(w, j, dt) - tr_ld(x, j, dt) * c;
            tr_st(dinp, i * h + j, tr_ld(dinp, i * h + j, dt) + dx, dt);
        }
    }
    TR_PAR_FOR(n * h)
    for (int64_t j = 0; j < h; j++) {
        float acc = 0;
        for (int64_t i = 0; i < n; i++) acc += tr_ld(dout, i * h + j, dt) * tr_ld(inp, i * h + j, dt) * rstd[i];
        tr_st(dw, j, tr_ld(dw, j, dt) + acc, dt);
    }
}
