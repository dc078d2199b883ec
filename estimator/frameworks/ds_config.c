#include "ds_config.h"

#include <stdlib.h>
#include <string.h>

#include "json_util.h"

static bool is_auto(const cJSON *o, const char *key) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(it) && it->valuestring && !strcmp(it->valuestring, "auto");
}

/* A size that may be "auto" (then `auto_value`) or a number; absent keeps *out. */
/* A size of at least `min` that may be "auto" (then `auto_value`); absent keeps *out. */
static int size_field(const cJSON *o, const char *key, int64_t min, int64_t auto_value,
                      int64_t *out, char *err, size_t errlen) {
    if (!o) return 0;
    if (is_auto(o, key)) {
        *out = auto_value;
        return 0;
    }
    return ft_json_int64(o, key, min, INT64_C(1) << 40, out, err, errlen) < 0 ? -1 : 0;
}

static int device_of(const cJSON *zero, const char *key, bool *offloaded, char *err, size_t errlen) {
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(zero, key);
    *offloaded = false;
    if (!o || cJSON_IsNull(o)) return 0;
    if (!cJSON_IsObject(o)) return ft_errorf(err, errlen, "zero_optimization.%s must be an object", key);
    char dev[16] = "none";
    if (ft_json_string(o, "device", dev, sizeof dev, err, errlen) < 0) return -1;
    if (!strcmp(dev, "cpu")) *offloaded = true;
    else if (!strcmp(dev, "nvme"))
        return ft_errorf(err, errlen, "zero_optimization.%s: NVMe offload is not modelled", key);
    else if (strcmp(dev, "none"))
        return ft_errorf(err, errlen, "zero_optimization.%s.device \"%s\" is not cpu or none", key, dev);
    return 0;
}

static int enabled(const cJSON *root, const char *key, bool *out, char *err, size_t errlen) {
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, key);
    *out = false;
    if (!o) return 0;
    if (!cJSON_IsObject(o)) return ft_errorf(err, errlen, "\"%s\" must be an object", key);
    /* "auto": transformers' HfTrainerDeepSpeedConfig.trainer_config_process fills
     * fp16.enabled from TrainingArguments.fp16 and bf16.enabled from .bf16; the
     * run's precision (--precision, default bf16-mixed) stands for them. */
    if (is_auto(o, "enabled")) return 1;
    return ft_json_bool(o, "enabled", out, err, errlen) < 0 ? -1 : 0;
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

    const cJSON *zero = cJSON_GetObjectItemCaseSensitive(root, "zero_optimization");
    if (zero && !cJSON_IsObject(zero))
        return ft_errorf(err, errlen, "zero_optimization must be an object");
    run->framework = EST_FW_DEEPSPEED;
    if (!zero) return 0;
    int64_t stage = run->zero_stage;
    if (ft_json_int64(zero, "stage", 0, 3, &stage, err, errlen) < 0) return -1;
    run->zero_stage = (int)stage;
    bool opt = false, par = false;
    if (device_of(zero, "offload_optimizer", &opt, err, errlen) ||
        device_of(zero, "offload_param", &par, err, errlen))
        return -1;
    if (par && !opt)
        return ft_errorf(err, errlen, "offload_param without offload_optimizer is not modelled");
    run->offload = par ? EST_OFFLOAD_OPTIMIZER_PARAMS : opt ? EST_OFFLOAD_OPTIMIZER : EST_OFFLOAD_NONE;
    /* "auto" as the HF Trainer fills it: reduce_bucket_size = h^2,
     * stage3_prefetch_bucket_size = 0.9 h^2, stage3_param_persistence_threshold = 10 h. */
    est_ds_settings *ds = &run->ds;
    if (size_field(zero, "reduce_bucket_size", 1, h * h, &ds->reduce_bucket_elems, err, errlen) ||
        size_field(zero, "stage3_prefetch_bucket_size", 0, h * h * 9 / 10, &ds->prefetch_bucket_elems,
                   err, errlen) ||
        size_field(zero, "stage3_param_persistence_threshold", 0, 10 * h, &ds->persistence_elems,
                   err, errlen) ||
        size_field(zero, "sub_group_size", 1, EST_DS_UNSET, &ds->sub_group_elems, err, errlen) ||
        size_field(zero, "allgather_bucket_size", 0, EST_DS_UNSET, &ds->allgather_bucket_elems, err,
                   errlen) ||
        size_field(zero, "stage3_max_live_parameters", 0, EST_DS_UNSET, &ds->max_live_elems, err,
                   errlen) ||
        size_field(zero, "stage3_max_reuse_distance", 0, EST_DS_UNSET, &ds->max_reuse_distance_elems,
                   err, errlen))
        return -1;
    if (ft_json_bool(zero, "overlap_comm", &run->ds.overlap_comm, err, errlen) < 0) return -1;
    return 0;
}

int est_ds_config_apply(const char *text, size_t len, est_run *run, char *err, size_t errlen) {
    char inner[200];
    cJSON *root = ft_json_parse(text, len, "DeepSpeed config", err, errlen);
    if (!root) return -1;
    int rc = apply(root, run, inner, sizeof inner);
    cJSON_Delete(root);
    if (rc < 0) return ft_errorf(err, errlen, "DeepSpeed config: %s", inner);
    return 0;
}

int est_ds_config_load(const char *path, est_run *run, char *err, size_t errlen) {
    size_t len = 0;
    char *text = ft_read_file(path, (size_t)1 << 20, &len, err, errlen);
    if (!text) return -1;
    int rc = est_ds_config_apply(text, len, run, err, errlen);
    free(text);
    return rc;
}

int est_ds_config_resolve(est_run *run, bool accum_flag, char *err, size_t errlen) {
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
