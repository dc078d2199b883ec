#include "axolotl_keys.h"

#include <stdio.h>
#include <string.h>

#include "json_util.h"

/* ======================================================================
 * MECHANISMS NOT MODELLED YET (issue 19). One entry per key and value
 * that changes a step's memory or time in a way no framework profile
 * expresses today. When a mechanism lands, delete its entry (and make
 * axolotl.c apply the key): this table, plugin_unmodelled() and
 * fp32_embeddings() below are the only places an axolotl recipe is
 * refused for a feature.
 * ====================================================================== */
typedef enum {
    AX_TRUE,      /* true, a non-zero number or a non-empty string other than "false" */
    AX_SET,       /* any value but null, false, "", [] and {} */
    AX_ABOVE_ONE, /* a number above 1 (parallel degrees) */
    AX_IS,        /* the string `value` */
    AX_IS_FALSE,  /* false */
    AX_NOT_IN,    /* a string outside the '|'-separated `value` */
} ax_when;

typedef struct {
    const char *key;     /* top level, or "parent.child" one level down */
    ax_when when;
    const char *value;   /* AX_IS, AX_NOT_IN */
    const char *feature; /* what is not modelled, for the refusal */
} ax_unmodelled;

static const ax_unmodelled UNMODELLED[] = {
    /* Sequences: packing puts several samples in a row, block-causal (varlen) attention. */
    {"batch_flattening", AX_TRUE, NULL, "padding-free batches"},
    /* Training objectives: TRL's DPO (and IPO), ORPO and KTO trainers are modelled
     * (estimator/frameworks/rl.c); the others, and the options that change what
     * the DPO step keeps, are not. */
    {"rl", AX_NOT_IN, "dpo|ipo|orpo|kto", "this preference trainer"},
    {"dpo_use_liger_kernel", AX_TRUE, NULL, "Liger's fused DPO loss"},
    {"dpo_padding_free", AX_TRUE, NULL, "padding-free DPO batches"},
    {"dpo_use_weighting", AX_TRUE, NULL, "WPO weighting (another log-softmax over the logits)"},
    {"dpo_use_logits_to_keep", AX_TRUE, NULL, "logits of the completions only (logits_to_keep)"},
    {"rpo_alpha", AX_SET, NULL, "RPO's NLL on the chosen rows"},
    {"reward_model", AX_TRUE, NULL, "a reward model (sequence-classification head)"},
    {"process_reward_model", AX_TRUE, NULL, "a process reward model (token-classification head)"},
    /* Which parameters train. */
    {"peft_use_dora", AX_TRUE, NULL, "DoRA"},
    {"peft_layer_replication", AX_SET, NULL, "PEFT layer replication"},
    {"peft_layers_to_transform", AX_SET, NULL, "LoRA on some layers only"},
    {"peft_trainable_token_indices", AX_SET, NULL, "trainable token rows"},
    {"peft_autocast_adapter_dtype", AX_IS_FALSE, NULL, "adapters kept in the base dtype"},
    {"lora_target_parameters", AX_SET, NULL, "LoRA on parameters (expert weights)"},
    {"lora_rank_pattern", AX_SET, NULL, "per-module LoRA ranks"},
    {"relora", AX_TRUE, NULL, "ReLoRA"},
    {"lisa_n_layers", AX_SET, NULL, "LISA layer sampling"},
    /* Kernels and compilers. */
    {"torch_compile_mode", AX_NOT_IN, "default", "torch.compile with CUDA graphs (reduce-overhead, max-autotune)"},
    {"torch_compile_backend", AX_NOT_IN, "inductor", "a torch.compile backend other than inductor"},
    {"liger_rms_norm_gated", AX_TRUE, NULL, "Liger's gated RMSNorm kernel"},
    {"chunked_cross_entropy", AX_TRUE, NULL, "axolotl's chunked cross-entropy"},
    {"lora_embedding_kernel", AX_TRUE, NULL, "axolotl's fused LoRA embedding kernel"},
    {"fused_attn_kernel", AX_TRUE, NULL, "axolotl's fused attention kernel"},
    {"flash_attn_rms_norm", AX_TRUE, NULL, "flash-attn's RMSNorm"},
    {"flash_attn_cross_entropy", AX_TRUE, NULL, "flash-attn's cross-entropy"},
    {"tiled_mlp", AX_TRUE, NULL, "tiled MLP"},
    {"use_kernels", AX_TRUE, NULL, "Hugging Face hub kernels"},
    {"experts_implementation", AX_SET, NULL, "an MoE experts kernel"},
    {"deepcompile", AX_TRUE, NULL, "DeepSpeed DeepCompile"},
    /* Attention backends: ftest models eager, SDPA and flash-attn 2
     * (enums.py CANONICAL_ATTN_IMPLS and the legacy flags). */
    {"attn_implementation", AX_NOT_IN, "eager|sdpa|flash_attention_2|kernels-community/flash-attn2",
     "this attention backend"},
    {"flex_attention", AX_TRUE, NULL, "flex attention"},
    {"xformers_attention", AX_TRUE, NULL, "xformers attention"},
    {"sage_attention", AX_TRUE, NULL, "SageAttention"},
    {"s2_attention", AX_TRUE, NULL, "shifted-sparse attention"},
    {"large_head_attention", AX_SET, NULL, "a large-head attention policy"},
    {"scaling_softmax", AX_TRUE, NULL, "scaled softmax"},
    /* Checkpointing and offloading. */
    {"gradient_checkpointing", AX_IS, "offload_disk", "checkpoints kept on disk"},
    {"selective_checkpointing", AX_SET, NULL, "selective activation checkpointing"},
    {"dynamic_checkpoint", AX_SET, NULL, "dynamic checkpointing"},
    {"activation_offloading", AX_IS, "legacy", "synchronous activation offloading"},
    {"activation_offloading", AX_IS, "disk", "activation offloading to disk"},
    {"activation_offloading", AX_IS, "hidden_states", "offloading the checkpoints' hidden states"},
    {"layer_offloading", AX_TRUE, NULL, "layer offloading"},
    /* Precisions and quantized bases. */
    {"qat", AX_SET, NULL, "quantization-aware training"},
    {"gptq", AX_TRUE, NULL, "a GPTQ base"},
    {"quantize_moe_experts", AX_TRUE, NULL, "quantized MoE experts"},
    {"model_quantization_config", AX_SET, NULL, "a quantization config other than bitsandbytes'"},
    {"bnb_config_kwargs", AX_SET, NULL, "bitsandbytes settings other than axolotl's defaults"},
    {"fp32_norms", AX_TRUE, NULL, "fp32 norms under FSDP2"},
    {"float32", AX_TRUE, NULL, "fp32 weights (float32)"},
    /* Parallelism and placement. */
    {"context_parallel_size", AX_ABOVE_ONE, NULL, "context parallelism"},
    {"sequence_parallel_degree", AX_ABOVE_ONE, NULL, "sequence parallelism"},
    {"tensor_parallel_size", AX_ABOVE_ONE, NULL, "tensor parallelism"},
    {"dp_shard_size", AX_ABOVE_ONE, NULL, "a 2-D device mesh"},
    {"dp_replicate_size", AX_ABOVE_ONE, NULL, "a 2-D device mesh (HSDP)"},
    {"device_map", AX_SET, NULL, "a device map"},
    {"max_memory", AX_SET, NULL, "a device map"},
    {"gpu_memory_limit", AX_SET, NULL, "a device map"},
    {"ddp_bucket_cap_mb", AX_SET, NULL, "DDP buckets of another size than torch's 25 MB"},
    /* Batches, embeddings and the rest. */
    {"auto_find_batch_size", AX_TRUE, NULL, "a micro-batch found by retrying"},
    {"neftune_noise_alpha", AX_SET, NULL, "NEFTune embedding noise"},
    {"noisy_embedding_alpha", AX_SET, NULL, "NEFTune embedding noise"},
    {"shrink_embeddings", AX_TRUE, NULL, "embeddings shrunk to the tokenizer"},
    {"trainer_cls", AX_SET, NULL, "a custom trainer class"},
    {"optim_args", AX_SET, NULL, "optimizer arguments"},
    {"optim_target_modules", AX_SET, NULL, "an optimizer on some modules (GaLore)"},
    {"use_eaft", AX_TRUE, NULL, "EAFT"},
    {"use_onebitllms", AX_TRUE, NULL, "one-bit linears"},
    {"llama4_linearized_experts", AX_TRUE, NULL, "linearized Llama 4 experts"},
    {"gemma4_hybrid_attn_impl", AX_TRUE, NULL, "Gemma 4 hybrid attention"},
    /* The Trainer's torch_empty_cache_steps empties the cache inside its
     * step (transformers training_step), which --empty-cache-steps does not
     * model (estimator/model/peft.c: the plain loop only). */
    {"torch_empty_cache_steps", AX_SET, NULL, "torch.cuda.empty_cache inside the Trainer's step"},
    /* Removed in 0.18.0: validation.py check_deprecated_unsloth_fields raises
     * on any of them set (lora_mlp_kernel, lora_qkv_kernel, lora_o_kernel replace them). */
    {"unsloth_cross_entropy_loss", AX_TRUE, NULL, "a key axolotl 0.18.0 removed and refuses"},
    {"unsloth_lora_mlp", AX_TRUE, NULL, "a key axolotl 0.18.0 removed and refuses"},
    {"unsloth_lora_qkv", AX_TRUE, NULL, "a key axolotl 0.18.0 removed and refuses"},
    {"unsloth_lora_o", AX_TRUE, NULL, "a key axolotl 0.18.0 removed and refuses"},
    {"unsloth_rms_norm", AX_TRUE, NULL, "a key axolotl 0.18.0 removed and refuses"},
    {"unsloth_rope", AX_TRUE, NULL, "a key axolotl 0.18.0 removed and refuses"},
    /* fsdp_config: pageable host copies of FSDP2's offloaded shards
     * (monkeypatch/accelerate/fsdp2.py: CPUOffloadPolicy.pin_memory = False;
     * validation.py check_fsdp2_cpu_offload_pin_memory refuses it elsewhere):
     * slower, synchronous copies ftest does not time. */
    {"fsdp_config.cpu_offload_pin_memory", AX_IS_FALSE, NULL, "pageable host copies of offloaded shards"},
    {"fsdp_config.fsdp_cpu_offload_pin_memory", AX_IS_FALSE, NULL, "pageable host copies of offloaded shards"},
};

/* The item at "key" or "parent.child". */
static const cJSON *item_at(const cJSON *root, const char *key) {
    const char *dot = strchr(key, '.');
    if (!dot) return cJSON_GetObjectItemCaseSensitive(root, key);
    char parent[64];
    snprintf(parent, sizeof parent, "%.*s", (int)(dot - key), key);
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, parent);
    return cJSON_IsObject(p) ? cJSON_GetObjectItemCaseSensitive(p, dot + 1) : NULL;
}

static bool truthy(const cJSON *it) {
    if (!it || cJSON_IsNull(it) || cJSON_IsFalse(it)) return false;
    if (cJSON_IsNumber(it)) return it->valuedouble != 0;
    if (cJSON_IsString(it)) return it->valuestring && it->valuestring[0] && strcmp(it->valuestring, "false");
    if (cJSON_IsArray(it) || cJSON_IsObject(it)) return it->child != NULL;
    return true;
}

/* True when `s` is one of the '|'-separated names in `list`. */
static bool one_of(const char *s, const char *list) {
    size_t n = strlen(s);
    for (const char *p = list; p; p = strchr(p, '|') ? strchr(p, '|') + 1 : NULL)
        if (!strncmp(p, s, n) && (p[n] == '|' || p[n] == '\0')) return true;
    return false;
}

static bool fires(const ax_unmodelled *u, const cJSON *it) {
    switch (u->when) {
    case AX_TRUE: return truthy(it) && !cJSON_IsArray(it) && !cJSON_IsObject(it);
    case AX_SET: return truthy(it);
    case AX_ABOVE_ONE: return cJSON_IsNumber(it) && it->valuedouble > 1;
    case AX_IS: return cJSON_IsString(it) && it->valuestring && !strcmp(it->valuestring, u->value);
    case AX_IS_FALSE: return cJSON_IsFalse(it);
    case AX_NOT_IN: return cJSON_IsString(it) && it->valuestring && !one_of(it->valuestring, u->value);
    }
    return false;
}

/* Appends "; FEATURE (key: value)" to the refusal being built. */
static void add(char *buf, size_t n, const char *feature, const char *key, const cJSON *it) {
    char val[48] = "true";
    if (!it) snprintf(val, sizeof val, "unset");
    else if (cJSON_IsString(it) && it->valuestring) snprintf(val, sizeof val, "%.40s", it->valuestring);
    else if (cJSON_IsNumber(it)) snprintf(val, sizeof val, "%g", it->valuedouble);
    else if (cJSON_IsFalse(it)) snprintf(val, sizeof val, "false");
    else if (cJSON_IsArray(it)) snprintf(val, sizeof val, "[%d items]", cJSON_GetArraySize(it));
    else if (cJSON_IsObject(it)) snprintf(val, sizeof val, "{...}");
    size_t len = strlen(buf);
    if (len + 4 < n) snprintf(buf + len, n - len, "%s%s (%s: %s)", len ? "; " : "", feature, key, val);
}

/* plugins (axolotl.integrations.*): Liger's are read key by key (axolotl.c
 * apply_liger: every kernel but the gated RMSNorm is honoured); Cut Cross-Entropy is
 * honoured (axolotl_kernels.c); any other plugin changes the step in its own way. */
static void plugin_unmodelled(const cJSON *root, char *buf, size_t n) {
    const cJSON *plugins = cJSON_GetObjectItemCaseSensitive(root, "plugins"), *p;
    if (!cJSON_IsArray(plugins)) return;
    cJSON_ArrayForEach(p, plugins) {
        if (!cJSON_IsString(p) || !p->valuestring) continue;
        const char *name = strrchr(p->valuestring, '.') ? strrchr(p->valuestring, '.') + 1 : p->valuestring;
        if (!strcmp(name, "LigerPlugin")) continue;
        if (!strcmp(name, "CutCrossEntropyPlugin")) continue; /* axolotl_kernels.c */
        /* trackers and post-training evaluation: callbacks around the step
         * (integrations/swanlab/plugins.py SwanLabPlugin; integrations/lm_eval
         * LMEvalPlugin.post_train_unload, after training) */
        if (!strcmp(name, "SwanLabPlugin") || !strcmp(name, "LMEvalPlugin")) continue;
        add(buf, n, "an axolotl plugin", "plugins", p);
    }
}

/* model_config: overrides of the model's config.json; output_router_logits
 * is honoured (axolotl.c), any other override changes the model. */
static void overrides_unmodelled(const cJSON *root, char *buf, size_t n) {
    const cJSON *mc = cJSON_GetObjectItemCaseSensitive(root, "model_config"), *o;
    if (!cJSON_IsObject(mc)) return;
    cJSON_ArrayForEach(o, mc)
        if (strcmp(o->string, "output_router_logits") && !cJSON_IsNull(o))
            add(buf, n, "a model_config override", o->string, o);
}

/* axolotl 0.18.0 loaders/model.py _configure_embedding_dtypes: outside FSDP
 * it first casts norms, embed_tokens and lm_head to fp32, and casts them back
 * to the load dtype only under an adapter or an attention that needs it
 * (schemas/enums.py ATTN_IMPLS_WITHOUT_DTYPE_CAST = eager, sdpa). A full
 * fine-tune with eager or SDPA attention (Transformers' default) keeps them
 * in fp32 beside bf16 blocks. */
static void fp32_embeddings(const cJSON *root, char *buf, size_t n) {
    const cJSON *adapter = cJSON_GetObjectItemCaseSensitive(root, "adapter");
    /* DeepSpeed casts the whole module to the half dtype at initialize
     * (engine.py _configure_distributed_model), undoing the upcast. */
    if (truthy(adapter) || truthy(cJSON_GetObjectItemCaseSensitive(root, "fsdp")) ||
        truthy(cJSON_GetObjectItemCaseSensitive(root, "fsdp_config")) ||
        truthy(cJSON_GetObjectItemCaseSensitive(root, "deepspeed")))
        return;
    /* Loaded in fp32 (no half dtype), everything is fp32 anyway. */
    static const char *const HALF[] = {"bf16", "fp16", "bfloat16", "float16"};
    bool half = false;
    for (size_t i = 0; i < sizeof HALF / sizeof HALF[0]; i++)
        if (truthy(cJSON_GetObjectItemCaseSensitive(root, HALF[i]))) half = true;
    if (!half) return;
    const cJSON *impl = cJSON_GetObjectItemCaseSensitive(root, "attn_implementation");
    bool cast = cJSON_IsString(impl) && impl->valuestring && !one_of(impl->valuestring, "eager|sdpa");
    static const char *const FLAGS[] = {"flash_attention", "flex_attention", "xformers_attention",
                                        "sage_attention"};
    for (size_t i = 0; i < sizeof FLAGS / sizeof FLAGS[0]; i++)
        if (truthy(cJSON_GetObjectItemCaseSensitive(root, FLAGS[i]))) cast = true;
    if (!cast)
        add(buf, n, "fp32 norms, embed_tokens and lm_head beside half-precision blocks", "attn_implementation",
            impl && cJSON_IsString(impl) ? impl : NULL);
}

/* fsdp_config (axolotl 0.18.0 schemas/fsdp.py FSDPConfig, "fsdp_" prefix
 * stripped): ftest's FSDP units come from transformer auto wrap (the
 * decoder layers or the MoE blocks: transformer_layer_cls_to_wrap and
 * cpu_ram_efficient_loading are read in axolotl_fsdp.c), the policy is the
 * one accelerate builds from the Trainer's precision. */
static const cJSON *fsdp_child(const cJSON *cfg, const char *name) {
    char prefixed[64];
    snprintf(prefixed, sizeof prefixed, "fsdp_%s", name);
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(cfg, name);
    return it && !cJSON_IsNull(it) ? it : cJSON_GetObjectItemCaseSensitive(cfg, prefixed);
}

static void fsdp_unmodelled(const cJSON *root, char *buf, size_t n) {
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(root, "fsdp_config");
    if (!cJSON_IsObject(cfg)) return;
    const cJSON *wrap = fsdp_child(cfg, "auto_wrap_policy");
    if (cJSON_IsString(wrap) && wrap->valuestring && strcmp(wrap->valuestring, "TRANSFORMER_BASED_WRAP"))
        add(buf, n, "FSDP units other than decoder layers", "fsdp_config.auto_wrap_policy", wrap);
    const cJSON *mp = fsdp_child(cfg, "mixed_precision_policy");
    if (truthy(mp)) add(buf, n, "an FSDP mixed-precision policy of its own", "fsdp_config.mixed_precision_policy", mp);
}

/* tf32 lets fp32 matmuls run on tensor cores; under bf16 or fp16 autocast
 * the step's GEMMs are half precision and tf32 changes none of them. */
static void tf32_in_fp32(const cJSON *root, char *buf, size_t n) {
    const cJSON *tf32 = cJSON_GetObjectItemCaseSensitive(root, "tf32");
    if (!cJSON_IsTrue(tf32)) return;
    static const char *const HALF[] = {"bf16", "fp16", "bfloat16", "float16"};
    for (size_t i = 0; i < sizeof HALF / sizeof HALF[0]; i++)
        if (truthy(cJSON_GetObjectItemCaseSensitive(root, HALF[i]))) return;
    add(buf, n, "tf32 matmuls in fp32 training", "tf32", tf32);
}

/* A whole number at `key`, or `fallback` when absent or not a number. */
static double number_or(const cJSON *root, const char *key, double fallback) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    return cJSON_IsNumber(it) && it->valuedouble > 0 ? it->valuedouble : fallback;
}

/* Evaluation between steps (val_set_size above 0, or test_datasets; not
 * eval_strategy: no): the Trainer's prediction_step runs forward passes of
 * eval_batch_size rows of eval_sequence_len tokens (axolotl 0.18.0
 * schemas/training.py eval_batch_size, schemas/config.py eval_sequence_len;
 * both default to the training ones, utils/config/__init__.py line 209 and
 * the field default 512 for sequence_len; packed when sample_packing is). A
 * forward pass without saved activations over no more tokens than a training
 * micro-batch stays below the step's peak; over more, its logits alone may
 * pass it, and ftest does not estimate evaluation. */
static void eval_batches(const cJSON *root, char *buf, size_t n) {
    const cJSON *tests = cJSON_GetObjectItemCaseSensitive(root, "test_datasets");
    const bool eval = number_or(root, "val_set_size", 0) > 0 || truthy(tests);
    const cJSON *strategy = cJSON_GetObjectItemCaseSensitive(root, "eval_strategy");
    if (!strategy || cJSON_IsNull(strategy)) strategy = cJSON_GetObjectItemCaseSensitive(root, "evaluation_strategy");
    if (!eval || (cJSON_IsString(strategy) && strategy->valuestring && !strcmp(strategy->valuestring, "no")))
        return;
    const double mbs = number_or(root, "micro_batch_size", 1), seq = number_or(root, "sequence_len", 512);
    const double ebs = number_or(root, "eval_batch_size", mbs), eseq = number_or(root, "eval_sequence_len", seq);
    if (ebs * eseq <= mbs * seq) return;
    const bool rows = ebs > mbs;
    const char *key = rows ? "eval_batch_size" : "eval_sequence_len";
    add(buf, n, "evaluation batches of more tokens than a training micro-batch", key,
        cJSON_GetObjectItemCaseSensitive(root, key));
}

int est_axolotl_unmodelled(const cJSON *root, char *err, size_t errlen) {
    char found[600] = "";
    for (size_t i = 0; i < sizeof UNMODELLED / sizeof UNMODELLED[0]; i++) {
        const cJSON *it = item_at(root, UNMODELLED[i].key);
        if (it && fires(&UNMODELLED[i], it)) add(found, sizeof found, UNMODELLED[i].feature, UNMODELLED[i].key, it);
    }
    plugin_unmodelled(root, found, sizeof found);
    overrides_unmodelled(root, found, sizeof found);
    fp32_embeddings(root, found, sizeof found);
    fsdp_unmodelled(root, found, sizeof found);
    tf32_in_fp32(root, found, sizeof found);
    eval_batches(root, found, sizeof found);
    if (!found[0]) return 0;
    return ft_errorf(err, errlen, "not modelled (axolotl %s): %s", EST_AXOLOTL_VERSION, found);
}
/* ====================== end of the unmodelled mechanisms ====================== */

/* The keys axolotl.c reads. */
static const char *const HONOURED[] = {
    "base_model", "base_model_config", "adapter", "lora_r", "lora_alpha", "lora_dropout",
    "lora_target_modules", "lora_target_linear", "load_in_4bit", "load_in_8bit", "sequence_len",
    "micro_batch_size", "gradient_accumulation_steps", "batch_size", "optimizer",
    "gradient_checkpointing", "gradient_checkpointing_kwargs", "bf16", "fp16", "bfloat16", "float16",
    "tf32", "flash_attention", "sdp_attention", "eager_attention", "attn_implementation",
    "deepspeed", "fsdp", "fsdp_config", "fsdp_version", "model_config", "plugins",
    "liger_fused_linear_cross_entropy", "liger_rope", "liger_rms_norm", "liger_glu_activation",
    "liger_swiglu", "liger_layer_norm", "liger_cross_entropy", "cut_cross_entropy", "sample_packing", "pad_to_sequence_len",
    "pad_to_multiple_of", "multipack_real_batches", "lora_modules_to_save", "rl", "precompute_ref_log_probs",
    "pretraining_dataset", "pretrain_multipack_attn", "fp8", "fp8_enable_fsdp_float8_all_gather", "torch_compile", "unfrozen_parameters",
    /* axolotl_kernels.c */
    "lora_qkv_kernel", "lora_o_kernel", "lora_mlp_kernel", "flash_attn_fuse_mlp", "activation_offloading",
};

/* Keys that change no byte or second of a training step as ftest estimates
 * it: tracking and logging, data preparation and templates, learning-rate
 * schedules and optimizer hyperparameters (not the optimizer's state),
 * evaluation between steps, saving and hub, launchers. The few that touch the
 * step by a negligible amount say so. */
static const char *const INERT[] = {
    /* run, logging and tracking */
    "strict", "debug", "seed", "output_dir", "logging_steps", "profiler_steps", "profiler_steps_start",
    "include_tkps", "include_tokens_per_second", "loss_watchdog_threshold", "loss_watchdog_patience",
    "use_wandb", "wandb_project", "wandb_entity", "wandb_watch", "wandb_name", "wandb_run_id",
    "wandb_log_model", "wandb_mode", "use_mlflow", "mlflow_tracking_uri", "mlflow_experiment_name",
    "mlflow_run_name", "hf_mlflow_log_artifacts", "use_comet", "comet_api_key", "comet_workspace",
    "comet_project_name", "comet_experiment_key", "comet_mode", "comet_online",
    "comet_experiment_config", "use_tensorboard", "use_trackio", "trackio_project_name",
    "trackio_run_name", "trackio_space_id", "use_otel_metrics", "otel_metrics_host",
    "otel_metrics_port", "gc_steps", "gc_collect_steps",
    /* SwanLabPlugin and LMEvalPlugin (integrations/swanlab/args.py, lm_eval/args.py) */
    "use_swanlab", "swanlab_project", "swanlab_experiment_name", "swanlab_description", "swanlab_mode",
    "swanlab_workspace", "swanlab_api_key", "swanlab_log_model", "swanlab_web_host", "swanlab_api_host",
    "swanlab_lark_webhook_url", "swanlab_lark_secret", "swanlab_log_completions",
    "swanlab_completion_log_interval", "swanlab_completion_max_buffer", "lm_eval_tasks", "lm_eval_batch_size",
    "lm_eval_post_train", "lm_eval_model",
    /* data, tokenizer and templates (new tokens add a few embedding rows) */
    "datasets", "test_datasets", "val_set_size", "dataset_prepared_path", "dataset_processes",
    "dataset_num_proc", "dataset_exact_deduplication", "dataset_keep_in_memory", "dataset_shard_num",
    "dataset_shard_idx", "num_dataset_shards_to_save", "push_dataset_to_hub", "skip_prepare_dataset",
    "preprocess_iterable", "is_preprocess", "shuffle_merged_datasets", "shuffle_before_merging_datasets",
    "streaming", "streaming_multipack_buffer_size", "curriculum_sampling", "group_by_length",
    "train_on_inputs", "remove_unused_columns", "excess_length_strategy", "min_sample_len",
    "total_num_tokens", "total_supervised_tokens",
    "dataloader_pin_memory", "dataloader_num_workers", "dataloader_prefetch_factor",
    "dataloader_drop_last", "chat_template", "chat_template_jinja", "chat_template_kwargs",
    "default_system_message", "eot_tokens", "special_tokens", "tokens", "added_tokens_overrides",
    "role_boundaries", "tokenizer_type", "tokenizer_config", "tokenizer_use_fast",
    "tokenizer_legacy", "tokenizer_save_jinja_files", "tokenizer_use_mistral_common",
    "processor_type", "processor_kwargs", "image_size", "image_resize_algorithm",
    "sample_packing_eff_est", "sample_packing_bin_size", "sample_packing_group_size",
    "sample_packing_mp_start_method", "sample_packing_sequentially", "eval_sample_packing",
    "pretrain_multipack_buffer_size",
    "pretraining_sample_concatenation", "max_packed_sequence_len", "sdpa_varlen",
    "use_pose", "pose_split_on_token_ids", "pose_max_context_len", "pose_num_chunks",
    /* model loading (the estimate starts from the loaded model) */
    "model_type", "type_of_model", "trust_remote_code", "model_revision", "revision_of_model",
    "cls_model_config", "is_llama_derived_model", "is_falcon_derived_model",
    "is_mistral_derived_model", "is_qwen_derived_model", "reinit_weights", "fix_untrained_tokens",
    "mean_resizing_embeddings", "resize_token_embeddings_to_32x", "low_cpu_mem_usage",
    "qlora_sharded_model_loading", "experimental_skip_move_to_device", "lora_model_dir",
    "lora_on_cpu", "lora_fan_in_fan_out", "peft_init_lora_weights", "peft_use_rslora",
    "peft_ensure_weight_tying", "lora_alpha_pattern", "merge_lora", "merge_method", "device",
    "hf_use_auth_token", "freeze_mm_modules", "embeddings_skip_upcast",
    /* learning rates and optimizer hyperparameters */
    "learning_rate", "lr_scheduler", "lr_scheduler_kwargs", "lr_quadratic_warmup", "lr_div_factor",
    "lr_groups", "cosine_min_lr_ratio", "cosine_constant_lr_ratio", "warmup_steps", "warmup_ratio",
    "weight_decay", "adam_beta1", "adam_beta2", "adam_beta3", "adam_epsilon", "adam_epsilon2",
    "max_grad_norm", "embedding_lr", "embedding_lr_scale", "loraplus_lr_ratio",
    "loraplus_lr_embedding", "jagged_restart_steps", "jagged_restart_warmup_steps",
    "jagged_restart_anneal_steps", "relora_prune_ratio", "relora_prune_method", "relora_cpu_offload",
    "num_epochs", "max_steps",
    /* the objective's coefficients (rl itself is in the unmodelled table) */
    "rl_beta", "dpo_beta", "dpo_label_smoothing", "dpo_loss_type", "dpo_loss_weights",
    "dpo_norm_loss", "dpo_generate_during_eval", "orpo_alpha", "cpo_alpha", "simpo_gamma", "kto_desirable_weight", "kto_undesirable_weight",
    "max_prompt_len", "center_rewards_coefficient", "num_labels", "trl", "vllm",
    /* evaluation and generation between steps */
    "eval_steps", "evals_per_epoch", "eval_strategy", "evaluation_strategy", "eval_batch_size",
    "eval_sequence_len", "eval_table_size", "eval_max_new_tokens", "eval_causal_lm_metrics",
    "do_causal_lm_eval", "do_bench_eval", "bench_dataset", "bench_split", "generate_samples",
    "num_generation_samples", "generation_max_new_tokens", "generation_temperature",
    "generation_top_k", "generation_top_p", "generation_do_sample", "generation_prompt_ratio",
    "early_stopping_patience", "load_best_model_at_end", "metric_for_best_model",
    "greater_is_better",
    /* saving, hub, launchers */
    "save_steps", "saves_per_epoch", "save_strategy", "save_total_limit", "save_safetensors",
    "save_only_model", "save_first_step", "resume_from_checkpoint", "auto_resume_from_checkpoints",
    "hub_model_id", "hub_strategy", "hub_revision", "fsdp_final_state_dict_type",
    "local_rank", "world_size", "ddp", "ddp_timeout", "ddp_broadcast_buffers",
    "ddp_find_unused_parameters", "use_ray", "ray_run_name", "ray_num_workers",
    "resources_per_worker", "accelerator_config", "axolotl_config_path", "gradio_title",
    "gradio_share", "gradio_server_name", "gradio_server_port", "gradio_max_new_tokens",
    "gradio_temperature",
};

static bool in_list(const char *key, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(key, list[i])) return true;
    return false;
}

bool est_axolotl_key_checked(const char *key) {
    for (size_t i = 0; i < sizeof UNMODELLED / sizeof UNMODELLED[0]; i++) {
        size_t n = strlen(key);
        if (!strncmp(key, UNMODELLED[i].key, n) && (UNMODELLED[i].key[n] == '\0' || UNMODELLED[i].key[n] == '.'))
            return true;
    }
    return false;
}

bool est_axolotl_key_honoured(const char *key) {
    if (in_list(key, HONOURED, sizeof HONOURED / sizeof HONOURED[0])) return true;
    for (size_t i = 0; i < sizeof UNMODELLED / sizeof UNMODELLED[0]; i++)
        if (!strcmp(key, UNMODELLED[i].key)) return true;
    return false;
}

static void append(char *buf, size_t n, const char *key) {
    size_t len = strlen(buf);
    if (len + strlen(key) + 6 >= n) {
        if (len + 4 < n && strcmp(buf + (len > 3 ? len - 3 : 0), "...")) snprintf(buf + len, n - len, ", ...");
        return;
    }
    snprintf(buf + len, n - len, "%s%s", len ? ", " : "", key);
}

/* fsdp_config settings: those axolotl.c reads; those that change nothing
 * ftest estimates (saving, module-state broadcast at load, pinned or pageable
 * host copies, use_orig_params' alignment of a few bytes per tensor); and
 * those axolotl 0.18.0's FSDPConfig has no field for, which pydantic drops
 * before Transformers sees them. */
static const char *const FSDP_HONOURED[] = {
    "fsdp_version", "version", "offload_params", "activation_checkpointing", "reshard_after_forward",
    "cpu_ram_efficient_loading", "auto_wrap_policy", "transformer_layer_cls_to_wrap",
    "mixed_precision_policy", "min_num_params",
};
static const char *const FSDP_INERT[] = {
    "sync_module_states", "state_dict_type", "final_state_dict_type", "cpu_offload_pin_memory",
    "use_orig_params",
};
static const char *const FSDP_DROPPED[] = {
    "sharding_strategy", "backward_prefetch", "forward_prefetch", "limit_all_gathers",
};

static void fsdp_unused(const cJSON *cfg, char *ignored, size_t ignoredlen, char *unknown,
                        size_t unknownlen) {
    const cJSON *it;
    cJSON_ArrayForEach(it, cfg) {
        if (!it->string || cJSON_IsNull(it)) continue;
        const char *name = strncmp(it->string, "fsdp_", 5) || !strcmp(it->string, "fsdp_version")
                               ? it->string : it->string + 5;
        char label[96];
        if (in_list(name, FSDP_HONOURED, sizeof FSDP_HONOURED / sizeof FSDP_HONOURED[0])) continue;
        bool dropped = in_list(name, FSDP_DROPPED, sizeof FSDP_DROPPED / sizeof FSDP_DROPPED[0]);
        snprintf(label, sizeof label, "fsdp_config.%.40s%s", it->string,
                 dropped ? " (axolotl drops it)" : "");
        if (dropped || in_list(name, FSDP_INERT, sizeof FSDP_INERT / sizeof FSDP_INERT[0]))
            append(ignored, ignoredlen, label);
        else
            append(unknown, unknownlen, label);
    }
}

/* A plugin's keys set without the plugin: axolotl reads them only through
 * the plugin's args (integrations/liger/args.py, cut_cross_entropy/args.py),
 * so they change nothing; named so that no key is dropped unsaid. */
static bool plugin_key_without_plugin(const cJSON *root, const char *key) {
    const char *plugin = !strncmp(key, "liger_", 6) ? "LigerPlugin"
                         : !strcmp(key, "cut_cross_entropy") ? "CutCrossEntropyPlugin" : NULL;
    if (!plugin) return false;
    const cJSON *plugins = cJSON_GetObjectItemCaseSensitive(root, "plugins"), *p;
    cJSON_ArrayForEach(p, plugins)
        if (cJSON_IsString(p) && p->valuestring && strstr(p->valuestring, plugin)) return false;
    return true;
}

void est_axolotl_unused(const cJSON *root, char *ignored, size_t ignoredlen, char *unknown,
                        size_t unknownlen) {
    ignored[0] = unknown[0] = '\0';
    const cJSON *it;
    cJSON_ArrayForEach(it, root) {
        if (!it->string || cJSON_IsNull(it)) continue;
        if (!strcmp(it->string, "fsdp_config") && cJSON_IsObject(it))
            fsdp_unused(it, ignored, ignoredlen, unknown, unknownlen);
        if (!cJSON_IsFalse(it) && plugin_key_without_plugin(root, it->string) && !est_axolotl_key_checked(it->string)) {
            char label[96];
            snprintf(label, sizeof label, "%.50s (no plugin reads it)", it->string);
            append(ignored, ignoredlen, label);
            continue;
        }
        if (est_axolotl_key_honoured(it->string)) continue;
        if (in_list(it->string, INERT, sizeof INERT / sizeof INERT[0])) append(ignored, ignoredlen, it->string);
        else append(unknown, unknownlen, it->string);
    }
}

void est_axolotl_note(char *used, size_t n, const char *key) {
    size_t len = strlen(used);
    if (strstr(used, "...")) return;
    if (len + strlen(key) + 8 < n) snprintf(used + len, n - len, "%s%s", len ? ", " : "", key);
    else if (len + 6 < n) snprintf(used + len, n - len, ", ...");
}
