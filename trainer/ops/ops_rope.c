/* Rotary position embeddings (Su et al. 2021) in the HF Llama layout
 * (rotate_half): within each head, element i pairs with i + hd/2 and the pair
 * turns by the angle pos * theta^(-2i/hd):
 *   y_i        = x_i cos - x_{i+hd/2} sin
 *   y_{i+hd/2} = x_{i+hd/2} cos + x_i sin
 * The rotation is orthogonal, so the backward is the rotation by -angle. */
#include <math.h>

#include "config.h"
#include "ops.h"

typedef struct rope_args {
    void *qkv;
    int64_t B, T, nh, nkv, hd;
    const double *inv_freq;
    float sign;
} rope_args;

/* Positions [t0, t1): the angles of a position are computed once and turn
 * every q and k head of that position in every sequence of the batch. */
TR_INLINE void rope_positions(void *p, int64_t t0, int64_t t1, tr_dtype dt) {
    const rope_args *a = p;
    const int64_t hd = a->hd, half = hd / 2, row = (a->nh + 2 * a->nkv) * hd, heads = a->nh + a->nkv;
    for (int64_t t = t0; t < t1; t++) {
        float cs[TR_MAX_HEAD_DIM / 2], sn[TR_MAX_HEAD_DIM / 2];
        for (int64_t i = 0; i < half; i++) {
            double ang = (double)t * a->inv_freq[i];
            cs[i] = (float)cos(ang);
            sn[i] = a->sign * (float)sin(ang);
        }
        for (int64_t b = 0; b < a->B; b++)
            /* q heads then k heads: they sit back to back at the start of the row. */
            for (int64_t hh = 0; hh < heads; hh++) {
                void *x = tr_at(a->qkv, (b * a->T + t) * row + hh * hd, dt);
                void *x2 = tr_at(x, half, dt);
                TR_SIMD
                for (int64_t i = 0; i < half; i++) {
                    float v1 = tr_ld(x, i, dt), v2 = tr_ld(x2, i, dt);
                    tr_st(x, i, v1 * cs[i] - v2 * sn[i], dt);
                    tr_st(x2, i, v2 * cs[i] + v1 * sn[i], dt);
                }
            }
    }
}
TR_RANGE_BY_DTYPE(rope_positions)

static void rope(void *qkv, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd, double theta,
                 tr_dtype dt, float sign) {
    const int64_t half = hd / 2;
    double inv_freq[TR_MAX_HEAD_DIM / 2];
    for (int64_t i = 0; i < half; i++) inv_freq[i] = pow(theta, -2.0 * (double)i / (double)hd);
    rope_args a = {qkv, B, T, nh, nkv, hd, inv_freq, sign};
    tr_par_for(T, B * T * (nh + nkv) * hd, TR_BY_DTYPE(rope_positions, dt), &a);
}

void tr_cpu_rope_fwd(void *qkv, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                     double theta, tr_dtype dt) {
    rope(qkv, B, T, nh, nkv, hd, theta, dt, 1.0f);
}

void tr_cpu_rope_bwd(void *dqkv, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                     double theta, tr_dtype dt) {
    rope(dqkv, B, T, nh, nkv, hd, theta, dt, -1.0f);
}
