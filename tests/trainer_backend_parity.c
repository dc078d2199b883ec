/* The op harness on the CPU: the CPU backend against the naive reference
 * backend (tests/trainer_parity.c) in fp32 and bf16, and its backward ops
 * against finite differences of its forward ops. With the CUDA backend on a
 * GPU, `make test-gpu` runs the same harness CUDA against CPU.
 *
 * Tolerances, |a-b| <= abs + rel*max(|a|,|b|):
 *   fp32  rel 1e-4, abs 1e-5: float against double accumulation over at most
 *         50 terms of magnitude <= 3 differs by about 50 * 2^-24 * 3 ~ 1e-5
 *         relative to the largest term; 1e-4 leaves a factor ten.
 *   bf16  rel 2^-6, abs 2^-7: bf16 keeps 8 significant bits, so one rounding
 *         is within 2^-8 relative and two implementations that round
 *         different fp32 sums differ by at most two units (2^-7 each side);
 *         values near zero after cancellation get the absolute term. */
#include <check.h>
#include <math.h>
#include <string.h>

#include "backend.h"
#include "test_util.h"
#include "trainer_parity.h"

static const tr_parity_tol fp32_tol = {1e-5, 1e-4};
static const tr_parity_tol bf16_tol = {1.0 / 128, 1.0 / 64};

START_TEST(test_cpu_vs_reference_fp32) {
    tr_parity_result r;
    int rc = tr_parity_run(tr_backend_cpu(), tr_parity_reference_backend(), TR_F32, fp32_tol, &r);
    ck_assert_msg(rc == 0, "%s", r.fail);
    ck_assert_int_eq(r.ops, 21);
    ck_assert_int_gt(r.compared, 10000);
}
END_TEST

START_TEST(test_cpu_vs_reference_bf16) {
    tr_parity_result r;
    int rc = tr_parity_run(tr_backend_cpu(), tr_parity_reference_backend(), TR_BF16, bf16_tol, &r);
    ck_assert_msg(rc == 0, "%s", r.fail);
    ck_assert_int_eq(r.ops, 21);
}
END_TEST

/* The harness can fail: a reference whose add is off by one bf16 unit... is
 * within tolerance, but a wrong op is not. Swap two ops and it must object. */
static void wrong_add(tr_backend_ctx *cx, void *y, const void *x, int64_t n, tr_dtype dt) {
    (void)cx, (void)x;
    for (int64_t i = 0; i < n; i++) tr_st(y, i, tr_ld(y, i, dt) * 1.001f, dt);
}
START_TEST(test_harness_detects_a_wrong_op) {
    tr_backend bad = *tr_parity_reference_backend();
    bad.add = wrong_add;
    tr_parity_result r;
    ck_assert_int_ne(tr_parity_run(tr_backend_cpu(), &bad, TR_F32, fp32_tol, &r), 0);
    ck_assert_msg(strstr(r.fail, "add fp32 y") != NULL, "%s", r.fail);
}
END_TEST

START_TEST(test_cpu_finite_differences) {
    tr_parity_result r;
    int rc = tr_parity_fd(tr_backend_cpu(), &r);
    ck_assert_msg(rc == 0, "%s", r.fail);
    ck_assert_int_eq(r.ops, 7);
}
END_TEST

/* The reference backend's own backward ops against finite differences: the
 * two sides of the parity test are checked independently. */
START_TEST(test_reference_finite_differences) {
    tr_parity_result r;
    int rc = tr_parity_fd(tr_parity_reference_backend(), &r);
    ck_assert_msg(rc == 0, "%s", r.fail);
}
END_TEST

/* A half-written backend is named, never run: the CPU and reference tables
 * are complete, a table with a hole names the hole. */
START_TEST(test_missing_op_named) {
    ck_assert_ptr_null(tr_backend_missing_op(tr_backend_cpu()));
    ck_assert_ptr_null(tr_backend_missing_op(tr_parity_reference_backend()));
    tr_backend holed = *tr_backend_cpu();
    holed.attn_flash_bwd = NULL;
    ck_assert_str_eq(tr_backend_missing_op(&holed), "attn_flash_bwd");
    holed.mem.alloc = NULL;
    ck_assert_str_eq(tr_backend_missing_op(&holed), "mem.alloc");
}
END_TEST

Suite *suite_trainer_backend_parity(void); /* registered by the Makefile */
Suite *suite_trainer_backend_parity(void) {
    Suite *s = suite_create("trainer_backend_parity");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_cpu_vs_reference_fp32);
    tcase_add_test(tc, test_cpu_vs_reference_bf16);
    tcase_add_test(tc, test_harness_detects_a_wrong_op);
    tcase_add_test(tc, test_cpu_finite_differences);
    tcase_add_test(tc, test_reference_finite_differences);
    tcase_add_test(tc, test_missing_op_named);
    suite_add_tcase(s, tc);
    return s;
}
