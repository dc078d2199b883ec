#include "axolotl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "ds_config.h"
#include "json_util.h"
#include "lora.h"
#include "model_source.h"
#include "yaml_json.h"

cJSON *est_axolotl_load(const char *path, char *err, size_t errlen) {
    return est_yaml_load(path, err, errlen);
}

/* The folder of `path` joined with `rel` into buf. */
static void beside(const char *path, const char *rel, char *buf, size_t n) {
    const char *slash = strrchr(path, '/');
    if (!slash || rel[0] == '/') {
        ft_strlcpy(buf, rel, n);
        return;
    }
    snprintf(buf, n, "%.*s/%s", (int)(slash - path), path, rel);
}

int est_axolotl_model(const cJSON *root, const char *yaml_path, char *out, size_t outlen,
                      char *err, size_t errlen) {
    char base[256] = "";
    if (ft_json_string(root, "base_model", base, sizeof base, err, errlen) < 0) return -1;
    if (!base[0]) return 1;
    if (est_shipped_by_repo(base, out, outlen)) return 0;
    /* A local folder (axolotl accepts paths), as given or beside the YAML. */
    char dir[1024], cfg[1100];
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 0) ft_strlcpy(dir, base, sizeof dir);
        else beside(yaml_path, base, dir, sizeof dir);
        snprintf(cfg, sizeof cfg, "%s/config.json", dir);
        if (access(cfg, R_OK) == 0) {
            if (!ft_strlcpy(out, cfg, outlen)) return ft_errorf(err, errlen, "base_model path is too long");
            return 0;
        }
    }
    return ft_errorf(err, errlen,
                     "base_model \"%.80s\" is neither a shipped model's Hugging Face repo (see `ftest "
                     "models`) nor a folder with config.json; pass --model NAME or a config.json path",
                     base);
}

/* Appends ", key" to the list of applied settings. */
static void note(char *used, size_t n, const char *key) {
    size_t len = strlen(used);
    if (len + 2 < n) snprintf(used + len, n - len, "%s%s", len ? ", " : "", key);
}

/* True when the key is present and not null. */
static bool has(const cJSON *root, const char *key) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    return it && !cJSON_IsNull(it);
}

/* A boolean setting; axolotl also writes "auto" for bf16 (true when the GPU
 * supports it: every GPU of the catalog that has bf16 does). */
static int flag_value(const cJSON *root, const char *key, bool *out, char *err, size_t errlen) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!it || cJSON_IsNull(it)) return 0;
    if (cJSON_IsString(it) && it->valuestring && !strcmp(it->valuestring, "auto")) {
        *out = true;
        return 1;
    }
    return ft_json_bool(root, key, out, err, errlen);
}

/* axolotl's optimizer names (the HF Trainer's `optim`) to ours. */
static int optimizer_of(const char *s, est_optimizer *out, char *err, size_t errlen) {
    static const struct {
        const char *name;
        est_optimizer opt;
    } MAP[] = {
        {"adamw_torch", EST_OPT_ADAMW},           {"adamw_torch_fused", EST_OPT_ADAMW},
        {"adamw_hf", EST_OPT_ADAMW},              {"adamw_bnb_8bit", EST_OPT_ADAMW_8BIT},
        {"adamw_8bit", EST_OPT_ADAMW_8BIT},       {"paged_adamw_8bit", EST_OPT_PAGED_ADAMW_8BIT},
        {"paged_adamw_32bit", EST_OPT_PAGED_ADAMW_32BIT},
        {"adafactor", EST_OPT_ADAFACTOR},         {"lion_32bit", EST_OPT_LION},
        {"sgd", EST_OPT_SGD},
    };
    for (size_t i = 0; i < sizeof MAP / sizeof MAP[0]; i++)
        if (!strcmp(s, MAP[i].name)) {
            *out = MAP[i].opt;
            return 0;
        }
    return ft_errorf(err, errlen,
                     "optimizer \"%.40s\" is not modelled (adamw_torch, adamw_torch_fused, adamw_hf, "
                     "adamw_bnb_8bit, paged_adamw_8bit, paged_adamw_32bit, adafactor, lion_32bit, sgd)",
                     s);
}

/* lora_target_modules: a list of module names (or one name). */
static int targets_of(const cJSON *it, uint32_t *out, char *err, size_t errlen) {
    char list[256] = "";
    size_t used = 0;
    if (cJSON_IsString(it) && it->valuestring) {
        if (!ft_strlcpy(list, it->valuestring, sizeof list))
            return ft_errorf(err, errlen, "lora_target_modules is too long");
    } else if (cJSON_IsArray(it)) {
        const cJSON *e;
        cJSON_ArrayForEach(e, it) {
            if (!cJSON_IsString(e) || !e->valuestring)
                return ft_errorf(err, errlen, "lora_target_modules must list module names");
            int w = snprintf(list + used, sizeof list - used, "%s%s", used ? "," : "", e->valuestring);
            if (w < 0 || (size_t)w >= sizeof list - used)
                return ft_errorf(err, errlen, "lora_target_modules is too long");
            used += (size_t)w;
        }
    } else {
        return ft_errorf(err, errlen, "lora_target_modules must be a list of module names");
    }
    if (est_lora_targets_parse(list, out, err, errlen) < 0) return -1;
    return 0;
}

/* fsdp: a list or a space-separated string of options (full_shard,
 * shard_grad_op, no_shard, offload, auto_wrap). */
static int fsdp_of(const cJSON *root, est_run *run, char *err, size_t errlen) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, "fsdp");
    char opts[256] = "";
    if (cJSON_IsString(it) && it->valuestring) {
        ft_strlcpy(opts, it->valuestring, sizeof opts);
    } else if (cJSON_IsArray(it)) {
        const cJSON *e;
        cJSON_ArrayForEach(e, it) {
            if (!cJSON_IsString(e) || !e->valuestring)
                return ft_errorf(err, errlen, "fsdp must list options such as full_shard");
            size_t len = strlen(opts);
            snprintf(opts + len, sizeof opts - len, " %s", e->valuestring);
        }
    } else {
        return ft_errorf(err, errlen, "fsdp must list options such as full_shard");
    }
    run->framework = EST_FW_FSDP;
    if (strstr(opts, "full_shard")) run->zero_stage = 3;
    else if (strstr(opts, "shard_grad_op")) run->zero_stage = 2;
    else if (strstr(opts, "no_shard")) run->zero_stage = 0;
    else return ft_errorf(err, errlen, "fsdp names no sharding strategy (full_shard, shard_grad_op, no_shard)");
    bool offload = strstr(opts, "offload") != NULL;
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(root, "fsdp_config");
    if (cJSON_IsObject(cfg) && ft_json_bool(cfg, "fsdp_offload_params", &offload, err, errlen) < 0)
        return -1;
    run->offload = offload ? EST_OFFLOAD_OPTIMIZER_PARAMS : EST_OFFLOAD_NONE;
    return 0;
}

int est_axolotl_apply(const cJSON *root, const char *yaml_path, const est_cli *cli, est_run *run,
                      char *used, size_t usedlen, char *err, size_t errlen) {
    used[0] = '\0';
    if (cli->model[0] == '\0' && has(root, "base_model")) note(used, usedlen, "base_model");

    /* Adapter. */
    char adapter[16] = "";
    if (ft_json_string(root, "adapter", adapter, sizeof adapter, err, errlen) < 0) return -1;
    if (adapter[0] && strcmp(adapter, "lora") && strcmp(adapter, "qlora"))
        return ft_errorf(err, errlen, "adapter \"%s\" is not modelled (lora, qlora)", adapter);
    bool in4 = false, in8 = false;
    if (ft_json_bool(root, "load_in_4bit", &in4, err, errlen) < 0 ||
        ft_json_bool(root, "load_in_8bit", &in8, err, errlen) < 0)
        return -1;
    if (!strcmp(adapter, "qlora") && !in4)
        return ft_errorf(err, errlen, "adapter qlora needs load_in_4bit: true (axolotl requires it)");
    if (adapter[0] && !cli->lora_rank_set) {
        run->lora.rank = 8; /* LoraConfig's r when lora_r is absent */
        if (ft_json_int64(root, "lora_r", 1, EST_LORA_MAX_RANK, &run->lora.rank, err, errlen) < 0) return -1;
        note(used, usedlen, adapter);
        if (has(root, "lora_r")) note(used, usedlen, "lora_r");
        if (!cli->lora_alpha_set && has(root, "lora_alpha")) {
            if (ft_json_double(root, "lora_alpha", 1e-9, 1e9, &run->lora.alpha, err, errlen) < 0) return -1;
            note(used, usedlen, "lora_alpha");
        }
        if (!cli->lora_dropout_set && has(root, "lora_dropout")) {
            if (ft_json_double(root, "lora_dropout", 0, 0.999999, &run->lora.dropout, err, errlen) < 0)
                return -1;
            note(used, usedlen, "lora_dropout");
        }
        bool linear = false;
        if (ft_json_bool(root, "lora_target_linear", &linear, err, errlen) < 0) return -1;
        if (!cli->lora_targets_set) {
            if (linear) {
                run->lora.targets = EST_LORA_ALL_LINEAR;
                note(used, usedlen, "lora_target_linear");
            } else if (has(root, "lora_target_modules")) {
                if (targets_of(cJSON_GetObjectItemCaseSensitive(root, "lora_target_modules"),
                               &run->lora.targets, err, errlen) < 0)
                    return -1;
                note(used, usedlen, "lora_target_modules");
            }
        }
    }
    if (!cli->quant_set && (in4 || in8)) {
        if (!adapter[0])
            return ft_errorf(err, errlen, "load_in_%dbit without an adapter: a quantized base is frozen",
                             in4 ? 4 : 8);
        run->quant = in4 ? EST_QUANT_NF4 : EST_QUANT_INT8;
        note(used, usedlen, in4 ? "load_in_4bit" : "load_in_8bit");
    }

    /* Batch and sequence. */
    if (!cli->seq_set && has(root, "sequence_len")) {
        if (ft_json_int64(root, "sequence_len", 1, EST_MAX_SEQ, &run->seq_len, err, errlen) < 0) return -1;
        note(used, usedlen, "sequence_len");
    }
    if (!cli->batch_set && has(root, "micro_batch_size")) {
        if (ft_json_int64(root, "micro_batch_size", 1, EST_MAX_BATCH, &run->micro_batch, err, errlen) < 0)
            return -1;
        note(used, usedlen, "micro_batch_size");
    }
    if (!cli->grad_accum_set && has(root, "gradient_accumulation_steps")) {
        if (ft_json_int64(root, "gradient_accumulation_steps", 1, EST_MAX_ACCUM, &run->grad_accum, err,
                          errlen) < 0)
            return -1;
        note(used, usedlen, "gradient_accumulation_steps");
    }

    /* Optimizer, checkpointing, attention. */
    char opt[40] = "";
    if (ft_json_string(root, "optimizer", opt, sizeof opt, err, errlen) < 0) return -1;
    if (opt[0] && !cli->optimizer_set) {
        if (optimizer_of(opt, &run->optimizer, err, errlen) < 0) return -1;
        note(used, usedlen, "optimizer");
    }
    const cJSON *gc = cJSON_GetObjectItemCaseSensitive(root, "gradient_checkpointing");
    if (gc && !cJSON_IsNull(gc) && !cli->checkpointing_set) {
        /* true, or axolotl's "unsloth"/offload variants: whole layers recomputed. */
        run->checkpointing = cJSON_IsFalse(gc) ? EST_CKPT_NONE : EST_CKPT_FULL;
        note(used, usedlen, "gradient_checkpointing");
    }
    bool flash = false, sdp = false;
    if (ft_json_bool(root, "flash_attention", &flash, err, errlen) < 0 ||
        ft_json_bool(root, "sdp_attention", &sdp, err, errlen) < 0)
        return -1;
    if (!cli->attention_set && (flash || sdp)) {
        run->attention = flash ? EST_ATTN_FLASH : EST_ATTN_SDPA;
        note(used, usedlen, flash ? "flash_attention" : "sdp_attention");
    }

    /* Precision: axolotl loads the model in bf16/fp16 (torch_dtype) when
     * bf16/fp16 is set: with an adapter that is our bf16-mixed (a base in the
     * compute dtype, fp32 adapters under autocast); a full fine-tune keeps bf16
     * weights and state (our bf16). A full fine-tune in fp16 weights has no
     * equivalent here. */
    bool bf16 = false, fp16 = false;
    int rb = flag_value(root, "bf16", &bf16, err, errlen), rf = flag_value(root, "fp16", &fp16, err, errlen);
    if (rb < 0 || rf < 0) return -1;
    if (!cli->precision_set && (rb > 0 || rf > 0)) {
        if (bf16 && fp16) return ft_errorf(err, errlen, "bf16 and fp16 are both set");
        if (bf16) run->precision = adapter[0] ? EST_PREC_BF16_MIXED : EST_PREC_BF16;
        else if (fp16 && adapter[0]) run->precision = EST_PREC_FP16_MIXED;
        else if (fp16)
            return ft_errorf(err, errlen, "fp16 full fine-tuning (fp16 weights) is not modelled; pass "
                                          "--precision fp16-mixed or use bf16");
        else run->precision = EST_PREC_FP32;
        note(used, usedlen, bf16 ? "bf16" : "fp16");
    }

    /* Framework: DeepSpeed, FSDP or the plain Trainer. */
    if (cli->framework_set) return 0;
    char ds[1024] = "";
    if (ft_json_string(root, "deepspeed", ds, sizeof ds, err, errlen) < 0) return -1;
    if (ds[0] && has(root, "fsdp")) return ft_errorf(err, errlen, "deepspeed and fsdp are both set");
    if (ds[0]) {
        if (!cli->ds_config[0]) {
            char path[1100];
            ft_strlcpy(path, ds, sizeof path);
            if (access(path, R_OK) != 0) beside(yaml_path, ds, path, sizeof path);
            if (est_ds_config_load(path, run, err, errlen) < 0) return -1;
        }
        run->framework = EST_FW_DEEPSPEED;
        note(used, usedlen, "deepspeed");
    } else if (has(root, "fsdp")) {
        if (fsdp_of(root, run, err, errlen) < 0) return -1;
        note(used, usedlen, "fsdp");
    } else {
        run->framework = EST_FW_HF;
    }
    return 0;
}
