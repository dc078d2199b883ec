/* Rotary position embeddings (Su et al. 2021) in the HF Llama layout
 * (rotate_half): within each head, element i pairs with i + hd/2 and the pair
 * turns by the angle pos * theta^(-2i/hd):
 *   y_i        = x_i cos - x_{i+hd/2} sin
 *   y_{i+hd/2} = x_{i+hd/2} cos + x_i sin
 * The rotation is orthogonal, so the backward is the rotation by -angle. */
#include <math.h>

#include "config.h"
#include "ops.h"
#include "parallel.h"

static void rope(void *qkv, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd, double theta,
                 tr_dtype dt, float sign) {
    int64_t half = hd / 2, qd = nh * hd, row = qd + 2 * nkv * hd, heads = nh + nkv;
    double inv_freq[TR_MAX_HEAD_DIM / 2];
    for (int64_t i = 0; i < half; i++) inv_freq[i] = pow(theta, -2.0 * (double)i / (double)hd);
    TR_PAR_FOR2(B * T * heads * hd)
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            float cs[TR_MAX_HEAD_DIM / 2], sn[TR_MAX_HEAD_DIM / 2];
            for (int64_t i = 0; i < half; i++) {
                double a = (double)t * inv_freq[i];
                cs[i] = (float)cos(a);
                sn[i] = sign * (float)sin(a);
            }
            /* q heads then k heads: they sit back to back at the start of the row. */
            for (int64_t hh = 0; hh < heads; hh++) {
                int64_t base = (b * T + t) * row + hh * hd;
                for (int64_t i = 0; i < half; i++) {
                    float x1 = tr_ld(qkv, base + i, dt), x2 = tr_ld(qkv, base + i + half, dt);
                    tr_st(qkv, base + i, x1 * cs[i] - x2 * sn[i], dt);
                    tr_st(qkv, base + i + half, x2 * cs[i] + x1 * sn[i], dt);
                }
            }
        }
}

void tr_cpu_rope_fwd(void *qkv, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                     double theta, tr_dtype dt) {
    rope(qkv, B, T, nh, nkv, hd, theta, dt, 1.0f);
}

void tr_cpu_rope_bwd(void *dqkv, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                     double theta, tr_dtype dt) {
    rope(dqkv, B, T, nh, nkv, hd, theta, dt, -1.0f);
}
