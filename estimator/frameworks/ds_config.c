#include "ds_config.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ds_keys.h"
#include "json_util.h"
#include "params.h"

static bool is_auto(const cJSON *o, const char *key) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(it) && it->valuestring && !strcmp(it->valuestring, "auto");
}

/* The name `key` goes by in a zero_optimization object: itself, or the
 * other name DeepSpeed accepts for it (ds_keys.c: pydantic's alias and field
 * name, zero/config.py populate_by_name), whichever the file uses. */
static const char *zero_name(const cJSON *zero, const char *key) {
    size_t n = 0;
    const est_ds_key *t = est_ds_keys(&n);
    if (cJSON_GetObjectItemCaseSensitive(zero, key)) return key;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(t[i].section, "zero_optimization") && !strcmp(t[i].key, key) && t[i].alias &&
            cJSON_GetObjectItemCaseSensitive(zero, t[i].alias))
            return t[i].alias;
    return key;
}

/* A size of at least `min` that may be "auto" (then `auto_value`); absent keeps *out.
 * "auto" is filled by the HF Trainer under the name it knows (transformers
 * integrations/deepspeed.py fill_match "zero_optimization.stage3_..."); under
 * the other name DeepSpeed receives the string and refuses it. */
static int size_field(const cJSON *o, const char *key, int64_t min, int64_t auto_value,
                      int64_t *out, char *err, size_t errlen) {
    if (!o) return 0;
    const char *name = zero_name(o, key);
    if (is_auto(o, name)) {
        if (name != key || auto_value == EST_DS_UNSET)
            return ft_errorf(err, errlen, "zero_optimization.%s: \"auto\" is filled only under %s", name,
                             auto_value == EST_DS_UNSET ? "reduce_bucket_size and the stage3_ thresholds" : key);
        *out = auto_value;
        return 0;
    }
    return ft_json_int64(o, name, min, INT64_C(1) << 40, out, err, errlen) < 0 ? -1 : 0;
}

/* An offload section's device; `deprecated` is its old boolean
 * (zero/config.py 0.14.2-0.19.8: cpu_offload -> offload_optimizer,
 * cpu_offload_param -> offload_param, each true meaning {"device": "cpu"};
 * config_utils.py _process_deprecated_field asserts the two are not given
 * together). */
static int device_of(const cJSON *zero, const char *key, const char *deprecated, bool *offloaded, char *err,
                     size_t errlen) {
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(zero, key);
    const cJSON *old = cJSON_GetObjectItemCaseSensitive(zero, deprecated);
    *offloaded = false;
    if (old && !cJSON_IsNull(old)) {
        if (!cJSON_IsBool(old)) return ft_errorf(err, errlen, "zero_optimization.%s must be true or false", deprecated);
        if (o && !cJSON_IsNull(o))
            return ft_errorf(err, errlen, "zero_optimization.%s and its replacement %s are both given (DeepSpeed "
                                          "refuses it): keep %s", deprecated, key, key);
        *offloaded = cJSON_IsTrue(old);
        return 0;
    }
    if (!o || cJSON_IsNull(o)) return 0;
    if (!cJSON_IsObject(o)) return ft_errorf(err, errlen, "zero_optimization.%s must be an object", key);
    char dev[16] = "none";
    if (ft_json_string(o, "device", dev, sizeof dev, err, errlen) < 0) return -1;
    if (!strcmp(dev, "cpu")) *offloaded = true;
    else if (!strcmp(dev, "nvme"))
        return ft_errorf(err, errlen, "zero_optimization.%s: NVMe offload is not modelled", key);
    else if (strcmp(dev, "none")) {
        char shown[24];
        return ft_errorf(err, errlen, "zero_optimization.%s.device \"%s\" is not cpu or none", key,
                         est_ds_printable(dev, shown, sizeof shown));
    }
    return 0;
}

static int enabled(const cJSON *root, const char *key, bool *out, char *err, size_t errlen) {
    const cJSON *o = est_ds_key_get(root, "", key); /* "bf16" or its old name "bfloat16" */
    *out = false;
    if (!o) return 0;
    if (!cJSON_IsObject(o)) return ft_errorf(err, errlen, "\"%s\" must be an object", key);
    /* "auto": transformers' HfTrainerDeepSpeedConfig.trainer_config_process fills
     * fp16.enabled from TrainingArguments.fp16 and bf16.enabled from .bf16; the
     * run's precision (--precision, default bf16-mixed) stands for them. */
    if (is_auto(o, "enabled")) return 1;
    return ft_json_bool(o, "enabled", out, err, errlen) < 0 ? -1 : 0;
}

/* The engine's own sections. "compile": DeepSpeed compiles only when
 * engine.compile() is called (the Transformers integration does not), except
 * DeepCompile (runtime/compiler.py CompileConfig, DeepSpeed 0.16-0.18).
 * Without an "optimizer" section DeepSpeed wraps the optimizer the script
 * passes (the HF Trainer creates torch's AdamW and sets
 * zero_allow_untested_optimizer: transformers integrations/deepspeed.py
 * deepspeed_optim_sched); with one it builds its own (FusedAdam). */
static int engine_sections(const cJSON *root, est_run *run, char *err, size_t errlen) {
    const cJSON *compile = cJSON_GetObjectItemCaseSensitive(root, "compile");
    if (cJSON_IsObject(compile) && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(compile, "deepcompile")))
        return ft_errorf(err, errlen, "not modelled: DeepCompile (compile.deepcompile: true)");
    const cJSON *optim = cJSON_GetObjectItemCaseSensitive(root, "optimizer");
    run->ds.client_optimizer = !optim;
    /* engine.py _configure_basic_optimizer: "adam"/"adamw" (lowercased,
     * config.py DEEPSPEED_OPTIMIZERS) build FusedAdam, or DeepSpeedCPUAdam
     * under offload, which ftest models; any other type is another
     * optimizer's state and kernels. */
    const cJSON *type = cJSON_IsObject(optim) ? cJSON_GetObjectItemCaseSensitive(optim, "type") : NULL;
    char name[48];
    if (type && (!cJSON_IsString(type) || !type->valuestring ||
                 (strcasecmp(type->valuestring, "adam") && strcasecmp(type->valuestring, "adamw"))))
        return ft_errorf(err, errlen, "not modelled: optimizer.type %s (ftest models DeepSpeed's Adam/AdamW)",
                         cJSON_IsString(type) && type->valuestring
                             ? est_ds_printable(type->valuestring, name, sizeof name) : "(not a string)");
    bool force = true; /* runtime/constants.py ZERO_FORCE_DS_CPU_OPTIMIZER_DEFAULT */
    if (ft_json_bool(root, "zero_force_ds_cpu_optimizer", &force, err, errlen) < 0) return -1;
    run->ds.keep_client_optimizer = !force;
    return 0;
}

/* communication_data_type (config.py get_communication_data_type, 0.14.2-0.19.8:
 * null, or "fp32" / "fp16" / "bf16" in any case, else ValueError): the bytes
 * per element ZeRO reduces gradients in; 0 when null (the gradient dtype). */
static int comm_dtype(const cJSON *root, est_run *run, char *err, size_t errlen) {
    const cJSON *o = est_ds_key_get(root, "", "communication_data_type");
    run->ds.comm_bytes = 0;
    if (!o) return 0;
    char shown[24];
    if (!cJSON_IsString(o) || !o->valuestring)
        return ft_errorf(err, errlen, "communication_data_type must be \"fp32\", \"fp16\", \"bf16\" or null");
    if (!strcasecmp(o->valuestring, "fp32")) run->ds.comm_bytes = 4;
    else if (!strcasecmp(o->valuestring, "fp16") || !strcasecmp(o->valuestring, "bf16")) run->ds.comm_bytes = 2;
    else
        return ft_errorf(err, errlen, "communication_data_type \"%s\" is not fp32, fp16 or bf16 (DeepSpeed refuses it)",
                         est_ds_printable(o->valuestring, shown, sizeof shown));
    return 0;
}

/* data_types.grad_accum_dtype: a DtypeEnum name (runtime/config.py,
 * 0.14.2-0.19.8: "fp32"/"float32"/"float"/"torch.float32", "fp16"/
 * "float16"/"half"/"torch.float16", "bf16"/"bfloat16"/"torch.bfloat16";
 * int8 and any other name fail), kept as its EST_PREC_* + 1 until the stage
 * and precision are known (est_ds_config_resolve). */
static int grad_accum_dtype(const cJSON *root, est_run *run, char *err, size_t errlen) {
    static const char *const names[3][4] = {{"fp32", "float32", "float", "torch.float32"},
                                            {"bf16", "bfloat16", "torch.bfloat16", NULL},
                                            {"fp16", "float16", "half", "torch.float16"}};
    static const int prec[3] = {EST_PREC_FP32, EST_PREC_BF16_MIXED, EST_PREC_FP16_MIXED};
    const cJSON *types = cJSON_GetObjectItemCaseSensitive(root, "data_types");
    const cJSON *o = cJSON_IsObject(types) ? est_ds_key_get(types, "data_types", "grad_accum_dtype") : NULL;
    run->ds.grad_accum_dtype = 0;
    if (!o) return 0;
    for (int i = 0; i < 3 && cJSON_IsString(o) && o->valuestring; i++)
        for (int j = 0; j < 4; j++)
            if (names[i][j] && !strcmp(o->valuestring, names[i][j])) {
                run->ds.grad_accum_dtype = prec[i] + 1;
                return 0;
            }
    return ft_errorf(err, errlen, "data_types.grad_accum_dtype must be fp32, fp16 or bf16 (or their torch names)");
}

static int apply(const cJSON *root, est_run *run, char *err, size_t errlen) {
    if (!cJSON_IsObject(root)) return ft_errorf(err, errlen, "the config is not a JSON object");
    const int64_t h = run->model.hidden_size;

    bool fp16 = false, bf16 = false;
    int fp16_rc = enabled(root, "fp16", &fp16, err, errlen);
    int bf16_rc = enabled(root, "bf16", &bf16, err, errlen);
    if (fp16_rc < 0 || bf16_rc < 0) return -1;
    if (fp16 && bf16) return ft_errorf(err, errlen, "fp16 and bf16 are both enabled");
    if (fp16) run->precision = EST_PREC_FP16_MIXED;
    if (bf16) run->precision = EST_PREC_BF16_MIXED;

    if (!is_auto(root, "train_micro_batch_size_per_gpu") &&
        ft_json_int64(root, "train_micro_batch_size_per_gpu", 1, EST_MAX_BATCH, &run->micro_batch, err, errlen) < 0)
        return -1;
    if (!is_auto(root, "gradient_accumulation_steps")) {
        int rc = ft_json_int64(root, "gradient_accumulation_steps", 1, EST_MAX_ACCUM, &run->grad_accum,
                               err, errlen);
        if (rc < 0) return -1;
        run->ds.accum_given = rc > 0;
    }
    /* train_batch_size: "auto" is filled as micro x accumulation x world size
     * (consistent by construction); a number is checked, or completes the
     * accumulation, by est_ds_config_resolve once the flags are applied. */
    run->ds.train_batch = EST_DS_UNSET;
    if (!is_auto(root, "train_batch_size") &&
        ft_json_int64(root, "train_batch_size", 1, (int64_t)EST_MAX_BATCH * EST_MAX_ACCUM,
                      &run->ds.train_batch, err, errlen) < 0)
        return -1;

    if (engine_sections(root, run, err, errlen) || comm_dtype(root, run, err, errlen) ||
        grad_accum_dtype(root, run, err, errlen))
        return -1;
    const cJSON *zero = cJSON_GetObjectItemCaseSensitive(root, "zero_optimization");
    if (zero && !cJSON_IsObject(zero))
        return ft_errorf(err, errlen, "zero_optimization must be an object");
    run->framework = EST_FW_DEEPSPEED;
    if (!zero) return 0;
    int64_t stage = run->zero_stage;
    if (ft_json_int64(zero, "stage", 0, 3, &stage, err, errlen) < 0) return -1;
    run->zero_stage = (int)stage;
    bool opt = false, par = false;
    if (device_of(zero, "offload_optimizer", "cpu_offload", &opt, err, errlen) ||
        device_of(zero, "offload_param", "cpu_offload_param", &par, err, errlen))
        return -1;
    /* Parameters on the host, optimizer state on the GPU: a stage-3 placement
     * (stage3.py, 0.16.5: offload_param flattens the partitions into pinned
     * CPU memory, the fp32 master is made on the device), kept as a DeepSpeed
     * setting beside est_offload. */
    if (par && !opt && stage != 3)
        return ft_errorf(err, errlen, "not modelled: offload_param without offload_optimizer below stage 3");
    run->ds.offload_param_only = par && !opt;
    run->offload = par && opt ? EST_OFFLOAD_OPTIMIZER_PARAMS : opt ? EST_OFFLOAD_OPTIMIZER : EST_OFFLOAD_NONE;
    /* "auto" as the HF Trainer fills it: reduce_bucket_size = h^2,
     * stage3_prefetch_bucket_size = 0.9 h^2, stage3_param_persistence_threshold = 10 h. */
    est_ds_settings *ds = &run->ds;
    if (size_field(zero, "reduce_bucket_size", 1, h * h, &ds->reduce_bucket_elems, err, errlen) ||
        size_field(zero, "stage3_prefetch_bucket_size", 0, h * h * 9 / 10, &ds->prefetch_bucket_elems,
                   err, errlen) ||
        size_field(zero, "stage3_param_persistence_threshold", 0, 10 * h, &ds->persistence_elems,
                   err, errlen) ||
        /* sub_group_size >= 0 (zero/config.py, DeepSpeed 0.14-0.18: Field(ge=0));
         * 0 is resolved once the world size is known (est_ds_config_resolve). */
        size_field(zero, "sub_group_size", 0, EST_DS_UNSET, &ds->sub_group_elems, err, errlen) ||
        size_field(zero, "allgather_bucket_size", 0, EST_DS_UNSET, &ds->allgather_bucket_elems, err,
                   errlen) ||
        size_field(zero, "stage3_max_live_parameters", 0, EST_DS_UNSET, &ds->max_live_elems, err,
                   errlen) ||
        size_field(zero, "stage3_max_reuse_distance", 0, EST_DS_UNSET, &ds->max_reuse_distance_elems,
                   err, errlen))
        return -1;
    if (ft_json_bool(zero, "overlap_comm", &run->ds.overlap_comm, err, errlen) < 0) return -1;
    bool contiguous = true; /* zero/config.py contiguous_gradients, 0.14.2-0.19.8 */
    if (ft_json_bool(zero, "contiguous_gradients", &contiguous, err, errlen) < 0) return -1;
    run->ds.loose_grads = !contiguous;
    return 0;
}

/* Parses, checks every key against ds_keys.c's table for the run's DeepSpeed
 * version, applies the modelled ones; `used` (may be NULL) gets the modelled
 * keys the file sets and those DeepSpeed does not read. */
static int apply_text(const char *text, size_t len, est_run *run, char *used, size_t usedlen, char *err,
                      size_t errlen) {
    char inner[300], unread[300] = "";
    /* A key given twice is refused: DeepSpeed's own loader refuses it
     * (deepspeed/runtime/config.py reads a config file with
     * object_pairs_hook=dict_raise_error_on_duplicate_keys, config_utils.py),
     * while the HF Trainer hands DeepSpeed the dict that json.load made, where
     * the last value won (accelerate/utils/deepspeed.py HfDeepSpeedConfig).
     * The two ways of running one file disagree, so ftest names the key. */
    cJSON *root = ft_json_parse_opts(text, len, "DeepSpeed config", FT_JSON_REFUSE_DUPLICATES, inner,
                                     sizeof inner);
    if (!root) {
        /* the parser's message quotes a key as written, control bytes too */
        for (char *p = inner; *p; p++)
            if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
        return ft_errorf(err, errlen, "%s%s", inner,
                         strstr(inner, "twice") ? " (DeepSpeed refuses such a file, the HF Trainer takes the "
                                                  "last value: keep one)" : "");
    }
    const char *version = run->stack ? run->stack->deepspeed : NULL;
    int rc = est_ds_keys_check(root, version, unread, sizeof unread, inner, sizeof inner);
    if (rc == 0) rc = apply(root, run, inner, sizeof inner);
    if (rc == 0 && used && usedlen) {
        est_ds_keys_modelled(root, used, usedlen);
        size_t l = strlen(used);
        if (unread[0])
            snprintf(used + l, usedlen - l, "%snot read by DeepSpeed%s%s: %s", l ? "; " : "",
                     version && version[0] != '-' ? " " : "", version && version[0] != '-' ? version : "", unread);
    }
    cJSON_Delete(root);
    if (rc < 0) return ft_errorf(err, errlen, "DeepSpeed config: %s", inner);
    return 0;
}

int est_ds_config_apply(const char *text, size_t len, est_run *run, char *err, size_t errlen) {
    return apply_text(text, len, run, NULL, 0, err, errlen);
}

int est_ds_config_load_noted(const char *path, est_run *run, char *used, size_t usedlen, char *err,
                             size_t errlen) {
    size_t len = 0;
    if (used && usedlen) used[0] = '\0';
    char *text = ft_read_file(path, (size_t)1 << 20, &len, err, errlen);
    if (!text) return -1;
    int rc = apply_text(text, len, run, used, usedlen, err, errlen);
    free(text);
    return rc;
}

/* sub_group_size 0: stage3.py _create_fp16_sub_groups closes a sub-group
 * as soon as it holds >= sub_group_size elements, so with 0 every parameter's
 * partition is a sub-group of its own and the largest sub-group is the
 * largest parameter's partition, ceil(numel / world) (partition_parameters.py
 * pads each parameter to a multiple of the world size). */
static void resolve_sub_group(est_run *run) {
    if (run->ds.sub_group_elems != 0) return;
    est_params p;
    est_count_params(&run->model, run->layers_used, &p);
    const int64_t world = est_run_world(run);
    run->ds.sub_group_elems = world > 0 ? (p.largest_tensor + world - 1) / world : p.largest_tensor;
    if (run->ds.sub_group_elems < 1) run->ds.sub_group_elems = 1;
}

int est_ds_config_load(const char *path, est_run *run, char *err, size_t errlen) {
    return est_ds_config_load_noted(path, run, NULL, 0, err, errlen);
}

/* accelerate's _prepare_deepspeed (0.29-1.15): under ZeRO-Offload (an
 * offload_optimizer device) the script's own optimizer, which the HF Trainer
 * passes when the config names none, is replaced by
 * DeepSpeedCPUAdam(optimizer.param_groups, lr, weight_decay) unless the config
 * says "zero_force_ds_cpu_optimizer": false (DeepSpeed's engine.py
 * _configure_optimizer then refuses any other on the host). So an 8-bit or
 * paged AdamW asked for there trains as DeepSpeedCPUAdam. */
static void offload_replaces_optimizer(est_run *run) {
    run->ds.replaced_optimizer = -1;
    if (run->framework != EST_FW_DEEPSPEED || run->offload == EST_OFFLOAD_NONE || !run->ds.client_optimizer ||
        run->ds.keep_client_optimizer || run->optimizer == EST_OPT_ADAMW)
        return;
    run->ds.replaced_optimizer = (int)run->optimizer;
    run->optimizer = EST_OPT_ADAMW;
}

/* grad_accum_dtype once the stage and precision are known. Under ZeRO,
 * engine.py get_data_types (0.14.2 line 898, 0.16.4 line 1017, 0.19.8 line
 * 1806) makes the unset value the model dtype, so naming the model dtype is
 * the default. Any other is refused: bf16 with fp32 at stage 1 without
 * offload swaps the ZeRO optimizer for BF16_Optimizer
 * (_do_optimizer_sanity_check, 0.16.4 line 1316, 0.19.8 line 2305); at stages
 * 2-3 the optimizer keeps a separate accumulation buffer in that dtype
 * (stage_1_and_2.py use_separate_grad_accum, 0.16.4 line 287). At stage 0
 * 0.14.2 and 0.16.4 choose the engine's wrapper from it (BF16_Optimizer, or
 * NotImplementedError for bf16 with bf16). */
static int resolve_grad_accum(const est_run *run, char *err, size_t errlen) {
    const int g = run->ds.grad_accum_dtype - 1;
    if (g < 0) return 0;
    const int model_prec = run->precision == EST_PREC_BF16 ? EST_PREC_BF16_MIXED : (int)run->precision;
    const bool model = g == model_prec;
    if (run->zero_stage > 0 && model) return 0;
    const char *name = g == EST_PREC_FP32 ? "fp32" : g == EST_PREC_BF16_MIXED ? "bf16" : "fp16";
    if (run->zero_stage == 0)
        return ft_errorf(err, errlen, "DeepSpeed config: not modelled: data_types.grad_accum_dtype at ZeRO stage 0 "
                                      "(it picks the engine's optimizer wrapper)");
    if (run->zero_stage == 1 && model_prec == EST_PREC_BF16_MIXED && g == EST_PREC_FP32 &&
        run->offload == EST_OFFLOAD_NONE)
        return ft_errorf(err, errlen, "DeepSpeed config: not modelled: data_types.grad_accum_dtype fp32 with bf16 at "
                                      "ZeRO stage 1 (DeepSpeed runs BF16_Optimizer instead of the ZeRO optimizer)");
    return ft_errorf(err, errlen, "DeepSpeed config: not modelled: data_types.grad_accum_dtype %s, not the model's "
                                  "dtype (a separate gradient accumulation buffer)", name);
}

int est_ds_config_resolve(est_run *run, bool accum_flag, char *err, size_t errlen) {
    if (resolve_grad_accum(run, err, errlen)) return -1;
    /* contiguous_gradients: false is modelled at stage 3 (stage3.py
     * __add_grad_to_ipg_bucket); stages 1-2 then all-reduce each bucket's own
     * tensors instead (stage_1_and_2.py reduce_ipg_grads ->
     * buffered_reduce_fallback), which ftest does not follow, unless
     * optimizer offload forces it back on (__init__: contiguous_gradients or
     * cpu_offload, 0.14.2-0.19.8). */
    if (run->ds.loose_grads && (run->zero_stage == 1 || run->zero_stage == 2) && run->offload == EST_OFFLOAD_NONE)
        return ft_errorf(err, errlen, "DeepSpeed config: not modelled: zero_optimization.contiguous_gradients false "
                                      "at ZeRO stage %d (gradients all-reduced from their own tensors)",
                         run->zero_stage);
    if (run->zero_stage != 3) run->ds.loose_grads = false;
    /* Stage 0 reduces in engine.py allreduce_gradients (or BF16_Optimizer's
     * path), which ftest does not follow in another dtype. */
    if (run->ds.comm_bytes && run->zero_stage == 0 && run->ds.comm_bytes != est_compute_dtype_bytes(run->precision))
        return ft_errorf(err, errlen, "DeepSpeed config: not modelled: communication_data_type other than the "
                                      "gradient dtype at ZeRO stage 0");
    resolve_sub_group(run);
    offload_replaces_optimizer(run);
    const int64_t tb = run->ds.train_batch;
    if (tb == EST_DS_UNSET) return 0;
    const int64_t world = est_run_world(run), per_step = run->micro_batch * world;
    /* deepspeed/runtime/config.py _set_batch_related_parameters: with
     * train_batch_size and the micro-batch known, the accumulation is derived. */
    if (!run->ds.accum_given && !accum_flag) {
        if (tb % per_step != 0)
            return ft_errorf(err, errlen,
                             "DeepSpeed config: train_batch_size %lld is not divisible by micro-batch "
                             "%lld x world size %lld",
                             (long long)tb, (long long)run->micro_batch, (long long)world);
        run->grad_accum = tb / per_step;
    }
    /* _batch_assertion: train_batch == micro_batch * grad_acc * world_size. */
    if (tb != per_step * run->grad_accum)
        return ft_errorf(err, errlen,
                         "DeepSpeed config: train_batch_size %lld != micro-batch %lld x "
                         "gradient accumulation %lld x world size %lld (DeepSpeed refuses it)",
                         (long long)tb, (long long)run->micro_batch, (long long)run->grad_accum,
                         (long long)world);
    return 0;
}
