/* ftrain's CPU ops: every backward against central finite differences of its
 * forward, forwards against double-precision references written here, eager
 * against flash attention, and bf16 rounding against hand-worked values.
 *
 * Finite differences: the objective is f(x) = sum_i out_i R_i with a fixed
 * pseudo-random R, summed in double; step e = 1e-2 on fp32 inputs of order 1;
 * central differences have error O(e^2 f''') ~ 1e-4 plus fp32 rounding of f
 * (~1e-6 / 2e = 5e-5), so analytic and numeric gradients must agree within
 * 2e-3 absolute + 1e-2 relative. A wrong formula misses by O(1). */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "ops.h"
#include "optim.h"
#include "parallel.h"
#include "test_util.h"

#define FD_EPS 1e-2f
#define FD_ABS 2e-3
#define FD_REL 1e-2

static uint64_t rng_state = 88172645463325252ull;
static float frand(void) { /* xorshift64, uniform in [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
static float *rand_vec(int64_t n) {
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = frand();
    return v;
}
static float *zeros(int64_t n) { return calloc((size_t)n, sizeof(float)); }

static double dotd(const float *a, const float *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

/* f evaluated by a closure: recompute the op's output and return sum out*R. */
typedef double (*objective)(void *ctx);

static void check_fd(const char *what, float *x, int64_t n, const float *grad, objective f, void *ctx) {
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        x[i] = v + FD_EPS;
        double fp = f(ctx);
        x[i] = v - FD_EPS;
        double fm = f(ctx);
        x[i] = v;
        double num = (fp - fm) / (2.0 * FD_EPS);
        ck_assert_msg(fabs(grad[i] - num) <= FD_ABS + FD_REL * fabs(num),
                      "%s[%lld]: analytic %.6g, finite difference %.6g", what, (long long)i, grad[i], num);
    }
}

/* ---- matmul ---- */
typedef struct { float *inp, *w, *b, *out, *R; int64_t n, c, oc; } mm_ctx;
static double mm_f(void *p) {
    mm_ctx *m = p;
    tr_cpu_matmul_fwd(m->out, m->inp, m->w, m->b, m->n, m->c, m->oc, TR_F32);
    return dotd(m->out, m->R, m->n * m->oc);
}

START_TEST(test_matmul) {
    /* c = 70 spans two of the backward's 64-column tiles. */
    mm_ctx m = {.n = 3, .c = 70, .oc = 5};
    m.inp = rand_vec(m.n * m.c);
    m.w = rand_vec(m.oc * m.c);
    m.b = rand_vec(m.oc);
    m.out = zeros(m.n * m.oc);
    m.R = rand_vec(m.n * m.oc);
    mm_f(&m);
    for (int64_t i = 0; i < m.n; i++)
        for (int64_t o = 0; o < m.oc; o++) {
            double ref = m.b[o] + dotd(m.inp + i * m.c, m.w + o * m.c, m.c);
            ck_assert_close(m.out[i * m.oc + o], ref, 1e-5, 1e-5);
        }
    float *dinp = zeros(m.n * m.c), *dw = zeros(m.oc * m.c), *db = zeros(m.oc);
    tr_cpu_matmul_bwd(dinp, dw, db, m.R, m.inp, m.w, m.n, m.c, m.oc, TR_F32);
    check_fd("dinp", m.inp, m.n * m.c, dinp, mm_f, &m);
    check_fd("dw", m.w, m.oc * m.c, dw, mm_f, &m);
    check_fd("dbias", m.b, m.oc, db, mm_f, &m);
    /* Weight gradients accumulate; input gradients are overwritten. */
    float before = dw[7], dbefore = dinp[3];
    tr_cpu_matmul_bwd(dinp, dw, NULL, m.R, m.inp, m.w, m.n, m.c, m.oc, TR_F32);
    ck_assert_close(dw[7], 2 * before, 1e-6, 1e-6);
    ck_assert_close(dinp[3], dbefore, 0, 0);
    free(m.inp); free(m.w); free(m.b); free(m.out); free(m.R); free(dinp); free(dw); free(db);
}
END_TEST

/* ---- rmsnorm ---- */
typedef struct { float *x, *w, *out, *rstd, *R; int64_t n, h; } rn_ctx;
static double rn_f(void *p) {
    rn_ctx *m = p;
    tr_cpu_rmsnorm_fwd(m->out, m->rstd, m->x, m->w, m->n, m->h, 1e-5, TR_F32);
    return dotd(m->out, m->R, m->n * m->h);
}

START_TEST(test_rmsnorm) {
    rn_ctx m = {.n = 4, .h = 10};
    m.x = rand_vec(m.n * m.h);
    m.w = rand_vec(m.h);
    m.out = zeros(m.n * m.h);
    m.rstd = zeros(m.n);
    m.R = rand_vec(m.n * m.h);
    rn_f(&m);
    for (int64_t i = 0; i < m.n; i++) {
        double ms = dotd(m.x + i * m.h, m.x + i * m.h, m.h) / (double)m.h;
        double r = 1.0 / sqrt(ms + 1e-5);
        ck_assert_close(m.rstd[i], r, 1e-6, 1e-5);
        for (int64_t j = 0; j < m.h; j++) ck_assert_close(m.out[i * m.h + j], m.x[i * m.h + j] * r * m.w[j], 1e-6, 1e-5);
    }
    float *dx = zeros(m.n * m.h), *dw = zeros(m.h);
    tr_cpu_rmsnorm_bwd(dx, dw, m.R, m.x, m.w, m.rstd, m.n, m.h, TR_F32);
    check_fd("dx", m.x, m.n * m.h, dx, rn_f, &m);
    check_fd("dw", m.w, m.h, dw, rn_f, &m);
    free(m.x); free(m.w); free(m.out); free(m.rstd); free(m.R); free(dx); free(dw);
}
END_TEST

/* ---- rope ---- */
typedef struct { float *x, *work, *R; int64_t B, T, nh, nkv, hd, n; } rp_ctx;
static double rp_f(void *p) {
    rp_ctx *m = p;
    memcpy(m->work, m->x, (size_t)m->n * sizeof(float));
    tr_cpu_rope_fwd(m->work, m->B, m->T, m->nh, m->nkv, m->hd, 10000.0, TR_F32);
    return dotd(m->work, m->R, m->n);
}

START_TEST(test_rope) {
    rp_ctx m = {.B = 2, .T = 5, .nh = 2, .nkv = 1, .hd = 6};
    const int64_t row = (m.nh + 2 * m.nkv) * m.hd;
    m.n = m.B * m.T * row;
    m.x = rand_vec(m.n);
    m.work = zeros(m.n);
    m.R = rand_vec(m.n);
    rp_f(&m);
    /* Position 3, head 1 (a query head), pair i = 1: angle 3 * 10000^(-2/6). */
    int64_t base = (0 * m.T + 3) * row + 1 * m.hd;
    double a = 3.0 * pow(10000.0, -2.0 / 6.0);
    double x1 = m.x[base + 1], x2 = m.x[base + 1 + 3];
    ck_assert_close(m.work[base + 1], x1 * cos(a) - x2 * sin(a), 1e-6, 1e-5);
    ck_assert_close(m.work[base + 4], x2 * cos(a) + x1 * sin(a), 1e-6, 1e-5);
    /* v is left alone; position 0 is the identity. */
    int64_t v0 = (1 * m.T + 2) * row + (m.nh + m.nkv) * m.hd;
    for (int64_t d = 0; d < m.hd; d++) ck_assert_close(m.work[v0 + d], m.x[v0 + d], 0, 0);
    for (int64_t d = 0; d < row; d++) ck_assert_close(m.work[d], m.x[d], 1e-7, 0);
    float *g = malloc((size_t)m.n * sizeof(float));
    memcpy(g, m.R, (size_t)m.n * sizeof(float));
    tr_cpu_rope_bwd(g, m.B, m.T, m.nh, m.nkv, m.hd, 10000.0, TR_F32);
    check_fd("dx", m.x, m.n, g, rp_f, &m);
    free(m.x); free(m.work); free(m.R); free(g);
}
END_TEST

/* ---- swiglu ---- */
typedef struct { float *gu, *out, *R; int64_t n, I; } sw_ctx;
static double sw_f(void *p) {
    sw_ctx *m = p;
    tr_cpu_swiglu_fwd(m->out, m->gu, m->n, m->I, TR_F32);
    return dotd(m->out, m->R, m->n * m->I);
}

START_TEST(test_swiglu) {
    sw_ctx m = {.n = 3, .I = 5};
    m.gu = rand_vec(m.n * 2 * m.I);
    m.out = zeros(m.n * m.I);
    m.R = rand_vec(m.n * m.I);
    sw_f(&m);
    double g = m.gu[2], u = m.gu[m.I + 2];
    ck_assert_close(m.out[2], g / (1 + exp(-g)) * u, 1e-6, 1e-5);
    float *d = zeros(m.n * 2 * m.I);
    tr_cpu_swiglu_bwd(d, m.R, m.gu, m.n, m.I, TR_F32);
    check_fd("dgu", m.gu, m.n * 2 * m.I, d, sw_f, &m);
    free(m.gu); free(m.out); free(m.R); free(d);
}
END_TEST

/* ---- embedding ---- */
typedef struct { float *wte, *out, *R; int32_t *tok; int64_t n, h, V; } em_ctx;
static double em_f(void *p) {
    em_ctx *m = p;
    tr_cpu_embedding_fwd(m->out, m->tok, m->wte, m->n, m->h, TR_F32);
    return dotd(m->out, m->R, m->n * m->h);
}

START_TEST(test_embedding) {
    int32_t tok[] = {3, 1, 3, 0, 3, 5}; /* repeats, and rows 2, 4 unused */
    em_ctx m = {.n = 6, .h = 70, .V = 6, .tok = tok};
    m.wte = rand_vec(m.V * m.h);
    m.out = zeros(m.n * m.h);
    m.R = rand_vec(m.n * m.h);
    em_f(&m);
    ck_assert_close(m.out[2 * m.h + 5], m.wte[3 * m.h + 5], 0, 0);
    float *d = zeros(m.V * m.h);
    tr_cpu_embedding_bwd(d, m.R, tok, m.n, m.h, TR_F32);
    check_fd("dwte", m.wte, m.V * m.h, d, em_f, &m);
    for (int64_t j = 0; j < m.h; j++) {
        ck_assert_close(d[2 * m.h + j], 0, 0, 0);
        double want = (double)m.R[0 * m.h + j] + m.R[2 * m.h + j] + m.R[4 * m.h + j];
        ck_assert_close(d[3 * m.h + j], want, 1e-6, 1e-6);
    }
    free(m.wte); free(m.out); free(m.R); free(d);
}
END_TEST

/* ---- cross-entropy ---- */
typedef struct { float *z, *loss; int32_t *t; int64_t n, V; } ce_ctx;
static double ce_f(void *p) {
    ce_ctx *m = p;
    tr_cpu_ce_fwd(m->loss, m->z, m->t, m->n, m->V, TR_F32);
    double s = 0;
    for (int64_t i = 0; i < m->n; i++) s += m->loss[i];
    return s;
}

START_TEST(test_cross_entropy) {
    int32_t t[] = {2, 0, 6, 3};
    ce_ctx m = {.n = 4, .V = 7, .t = t};
    m.z = rand_vec(m.n * m.V);
    for (int64_t i = 0; i < m.n * m.V; i++) m.z[i] *= 3;
    m.loss = zeros(m.n);
    ce_f(&m);
    for (int64_t i = 0; i < m.n; i++) {
        double se = 0;
        for (int64_t v = 0; v < m.V; v++) se += exp((double)m.z[i * m.V + v]);
        ck_assert_close(m.loss[i], log(se) - m.z[i * m.V + t[i]], 1e-5, 1e-5);
    }
    /* Uniform logits: loss is ln V exactly. */
    float flat[7] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f}, l1;
    int32_t t1 = 4;
    tr_cpu_ce_fwd(&l1, flat, &t1, 1, 7, TR_F32);
    ck_assert_close(l1, log(7.0), 1e-6, 1e-6);
    float *d = malloc((size_t)(m.n * m.V) * sizeof(float));
    memcpy(d, m.z, (size_t)(m.n * m.V) * sizeof(float));
    tr_cpu_ce_bwd(d, t, m.n, m.V, 1.0f, TR_F32);
    check_fd("dlogits", m.z, m.n * m.V, d, ce_f, &m);
    /* The gradient of each row sums to zero (softmax minus one-hot). */
    for (int64_t i = 0; i < m.n; i++) {
        double s = 0;
        for (int64_t v = 0; v < m.V; v++) s += d[i * m.V + v];
        ck_assert_close(s, 0, 1e-6, 0);
    }
    free(m.z); free(m.loss); free(d);
}
END_TEST

/* ---- attention ---- */
typedef struct { float *qkv, *out, *probs, *lse, *R; int64_t B, T, nh, nkv, hd; int flash; } at_ctx;
static int64_t at_row(const at_ctx *m) { return (m->nh + 2 * m->nkv) * m->hd; }
static double at_f(void *p) {
    at_ctx *m = p;
    if (m->flash) tr_cpu_attn_flash_fwd(m->out, m->lse, m->qkv, m->B, m->T, m->nh, m->nkv, m->hd, TR_F32);
    else tr_cpu_attn_eager_fwd(m->out, m->probs, m->qkv, m->B, m->T, m->nh, m->nkv, m->hd, TR_F32);
    return dotd(m->out, m->R, m->B * m->T * m->nh * m->hd);
}

/* Causal GQA attention in double, written independently: query head hq reads
 * kv head hq / (nh / nkv). */
static void attention_ref(const at_ctx *m, double *out) {
    const int64_t row = at_row(m), qd = m->nh * m->hd, kvd = m->nkv * m->hd, group = m->nh / m->nkv;
    for (int64_t b = 0; b < m->B; b++)
        for (int64_t hq = 0; hq < m->nh; hq++)
            for (int64_t t = 0; t < m->T; t++) {
                int64_t g = hq / group;
                double s[64], mx = -1e300, z = 0;
                for (int64_t j = 0; j <= t; j++) {
                    double acc = 0;
                    for (int64_t d = 0; d < m->hd; d++)
                        acc += (double)m->qkv[(b * m->T + t) * row + hq * m->hd + d] *
                               m->qkv[(b * m->T + j) * row + qd + g * m->hd + d];
                    s[j] = acc / sqrt((double)m->hd);
                    if (s[j] > mx) mx = s[j];
                }
                for (int64_t j = 0; j <= t; j++) z += exp(s[j] - mx);
                for (int64_t d = 0; d < m->hd; d++) {
                    double o = 0;
                    for (int64_t j = 0; j <= t; j++)
                        o += exp(s[j] - mx) / z * m->qkv[(b * m->T + j) * row + qd + kvd + g * m->hd + d];
                    out[(b * m->T + t) * qd + hq * m->hd + d] = o;
                }
            }
}

static at_ctx at_make(int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd) {
    at_ctx m = {.B = B, .T = T, .nh = nh, .nkv = nkv, .hd = hd};
    m.qkv = rand_vec(B * T * at_row(&m));
    m.out = zeros(B * T * nh * hd);
    m.probs = zeros(B * nh * T * T);
    m.lse = zeros(B * nh * T);
    m.R = rand_vec(B * T * nh * hd);
    return m;
}
static void at_free(at_ctx *m) { free(m->qkv); free(m->out); free(m->probs); free(m->lse); free(m->R); }

static void attention_case(int flash) {
    at_ctx m = at_make(2, 5, 4, 2, 4); /* GQA: two query heads per kv head */
    m.flash = flash;
    at_f(&m);
    const int64_t nout = m.B * m.T * m.nh * m.hd, nqkv = m.B * m.T * at_row(&m);
    double *ref = malloc((size_t)nout * sizeof *ref);
    attention_ref(&m, ref);
    for (int64_t i = 0; i < nout; i++) ck_assert_close(m.out[i], ref[i], 1e-5, 1e-5);
    float *d = zeros(nqkv), *ws = zeros(m.B * m.nh * m.T * m.T);
    if (flash) tr_cpu_attn_flash_bwd(d, m.R, m.qkv, m.out, m.lse, m.B, m.T, m.nh, m.nkv, m.hd, TR_F32);
    else tr_cpu_attn_eager_bwd(d, ws, m.R, m.qkv, m.probs, m.B, m.T, m.nh, m.nkv, m.hd, TR_F32);
    check_fd("dqkv", m.qkv, nqkv, d, at_f, &m);
    free(ref); free(d); free(ws);
    at_free(&m);
}

START_TEST(test_attention_eager) { attention_case(0); }
END_TEST
START_TEST(test_attention_flash) { attention_case(1); }
END_TEST

/* Flash over several key tiles (T = 70 > 2 tiles of 32) against eager:
 * same outputs and same gradients; eager's probabilities are causal rows
 * summing to one and flash's lse matches them. */
START_TEST(test_attention_flash_matches_eager) {
    at_ctx e = at_make(1, 70, 2, 1, 8);
    at_ctx f = e;
    f.out = zeros(70 * 2 * 8);
    f.flash = 1;
    at_f(&e);
    at_f(&f);
    for (int64_t i = 0; i < 70 * 2 * 8; i++) ck_assert_close(f.out[i], e.out[i], 1e-6, 1e-5);
    for (int64_t h = 0; h < 2; h++)
        for (int64_t t = 0; t < 70; t++) {
            double s = 0;
            for (int64_t j = 0; j < 70; j++) {
                float p = e.probs[(h * 70 + t) * 70 + j];
                if (j > t) ck_assert_close(p, 0, 0, 0);
                s += p;
            }
            ck_assert_close(s, 1.0, 1e-5, 0);
        }
    int64_t nqkv = 70 * (2 + 2) * 8;
    float *de = zeros(nqkv), *df = zeros(nqkv), *ws = zeros(2 * 70 * 70);
    tr_cpu_attn_eager_bwd(de, ws, e.R, e.qkv, e.probs, 1, 70, 2, 1, 8, TR_F32);
    tr_cpu_attn_flash_bwd(df, f.R, f.qkv, f.out, f.lse, 1, 70, 2, 1, 8, TR_F32);
    for (int64_t i = 0; i < nqkv; i++) ck_assert_close(df[i], de[i], 1e-5, 1e-4);
    /* Recompute-only forms (out = NULL) give bitwise the same statistics. */
    float *lse2 = zeros(2 * 70), *probs2 = zeros(2 * 70 * 70);
    tr_cpu_attn_flash_fwd(NULL, lse2, f.qkv, 1, 70, 2, 1, 8, TR_F32);
    tr_cpu_attn_eager_fwd(NULL, probs2, e.qkv, 1, 70, 2, 1, 8, TR_F32);
    ck_assert(!memcmp(lse2, f.lse, 2 * 70 * sizeof(float)));
    ck_assert(!memcmp(probs2, e.probs, 2 * 70 * 70 * sizeof(float)));
    free(de); free(df); free(ws); free(lse2); free(probs2); free(f.out);
    at_free(&e);
}
END_TEST

/* ---- bf16 ---- */
static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

START_TEST(test_bf16_rounding) {
    ck_assert_uint_eq(tr_f32_to_bf16(1.0f), 0x3f80);
    /* 1 + 2^-8 is halfway between 1 (0x3f80, even) and 1 + 2^-7: ties to even. */
    ck_assert_uint_eq(tr_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
    /* 1 + 3*2^-8 is halfway between 0x3f81 (odd) and 0x3f82 (even). */
    ck_assert_uint_eq(tr_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
    /* Just above halfway rounds up. */
    ck_assert_uint_eq(tr_f32_to_bf16(from_bits(0x3f808001u)), 0x3f81);
    ck_assert_uint_eq(tr_f32_to_bf16(-2.0f), 0xc000);
    ck_assert_uint_eq(tr_f32_to_bf16(from_bits(0x7f7fffffu)), 0x7f80); /* FLT_MAX overflows to inf */
    ck_assert(isnan(tr_bf16_to_f32(tr_f32_to_bf16(NAN))));
    ck_assert(tr_bf16_to_f32(0x3fc0) == 1.5f);
    /* F16: 1.0, -2.0, the smallest subnormal 2^-24, and 65504. */
    ck_assert(tr_f16_to_f32(0x3c00) == 1.0f);
    ck_assert(tr_f16_to_f32(0xc000) == -2.0f);
    ck_assert(tr_f16_to_f32(0x0001) == 0x1p-24f);
    ck_assert(tr_f16_to_f32(0x7bff) == 65504.0f);
    ck_assert(isinf(tr_f16_to_f32(0x7c00)));
}
END_TEST

/* bf16 storage: a bf16 matmul equals the fp32 matmul of the same (rounded)
 * values, rounded once at the end. */
START_TEST(test_bf16_matmul) {
    const int64_t n = 2, c = 9, oc = 3;
    float *x = rand_vec(n * c), *w = rand_vec(oc * c);
    uint16_t xb[18], wb[27], ob[6];
    for (int64_t i = 0; i < n * c; i++) { xb[i] = tr_f32_to_bf16(x[i]); x[i] = tr_bf16_to_f32(xb[i]); }
    for (int64_t i = 0; i < oc * c; i++) { wb[i] = tr_f32_to_bf16(w[i]); w[i] = tr_bf16_to_f32(wb[i]); }
    tr_cpu_matmul_fwd(ob, xb, wb, NULL, n, c, oc, TR_BF16);
    for (int64_t i = 0; i < n; i++)
        for (int64_t o = 0; o < oc; o++) {
            double ref = dotd(x + i * c, w + o * c, c);
            float got = tr_bf16_to_f32(ob[i * oc + o]);
            ck_assert_close(got, ref, 1e-6, 1.0 / 128); /* bf16 keeps 8 significant bits */
        }
    free(x); free(w);
}
END_TEST

/* AdamW's first step moves every weight by lr * (sign(g) + wd * w): with
 * bias correction m_hat = g and v_hat = g^2 (Loshchilov & Hutter, Algorithm 2). */
START_TEST(test_adamw_first_step) {
    float w[3] = {0.5f, -1.0f, 2.0f}, g[3] = {0.3f, -4.0f, 1e-3f}, m[3] = {0}, v[3] = {0};
    tr_opt_args a = {.lr = 0.01f, .weight_decay = 0.1f, .grad_scale = 1.0f, .t = 1};
    tr_cpu_adamw(w, NULL, TR_F32, g, TR_F32, m, v, 3, &a);
    ck_assert_close(w[0], 0.5 - 0.01 * (1 + 0.1 * 0.5), 1e-6, 0);
    ck_assert_close(w[1], -1.0 - 0.01 * (-1 + 0.1 * -1.0), 1e-6, 0);
    ck_assert_close(w[2], 2.0 - 0.01 * (1 + 0.1 * 2.0), 1e-5, 0);
    ck_assert_close(m[1], 0.1 * -4.0, 1e-6, 0);
    ck_assert_close(v[1], 0.05 * 16.0, 1e-6, 0);
    /* SGD: w -= lr * (scale*g + wd*w), and the bf16 copy is the rounded weight. */
    float ws[1] = {1.0f}, gs[1] = {2.0f};
    uint16_t out;
    tr_opt_args b = {.lr = 0.1f, .weight_decay = 0.0f, .grad_scale = 0.5f, .t = 1};
    tr_cpu_sgd(ws, &out, TR_BF16, gs, TR_F32, 1, &b);
    ck_assert_close(ws[0], 0.9, 1e-7, 0);
    ck_assert_uint_eq(out, tr_f32_to_bf16(0.9f));
}
END_TEST

/* ---- the BLAS matmul against the hand-written reference ----
 * Both sum the same c products in different orders (the BLAS in blocks, with
 * fused multiply-adds where the CPU has them). Recursive summation of c terms
 * in fp32 is within c u sum|terms| of the exact sum, u = 2^-24 (Higham,
 * "Accuracy and Stability of Numerical Algorithms", 2nd ed., eq. 4.4, to first
 * order), so the two are within 2 c u sum|terms| of each other; the test
 * allows that plus 1e-6 for the final rounding of small values. A wrong
 * transpose, slice offset or leading dimension misses by O(1). */
static void assert_within_sum_bound(const float *got, const float *want, const double *abs_sum, int64_t n,
                                    int64_t terms, const char *what) {
    const double u = 1.0 / 16777216.0;
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(fabs((double)got[i] - want[i]) <= 2.0 * (double)terms * u * abs_sum[i] + 1e-6,
                      "%s[%lld]: blas %.9g, reference %.9g", what, (long long)i, got[i], want[i]);
}

START_TEST(test_matmul_blas_matches_reference) {
    /* Shapes: one row; odd sizes; several 128-wide slices with a ragged last one. */
    const int64_t shapes[][3] = {{1, 7, 5}, {3, 70, 5}, {33, 130, 257}, {64, 300, 260}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int64_t n = shapes[si][0], c = shapes[si][1], oc = shapes[si][2];
        float *x = rand_vec(n * c), *w = rand_vec(oc * c), *b = rand_vec(oc), *dy = rand_vec(n * oc);
        float *y = zeros(n * oc), *yr = zeros(n * oc);
        float *dx = zeros(n * c), *dxr = zeros(n * c);
        float *dw = rand_vec(oc * c), *dwr = malloc((size_t)(oc * c) * sizeof(float));
        float *db = rand_vec(oc), *dbr = malloc((size_t)oc * sizeof(float));
        memcpy(dwr, dw, (size_t)(oc * c) * sizeof(float)); /* both accumulate onto the same start */
        memcpy(dbr, db, (size_t)oc * sizeof(float));
        double *sy = calloc((size_t)(n * oc), sizeof(double)), *sx = calloc((size_t)(n * c), sizeof(double));
        double *sw = calloc((size_t)(oc * c), sizeof(double)), *sb = calloc((size_t)oc, sizeof(double));
        for (int64_t i = 0; i < n; i++)
            for (int64_t o = 0; o < oc; o++)
                for (int64_t k = 0; k < c; k++) {
                    sy[i * oc + o] += fabs((double)x[i * c + k] * w[o * c + k]);
                    sx[i * c + k] += fabs((double)dy[i * oc + o] * w[o * c + k]);
                    sw[o * c + k] += fabs((double)dy[i * oc + o] * x[i * c + k]);
                }
        /* dw and dbias accumulate: their bounds also cover the starting value. */
        for (int64_t o = 0; o < oc; o++) {
            for (int64_t k = 0; k < c; k++) sw[o * c + k] += fabs((double)dw[o * c + k]);
            sb[o] = fabs((double)db[o]);
            for (int64_t i = 0; i < n; i++) sb[o] += fabs((double)dy[i * oc + o]);
        }
        for (int64_t i = 0; i < n * oc; i++) sy[i] += fabs((double)b[i % oc]);
        tr_cpu_matmul_fwd(y, x, w, b, n, c, oc, TR_F32);
        tr_cpu_matmul_fwd_ref(yr, x, w, b, n, c, oc, TR_F32);
        tr_cpu_matmul_bwd(dx, dw, db, dy, x, w, n, c, oc, TR_F32);
        tr_cpu_matmul_bwd_ref(dxr, dwr, dbr, dy, x, w, n, c, oc, TR_F32);
        assert_within_sum_bound(y, yr, sy, n * oc, c + 1, "out");
        assert_within_sum_bound(dx, dxr, sx, n * c, oc, "dinp");
        assert_within_sum_bound(dw, dwr, sw, oc * c, n + 1, "dw");
        assert_within_sum_bound(db, dbr, sb, oc, n + 1, "dbias");
        free(x); free(w); free(b); free(dy); free(y); free(yr); free(dx); free(dxr);
        free(dw); free(dwr); free(db); free(dbr); free(sy); free(sx); free(sw); free(sb);
    }
}
END_TEST

/* tr_expf against exp in double: Cephes documents its expf at 1.7e-7 peak
 * relative error over the IEEE range (cephes/single/expf.c); the test allows
 * 2.5e-7 (two fp32 ulps at the top of a binade) over a dense grid, and the
 * edges exactly. */
START_TEST(test_expf) {
    for (int i = 0; i <= 400000; i++) {
        float x = -87.0f + 175.0f * (float)i / 400000.0f;
        double want = exp((double)x), got = tr_expf(x);
        double rel = fabs(got - want) / want;
        ck_assert_msg(rel <= 2.5e-7, "expf(%.9g) = %.9g, exp = %.17g", x, got, want);
    }
    ck_assert_float_eq(tr_expf(0.0f), 1.0f);
    ck_assert_float_eq(tr_expf(-INFINITY), 0.0f);
    ck_assert_float_eq(tr_expf(-100.0f), 0.0f);
    ck_assert(isinf(tr_expf(INFINITY)) && tr_expf(INFINITY) > 0);
    ck_assert(isinf(tr_expf(100.0f)));
    ck_assert(isnan(tr_expf(NAN)));
    ck_assert_close(tr_sigmoidf(0.0f), 0.5, 0, 0);
    ck_assert_float_eq(tr_sigmoidf(-200.0f), 0.0f);
    ck_assert_float_eq(tr_sigmoidf(200.0f), 1.0f);
}
END_TEST

/* The fp32 flash attention on BLAS tiles against the row-by-row reference,
 * over a shape with three query tiles and key blocks (T = 150 > 2 * 64), GQA
 * and a ragged last tile. Inputs are in [-1, 1) and hd = 16, so each score is
 * a sum of 16 terms below 1 in magnitude; the two differ by the order of
 * fp32 sums and by exp rounding, each a few 1e-7 relative on values of order
 * 1 (outputs are convex combinations of v; gradients sums of up to T such
 * terms), so 2e-5 absolute + 1e-4 relative holds with margin, while a wrong
 * mask, tile offset or scale misses by O(0.1). */
START_TEST(test_flash_blas_matches_reference) {
    const int64_t B = 2, T = 150, nh = 4, nkv = 2, hd = 16, row = (nh + 2 * nkv) * hd;
    const int64_t nqkv = B * T * row, nout = B * T * nh * hd, nl = B * nh * T;
    float *qkv = rand_vec(nqkv), *dout = rand_vec(nout);
    float *o = zeros(nout), *or = zeros(nout), *l = zeros(nl), *lr = zeros(nl);
    float *d = zeros(nqkv), *dr = zeros(nqkv);
    tr_cpu_attn_flash_fwd(o, l, qkv, B, T, nh, nkv, hd, TR_F32);
    tr_cpu_attn_flash_fwd_ref(or, lr, qkv, B, T, nh, nkv, hd, TR_F32);
    for (int64_t i = 0; i < nout; i++) ck_assert_close(o[i], or[i], 2e-5, 1e-4);
    for (int64_t i = 0; i < nl; i++) ck_assert_close(l[i], lr[i], 2e-5, 1e-4);
    tr_cpu_attn_flash_bwd(d, dout, qkv, or, lr, B, T, nh, nkv, hd, TR_F32);
    tr_cpu_attn_flash_bwd_ref(dr, dout, qkv, or, lr, B, T, nh, nkv, hd, TR_F32);
    for (int64_t i = 0; i < nqkv; i++) ck_assert_close(d[i], dr[i], 2e-5, 1e-4);
    /* Recompute-only (out = NULL) gives the same lse bitwise. */
    float *l2 = zeros(nl);
    tr_cpu_attn_flash_fwd(NULL, l2, qkv, B, T, nh, nkv, hd, TR_F32);
    ck_assert(!memcmp(l2, l, (size_t)nl * sizeof(float)));
    /* One thread and three give the same bits over several tiles. */
    float *o1 = zeros(nout), *d1 = zeros(nqkv);
    tr_set_threads(1);
    tr_cpu_attn_flash_fwd(o1, l2, qkv, B, T, nh, nkv, hd, TR_F32);
    tr_cpu_attn_flash_bwd(d1, dout, qkv, or, lr, B, T, nh, nkv, hd, TR_F32);
    tr_set_threads(3);
    tr_cpu_attn_flash_fwd(o, l, qkv, B, T, nh, nkv, hd, TR_F32);
    tr_cpu_attn_flash_bwd(d, dout, qkv, or, lr, B, T, nh, nkv, hd, TR_F32);
    ck_assert(!memcmp(o1, o, (size_t)nout * sizeof(float)));
    ck_assert(!memcmp(l2, l, (size_t)nl * sizeof(float)));
    ck_assert(!memcmp(d1, d, (size_t)nqkv * sizeof(float)));
    free(qkv); free(dout); free(o); free(or); free(l); free(lr); free(d); free(dr); free(l2); free(o1); free(d1);
}
END_TEST

/* Results do not depend on the thread count (fixed partitioning, no float
 * atomics). Sizes are above the trainer's threshold for going parallel. */
START_TEST(test_ops_thread_independent) {
    at_ctx m = at_make(2, 40, 4, 2, 16);
    const int64_t nqkv = 2 * 40 * 8 * 16, nout = 2 * 40 * 4 * 16;
    /* c and oc span three of the BLAS path's 128-wide slices. */
    const int64_t n = 64, c = 260, oc = 300;
    float *x = rand_vec(n * c), *w = rand_vec(oc * c), *dy = rand_vec(n * oc);
    float *d1 = zeros(nqkv), *d2 = zeros(nqkv), *o1 = zeros(nout);
    float *y1 = zeros(n * oc), *y2 = zeros(n * oc), *dx1 = zeros(n * c), *dx2 = zeros(n * c);
    float *dw1 = zeros(oc * c), *dw2 = zeros(oc * c);
    tr_set_threads(1);
    at_f(&m);
    memcpy(o1, m.out, (size_t)nout * sizeof(float));
    tr_cpu_attn_flash_bwd(d1, m.R, m.qkv, m.out, m.lse, 2, 40, 4, 2, 16, TR_F32);
    tr_cpu_matmul_fwd(y1, x, w, NULL, n, c, oc, TR_F32);
    tr_cpu_matmul_bwd(dx1, dw1, NULL, dy, x, w, n, c, oc, TR_F32);
    tr_set_threads(3);
    at_f(&m);
    tr_cpu_attn_flash_bwd(d2, m.R, m.qkv, m.out, m.lse, 2, 40, 4, 2, 16, TR_F32);
    tr_cpu_matmul_fwd(y2, x, w, NULL, n, c, oc, TR_F32);
    tr_cpu_matmul_bwd(dx2, dw2, NULL, dy, x, w, n, c, oc, TR_F32);
    ck_assert(!memcmp(o1, m.out, (size_t)nout * sizeof(float)));
    ck_assert(!memcmp(d1, d2, (size_t)nqkv * sizeof(float)));
    ck_assert(!memcmp(y1, y2, (size_t)(n * oc) * sizeof(float)));
    ck_assert(!memcmp(dx1, dx2, (size_t)(n * c) * sizeof(float)));
    ck_assert(!memcmp(dw1, dw2, (size_t)(oc * c) * sizeof(float)));
    free(d1); free(d2); free(o1); free(x); free(w); free(dy);
    free(y1); free(y2); free(dx1); free(dx2); free(dw1); free(dw2);
    at_free(&m);
}
END_TEST

Suite *suite_trainer_ops(void); /* registered by the Makefile */
Suite *suite_trainer_ops(void) {
    Suite *s = suite_create("trainer_ops");
    TCase *tc = tcase_create("ops");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_matmul);
    tcase_add_test(tc, test_rmsnorm);
    tcase_add_test(tc, test_rope);
    tcase_add_test(tc, test_swiglu);
    tcase_add_test(tc, test_embedding);
    tcase_add_test(tc, test_cross_entropy);
    tcase_add_test(tc, test_attention_eager);
    tcase_add_test(tc, test_attention_flash);
    tcase_add_test(tc, test_attention_flash_matches_eager);
    tcase_add_test(tc, test_bf16_rounding);
    tcase_add_test(tc, test_bf16_matmul);
    tcase_add_test(tc, test_adamw_first_step);
    tcase_add_test(tc, test_matmul_blas_matches_reference);
    tcase_add_test(tc, test_expf);
    tcase_add_test(tc, test_flash_blas_matches_reference);
    tcase_add_test(tc, test_ops_thread_independent);
    suite_add_tcase(s, tc);
    return s;
}
