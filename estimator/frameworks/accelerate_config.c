#include "accelerate_config.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "accelerate_keys.h"
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
    const cJSON *it = est_accelerate_fsdp_item(fsdp, "fsdp_sharding_strategy");
    if (!it) {
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
    bool fp8; /* mixed_precision fp8 through torchao (apply_fp8) */
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

/* fp8_config's `key`, also as fp8_KEY, the spelling launch gives it
 * (commands/launch.py _validate_launch_command). */
static bool accelerate_at_least(const est_run *run, int major, int minor);

static const cJSON *fp8_item(const cJSON *root, const char *key) {
    const cJSON *c = est_accelerate_section(root, "fp8_config");
    if (!c) return NULL;
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(c, key);
    if (!it || cJSON_IsNull(it)) {
        char prefixed[64];
        snprintf(prefixed, sizeof prefixed, "fp8_%s", key);
        it = cJSON_GetObjectItemCaseSensitive(c, prefixed);
    }
    return it && !cJSON_IsNull(it) ? it : NULL;
}

/* mixed_precision fp8: accelerate converts the Linears with the recipe of
 * fp8_config.backend (accelerator.py __init__, lines 478-487 at 1.15.0: AORecipeKwargs for AO,
 * whose convert_model_to_fp8_ao in utils/ao.py line 104 takes every Linear with both dims
 * divisible by 16 but the first and last, Float8LinearConfig() by default:
 * torchao's tensorwise recipe) and runs the rest under bf16 autocast; that
 * is --fp8 tensorwise over bf16-mixed (estimator/model/fp8.h). Transformer
 * Engine and MS-AMP are other mechanisms; without a backend accelerate takes
 * torchao if it is installed, else Transformer Engine, which the file does
 * not say. */
static int fp8_backend(accel_apply *a) {
    const cJSON *b = fp8_item(a->root, "backend");
    if (!cJSON_IsString(b) || !b->valuestring)
        return ft_errorf(a->err, a->errlen, "mixed_precision fp8 without fp8_config.backend: accelerate picks "
                                            "torchao if installed, else Transformer Engine; say backend: AO");
    if (strcasecmp(b->valuestring, "AO"))
        return ft_errorf(a->err, a->errlen, "not modelled (accelerate %s): FP8 through %s (fp8_config.backend: "
                                            "%.20s); torchao's (AO) is", EST_ACCELERATE_VERSION,
                         !strcasecmp(b->valuestring, "TE") ? "Transformer Engine" : "this backend", b->valuestring);
    if (!a->given->precision) a->run->precision = EST_PREC_BF16_MIXED;
    a->fp8 = true;
    note(a->used, a->usedlen, "mixed_precision");
    note(a->used, a->usedlen, "fp8_config.backend");
    return 0;
}

/* The FP8 recipe once the framework is known: --fp8 tensorwise (unless --fp8
 * was given), and under FSDP2 fp8_config.enable_fsdp_float8_all_gather,
 * true by default from accelerate 1.13 (AORecipeKwargs.__post_init__, utils/dataclasses.py line 352 at 1.15.0:
 * ACCELERATE_FP8_ENABLE_FSDP_FLOAT8_ALL_GATHER, default True; before,
 * Float8LinearConfig()'s false), as --fsdp-float8-all-gather. */
static int apply_fp8(accel_apply *a) {
    if (!a->fp8 || a->given->fp8) return 0;
    a->run->fp8 = EST_FP8_TENSORWISE;
    const cJSON *ag = fp8_item(a->root, "enable_fsdp_float8_all_gather");
    if (ag && !cJSON_IsBool(ag))
        return ft_errorf(a->err, a->errlen, "fp8_config.enable_fsdp_float8_all_gather must be true or false");
    const bool gather = ag ? cJSON_IsTrue(ag) : accelerate_at_least(a->run, 1, 13);
    if (gather && a->run->framework == EST_FW_FSDP && a->run->fsdp_version == EST_FSDP2) {
        a->run->fp8_all_gather = true;
        if (ag) note(a->used, a->usedlen, "fp8_config.enable_fsdp_float8_all_gather");
    }
    return 0;
}

/* mixed_precision: no, fp16, bf16, or fp8 through torchao. */
static int apply_mixed_precision(accel_apply *a) {
    char mp[16] = "";
    if (ft_json_string(a->root, "mixed_precision", mp, sizeof mp, a->err, a->errlen) < 0) return -1;
    /* the old fp16: true, as config_args.py process_config converts it */
    bool fp16 = false;
    if (!mp[0] && ft_json_bool(a->root, "fp16", &fp16, a->err, a->errlen) < 0) return -1;
    if (fp16) snprintf(mp, sizeof mp, "fp16");
    if (!mp[0]) return 0;
    if (!strcmp(mp, "fp8")) return fp8_backend(a);
    if (a->given->precision) return 0;
    if (!strcmp(mp, "bf16")) a->run->precision = EST_PREC_BF16_MIXED;
    else if (!strcmp(mp, "fp16")) a->run->precision = EST_PREC_FP16_MIXED;
    else if (!strcmp(mp, "no")) a->run->precision = EST_PREC_FP32;
    else return ft_errorf(a->err, a->errlen, "mixed_precision \"%s\" is not modelled (no, fp16, bf16, fp8)", mp);
    note(a->used, a->usedlen, fp16 ? "fp16" : "mixed_precision");
    return 0;
}

/* An fsdp_config boolean under either spelling: 1 when set, 0 when absent. */
static int fsdp_bool(accel_apply *a, const cJSON *f, const char *name, bool *out) {
    const cJSON *it = est_accelerate_fsdp_item(f, name);
    if (!it) return 0;
    if (!cJSON_IsBool(it)) return ft_errorf(a->err, a->errlen, "fsdp_config.%s must be true or false", name);
    *out = cJSON_IsTrue(it);
    return 1;
}

/* The stack's accelerate is at least major.minor ("-": none). */
static bool accelerate_at_least(const est_run *run, int major, int minor) {
    int ma = 0, mi = 0;
    const char *v = run->stack && run->stack->accelerate ? run->stack->accelerate : "";
    if (sscanf(v, "%d.%d", &ma, &mi) != 2) return false;
    return ma > major || (ma == major && mi >= minor);
}

/* fsdp_backward_prefetch (fsdp_backward_prefetch_policy before accelerate
 * 0.27) and fsdp_forward_prefetch: accelerate launch passes them to the plugin
 * (utils/launch.py: FSDP_BACKWARD_PREFETCH, FSDP_FORWARD_PREFETCH). FSDP1's:
 * under FSDP2 the plugin drops both (utils/dataclasses.py
 * FullyShardedDataParallelPlugin.__post_init__, accelerate 1.15.0:
 * backward_prefetch set to None, forward_prefetch read for fsdp_version 1 only). */
static int prefetch(accel_apply *a, const cJSON *f) {
    const char *key = est_accelerate_fsdp_item(f, "fsdp_backward_prefetch") ? "fsdp_backward_prefetch"
                                                                             : "fsdp_backward_prefetch_policy";
    const cJSON *it = est_accelerate_fsdp_item(f, key);
    bool fwd = false;
    const int rf = fsdp_bool(a, f, "fsdp_forward_prefetch", &fwd);
    if (rf < 0) return -1;
    if (it && (!cJSON_IsString(it) || !it->valuestring))
        return ft_errorf(a->err, a->errlen, "fsdp_config.%s must be a name such as BACKWARD_PRE", key);
    if (a->run->fsdp_version == EST_FSDP2) return 0;
    if (it && !a->given->fsdp_prefetch) {
        if (est_fsdp_prefetch_parse(it->valuestring, &a->run->fsdp_backward_prefetch, a->err, a->errlen) < 0)
            return -1;
        note(a->used, a->usedlen, key);
    }
    if (rf == 1 && !a->given->fsdp_forward_prefetch) {
        a->run->fsdp_forward_prefetch = fwd;
        note(a->used, a->usedlen, "fsdp_forward_prefetch");
    }
    return 0;
}

/* fsdp_auto_wrap_policy and fsdp_transformer_layer_cls_to_wrap: the FSDP
 * units. TRANSFORMER_BASED_WRAP wraps the class named (accelerate's
 * FullyShardedDataParallelPlugin; the environment variable
 * FSDP_TRANSFORMER_CLS_TO_WRAP, which PEFT's policy reads under LoRA) or,
 * unsaid, the model's _no_split_modules: its decoder layer. Without the
 * policy the plugin takes NO_WRAP (utils/dataclasses.py __post_init__, line
 * 1902 at 1.15.0: os.environ.get("FSDP_AUTO_WRAP_POLICY", "NO_WRAP"), the same
 * in 0.29.3 and 1.4.0;
 * launch sets the variable only when the key is given) and the whole model is
 * one unit, which ftest does not model; SIZE_BASED_WRAP was refused by the
 * table. A class the model does not have stops the run before training
 * (fsdp_policy.h). */
static int wrap_class(accel_apply *a, const cJSON *f, bool ckpt) {
    if (!est_accelerate_fsdp_item(f, "fsdp_auto_wrap_policy"))
        return ft_errorf(a->err, a->errlen, "not modelled (accelerate %s): fsdp_config without "
                                            "fsdp_auto_wrap_policy wraps the whole model as one FSDP unit "
                                            "(NO_WRAP, accelerate's default); say TRANSFORMER_BASED_WRAP",
                         EST_ACCELERATE_VERSION);
    note(a->used, a->usedlen, "fsdp_auto_wrap_policy");
    const cJSON *cls = est_accelerate_fsdp_item(f, "fsdp_transformer_layer_cls_to_wrap");
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

/* fsdp_version: 1 or 2 (a number or its string). accelerate reads it from 1.6
 * on (utils/launch.py FSDP_VERSION, absent from 1.5.0's); an older stack's
 * launch would run FSDP1, so 2 there is refused rather than answered as
 * FSDP1. */
static int fsdp_version_of(accel_apply *a, const cJSON *f, est_fsdp_version *out) {
    const cJSON *v = est_accelerate_fsdp_item(f, "fsdp_version");
    *out = EST_FSDP1;
    if (!v) return 0;
    double n = cJSON_IsNumber(v) ? v->valuedouble : -1;
    if (cJSON_IsString(v) && v->valuestring) n = !strcmp(v->valuestring, "1") ? 1 : !strcmp(v->valuestring, "2") ? 2 : -1;
    if (n != 1 && n != 2) return ft_errorf(a->err, a->errlen, "fsdp_config.fsdp_version must be 1 or 2");
    if (n == 2 && !accelerate_at_least(a->run, 1, 6))
        return ft_errorf(a->err, a->errlen, "fsdp_version 2 needs accelerate >= 1.6, and stack %s has accelerate "
                                            "%s, whose launch runs FSDP1; pass --stack 2025-10 or later",
                         a->run->stack->name, a->run->stack->accelerate);
    *out = n == 2 ? EST_FSDP2 : EST_FSDP1;
    note(a->used, a->usedlen, "fsdp_version");
    return 0;
}

/* The sharding as accelerate 1.15.0 settles it. FSDP1: the launcher always
 * exports FSDP_SHARDING_STRATEGY (commands/launch.py line 534
 * --fsdp_sharding_strategy, default FULL_SHARD; utils/launch.py line 313) and
 * the plugin takes it before fsdp_reshard_after_forward (utils/dataclasses.py
 * lines 1837-1848; accelerator.py line 1940: sharding_strategy or
 * reshard_after_forward), so a reshard_after_forward
 * strategy (what `accelerate config` writes since 1.6) that differs is never
 * used. FSDP2: the boolean fsdp_reshard_after_forward (default true) decides
 * FULL_SHARD or SHARD_GRAD_OP, and fsdp_sharding_strategy is not read. A
 * file whose two keys disagree is refused: ftest would have to pick one. */
static int strategy_of(accel_apply *a, const cJSON *f, est_fsdp_version version, int *stage) {
    if (sharding(f, stage, a->err, a->errlen) < 0) return -1;
    const bool said = est_accelerate_fsdp_item(f, "fsdp_sharding_strategy") != NULL;
    const cJSON *r = est_accelerate_fsdp_item(f, "fsdp_reshard_after_forward");
    if (version == EST_FSDP2) {
        bool reshard = true;
        /* str_to_bool (utils/environment.py): true/yes/1, false/no/0; else accelerate raises */
        if (r && cJSON_IsString(r) && r->valuestring) {
            const char *v = r->valuestring;
            reshard = !strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcmp(v, "1");
            if (!reshard && strcasecmp(v, "false") && strcasecmp(v, "no") && strcmp(v, "0"))
                return ft_errorf(a->err, a->errlen, "fsdp_config.fsdp_reshard_after_forward must be true or false "
                                                    "under fsdp_version 2 (accelerate refuses \"%.20s\")", v);
        } else if (r && !cJSON_IsBool(r))
            return ft_errorf(a->err, a->errlen, "fsdp_config.fsdp_reshard_after_forward must be true or false "
                                                "under fsdp_version 2");
        else if (r)
            reshard = cJSON_IsTrue(r);
        if (said && *stage != (reshard ? 3 : 2))
            return ft_errorf(a->err, a->errlen, "fsdp_sharding_strategy and fsdp_reshard_after_forward disagree: "
                                                "under fsdp_version 2 accelerate reads only fsdp_reshard_after_forward");
        *stage = reshard ? 3 : 2;
        return 0;
    }
    if (!r) return 0;
    int other = 3;
    cJSON *tmp = cJSON_CreateObject();
    if (!tmp) return ft_errorf(a->err, a->errlen, "out of memory");
    cJSON_AddItemToObject(tmp, "fsdp_sharding_strategy", cJSON_Duplicate(r, 1));
    const int rc = sharding(tmp, &other, a->err, a->errlen);
    cJSON_Delete(tmp);
    if (rc < 0) return ft_errorf(a->err, a->errlen, "fsdp_config.fsdp_reshard_after_forward must be a sharding "
                                                    "strategy under fsdp_version 1 (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD)");
    if (other != *stage)
        return ft_errorf(a->err, a->errlen, "fsdp_reshard_after_forward asks for another sharding than %s, which "
                                            "accelerate's launcher passes as fsdp_sharding_strategy and which wins "
                                            "under fsdp_version 1; say fsdp_sharding_strategy",
                         said ? "fsdp_sharding_strategy" : "FULL_SHARD (its default)");
    return 0;
}

/* The FSDP plugin: version, sharding, parameter offload, activation
 * checkpointing, loading, units and prefetch. */
static int apply_fsdp_plugin(accel_apply *a) {
    const est_given *given = a->given;
    est_run *run = a->run;
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(a->root, "fsdp_config");
    if (f && !cJSON_IsObject(f)) return ft_errorf(a->err, a->errlen, "fsdp_config must be a mapping");
    int stage = 3;
    bool offload = false, ckpt = false;
    est_fsdp_version version = EST_FSDP1;
    if (fsdp_version_of(a, f, &version) < 0 || strategy_of(a, f, version, &stage) < 0 ||
        fsdp_bool(a, f, "fsdp_offload_params", &offload) < 0 ||
        fsdp_bool(a, f, "fsdp_activation_checkpointing", &ckpt) < 0)
        return -1;
    run->framework = EST_FW_FSDP;
    if (!given->fsdp_version) run->fsdp_version = version;
    /* Every key taken is listed (issue 20, item 17: three of them were). */
    if (!given->zero) {
        run->zero_stage = stage;
        if (est_accelerate_fsdp_item(f, "fsdp_sharding_strategy")) note(a->used, a->usedlen, "fsdp_sharding_strategy");
        if (est_accelerate_fsdp_item(f, "fsdp_reshard_after_forward"))
            note(a->used, a->usedlen, "fsdp_reshard_after_forward");
    }
    if (!given->offload) {
        run->offload = offload ? EST_OFFLOAD_OPTIMIZER_PARAMS : EST_OFFLOAD_NONE;
        if (est_accelerate_fsdp_item(f, "fsdp_offload_params")) note(a->used, a->usedlen, "fsdp_offload_params");
    }
    if (ckpt && !given->checkpointing) {
        run->checkpointing = EST_CKPT_FULL;
        note(a->used, a->usedlen, "fsdp_activation_checkpointing");
    }
    /* Absent, launch passes its default "true" (commands/launch.py line 585
     * --fsdp_cpu_ram_efficient_loading, 1.15.0): rank 0 alone reads the checkpoint. */
    bool rank0 = true;
    const int said = fsdp_bool(a, f, "fsdp_cpu_ram_efficient_loading", &rank0);
    if (said < 0) return -1;
    run->fsdp_loading = rank0 ? EST_FSDP_LOAD_RANK0 : EST_FSDP_LOAD_EVERY_RANK;
    if (said) note(a->used, a->usedlen, "fsdp_cpu_ram_efficient_loading");
    if (wrap_class(a, f, ckpt) < 0) return -1;
    return prefetch(a, f);
}

/* dynamo_config: DynamoPlugin compiles the model in prepare_model
 * (accelerator.py line 1709 at 1.15.0: torch.compile(model, **dynamo_plugin.to_kwargs()) when the
 * backend is not NO), as --compile models it: inductor, default mode, the
 * whole model. Other backends, modes, dynamic shapes and regional compilation
 * were refused by the table. */
static int apply_dynamo(accel_apply *a) {
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(a->root, "dynamo_config");
    if (d && !cJSON_IsNull(d) && !cJSON_IsObject(d))
        return ft_errorf(a->err, a->errlen, "dynamo_config must be a mapping");
    const cJSON *b = est_accelerate_dynamo_backend(a->root);
    if (!cJSON_IsString(b) || !b->valuestring || strcasecmp(b->valuestring, "INDUCTOR")) return 0;
    a->run->compiled = true;
    note(a->used, a->usedlen, d && cJSON_IsObject(d) ? "dynamo_config.dynamo_backend" : "dynamo_backend");
    return 0;
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

/* zero3_init_flag, inline or beside a config file: absent, the plugin takes
 * is_zero3() (utils/dataclasses.py DeepSpeedPlugin.__post_init__, line 1328
 * at accelerate 1.15.0); false builds the model whole and DeepSpeed partitions it at
 * initialize, as --no-zero-init says. Read once the stage is known. */
static int apply_zero3_init(accel_apply *a, const cJSON *d) {
    bool init = true;
    const int said = d ? ft_json_bool(d, "zero3_init_flag", &init, a->err, a->errlen) : 0;
    if (said < 0) return -1;
    if (said && a->run->zero_stage == 3) {
        if (!init) a->run->zero_init = false;
        note(a->used, a->usedlen, "deepspeed_config.zero3_init_flag");
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
    if (!file[0]) return d && (apply_deepspeed_inline(a, d) < 0 || apply_zero3_init(a, d) < 0) ? -1 : 0;
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
    return apply_zero3_init(a, d);
}

int est_accelerate_apply(const cJSON *root, const char *yaml_path, const est_given *given, est_run *run,
                         char *used, size_t usedlen, char *err, size_t errlen) {
    used[0] = '\0';
    if (!cJSON_IsObject(root)) return ft_errorf(err, errlen, "an accelerate config must be a mapping");
    if (est_accelerate_refused(root, err, errlen) < 0) return -1;
    accel_apply a = {.root = root, .given = given, .run = run, .used = used, .usedlen = usedlen,
                     .err = err, .errlen = errlen};
    if (apply_processes(&a) < 0 || apply_mixed_precision(&a) < 0 || apply_dynamo(&a) < 0) return -1;
    est_accelerate_unused(root, run->settings_ignored, sizeof run->settings_ignored);
    char type[32] = "";
    if (ft_json_string(root, "distributed_type", type, sizeof type, err, errlen) < 0) return -1;
    if (given->framework || !type[0]) return apply_fp8(&a);
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
    return apply_fp8(&a);
}
