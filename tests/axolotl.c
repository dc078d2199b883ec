/* --axolotl: axolotl's training YAML read with libyaml (estimator/frameworks/yaml_json.c,
 * axolotl.c). The fixture has the shape of axolotl's examples/llama-3/qlora.yml. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_run.h"
#include "estimate.h"
#include "lora.h"
#include "report_settings.h"
#include "test_util.h"
#include "yaml_json.h"

static const char *write_yaml(const char *text) { return test_write_temp("axolotl", text); }

START_TEST(test_qlora_example) {
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s", test_repo_path("tests/fixtures/axolotl_llama3_qlora.yml"));
    est_run run;
    char *argv[] = {"ftest", "--axolotl", path, NULL};
    ck_assert_msg(test_cli_build(3, argv, &run, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(run.model.name, "llama3-8b"); /* base_model meta-llama/Meta-Llama-3-8B */
    ck_assert_int_eq(run.lora.rank, 32);
    ck_assert(run.lora.alpha == 16);
    ck_assert(run.lora.dropout == 0.05);
    ck_assert_uint_eq(run.lora.targets, EST_LORA_ALL_LINEAR); /* lora_target_linear: true */
    ck_assert_int_eq(run.quant, EST_QUANT_NF4);
    ck_assert_int_eq(run.seq_len, 4096);
    ck_assert_int_eq(run.micro_batch, 2);
    ck_assert_int_eq(run.grad_accum, 4);
    ck_assert_int_eq(run.optimizer, EST_OPT_PAGED_ADAMW_32BIT);
    ck_assert_int_eq(run.checkpointing, EST_CKPT_FULL);
    ck_assert_int_eq(run.attention, EST_ATTN_FLASH);
    ck_assert_int_eq(run.precision, EST_PREC_BF16_MIXED); /* bf16: auto with an adapter */
    ck_assert_int_eq(run.framework, EST_FW_HF);
    ck_assert_ptr_nonnull(strstr(run.settings_from, "sequence_len"));

    /* Flags win, and the output no longer credits the file for them. */
    est_run flagged;
    char *argv2[] = {"ftest", "--axolotl", path, "--seq", "1024", "--lora-rank", "8", NULL};
    ck_assert_msg(test_cli_build(7, argv2, &flagged, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(flagged.seq_len, 1024);
    ck_assert_int_eq(flagged.lora.rank, 8);
    ck_assert_ptr_null(strstr(flagged.settings_from, "sequence_len"));

    /* The same settings as flags give the same estimate. */
    est_run same;
    char *argv3[] = {"ftest", "--model", "llama3-8b", "--lora-rank", "32", "--lora-alpha", "16",
                     "--lora-dropout", "0.05", "--lora-targets", "all-linear", "--quant", "nf4",
                     "--seq", "4096", "--batch", "2", "--grad-accum", "4", "--optimizer",
                     "paged-adamw-32bit", "--checkpointing", "full", "--attention", "flash", NULL};
    ck_assert_msg(test_cli_build(25, argv3, &same, err, sizeof err) == 0, "%s", err);
    est_estimate a, b;
    est_estimate_init(&a);
    est_estimate_init(&b);
    ck_assert_msg(est_estimate_run(&run, &a, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(est_estimate_run(&same, &b, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(a.peak_allocated_bytes, b.peak_allocated_bytes);
    ck_assert_int_eq(a.cpu_bytes, b.cpu_bytes);
    est_estimate_free(&a);
    est_estimate_free(&b);
}
END_TEST

/* FSDP and DeepSpeed from the file; a DeepSpeed path beside the YAML. */
START_TEST(test_fsdp_and_deepspeed) {
    char err[256];
    est_run run;
    const char *p = write_yaml("base_model: meta-llama/Llama-2-70b-hf\nadapter: qlora\nload_in_4bit: true\n"
                               "lora_r: 16\nlora_target_modules: [q_proj, v_proj]\nbf16: true\n"
                               "fsdp:\n  - full_shard\n  - auto_wrap\nfsdp_config:\n"
                               "  fsdp_offload_params: false\n");
    char *argv[] = {"ftest", "--axolotl", (char *)p, "--gpus", "2", NULL};
    ck_assert_msg(test_cli_build(5, argv, &run, err, sizeof err) == 0, "%s", err);
    unlink(p);
    ck_assert_str_eq(run.model.name, "llama2-70b");
    ck_assert_int_eq(run.framework, EST_FW_FSDP);
    ck_assert_int_eq(run.zero_stage, 3);
    ck_assert_uint_eq(run.lora.targets, EST_LORA_DEFAULT_TARGETS);

    FILE *f = fopen("/tmp/ftest-axolotl-ds.json", "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"zero_optimization\": {\"stage\": 2}, \"bf16\": {\"enabled\": \"auto\"},"
          " \"train_micro_batch_size_per_gpu\": \"auto\"}", f);
    fclose(f);
    p = write_yaml("base_model: meta-llama/Meta-Llama-3-8B\nbf16: true\nmicro_batch_size: 4\n"
                   "deepspeed: ftest-axolotl-ds.json\n");
    char *argv2[] = {"ftest", "--axolotl", (char *)p, "--gpus", "8", NULL};
    ck_assert_msg(test_cli_build(5, argv2, &run, err, sizeof err) == 0, "%s", err);
    unlink(p);
    unlink("/tmp/ftest-axolotl-ds.json");
    ck_assert_int_eq(run.framework, EST_FW_DEEPSPEED);
    ck_assert_int_eq(run.zero_stage, 2);
    ck_assert_int_eq(run.micro_batch, 4); /* "auto": the YAML's micro_batch_size */
    /* A full fine-tune loaded in bf16: DeepSpeed keeps fp32 master partitions
     * of the bf16 weights (bf16-mixed), where the plain Trainer would keep
     * bf16 weights and Adam state (bf16). */
    ck_assert_int_eq(run.precision, EST_PREC_BF16_MIXED);
}
END_TEST

START_TEST(test_yaml_scalars) {
    char err[256];
    const char *y = "a: 3\nb: 0.05\nc: true\nd: ~\ne: \"3\"\nf: 1e-4\ng: 0x10\nh: [1, two]\n";
    cJSON *r = est_yaml_parse(y, strlen(y), "t", err, sizeof err);
    ck_assert_ptr_nonnull(r);
    ck_assert(cJSON_IsNumber(cJSON_GetObjectItem(r, "a")));
    ck_assert(cJSON_GetObjectItem(r, "b")->valuedouble == 0.05);
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(r, "c")));
    ck_assert(cJSON_IsNull(cJSON_GetObjectItem(r, "d")));
    ck_assert(cJSON_IsString(cJSON_GetObjectItem(r, "e"))); /* quoted: a string */
    ck_assert(cJSON_GetObjectItem(r, "f")->valuedouble == 1e-4);
    ck_assert(cJSON_IsString(cJSON_GetObjectItem(r, "g")));
    ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(r, "h")), 2);
    cJSON_Delete(r);
}
END_TEST

/* Bad files: one line, no crash. */
START_TEST(test_bad_yaml) {
    const char *bad[][2] = {
        {"a: &x [1, 2]\nb: *x\n", "aliases"},
        {"a: [1, 2\n", "line"},
        {"- just\n- a list\n", "mapping"},
        {"a: 1\n---\nb: 2\n", "more than one"},
        {"{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{: 1}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}}\n", NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[256] = "";
        cJSON *r = est_yaml_parse(bad[i][0], strlen(bad[i][0]), "t", err, sizeof err);
        ck_assert_msg(r == NULL, "accepted case %zu", i);
        ck_assert_msg(err[0] && !strchr(err, '\n'), "case %zu: \"%s\"", i, err);
        if (bad[i][1]) ck_assert_msg(strstr(err, bad[i][1]), "case %zu: \"%s\"", i, err);
    }
    const char *cases[][2] = {
        {"base_model: nobody/none\n", "base_model"},
        {"base_model: meta-llama/Meta-Llama-3-8B\noptimizer: adamw_anyprecision\n", "optimizer"},
        {"base_model: meta-llama/Meta-Llama-3-8B\nadapter: qlora\n", "load_in_4bit"},
        {"base_model: meta-llama/Meta-Llama-3-8B\nadapter: lora\nlora_r: 0\n", "lora_r"},
        {"base_model: meta-llama/Meta-Llama-3-8B\nload_in_4bit: true\n", "adapter"},
        {"base_model: meta-llama/Meta-Llama-3-8B\nfp16: true\nflash_attention: true\n", "fp16"},
        {"base_model: meta-llama/Meta-Llama-3-8B\nfsdp: [hybrid_shard, auto_wrap]\n", "HSDP"},
        {"base_model: meta-llama/Meta-Llama-3-8B\nattn_implementation: sdpa\nflash_attention: true\n",
         "both set"},
        {"base_model: meta-llama/Meta-Llama-3-8B\ngradient_checkpointing: sometimes\n", "offload"},
        {"base_model: meta-llama/Meta-Llama-3-8B\nfsdp_config:\n  fsdp_version: 3\n", "fsdp_version"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[256] = "";
        est_run run;
        const char *p = write_yaml(cases[i][0]);
        char *argv[] = {"ftest", "--axolotl", (char *)p, NULL};
        int rc = test_cli_build(3, argv, &run, err, sizeof err);
        unlink(p);
        ck_assert_msg(rc == -1, "accepted case %zu", i);
        ck_assert_msg(strstr(err, cases[i][1]) && !strchr(err, '\n'), "case %zu: \"%s\"", i, err);
    }
}
END_TEST

/* The suite's Hugging Face cache: tests/fixtures/hf_cache holds the public
 * config.json of each base model of the stock recipes (tests/recipes). */
static void use_fixture_cache(void) {
    setenv("HF_HUB_CACHE", test_repo_path("tests/fixtures/hf_cache"), 1);
}

static int build(const char *yaml, est_run *run, char *err, size_t errlen) {
    const char *p = write_yaml(yaml);
    char *argv[] = {"ftest", "--axolotl", (char *)p, "--gpus", "8", NULL};
    int rc = test_cli_build(5, argv, run, err, errlen);
    unlink(p);
    return rc;
}

/* base_model resolves as --model ORG/NAME does: the cache first (the model is
 * named by NAME, and its shapes are the cached config's), then the shipped
 * model of that repo; base_model_config wins over base_model. */
START_TEST(test_base_model_from_cache) {
    use_fixture_cache();
    char err[256];
    est_run run;
    ck_assert_msg(build("base_model: NousResearch/Meta-Llama-3-8B\n", &run, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(run.model.name, "Meta-Llama-3-8B");
    ck_assert_int_eq(run.model.vocab_size, 128256);
    ck_assert_int_eq(run.model.num_layers, 32);
    /* Mistral-7B-v0.1 (not shipped; v0.3 is): vocabulary 32000, not 32768. */
    ck_assert_msg(build("base_model: mistralai/Mistral-7B-v0.1\n", &run, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(run.model.vocab_size, 32000);
    ck_assert_msg(build("base_model: some/fine-tune\nbase_model_config: Qwen/Qwen2-7B\n", &run, err,
                        sizeof err) == 0, "%s", err);
    ck_assert_int_eq(run.model.hidden_size, 3584);
    ck_assert_int_eq(run.model.vocab_size, 152064);
    /* The cache folder is the repo id as written (huggingface_hub
     * repo_folder_name): another case is another folder, and then the
     * shipped model of the repo, matched without case, is the fallback. */
    ck_assert_msg(build("base_model: META-LLAMA/Meta-Llama-3-8B\n", &run, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(run.model.name, "llama3-8b");
    ck_assert_int_eq(build("base_model: nobody/nothing-7b\n", &run, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "base_model") && strstr(err, "Hugging Face cache") && !strchr(err, '\n'), "%s",
                  err);
}
END_TEST

/* Every mechanism the file asks for that ftest does not model is named in
 * one line; the same keys at their modelled values are taken. */
START_TEST(test_unmodelled_named) {
    use_fixture_cache();
    char err[600];
    est_run run;
    ck_assert_int_eq(build("base_model: NousResearch/Meta-Llama-3-8B\nadapter: lora\nsample_packing: true\n"
                           "rl: grpo\ndpo_padding_free: true\ntorch_compile: true\n"
                           "torch_compile_mode: reduce-overhead\n"
                           "attn_implementation: flex_attention\n",
                           &run, err, sizeof err),
                     -1);
    ck_assert_msg(!strchr(err, '\n'), "%s", err);
    static const char *const NAMED[] = {"not modelled", "rl: grpo", "dpo_padding_free", "CUDA graphs",
                                        "flex_attention"};
    for (size_t i = 0; i < sizeof NAMED / sizeof NAMED[0]; i++)
        ck_assert_msg(strstr(err, NAMED[i]), "no \"%s\" in: %s", NAMED[i], err);
    ck_assert_msg(build("base_model: NousResearch/Meta-Llama-3-8B\nadapter: lora\nsample_packing: false\n"
                        "rl:\ntorch_compile: false\nattn_implementation: eager\n"
                        "gradient_checkpointing: true\ngradient_checkpointing_kwargs:\n  use_reentrant: true\n",
                        &run, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(run.attention, EST_ATTN_EAGER);
    ck_assert_int_eq(run.checkpointing, EST_CKPT_FULL);
    ck_assert_ptr_nonnull(strstr(run.settings_from, "sample_packing"));
    /* Checkpoints on the host, Liger's gated RMSNorm. */
    ck_assert_int_eq(build("base_model: NousResearch/Meta-Llama-3-8B\ngradient_checkpointing: offload\n"
                           "gradient_checkpointing_kwargs:\n  use_reentrant: false\n"
                           "plugins: [axolotl.integrations.liger.LigerPlugin]\nliger_rms_norm_gated: true\n",
                           &run, err, sizeof err),
                     -1);
    ck_assert_msg(strstr(err, "RMSNorm"), "%s", err);
    /* offload of a full fine-tune (axolotl wraps the layers itself): refused (axolotl_kernels.c) */
    ck_assert_int_eq(build("base_model: NousResearch/Meta-Llama-3-8B\ngradient_checkpointing: offload\n", &run, err,
                           sizeof err),
                     -1);
    ck_assert_msg(strstr(err, "full fine-tune"), "%s", err);
    /* A full fine-tune with SDPA keeps norms, embeddings and head in fp32 (axolotl's loader). */
    ck_assert_int_eq(build("base_model: NousResearch/Meta-Llama-3-8B\nbf16: true\n", &run, err, sizeof err),
                     -1);
    ck_assert_msg(strstr(err, "fp32 norms, embed_tokens and lm_head") && strstr(err, "unset"), "%s", err);
}
END_TEST

/* Keys that change nothing ftest estimates are listed, as are keys outside
 * its tables; null keys set nothing; fsdp_config keys axolotl 0.18.0 drops
 * are said to be dropped. */
START_TEST(test_unused_listed) {
    use_fixture_cache();
    char err[256];
    est_run run;
    ck_assert_msg(build("base_model: NousResearch/Meta-Llama-3-8B\nattn_implementation: flash_attention_2\n"
                        "bf16: auto\nwandb_project: demo\nwandb_name:\nlearning_rate: 0.0002\n"
                        "brand_new_key: 3\nfsdp:\n  - full_shard\nfsdp_config:\n"
                        "  fsdp_backward_prefetch: BACKWARD_PRE\n  fsdp_state_dict_type: FULL_STATE_DICT\n"
                        "  fsdp_offload_params: false\n  fsdp_mystery: 1\n",
                        &run, err, sizeof err) == 0, "%s", err);
    ck_assert_ptr_nonnull(strstr(run.settings_ignored, "wandb_project"));
    ck_assert_ptr_nonnull(strstr(run.settings_ignored, "learning_rate"));
    ck_assert_ptr_null(strstr(run.settings_ignored, "wandb_name"));
    ck_assert_ptr_nonnull(strstr(run.settings_ignored, "fsdp_config.fsdp_backward_prefetch (axolotl drops it)"));
    ck_assert_ptr_nonnull(strstr(run.settings_ignored, "fsdp_config.fsdp_state_dict_type"));
    ck_assert_ptr_nonnull(strstr(run.settings_unknown, "brand_new_key"));
    ck_assert_ptr_nonnull(strstr(run.settings_unknown, "fsdp_config.fsdp_mystery"));
    ck_assert_ptr_null(strstr(run.settings_unknown, "fsdp_offload_params"));
    ck_assert_ptr_null(strstr(run.settings_ignored, "attn_implementation"));
    /* The JSON report carries both lists. */
    cJSON *o = est_settings_json(&run);
    ck_assert_ptr_nonnull(o);
    const cJSON *ign = cJSON_GetObjectItem(o, "ignored"), *unk = cJSON_GetObjectItem(o, "unknown");
    ck_assert_int_eq(cJSON_GetArraySize(unk), 2);
    ck_assert_str_eq(cJSON_GetArrayItem(unk, 0)->valuestring, "brand_new_key");
    ck_assert_int_ge(cJSON_GetArraySize(ign), 4);
    cJSON_Delete(o);
}
END_TEST

/* FSDP as axolotl 0.18.0 hands it on: fsdp_config alone enables it,
 * fsdp_version 2 with reshard_after_forward false is SHARD_GRAD_OP, the
 * parameter offload and accelerate's activation checkpointing are taken,
 * and a bf16 full fine-tune is bf16-loaded weights under a mixed-precision
 * policy. */
START_TEST(test_fsdp_config) {
    use_fixture_cache();
    char err[256];
    est_run run;
    ck_assert_msg(build("base_model: NousResearch/Meta-Llama-3.1-8B\nbf16: true\n"
                        "attn_implementation: flash_attention_2\nfsdp_config:\n  fsdp_version: 2\n"
                        "  reshard_after_forward: false\n  activation_checkpointing: true\n",
                        &run, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(run.framework, EST_FW_FSDP);
    ck_assert_int_eq(run.fsdp_version, EST_FSDP2);
    ck_assert_int_eq(run.zero_stage, 2);
    ck_assert_int_eq(run.checkpointing, EST_CKPT_FULL);
    ck_assert_int_eq(run.precision, EST_PREC_BF16_MIXED);
    ck_assert_int_eq(run.load_dtype, EST_LOAD_BF16);
    ck_assert_msg(build("base_model: NousResearch/Meta-Llama-3.1-8B\nbf16: true\n"
                        "attn_implementation: flash_attention_2\nfsdp: [full_shard, auto_wrap]\n"
                        "fsdp_config:\n  fsdp_offload_params: true\n",
                        &run, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(run.fsdp_version, EST_FSDP1);
    ck_assert_int_eq(run.zero_stage, 3);
    ck_assert_int_eq(run.offload, EST_OFFLOAD_OPTIMIZER_PARAMS);
    ck_assert_msg(build("base_model: NousResearch/Meta-Llama-3.1-8B\nbf16: true\nsdp_attention: true\n"
                        "fsdp: shard_grad_op auto_wrap\n", &run, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(run.zero_stage, 2);
    ck_assert_int_eq(run.attention, EST_ATTN_SDPA);
}
END_TEST

/* Liger's fused linear cross-entropy is ftest's chunked loss, with its plugin
 * listed; without the plugin axolotl never reads the key. output_router_logits
 * reaches an MoE model. */
START_TEST(test_loss_and_router) {
    use_fixture_cache();
    char err[256];
    est_run run;
    const char *base = "base_model: NousResearch/Meta-Llama-3-8B\nadapter: lora\n"
                       "liger_fused_linear_cross_entropy: true\n";
    ck_assert_msg(build(base, &run, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(run.loss, EST_LOSS_STANDARD);
    char yaml[400];
    snprintf(yaml, sizeof yaml, "%splugins:\n  - axolotl.integrations.liger.LigerPlugin\n", base);
    ck_assert_msg(build(yaml, &run, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(run.loss, EST_LOSS_CHUNKED);
    ck_assert_msg(build("base_model: mistralai/Mixtral-8x7B-v0.1\nbf16: true\nflash_attention: true\n"
                        "model_config:\n  output_router_logits: true\n",
                        &run, err, sizeof err) == 0, "%s", err);
    ck_assert(run.model.output_router_logits);
    ck_assert_int_eq(run.attention, EST_ATTN_FLASH);
    ck_assert_int_eq(build("base_model: mistralai/Mixtral-8x7B-v0.1\nmodel_config:\n  rope_theta: 10\n", &run,
                           err, sizeof err),
                     -1);
    ck_assert_msg(strstr(err, "model_config override"), "%s", err);
}
END_TEST

/* Issue 19's keys as axolotl 0.18.0 reads them (estimator/frameworks/axolotl.c):
 *  - sample_packing with flash attention: one bin of micro_batch_size x
 *    sequence_len (core/trainers/base.py: batch_size 1, batch_max_len =
 *    2 x 4096), samples of at most sequence_len; multipack_real_batches:
 *    micro_batch_size rows of sequence_len; the collator pads to a multiple
 *    of pad_to_multiple_of x ceil(sequence_len / it): 100 x 41 = 4100;
 *  - use_reentrant: given wins; absent, true unless rl is set;
 *  - rl: dpo / ipo (DPO), orpo, kto; precompute_ref_log_probs;
 *  - lora_modules_to_save: embed_tokens, lm_head;
 *  - target names as PEFT finds them: Phi-3's qkv_proj (q) and no q_proj,
 *    Mixtral's w1 / w2 (gate, down); the router by name is refused. */
START_TEST(test_issue19_keys) {
    use_fixture_cache();
    char err[400];
    est_run run;
    const char *base = "base_model: NousResearch/Meta-Llama-3-8B\nadapter: lora\nlora_r: 8\n"
                       "attn_implementation: flash_attention_2\nmicro_batch_size: 2\n";
    char y[600];
    snprintf(y, sizeof y, "%ssample_packing: true\nsequence_len: 4096\n", base);
    ck_assert_msg(build(y, &run, err, sizeof err) == 0, "%s", err);
    ck_assert(run.packed);
    ck_assert_int_eq(run.micro_batch, 1);
    ck_assert_int_eq(run.seq_len, 8192);
    ck_assert_int_eq(run.packed_sample_len, 4096);
    snprintf(y, sizeof y, "%ssample_packing: true\nsequence_len: 4001\npad_to_multiple_of: 100\n"
                          "multipack_real_batches: true\n", base);
    ck_assert_msg(build(y, &run, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(run.micro_batch, 2);
    ck_assert_int_eq(run.seq_len, 4100);
    snprintf(y, sizeof y, "%sgradient_checkpointing: true\n", base);
    ck_assert_msg(build(y, &run, err, sizeof err) == 0, "%s", err);
    ck_assert(!run.ckpt_non_reentrant);
    snprintf(y, sizeof y, "%sgradient_checkpointing: true\nrl: ipo\nprecompute_ref_log_probs: true\n"
                          "lora_modules_to_save: [embed_tokens, lm_head]\n", base);
    ck_assert_msg(build(y, &run, err, sizeof err) == 0, "%s", err);
    ck_assert(run.ckpt_non_reentrant && run.rl == EST_RL_DPO && run.rl_precomputed_ref);
    ck_assert_int_eq(run.modules_to_save, EST_SAVE_EMBED | EST_SAVE_HEAD);
    snprintf(y, sizeof y, "%sgradient_checkpointing: true\nrl: kto\n"
                          "gradient_checkpointing_kwargs:\n  use_reentrant: true\n", base);
    ck_assert_msg(build(y, &run, err, sizeof err) == 0, "%s", err);
    ck_assert(!run.ckpt_non_reentrant && run.rl == EST_RL_KTO);
    ck_assert_msg(build("base_model: microsoft/Phi-3-mini-4k-instruct\nadapter: lora\n"
                        "lora_target_modules: [qkv_proj, o_proj, q_proj]\n", &run, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(run.lora.targets, EST_LORA_BIT(EST_LORA_Q) | EST_LORA_BIT(EST_LORA_O));
    ck_assert_msg(build("base_model: mistralai/Mixtral-8x7B-v0.1\nadapter: lora\n"
                        "lora_target_modules: [w1, w2, q_proj]\n", &run, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(run.lora.targets,
                     EST_LORA_BIT(EST_LORA_Q) | EST_LORA_BIT(EST_LORA_GATE) | EST_LORA_BIT(EST_LORA_DOWN));
    ck_assert_int_eq(build("base_model: mistralai/Mixtral-8x7B-v0.1\nadapter: lora\n"
                           "lora_target_modules: [gate]\n", &run, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "router"));
}
END_TEST

/* Round 9 (fsdpkeys): keys with a memory or time effect that were listed as
 * ignored or unknown and are now refused, one line naming the key; and their
 * default values, which are not. */
START_TEST(test_fsdpkeys_refused) {
    use_fixture_cache();
    const char *base = "base_model: NousResearch/Meta-Llama-3-8B\nadapter: lora\nlora_target_linear: true\n"
                       "bf16: true\nflash_attention: true\nmicro_batch_size: 2\nsequence_len: 2048\n";
    const char *cases[][2] = {
        {"torch_empty_cache_steps: 10\n", "torch_empty_cache_steps: 10"},
        {"unsloth_lora_mlp: true\n", "unsloth_lora_mlp"},
        {"unsloth_cross_entropy_loss: true\n", "unsloth_cross_entropy_loss"},
        {"fsdp_version: 2\nfsdp_config:\n  offload_params: true\n  cpu_offload_pin_memory: false\n",
         "fsdp_config.cpu_offload_pin_memory: false"},
        {"val_set_size: 0.05\neval_batch_size: 8\n", "eval_batch_size: 8"},
        {"test_datasets:\n  - path: x\n    type: alpaca\neval_sequence_len: 8192\n", "eval_sequence_len: 8192"},
        {"fsdp_config:\n  reshard_after_forward: false\n", "reshard_after_forward: false is FSDP2's"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char yaml[600], err[600] = "";
        est_run run;
        snprintf(yaml, sizeof yaml, "%s%s", base, cases[i][0]);
        ck_assert_msg(build(yaml, &run, err, sizeof err) == -1, "accepted case %zu", i);
        ck_assert_msg(strstr(err, cases[i][1]) && !strchr(err, '\n'), "case %zu: %s", i, err);
    }
    /* the defaults, and evaluation that stays within a training micro-batch */
    const char *fine[] = {
        "unsloth_lora_mlp: false\n",
        "fsdp_version: 2\nfsdp_config:\n  offload_params: true\n  cpu_offload_pin_memory: true\n",
        "val_set_size: 0.05\neval_batch_size: 2\n",
        "val_set_size: 0.05\n",                      /* eval_batch_size defaults to micro_batch_size */
        "eval_batch_size: 16\n",                     /* no evaluation at all */
        "val_set_size: 0.05\neval_batch_size: 16\neval_strategy: 'no'\n",
    };
    for (size_t i = 0; i < sizeof fine / sizeof fine[0]; i++) {
        char yaml[600], err[600] = "";
        est_run run;
        snprintf(yaml, sizeof yaml, "%s%s", base, fine[i]);
        ck_assert_msg(build(yaml, &run, err, sizeof err) == 0, "case %zu: %s", i, err);
    }
    /* a plugin's keys without the plugin change nothing and are listed so */
    {
        char err2[600] = "";
        est_run r2;
        char yaml[600];
        snprintf(yaml, sizeof yaml, "%scut_cross_entropy: true\nliger_rope: true\n", base);
        ck_assert_msg(build(yaml, &r2, err2, sizeof err2) == 0, "%s", err2);
        ck_assert_int_eq(r2.loss, EST_LOSS_STANDARD);
        ck_assert_uint_eq(r2.liger, 0);
        ck_assert_ptr_nonnull(strstr(r2.settings_ignored, "cut_cross_entropy (no plugin reads it)"));
        ck_assert_ptr_nonnull(strstr(r2.settings_ignored, "liger_rope (no plugin reads it)"));
    }
    /* FSDP1's reshard_after_forward: false beside shard_grad_op says the same */
    char err[600] = "";
    est_run run;
    ck_assert_msg(build("base_model: NousResearch/Meta-Llama-3-8B\nbf16: true\nflash_attention: true\n"
                        "fsdp: [shard_grad_op]\nfsdp_config:\n  reshard_after_forward: false\n",
                        &run, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(run.zero_stage, 2);
}
END_TEST

Suite *suite_axolotl(void);
Suite *suite_axolotl(void) {
    Suite *s = suite_create("axolotl");
    TCase *tc = tcase_create("axolotl");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_qlora_example);
    tcase_add_test(tc, test_fsdp_and_deepspeed);
    tcase_add_test(tc, test_yaml_scalars);
    tcase_add_test(tc, test_bad_yaml);
    tcase_add_test(tc, test_base_model_from_cache);
    tcase_add_test(tc, test_unmodelled_named);
    tcase_add_test(tc, test_unused_listed);
    tcase_add_test(tc, test_fsdp_config);
    tcase_add_test(tc, test_loss_and_router);
    tcase_add_test(tc, test_issue19_keys);
    tcase_add_test(tc, test_fsdpkeys_refused);
    suite_add_tcase(s, tc);
    return s;
}
