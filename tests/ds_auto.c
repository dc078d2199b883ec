/* --deepspeed-config "auto" values resolved as transformers' DeepSpeed
 * integration resolves them (integrations/deepspeed.py,
 * HfTrainerDeepSpeedConfig.trainer_config_process: fill_match from the
 * TrainingArguments), and train_batch_size checked as DeepSpeed checks it
 * (runtime/config.py _batch_assertion). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_run.h"
#include "estimate.h"
#include "test_util.h"

static char cfg_path[64];

static void write_cfg(const char *text) {
    snprintf(cfg_path, sizeof cfg_path, "/tmp/ftest-ds-auto-XXXXXX");
    int fd = mkstemp(cfg_path);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

/* The Hugging Face docs' form: precision, batch, accumulation and the global
 * batch all "auto", and an "optimizer" block with "auto" parameters (the
 * flags-only run models DeepSpeed's own optimizer; a config without the
 * block steps the Trainer's torch AdamW, seam_deepspeed_optim.c). With the
 * flags standing for TrainingArguments the run and its estimate equal the
 * flags-only run. */
START_TEST(test_auto_equals_flags) {
    write_cfg("{\"fp16\": {\"enabled\": \"auto\"}, \"bf16\": {\"enabled\": \"auto\"},"
              " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": \"auto\"}},"
              " \"zero_optimization\": {\"stage\": 2},"
              " \"train_micro_batch_size_per_gpu\": \"auto\", \"gradient_accumulation_steps\": \"auto\","
              " \"train_batch_size\": \"auto\", \"gradient_clipping\": \"auto\"}");
    char err[256];
    est_run a, b;
    char *with_cfg[] = {"ftest", "--model", "llama3-8b", "--gpus", "8", "--batch", "4",
                        "--grad-accum", "8", "--precision", "bf16-mixed", "--deepspeed-config",
                        cfg_path, NULL};
    ck_assert_msg(test_cli_build(13, with_cfg, &a, err, sizeof err) == 0, "%s", err);
    char *flags[] = {"ftest", "--model", "llama3-8b", "--gpus", "8", "--batch", "4", "--grad-accum",
                     "8", "--precision", "bf16-mixed", "--zero", "2", "--framework", "deepspeed",
                     NULL};
    ck_assert_msg(test_cli_build(15, flags, &b, err, sizeof err) == 0, "%s", err);
    unlink(cfg_path);
    ck_assert_int_eq(a.precision, EST_PREC_BF16_MIXED);
    ck_assert_int_eq(a.micro_batch, 4);
    ck_assert_int_eq(a.grad_accum, 8);
    ck_assert_int_eq(a.zero_stage, 2);
    est_estimate ea, eb;
    est_estimate_init(&ea);
    est_estimate_init(&eb);
    ck_assert_msg(est_estimate_run(&a, &ea, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(est_estimate_run(&b, &eb, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(ea.peak_allocated_bytes, eb.peak_allocated_bytes);
    ck_assert_int_eq(ea.device_used_bytes, eb.device_used_bytes);
    ck_assert(ea.step_time_s == eb.step_time_s);
    est_estimate_free(&ea);
    est_estimate_free(&eb);
}
END_TEST

/* A numeric train_batch_size: 256 = 4 x 8 GPUs x 8 gives the accumulation
 * when the config leaves it out (DeepSpeed derives it); 100 is refused
 * whether it fails to divide or contradicts the flags. */
START_TEST(test_train_batch_size) {
    char err[256];
    est_run run;
    write_cfg("{\"bf16\": {\"enabled\": true}, \"zero_optimization\": {\"stage\": 3},"
              " \"train_micro_batch_size_per_gpu\": 4, \"train_batch_size\": 256}");
    char *derive[] = {"ftest", "--model", "llama3-8b", "--gpus", "8", "--deepspeed-config", cfg_path,
                      NULL};
    ck_assert_msg(test_cli_build(7, derive, &run, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(run.grad_accum, 8);
    char *contradict[] = {"ftest", "--model", "llama3-8b", "--gpus", "8", "--grad-accum", "2",
                          "--deepspeed-config", cfg_path, NULL};
    ck_assert_int_eq(test_cli_build(9, contradict, &run, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "train_batch_size 256"));
    unlink(cfg_path);
    write_cfg("{\"train_micro_batch_size_per_gpu\": 4, \"train_batch_size\": 100}");
    char *odd[] = {"ftest", "--model", "llama3-8b", "--gpus", "8", "--deepspeed-config", cfg_path,
                   NULL};
    ck_assert_int_eq(test_cli_build(7, odd, &run, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "not divisible"));
    unlink(cfg_path);
    write_cfg("{\"train_batch_size\": \"many\"}");
    ck_assert_int_eq(test_cli_build(7, odd, &run, err, sizeof err), -1);
    unlink(cfg_path);
}
END_TEST

/* The measured runs' configs in shared/data read as they are. */
START_TEST(test_gpjt_configs) {
    const char *files[] = {"tests/fixtures/ds_config_zero3.json", /* copies, always present */
                           "tests/fixtures/ds_config_zero2_offload.json",
                           "../shared/data/gpjt-qwen0.5b/ds_config_zero3.json",
                           "../shared/data/gpjt-qwen0.5b/ds_config_zero2_offload.json",
                           "../shared/data/gpjt-llama3-8b/ds_config_zero3.json"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s", test_repo_path(files[i]));
        if (i >= 2 && access(path, R_OK) != 0) continue; /* shared data beside the checkout */
        char err[256];
        est_run run;
        char *argv[] = {"ftest", "--model", "qwen1.5-0.5b", "--deepspeed-config", path, NULL};
        ck_assert_msg(test_cli_build(5, argv, &run, err, sizeof err) == 0, "%s: %s", files[i], err);
    }
}
END_TEST

Suite *suite_ds_auto(void);
Suite *suite_ds_auto(void) {
    Suite *s = suite_create("ds_auto");
    TCase *tc = tcase_create("ds_auto");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_auto_equals_flags);
    tcase_add_test(tc, test_train_batch_size);
    tcase_add_test(tc, test_gpjt_configs);
    suite_add_tcase(s, tc);
    return s;
}
