/* --accelerate-config: accelerate's config YAML (estimator/frameworks/accelerate_config.c). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_run.h"
#include "test_util.h"

static char tmp_path[64];
static const char *write_yaml(const char *text) {
    snprintf(tmp_path, sizeof tmp_path, "/tmp/ftest-accel-XXXXXX");
    int fd = mkstemp(tmp_path);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "w");
    fputs(text, f);
    fclose(f);
    return tmp_path;
}

START_TEST(test_fsdp_file) {
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s", test_repo_path("tests/fixtures/accelerate_fsdp.yaml"));
    est_run run;
    char *argv[] = {"ftest", "--model", "llama3-8b", "--accelerate-config", path, NULL};
    ck_assert_msg(test_cli_build(5, argv, &run, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(run.framework, EST_FW_FSDP);
    ck_assert_int_eq(run.zero_stage, 3);                        /* FULL_SHARD */
    ck_assert_int_eq(run.offload, EST_OFFLOAD_OPTIMIZER_PARAMS); /* fsdp_offload_params */
    ck_assert_int_eq(run.gpus_per_node, 8);
    ck_assert_int_eq(run.nodes, 1);
    ck_assert_int_eq(run.precision, EST_PREC_BF16_MIXED);
    ck_assert_ptr_nonnull(strstr(run.settings_from, "num_processes"));
    /* fsdp_backward_prefetch BACKWARD_PRE, fsdp_forward_prefetch false */
    ck_assert_int_eq(run.fsdp_backward_prefetch, EST_FSDP_PREFETCH_PRE);
    ck_assert(!run.fsdp_forward_prefetch);
    ck_assert_ptr_nonnull(strstr(run.settings_from, "fsdp_backward_prefetch"));
    /* Flags win. */
    char *argv2[] = {"ftest", "--model", "llama3-8b", "--accelerate-config", path, "--gpus", "4",
                     "--offload", "none", NULL};
    ck_assert_msg(test_cli_build(9, argv2, &run, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(run.gpus_per_node, 4);
    ck_assert_int_eq(run.offload, EST_OFFLOAD_NONE);
}
END_TEST

/* The DeepSpeed plugin without a config file; 16 processes on 2 machines;
 * numeric sharding strategies of older accelerate versions. */
START_TEST(test_deepspeed_plugin) {
    char err[256];
    est_run run;
    const char *p = write_yaml("distributed_type: DEEPSPEED\ndeepspeed_config:\n"
                               "  gradient_accumulation_steps: 4\n  offload_optimizer_device: cpu\n"
                               "  offload_param_device: none\n  zero3_init_flag: false\n  zero_stage: 2\n"
                               "mixed_precision: fp16\nnum_machines: 2\nnum_processes: 16\n");
    char *argv[] = {"ftest", "--model", "llama3-8b", "--accelerate-config", (char *)p, NULL};
    ck_assert_msg(test_cli_build(5, argv, &run, err, sizeof err) == 0, "%s", err);
    unlink(p);
    ck_assert_int_eq(run.framework, EST_FW_DEEPSPEED);
    ck_assert_int_eq(run.zero_stage, 2);
    ck_assert_int_eq(run.offload, EST_OFFLOAD_OPTIMIZER);
    ck_assert_int_eq(run.grad_accum, 4);
    ck_assert_int_eq(run.gpus_per_node, 8);
    ck_assert_int_eq(run.nodes, 2);
    ck_assert_int_eq(run.precision, EST_PREC_FP16_MIXED);
    p = write_yaml("distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: 2\nnum_processes: 2\n");
    char *argv2[] = {"ftest", "--model", "llama3-8b", "--accelerate-config", (char *)p, NULL};
    ck_assert_msg(test_cli_build(5, argv2, &run, err, sizeof err) == 0, "%s", err);
    unlink(p);
    ck_assert_int_eq(run.zero_stage, 2); /* SHARD_GRAD_OP */
}
END_TEST

/* fsdp_transformer_layer_cls_to_wrap picks the FSDP unit: Mixtral's sparse
 * MoE block instead of its decoder layer (fsdp_policy.h), and is listed
 * among the keys taken. */
START_TEST(test_wrap_class) {
    char err[256];
    est_run run;
    const char *p = write_yaml("distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD\n"
                               "  fsdp_transformer_layer_cls_to_wrap: MixtralSparseMoeBlock\nnum_processes: 8\n");
    char *argv[] = {"ftest", "--model", "mixtral-8x7b", "--accelerate-config", (char *)p, NULL};
    ck_assert_msg(test_cli_build(5, argv, &run, err, sizeof err) == 0, "%s", err);
    unlink(p);
    ck_assert_int_eq(run.fsdp_wrap, EST_FSDP_WRAP_MOE_BLOCK);
    ck_assert_ptr_nonnull(strstr(run.settings_from, "fsdp_transformer_layer_cls_to_wrap"));
}
END_TEST

START_TEST(test_bad_accelerate) {
    const char *cases[][2] = {
        {"distributed_type: TPU\n", "distributed_type"},
        {"num_processes: 10\nnum_machines: 4\n", "multiple"},
        {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  offload_optimizer_device: nvme\n", "nvme"},
        {"distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: HYBRID_SHARD\n", "HYBRID"},
        {"mixed_precision: fp8\n", "fp8"},
        {"distributed_type: FSDP\nfsdp_config: [1, 2]\n", "mapping"},
        /* Llama has no MistralDecoderLayer: PEFT's policy raises before training */
        {"distributed_type: FSDP\nfsdp_config:\n  fsdp_transformer_layer_cls_to_wrap: MistralDecoderLayer\n",
         "names no module"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[256] = "";
        est_run run;
        const char *p = write_yaml(cases[i][0]);
        char *argv[] = {"ftest", "--model", "llama3-8b", "--accelerate-config", (char *)p, NULL};
        int rc = test_cli_build(5, argv, &run, err, sizeof err);
        unlink(p);
        ck_assert_msg(rc == -1, "accepted case %zu", i);
        ck_assert_msg(strstr(err, cases[i][1]) && !strchr(err, '\n'), "case %zu: \"%s\"", i, err);
    }
}
END_TEST

Suite *suite_accelerate(void);
Suite *suite_accelerate(void) {
    Suite *s = suite_create("accelerate");
    TCase *tc = tcase_create("accelerate");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_fsdp_file);
    tcase_add_test(tc, test_deepspeed_plugin);
    tcase_add_test(tc, test_bad_accelerate);
    tcase_add_test(tc, test_wrap_class);
    suite_add_tcase(s, tc);
    return s;
}
