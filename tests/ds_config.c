/* --deepspeed-config: the configs of the measured runs, "auto", bad files. */
#include <check.h>
#include <string.h>

#include "ds_config.h"
#include "estimate.h"
#include "test_util.h"

static est_run qwen_run(void) {
    ft_model m;
    char err[256];
    ck_assert_msg(ft_model_load("qwen1.5-0.5b", &m, err, sizeof err) == 0, "%s", err);
    est_run run;
    est_run_defaults(&run, &m, NULL);
    return run;
}

START_TEST(test_measured_configs) {
    est_run run = qwen_run();
    char err[256];
    ck_assert_msg(est_ds_config_load(test_repo_path("tests/fixtures/ds_config_zero3.json"), &run, err,
                                     sizeof err) == 0, "%s", err);
    ck_assert_int_eq(run.zero_stage, 3);
    ck_assert_int_eq(run.offload, EST_OFFLOAD_NONE);
    ck_assert_int_eq(run.precision, EST_PREC_FP16_MIXED);
    ck_assert_int_eq(run.micro_batch, 1); /* "train_micro_batch_size_per_gpu": 1 */
    ck_assert_int_eq(run.framework, EST_FW_DEEPSPEED);

    run = qwen_run();
    ck_assert_msg(est_ds_config_load(test_repo_path("tests/fixtures/ds_config_zero2_offload.json"),
                                     &run, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(run.zero_stage, 2);
    ck_assert_int_eq(run.offload, EST_OFFLOAD_OPTIMIZER);
    ck_assert_int_eq(run.micro_batch, 1); /* "auto": left as it was */
}
END_TEST

/* "auto" bucket sizes as the HF integration fills them: h^2 = 1024^2 for the
 * reduce bucket, which shrinks the 954 MiB default bucket to 2 MiB in fp16. */
START_TEST(test_auto_bucket) {
    est_run a = qwen_run(), b = qwen_run();
    char err[256];
    const char *cfg = "{\"fp16\": {\"enabled\": true}, \"zero_optimization\": {\"stage\": 3, "
                      "\"reduce_bucket_size\": \"auto\"}}";
    ck_assert(est_ds_config_apply(cfg, strlen(cfg), &a, err, sizeof err) == 0);
    ck_assert_int_eq(a.ds.reduce_bucket_elems, 1024 * 1024);
    const char *def = "{\"fp16\": {\"enabled\": true}, \"zero_optimization\": {\"stage\": 3}}";
    ck_assert(est_ds_config_apply(def, strlen(def), &b, err, sizeof err) == 0);
    est_gpu g = {.name = "x", .memory_bytes = INT64_C(80) << 30};
    a.gpu = b.gpu = g;
    est_estimate ea, eb;
    est_estimate_init(&ea);
    est_estimate_init(&eb);
    ck_assert(est_estimate_run(&a, &ea, err, sizeof err) == 0);
    ck_assert(est_estimate_run(&b, &eb, err, sizeof err) == 0);
    /* Stage 3 keeps its bucket through the step: the peak drops by exactly
     * (5e8 - 1024^2) elements x 2 bytes. */
    ck_assert_int_eq(eb.peak_allocated_bytes - ea.peak_allocated_bytes, (500000000 - 1048576) * 2);
    est_estimate_free(&ea);
    est_estimate_free(&eb);
}
END_TEST

/* A persistence threshold of 0 is a setting, not "unset": on 8 GPUs Qwen2's
 * small parameters (2 norms of h = 1024 and q, k, v biases of 1024 per block,
 * 24 blocks, and the final norm) are then no longer kept whole in fp16:
 * (24 * 5 + 1) * 1024 * 2 bytes fewer at every moment. */
START_TEST(test_zero_persistence_is_a_setting) {
    est_run a = qwen_run(), b = qwen_run();
    char err[256];
    const char *none = "{\"fp16\": {\"enabled\": true}, \"zero_optimization\": {\"stage\": 3, "
                       "\"stage3_param_persistence_threshold\": 0}}";
    const char *dflt = "{\"fp16\": {\"enabled\": true}, \"zero_optimization\": {\"stage\": 3}}";
    ck_assert(est_ds_config_apply(none, strlen(none), &a, err, sizeof err) == 0);
    ck_assert(est_ds_config_apply(dflt, strlen(dflt), &b, err, sizeof err) == 0);
    ck_assert_int_eq(a.ds.persistence_elems, 0);
    ck_assert_int_eq(b.ds.persistence_elems, EST_DS_UNSET);
    est_gpu g = {.name = "x", .memory_bytes = INT64_C(80) << 30};
    a.gpu = b.gpu = g;
    a.gpus_per_node = b.gpus_per_node = 8;
    est_estimate ea, eb;
    est_estimate_init(&ea);
    est_estimate_init(&eb);
    ck_assert(est_estimate_run(&a, &ea, err, sizeof err) == 0);
    ck_assert(est_estimate_run(&b, &eb, err, sizeof err) == 0);
    size_t ia = 0, ib = 0;
    while (ia < ea.tl.count && strcmp(ea.tl.phases[ia].label, "engine initialized")) ia++;
    while (ib < eb.tl.count && strcmp(eb.tl.phases[ib].label, "engine initialized")) ib++;
    ck_assert(ia < ea.tl.count && ib < eb.tl.count);
    ck_assert_int_eq(est_phase_allocated(&eb.tl.phases[ib]) - est_phase_allocated(&ea.tl.phases[ia]),
                     (24 * 5 + 1) * 1024 * 2);
    est_estimate_free(&ea);
    est_estimate_free(&eb);
}
END_TEST

/* The coordinator's limits and the optimizer's owner are settings: with
 * stage3_max_live_parameters and stage3_max_reuse_distance given they are read
 * (unset: DeepSpeed's 1e9); a config with an "optimizer" section has
 * DeepSpeed build it, one without leaves the script's (the HF Trainer's torch
 * AdamW). */
START_TEST(test_live_reuse_and_optimizer_owner) {
    est_run a = qwen_run(), b = qwen_run();
    char err[256];
    const char *set = "{\"zero_optimization\": {\"stage\": 3, \"stage3_max_live_parameters\": 300000, "
                      "\"stage3_max_reuse_distance\": 0}, \"optimizer\": {\"type\": \"AdamW\"}}";
    const char *none = "{\"zero_optimization\": {\"stage\": 3}}";
    ck_assert_msg(est_ds_config_apply(set, strlen(set), &a, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(est_ds_config_apply(none, strlen(none), &b, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(a.ds.max_live_elems, 300000);
    ck_assert_int_eq(a.ds.max_reuse_distance_elems, 0);
    ck_assert(!a.ds.client_optimizer);
    ck_assert_int_eq(b.ds.max_live_elems, EST_DS_UNSET);
    ck_assert_int_eq(b.ds.max_reuse_distance_elems, EST_DS_UNSET);
    ck_assert(b.ds.client_optimizer);
}
END_TEST

/* axolotl's shipped ZeRO-3 configs (deepspeed_configs/zero3*.json, axolotl
 * 0.18.0) write "sub_group_size": 0, which DeepSpeed accepts (zero/config.py:
 * Field(ge=0)): stage3.py closes a sub-group once it holds >= 0 elements, so
 * every parameter's partition is its own sub-group. For Llama-3-8B on 8 ranks
 * the largest parameter is the embedding (or head), 128256 x 4096 =
 * 525,336,576 elements; its partition is 525,336,576 / 8 = 65,667,072. */
START_TEST(test_sub_group_zero) {
    ft_model m;
    char err[256];
    ck_assert_msg(ft_model_load("llama3-8b", &m, err, sizeof err) == 0, "%s", err);
    est_run run;
    est_run_defaults(&run, &m, NULL);
    const char *cfg = "{\"bf16\": {\"enabled\": \"auto\"}, \"zero_optimization\": {\"stage\": 3, "
                      "\"sub_group_size\": 0, \"reduce_bucket_size\": \"auto\", "
                      "\"max_live_parameters\": 0, \"max_reuse_distance\": 0}, "
                      "\"train_micro_batch_size_per_gpu\": \"auto\", \"train_batch_size\": \"auto\"}";
    ck_assert_msg(est_ds_config_apply(cfg, strlen(cfg), &run, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(run.ds.sub_group_elems, 0);
    run.gpus_per_node = 8;
    ck_assert_msg(est_ds_config_resolve(&run, false, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(run.ds.sub_group_elems, INT64_C(65667072));
    ck_assert_int_eq(run.ds.reduce_bucket_elems, INT64_C(4096) * 4096); /* "auto": h^2 */
}
END_TEST

/* accelerate's _prepare_deepspeed: under ZeRO-Offload the HF Trainer's own
 * optimizer (the config names none) becomes DeepSpeedCPUAdam unless
 * "zero_force_ds_cpu_optimizer": false; a config that names an optimizer, or
 * no offload, leaves the asked one alone. */
START_TEST(test_offload_replaces_client_optimizer) {
    ft_model m;
    char err[256];
    ck_assert_msg(ft_model_load("tiny-llama", &m, err, sizeof err) == 0, "%s", err);
    static const struct {
        const char *cfg;
        bool replaced;
    } CASES[] = {
        {"{\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": \"cpu\"}}}", true},
        {"{\"zero_force_ds_cpu_optimizer\": false, \"zero_optimization\": {\"stage\": 2, "
         "\"offload_optimizer\": {\"device\": \"cpu\"}}}", false},
        {"{\"optimizer\": {\"type\": \"AdamW\"}, \"zero_optimization\": {\"stage\": 2, "
         "\"offload_optimizer\": {\"device\": \"cpu\"}}}", false},
        {"{\"zero_optimization\": {\"stage\": 2}}", false},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        est_run run;
        est_run_defaults(&run, &m, NULL);
        ck_assert_msg(est_ds_config_apply(CASES[i].cfg, strlen(CASES[i].cfg), &run, err, sizeof err) == 0, "%s", err);
        run.optimizer = EST_OPT_ADAMW_8BIT;
        ck_assert_msg(est_ds_config_resolve(&run, false, err, sizeof err) == 0, "%s", err);
        ck_assert_int_eq(run.optimizer, CASES[i].replaced ? EST_OPT_ADAMW : EST_OPT_ADAMW_8BIT);
        ck_assert_int_eq(run.ds.replaced_optimizer, CASES[i].replaced ? (int)EST_OPT_ADAMW_8BIT : -1);
    }
}
END_TEST

/* Configs whose mechanism ftest does not model: one line naming it
 * (parameter offload alone below stage 3; DeepCompile). axolotl's
 * zero3_bf16_cpuoffload_params.json is modelled (tests/trainable.c). */
START_TEST(test_unmodelled_configs) {
    static const char *const CASES[][2] = {
        {"{\"zero_optimization\": {\"stage\": 2, \"offload_param\": {\"device\": \"cpu\", "
         "\"pin_memory\": true}, \"sub_group_size\": 0}}",
         "offload_param without offload_optimizer below stage 3"},
        {"{\"compile\": {\"deepcompile\": true}, \"zero_optimization\": {\"stage\": 3}}", "DeepCompile"},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        est_run run = qwen_run();
        char err[256] = "";
        ck_assert_int_eq(est_ds_config_apply(CASES[i][0], strlen(CASES[i][0]), &run, err, sizeof err), -1);
        ck_assert_msg(strstr(err, "not modelled") && strstr(err, CASES[i][1]) && !strchr(err, '\n'), "%s", err);
    }
}
END_TEST

static const char *const BAD[] = {
    "{\"fp16\": {\"enabled\": true}, \"bf16\": {\"enabled\": true}}",
    "{\"zero_optimization\": {\"stage\": 5}}",
    "{\"zero_optimization\": {\"stage\": \"3\"}}",
    "{\"zero_optimization\": {\"stage\": 3, \"offload_param\": {\"device\": \"nvme\"}}}",
    "{\"zero_optimization\": {\"stage\": 1, \"offload_param\": {\"device\": \"cpu\"}}}",
    "{\"zero_optimization\": {\"reduce_bucket_size\": -1}}",
    "{\"zero_optimization\": [1]}",
    "{\"train_micro_batch_size_per_gpu\": 0}",
    "[1, 2]",
    "{\"fp16\": ",
};

START_TEST(test_bad_configs) {
    est_run run = qwen_run();
    char err[256] = "";
    ck_assert_int_eq(est_ds_config_apply(BAD[_i], strlen(BAD[_i]), &run, err, sizeof err), -1);
    ck_assert_msg(strlen(err) > 10 && !strchr(err, '\n'), "message: %s", err);
}
END_TEST

Suite *suite_ds_config(void);
Suite *suite_ds_config(void) {
    Suite *s = suite_create("ds_config");
    TCase *tc = tcase_create("deepspeed config");
    tcase_add_test(tc, test_measured_configs);
    tcase_add_test(tc, test_offload_replaces_client_optimizer);
    tcase_add_test(tc, test_auto_bucket);
    tcase_add_test(tc, test_zero_persistence_is_a_setting);
    tcase_add_test(tc, test_live_reuse_and_optimizer_owner);
    tcase_add_test(tc, test_sub_group_zero);
    tcase_add_test(tc, test_unmodelled_configs);
    tcase_add_loop_test(tc, test_bad_configs, 0, (int)(sizeof BAD / sizeof BAD[0]));
    suite_add_tcase(s, tc);
    return s;
}
