/* `ftest fit` end to end on synthetic records: record files made by running
 * the estimator with constants chosen here (an allocator reserve, a host time
 * per layer, a GEMM efficiency), with noise and warm-up outliers, go through
 * the whole path (parsing, grouping by framework and GPU, writing profiles);
 * the profiles must give the constants back. And record sets that determine
 * nothing (one record, identical lines, no time fields) are refused with one
 * clear line, by the library and by the binary (exit status 2). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cJSON.h>

#include "calibrate_fitguard.h"
#include "estimate.h"
#include "fit.h"
#include "json_util.h"
#include "test_util.h"
#include "step_build.h"
#include "timing.h"

/* The truth the records are generated with: the host's cost per ATen op
 * (the profile common to the PyTorch stacks), no framework host time per
 * block beyond it. */
#define TRUE_OP_HOST_S 1.4e-5

/* A deterministic noise in [-1, 1]: a linear congruential sequence (Numerical
 * Recipes' constants), so the test is the same on every machine. */
static double noise(unsigned *state) {
    *state = *state * 1664525u + 1013904223u;
    return (double)(*state >> 8) / (double)(1u << 24) * 2.0 - 1.0;
}

static est_run make_run(const est_gpu_catalog *cat, const char *model, const char *gpu,
                        int64_t seq, int64_t batch) {
    ft_model m;
    char err[256];
    ck_assert_msg(ft_model_load(model, &m, err, sizeof err) == 0, "%s", err);
    const est_gpu *g = est_gpu_find(cat, gpu);
    ck_assert_ptr_nonnull(g);
    est_run r;
    est_run_defaults(&r, &m, g);
    r.framework = EST_FW_HF;
    r.zero_stage = 0;
    r.seq_len = seq;
    r.micro_batch = batch;
    ck_assert_msg(est_run_validate(&r, err, sizeof err) == 0, "%s", err);
    return r;
}

/* One record line; it_per_s <= 0 and bytes < 0 are left out. */
static void write_record(FILE *f, const est_run *r, double it_per_s, int64_t alloc,
                         int64_t reserved) {
    fprintf(f,
            "{\"schema\":\"ftest.record/1\",\"source\":\"fit_recovery synthetic\",\"date\":\"2026-11-23\","
            "\"framework\":\"hf\",\"hardware\":{\"gpu\":\"%s\",\"gpus_per_node\":1,\"nodes\":1},"
            "\"config\":{\"model\":\"%s\",\"micro_batch\":%lld,\"grad_accum\":1,\"seq_len\":%lld,"
            "\"precision\":\"bf16-mixed\",\"zero\":0,\"offload\":\"none\",\"checkpointing\":\"none\","
            "\"attention\":\"sdpa\",\"loss\":\"standard\",\"optimizer\":\"adamw\"},"
            "\"measured\":{\"oom\":false,\"ranks\":[{\"rank\":0,\"peak_allocated_bytes\":%lld",
            r->gpu.name, r->model.name, (long long)r->micro_batch, (long long)r->seq_len,
            (long long)(alloc > 0 ? alloc : 1000));
    if (reserved > 0) fprintf(f, ",\"peak_reserved_bytes\":%lld", (long long)reserved);
    fprintf(f, "}]");
    if (it_per_s > 0) fprintf(f, ",\"it_per_s\":%.9g", it_per_s);
    fprintf(f, "}}\n");
}

static double profile_value(const char *dir, const char *profile, const char *gpu,
                            const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s.json", dir, profile);
    char *text = test_slurp(path, NULL);
    cJSON *root = cJSON_Parse(text);
    free(text);
    ck_assert_ptr_nonnull(root);
    const cJSON *sec = gpu ? cJSON_GetObjectItemCaseSensitive(
                                 cJSON_GetObjectItemCaseSensitive(root, "gpus"), gpu)
                           : cJSON_GetObjectItemCaseSensitive(root, "constants");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(sec, name), "value");
    ck_assert_msg(cJSON_IsNumber(v), "%s: %s not fitted", path, name);
    double x = v->valuedouble;
    cJSON_Delete(root);
    return x;
}

START_TEST(test_fit_recovers_known_constants) {
    est_gpu_catalog cat;
    char err[256];
    ck_assert_msg(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0, "%s", err);
    char dir[] = "/tmp/ftest-fitrec-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char files[1][1024];
    snprintf(files[0], sizeof files[0], "%s/synthetic.jsonl", dir);
    FILE *f = fopen(files[0], "w");
    ck_assert_ptr_nonnull(f);
    unsigned seed = 12345;

    /* Time: a sequence x batch sweep of Llama-3.2-1B on an H100, it/s from the
     * time model with the true constants, +-1% noise, and two warm-up-like
     * outliers at 40% of the speed, which an L1 fit must shrug off. */
    est_constants truth;
    est_constants_defaults(&truth);
    truth.value[EST_K_KERNEL_HOST_S] = TRUE_OP_HOST_S;
    truth.value[EST_K_FRAMEWORK_LAYER_HOST_S] = 0;
    int timed = 0;
    for (int64_t seq = 128; seq <= 8192; seq *= 2)
        for (int64_t batch = 1; batch <= 4; batch *= 2) {
            est_run r = make_run(&cat, "llama3.2-1b", "h100-80gb", seq, batch);
            est_time_detail t;
            est_time_model(&r, &truth, &t);
            ck_assert(t.modelled && t.it_per_s > 0);
            double it = t.it_per_s * (1 + 0.01 * noise(&seed));
            if (timed == 3 || timed == 11) it *= 0.4;
            write_record(f, &r, it, -1, -1);
            timed++;
        }

    ck_assert_int_eq(fclose(f), 0);

    ck_assert_msg(cal_fit_guard(files, 1, &cat, err, sizeof err) == 0, "%s", err);
    FILE *log = fopen("/dev/null", "w");
    /* The profile set replaces its directory whole: a folder of its own. */
    char pdir[64], names[256];
    snprintf(pdir, sizeof pdir, "%s/profiles", dir);
    ck_assert_msg(cal_fit_files(files, 1, &cat, pdir, log, names, sizeof names, err, sizeof err) >= 1,
                  "%s", err);
    fclose(log);

    /* Time constants are framework-wide: no GPU gets its own. The cost per op
     * is common to the stacks; the framework's host time per block on top of
     * it comes back as none (within 10 us per block). */
    ck_assert_close(profile_value(pdir, "pytorch", NULL, "kernel_host_overhead_s"), TRUE_OP_HOST_S, 0, 0.02);
    ck_assert_close(profile_value(pdir, "hf", NULL, "framework_layer_host_s"), 0, 1e-5, 0);

    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
    est_gpu_catalog_free(&cat);
}
END_TEST

/* Writes `n` copies of one timed H100 record at each of the given sequence
 * lengths (time fields left out when it_per_s <= 0). */
static void write_set(const char *path, const est_gpu_catalog *cat, const int64_t *seqs,
                      int nseq, int copies, double it_per_s) {
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < nseq; i++) {
        est_run r = make_run(cat, "llama3.2-1b", "h100-80gb", seqs[i], 1);
        for (int c = 0; c < copies; c++) write_record(f, &r, it_per_s, 1 << 30, -1);
    }
    ck_assert_int_eq(fclose(f), 0);
}

static void refused(char (*files)[1024], const est_gpu_catalog *cat, const char *words) {
    char err[256] = "";
    ck_assert_msg(cal_fit_guard(files, 1, cat, err, sizeof err) < 0, "accepted %s", files[0]);
    ck_assert_msg(strstr(err, words), "message \"%s\" lacks \"%s\"", err, words);
    ck_assert_msg(!strchr(err, '\n'), "several lines: %s", err);
}

START_TEST(test_degenerate_sets_refused) {
    est_gpu_catalog cat;
    char err[256];
    ck_assert_msg(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0, "%s", err);
    char dir[] = "/tmp/ftest-fitdeg-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char files[1][1024];
    snprintf(files[0], sizeof files[0], "%s/r.jsonl", dir);
    const int64_t one[] = {1024}, many[] = {256, 512, 1024, 2048};

    write_set(files[0], &cat, one, 0, 0, 1.0); /* empty file */
    refused(files, &cat, "no readable records");
    write_set(files[0], &cat, one, 1, 1, 2.5); /* one record */
    refused(files, &cat, "1 records, 1 distinct");
    write_set(files[0], &cat, one, 1, 6, 2.5); /* six identical lines */
    refused(files, &cat, "6 records, 1 distinct");
    write_set(files[0], &cat, many, 4, 1, 0); /* a sweep without time fields */
    refused(files, &cat, "0 timed sizes");
    /* The positive control: the same sweep with it/s is accepted. */
    write_set(files[0], &cat, many, 4, 1, 2.5);
    ck_assert_msg(cal_fit_guard(files, 1, &cat, err, sizeof err) == 0, "%s", err);

    /* The binary: one line on stderr, exit status 2, no profile written. */
    write_set(files[0], &cat, one, 1, 6, 2.5);
    const char *build = test_build_dir();
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s/ftest fit --out %s %s 2> %s/err.txt > /dev/null", build, dir,
             files[0], dir);
    int rc = system(cmd);
    ck_assert_msg(WIFEXITED(rc) && WEXITSTATUS(rc) == 2, "ftest fit exit %d", rc);
    snprintf(cmd, sizeof cmd, "%s/err.txt", dir);
    size_t len = 0;
    char *text = test_slurp(cmd, &len);
    ck_assert_msg(len > 0 && strstr(text, "determine no constant") &&
                      strchr(text, '\n') == text + len - 1,
                  "stderr: %s", text);
    free(text);
    snprintf(cmd, sizeof cmd, "%s/hf.json", dir);
    ck_assert_msg(access(cmd, F_OK) != 0, "a refused fit wrote %s", cmd);

    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
    est_gpu_catalog_free(&cat);
}
END_TEST

Suite *suite_fit_recovery(void);
Suite *suite_fit_recovery(void) {
    Suite *s = suite_create("fit_recovery");
    TCase *tc = tcase_create("fit");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_fit_recovers_known_constants);
    tcase_add_test(tc, test_degenerate_sets_refused);
    suite_add_tcase(s, tc);
    return s;
}
