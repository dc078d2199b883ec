#include "accelerate_config.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ds_config.h"
#include "fsdp_policy.h"
#include "json_util.h"

static void note(char *used, size_t n, const char *key) {
    size_t len = strlen(used);
    if (len + 2 < n) snprintf(used + len, n - len, "%s%s", len ? ", " : "", key);
}

static bool present(const cJSON *o, const char *key) {
    const cJSON *it = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
    return it && !cJSON_IsNull(it);
}

/* fsdp_sharding_strategy: a name, or the number older accelerate versions
 * write (1 FULL_SHARD, 2 SHARD_GRAD_OP, 3 NO_SHARD; torch's ShardingStrategy). */
static int sharding(const cJSON *fsdp, int *stage, char *err, size_t errlen) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(fsdp, "fsdp_sharding_strategy");
    if (!it || cJSON_IsNull(it)) {
        *stage = 3; /* accelerate's default: FULL_SHARD */
        return 0;
    }
    if (cJSON_IsNumber(it)) {
        int v = (int)it->valuedouble;
        if (it->valuedouble == 1) *stage = 3;
        else if (it->valuedouble == 2) *stage = 2;
        else if (it->valuedouble == 3) *stage = 0;
        else return ft_errorf(err, errlen, "fsdp_sharding_strategy %d is not modelled (1 FULL_SHARD, "
                                           "2 SHARD_GRAD_OP, 3 NO_SHARD)", v);
        return 0;
    }
    if (!cJSON_IsString(it) || !it->valuestring)
        return ft_errorf(err, errlen, "fsdp_sharding_strategy must be a name such as FULL_SHARD");
    const char *s = it->valuestring;
    if (!strcmp(s, "FULL_SHARD")) *stage = 3;
    else if (!strcmp(s, "SHARD_GRAD_OP")) *stage = 2;
    else if (!strcmp(s, "NO_SHARD")) *stage = 0;
    else return ft_errorf(err, errlen, "fsdp_sharding_strategy \"%.30s\" is not modelled (FULL_SHARD, "
                                       "SHARD_GRAD_OP, NO_SHARD)", s);
    return 0;
}

/* offload_*_device: none or cpu (nvme is not modelled). */
static int device(const cJSON *o, const char *key, bool *cpu, char *err, size_t errlen) {
    char dev[16] = "none";
    if (ft_json_string(o, key, dev, sizeof dev, err, errlen) < 0) return -1;
    *cpu = !strcmp(dev, "cpu");
    if (!*cpu && strcmp(dev, "none"))
        return ft_errorf(err, errlen, "%s \"%s\" is not modelled (none, cpu)", key, dev);
    return 0;
}

/* One application of the config: the flags that win over it, the run it
 * fills and the list of the settings taken. */
typedef struct accel_apply {
    const cJSON *root;
    const est_given *given;
    est_run *run;
    char *used;
    size_t usedlen;
    char *err;
    size_t errlen;
} accel_apply;

/* Processes: num_processes over all machines. */
static int apply_processes(accel_apply *a) {
    int64_t procs = 0, machines = 1;
    if (ft_json_int64(a->root, "num_processes", 1, (int64_t)EST_MAX_GPUS_PER_NODE * EST_MAX_NODES,
                      &procs, a->err, a->errlen) < 0 ||
        ft_json_int64(a->root, "num_machines", 1, EST_MAX_NODES, &machines, a->err, a->errlen) < 0)
        return -1;
    if (procs == 0) return 0;
    if (procs % machines)
        return ft_errorf(a->err, a->errlen, "num_processes %lld is not a multiple of num_machines %lld",
                         (long long)procs, (long long)machines);
    if (procs / machines > EST_MAX_GPUS_PER_NODE)
        return ft_errorf(a->err, a->errlen, "more than %d processes per machine", EST_MAX_GPUS_PER_NODE);
    if (!a->given->gpus) a->run->gpus_per_node = procs / machines;
    if (!a->given->nodes) a->run->nodes = machines;
    note(a->used, a->usedlen, "num_processes");
    if (machines > 1) note(a->used, a->usedlen, "num_machines");
    return 0;
}

/* mixed_precision: no, fp16 or bf16. */
static int apply_mixed_precision(accel_apply *a) {
    char mp[16] = "";
    if (ft_json_string(a->root, "mixed_precision", mp, sizeof mp, a->err, a->errlen) < 0) return -1;
    if (!mp[0] || a->given->precision) return 0;
    if (!strcmp(mp, "bf16")) a->run->precision = EST_PREC_BF16_MIXED;
    else if (!strcmp(mp, "fp16")) a->run->precision = EST_PREC_FP16_MIXED;
    else if (!strcmp(mp, "no")) a->run->precision = EST_PREC_FP32;
    else return ft_errorf(a->err, a->errlen, "mixed_precision \"%s\" is not modelled (no, fp16, bf16)", mp);
    note(a->used, a->usedlen, "mixed_precision");
    return 0;
}

/* fsdp_backward_prefetch (fsdp_backward_prefetch_policy before accelerate
 * 0.27) and fsdp_forward_prefetch: accelerate launch passes them to the plugin
 * (utils/launch.py: FSDP_BACKWARD_PREFETCH, FSDP_FORWARD_PREFETCH). */
static int prefetch(accel_apply *a, const cJSON *f) {
    const char *key = present(f, "fsdp_backward_prefetch") ? "fsdp_backward_prefetch" : "fsdp_backward_prefetch_policy";
    char name[32];
    const int r = ft_json_string(f, key, name, sizeof name, a->err, a->errlen);
    if (r < 0) return -1;
    if (r == 1 && !a->given->fsdp_prefetch) {
        if (est_fsdp_prefetch_parse(name, &a->run->fsdp_backward_prefetch, a->err, a->errlen) < 0) return -1;
        note(a->used, a->usedlen, key);
    }
    bool fwd = false;
    const int rf = ft_json_bool(f, "fsdp_forward_prefetch", &fwd, a->err, a->errlen);
    if (rf < 0) return -1;
    if (rf == 1 && !a->given->fsdp_forward_prefetch) {
        a->run->fsdp_forward_prefetch = fwd;
        note(a->used, a->usedlen, "fsdp_forward_prefetch");
    }
    return 0;
}

/* The FSDP plugin: sharding strategy, parameter offload, activation checkpointing, prefetch. */
/* fsdp_transformer_layer_cls_to_wrap: the class TRANSFORMER_BASED_WRAP
 * wraps (accelerate's FullyShardedDataParallelPlugin; the environment
 * variable FSDP_TRANSFORMER_CLS_TO_WRAP, which PEFT's policy reads under
 * LoRA); unsaid, the model's _no_split_modules, its decoder layer. A class
 * the model does not have stops the run before training, as for axolotl's
 * (fsdp_policy.h). */
static int wrap_class(accel_apply *a, const cJSON *f, bool ckpt) {
    const cJSON *cls = f ? cJSON_GetObjectItemCaseSensitive(f, "fsdp_transformer_layer_cls_to_wrap") : NULL;
    if (!cls) return 0;
    if (!cJSON_IsString(cls) || !cls->valuestring)
        return ft_errorf(a->err, a->errlen, "fsdp_transformer_layer_cls_to_wrap must be a class name "
                                            "(or names, comma-separated)");
    if (est_fsdp_wrap_parse(&a->run->model, cls->valuestring, &a->run->fsdp_wrap, a->err, a->errlen) < 0)
        return -1;
    if (ckpt && a->run->fsdp_wrap == EST_FSDP_WRAP_MOE_BLOCK)
        return ft_errorf(a->err, a->errlen, "not modelled: FSDP activation checkpointing of the MoE blocks alone "
                                            "(fsdp_activation_checkpointing with %s)", cls->valuestring);
    note(a->used, a->usedlen, "fsdp_transformer_layer_cls_to_wrap");
    return 0;
}

static int apply_fsdp_plugin(accel_apply *a) {
    const est_given *given = a->given;
    est_run *run = a->run;
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(a->root, "fsdp_config");
    if (f && !cJSON_IsObject(f)) return ft_errorf(a->err, a->errlen, "fsdp_config must be a mapping");
    int stage = 3;
    bool offload = false, ckpt = false;
    if (f && (sharding(f, &stage, a->err, a->errlen) < 0 ||
              ft_json_bool(f, "fsdp_offload_params", &offload, a->err, a->errlen) < 0 ||
              ft_json_bool(f, "fsdp_activation_checkpointing", &ckpt, a->err, a->errlen) < 0))
        return -1;
    run->framework = EST_FW_FSDP;
    /* Every key taken is listed (issue 20, item 17: three of them were). */
    if (!given->zero) {
        run->zero_stage = stage;
        if (present(f, "fsdp_sharding_strategy")) note(a->used, a->usedlen, "fsdp_sharding_strategy");
    }
    if (!given->offload) {
        run->offload = offload ? EST_OFFLOAD_OPTIMIZER_PARAMS : EST_OFFLOAD_NONE;
        if (present(f, "fsdp_offload_params")) note(a->used, a->usedlen, "fsdp_offload_params");
    }
    if (ckpt && !given->checkpointing) {
        run->checkpointing = EST_CKPT_FULL;
        note(a->used, a->usedlen, "fsdp_activation_checkpointing");
    }
    if (present(f, "fsdp_cpu_ram_efficient_loading")) {
        bool rank0 = false;
        if (ft_json_bool(f, "fsdp_cpu_ram_efficient_loading", &rank0, a->err, a->errlen) < 0) return -1;
        run->fsdp_loading = rank0 ? EST_FSDP_LOAD_RANK0 : EST_FSDP_LOAD_EVERY_RANK;
        note(a->used, a->usedlen, "fsdp_cpu_ram_efficient_loading");
    }
    if (wrap_class(a, f, ckpt) < 0) return -1;
    return f ? prefetch(a, f) : 0;
}

/* deepspeed_config written inline: ZeRO stage, accumulation and offload devices. */
static int apply_deepspeed_inline(accel_apply *a, const cJSON *d) {
    const est_given *given = a->given;
    est_run *run = a->run;
    int64_t stage = 2, accum = 0;
    bool opt = false, par = false;
    if (ft_json_int64(d, "zero_stage", 0, 3, &stage, a->err, a->errlen) < 0 ||
        ft_json_int64(d, "gradient_accumulation_steps", 1, EST_MAX_ACCUM, &accum, a->err, a->errlen) < 0 ||
        device(d, "offload_optimizer_device", &opt, a->err, a->errlen) < 0 ||
        device(d, "offload_param_device", &par, a->err, a->errlen) < 0)
        return -1;
    if (par && !opt)
        return ft_errorf(a->err, a->errlen,
                         "offload_param_device without offload_optimizer_device is not modelled");
    if (!given->zero) {
        run->zero_stage = (int)stage;
        if (present(d, "zero_stage")) note(a->used, a->usedlen, "deepspeed_config.zero_stage");
    }
    if (!given->offload) {
        run->offload = par ? EST_OFFLOAD_OPTIMIZER_PARAMS : opt ? EST_OFFLOAD_OPTIMIZER : EST_OFFLOAD_NONE;
        if (present(d, "offload_optimizer_device"))
            note(a->used, a->usedlen, "deepspeed_config.offload_optimizer_device");
        if (present(d, "offload_param_device")) note(a->used, a->usedlen, "deepspeed_config.offload_param_device");
    }
    if (accum > 0 && !given->grad_accum) {
        run->grad_accum = accum;
        note(a->used, a->usedlen, "deepspeed_config.gradient_accumulation_steps");
    }
    return 0;
}

/* The DeepSpeed plugin: a config file (as given, or beside the YAML; --deepspeed-config
 * wins) or its settings inline. */
static int apply_deepspeed_plugin(accel_apply *a, const char *yaml_path) {
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(a->root, "deepspeed_config");
    if (d && !cJSON_IsObject(d)) return ft_errorf(a->err, a->errlen, "deepspeed_config must be a mapping");
    a->run->framework = EST_FW_DEEPSPEED;
    char file[1024] = "";
    if (d && ft_json_string(d, "deepspeed_config_file", file, sizeof file, a->err, a->errlen) < 0)
        return -1;
    if (!file[0]) return d ? apply_deepspeed_inline(a, d) : 0;
    note(a->used, a->usedlen, "deepspeed_config_file");
    if (!a->given->ds_config) {
        char path[1100], keys[400];
        const char *slash = strrchr(yaml_path, '/');
        if (access(file, R_OK) == 0 || file[0] == '/' || !slash)
            snprintf(path, sizeof path, "%s", file);
        else
            snprintf(path, sizeof path, "%.*s/%s", (int)(slash - yaml_path), yaml_path, file);
        if (est_ds_config_load_noted(path, a->run, keys, sizeof keys, a->err, a->errlen) < 0) return -1;
        if (keys[0]) { /* what the file set, by name */
            char list[480];
            snprintf(list, sizeof list, "(%s)", keys);
            size_t len = strlen(a->used);
            if (len + 2 < a->usedlen) snprintf(a->used + len, a->usedlen - len, " %s", list);
        }
    }
    return 0;
}

int est_accelerate_apply(const cJSON *root, const char *yaml_path, const est_given *given, est_run *run,
                         char *used, size_t usedlen, char *err, size_t errlen) {
    used[0] = '\0';
    accel_apply a = {.root = root, .given = given, .run = run, .used = used, .usedlen = usedlen,
                     .err = err, .errlen = errlen};
    if (apply_processes(&a) < 0 || apply_mixed_precision(&a) < 0) return -1;
    char type[32] = "";
    if (ft_json_string(root, "distributed_type", type, sizeof type, err, errlen) < 0) return -1;
    if (given->framework || !type[0]) return 0;
    if (!strcmp(type, "NO") || !strcmp(type, "MULTI_GPU")) {
        run->framework = EST_FW_HF; /* plain DDP */
    } else if (!strcmp(type, "FSDP")) {
        if (apply_fsdp_plugin(&a) < 0) return -1;
    } else if (!strcmp(type, "DEEPSPEED")) {
        if (apply_deepspeed_plugin(&a, yaml_path) < 0) return -1;
    } else {
        return ft_errorf(err, errlen, "distributed_type \"%.30s\" is not modelled (NO, MULTI_GPU, FSDP, "
                                      "DEEPSPEED)", type);
    }
    note(used, usedlen, "distributed_type");
    return 0;
}
