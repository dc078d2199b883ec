/* The cuBLAS workspace per GPU (estimator/catalog/cublas_ws.c). Expected bytes
 * are derived by hand from PyTorch CublasHandlePool.cpp parseChosenWorkspaceSize
 * (torch 2.2-2.11): without CUBLAS_WORKSPACE_CONFIG the default is
 * "4096 * 8 * 1024" on compute capability 9.0 and ":4096:2:16:8", i.e.
 * "4096 * 1024 * 2 + 16 * 1024 * 8", on every other card. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "constants.h"
#include "cublas_ws.h"
#include "estimate.h"
#include "gpu.h"
#include "record.h"
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

/* ftest_probe.py runs a plan's points in one process and notes what the
 * allocator held as a point began. The GPU day's first record (its process's
 * first point) has no note; its second says "67108864 bytes allocated at its
 * start": the two 32 MiB workspaces (2 x 33554432) its predecessor left; the
 * same note with words in place of the count names nothing. */
START_TEST(test_probe_note_names_the_bytes_held) {
    char err[256];
    est_gpu_catalog cat;
    ck_assert_msg(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0, "%s", err);
    char *all = test_slurp(test_repo_path("calibrate/records/probe-h200-2026-11-26.jsonl"), NULL);
    const char *line = all;
    for (int i = 0; i < 2; i++) {
        const char *end = strchr(line, '\n');
        ck_assert_ptr_nonnull(end);
        est_record rec;
        ck_assert_msg(est_record_parse_at(line, (size_t)(end - line), &cat, test_repo_path("calibrate/records"),
                                          &rec, err, sizeof err) == 0, "%s", err);
        ck_assert_int_eq(rec.run.allocated_at_start_bytes, i == 0 ? 0 : 67108864);
        est_record_free(&rec);
        if (i == 1) { /* the same line with no count before the words: nothing held */
            char *copy = strndup(line, (size_t)(end - line));
            char *n = strstr(copy, "67108864 bytes allocated");
            ck_assert_ptr_nonnull(n);
            memcpy(n, "lots of ", 8);
            ck_assert_msg(est_record_parse_at(copy, strlen(copy), &cat, test_repo_path("calibrate/records"), &rec,
                                              err, sizeof err) == 0, "%s", err);
            ck_assert_int_eq(rec.run.allocated_at_start_bytes, 0);
            est_record_free(&rec);
            free(copy);
        }
        line = end + 1;
    }
    free(all);
    est_gpu_catalog_free(&cat);
}
END_TEST

/* A run that follows another in one process finds the earlier run's cuBLAS
 * workspaces allocated (CublasHandlePool.cpp keeps them for the life of the
 * handle): with 2 x 33554432 bytes held at its start, both are live from the
 * first row ("model loaded": 67108864 bytes of workspace, where a fresh
 * process has none), and the step books no other (the optimizer step's row
 * holds the same workspace bytes as a fresh run's). Bytes for one workspace
 * and a bit (33554432 + 1 MiB) cover the Python thread's only: 33554432 at
 * "model loaded", the backward thread's booked in the warm-up step. */
START_TEST(test_held_workspaces_precede_the_model) {
    const int64_t ws = 33554432, ws_cat = EST_CAT_WORKSPACE;
    const int64_t held[] = {0, ws + (INT64_C(1) << 20), 2 * ws};
    est_estimate e[3];
    for (int i = 0; i < 3; i++) {
        est_run r = test_run_of("llama3.2-1b", "h200-141gb");
        r.framework = EST_FW_HF;
        r.allocated_at_start_bytes = held[i];
        test_estimate(&r, &e[i]);
    }
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(test_row(&e[i], "model loaded")->bytes[ws_cat], i * ws);
    ck_assert_int_eq(e[1].step.cublas_rows[0], 1);
    ck_assert_str_eq(e[1].tl.phases[e[1].step.cublas_rows[1] - 1].label, "first step (warm-up)");
    ck_assert_int_eq(e[2].step.cublas_rows[0], 1);
    ck_assert_int_eq(e[2].step.cublas_rows[1], 1);
    const char *step = "optimizer step (foreach AdamW)";
    for (int i = 1; i < 3; i++)
        ck_assert_int_eq(test_row(&e[i], step)->bytes[ws_cat], test_row(&e[0], step)->bytes[ws_cat]);
    for (int i = 0; i < 3; i++) est_estimate_free(&e[i]);
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
    tcase_add_test(tc, test_probe_note_names_the_bytes_held);
    tcase_add_test(tc, test_held_workspaces_precede_the_model);
    suite_add_tcase(s, tc);
    return s;
}
