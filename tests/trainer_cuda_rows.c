/* The CUDA backend's row bodies on the CPU (trainer/backend/cuda/attn_rows.h).
 *
 * No GPU runs here, so the kernels of attention_cuda.cu and the fallback
 * matmul of matmul_cuda.cu are checked through the code they share with this
 * test: each kernel is one call of an ar_* body per thread index, and this
 * file calls the same bodies in a loop over every index. An "emulated" backend
 * (the CPU backend with its matmul and attention replaced by those loops) goes
 * through the op harness (tests/trainer_parity.c) against the naive reference
 * backend, in fp32 and bf16, and through its finite-difference checks; a
 * second case runs several key tiles (T = 70 > 2 x AR_TILE) at head dim 64,
 * which the harness's T = 9 does not reach, against the CPU backend's own
 * attention. What this cannot check: the launches (grid sizes, the head-dim
 * and dtype instances), cuBLASLt, and the device's arithmetic (its expf and
 * fused multiply-adds round differently, within the tolerances below). */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../trainer/backend/cuda/attn_rows.h"
#include "backend.h"
#include "config.h"
#include "ops.h"
#include "trainer_parity.h"

static const tr_parity_tol fp32_tol = {1e-5, 1e-4};
static const tr_parity_tol bf16_tol = {1.0 / 128, 1.0 / 64};

/* Whether flash's backward gets the precomputed D rows (the GPU's path when
 * the workspace holds them) or recomputes each. */
static int use_dD = 1;

static void emu_mm_f(tr_backend_ctx *cx, void *out, const void *inp, const void *w, const void *bias, int64_t n,
                     int64_t c, int64_t oc, tr_dtype dt) {
    (void)cx;
    for (int64_t e = 0; e < n * oc; e++) ar_mm_fwd_elem(out, inp, w, bias, c, oc, e, dt);
}
static void emu_mm_b(tr_backend_ctx *cx, void *dinp, void *dw, void *dbias, const void *dout, const void *inp,
                     const void *w, int64_t n, int64_t c, int64_t oc, tr_dtype dt) {
    (void)cx;
    for (int64_t e = 0; dinp && e < n * c; e++) ar_mm_bwd_dinp_elem(dinp, dout, w, c, oc, e, dt);
    for (int64_t e = 0; dw && e < oc * c; e++) ar_mm_bwd_dw_elem(dw, dout, inp, n, c, oc, e, dt);
    for (int64_t o = 0; dbias && o < oc; o++) ar_bias_grad_col(dbias, dout, n, oc, o, dt);
}
static void emu_af_f(tr_backend_ctx *cx, void *out, float *lse, const void *qkv, int64_t B, int64_t T, int64_t nh,
                     int64_t nkv, int64_t hd, tr_dtype dt) {
    (void)cx;
    const ar_shape s = {B, T, nh, nkv, hd};
    float acc[TR_MAX_HEAD_DIM];
    for (int64_t r = 0; r < B * nh * T; r++) ar_flash_fwd_row(out, lse, qkv, s, r, acc, dt);
}
static void emu_af_b(tr_backend_ctx *cx, void *dqkv, const void *dout, const void *qkv, const void *out,
                     const float *lse, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd, tr_dtype dt) {
    (void)cx;
    const ar_shape s = {B, T, nh, nkv, hd};
    float a[TR_MAX_HEAD_DIM], b[TR_MAX_HEAD_DIM];
    float *dD = use_dD ? malloc((size_t)(B * nh * T) * sizeof *dD) : NULL;
    for (int64_t r = 0; dD && r < B * nh * T; r++) ar_flash_d_row(dD, dout, out, s, r, dt);
    for (int64_t r = 0; r < B * nh * T; r++) ar_flash_bwd_q_row(dqkv, dout, qkv, out, lse, s, r, a, dt);
    for (int64_t r = 0; r < B * nkv * T; r++) ar_flash_bwd_kv_row(dqkv, dout, qkv, out, lse, dD, s, r, a, b, dt);
    free(dD);
}
static void emu_ae_f(tr_backend_ctx *cx, void *out, void *probs, const void *qkv, int64_t B, int64_t T, int64_t nh,
                     int64_t nkv, int64_t hd, tr_dtype dt) {
    (void)cx;
    const ar_shape s = {B, T, nh, nkv, hd};
    float acc[TR_MAX_HEAD_DIM];
    for (int64_t r = 0; r < B * nh * T; r++) ar_eager_fwd_row(out, probs, qkv, s, r, acc, dt);
}
static void emu_ae_b(tr_backend_ctx *cx, void *dqkv, void *dprobs, const void *dout, const void *qkv,
                     const void *probs, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd, tr_dtype dt) {
    (void)cx;
    const ar_shape s = {B, T, nh, nkv, hd};
    float a[TR_MAX_HEAD_DIM], b[TR_MAX_HEAD_DIM];
    for (int64_t r = 0; r < B * nh * T; r++) ar_eager_bwd_ds_row(dprobs, dout, qkv, probs, s, r, dt);
    for (int64_t r = 0; r < B * nh * T; r++) ar_eager_bwd_q_row(dqkv, dprobs, qkv, s, r, a, dt);
    for (int64_t r = 0; r < B * nkv * T; r++) ar_eager_bwd_kv_row(dqkv, dprobs, dout, qkv, probs, s, r, a, b, dt);
}

/* The CPU backend with the CUDA backend's row bodies in place of its matmul
 * and attention. */
static const tr_backend *emulated(void) {
    static tr_backend b;
    b = *tr_backend_cpu();
    b.name = "cuda-rows";
    b.matmul_fwd = emu_mm_f;
    b.matmul_bwd = emu_mm_b;
    b.attn_flash_fwd = emu_af_f;
    b.attn_flash_bwd = emu_af_b;
    b.attn_eager_fwd = emu_ae_f;
    b.attn_eager_bwd = emu_ae_b;
    return &b;
}

START_TEST(test_rows_vs_reference) {
    tr_parity_result r;
    for (use_dD = 0; use_dD <= 1; use_dD++) {
        int rc = tr_parity_run(emulated(), tr_parity_reference_backend(), TR_F32, fp32_tol, &r);
        ck_assert_msg(rc == 0, "fp32 (dD %d): %s", use_dD, r.fail);
        ck_assert_int_eq(r.ops, 21);
        rc = tr_parity_run(emulated(), tr_parity_reference_backend(), TR_BF16, bf16_tol, &r);
        ck_assert_msg(rc == 0, "bf16 (dD %d): %s", use_dD, r.fail);
    }
}
END_TEST

START_TEST(test_rows_finite_differences) {
    tr_parity_result r;
    use_dD = 1;
    int rc = tr_parity_fd(emulated(), &r);
    ck_assert_msg(rc == 0, "%s", r.fail);
    ck_assert_int_eq(r.ops, 7);
}
END_TEST

/* The harness can fail through this backend: a row body that drops the last
 * key of every row is caught. */
static void short_af_f(tr_backend_ctx *cx, void *out, float *lse, const void *qkv, int64_t B, int64_t T, int64_t nh,
                       int64_t nkv, int64_t hd, tr_dtype dt) {
    (void)cx;
    const ar_shape s = {B, T, nh, nkv, hd};
    float acc[TR_MAX_HEAD_DIM];
    for (int64_t r = 0; r < B * nh * T; r++) ar_flash_fwd_row(out, lse, qkv, s, r % T ? r - 1 : r, acc, dt);
}
START_TEST(test_wrong_rows_caught) {
    tr_backend bad = *emulated();
    bad.attn_flash_fwd = short_af_f;
    tr_parity_result r;
    ck_assert_int_ne(tr_parity_run(&bad, tr_parity_reference_backend(), TR_F32, fp32_tol, &r), 0);
    ck_assert_msg(strstr(r.fail, "attn") != NULL, "%s", r.fail);
}
END_TEST

/* Flash at a model's head dim over three key tiles (T = 70, tiles of 32),
 * grouped-query heads (4 query heads on 1 kv head), against the CPU
 * backend's own flash attention (ops_attn_flash.c), fp32 within the
 * harness's tolerance. */
enum { LB = 1, LT = 70, LNH = 4, LNKV = 1, LHD = 64 };
#define LROW ((LNH + 2 * LNKV) * LHD)

static double worst_of(const float *a, const float *b, int64_t n) {
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double q = fabs((double)a[i] - b[i]) / (fp32_tol.abs + fp32_tol.rel * fmax(fabs(a[i]), fabs(b[i])));
        if (!(q <= worst)) worst = q; /* NaN makes worst NaN */
    }
    return worst;
}

START_TEST(test_flash_three_tiles_head_dim_64) {
    const int64_t nq = (int64_t)LB * LT * LROW, no = (int64_t)LB * LT * LNH * LHD, nl = (int64_t)LB * LNH * LT;
    float *qkv = malloc(nq * sizeof *qkv), *dout = malloc(no * sizeof *dout);
    uint64_t x = 88172645463325252ull;
    for (int64_t i = 0; i < nq + no; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        float v = (float)((double)(x >> 11) / 9007199254740992.0 * 2.0 - 1.0);
        if (i < nq) qkv[i] = 2.0f * v; /* scores spread enough that tiles rescale */
        else dout[i - nq] = v;
    }
    float *o_cpu = calloc(no, 4), *o_row = calloc(no, 4), *l_cpu = calloc(nl, 4), *l_row = calloc(nl, 4);
    float *d_cpu = calloc(nq, 4), *d_row = calloc(nq, 4);
    tr_cpu_attn_flash_fwd(o_cpu, l_cpu, qkv, LB, LT, LNH, LNKV, LHD, TR_F32);
    emu_af_f(NULL, o_row, l_row, qkv, LB, LT, LNH, LNKV, LHD, TR_F32);
    ck_assert_double_le(worst_of(o_row, o_cpu, no), 1.0);
    ck_assert_double_le(worst_of(l_row, l_cpu, nl), 1.0);
    tr_cpu_attn_flash_bwd(d_cpu, dout, qkv, o_cpu, l_cpu, LB, LT, LNH, LNKV, LHD, TR_F32);
    use_dD = 1;
    emu_af_b(NULL, d_row, dout, qkv, o_cpu, l_cpu, LB, LT, LNH, LNKV, LHD, TR_F32);
    ck_assert_double_le(worst_of(d_row, d_cpu, nq), 1.0);
    free(qkv), free(dout), free(o_cpu), free(o_row), free(l_cpu), free(l_row), free(d_cpu), free(d_row);
}
END_TEST

/* bf16 storage rounds as dtype.h does, bit for bit (ties to even, NaN quiet). */
START_TEST(test_bf16_rounding_matches_dtype_h) {
    const uint32_t bits[] = {0x3f800000u, 0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x7f7fffffu, 0x7fc00001u,
                             0xff800000u, 0x00000001u, 0x80008000u, 0x7f800001u};
    for (size_t i = 0; i < sizeof bits / sizeof bits[0]; i++) {
        float f;
        memcpy(&f, &bits[i], sizeof f);
        ck_assert_uint_eq(ar_f32_to_bf16(f), tr_f32_to_bf16(f));
    }
}
END_TEST

Suite *suite_trainer_cuda_rows(void); /* registered by the Makefile */
Suite *suite_trainer_cuda_rows(void) {
    Suite *s = suite_create("trainer_cuda_rows");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_rows_vs_reference);
    tcase_add_test(tc, test_rows_finite_differences);
    tcase_add_test(tc, test_wrong_rows_caught);
    tcase_add_test(tc, test_flash_three_tiles_head_dim_64);
    tcase_add_test(tc, test_bf16_rounding_matches_dtype_h);
    suite_add_tcase(s, tc);
    return s;
}
