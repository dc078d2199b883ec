/* The cuBLAS workspace per GPU (estimator/catalog/cublas_ws.c). Expected bytes
 * are derived by hand from PyTorch CublasHandlePool.cpp parseChosenWorkspaceSize
 * (torch 2.2-2.11): without CUBLAS_WORKSPACE_CONFIG the default is
 * "4096 * 8 * 1024" on compute capability 9.0 and ":4096:2:16:8", i.e.
 * "4096 * 1024 * 2 + 16 * 1024 * 8", on every other card. */
#include <check.h>
#include <string.h>

#include "constants.h"
#include "cublas_ws.h"
#include "estimate.h"
#include "gpu.h"
#include "test_util.h"

static const est_gpu *card(est_gpu_catalog *cat, const char *name) {
    char err[256];
    ck_assert_msg(est_gpu_catalog_load(NULL, cat, err, sizeof err) == 0, "%s", err);
    const est_gpu *g = est_gpu_find(cat, name);
    ck_assert_ptr_nonnull(g);
    return g;
}

START_TEST(test_h200_takes_32_mib) {
    est_gpu_catalog cat;
    const est_gpu *g = card(&cat, "h200-141gb"); /* compute capability 9.0 */
    /* 4096 KiB x 8 = 4194304 x 8 = 33554432 bytes (32 MiB) */
    ck_assert_int_eq(est_cublas_workspace_bytes(g), 33554432);
    est_gpu_catalog_free(&cat);
}
END_TEST

START_TEST(test_a100_and_l40s_take_8_125_mib) {
    est_gpu_catalog cat;
    /* 4096 KiB x 2 + 16 KiB x 8 = 8388608 + 131072 = 8519680 bytes */
    ck_assert_int_eq(est_cublas_workspace_bytes(card(&cat, "a100-80gb")), 8519680); /* 8.0 */
    est_gpu_catalog_free(&cat);
    ck_assert_int_eq(est_cublas_workspace_bytes(card(&cat, "l40s-48gb")), 8519680); /* 8.9 */
    est_gpu_catalog_free(&cat);
    ck_assert_int_eq(est_cublas_workspace_bytes(card(&cat, "rtx3090-24gb")), 8519680); /* 8.6 */
    est_gpu_catalog_free(&cat);
}
END_TEST

START_TEST(test_in_force_unless_a_profile_sets_it) {
    est_gpu_catalog cat;
    const est_gpu *g = card(&cat, "h100-80gb");
    est_constants k;
    est_constants_defaults(&k);
    est_cublas_workspace_in_force(g, &k);
    ck_assert_int_eq((long long)k.value[EST_K_CUBLAS_WORKSPACE_BYTES], 33554432LL);
    /* a profile's value (its own source) is left alone */
    est_constants_defaults(&k);
    k.value[EST_K_CUBLAS_WORKSPACE_BYTES] = 1e6;
    strcpy(k.source[EST_K_CUBLAS_WORKSPACE_BYTES], "a profile");
    est_cublas_workspace_in_force(g, &k);
    ck_assert_int_eq((long long)k.value[EST_K_CUBLAS_WORKSPACE_BYTES], 1000000LL);
    est_gpu_catalog_free(&cat);
}
END_TEST

/* The same Llama-3.2-1B step (HF Trainer, bf16) on an H200 and on an A100:
 * only the cuBLAS workspaces differ, by 33554432 - 8519680 = 25034752 bytes
 * each. The set-up ("training state") runs no GEMM: no workspace, no
 * difference. The warm-up step's first forward GEMM gives the Python thread's
 * handle one, its first backward GEMM the autograd device thread's handle
 * another (CublasHandlePool.cpp keys workspaces by handle and stream), so
 * every moment of the traced step differs by 2 x 25034752 = 50069504 bytes in
 * the workspace category. */
START_TEST(test_two_handles_in_a_training_step) {
    est_estimate h, a;
    est_run rh = test_run_of("llama3.2-1b", "h200-141gb"), ra = test_run_of("llama3.2-1b", "a100-80gb");
    rh.framework = ra.framework = EST_FW_HF;
    test_estimate(&rh, &h);
    test_estimate(&ra, &a);
    const char *moments[] = {"forward layer 0", "backward layer 0", "optimizer step (foreach AdamW)"};
    const int64_t ws = EST_CAT_WORKSPACE;
    ck_assert_int_eq(test_row(&h, "training state")->bytes[ws] - test_row(&a, "training state")->bytes[ws], 0);
    /* both booked in the warm-up step's row */
    ck_assert_int_gt(h.step.cublas_rows[0], 0);
    ck_assert_int_gt(h.step.cublas_rows[1], 0);
    ck_assert_str_eq(h.tl.phases[h.step.cublas_rows[0] - 1].label, "first step (warm-up)");
    ck_assert_str_eq(h.tl.phases[h.step.cublas_rows[1] - 1].label, "first step (warm-up)");
    for (int i = 0; i < 3; i++) {
        const est_phase *ph = test_row(&h, moments[i]), *pa = test_row(&a, moments[i]);
        ck_assert_msg(ph->bytes[ws] - pa->bytes[ws] == 50069504, "%s: %lld", moments[i],
                      (long long)(ph->bytes[ws] - pa->bytes[ws]));
    }
    est_estimate_free(&h);
    est_estimate_free(&a);
}
END_TEST

Suite *suite_cublas_ws(void);
Suite *suite_cublas_ws(void) {
    Suite *s = suite_create("cublas_ws");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_h200_takes_32_mib);
    tcase_add_test(tc, test_a100_and_l40s_take_8_125_mib);
    tcase_add_test(tc, test_in_force_unless_a_profile_sets_it);
    tcase_add_test(tc, test_two_handles_in_a_training_step);
    suite_add_tcase(s, tc);
    return s;
}
