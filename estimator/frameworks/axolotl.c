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

/* One application of the YAML: the flags that win over it, the run it fills,
 * the list of the settings taken, and the adapter (needed by the precision). */
typedef struct yaml_apply {
    const cJSON *root;
    const est_cli *cli;
    est_run *run;
    char *used;
    size_t usedlen;
    char *err;
    size_t errlen;
    char adapter[16];  /* "", "lora" or "qlora" */
    bool in4, in8;     /* load_in_4bit, load_in_8bit */
} yaml_apply;

/* adapter, load_in_4bit and load_in_8bit, checked against each other. */
static int read_adapter(yaml_apply *a) {
    if (ft_json_string(a->root, "adapter", a->adapter, sizeof a->adapter, a->err, a->errlen) < 0)
        return -1;
    if (a->adapter[0] && strcmp(a->adapter, "lora") && strcmp(a->adapter, "qlora"))
        return ft_errorf(a->err, a->errlen, "adapter \"%s\" is not modelled (lora, qlora)", a->adapter);
    if (ft_json_bool(a->root, "load_in_4bit", &a->in4, a->err, a->errlen) < 0 ||
        ft_json_bool(a->root, "load_in_8bit", &a->in8, a->err, a->errlen) < 0)
        return -1;
    if (!strcmp(a->adapter, "qlora") && !a->in4)
        return ft_errorf(a->err, a->errlen, "adapter qlora needs load_in_4bit: true (axolotl requires it)");
    return 0;
}

/* lora_target_linear (all linear layers) or lora_target_modules. */
static int apply_lora_targets(yaml_apply *a) {
    bool linear = false;
    if (ft_json_bool(a->root, "lora_target_linear", &linear, a->err, a->errlen) < 0) return -1;
    if (a->cli->lora_targets_set) return 0;
    if (linear) {
        a->run->lora.targets = EST_LORA_ALL_LINEAR;
        note(a->used, a->usedlen, "lora_target_linear");
    } else if (has(a->root, "lora_target_modules")) {
        if (targets_of(cJSON_GetObjectItemCaseSensitive(a->root, "lora_target_modules"),
                       &a->run->lora.targets, a->err, a->errlen) < 0)
            return -1;
        note(a->used, a->usedlen, "lora_target_modules");
    }
    return 0;
}

/* The adapter's rank, alpha, dropout and targets, unless --lora-rank was given. */
static int apply_lora(yaml_apply *a) {
    const cJSON *root = a->root;
    est_run *run = a->run;
    if (!a->adapter[0] || a->cli->lora_rank_set) return 0;
    run->lora.rank = 8; /* LoraConfig's r when lora_r is absent */
    if (ft_json_int64(root, "lora_r", 1, EST_LORA_MAX_RANK, &run->lora.rank, a->err, a->errlen) < 0)
        return -1;
    note(a->used, a->usedlen, a->adapter);
    if (has(root, "lora_r")) note(a->used, a->usedlen, "lora_r");
    if (!a->cli->lora_alpha_set && has(root, "lora_alpha")) {
        if (ft_json_double(root, "lora_alpha", 1e-9, 1e9, &run->lora.alpha, a->err, a->errlen) < 0)
            return -1;
        note(a->used, a->usedlen, "lora_alpha");
    }
    if (!a->cli->lora_dropout_set && has(root, "lora_dropout")) {
        if (ft_json_double(root, "lora_dropout", 0, 0.999999, &run->lora.dropout, a->err, a->errlen) < 0)
            return -1;
        note(a->used, a->usedlen, "lora_dropout");
    }
    return apply_lora_targets(a);
}

/* A quantized base (load_in_4bit/8bit) is frozen: only under an adapter. */
static int apply_quant(yaml_apply *a) {
    if (a->cli->quant_set || !(a->in4 || a->in8)) return 0;
    if (!a->adapter[0])
        return ft_errorf(a->err, a->errlen, "load_in_%dbit without an adapter: a quantized base is frozen",
                         a->in4 ? 4 : 8);
    a->run->quant = a->in4 ? EST_QUANT_NF4 : EST_QUANT_INT8;
    note(a->used, a->usedlen, a->in4 ? "load_in_4bit" : "load_in_8bit");
    return 0;
}

/* One whole-number key within 1..max, unless its flag was given. */
static int apply_count(yaml_apply *a, bool flag_given, const char *key, int64_t max, int64_t *out) {
    if (flag_given || !has(a->root, key)) return 0;
    if (ft_json_int64(a->root, key, 1, max, out, a->err, a->errlen) < 0) return -1;
    note(a->used, a->usedlen, key);
    return 0;
}

/* sequence_len, micro_batch_size, gradient_accumulation_steps. */
static int apply_batch_and_seq(yaml_apply *a) {
    const est_cli *cli = a->cli;
    if (apply_count(a, cli->seq_set, "sequence_len", EST_MAX_SEQ, &a->run->seq_len) < 0 ||
        apply_count(a, cli->batch_set, "micro_batch_size", EST_MAX_BATCH, &a->run->micro_batch) < 0 ||
        apply_count(a, cli->grad_accum_set, "gradient_accumulation_steps", EST_MAX_ACCUM,
                    &a->run->grad_accum) < 0)
        return -1;
    return 0;
}

/* optimizer, gradient_checkpointing, flash_attention / sdp_attention. */
static int apply_optimizer_and_memory_savers(yaml_apply *a) {
    const cJSON *root = a->root;
    const est_cli *cli = a->cli;
    char opt[40] = "";
    if (ft_json_string(root, "optimizer", opt, sizeof opt, a->err, a->errlen) < 0) return -1;
    if (opt[0] && !cli->optimizer_set) {
        if (optimizer_of(opt, &a->run->optimizer, a->err, a->errlen) < 0) return -1;
        note(a->used, a->usedlen, "optimizer");
    }
    const cJSON *gc = cJSON_GetObjectItemCaseSensitive(root, "gradient_checkpointing");
    if (gc && !cJSON_IsNull(gc) && !cli->checkpointing_set) {
        /* true, or axolotl's "unsloth"/offload variants: whole layers recomputed. */
        a->run->checkpointing = cJSON_IsFalse(gc) ? EST_CKPT_NONE : EST_CKPT_FULL;
        note(a->used, a->usedlen, "gradient_checkpointing");
    }
    bool flash = false, sdp = false;
    if (ft_json_bool(root, "flash_attention", &flash, a->err, a->errlen) < 0 ||
        ft_json_bool(root, "sdp_attention", &sdp, a->err, a->errlen) < 0)
        return -1;
    if (!cli->attention_set && (flash || sdp)) {
        a->run->attention = flash ? EST_ATTN_FLASH : EST_ATTN_SDPA;
        note(a->used, a->usedlen, flash ? "flash_attention" : "sdp_attention");
    }
    return 0;
}

/* Precision: axolotl loads the model in bf16/fp16 (torch_dtype) when
 * bf16/fp16 is set: with an adapter that is our bf16-mixed (a base in the
 * compute dtype, fp32 adapters under autocast); a full fine-tune keeps bf16
 * weights and state (our bf16). A full fine-tune in fp16 weights has no
 * equivalent here. */
static int apply_precision(yaml_apply *a) {
    bool bf16 = false, fp16 = false;
    int rb = flag_value(a->root, "bf16", &bf16, a->err, a->errlen),
        rf = flag_value(a->root, "fp16", &fp16, a->err, a->errlen);
    if (rb < 0 || rf < 0) return -1;
    if (a->cli->precision_set || !(rb > 0 || rf > 0)) return 0;
    if (bf16 && fp16) return ft_errorf(a->err, a->errlen, "bf16 and fp16 are both set");
    if (bf16) a->run->precision = a->adapter[0] ? EST_PREC_BF16_MIXED : EST_PREC_BF16;
    else if (fp16 && a->adapter[0]) a->run->precision = EST_PREC_FP16_MIXED;
    else if (fp16)
        return ft_errorf(a->err, a->errlen, "fp16 full fine-tuning (fp16 weights) is not modelled; pass "
                                            "--precision fp16-mixed or use bf16");
    else a->run->precision = EST_PREC_FP32;
    note(a->used, a->usedlen, bf16 ? "bf16" : "fp16");
    return 0;
}

/* Framework: DeepSpeed (its config as given or beside the YAML), FSDP or the
 * plain Trainer, unless --framework was given. */
static int apply_framework(yaml_apply *a, const char *yaml_path) {
    const cJSON *root = a->root;
    est_run *run = a->run;
    if (a->cli->framework_set) return 0;
    char ds[1024] = "";
    if (ft_json_string(root, "deepspeed", ds, sizeof ds, a->err, a->errlen) < 0) return -1;
    if (ds[0] && has(root, "fsdp")) return ft_errorf(a->err, a->errlen, "deepspeed and fsdp are both set");
    if (ds[0]) {
        if (!a->cli->ds_config[0]) {
            char path[1100];
            ft_strlcpy(path, ds, sizeof path);
            if (access(path, R_OK) != 0) beside(yaml_path, ds, path, sizeof path);
            if (est_ds_config_load(path, run, a->err, a->errlen) < 0) return -1;
        }
        run->framework = EST_FW_DEEPSPEED;
        note(a->used, a->usedlen, "deepspeed");
    } else if (has(root, "fsdp")) {
        if (fsdp_of(root, run, a->err, a->errlen) < 0) return -1;
        note(a->used, a->usedlen, "fsdp");
    } else {
        run->framework = EST_FW_HF;
    }
    return 0;
}

int est_axolotl_apply(const cJSON *root, const char *yaml_path, const est_cli *cli, est_run *run,
                      char *used, size_t usedlen, char *err, size_t errlen) {
    used[0] = '\0';
    if (cli->model[0] == '\0' && has(root, "base_model")) note(used, usedlen, "base_model");
    yaml_apply a = {.root = root, .cli = cli, .run = run, .used = used, .usedlen = usedlen,
                    .err = err, .errlen = errlen};
    if (read_adapter(&a) < 0 || apply_lora(&a) < 0 || apply_quant(&a) < 0 ||
        apply_batch_and_seq(&a) < 0 || apply_optimizer_and_memory_savers(&a) < 0 ||
        apply_precision(&a) < 0 || apply_framework(&a, yaml_path) < 0)
        return -1;
    return 0;
}
