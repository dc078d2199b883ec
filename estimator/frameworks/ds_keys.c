/* The table of DeepSpeed config keys (ds_keys.h) and its checks.
 *
 * Sources, per DeepSpeed version of ftest's stacks (stack.c): 0.14.2 and 0.16.4
 * from github.com/microsoft/DeepSpeed at those tags, 0.19.8 from its wheel
 * (deepspeed-0.19.8-py3-none-any.whl), 0.18.1 from its sdist (PyPI
 * deepspeed-0.18.1.tar.gz: precision_config.py and compile/config.py are
 * pydantic, extra="forbid", as in 0.19.8). Field names, defaults and aliases are
 * those of DeepSpeedZeroConfig (runtime/zero/config.py; 0.16.4 lines 91-344),
 * DeepSpeedZeroOffload{Param,Optimizer}Config (runtime/zero/offload_config.py),
 * the fp16/bf16 readers (runtime/config.py get_fp16_* 0.14.2-0.16.4,
 * runtime/precision_config.py 0.19.8), DeepSpeedConfig._initialize_params
 * (runtime/config.py) and the keys 0.19.8 refuses outright
 * (runtime/config.py _REMOVED_TOP_LEVEL_CONFIG_KEYS, _REMOVED_ZERO_CONFIG_KEYS). */
#include "ds_keys.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "str_util.h"

#define Z "zero_optimization"
#define OO "zero_optimization.offload_optimizer"
#define OP "zero_optimization.offload_param"
#define M(sec, key, alias) {sec, key, alias, EST_DSK_MODELLED, NULL, NULL, NULL, NULL, NULL}
#define B(sec, key, why) {sec, key, NULL, EST_DSK_NO_EFFECT, NULL, why, NULL, NULL, NULL}
#define R(sec, key, dflt, what) {sec, key, NULL, EST_DSK_REFUSED, dflt, what, NULL, NULL, NULL}
#define S(sec, key) {sec, key, NULL, EST_DSK_SECTION, NULL, NULL, NULL, NULL, NULL}

static const est_ds_key KEYS[] = {
    /* top level: modelled (ds_config.c) */
    S("", "fp16"),
    {"", "bf16", "bfloat16", EST_DSK_SECTION, NULL, NULL, NULL, NULL, NULL}, /* precision_config.py BFLOAT16_OLD */
    M("", "train_batch_size", NULL),
    M("", "train_micro_batch_size_per_gpu", NULL),
    M("", "gradient_accumulation_steps", NULL),
    S("", "optimizer"),
    M("", "zero_force_ds_cpu_optimizer", NULL),
    M("", "communication_data_type", NULL), /* ds_config.c comm_dtype */
    S("", "compile"),
    S("", Z),
    S("", "data_types"),
    /* top level: no effect on the step's memory or time */
    B("", "scheduler", "learning-rate schedule"),
    B("", "steps_per_print", "logging"),
    B("", "wall_clock_breakdown", "logging"),
    B("", "memory_breakdown", "logging"),
    B("", "dump_state", "logging"),
    B("", "gradient_clipping", "the clip's value (the norm is modelled)"),
    B("", "zero_allow_untested_optimizer", "a permission"),
    B("", "prescale_gradients", "where the 1/world scaling happens"),
    B("", "gradient_predivide_factor", "where the 1/world scaling happens"),
    B("", "disable_allgather", "read by no engine path"),
    B("", "dataloader_drop_last", "data loading"),
    B("", "log_level", "logging"),
    B("", "tensorboard", "logging"),
    B("", "wandb", "logging"),
    B("", "csv_monitor", "logging"),
    B("", "comet", "logging"),
    B("", "comms_logger", "logging"),
    B("", "flops_profiler", "profiles one step"),
    B("", "timers", "logging"),
    B("", "autotuning", "read by the autotuner launcher only"),
    B("", "checkpoint", "saving"),
    B("", "nebula", "saving"),
    B("", "aio", "NVMe I/O (NVMe offload is refused)"),
    B("", "pipeline", "PipelineEngine only; the HF Trainer builds none"),
    B("", "use_data_before_expert_parallelism", "process-group order"),
    B("", "seq_parallel_communication_data_type", "Ulysses sequence parallelism only"),
    B("", "seq_parallel_comm_data_type", "Ulysses sequence parallelism only"),
    /* activation_checkpointing/config.py is read only by
     * deepspeed.checkpointing.configure() (checkpointing.py
     * _configure_using_config_file); the engine never calls it, nor do
     * transformers, accelerate or axolotl, whose gradient checkpointing is
     * torch.utils.checkpoint (--checkpointing). */
    B("", "activation_checkpointing", "read only by deepspeed.checkpointing.configure, which the HF Trainer never calls"),
    /* top level: changes memory or time, not modelled */
    R("", "hybrid_engine", "@disabled", "DeepSpeed-Chat hybrid engine"),
    R("", "data_efficiency", "@disabled", "curriculum sampling / random-LTD"),
    R("", "torch_autocast", "@disabled", "DeepSpeed's torch.autocast mode"),
    R("", "weight_quantization", "null", "weight quantization"),
    R("", "tensor_parallel", "null", "AutoTP tensor parallelism"),
    R("", "expert_parallel", "null", "expert parallelism"),
    R("", "sequence_parallel_size", "1", "Ulysses sequence parallelism"),
    {"", "managed_gradient_accumulation", NULL, EST_DSK_REFUSED, "true", "unmanaged gradient accumulation",
     "0.19.8", NULL, NULL},
    {"", "disable_python_gc", NULL, EST_DSK_REFUSED, "false", "Python GC control in the step", "0.19.8", NULL, NULL},
    {"", "gradient_allreduce_op", NULL, EST_DSK_REFUSED, "\"mean\"", "a sum all-reduce", "0.19.8", NULL, NULL},
    {"", "amp", NULL, EST_DSK_REFUSED, "@disabled", "NVIDIA Apex AMP", NULL, "0.19.8", NULL},
    {"", "elasticity", NULL, EST_DSK_REFUSED, "@disabled", "elastic batch sizes", NULL, "0.19.8", NULL},
    {"", "curriculum_learning", NULL, EST_DSK_REFUSED, "@disabled", "curriculum sequence lengths", NULL, "0.19.8", NULL},
    {"", "progressive_layer_drop", NULL, EST_DSK_REFUSED, "@disabled", "progressive layer drop", NULL, "0.19.8", NULL},
    {"", "eigenvalue", NULL, EST_DSK_REFUSED, "@disabled", "eigenvalue MoQ", NULL, "0.19.8", NULL},
    {"", "quantize_training", NULL, EST_DSK_REFUSED, "@disabled", "MoQ quantized training", NULL, "0.19.8", NULL},
    {"", "sparse_attention", NULL, EST_DSK_REFUSED, "null", "DeepSpeed sparse attention", NULL, "0.19.8", NULL},
    {"", "sparse_gradients", NULL, EST_DSK_REFUSED, "false", "sparse embedding gradients", NULL, "0.19.8", NULL},
    {"", "compression_training", NULL, EST_DSK_REFUSED, "null", "compression library", NULL, "0.19.8", NULL},
    {"", "graph_harvesting", NULL, EST_DSK_REFUSED, "false", "CUDA graph harvesting", NULL, "0.19.8", NULL},

    /* fp16 / bf16 (runtime/config.py, constants.py 0.14.2-0.16.4; precision_config.py 0.19.8) */
    M("fp16", "enabled", NULL),
    R("fp16", "auto_cast", "false", "inputs cast to fp16 by the engine"),
    B("fp16", "loss_scale", "loss-scale value"),
    B("fp16", "initial_scale_power", "loss-scale value"),
    B("fp16", "loss_scale_window", "loss-scale schedule"),
    B("fp16", "hysteresis", "loss-scale schedule"),
    B("fp16", "consecutive_hysteresis", "loss-scale schedule"),
    B("fp16", "min_loss_scale", "loss-scale value"),
    R("fp16", "fp16_master_weights_and_grads", "false", "fp16 master weights and gradients"),
    M("bf16", "enabled", NULL),
    R("bf16", "immediate_grad_update", "false", "BF16_Optimizer's immediate fp32 gradient update"),
    {"bf16", "check_grad_overflow", NULL, EST_DSK_NO_EFFECT, NULL, "an overflow check", "0.18.1", NULL, NULL},
    {"bf16", "bf16_master_weights_and_grads", NULL, EST_DSK_REFUSED, "false", "bf16 master weights and gradients",
     "0.19.8", NULL, NULL},
    {"bf16", "bf16_optimizer_states", NULL, EST_DSK_REFUSED, "false", "bf16 optimizer states", "0.19.8", NULL, NULL},

    /* optimizer (runtime/config.py get_optimizer_*; ops/adam FusedAdam, DeepSpeedCPUAdam) */
    M("optimizer", "type", NULL),
    S("optimizer", "params"),
    B("optimizer", "legacy_fusion", "fp16 optimizer wrapper choice, same buffers"),
    B("optimizer.params", "lr", "a hyper-parameter"),
    B("optimizer.params", "betas", "a hyper-parameter"),
    B("optimizer.params", "eps", "a hyper-parameter"),
    B("optimizer.params", "weight_decay", "a hyper-parameter"),
    B("optimizer.params", "bias_correction", "a hyper-parameter"),
    B("optimizer.params", "adam_w_mode", "decoupled or L2 decay, same state"),
    R("optimizer.params", "torch_adam", "false", "torch.optim.Adam(W) in place of FusedAdam"),
    R("optimizer.params", "amsgrad", "false", "AMSGrad's extra state"),

    /* compile: 0.14.2 runtime/compiler.py CompileConfig (enabled, backend,
     * kwargs; enabled wraps the module in CompiledModuleWrapper, engine.py 365);
     * 0.16.4 reads no "compile" section (engine.compile() takes arguments);
     * 0.19.8 compile/config.py CompileConfig, whose fields other than
     * deepcompile and passes act only under DeepCompile. */
    {"compile", "enabled", NULL, EST_DSK_REFUSED, "false", "torch.compile of the module by the engine", NULL, NULL,
     "0.14.2"},
    {"compile", "backend", NULL, EST_DSK_NO_EFFECT, NULL, "only with compile.enabled", NULL, NULL, "0.14.2"},
    {"compile", "kwargs", NULL, EST_DSK_NO_EFFECT, NULL, "only with compile.enabled", NULL, NULL, "0.14.2"},
    R("compile", "deepcompile", "false", "DeepCompile"),
    {"compile", "passes", NULL, EST_DSK_REFUSED, "null", "DeepCompile passes", "0.19.8", NULL, NULL},
    /* 0.18.1 compile/config.py has deepcompile and the fields below but
     * autoep_non_moe, offload_activation_pin_memory and passes (0.19.8) */
#define DC2(key, since) {"compile", key, NULL, EST_DSK_NO_EFFECT, NULL, "DeepCompile only", since, NULL, NULL}
#define DC(key) DC2(key, "0.18.1")
    DC2("autoep_non_moe", "0.19.8"), DC("free_activation"), DC("free_activation_threshold"), DC("offload_activation"),
    DC2("offload_activation_pin_memory", "0.19.8"), DC("offload_opt_states"), DC("double_buffer"), DC("symmetric_memory"),
    DC("debug_log"), DC("offload_parameters"), DC("sync_before_reduce"), DC("sync_after_reduce"),
    DC("sync_before_allgather"), DC("sync_after_allgather"), DC("keep_int_input_tensors"),
    DC("keep_all_input_tensors"),
#undef DC
#undef DC2

    /* data_types (runtime/config.py _initialize_params) */
    M("data_types", "grad_accum_dtype", NULL), /* ds_config.c grad_accum_dtype */
    {"data_types", "param_dtype", NULL, EST_DSK_REFUSED, "null", "parameters cast to another dtype", "0.19.8", NULL, NULL},
    {"data_types", "buffer_dtype", NULL, EST_DSK_REFUSED, "null", "buffers cast to another dtype", "0.19.8", NULL, NULL},
    {"data_types", "keep_in_fp32_modules", NULL, EST_DSK_REFUSED, "\"auto\"", "modules kept in fp32", "0.19.8",
     NULL, NULL},

    /* zero_optimization (runtime/zero/config.py; line numbers at 0.16.4) */
    M(Z, "stage", NULL),
    S(Z, "offload_optimizer"),
    S(Z, "offload_param"),
    M(Z, "cpu_offload", NULL),       /* 195: deprecated, becomes offload_optimizer {device: cpu} */
    M(Z, "cpu_offload_param", NULL), /* 174: deprecated, becomes offload_param {device: cpu} */
    B(Z, "cpu_offload_use_pin_memory", "host bytes are counted the same pinned or not"),
    M(Z, "reduce_bucket_size", NULL),
    /* runtime/utils.py all_gather_dp_groups (0.16.4 line 967): with
     * all_gather_into_tensor (every stack's torch) the bucket size is unused;
     * ds_config.c still reads it for the records (docs/records.md) */
    B(Z, "allgather_bucket_size", "unused by all_gather_into_tensor"),
    M(Z, "overlap_comm", NULL),
    M(Z, "sub_group_size", NULL),
    M(Z, "stage3_prefetch_bucket_size", "prefetch_bucket_size"),
    M(Z, "stage3_param_persistence_threshold", "param_persistence_threshold"),
    M(Z, "stage3_max_live_parameters", "max_live_parameters"),
    M(Z, "stage3_max_reuse_distance", "max_reuse_distance"),
    {Z, "stage3_gather_16bit_weights_on_model_save", "gather_16bit_weights_on_model_save", EST_DSK_NO_EFFECT, NULL,
     "saving", NULL, NULL, NULL},
    B(Z, "stage3_gather_fp16_weights_on_model_save", "saving"),
    B(Z, "load_from_fp32_weights", "checkpoint loading"),
    B(Z, "elastic_checkpoint", "checkpoint loading"),
    B(Z, "ignore_unused_parameters", "an error check"),
    B(Z, "pipeline_loading_checkpoint", "checkpoint loading"),
    B(Z, "override_module_apply", "model set-up"),
    {Z, "log_trace_cache_warnings", NULL, EST_DSK_NO_EFFECT, NULL, "logging", "0.16.4", NULL, NULL},
    {Z, "save_muon_momentum_buffer_in_memory", NULL, EST_DSK_NO_EFFECT, NULL, "NVMe only", "0.19.8", NULL, NULL},
    M(Z, "contiguous_gradients", NULL), /* ds_config.c: false modelled at stage 3 */
    R(Z, "reduce_scatter", "true", "gradients averaged by all-reduce instead of reduce-scatter"),
    R(Z, "allgather_partitions", "true", "updated partitions gathered by broadcasts"),
    R(Z, "use_multi_rank_bucket_allreduce", "true", "one reduce per rank's bucket"),
    R(Z, "round_robin_gradients", "false", "round-robin gradient copies to the host"),
    R(Z, "legacy_stage1", "false", "the legacy stage-1 optimizer"),
    R(Z, "zero_hpz_partition_size", "1", "ZeRO++ hpZ secondary parameter partition"),
    R(Z, "zero_quantized_weights", "false", "ZeRO++ qwZ"),
    R(Z, "zero_quantized_gradients", "false", "ZeRO++ qgZ"),
    R(Z, "zero_quantized_nontrainable_weights", "false", "quantized frozen weights"),
    {Z, "stage3_model_persistence_threshold", "model_persistence_threshold", EST_DSK_REFUSED, "9223372036854775807",
     "a cap on persistent parameters", NULL, NULL, NULL},
    R(Z, "memory_efficient_linear", "true", "ZeRO-3 without its memory-efficient linear"),
    {Z, "stage3_module_granularity_threshold", "module_granularity_threshold", EST_DSK_REFUSED, "0",
     "fine-grained modules fetched as one", "0.16.4", NULL, NULL},
    {Z, "stage3_use_all_reduce_for_fetch_params", "use_all_reduce_for_fetch_params", EST_DSK_REFUSED, "false",
     "parameter fetch by all-reduce", "0.16.4", NULL, NULL},
    {Z, "stage3_allgather_sequential", "allgather_sequential", EST_DSK_REFUSED, "false",
     "unbucketed sequential all-gathers", "0.19.8", NULL, NULL},
    {Z, "mics_shard_size", NULL, EST_DSK_REFUSED, "-1", "MiCS sharding", NULL, "0.19.8", NULL},
    {Z, "mics_hierarchical_params_gather", NULL, EST_DSK_REFUSED, "false", "MiCS hierarchical gather", NULL, "0.19.8", NULL},
    {Z, "zeropp_loco_param", NULL, EST_DSK_REFUSED, "null", "LoCo-ZeRO++", "0.16.4", "0.19.8", NULL},
    {Z, "compute_grad_norm", NULL, EST_DSK_REFUSED, "true", "ZeRO-1/2 step without the gradient norm", "0.19.8",
     NULL, NULL},
    {Z, "parameter_alignment", NULL, EST_DSK_REFUSED, "false", "16-byte padded flat buffers", "0.19.8", NULL, NULL},
    {Z, "zenflow", NULL, EST_DSK_REFUSED, "null", "ZenFlow", "0.18.1", NULL, NULL},
    {Z, "enable_sanity_checks", NULL, EST_DSK_REFUSED, "false", "ZeRO-3 sanity checks", "0.18.1", NULL, NULL},
    {Z, "leaf_module", NULL, EST_DSK_REFUSED, "null", "ZeRO-3 leaf modules fetched whole", "0.18.1", NULL, NULL},

    /* offload sections (runtime/zero/offload_config.py) */
    M(OO, "device", NULL),
    B(OO, "pin_memory", "host bytes are counted the same pinned or not"),
    B(OO, "nvme_path", "NVMe only"),
    B(OO, "buffer_count", "NVMe only"),
    B(OO, "pipeline_read", "NVMe only"),
    B(OO, "pipeline_write", "NVMe only"),
    B(OO, "fast_init", "NVMe only"),
    R(OO, "ratio", "1", "partial optimizer offload (ZeRO-3 Twin-Flow)"),
    {OO, "super_offload", NULL, EST_DSK_REFUSED, "false", "SuperOffload", "0.18.1", NULL, NULL},
    {OO, "cpuadam_cores_perc", NULL, EST_DSK_REFUSED, "0.8", "DeepSpeedCPUAdam's share of the host cores", "0.18.1",
     NULL, NULL},
    M(OP, "device", NULL),
    B(OP, "pin_memory", "host bytes are counted the same pinned or not"),
    B(OP, "nvme_path", "NVMe only"),
    B(OP, "buffer_count", "NVMe only"),
    B(OP, "buffer_size", "NVMe only"),
    B(OP, "max_in_cpu", "NVMe only"),
};

/* Sections DeepSpeed validates with pydantic extra="forbid" (config_utils.py
 * DeepSpeedConfigModel), from and up to which version. */
static const char *const STRICT[][3] = {
    {Z, "0.0.0", "99.0.0"},          {OO, "0.0.0", "99.0.0"},         {OP, "0.0.0", "99.0.0"},
    {"fp16", "0.18.1", "99.0.0"},    {"bf16", "0.18.1", "99.0.0"},    {"compile", "0.14.0", "0.14.99"},
    {"compile", "0.18.1", "99.0.0"},
};

#define NEWEST "0.19.8"

const est_ds_key *est_ds_keys(size_t *count) {
    *count = sizeof KEYS / sizeof KEYS[0];
    return KEYS;
}

/* "0.16.4" against "0.19.8": <0, 0, >0. */
static int version_cmp(const char *a, const char *b) {
    for (int i = 0; i < 3; i++) {
        long x = strtol(a, (char **)&a, 10), y = strtol(b, (char **)&b, 10);
        if (x != y) return x < y ? -1 : 1;
        if (*a == '.') a++;
        if (*b == '.') b++;
    }
    return 0;
}

static const est_ds_key *find(const char *section, const char *key, const char *version) {
    for (size_t i = 0; i < sizeof KEYS / sizeof KEYS[0]; i++) {
        const est_ds_key *k = &KEYS[i];
        if (strcmp(k->section, section) || (strcmp(k->key, key) && (!k->alias || strcmp(k->alias, key)))) continue;
        if (version && k->since && version_cmp(version, k->since) < 0) return NULL;
        if (version && k->until && version_cmp(version, k->until) > 0) return NULL;
        return k;
    }
    return NULL;
}

const cJSON *est_ds_key_get(const cJSON *obj, const char *section, const char *key) {
    if (!cJSON_IsObject(obj)) return NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    const est_ds_key *k = find(section, key, NULL);
    if ((!v || cJSON_IsNull(v)) && k && k->alias) v = cJSON_GetObjectItemCaseSensitive(obj, k->alias);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static bool strict(const char *section, const char *version) {
    for (size_t i = 0; i < sizeof STRICT / sizeof STRICT[0]; i++)
        if (!strcmp(STRICT[i][0], section) && version_cmp(version, STRICT[i][1]) >= 0 &&
            version_cmp(version, STRICT[i][2]) <= 0)
            return true;
    return false;
}

/* True when `v` is DeepSpeed's default for `k` (so the key changes nothing). */
static bool is_default(const est_ds_key *k, const cJSON *v) {
    if (cJSON_IsNull(v)) return true; /* pydantic Optional / dict.get: null is unset */
    if (!strcmp(k->deflt, "@disabled")) {
        if (cJSON_IsFalse(v)) return true;
        const cJSON *en = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, "enabled") : NULL;
        return cJSON_IsObject(v) && !cJSON_IsTrue(en);
    }
    cJSON *d = cJSON_Parse(k->deflt);
    bool same = d && cJSON_Compare(d, v, true);
    if (d && cJSON_IsNumber(d) && cJSON_IsNumber(v)) same = d->valuedouble == v->valuedouble;
    cJSON_Delete(d);
    return same;
}

const char *est_ds_printable(const char *key, char *buf, size_t n) {
    size_t i = 0;
    for (; key[i] && i + 4 < n; i++) buf[i] = (unsigned char)key[i] < 0x20 || key[i] == 0x7f ? '?' : key[i];
    buf[i] = '\0';
    if (key[i]) snprintf(buf + (i > 3 ? i - 3 : 0), 4, "...");
    return buf;
}

static void append(char *out, size_t n, const char *sec, const char *raw) {
    char key[64];
    est_ds_printable(raw, key, sizeof key);
    if (!out || !n) return;
    size_t len = strlen(out), need = strlen(sec) + strlen(key) + 4;
    if (len + need + 8 >= n) {
        if (!strstr(out, "...")) snprintf(out + len, n - len, "%s...", len ? ", " : "");
        return;
    }
    snprintf(out + len, n - len, "%s%s%s%s", len ? ", " : "", sec, sec[0] ? "." : "", key);
}

typedef struct {
    const char *version;
    char *unread;
    size_t unreadlen;
    char *err;
    size_t errlen;
} check_ctx;

static int check_section(const cJSON *obj, const char *section, check_ctx *c);

static int check_key(const cJSON *it, const char *section, check_ctx *c) {
    const char *dot = section[0] ? "." : "";
    const est_ds_key *k = find(section, it->string, c->version);
    if (!k) {
        char key[64];
        if (strict(section, c->version))
            return ft_errorf(c->err, c->errlen,
                             "%s%s%s is not a setting of DeepSpeed %s (DeepSpeed refuses the file: its "
                             "config model forbids unknown fields)",
                             section, dot, est_ds_printable(it->string, key, sizeof key), c->version);
        append(c->unread, c->unreadlen, section, it->string);
        return 0;
    }
    /* 0.19.8 _reject_removed_config_keys: `if key in param_dict`, null included */
    if (k->removed && version_cmp(c->version, k->removed) >= 0)
        return ft_errorf(c->err, c->errlen, "%s%s%s: DeepSpeed %s removed %s and refuses a config that sets it",
                         section, dot, it->string, c->version, k->what);
    if (k->cls == EST_DSK_REFUSED && !is_default(k, it))
        return ft_errorf(c->err, c->errlen, "not modelled: %s%s%s (%s)", section, dot, it->string, k->what);
    if (k->cls == EST_DSK_SECTION && cJSON_IsObject(it)) {
        char sub[96];
        snprintf(sub, sizeof sub, "%s%s%s", section, dot, k->key);
        return check_section(it, sub, c);
    }
    return 0;
}

static int check_section(const cJSON *obj, const char *section, check_ctx *c) {
    for (const cJSON *it = obj->child; it; it = it->next) {
        const est_ds_key *k = find(section, it->string, NULL);
        if (k && k->alias && cJSON_GetObjectItemCaseSensitive(obj, k->key) &&
            cJSON_GetObjectItemCaseSensitive(obj, k->alias) && !strcmp(it->string, k->alias))
            return ft_errorf(c->err, c->errlen, "%s%s%s and %s%s%s are one DeepSpeed setting given twice: keep one",
                             section, section[0] ? "." : "", k->key, section, section[0] ? "." : "", k->alias);
        if (check_key(it, section, c) < 0) return -1;
    }
    return 0;
}

int est_ds_keys_check(const cJSON *root, const char *version, char *unread, size_t unreadlen, char *err,
                      size_t errlen) {
    if (unread && unreadlen) unread[0] = '\0';
    if (!cJSON_IsObject(root)) return ft_errorf(err, errlen, "the config is not a JSON object");
    check_ctx c = {.version = version && version[0] >= '0' && version[0] <= '9' ? version : NEWEST,
                   .unread = unread, .unreadlen = unreadlen, .err = err, .errlen = errlen};
    return check_section(root, "", &c);
}

/* Listed on the from line: modelled keys, and the sections whose presence
 * is what ftest reads (fp16/bf16 by "enabled", optimizer by its type, the
 * offload sections by their device). */
static bool listed(const est_ds_key *k) {
    if (k->cls == EST_DSK_MODELLED) return !k->section[0] || !strcmp(k->section, Z);
    return k->cls == EST_DSK_SECTION && (!strcmp(k->key, "fp16") || !strcmp(k->key, "bf16") ||
                                         !strcmp(k->key, "optimizer") || !strncmp(k->key, "offload_", 8));
}

size_t est_ds_keys_modelled(const cJSON *root, char *out, size_t n) {
    if (!out || !n) return 0;
    out[0] = '\0';
    if (!cJSON_IsObject(root)) return 0;
    size_t total = 0, left_off = 0;
    const cJSON *zero = est_ds_key_get(root, "", Z);
    for (size_t i = 0; i < sizeof KEYS / sizeof KEYS[0]; i++) {
        const est_ds_key *k = &KEYS[i];
        const cJSON *obj = !k->section[0] ? root : !strcmp(k->section, Z) ? zero : NULL;
        if (!listed(k) || !cJSON_IsObject(obj) || !est_ds_key_get(obj, k->section, k->key)) continue;
        const char *name = cJSON_GetObjectItemCaseSensitive(obj, k->key) ? k->key : k->alias;
        char item[128];
        snprintf(item, sizeof item, "%s%s%s", k->section, k->section[0] ? "." : "", name ? name : k->key);
        size_t len = strlen(out);
        total++;
        if (left_off || len + strlen(item) + 16 >= n) {
            left_off++;
            continue;
        }
        snprintf(out + len, n - len, "%s%s", len ? ", " : "", item);
    }
    if (left_off) {
        size_t len = strlen(out);
        snprintf(out + len, n - len, "%s(+%zu more)", len ? " " : "", left_off);
    }
    return total;
}
