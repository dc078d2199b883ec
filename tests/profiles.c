/* The committed profiles are a function of the committed records: `ftest fit`
 * over the committed record files writes exactly the committed profile files, so
 * no constant in them was typed in by hand or left behind by older records. */
#include <check.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"

START_TEST(test_profiles_refit_from_records) {
    char dir[] = "/tmp/ftest-profiles-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char out[64];
    snprintf(out, sizeof out, "%s/p", dir);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd %s && %s/ftest fit --out %s calibrate/records/*.jsonl >/dev/null 2>&1",
             test_repo_path("."), test_build_dir(), out);
    ck_assert_int_eq(system(cmd), 0);
    glob_t g;
    char pattern[1100];
    snprintf(pattern, sizeof pattern, "%s", test_repo_path("calibrate/profiles/*.json"));
    ck_assert_int_eq(glob(pattern, 0, NULL, &g), 0);
    ck_assert_uint_gt(g.gl_pathc, 0);
    for (size_t i = 0; i < g.gl_pathc; i++) {
        const char *base = strrchr(g.gl_pathv[i], '/') + 1;
        char fresh[1200];
        snprintf(fresh, sizeof fresh, "%s/%s", out, base);
        char *a = test_slurp(g.gl_pathv[i], NULL), *b = test_slurp(fresh, NULL);
        ck_assert_msg(strcmp(a, b) == 0, "calibrate/profiles/%s differs from what ftest fit makes of "
                                          "the committed records: rerun `ftest fit --out "
                                          "calibrate/profiles calibrate/records/*.jsonl`", base);
        free(a);
        free(b);
        unlink(fresh);
    }
    globfree(&g);
    rmdir(out);
    rmdir(dir);
}
END_TEST

/* ZeRO-3's pending frees follow from DeepSpeed's throttles
 * (seam_deepspeed_lag.c), not from a fitted multiple of the LM head: no fit
 * writes zero3_pending_free_heads, from the GPU day's emulated ranks or from
 * the 8-GPU A100 sweeps, and `ftest constants` of a multi-rank ZeRO-3 run
 * does not list it. */
START_TEST(test_pending_frees_not_fitted) {
    char dir[] = "/tmp/ftest-pending-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char cmd[4096], log[1200];
    snprintf(log, sizeof log, "%s/log", dir);
    const char *files[] = {"calibrate/records/probe-h200-2026-11-26.jsonl",
                           "calibrate/records/gpjt-llama3-8b-a100x8.jsonl"};
    for (int i = 0; i < 3; i++) {
        if (i < 2)
            snprintf(cmd, sizeof cmd, "cd %s && %s/ftest fit --out %s/p%d %s >%s 2>&1 && cat %s/p%d/*.json >>%s",
                     test_repo_path("."), test_build_dir(), dir, i, files[i], log, dir, i, log);
        else
            snprintf(cmd, sizeof cmd,
                     "cd %s && %s/ftest constants --model llama3-8b --gpus 8 --zero 3 --framework deepspeed >%s 2>&1",
                     test_repo_path("."), test_build_dir(), log);
        ck_assert_int_eq(system(cmd), 0);
        char *text = test_slurp(log, NULL);
        ck_assert_msg(strstr(text, i < 2 ? "ftest.profile/1" : "ds_reduce_bucket_elems") != NULL, "%s", text);
        ck_assert_msg(strstr(text, "zero3_pending_free_heads") == NULL, "%d:\n%s", i, text);
        free(text);
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

Suite *suite_profiles(void);
Suite *suite_profiles(void) {
    Suite *s = suite_create("profiles");
    TCase *tc = tcase_create("refit");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_profiles_refit_from_records);
    tcase_add_test(tc, test_pending_frees_not_fitted);
    suite_add_tcase(s, tc);
    return s;
}
