#include "axolotl_fsdp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "axolotl_keys.h"
#include "fsdp_policy.h"
#include "json_util.h"

/* An fsdp_config setting under its name in axolotl 0.18.0's FSDPConfig or
 * the older "fsdp_"-prefixed one (validation.py check_fsdp_config_kwargs_prefix
 * strips the prefix). */
static const cJSON *fsdp_setting(const cJSON *cfg, const char *name) {
    if (!cJSON_IsObject(cfg)) return NULL;
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(cfg, name);
    if (it && !cJSON_IsNull(it)) return it;
    char prefixed[64];
    snprintf(prefixed, sizeof prefixed, "fsdp_%s", name);
    it = cJSON_GetObjectItemCaseSensitive(cfg, prefixed);
    return it && !cJSON_IsNull(it) ? it : NULL;
}

static int fsdp_bool(const cJSON *cfg, const char *name, bool *out, char *err, size_t errlen) {
    const cJSON *it = fsdp_setting(cfg, name);
    if (!it) return 0;
    if (!cJSON_IsBool(it)) return ft_errorf(err, errlen, "fsdp_config.%s must be true or false", name);
    *out = cJSON_IsTrue(it);
    return 1;
}

/* fsdp_version: top level, else fsdp_config's fsdp_version or version; 1
 * when absent (validation.py check_fsdp_version_in_fsdp_config pins
 * axolotl's FSDP1 default). */
static int fsdp_version_of(const cJSON *root, const cJSON *cfg, est_fsdp_version *out, char *err,
                           size_t errlen) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "fsdp_version");
    if (!v || cJSON_IsNull(v)) v = fsdp_setting(cfg, "version");
    if (!v) v = cJSON_IsObject(cfg) ? cJSON_GetObjectItemCaseSensitive(cfg, "fsdp_version") : NULL;
    double n = 1;
    if (v && cJSON_IsNumber(v)) n = v->valuedouble;
    else if (v && cJSON_IsString(v) && v->valuestring) n = atof(v->valuestring);
    else if (v && !cJSON_IsNull(v)) return ft_errorf(err, errlen, "fsdp_version must be 1 or 2");
    if (n != 1 && n != 2) return ft_errorf(err, errlen, "fsdp_version must be 1 or 2");
    *out = n == 2 ? EST_FSDP2 : EST_FSDP1;
    return 0;
}

/* fsdp (deprecated in 0.18.0, still passed to TrainingArguments.fsdp): a
 * list or a space-separated string of options; true when only fsdp_config
 * is given (core/builders/base.py). */
static int fsdp_options(const cJSON *root, char *opts, size_t n, char *err, size_t errlen) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, "fsdp");
    opts[0] = '\0';
    if (!it || cJSON_IsNull(it) || cJSON_IsTrue(it)) return 0;
    if (cJSON_IsString(it) && it->valuestring) {
        ft_strlcpy(opts, it->valuestring, n);
        return 0;
    }
    if (!cJSON_IsArray(it)) return ft_errorf(err, errlen, "fsdp must list options such as full_shard");
    const cJSON *e;
    cJSON_ArrayForEach(e, it) {
        if (!cJSON_IsString(e) || !e->valuestring)
            return ft_errorf(err, errlen, "fsdp must list options such as full_shard");
        size_t len = strlen(opts);
        snprintf(opts + len, n - len, " %s", e->valuestring);
    }
    return 0;
}

/* FSDP from fsdp and fsdp_config, as axolotl 0.18.0 passes them on
 * (utils/trainer.py setup_fsdp_envs; transformers' TrainingArguments maps
 * the fsdp options to the sharding strategy, FULL_SHARD by default).
 * fsdp_config's sharding_strategy, backward_prefetch, forward_prefetch and
 * limit_all_gathers are not fields of axolotl's FSDPConfig (schemas/fsdp.py)
 * and never reach FSDP: Transformers' defaults (NO_PREFETCH, no forward
 * prefetch) hold, which is what ftest models; est_axolotl_unused lists them. */
int est_axolotl_fsdp(const cJSON *root, const est_given *given, est_run *run, char *err, size_t errlen) {
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(root, "fsdp_config");
    if (cfg && !cJSON_IsNull(cfg) && !cJSON_IsObject(cfg))
        return ft_errorf(err, errlen, "fsdp_config must be a mapping");
    char opts[256];
    if (fsdp_options(root, opts, sizeof opts, err, errlen) < 0) return -1;
    est_fsdp_version version = EST_FSDP1;
    if (fsdp_version_of(root, cfg, &version, err, errlen) < 0) return -1;
    int stage = 3;
    if (strstr(opts, "hybrid_shard"))
        return ft_errorf(err, errlen, "not modelled (axolotl %s): HSDP (fsdp: hybrid_shard)",
                         EST_AXOLOTL_VERSION);
    if (strstr(opts, "shard_grad_op")) stage = 2;
    else if (strstr(opts, "no_shard")) stage = 0;
    bool offload = strstr(opts, "offload") != NULL, ckpt = false, reshard = true, rank0 = false;
    const int rank0_said = fsdp_bool(cfg, "cpu_ram_efficient_loading", &rank0, err, errlen);
    const int reshard_said = fsdp_bool(cfg, "reshard_after_forward", &reshard, err, errlen);
    if (rank0_said < 0 || reshard_said < 0 || fsdp_bool(cfg, "offload_params", &offload, err, errlen) < 0 ||
        fsdp_bool(cfg, "activation_checkpointing", &ckpt, err, errlen) < 0)
        return -1;
    /* FSDP1 takes its strategy from the fsdp options (Transformers'
     * TrainingArguments exports FSDP_SHARDING_STRATEGY, which accelerate's
     * plugin reads before reshard_after_forward: utils/dataclasses.py
     * FullyShardedDataParallelPlugin.__post_init__); a false there asks for
     * what the run would not do. */
    if (version == EST_FSDP1 && reshard_said > 0 && !reshard && stage == 3)
        return ft_errorf(err, errlen, "fsdp_config.reshard_after_forward: false is FSDP2's setting; under FSDP1 "
                                      "the sharding comes from fsdp (FULL_SHARD here): say shard_grad_op, or "
                                      "fsdp_version: 2");
    /* transformer_layer_cls_to_wrap (utils/trainer.py setup_fsdp_envs:
     * FSDP_TRANSFORMER_CLS_TO_WRAP, which PEFT's policy reads under LoRA);
     * unsaid, the model's _no_split_modules: its decoder layer. */
    const cJSON *cls = fsdp_setting(cfg, "transformer_layer_cls_to_wrap");
    run->fsdp_wrap = EST_FSDP_WRAP_DECODER_LAYER;
    if (cJSON_IsString(cls) && cls->valuestring &&
        est_fsdp_wrap_parse(&run->model, cls->valuestring, &run->fsdp_wrap, err, errlen) < 0)
        return -1;
    if (ckpt && run->fsdp_wrap == EST_FSDP_WRAP_MOE_BLOCK)
        return ft_errorf(err, errlen, "not modelled (axolotl %s): FSDP activation checkpointing of the MoE "
                                      "blocks alone (fsdp_config.activation_checkpointing with %s)",
                         EST_AXOLOTL_VERSION, cls->valuestring);
    /* FSDP2 has no NO_SHARD: reshard_after_forward decides FULL_SHARD or SHARD_GRAD_OP. */
    if (version == EST_FSDP2) stage = reshard ? 3 : 2;
    run->framework = EST_FW_FSDP;
    if (!given->fsdp_version) run->fsdp_version = version;
    if (!given->zero) run->zero_stage = stage;
    if (!given->offload) run->offload = offload ? EST_OFFLOAD_OPTIMIZER_PARAMS : EST_OFFLOAD_NONE;
    if (rank0_said > 0) run->fsdp_loading = rank0 ? EST_FSDP_LOAD_RANK0 : EST_FSDP_LOAD_EVERY_RANK;
    /* accelerate's FSDP activation checkpointing wraps each decoder layer whole. */
    if (ckpt && !given->checkpointing) run->checkpointing = EST_CKPT_FULL;
    return 0;
}

