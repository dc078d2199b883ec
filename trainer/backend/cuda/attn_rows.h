/* The CUDA backend's attention and fallback matmul, one output row per
 * thread, written once for both sides: compiled by nvcc as __host__
 * __device__ functions that the kernels of attention_cuda.cu and
 * matmul_cuda.cu call with their thread's index, and by the C compiler for
 * the tests, which call the same functions in a loop over every index on the
 * CPU (tests/trainer_cuda_rows.c runs them through the op harness against
 * the reference backend and finite differences). What the GPU adds to these
 * bodies is only the launch: the index arithmetic, the causal bounds, the
 * online softmax and the grouped-query sums are checked here without one.
 *
 * The algorithms are those of the CPU backend (trainer/ops/ops_attn_eager.c,
 * ops_attn_flash.c, ops_matmul.c), with the same equations and the same
 * order of fp32 sums within a row:
 *   flash forward, query row t of head hq (kv head g = hq / (nh/nkv)):
 *     online softmax over tiles of AR_TILE keys j <= t (Dao et al. 2022,
 *     "FlashAttention"; Milakov & Gimelshein 2018): m' = max(m, max s_j),
 *     c = e^(m - m'), l = l c + sum e^(s_j - m'), acc = acc c + sum e^(s_j - m') v_j;
 *     o = acc / l, lse = m + log l
 *   flash backward: P_tj = e^(s_tj - lse_t), D_t = do_t . o_t,
 *     dS_tj = P_tj (do_t . v_j - D_t); dq_t = scale sum_j dS_tj k_j (a thread
 *     per query row); dk_j = scale sum_{hq in g, t >= j} dS_tj q_t and
 *     dv_j = sum P_tj do_t (a thread per key row)
 *   eager: the probabilities P (B,nh,T,T) stored, zero above the diagonal;
 *     backward through the dP workspace as ops_attn_eager.c
 *   fallback matmul: out = inp w^T + bias, one output element per thread
 *     (used only where cuBLASLt offers no algorithm for a shape).
 *
 * bf16 is stored as the upper half of an fp32 and rounded to nearest even,
 * bit for bit as dtype.h does (repeated here because dtype.h's functions
 * are host-only). Per-thread accumulators are the caller's: a kernel passes
 * a register array sized by its head-dim template, a test a stack array. */
#ifndef TR_CUDA_ATTN_ROWS_H
#define TR_CUDA_ATTN_ROWS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "dtype.h"

#ifdef __CUDACC__
#define AR_FN static __host__ __device__ __forceinline__
#else
#define AR_FN static inline
#endif

#define AR_TILE 32 /* keys per online-softmax step, as ops_attn_flash.c */

/* Shapes of one attention call: qkv is (B,T,qd+2kvd), out (B,T,qd). */
typedef struct ar_shape {
    int64_t B, T, nh, nkv, hd;
} ar_shape;

AR_FN float ar_bf16_to_f32(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
/* Round to nearest even; NaN stays a quiet NaN (dtype.h's tr_f32_to_bf16). */
AR_FN uint16_t ar_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
AR_FN float ar_ld(const void *p, int64_t i, tr_dtype dt) {
    return dt == TR_BF16 ? ar_bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}
AR_FN void ar_st(void *p, int64_t i, float v, tr_dtype dt) {
    if (dt == TR_BF16) ((uint16_t *)p)[i] = ar_f32_to_bf16(v);
    else ((float *)p)[i] = v;
}
/* a[ia..] . b[ib..] over n elements, one fp32 sum in index order. */
AR_FN float ar_dot(const void *a, int64_t ia, const void *b, int64_t ib, int64_t n, tr_dtype dt) {
    float s = 0;
    for (int64_t d = 0; d < n; d++) s += ar_ld(a, ia + d, dt) * ar_ld(b, ib + d, dt);
    return s;
}

/* Offsets into qkv (row = qd + 2 kvd): the query of head hq at (b, t), and
 * the key and value of kv head g at (b, j). */
AR_FN int64_t ar_row(ar_shape s) { return (s.nh + 2 * s.nkv) * s.hd; }
AR_FN int64_t ar_q_at(ar_shape s, int64_t b, int64_t t, int64_t hq) { return (b * s.T + t) * ar_row(s) + hq * s.hd; }
AR_FN int64_t ar_k_at(ar_shape s, int64_t b, int64_t j, int64_t g) {
    return (b * s.T + j) * ar_row(s) + s.nh * s.hd + g * s.hd;
}
AR_FN int64_t ar_v_at(ar_shape s, int64_t b, int64_t j, int64_t g) { return ar_k_at(s, b, j, g) + s.nkv * s.hd; }
/* The attention output (and its gradient) of head hq at (b, t): (B,T,qd). */
AR_FN int64_t ar_o_at(ar_shape s, int64_t b, int64_t t, int64_t hq) { return (b * s.T + t) * s.nh * s.hd + hq * s.hd; }
AR_FN float ar_scale(ar_shape s) { return 1.0f / sqrtf((float)s.hd); }

/* acc[0..hd) = acc * c + e * v[iv..]. */
AR_FN void ar_axpby(float *acc, float c, float e, const void *v, int64_t iv, int64_t hd, tr_dtype dt) {
    for (int64_t d = 0; d < hd; d++) acc[d] = acc[d] * c + e * ar_ld(v, iv + d, dt);
}

/* Flash forward of query row r of (b, hq, t); out may be NULL (lse only).
 * acc holds at least hd floats. */
AR_FN void ar_flash_fwd_row(void *out, float *lse, const void *qkv, ar_shape s, int64_t r, float *acc,
                            tr_dtype dt) {
    const int64_t b = r / (s.nh * s.T), hq = r / s.T % s.nh, t = r % s.T, g = hq / (s.nh / s.nkv);
    const int64_t iq = ar_q_at(s, b, t, hq);
    const float scale = ar_scale(s);
    float m = -INFINITY, l = 0, sc[AR_TILE];
    for (int64_t d = 0; d < s.hd; d++) acc[d] = 0;
    for (int64_t j0 = 0; j0 <= t; j0 += AR_TILE) {
        const int64_t jn = t + 1 - j0 < AR_TILE ? t + 1 - j0 : AR_TILE;
        float mt = -INFINITY;
        for (int64_t j = 0; j < jn; j++) {
            sc[j] = scale * ar_dot(qkv, iq, qkv, ar_k_at(s, b, j0 + j, g), s.hd, dt);
            mt = sc[j] > mt ? sc[j] : mt;
        }
        const float mn = m > mt ? m : mt, c = expf(m - mn);
        l *= c;
        for (int64_t j = 0; j < jn; j++) {
            const float e = expf(sc[j] - mn);
            l += e;
            if (out) ar_axpby(acc, j == 0 ? c : 1.0f, e, qkv, ar_v_at(s, b, j0 + j, g), s.hd, dt);
        }
        m = mn;
    }
    lse[r] = m + logf(l);
    if (!out) return;
    for (int64_t d = 0; d < s.hd; d++) ar_st(out, ar_o_at(s, b, t, hq) + d, acc[d] / l, dt);
}

/* D_t = do_t . o_t of row r of (b, hq, t): the row sum of P dP. */
AR_FN float ar_flash_d(const void *dout, const void *o, ar_shape s, int64_t r, tr_dtype dt) {
    const int64_t b = r / (s.nh * s.T), hq = r / s.T % s.nh, t = r % s.T, io = ar_o_at(s, b, t, hq);
    return ar_dot(dout, io, o, io, s.hd, dt);
}
/* dD[r] = D of every row r, for the key-row pass (a kernel of its own on the GPU). */
AR_FN void ar_flash_d_row(float *dD, const void *dout, const void *o, ar_shape s, int64_t r, tr_dtype dt) {
    dD[r] = ar_flash_d(dout, o, s, r, dt);
}

/* dq of query row r of (b, hq, t), written (not accumulated). */
AR_FN void ar_flash_bwd_q_row(void *dqkv, const void *dout, const void *qkv, const void *o, const float *lse,
                              ar_shape s, int64_t r, float *acc, tr_dtype dt) {
    const int64_t b = r / (s.nh * s.T), hq = r / s.T % s.nh, t = r % s.T, g = hq / (s.nh / s.nkv);
    const int64_t iq = ar_q_at(s, b, t, hq), io = ar_o_at(s, b, t, hq);
    const float scale = ar_scale(s), D = ar_flash_d(dout, o, s, r, dt), L = lse[r];
    for (int64_t d = 0; d < s.hd; d++) acc[d] = 0;
    for (int64_t j = 0; j <= t; j++) {
        const int64_t ik = ar_k_at(s, b, j, g);
        const float p = expf(scale * ar_dot(qkv, iq, qkv, ik, s.hd, dt) - L);
        const float ds = p * (ar_dot(dout, io, qkv, ar_v_at(s, b, j, g), s.hd, dt) - D);
        ar_axpby(acc, 1.0f, ds, qkv, ik, s.hd, dt);
    }
    for (int64_t d = 0; d < s.hd; d++) ar_st(dqkv, iq + d, scale * acc[d], dt);
}

/* dk and dv of key row r of (b, g, j), written: the query heads of group g in
 * order, each over t = j..T-1 in order. dD holds every row's D (NULL: each
 * is recomputed). ak and av hold at least hd floats each. */
AR_FN void ar_flash_bwd_kv_row(void *dqkv, const void *dout, const void *qkv, const void *o, const float *lse,
                               const float *dD, ar_shape s, int64_t r, float *ak, float *av, tr_dtype dt) {
    const int64_t b = r / (s.nkv * s.T), g = r / s.T % s.nkv, j = r % s.T, group = s.nh / s.nkv;
    const int64_t ik = ar_k_at(s, b, j, g), iv = ar_v_at(s, b, j, g);
    const float scale = ar_scale(s);
    for (int64_t d = 0; d < s.hd; d++) ak[d] = av[d] = 0;
    for (int64_t hq = g * group; hq < (g + 1) * group; hq++)
        for (int64_t t = j; t < s.T; t++) {
            const int64_t row = (b * s.nh + hq) * s.T + t, iq = ar_q_at(s, b, t, hq), io = ar_o_at(s, b, t, hq);
            const float D = dD ? dD[row] : ar_flash_d(dout, o, s, row, dt);
            const float p = expf(scale * ar_dot(qkv, iq, qkv, ik, s.hd, dt) - lse[row]);
            const float ds = p * (ar_dot(dout, io, qkv, iv, s.hd, dt) - D);
            ar_axpby(ak, 1.0f, ds, qkv, iq, s.hd, dt);
            ar_axpby(av, 1.0f, p, dout, io, s.hd, dt);
        }
    for (int64_t d = 0; d < s.hd; d++) {
        ar_st(dqkv, ik + d, scale * ak[d], dt);
        ar_st(dqkv, iv + d, av[d], dt);
    }
}

/* Eager forward of query row r of (b, hq, t): the probability row (zero
 * above the diagonal) and, unless out is NULL, the output row. Three passes
 * over the keys (max, sum, normalize), as ops_attn_eager.c. */
AR_FN void ar_eager_fwd_row(void *out, void *probs, const void *qkv, ar_shape s, int64_t r, float *acc,
                            tr_dtype dt) {
    const int64_t b = r / (s.nh * s.T), hq = r / s.T % s.nh, t = r % s.T, g = hq / (s.nh / s.nkv);
    const int64_t iq = ar_q_at(s, b, t, hq), ip = ((b * s.nh + hq) * s.T + t) * s.T;
    const float scale = ar_scale(s);
    float mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j <= t; j++) {
        const float sj = scale * ar_dot(qkv, iq, qkv, ar_k_at(s, b, j, g), s.hd, dt);
        mx = sj > mx ? sj : mx;
    }
    for (int64_t j = 0; j <= t; j++) sum += expf(scale * ar_dot(qkv, iq, qkv, ar_k_at(s, b, j, g), s.hd, dt) - mx);
    for (int64_t j = 0; j < s.T; j++) {
        float pj = 0;
        if (j <= t) pj = expf(scale * ar_dot(qkv, iq, qkv, ar_k_at(s, b, j, g), s.hd, dt) - mx) / sum;
        ar_st(probs, ip + j, pj, dt);
    }
    if (!out) return;
    for (int64_t d = 0; d < s.hd; d++) acc[d] = 0;
    for (int64_t j = 0; j <= t; j++) ar_axpby(acc, 1.0f, ar_ld(probs, ip + j, dt), qkv, ar_v_at(s, b, j, g), s.hd, dt);
    for (int64_t d = 0; d < s.hd; d++) ar_st(out, ar_o_at(s, b, t, hq) + d, acc[d], dt);
}

/* Eager backward, pass 1, row r of (b, hq, t): dP_tj = do_t . v_j into the
 * workspace, then dS_tj = P_tj (dP_tj - sum_k P_tk dP_tk) in place. */
AR_FN void ar_eager_bwd_ds_row(void *dprobs, const void *dout, const void *qkv, const void *probs, ar_shape s,
                               int64_t r, tr_dtype dt) {
    const int64_t b = r / (s.nh * s.T), hq = r / s.T % s.nh, t = r % s.T, g = hq / (s.nh / s.nkv);
    const int64_t io = ar_o_at(s, b, t, hq), ip = ((b * s.nh + hq) * s.T + t) * s.T;
    float rowsum = 0;
    for (int64_t j = 0; j <= t; j++) {
        ar_st(dprobs, ip + j, ar_dot(dout, io, qkv, ar_v_at(s, b, j, g), s.hd, dt), dt);
        rowsum += ar_ld(probs, ip + j, dt) * ar_ld(dprobs, ip + j, dt);
    }
    for (int64_t j = 0; j < s.T; j++)
        ar_st(dprobs, ip + j, j <= t ? ar_ld(probs, ip + j, dt) * (ar_ld(dprobs, ip + j, dt) - rowsum) : 0.0f, dt);
}

/* Eager backward, pass 2: dq of row r of (b, hq, t) from dS. */
AR_FN void ar_eager_bwd_q_row(void *dqkv, const void *dprobs, const void *qkv, ar_shape s, int64_t r, float *acc,
                              tr_dtype dt) {
    const int64_t b = r / (s.nh * s.T), hq = r / s.T % s.nh, t = r % s.T, g = hq / (s.nh / s.nkv);
    const int64_t ip = ((b * s.nh + hq) * s.T + t) * s.T;
    for (int64_t d = 0; d < s.hd; d++) acc[d] = 0;
    for (int64_t j = 0; j <= t; j++) ar_axpby(acc, 1.0f, ar_ld(dprobs, ip + j, dt), qkv, ar_k_at(s, b, j, g), s.hd, dt);
    const float scale = ar_scale(s);
    for (int64_t d = 0; d < s.hd; d++) ar_st(dqkv, ar_q_at(s, b, t, hq) + d, scale * acc[d], dt);
}

/* Eager backward, pass 3: dk and dv of key row r of (b, g, j). */
AR_FN void ar_eager_bwd_kv_row(void *dqkv, const void *dprobs, const void *dout, const void *qkv, const void *probs,
                               ar_shape s, int64_t r, float *ak, float *av, tr_dtype dt) {
    const int64_t b = r / (s.nkv * s.T), g = r / s.T % s.nkv, j = r % s.T, group = s.nh / s.nkv;
    for (int64_t d = 0; d < s.hd; d++) ak[d] = av[d] = 0;
    for (int64_t hq = g * group; hq < (g + 1) * group; hq++)
        for (int64_t t = j; t < s.T; t++) {
            const int64_t pi = ((b * s.nh + hq) * s.T + t) * s.T + j;
            ar_axpby(ak, 1.0f, ar_ld(dprobs, pi, dt), qkv, ar_q_at(s, b, t, hq), s.hd, dt);
            ar_axpby(av, 1.0f, ar_ld(probs, pi, dt), dout, ar_o_at(s, b, t, hq), s.hd, dt);
        }
    const float scale = ar_scale(s);
    for (int64_t d = 0; d < s.hd; d++) {
        ar_st(dqkv, ar_k_at(s, b, j, g) + d, scale * ak[d], dt);
        ar_st(dqkv, ar_v_at(s, b, j, g) + d, av[d], dt);
    }
}

/* ---- the fallback matmul: out (n,oc) = inp (n,c) w(oc,c)^T + bias ---- */

/* Element e = i*oc + o of out. */
AR_FN void ar_mm_fwd_elem(void *out, const void *inp, const void *w, const void *bias, int64_t c, int64_t oc,
                          int64_t e, tr_dtype dt) {
    const int64_t i = e / oc, o = e % oc;
    float acc = ar_dot(inp, i * c, w, o * c, c, dt);
    if (bias) acc += ar_ld(bias, o, dt);
    ar_st(out, e, acc, dt);
}
/* Element e = i*c + k of dinp = dout w, written. */
AR_FN void ar_mm_bwd_dinp_elem(void *dinp, const void *dout, const void *w, int64_t c, int64_t oc, int64_t e,
                               tr_dtype dt) {
    const int64_t i = e / c, k = e % c;
    float acc = 0;
    for (int64_t o = 0; o < oc; o++) acc += ar_ld(dout, i * oc + o, dt) * ar_ld(w, o * c + k, dt);
    ar_st(dinp, e, acc, dt);
}
/* Element e = o*c + k of dw += dout^T inp, rows in order. */
AR_FN void ar_mm_bwd_dw_elem(void *dw, const void *dout, const void *inp, int64_t n, int64_t c, int64_t oc, int64_t e,
                             tr_dtype dt) {
    const int64_t o = e / c, k = e % c;
    float acc = 0;
    for (int64_t i = 0; i < n; i++) acc += ar_ld(dout, i * oc + o, dt) * ar_ld(inp, i * c + k, dt);
    ar_st(dw, e, ar_ld(dw, e, dt) + acc, dt);
}
/* dbias[o] += sum over rows of dout[., o], rows in order (also the cuBLASLt
 * path's bias gradient). */
AR_FN void ar_bias_grad_col(void *dbias, const void *dout, int64_t n, int64_t oc, int64_t o, tr_dtype dt) {
    float acc = 0;
    for (int64_t i = 0; i < n; i++) acc += ar_ld(dout, i * oc + o, dt);
    ar_st(dbias, o, ar_ld(dbias, o, dt) + acc, dt);
}
/* out[e] += bias[e % oc] (the cuBLASLt path's bias). */
AR_FN void ar_bias_add_elem(void *out, const void *bias, int64_t oc, int64_t e, tr_dtype dt) {
    ar_st(out, e, ar_ld(out, e, dt) + ar_ld(bias, e % oc, dt), dt);
}

#endif
