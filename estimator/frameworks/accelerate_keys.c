#include "accelerate_keys.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "json_util.h"

typedef enum {
    ACC_READ,  /* accelerate_config.c applies or checks it */
    ACC_INERT, /* no byte or second of the step depends on it */
} acc_kind;

typedef enum {
    ACC_NEVER,
    ACC_TRUE,      /* true */
    ACC_SET,       /* any value but null, false, "", [] and {} */
    ACC_ABOVE_ONE, /* a number above 1 (a parallel degree) */
    ACC_NOT_IN,    /* a string outside the '|'-separated `value` (case aside) */
} acc_when;

typedef struct {
    const char *section; /* "" for the top level */
    const char *key;
    acc_kind kind;
    acc_when when;       /* refused when this holds */
    const char *value;   /* ACC_NOT_IN */
    const char *feature; /* what is not modelled, for the refusal; or why a key is inert */
} acc_key;

/* ======================================================================
 * THE TABLE (accelerate 1.15.0, git 16cb6eb: ClusterConfig's fields in
 * commands/config/config_args.py lines 179-217, refused otherwise by
 * from_yaml_file lines 154-158 after process_config lines 103-119 converts
 * fp16 and dynamo_backend; the keys `accelerate config` writes in
 * commands/config/cluster.py lines 399-551; what commands/launch.py
 * _validate_launch_command lines 1257-1275 and utils/launch.py
 * prepare_multi_gpu_env lines 303-332 / prepare_deepspeed_cmd_env lines
 * 557-585 pass on). A refusal names a mechanism ftest does
 * not model; lift it when the mechanism lands.
 * ====================================================================== */
static const acc_key KEYS[] = {
    /* ClusterConfig (commands/config/config_args.py) */
    {"", "distributed_type", ACC_READ, ACC_NEVER, NULL, NULL},
    {"", "num_processes", ACC_READ, ACC_NEVER, NULL, NULL},
    {"", "num_machines", ACC_READ, ACC_NEVER, NULL, NULL},
    {"", "mixed_precision", ACC_READ, ACC_NEVER, NULL, NULL},
    {"", "use_cpu", ACC_READ, ACC_TRUE, NULL, "training on the CPU"},
    {"", "fsdp_config", ACC_READ, ACC_NEVER, NULL, NULL},
    {"", "deepspeed_config", ACC_READ, ACC_NEVER, NULL, NULL},
    {"", "dynamo_config", ACC_READ, ACC_NEVER, NULL, NULL},
    {"", "parallelism_config", ACC_READ, ACC_NEVER, NULL, NULL},
    /* the old spellings process_config converts (config_args.py, 1.15.0 line 115-119) */
    {"", "dynamo_backend", ACC_READ, ACC_NOT_IN, "NO|INDUCTOR", "a torch.compile backend other than inductor"},
    {"", "fp16", ACC_READ, ACC_NEVER, NULL, NULL},
    {"", "compute_environment", ACC_INERT, ACC_NEVER, NULL, "where it launches"},
    {"", "debug", ACC_INERT, ACC_NEVER, NULL, "checks on accelerate's own gathers"},
    {"", "machine_rank", ACC_INERT, ACC_NEVER, NULL, "launcher"},
    {"", "gpu_ids", ACC_INERT, ACC_NEVER, NULL, "launcher (num_processes counts the GPUs)"},
    {"", "main_process_ip", ACC_INERT, ACC_NEVER, NULL, "launcher"},
    {"", "main_process_port", ACC_INERT, ACC_NEVER, NULL, "launcher"},
    {"", "rdzv_backend", ACC_INERT, ACC_NEVER, NULL, "launcher"},
    {"", "same_network", ACC_INERT, ACC_NEVER, NULL, "launcher"},
    {"", "main_training_function", ACC_INERT, ACC_NEVER, NULL, "launcher"},
    {"", "enable_cpu_affinity", ACC_INERT, ACC_NEVER, NULL, "host threads"},
    {"", "downcast_bf16", ACC_INERT, ACC_NEVER, NULL, "TPU only"},
    {"", "fp8_config", ACC_READ, ACC_NEVER, NULL, NULL},
    {"", "megatron_lm_config", ACC_INERT, ACC_NEVER, NULL, "read with distributed_type MEGATRON_LM only"},
    {"", "mpirun_config", ACC_INERT, ACC_NEVER, NULL, "launcher"},
    {"", "ipex_config", ACC_INERT, ACC_NEVER, NULL, "CPU only (accelerate < 1.0)"},
    {"", "tpu_name", ACC_INERT, ACC_NEVER, NULL, "TPU only"},
    {"", "tpu_zone", ACC_INERT, ACC_NEVER, NULL, "TPU only"},
    {"", "tpu_use_cluster", ACC_INERT, ACC_NEVER, NULL, "TPU only"},
    {"", "tpu_use_sudo", ACC_INERT, ACC_NEVER, NULL, "TPU only"},
    {"", "tpu_vm", ACC_INERT, ACC_NEVER, NULL, "TPU only"},
    {"", "tpu_env", ACC_INERT, ACC_NEVER, NULL, "TPU only"},
    {"", "command_file", ACC_INERT, ACC_NEVER, NULL, "TPU only"},
    {"", "commands", ACC_INERT, ACC_NEVER, NULL, "TPU only"},
    /* fsdp_config -> FullyShardedDataParallelPlugin (utils/dataclasses.py) */
    {"fsdp_config", "fsdp_version", ACC_READ, ACC_NEVER, NULL, NULL},
    {"fsdp_config", "fsdp_sharding_strategy", ACC_READ, ACC_NEVER, NULL, NULL},
    {"fsdp_config", "fsdp_reshard_after_forward", ACC_READ, ACC_NEVER, NULL, NULL},
    {"fsdp_config", "fsdp_offload_params", ACC_READ, ACC_NEVER, NULL, NULL},
    {"fsdp_config", "fsdp_activation_checkpointing", ACC_READ, ACC_NEVER, NULL, NULL},
    {"fsdp_config", "fsdp_cpu_ram_efficient_loading", ACC_READ, ACC_NEVER, NULL, NULL},
    {"fsdp_config", "fsdp_auto_wrap_policy", ACC_READ, ACC_NOT_IN, "TRANSFORMER_BASED_WRAP",
     "FSDP units other than the decoder layers"},
    {"fsdp_config", "fsdp_transformer_layer_cls_to_wrap", ACC_READ, ACC_NEVER, NULL, NULL},
    {"fsdp_config", "fsdp_backward_prefetch", ACC_READ, ACC_NEVER, NULL, NULL},
    {"fsdp_config", "fsdp_backward_prefetch_policy", ACC_READ, ACC_NEVER, NULL, NULL},
    {"fsdp_config", "fsdp_forward_prefetch", ACC_READ, ACC_NEVER, NULL, NULL},
    {"fsdp_config", "fsdp_ignored_modules", ACC_READ, ACC_SET, NULL, "modules kept out of FSDP"},
    {"fsdp_config", "fsdp_min_num_params", ACC_INERT, ACC_NEVER, NULL, "read by SIZE_BASED_WRAP only"},
    {"fsdp_config", "fsdp_state_dict_type", ACC_INERT, ACC_NEVER, NULL, "saving"},
    {"fsdp_config", "fsdp_use_orig_params", ACC_INERT, ACC_NEVER, NULL, "FSDP1 views of the flat parameter"},
    {"fsdp_config", "fsdp_sync_module_states", ACC_INERT, ACC_NEVER, NULL,
     "rank 0's broadcast when wrapping, before the first step"},
    /* deepspeed_config -> DeepSpeedPlugin */
    {"deepspeed_config", "zero_stage", ACC_READ, ACC_NEVER, NULL, NULL},
    {"deepspeed_config", "gradient_accumulation_steps", ACC_READ, ACC_NEVER, NULL, NULL},
    {"deepspeed_config", "offload_optimizer_device", ACC_READ, ACC_NEVER, NULL, NULL},
    {"deepspeed_config", "offload_param_device", ACC_READ, ACC_NEVER, NULL, NULL},
    {"deepspeed_config", "deepspeed_config_file", ACC_READ, ACC_NEVER, NULL, NULL},
    {"deepspeed_config", "zero3_init_flag", ACC_READ, ACC_NEVER, NULL, NULL},
    {"deepspeed_config", "deepspeed_moe_layer_cls_names", ACC_READ, ACC_SET, NULL,
     "ZeRO-3 leaf modules (MoE layers gathered whole)"},
    {"deepspeed_config", "gradient_clipping", ACC_INERT, ACC_NEVER, NULL, "one norm over the gradients"},
    {"deepspeed_config", "zero3_save_16bit_model", ACC_INERT, ACC_NEVER, NULL, "saving"},
    {"deepspeed_config", "offload_optimizer_nvme_path", ACC_INERT, ACC_NEVER, NULL, "read with nvme only"},
    {"deepspeed_config", "offload_param_nvme_path", ACC_INERT, ACC_NEVER, NULL, "read with nvme only"},
    {"deepspeed_config", "deepspeed_multinode_launcher", ACC_INERT, ACC_NEVER, NULL, "launcher"},
    {"deepspeed_config", "deepspeed_hostfile", ACC_INERT, ACC_NEVER, NULL, "launcher"},
    {"deepspeed_config", "deepspeed_exclusion_filter", ACC_INERT, ACC_NEVER, NULL, "launcher"},
    {"deepspeed_config", "deepspeed_inclusion_filter", ACC_INERT, ACC_NEVER, NULL, "launcher"},
    /* dynamo_config -> DynamoPlugin: torch.compile(model) in prepare_model
     * (checked only when dynamo_backend is not NO) */
    {"dynamo_config", "dynamo_backend", ACC_READ, ACC_NOT_IN, "NO|INDUCTOR", "a torch.compile backend other than inductor"},
    {"dynamo_config", "dynamo_mode", ACC_READ, ACC_NOT_IN, "default",
     "torch.compile with CUDA graphs or autotuning (reduce-overhead, max-autotune)"},
    {"dynamo_config", "dynamo_use_dynamic", ACC_READ, ACC_TRUE, NULL, "torch.compile with dynamic shapes"},
    {"dynamo_config", "dynamo_use_regional_compilation", ACC_READ, ACC_TRUE, NULL,
     "regional compilation (each block compiled alone)"},
    {"dynamo_config", "dynamo_use_fullgraph", ACC_INERT, ACC_NEVER, NULL, "fails on a graph break; same kernels"},
    /* fp8_config -> AORecipeKwargs / TERecipeKwargs / MSAMPRecipeKwargs (read with mixed_precision fp8) */
    {"fp8_config", "backend", ACC_READ, ACC_NEVER, NULL, NULL},
    {"fp8_config", "enable_fsdp_float8_all_gather", ACC_READ, ACC_NEVER, NULL, NULL},
    {"fp8_config", "pad_inner_dim", ACC_INERT, ACC_NEVER, NULL, "the converted Linears are multiples of 16"},
    {"fp8_config", "fp8_format", ACC_INERT, ACC_NEVER, NULL, "Transformer Engine's"},
    {"fp8_config", "amax_history_len", ACC_INERT, ACC_NEVER, NULL, "Transformer Engine's"},
    {"fp8_config", "amax_history_length", ACC_INERT, ACC_NEVER, NULL, "Transformer Engine's"},
    {"fp8_config", "amax_compute_algo", ACC_INERT, ACC_NEVER, NULL, "Transformer Engine's"},
    {"fp8_config", "amax_compute_algorithm", ACC_INERT, ACC_NEVER, NULL, "Transformer Engine's"},
    {"fp8_config", "interval", ACC_INERT, ACC_NEVER, NULL, "Transformer Engine's"},
    {"fp8_config", "margin", ACC_INERT, ACC_NEVER, NULL, "Transformer Engine's"},
    {"fp8_config", "override_linear_precision", ACC_INERT, ACC_NEVER, NULL, "Transformer Engine's"},
    {"fp8_config", "use_autocast_during_eval", ACC_INERT, ACC_NEVER, NULL, "Transformer Engine's"},
    {"fp8_config", "opt_level", ACC_INERT, ACC_NEVER, NULL, "MS-AMP's"},
    {"fp8_config", "optimization_level", ACC_INERT, ACC_NEVER, NULL, "MS-AMP's"},
    /* parallelism_config -> ParallelismConfig (parallelism_config.py), FSDP2 only */
    {"parallelism_config", "parallelism_config_dp_replicate_size", ACC_READ, ACC_ABOVE_ONE, NULL,
     "HSDP (a 2-D device mesh)"},
    {"parallelism_config", "parallelism_config_tp_size", ACC_READ, ACC_ABOVE_ONE, NULL, "tensor parallelism"},
    {"parallelism_config", "parallelism_config_cp_size", ACC_READ, ACC_ABOVE_ONE, NULL, "context parallelism"},
    {"parallelism_config", "parallelism_config_sp_size", ACC_READ, ACC_ABOVE_ONE, NULL, "sequence parallelism"},
    {"parallelism_config", "parallelism_config_dp_shard_size", ACC_INERT, ACC_NEVER, NULL,
     "every process shards when the other degrees are 1"},
    {"parallelism_config", "parallelism_config_cp_comm_strategy", ACC_INERT, ACC_NEVER, NULL, "read with cp_size > 1"},
    {"parallelism_config", "parallelism_config_cp_backend", ACC_INERT, ACC_NEVER, NULL, "read with cp_size > 1"},
    {"parallelism_config", "parallelism_config_sp_backend", ACC_INERT, ACC_NEVER, NULL, "read with sp_size > 1"},
};
/* ============================ end of the table ============================ */

#define N_KEYS (sizeof KEYS / sizeof KEYS[0])

const char *est_accelerate_key_at(size_t i, const char **section, bool *read_or_refused) {
    if (i >= N_KEYS) return NULL;
    *section = KEYS[i].section;
    *read_or_refused = KEYS[i].kind == ACC_READ || KEYS[i].when != ACC_NEVER;
    return KEYS[i].key;
}

const cJSON *est_accelerate_section(const cJSON *root, const char *section) {
    if (!section[0]) return cJSON_IsObject(root) ? root : NULL;
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(root, section);
    return cJSON_IsObject(s) ? s : NULL;
}

const cJSON *est_accelerate_fsdp_item(const cJSON *fsdp, const char *name) {
    if (!cJSON_IsObject(fsdp)) return NULL;
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(fsdp, name);
    if ((!it || cJSON_IsNull(it)) && !strncmp(name, "fsdp_", 5))
        it = cJSON_GetObjectItemCaseSensitive(fsdp, name + 5);
    return it && !cJSON_IsNull(it) ? it : NULL;
}

/* The item a table entry names in the file (fsdp_config's with or without
 * the prefix, dynamo_config's likewise: launch adds both). */
static const cJSON *item_of(const cJSON *root, const acc_key *k) {
    const cJSON *s = est_accelerate_section(root, k->section);
    if (!s) return NULL;
    if (!strcmp(k->section, "fsdp_config")) return est_accelerate_fsdp_item(s, k->key);
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(s, k->key);
    if ((!it || cJSON_IsNull(it)) && !strcmp(k->section, "dynamo_config") && !strncmp(k->key, "dynamo_", 7))
        it = cJSON_GetObjectItemCaseSensitive(s, k->key + 7);
    return it && !cJSON_IsNull(it) ? it : NULL;
}

static bool one_of(const char *s, const char *list) {
    size_t n = strlen(s);
    for (const char *p = list; p; p = strchr(p, '|') ? strchr(p, '|') + 1 : NULL)
        if (!strncasecmp(p, s, n) && (p[n] == '|' || p[n] == '\0')) return true;
    return false;
}

static bool fires(const acc_key *k, const cJSON *it) {
    switch (k->when) {
    case ACC_NEVER: return false;
    case ACC_TRUE: return cJSON_IsTrue(it) || (cJSON_IsString(it) && it->valuestring &&
                                               (!strcasecmp(it->valuestring, "true") || !strcasecmp(it->valuestring, "yes")));
    case ACC_SET:
        return !cJSON_IsFalse(it) && !(cJSON_IsString(it) && it->valuestring && !it->valuestring[0]) &&
               !((cJSON_IsArray(it) || cJSON_IsObject(it)) && !it->child);
    case ACC_ABOVE_ONE: return cJSON_IsNumber(it) && it->valuedouble > 1;
    case ACC_NOT_IN: return !cJSON_IsString(it) || !it->valuestring || !one_of(it->valuestring, k->value);
    }
    return false;
}

/* Appends "SEP TEXT" to buf, bounded. */
static void add(char *buf, size_t n, const char *sep, const char *text) {
    size_t len = strlen(buf);
    if (len + 4 < n) snprintf(buf + len, n - len, "%s%s", len ? sep : "", text);
}

static void value_text(const cJSON *it, char *val, size_t n) {
    snprintf(val, n, "true");
    if (cJSON_IsString(it) && it->valuestring) snprintf(val, n, "%.40s", it->valuestring);
    else if (cJSON_IsNumber(it)) snprintf(val, n, "%g", it->valuedouble);
    else if (cJSON_IsFalse(it)) snprintf(val, n, "false");
    else if (cJSON_IsArray(it) || cJSON_IsObject(it)) snprintf(val, n, "[...]");
}

const cJSON *est_accelerate_dynamo_backend(const cJSON *root) {
    const cJSON *d = est_accelerate_section(root, "dynamo_config");
    const cJSON *b = d ? cJSON_GetObjectItemCaseSensitive(d, "dynamo_backend") : NULL;
    if (!b && d) b = cJSON_GetObjectItemCaseSensitive(d, "backend");
    if (!b) b = cJSON_GetObjectItemCaseSensitive(root, "dynamo_backend");
    return b && !cJSON_IsNull(b) ? b : NULL;
}

static bool dynamo_on(const cJSON *root) {
    const cJSON *b = est_accelerate_dynamo_backend(root);
    return cJSON_IsString(b) && b->valuestring && strcasecmp(b->valuestring, "NO");
}

static bool known_top(const char *key) {
    for (size_t i = 0; i < N_KEYS; i++)
        if (!KEYS[i].section[0] && !strcmp(KEYS[i].key, key)) return true;
    return false;
}

int est_accelerate_refused(const cJSON *root, char *err, size_t errlen) {
    char found[600] = "", unknown[300] = "";
    const cJSON *it;
    cJSON_ArrayForEach(it, root)
        if (it->string && !known_top(it->string)) add(unknown, sizeof unknown, ", ", it->string);
    if (unknown[0]) /* config_args.py from_yaml_file: "had unknown keys" */
        return ft_errorf(err, errlen, "not an accelerate %s config: unknown keys %s (accelerate refuses them)",
                         EST_ACCELERATE_VERSION, unknown);
    const bool dynamo = dynamo_on(root);
    for (size_t i = 0; i < N_KEYS; i++) {
        const acc_key *k = &KEYS[i];
        if (k->when == ACC_NEVER || (!strcmp(k->section, "dynamo_config") && !dynamo)) continue;
        const cJSON *v = item_of(root, k);
        if (!v || !fires(k, v)) continue;
        char val[48], text[200];
        value_text(v, val, sizeof val);
        snprintf(text, sizeof text, "%s (%s%s%s: %s)", k->feature, k->section, k->section[0] ? "." : "", k->key, val);
        add(found, sizeof found, "; ", text);
    }
    if (!found[0]) return 0;
    return ft_errorf(err, errlen, "not modelled (accelerate %s): %s", EST_ACCELERATE_VERSION, found);
}

/* The entry for `key` of `section`, either spelling. */
static const acc_key *entry_of(const char *section, const char *key) {
    for (size_t i = 0; i < N_KEYS; i++) {
        const acc_key *k = &KEYS[i];
        if (strcmp(k->section, section)) continue;
        if (!strcmp(k->key, key)) return k;
        const char *prefix = !strcmp(section, "fsdp_config") ? "fsdp_" : !strcmp(section, "dynamo_config") ? "dynamo_" : NULL;
        if (prefix && !strncmp(k->key, prefix, strlen(prefix)) && !strcmp(k->key + strlen(prefix), key)) return k;
        /* fp8_config's keys also as fp8_KEY (launch adds the prefix) */
        if (!strcmp(section, "fp8_config") && !strncmp(key, "fp8_", 4) && !strcmp(k->key, key + 4)) return k;
    }
    return NULL;
}

void est_accelerate_unused(const cJSON *root, char *ignored, size_t n) {
    static const char *const SECTIONS[] = {"", "fsdp_config", "deepspeed_config", "dynamo_config",
                                           "parallelism_config", "fp8_config"};
    for (size_t s = 0; s < sizeof SECTIONS / sizeof SECTIONS[0]; s++) {
        const cJSON *sec = est_accelerate_section(root, SECTIONS[s]), *it;
        cJSON_ArrayForEach(it, sec) {
            if (!it->string || cJSON_IsNull(it)) continue;
            const acc_key *k = entry_of(SECTIONS[s], it->string);
            if (k && k->kind == ACC_READ) continue;
            /* the reason for the sections' keys; the top level's are launcher settings */
            char text[160];
            if (!SECTIONS[s][0])
                snprintf(text, sizeof text, "%.60s", it->string);
            else
                snprintf(text, sizeof text, "%s.%.60s (%s)", SECTIONS[s], it->string,
                         k ? k->feature : "accelerate launch does not pass it on");
            size_t len = strlen(ignored);
            if (len + strlen(text) + 8 < n) add(ignored, n, ", ", text);
            else if (len + 6 < n && !strstr(ignored, "...")) add(ignored, n, ", ", "...");
        }
    }
}
