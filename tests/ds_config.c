/* --deepspeed-config: the configs of the measured runs, "auto", bad files. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ds_config.h"
#include "ds_keys.h"
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


/* Every key that changes memory or time in a way ftest does not model,
 * written with a value other than DeepSpeed's default (defaults read from
 * deepspeed/runtime/zero/config.py, offload_config.py, constants.py and
 * precision_config.py at 0.16.4 / 0.19.8), is refused with one line naming
 * the key. The second column is the dotted name the line must carry; the
 * third the stack (DeepSpeed version) the key exists in. */
static const char *const REFUSED[][3] = {
    {"{\"zero_optimization\": {\"stage\": 3, \"zero_quantized_weights\": true}}", "zero_optimization.zero_quantized_weights", "2025-02"},
    {"{\"zero_optimization\": {\"stage\": 3, \"zero_quantized_gradients\": true}}", "zero_optimization.zero_quantized_gradients", "2025-02"},
    {"{\"zero_optimization\": {\"stage\": 3, \"zero_quantized_nontrainable_weights\": true}}", "zero_optimization.zero_quantized_nontrainable_weights", "2025-02"},
    {"{\"zero_optimization\": {\"stage\": 3, \"zero_hpz_partition_size\": 8}}", "zero_optimization.zero_hpz_partition_size", "2025-02"},
    {"{\"zero_optimization\": {\"stage\": 2, \"reduce_scatter\": false}}", "zero_optimization.reduce_scatter", "2025-02"},
    {"{\"zero_optimization\": {\"stage\": 2, \"allgather_partitions\": false}}", "zero_optimization.allgather_partitions", "2025-02"},
    {"{\"zero_optimization\": {\"stage\": 2, \"use_multi_rank_bucket_allreduce\": false}}", "zero_optimization.use_multi_rank_bucket_allreduce", "2025-02"},
    {"{\"zero_optimization\": {\"stage\": 2, \"round_robin_gradients\": true}}", "zero_optimization.round_robin_gradients", "2025-02"},
    {"{\"zero_optimization\": {\"stage\": 1, \"legacy_stage1\": true}}", "zero_optimization.legacy_stage1", "2025-02"},
    {"{\"zero_optimization\": {\"stage\": 3, \"stage3_model_persistence_threshold\": 1000}}", "zero_optimization.stage3_model_persistence_threshold", "2025-02"},
    {"{\"zero_optimization\": {\"stage\": 3, \"model_persistence_threshold\": 1000}}", "zero_optimization.model_persistence_threshold", "2025-02"},
    {"{\"zero_optimization\": {\"stage\": 3, \"memory_efficient_linear\": false}}", "zero_optimization.memory_efficient_linear", "2025-02"},
    {"{\"zero_optimization\": {\"stage\": 3, \"stage3_module_granularity_threshold\": 100}}", "zero_optimization.stage3_module_granularity_threshold", "2025-02"},
    {"{\"zero_optimization\": {\"stage\": 3, \"stage3_use_all_reduce_for_fetch_params\": true}}", "zero_optimization.stage3_use_all_reduce_for_fetch_params", "2025-02"},
    {"{\"zero_optimization\": {\"stage\": 3, \"mics_shard_size\": 8}}", "zero_optimization.mics_shard_size", "2025-02"},
    {"{\"zero_optimization\": {\"stage\": 3, \"mics_hierarchical_params_gather\": true}}", "zero_optimization.mics_hierarchical_params_gather", "2025-02"},
    {"{\"zero_optimization\": {\"stage\": 3, \"zeropp_loco_param\": {\"err_beta\": 0.8}}}", "zero_optimization.zeropp_loco_param", "2025-02"},
    {"{\"zero_optimization\": {\"stage\": 3, \"stage3_allgather_sequential\": true}}", "zero_optimization.stage3_allgather_sequential", "2026-11"},
    {"{\"zero_optimization\": {\"stage\": 2, \"compute_grad_norm\": false}}", "zero_optimization.compute_grad_norm", "2026-11"},
    {"{\"zero_optimization\": {\"stage\": 2, \"parameter_alignment\": true}}", "zero_optimization.parameter_alignment", "2026-11"},
    {"{\"zero_optimization\": {\"stage\": 2, \"zenflow\": {\"topk_ratio\": 0.1}}}", "zero_optimization.zenflow", "2026-11"},
    {"{\"zero_optimization\": {\"stage\": 3, \"enable_sanity_checks\": true}}", "zero_optimization.enable_sanity_checks", "2026-11"},
    {"{\"zero_optimization\": {\"stage\": 3, \"leaf_module\": {\"classes\": [\"MixtralSparseMoeBlock\"]}}}", "zero_optimization.leaf_module", "2026-11"},
    {"{\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\", \"ratio\": 0.3}}}", "zero_optimization.offload_optimizer.ratio", "2025-02"},
    {"{\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\", \"super_offload\": true}}}", "zero_optimization.offload_optimizer.super_offload", "2026-11"},
    {"{\"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": \"cpu\", \"cpuadam_cores_perc\": 0.5}}}", "zero_optimization.offload_optimizer.cpuadam_cores_perc", "2026-11"},
    {"{\"data_types\": {\"param_dtype\": \"bf16\"}}", "data_types.param_dtype", "2026-11"},
    {"{\"data_types\": {\"buffer_dtype\": \"fp32\"}}", "data_types.buffer_dtype", "2026-11"},
    {"{\"data_types\": {\"keep_in_fp32_modules\": [\"norm\"]}}", "data_types.keep_in_fp32_modules", "2026-11"},
    {"{\"fp16\": {\"enabled\": true, \"auto_cast\": true}}", "fp16.auto_cast", "2025-02"},
    {"{\"fp16\": {\"enabled\": true, \"fp16_master_weights_and_grads\": true}}", "fp16.fp16_master_weights_and_grads", "2025-02"},
    {"{\"bf16\": {\"enabled\": true, \"immediate_grad_update\": true}}", "bf16.immediate_grad_update", "2025-02"},
    {"{\"bf16\": {\"enabled\": true, \"bf16_master_weights_and_grads\": true}}", "bf16.bf16_master_weights_and_grads", "2026-11"},
    {"{\"bf16\": {\"enabled\": true, \"bf16_optimizer_states\": true}}", "bf16.bf16_optimizer_states", "2026-11"},
    {"{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"torch_adam\": true}}}", "optimizer.params.torch_adam", "2025-02"},
    {"{\"optimizer\": {\"type\": \"Adam\", \"params\": {\"amsgrad\": true}}}", "optimizer.params.amsgrad", "2025-02"},
    {"{\"compile\": {\"deepcompile\": true}}", "compile.deepcompile", "2025-02"},
    {"{\"compile\": {\"enabled\": true}}", "compile.enabled", "2024-04"},
    {"{\"compile\": {\"passes\": [\"z3\"]}}", "compile.passes", "2026-11"},
    {"{\"hybrid_engine\": {\"enabled\": true}}", "hybrid_engine", "2025-02"},
    {"{\"data_efficiency\": {\"enabled\": true}}", "data_efficiency", "2025-02"},
    {"{\"torch_autocast\": {\"enabled\": true}}", "torch_autocast", "2025-02"},
    {"{\"weight_quantization\": {\"post_init_quant\": {}}}", "weight_quantization", "2025-02"},
    {"{\"tensor_parallel\": {\"autotp_size\": 2}}", "tensor_parallel", "2025-02"},
    {"{\"expert_parallel\": {\"enabled\": true}}", "expert_parallel", "2025-02"},
    {"{\"sequence_parallel_size\": 2}", "sequence_parallel_size", "2025-02"},
    {"{\"managed_gradient_accumulation\": false}", "managed_gradient_accumulation", "2026-11"},
    {"{\"disable_python_gc\": true}", "disable_python_gc", "2026-11"},
    {"{\"gradient_allreduce_op\": \"sum\"}", "gradient_allreduce_op", "2026-11"},
    {"{\"amp\": {\"enabled\": true}}", "amp", "2025-02"},
    {"{\"elasticity\": {\"enabled\": true}}", "elasticity", "2025-02"},
    {"{\"curriculum_learning\": {\"enabled\": true}}", "curriculum_learning", "2025-02"},
    {"{\"progressive_layer_drop\": {\"enabled\": true}}", "progressive_layer_drop", "2025-02"},
    {"{\"eigenvalue\": {\"enabled\": true}}", "eigenvalue", "2025-02"},
    {"{\"quantize_training\": {\"enabled\": true}}", "quantize_training", "2025-02"},
    {"{\"sparse_attention\": {\"mode\": \"fixed\"}}", "sparse_attention", "2025-02"},
    {"{\"sparse_gradients\": true}", "sparse_gradients", "2025-02"},
    {"{\"compression_training\": {\"weight_quantization\": {}}}", "compression_training", "2025-02"},
    {"{\"graph_harvesting\": true}", "graph_harvesting", "2025-02"},
};

static est_run stack_run(const char *stack) {
    est_run run = qwen_run();
    run.stack = est_stack_find(stack);
    ck_assert_ptr_nonnull(run.stack);
    return run;
}

START_TEST(test_refused_keys) {
    est_run run = stack_run(REFUSED[_i][2]);
    char err[300] = "";
    ck_assert_int_eq(est_ds_config_apply(REFUSED[_i][0], strlen(REFUSED[_i][0]), &run, err, sizeof err), -1);
    char want[160];
    snprintf(want, sizeof want, "not modelled: %s (", REFUSED[_i][1]);
    ck_assert_msg(strstr(err, want) && !strchr(err, '\n'), "%s -> %s", REFUSED[_i][0], err);
}
END_TEST

/* Every refused key of the table has a case above (under one of its names),
 * so the table cannot grow a refusal this file does not exercise. */
START_TEST(test_every_refused_key_tested) {
    size_t n = 0;
    const est_ds_key *t = est_ds_keys(&n);
    for (size_t i = 0; i < n; i++) {
        if (t[i].cls != EST_DSK_REFUSED) continue;
        char name[160];
        snprintf(name, sizeof name, "%s%s%s", t[i].section, t[i].section[0] ? "." : "", t[i].key);
        bool found = false;
        for (size_t j = 0; j < sizeof REFUSED / sizeof REFUSED[0]; j++) found |= !strcmp(REFUSED[j][1], name);
        ck_assert_msg(found, "no refusal test for %s", name);
    }
}
END_TEST

/* The same keys spelled out at DeepSpeed's defaults change nothing and are
 * accepted (zero/config.py 0.16.4: contiguous_gradients True, reduce_scatter
 * True, allgather_partitions True, round_robin_gradients False,
 * zero_hpz_partition_size 1, zero_quantized_* False, memory_efficient_linear
 * True; communication_data_type and grad_accum_dtype None). */
START_TEST(test_refused_keys_at_default) {
    const char *cfg =
        "{\"communication_data_type\": null, \"data_types\": {\"grad_accum_dtype\": null}, "
        "\"hybrid_engine\": {\"enabled\": false}, \"torch_autocast\": {\"enabled\": false}, "
        "\"zero_optimization\": {\"stage\": 3, \"contiguous_gradients\": true, \"reduce_scatter\": true, "
        "\"allgather_partitions\": true, \"round_robin_gradients\": false, \"zero_hpz_partition_size\": 1, "
        "\"zero_quantized_weights\": false, \"zero_quantized_gradients\": false, \"memory_efficient_linear\": true, "
        "\"offload_optimizer\": {\"device\": \"cpu\", \"ratio\": 1.0}}}";
    est_run run = qwen_run();
    char err[300] = "";
    ck_assert_msg(est_ds_config_apply(cfg, strlen(cfg), &run, err, sizeof err) == 0, "%s", err);
}
END_TEST

static void estimate_pair(est_run *a, est_run *b, est_estimate *ea, est_estimate *eb) {
    char err[256];
    est_gpu g = {.name = "x", .memory_bytes = INT64_C(80) << 30};
    a->gpu = b->gpu = g;
    a->gpus_per_node = b->gpus_per_node = 8;
    est_estimate_init(ea);
    est_estimate_init(eb);
    ck_assert_msg(est_estimate_run(a, ea, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(est_estimate_run(b, eb, err, sizeof err) == 0, "%s", err);
}

/* Keys that change no byte or second of the step: the HF docs'
 * ds_config_zero3.json with its scheduler, logging, clipping, saving and
 * loss-scale keys, plus activation_checkpointing (read only by
 * deepspeed.checkpointing.configure, checkpointing.py
 * _configure_using_config_file, which the HF Trainer never calls), gives the
 * same peak, reserve and step time as the bare stage-3 config. */
START_TEST(test_no_effect_keys) {
    const char *bare = "{\"fp16\": {\"enabled\": true}, \"zero_optimization\": {\"stage\": 3}}";
    const char *full =
        "{\"fp16\": {\"enabled\": true, \"loss_scale\": 0, \"loss_scale_window\": 1000, \"initial_scale_power\": 16, "
        "\"hysteresis\": 2, \"min_loss_scale\": 1, \"consecutive_hysteresis\": true}, "
        "\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_num_steps\": 100}}, "
        "\"steps_per_print\": 10, \"wall_clock_breakdown\": false, \"memory_breakdown\": false, "
        "\"gradient_clipping\": 0.5, \"zero_allow_untested_optimizer\": true, \"prescale_gradients\": false, "
        "\"gradient_predivide_factor\": 1.0, \"dataloader_drop_last\": true, \"tensorboard\": {\"enabled\": true}, "
        "\"wandb\": {\"enabled\": true}, \"csv_monitor\": {\"enabled\": false}, \"flops_profiler\": {\"enabled\": false}, "
        "\"checkpoint\": {\"tag_validation\": \"Warn\"}, \"comms_logger\": {\"enabled\": false}, "
        "\"activation_checkpointing\": {\"partition_activations\": true, \"cpu_checkpointing\": true, "
        "\"contiguous_memory_optimization\": true}, "
        "\"zero_optimization\": {\"stage\": 3, \"stage3_gather_16bit_weights_on_model_save\": true, "
        "\"load_from_fp32_weights\": false, \"ignore_unused_parameters\": false, \"elastic_checkpoint\": false, "
        "\"override_module_apply\": false, \"pipeline_loading_checkpoint\": true}}";
    est_run a = qwen_run(), b = qwen_run();
    char err[300] = "";
    ck_assert_msg(est_ds_config_apply(bare, strlen(bare), &a, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(est_ds_config_apply(full, strlen(full), &b, err, sizeof err) == 0, "%s", err);
    est_estimate ea, eb;
    estimate_pair(&a, &b, &ea, &eb);
    ck_assert_int_eq(ea.peak_allocated_bytes, eb.peak_allocated_bytes);
    ck_assert_int_eq(ea.peak_reserved_bytes, eb.peak_reserved_bytes);
    ck_assert(ea.step_time_s == eb.step_time_s);
    est_estimate_free(&ea);
    est_estimate_free(&eb);
}
END_TEST

/* Unknown keys follow DeepSpeed: inside zero_optimization (pydantic
 * extra="forbid", config_utils.py) the file is refused; at the top level
 * DeepSpeed never reads them and the from line says so; a key newer than the
 * stack's DeepSpeed is unknown there (zeropp_loco_param appears in 0.16,
 * so 0.14.2 refuses it); a key 0.19.8 removed is refused there
 * (config.py _REMOVED_TOP_LEVEL_CONFIG_KEYS) even at its old default. */
START_TEST(test_unknown_keys_follow_deepspeed) {
    char err[300] = "";
    est_run run = qwen_run();
    const char *zfoo = "{\"zero_optimization\": {\"stage\": 2, \"stage3_foo\": 1}}";
    ck_assert_int_eq(est_ds_config_apply(zfoo, strlen(zfoo), &run, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "zero_optimization.stage3_foo") && strstr(err, "0.16.4"), "%s", err);
    run = stack_run("2024-04");
    const char *loco = "{\"zero_optimization\": {\"stage\": 3, \"zeropp_loco_param\": null}}";
    ck_assert_int_eq(est_ds_config_apply(loco, strlen(loco), &run, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "zeropp_loco_param") && strstr(err, "0.14.2"), "%s", err);
    run = stack_run("2026-11");
    const char *sparse = "{\"sparse_gradients\": false}";
    ck_assert_int_eq(est_ds_config_apply(sparse, strlen(sparse), &run, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "0.19.8 removed"), "%s", err);
    run = stack_run("2025-02");
    ck_assert_msg(est_ds_config_apply(sparse, strlen(sparse), &run, err, sizeof err) == 0, "%s", err);
    /* fp16's keys are a plain dict before 0.19.8 and a strict model from it */
    const char *fp16x = "{\"fp16\": {\"enabled\": true, \"fp16_opt_level\": \"O2\"}}";
    ck_assert_msg(est_ds_config_apply(fp16x, strlen(fp16x), &run, err, sizeof err) == 0, "%s", err);
    run = stack_run("2026-11");
    ck_assert_int_eq(est_ds_config_apply(fp16x, strlen(fp16x), &run, err, sizeof err), -1);
    /* "compile": CompileConfig(enabled, backend, kwargs) at 0.14.2, no such
     * section at 0.16.4, DeepCompile's CompileConfig at 0.19.8 (both strict):
     * axolotl's zero1_torch_compile.json {"disable": false} */
    const char *comp = "{\"compile\": {\"disable\": false, \"backend\": \"inductor\"}}";
    ck_assert_int_eq(est_ds_config_apply(comp, strlen(comp), &run, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "compile.disable") && strstr(err, "0.19.8"), "%s", err);
    run = stack_run("2024-04");
    ck_assert_int_eq(est_ds_config_apply(comp, strlen(comp), &run, err, sizeof err), -1);
    run = stack_run("2025-02");
    ck_assert_msg(est_ds_config_apply(comp, strlen(comp), &run, err, sizeof err) == 0, "%s", err);
}
END_TEST

/* DeepSpeed's other names for modelled keys: the field names of the stage3_
 * aliases (axolotl's zero3.json writes max_live_parameters: 0), "bfloat16"
 * for bf16 (precision_config.py BFLOAT16_OLD), the deprecated cpu_offload /
 * cpu_offload_param booleans; both names of one setting are refused. */
START_TEST(test_other_names) {
    char err[300] = "";
    est_run run = qwen_run();
    const char *names = "{\"bfloat16\": {\"enabled\": true}, \"zero_optimization\": {\"stage\": 3, "
                        "\"max_live_parameters\": 0, \"max_reuse_distance\": 7, \"param_persistence_threshold\": 5, "
                        "\"prefetch_bucket_size\": 11, \"cpu_offload\": true, \"cpu_offload_param\": true}}";
    run.precision = EST_PREC_FP16_MIXED;
    ck_assert_msg(est_ds_config_apply(names, strlen(names), &run, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(run.precision, EST_PREC_BF16_MIXED);
    ck_assert_int_eq(run.ds.max_live_elems, 0);
    ck_assert_int_eq(run.ds.max_reuse_distance_elems, 7);
    ck_assert_int_eq(run.ds.persistence_elems, 5);
    ck_assert_int_eq(run.ds.prefetch_bucket_elems, 11);
    ck_assert_int_eq(run.offload, EST_OFFLOAD_OPTIMIZER_PARAMS);
    static const char *const BOTH[] = {
        "{\"zero_optimization\": {\"stage\": 3, \"max_live_parameters\": 1, \"stage3_max_live_parameters\": 2}}",
        "{\"zero_optimization\": {\"stage\": 2, \"cpu_offload\": true, \"offload_optimizer\": {\"device\": \"cpu\"}}}",
        "{\"zero_optimization\": {\"stage\": 3, \"max_live_parameters\": \"auto\"}}",
        "{\"optimizer\": {\"type\": \"Lamb\"}}",
    };
    for (size_t i = 0; i < sizeof BOTH / sizeof BOTH[0]; i++) {
        run = qwen_run();
        ck_assert_int_eq(est_ds_config_apply(BOTH[i], strlen(BOTH[i]), &run, err, sizeof err), -1);
        ck_assert_msg(strlen(err) > 20 && !strchr(err, '\n'), "%s", err);
    }
}
END_TEST

/* The from line names every modelled key whole: a config setting all
 * sixteen of them (and allgather_bucket_size, which has no effect) is listed in full in the report's 800-byte buffer
 * (before: cut at 300 bytes, "zero_optimization.stage3_par"), and a short
 * buffer ends at a whole key with "(+N more)", never inside a name. */
START_TEST(test_from_line_whole) {
    char path[] = "/tmp/ftest-dskeys-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    const char *cfg =
        "{\"train_batch_size\": 16, \"train_micro_batch_size_per_gpu\": 2, \"gradient_accumulation_steps\": 1, "
        "\"optimizer\": {\"type\": \"AdamW\"}, \"zero_force_ds_cpu_optimizer\": false, \"bf16\": {\"enabled\": true}, "
        "\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\"}, "
        "\"offload_param\": {\"device\": \"cpu\"}, \"reduce_bucket_size\": 1000, \"allgather_bucket_size\": 1000, "
        "\"overlap_comm\": true, \"sub_group_size\": 1000, \"stage3_prefetch_bucket_size\": 100, "
        "\"stage3_param_persistence_threshold\": 100, \"stage3_max_live_parameters\": 100, "
        "\"stage3_max_reuse_distance\": 100}, \"my_note\": 1}";
    ck_assert_int_eq(write(fd, cfg, strlen(cfg)), (ssize_t)strlen(cfg));
    close(fd);
    est_run run = qwen_run();
    char used[800], err[300];
    ck_assert_msg(est_ds_config_load_noted(path, &run, used, sizeof used, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(strstr(used, "zero_optimization.stage, zero_optimization.offload_optimizer, "
                               "zero_optimization.offload_param, zero_optimization.reduce_bucket_size, "
                               "zero_optimization.overlap_comm, "
                               "zero_optimization.sub_group_size, zero_optimization.stage3_prefetch_bucket_size, "
                               "zero_optimization.stage3_param_persistence_threshold, "
                               "zero_optimization.stage3_max_live_parameters, "
                               "zero_optimization.stage3_max_reuse_distance") &&
                      strstr(used, "bf16, ") && strstr(used, "zero_force_ds_cpu_optimizer") &&
                      strstr(used, "not read by DeepSpeed 0.16.4: my_note"),
                  "%s", used);
    char shortbuf[120];
    run = qwen_run();
    ck_assert(est_ds_config_load_noted(path, &run, shortbuf, sizeof shortbuf, err, sizeof err) == 0);
    ck_assert_msg(strstr(shortbuf, "more)") && !strstr(shortbuf, "stage3_par"), "%s", shortbuf);
    unlink(path);
}
END_TEST

/* docs/usage.md's "DeepSpeed config keys" section names every key of the
 * table (as `section.key`), so the page cannot drift from the code. */
START_TEST(test_docs_name_every_key) {
    FILE *f = fopen(test_repo_path("docs/usage.md"), "r");
    ck_assert_ptr_nonnull(f);
    static char doc[1 << 20];
    size_t len = fread(doc, 1, sizeof doc - 1, f);
    fclose(f);
    doc[len] = '\0';
    const char *sec = strstr(doc, "## DeepSpeed config keys");
    ck_assert_ptr_nonnull(sec);
    const char *end = strstr(sec + 3, "\n## ");
    size_t n = 0;
    const est_ds_key *t = est_ds_keys(&n);
    for (size_t i = 0; i < n; i++) {
        if (t[i].cls == EST_DSK_SECTION) continue;
        char name[160];
        snprintf(name, sizeof name, "`%s%s%s`", t[i].section, t[i].section[0] ? "." : "", t[i].key);
        const char *hit = strstr(sec, name);
        ck_assert_msg(hit && (!end || hit < end), "docs/usage.md does not name %s", name);
    }
}
END_TEST

/* communication_data_type: config.py get_communication_data_type lowercases
 * the string and knows fp32, fp16, bf16 (4, 2, 2 bytes an element); null is
 * the gradient dtype. At stage 0 the engine's own all-reduce is not followed
 * in another dtype: refused once the stage is known. */
START_TEST(test_communication_data_type) {
    const char *names[4] = {"\"FP32\"", "\"fp16\"", "\"bf16\"", "null"};
    const int bytes[4] = {4, 2, 2, 0};
    char cfg[160], err[300] = "";
    for (int i = 0; i < 4; i++) {
        est_run run = qwen_run();
        snprintf(cfg, sizeof cfg, "{\"communication_data_type\": %s, \"zero_optimization\": {\"stage\": 2}}", names[i]);
        ck_assert_msg(est_ds_config_apply(cfg, strlen(cfg), &run, err, sizeof err) == 0, "%s", err);
        ck_assert_int_eq(run.ds.comm_bytes, bytes[i]);
        ck_assert_msg(est_ds_config_resolve(&run, false, err, sizeof err) == 0, "%s", err);
    }
    est_run run = qwen_run();
    snprintf(cfg, sizeof cfg, "{\"bf16\": {\"enabled\": true}, \"communication_data_type\": \"fp32\", "
                              "\"zero_optimization\": {\"stage\": 0}}");
    ck_assert_msg(est_ds_config_apply(cfg, strlen(cfg), &run, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(est_ds_config_resolve(&run, false, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "communication_data_type") != NULL, "%s", err);
}
END_TEST

/* data_types.grad_accum_dtype, resolved once stage and precision are known
 * (engine.py get_data_types and _do_optimizer_sanity_check, 0.16.4 lines
 * 1017 and 1316): under ZeRO the model's own dtype is the default and is
 * accepted in any of DtypeEnum's names; fp32 with bf16 at stage 1 is
 * BF16_Optimizer, at stage 2 a separate fp32 accumulation buffer, and any
 * value at stage 0 picks the engine's wrapper: all three refused, each with
 * its mechanism. */
START_TEST(test_grad_accum_dtype) {
    static const struct {
        const char *prec, *dtype;
        int stage;
        const char *refusal; /* NULL: accepted */
    } cases[] = {
        {"bf16", "bf16", 2, NULL},
        {"bf16", "torch.bfloat16", 3, NULL},
        {"fp16", "half", 1, NULL},
        {"bf16", "fp32", 1, "BF16_Optimizer"},
        {"bf16", "float", 2, "separate gradient accumulation buffer"},
        {"fp16", "fp32", 3, "separate gradient accumulation buffer"},
        {"bf16", "bf16", 0, "stage 0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char cfg[200], err[300] = "";
        snprintf(cfg, sizeof cfg, "{\"%s\": {\"enabled\": true}, \"data_types\": {\"grad_accum_dtype\": \"%s\"}, "
                 "\"zero_optimization\": {\"stage\": %d}}", cases[i].prec, cases[i].dtype, cases[i].stage);
        est_run run = qwen_run();
        ck_assert_msg(est_ds_config_apply(cfg, strlen(cfg), &run, err, sizeof err) == 0, "%s", err);
        const int rc = est_ds_config_resolve(&run, false, err, sizeof err);
        if (!cases[i].refusal) {
            ck_assert_msg(rc == 0, "%s: %s", cfg, err);
        } else {
            ck_assert_msg(rc == -1, "%s accepted", cfg);
            ck_assert_msg(strstr(err, cases[i].refusal) && strstr(err, "grad_accum_dtype"), "%s", err);
        }
    }
}
END_TEST

/* contiguous_gradients false: modelled at stage 3 (no contiguous bucket);
 * at stages 1-2 refused unless optimizer offload forces it on
 * (stage_1_and_2.py __init__: contiguous_gradients or cpu_offload). */
START_TEST(test_contiguous_gradients) {
    static const struct {
        const char *zero;
        int rc;
        bool loose;
    } cases[] = {
        {"\"stage\": 3, \"contiguous_gradients\": false", 0, true},
        {"\"stage\": 3, \"contiguous_gradients\": true", 0, false},
        {"\"stage\": 2, \"contiguous_gradients\": false", -1, false},
        {"\"stage\": 1, \"contiguous_gradients\": false", -1, false},
        {"\"stage\": 2, \"contiguous_gradients\": false, \"offload_optimizer\": {\"device\": \"cpu\"}", 0, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char cfg[200], err[300] = "";
        snprintf(cfg, sizeof cfg, "{\"zero_optimization\": {%s}}", cases[i].zero);
        est_run run = qwen_run();
        ck_assert_msg(est_ds_config_apply(cfg, strlen(cfg), &run, err, sizeof err) == 0, "%s", err);
        ck_assert_int_eq(est_ds_config_resolve(&run, false, err, sizeof err), cases[i].rc);
        if (cases[i].rc) ck_assert_msg(strstr(err, "zero_optimization.contiguous_gradients"), "%s", err);
        else ck_assert_int_eq(run.ds.loose_grads, cases[i].loose);
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
    "{\"communication_data_type\": \"fp8\"}",
    "{\"communication_data_type\": 32}",
    "{\"data_types\": {\"grad_accum_dtype\": \"int8\"}}",
    "{\"data_types\": {\"grad_accum_dtype\": \"FP32\"}}",
    "{\"zero_optimization\": [1]}",
    "{\"train_micro_batch_size_per_gpu\": 0}",
    "[1, 2]",
    "{\"fp16\": ",
    /* keys with control bytes (found by fuzz_ds_config): still one line */
    "{\"zero_optimization\": {\"stage\": 3, \"zero_\nquantized\": true}}",
    "{\"optimizer\": {\"a\rb\": 1, \"a\rb\": 2}}",
    "{\"optimizer\": {\"type\": \"La\nmb\"}}",
    "{\"zero_optimization\": {\"offload_param\": {\"device\": \"g\npu\"}}}",
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
    tcase_add_test(tc, test_communication_data_type);
    tcase_add_test(tc, test_grad_accum_dtype);
    tcase_add_test(tc, test_contiguous_gradients);
    tcase_add_test(tc, test_unmodelled_configs);
    tcase_add_loop_test(tc, test_refused_keys, 0, (int)(sizeof REFUSED / sizeof REFUSED[0]));
    tcase_add_test(tc, test_every_refused_key_tested);
    tcase_add_test(tc, test_refused_keys_at_default);
    tcase_add_test(tc, test_no_effect_keys);
    tcase_add_test(tc, test_unknown_keys_follow_deepspeed);
    tcase_add_test(tc, test_other_names);
    tcase_add_test(tc, test_from_line_whole);
    tcase_add_test(tc, test_docs_name_every_key);
    tcase_add_loop_test(tc, test_bad_configs, 0, (int)(sizeof BAD / sizeof BAD[0]));
    suite_add_tcase(s, tc);
    return s;
}
