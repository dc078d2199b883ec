/* --accelerate-config: accelerate's config YAML (estimator/frameworks/accelerate_config.c). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "accelerate_keys.h"
#include "cli_run.h"
#include "estimate.h"
#include "test_util.h"

static const char *write_yaml(const char *text) { return test_write_temp("accel", text); }

/* The file is refused in one line that names `needle`. */
static void expect_refused(const char *yaml, const char *needle, size_t i) {
    char err[256] = "";
    est_run run;
    const char *p = write_yaml(yaml);
    char *argv[] = {"ftest", "--model", "llama3-8b", "--accelerate-config", (char *)p, NULL};
    int rc = test_cli_build(5, argv, &run, err, sizeof err);
    unlink(p);
    ck_assert_msg(rc == -1, "accepted case %zu", i);
    ck_assert_msg(strstr(err, needle) && !strchr(err, '\n'), "case %zu: \"%s\"", i, err);
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
    p = write_yaml("distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: 2\n"
                   "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\nnum_processes: 2\n");
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
                               "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"
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
        {"distributed_type: FSDP\nfsdp_config:\n  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"
         "  fsdp_transformer_layer_cls_to_wrap: MistralDecoderLayer\n",
         "names no module"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) expect_refused(cases[i][0], cases[i][1], i);
}
END_TEST

/* The run a config gives against the run its flags give: peak allocated,
 * device use, host RAM while training and loading, and step time equal. */
static void same_as_flags(const char *yaml, int fargc, char *flags[]) {
    char err[256];
    est_run from_file, from_flags;
    const char *p = write_yaml(yaml);
    char *argv[] = {"ftest", "--model", "llama3.2-1b", "--stack", "2026-11", "--accelerate-config", (char *)p, NULL};
    int rc = test_cli_build(7, argv, &from_file, err, sizeof err);
    unlink(p);
    ck_assert_msg(rc == 0, "%s: %s", yaml, err);
    ck_assert_msg(test_cli_build(fargc, flags, &from_flags, err, sizeof err) == 0, "%s", err);
    est_estimate a, b;
    est_estimate_init(&a);
    est_estimate_init(&b);
    ck_assert_msg(est_estimate_run(&from_file, &a, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(est_estimate_run(&from_flags, &b, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(a.peak_allocated_bytes == b.peak_allocated_bytes, "%s: peak %lld vs %lld", yaml,
                  (long long)a.peak_allocated_bytes, (long long)b.peak_allocated_bytes);
    ck_assert_int_eq(a.device_used_bytes, b.device_used_bytes);
    ck_assert_int_eq(a.cpu_bytes, b.cpu_bytes);
    ck_assert_int_eq(a.cpu_load_bytes, b.cpu_load_bytes);
    ck_assert(a.step_time_s == b.step_time_s);
    est_estimate_free(&a);
    est_estimate_free(&b);
}

#define FSDP_HEAD "distributed_type: FSDP\nmixed_precision: bf16\nnum_processes: 4\nfsdp_config:\n" \
                  "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n  fsdp_cpu_ram_efficient_loading: false\n"
#define FLAGS_FSDP "ftest", "--model", "llama3.2-1b", "--stack", "2026-11", "--framework", "fsdp", "--gpus", "4", \
                   "--precision", "bf16-mixed"

/* Keys honoured since accelerate's FSDP2 configs (fsdp_version 2 with
 * fsdp_reshard_after_forward; accelerate >= 1.6), dynamo_config,
 * zero3_init_flag and the old top-level spellings, each against the flags
 * that say the same run. */
START_TEST(test_keys_as_flags) {
    char *v2[] = {FLAGS_FSDP, "--fsdp-version", "2", "--zero", "3", NULL};
    same_as_flags(FSDP_HEAD "  fsdp_version: 2\n  fsdp_reshard_after_forward: true\n", 15, v2);
    /* absent, reshard_after_forward is true; FSDP2 drops FSDP1's prefetch keys */
    same_as_flags(FSDP_HEAD "  fsdp_version: 2\n  fsdp_backward_prefetch: BACKWARD_PRE\n"
                            "  fsdp_forward_prefetch: false\n", 15, v2);
    char *v2z2[] = {FLAGS_FSDP, "--fsdp-version", "2", "--zero", "2", NULL};
    same_as_flags(FSDP_HEAD "  fsdp_version: 2\n  fsdp_reshard_after_forward: false\n", 15, v2z2);
    /* FSDP1 as `accelerate config` writes it since 1.6 */
    char *v1[] = {FLAGS_FSDP, "--zero", "3", NULL};
    same_as_flags(FSDP_HEAD "  fsdp_version: 1\n  fsdp_reshard_after_forward: FULL_SHARD\n", 13, v1);
    char *compiled[] = {FLAGS_FSDP, "--zero", "3", "--compile", NULL};
    same_as_flags(FSDP_HEAD "dynamo_config:\n  dynamo_backend: INDUCTOR\n  dynamo_mode: default\n"
                            "  dynamo_use_fullgraph: false\n  dynamo_use_dynamic: false\n", 14, compiled);
    same_as_flags(FSDP_HEAD "dynamo_backend: INDUCTOR\n", 14, compiled); /* accelerate < 0.20's spelling */
    char *nocompile[] = {FLAGS_FSDP, "--zero", "3", NULL};
    same_as_flags(FSDP_HEAD "dynamo_config:\n  dynamo_backend: 'NO'\n  dynamo_mode: max-autotune\n", 13, nocompile);
    char *noinit[] = {"ftest", "--model", "llama3.2-1b", "--stack", "2026-11", "--framework", "deepspeed", "--zero",
                      "3", "--gpus", "4", "--precision", "bf16-mixed", "--no-zero-init", NULL};
    same_as_flags("distributed_type: DEEPSPEED\nmixed_precision: bf16\nnum_processes: 4\ndeepspeed_config:\n"
                  "  zero_stage: 3\n  zero3_init_flag: false\n", 14, noinit);
    /* mixed_precision fp8 through torchao: --fp8 tensorwise over bf16-mixed, and
     * under FSDP2 the float8 all-gather accelerate 1.13+ turns on by default */
    char *fp8_v2[] = {FLAGS_FSDP, "--fsdp-version", "2", "--zero", "3", "--fp8", "tensorwise",
                      "--fsdp-float8-all-gather", NULL};
    same_as_flags("distributed_type: FSDP\nmixed_precision: fp8\nfp8_config:\n  backend: AO\n"
                  "num_processes: 4\nfsdp_config:\n  fsdp_version: 2\n"
                  "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n  fsdp_cpu_ram_efficient_loading: false\n",
                  18, fp8_v2);
    char *fp8_ddp[] = {"ftest", "--model", "llama3.2-1b", "--stack", "2026-11", "--framework", "hf", "--gpus", "4",
                       "--precision", "bf16-mixed", "--fp8", "tensorwise", NULL};
    same_as_flags("distributed_type: MULTI_GPU\nmixed_precision: fp8\nfp8_config:\n  fp8_backend: AO\n"
                  "  pad_inner_dim: true\nnum_processes: 4\n", 13, fp8_ddp);
    /* the estimate does not tell the two apart at this size: the field does */
    char err[256];
    est_run run;
    const char *p = write_yaml("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n"
                               "  zero3_init_flag: false\n");
    char *argv[] = {"ftest", "--model", "llama3.2-1b", "--accelerate-config", (char *)p, NULL};
    ck_assert_msg(test_cli_build(5, argv, &run, err, sizeof err) == 0, "%s", err);
    unlink(p);
    ck_assert(!run.zero_init);
    char *fp16[] = {FLAGS_FSDP, "--zero", "3", NULL};
    fp16[10] = "fp16-mixed";
    same_as_flags("distributed_type: FSDP\nfp16: true\nnum_processes: 4\nfsdp_config:\n"
                  "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n  fsdp_cpu_ram_efficient_loading: false\n",
                  13, fp16);
}
END_TEST

/* fsdp_cpu_ram_efficient_loading absent: accelerate launch's default "true"
 * (commands/launch.py), rank 0 alone reads the checkpoint: the node's host
 * RAM while loading is one fp32 copy of the model (1.24 B x 4 bytes for
 * Llama-3.2-1B, tied head), not one per process. */
START_TEST(test_loading_default) {
    char err[256];
    est_run run;
    const char *p = write_yaml("distributed_type: FSDP\nnum_processes: 4\nfsdp_config:\n"
                               "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n");
    char *argv[] = {"ftest", "--model", "llama3.2-1b", "--accelerate-config", (char *)p, NULL};
    ck_assert_msg(test_cli_build(5, argv, &run, err, sizeof err) == 0, "%s", err);
    unlink(p);
    ck_assert_int_eq(run.fsdp_loading, EST_FSDP_LOAD_RANK0);
    est_estimate e;
    est_estimate_init(&e);
    ck_assert_msg(est_estimate_run(&run, &e, err, sizeof err) == 0, "%s", err);
    const double copy = 1.2358e9 * 4; /* Llama-3.2-1B: 1,235,814,400 parameters */
    ck_assert_msg(e.host_load_per_node_bytes > copy * 0.99 && e.host_load_per_node_bytes < copy * 1.01,
                  "%lld", (long long)e.host_load_per_node_bytes);
    est_estimate_free(&e);
}
END_TEST

/* Every refused key of the table, one line each, naming the key; and the
 * cases where accelerate's own reading cannot be told from the file. */
START_TEST(test_refused_keys) {
    const char *cases[][2] = {
        {"use_cpu: true\n", "use_cpu"},
        {"mixed_precision: fp8\nfp8_config:\n  backend: TE\n", "Transformer Engine (fp8_config.backend: TE)"},
        {"mixed_precision: fp8\nfp8_config:\n  backend: MSAMP\n", "fp8_config.backend: MSAMP"},
        {"mixed_precision: fp8\n", "without fp8_config.backend"},
        {"distributed_type: FSDP\nfsdp_config:\n  fsdp_auto_wrap_policy: SIZE_BASED_WRAP\n"
         "  fsdp_min_num_params: 100000000\n", "fsdp_config.fsdp_auto_wrap_policy: SIZE_BASED_WRAP"},
        {"distributed_type: FSDP\nfsdp_config:\n  fsdp_auto_wrap_policy: NO_WRAP\n", "NO_WRAP"},
        {"distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD\n", "fsdp_auto_wrap_policy"},
        {"distributed_type: FSDP\nfsdp_config:\n  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"
         "  fsdp_ignored_modules: lm_head\n", "fsdp_ignored_modules"},
        {"distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n"
         "  deepspeed_moe_layer_cls_names: MixtralSparseMoeBlock\n", "deepspeed_moe_layer_cls_names"},
        {"dynamo_config:\n  dynamo_backend: CUDAGRAPHS\n", "dynamo_backend: CUDAGRAPHS"},
        {"dynamo_backend: EAGER\n", "dynamo_backend: EAGER"},
        {"dynamo_config:\n  dynamo_backend: INDUCTOR\n  dynamo_mode: reduce-overhead\n", "dynamo_mode"},
        {"dynamo_config:\n  dynamo_backend: INDUCTOR\n  dynamo_use_dynamic: true\n", "dynamo_use_dynamic"},
        {"dynamo_config:\n  dynamo_backend: INDUCTOR\n  dynamo_use_regional_compilation: true\n",
         "dynamo_use_regional_compilation"},
        {"parallelism_config:\n  parallelism_config_tp_size: 2\n", "parallelism_config_tp_size"},
        {"parallelism_config:\n  parallelism_config_cp_size: 2\n", "parallelism_config_cp_size"},
        {"parallelism_config:\n  parallelism_config_sp_size: 2\n", "parallelism_config_sp_size"},
        {"parallelism_config:\n  parallelism_config_dp_replicate_size: 2\n", "dp_replicate_size"},
        {"distributed_type: FSDP\ngradient_checkpointing: true\n", "unknown keys gradient_checkpointing"},
        /* accelerate 1.4.0 (the default stack) has no FSDP2 in its launcher */
        {"distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n", "accelerate >= 1.6"},
        /* FSDP1: the launcher's fsdp_sharding_strategy (FULL_SHARD) wins */
        {"distributed_type: FSDP\nfsdp_config:\n  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"
         "  fsdp_reshard_after_forward: SHARD_GRAD_OP\n", "fsdp_reshard_after_forward"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) expect_refused(cases[i][0], cases[i][1], i);
    /* FSDP2 (stack 2026-11): the two sharding keys disagree; a strategy name
     * where accelerate's str_to_bool wants a boolean */
    const char *v2[][2] = {
        {"  fsdp_version: 2\n  fsdp_sharding_strategy: SHARD_GRAD_OP\n", "disagree"},
        {"  fsdp_version: 2\n  fsdp_reshard_after_forward: FULL_SHARD\n", "must be true or false"},
    };
    for (size_t i = 0; i < 2; i++) {
        char err[256] = "", yaml[300];
        est_run run;
        snprintf(yaml, sizeof yaml, "distributed_type: FSDP\nfsdp_config:\n  fsdp_auto_wrap_policy: "
                                    "TRANSFORMER_BASED_WRAP\n%s", v2[i][0]);
        const char *p = write_yaml(yaml);
        char *argv[] = {"ftest", "--model", "llama3-8b", "--stack", "2026-11", "--accelerate-config", (char *)p, NULL};
        int rc = test_cli_build(7, argv, &run, err, sizeof err);
        unlink(p);
        ck_assert_int_eq(rc, -1);
        ck_assert_msg(strstr(err, v2[i][1]) && !strchr(err, '\n'), "%s", err);
    }
}
END_TEST

/* Inert keys and the ones accelerate launch drops are listed as ignored. */
START_TEST(test_inert_listed) {
    char err[256];
    est_run run;
    const char *p = write_yaml("distributed_type: FSDP\ncompute_environment: LOCAL_MACHINE\nfsdp_config:\n"
                               "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n  fsdp_state_dict_type: SHARDED_STATE_DICT\n"
                               "  fsdp_limit_all_gathers: true\n  sync_module_states: true\n");
    char *argv[] = {"ftest", "--model", "llama3-8b", "--accelerate-config", (char *)p, NULL};
    ck_assert_msg(test_cli_build(5, argv, &run, err, sizeof err) == 0, "%s", err);
    unlink(p);
    ck_assert_ptr_nonnull(strstr(run.settings_ignored, "compute_environment"));
    ck_assert_ptr_nonnull(strstr(run.settings_ignored, "fsdp_config.fsdp_state_dict_type (saving)"));
    ck_assert_ptr_nonnull(strstr(run.settings_ignored, "fsdp_config.fsdp_limit_all_gathers (accelerate launch does not"));
    ck_assert_ptr_nonnull(strstr(run.settings_ignored, "fsdp_config.sync_module_states (rank 0"));
    ck_assert_ptr_null(strstr(run.settings_ignored, "fsdp_auto_wrap_policy"));
}
END_TEST

/* docs/usage.md names every key of accelerate_keys.c's table that ftest
 * reads or refuses, so the two cannot drift apart. */
START_TEST(test_table_documented) {
    size_t len = 0;
    char *doc = test_slurp(test_repo_path("docs/usage.md"), &len);
    ck_assert_ptr_nonnull(doc);
    const char *section = NULL, *key;
    bool matters = false;
    size_t n = 0;
    for (size_t i = 0; (key = est_accelerate_key_at(i, &section, &matters)); i++) {
        if (!matters) continue;
        /* as code: `key or `section.key */
        bool named = false;
        for (const char *p = strstr(doc, key); p && !named; p = strstr(p + 1, key))
            named = p > doc && (p[-1] == '`' || p[-1] == '.');
        ck_assert_msg(named, "docs/usage.md does not name %s%s%s", section, section[0] ? "." : "", key);
        n++;
    }
    ck_assert_uint_ge(n, 30);
    free(doc);
}
END_TEST

Suite *suite_accelerate(void);
Suite *suite_accelerate(void) {
    Suite *s = suite_create("accelerate");
    TCase *tc = tcase_create("accelerate");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_fsdp_file);
    tcase_add_test(tc, test_deepspeed_plugin);
    tcase_add_test(tc, test_bad_accelerate);
    tcase_add_test(tc, test_wrap_class);
    tcase_add_test(tc, test_keys_as_flags);
    tcase_add_test(tc, test_loading_default);
    tcase_add_test(tc, test_refused_keys);
    tcase_add_test(tc, test_inert_listed);
    tcase_add_test(tc, test_table_documented);
    suite_add_tcase(s, tc);
    return s;
}
