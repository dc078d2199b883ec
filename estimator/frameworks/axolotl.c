#include "axolotl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "axolotl_fsdp.h"
#include "axolotl_kernels.h"
#include "axolotl_keys.h"
#include "axolotl_unfrozen.h"
#include "ds_config.h"
#include "json_util.h"
#include "liger.h"
#include "lora.h"
#include "model_source.h"
#include "objective.h"
#include "yaml_json.h"

cJSON *est_axolotl_load(const char *path, char *err, size_t errlen) {
    cJSON *root = est_yaml_load(path, err, errlen);
    if (root && est_axolotl_unmodelled(root, err, errlen) < 0) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
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

/* A folder holding config.json at `dir`: its config path in out. */
static bool config_folder(const char *dir, char *out, size_t outlen) {
    char cfg[1100];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    return access(cfg, R_OK) == 0 && ft_strlcpy(out, cfg, outlen);
}

int est_axolotl_model(const cJSON *root, const char *yaml_path, char *out, size_t outlen,
                      char *err, size_t errlen) {
    /* axolotl loads the config from base_model_config when given, else from
     * base_model (loaders/utils.py load_model_config). */
    char base[256] = "";
    const char *key = "base_model_config";
    if (ft_json_string(root, key, base, sizeof base, err, errlen) < 0) return -1;
    if (!base[0]) {
        key = "base_model";
        if (ft_json_string(root, key, base, sizeof base, err, errlen) < 0) return -1;
    }
    if (!base[0]) return 1;
    /* A local folder, as from_pretrained takes it (relative to where axolotl runs). */
    if (config_folder(base, out, outlen)) return 0;
    /* ORG/NAME: the Hugging Face cache, else the shipped model of that repo,
     * exactly as --model ORG/NAME (estimator/model/model_source.c). */
    if (est_model_source_is_repo(base)) {
        est_model_source src;
        char inner[400];
        if (est_model_source_resolve(base, &src, inner, sizeof inner) == 0) {
            if (!ft_strlcpy(out, base, outlen)) return ft_errorf(err, errlen, "%s is too long", key);
            return 0;
        }
        char dir[1024];
        beside(yaml_path, base, dir, sizeof dir);
        if (config_folder(dir, out, outlen)) return 0;
        return ft_errorf(err, errlen, "%s: %s", key, inner);
    }
    /* A folder beside the YAML (ftest's convenience for shipped examples). */
    char dir[1024];
    beside(yaml_path, base, dir, sizeof dir);
    if (config_folder(dir, out, outlen)) return 0;
    return ft_errorf(err, errlen,
                     "%s \"%.80s\" is neither ORG/NAME (looked up in the Hugging Face cache) nor a "
                     "folder with config.json; pass --model NAME or a config.json path",
                     key, base);
}

/* Appends ", key" to the list of applied settings (axolotl_keys.c). */
static void note(char *used, size_t n, const char *key) { est_axolotl_note(used, n, key); }

/* Keys read and found at a value ftest models as it is (sample_packing:
 * false, load_in_4bit: false, tf32 under half precision, ...): named with
 * the applied ones, so that every key of the file is in the output once. */
static void note_checked(const cJSON *root, char *used, size_t n) {
    const cJSON *it;
    cJSON_ArrayForEach(it, root) {
        if (!it->string || cJSON_IsNull(it) || !est_axolotl_key_honoured(it->string)) continue;
        /* A key a flag overrode is not the file's: only the checks that held. */
        if (!est_axolotl_key_checked(it->string) && !cJSON_IsFalse(it) && strcmp(it->string, "tf32")) continue;
        bool listed = false;
        for (const char *p = strstr(used, it->string); p && !listed; p = strstr(p + 1, it->string)) {
            size_t k = strlen(it->string);
            listed = (p == used || p[-1] == ' ') && (p[k] == ',' || p[k] == '\0');
        }
        if (!listed) note(used, n, it->string);
    }
}

/* True when the key is present and not null. */
static bool has(const cJSON *root, const char *key) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    return it && !cJSON_IsNull(it);
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
        {"sgd", EST_OPT_SGD},                     {"adamw_torch_4bit", EST_OPT_ADAMW_4BIT},
    };
    for (size_t i = 0; i < sizeof MAP / sizeof MAP[0]; i++)
        if (!strcmp(s, MAP[i].name)) {
            *out = MAP[i].opt;
            return 0;
        }
    return ft_errorf(err, errlen,
                     "optimizer \"%.40s\" is not modelled (adamw_torch, adamw_torch_fused, adamw_hf, "
                     "adamw_bnb_8bit, paged_adamw_8bit, paged_adamw_32bit, adafactor, lion_32bit, sgd, "
                     "adamw_torch_4bit)",
                     s);
}

/* One target name as PEFT finds it in `m` (it matches the end of a module's
 * path): Phi-3's qkv_proj and gate_up_proj are the q and gate targets and it
 * has no q/k/v/gate/up_proj (the name is dropped: ""); Mixtral's experts are
 * w1, w3, w2 (gate, up, down); the MoE routers' `gate` has no target of its
 * own outside all-linear. 0, or -1 with one line. */
static int peft_name(const ft_model *m, const char *name, char *out, size_t n, char *err, size_t errlen) {
    static const struct {
        const char *from, *to;
    } FUSED[] = {{"qkv_proj", "q"},     {"gate_up_proj", "gate"}, {"q_proj", ""}, {"k_proj", ""},
                 {"v_proj", ""},       {"gate_proj", ""},        {"up_proj", ""}},
      MIXTRAL[] = {{"w1", "gate"}, {"w3", "up"}, {"w2", "down"}};
    ft_strlcpy(out, name, n);
    if (m->fused_qkv)
        for (size_t i = 0; i < sizeof FUSED / sizeof FUSED[0]; i++)
            if (!strcmp(name, FUSED[i].from)) ft_strlcpy(out, FUSED[i].to, n);
    if (m->arch == FT_ARCH_MIXTRAL)
        for (size_t i = 0; i < sizeof MIXTRAL / sizeof MIXTRAL[0]; i++)
            if (!strcmp(name, MIXTRAL[i].from)) ft_strlcpy(out, MIXTRAL[i].to, n);
    if (m->num_experts > 0 && (!strcmp(name, "gate") || !strcmp(name, "shared_expert_gate")))
        return ft_errorf(err, errlen, "not modelled (axolotl %s): LoRA on the router by name (%s); "
                                      "lora_target_linear includes it",
                         EST_AXOLOTL_VERSION, name);
    return 0;
}

/* lora_target_modules: a list of module names (or one name), as PEFT finds
 * them in model m. */
static int targets_of(const cJSON *it, const ft_model *m, uint32_t *out, char *err, size_t errlen) {
    char list[256] = "", name[48];
    size_t used = 0;
    if (!cJSON_IsString(it) && !cJSON_IsArray(it))
        return ft_errorf(err, errlen, "lora_target_modules must be a list of module names");
    const cJSON *e = cJSON_IsArray(it) ? it->child : it;
    for (; e; e = cJSON_IsArray(it) ? e->next : NULL) {
        if (!cJSON_IsString(e) || !e->valuestring)
            return ft_errorf(err, errlen, "lora_target_modules must list module names");
        if (peft_name(m, e->valuestring, name, sizeof name, err, errlen) < 0) return -1;
        if (!name[0]) continue;
        int w = snprintf(list + used, sizeof list - used, "%s%s", used ? "," : "", name);
        if (w < 0 || (size_t)w >= sizeof list - used) return ft_errorf(err, errlen, "lora_target_modules is too long");
        used += (size_t)w;
    }
    if (!list[0]) /* PEFT: "Target modules ... not found in the base model" */
        return ft_errorf(err, errlen, "lora_target_modules names no module of %s", m->name);
    return est_lora_targets_parse(list, out, err, errlen);
}

/* fsdp: a list or a space-separated string of options (full_shard,
 * shard_grad_op, no_shard, offload, auto_wrap). */
/* One application of the YAML: the flags that win over it, the run it fills,
 * the list of the settings taken, and what later settings need. */
typedef struct yaml_apply {
    const cJSON *root;
    const est_given *given;
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
    if (a->given->lora_targets) return 0;
    if (linear) {
        a->run->lora.targets = EST_LORA_ALL_LINEAR;
        note(a->used, a->usedlen, "lora_target_linear");
    } else if (has(a->root, "lora_target_modules")) {
        if (targets_of(cJSON_GetObjectItemCaseSensitive(a->root, "lora_target_modules"), &a->run->model,
                       &a->run->lora.targets, a->err, a->errlen) < 0)
            return -1;
        note(a->used, a->usedlen, "lora_target_modules");
    }
    return 0;
}

/* lora_modules_to_save: PEFT's modules_to_save (a list, or one name):
 * embed_tokens and lm_head are modelled (objective.h). */
static int apply_modules_to_save(yaml_apply *a) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(a->root, "lora_modules_to_save"), *e;
    if (!it || cJSON_IsNull(it) || a->given->modules_to_save) return 0;
    if (!a->adapter[0]) return ft_errorf(a->err, a->errlen, "lora_modules_to_save needs an adapter");
    char list[128] = "";
    if (cJSON_IsString(it) && it->valuestring) {
        ft_strlcpy(list, it->valuestring, sizeof list);
    } else if (cJSON_IsArray(it)) {
        size_t used = 0;
        cJSON_ArrayForEach(e, it) {
            if (!cJSON_IsString(e) || !e->valuestring)
                return ft_errorf(a->err, a->errlen, "lora_modules_to_save must list module names");
            int w = snprintf(list + used, sizeof list - used, "%s%s", used ? "," : "", e->valuestring);
            if (w < 0 || (size_t)w >= sizeof list - used)
                return ft_errorf(a->err, a->errlen, "lora_modules_to_save is too long");
            used += (size_t)w;
        }
    } else {
        return ft_errorf(a->err, a->errlen, "lora_modules_to_save must be a list of module names");
    }
    if (!list[0]) return 0;
    if (est_save_parse(list, &a->run->modules_to_save, a->err, a->errlen) < 0) return -1;
    note(a->used, a->usedlen, "lora_modules_to_save");
    return 0;
}

/* The adapter's rank, alpha, dropout and targets, unless --lora-rank was given. */
static int apply_lora(yaml_apply *a) {
    const cJSON *root = a->root;
    est_run *run = a->run;
    if (!a->adapter[0] || a->given->lora_rank) return 0;
    run->lora.rank = 8; /* LoraConfig's r when lora_r is absent */
    if (ft_json_int64(root, "lora_r", 1, EST_LORA_MAX_RANK, &run->lora.rank, a->err, a->errlen) < 0)
        return -1;
    note(a->used, a->usedlen, a->adapter);
    if (has(root, "lora_r")) note(a->used, a->usedlen, "lora_r");
    if (apply_modules_to_save(a) < 0) return -1;
    if (!a->given->lora_alpha && has(root, "lora_alpha")) {
        if (ft_json_double(root, "lora_alpha", 1e-9, 1e9, &run->lora.alpha, a->err, a->errlen) < 0)
            return -1;
        note(a->used, a->usedlen, "lora_alpha");
    }
    if (!a->given->lora_dropout && has(root, "lora_dropout")) {
        if (ft_json_double(root, "lora_dropout", 0, 0.999999, &run->lora.dropout, a->err, a->errlen) < 0)
            return -1;
        note(a->used, a->usedlen, "lora_dropout");
    }
    return apply_lora_targets(a);
}

/* A quantized base (load_in_4bit/8bit) is frozen: only under an adapter. */
static int apply_quant(yaml_apply *a) {
    if (a->given->quant || !(a->in4 || a->in8)) return 0;
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

/* sequence_len (the longest sequence: every micro-batch is taken at that
 * length), micro_batch_size, gradient_accumulation_steps, or batch_size /
 * micro_batch_size when only batch_size is given (utils/config normalize_config). */
static int apply_batch_and_seq(yaml_apply *a) {
    const est_given *given = a->given;
    if (apply_count(a, given->seq, "sequence_len", EST_MAX_SEQ, &a->run->seq_len) < 0 ||
        apply_count(a, given->batch, "micro_batch_size", EST_MAX_BATCH, &a->run->micro_batch) < 0 ||
        apply_count(a, given->grad_accum, "gradient_accumulation_steps", EST_MAX_ACCUM,
                    &a->run->grad_accum) < 0)
        return -1;
    if (has(a->root, "batch_size") && !has(a->root, "gradient_accumulation_steps") && !given->grad_accum) {
        int64_t total = 0;
        if (ft_json_int64(a->root, "batch_size", 1, (int64_t)EST_MAX_BATCH * EST_MAX_ACCUM, &total, a->err,
                          a->errlen) < 0)
            return -1;
        if (total < a->run->micro_batch)
            return ft_errorf(a->err, a->errlen, "batch_size %lld is below micro_batch_size %lld",
                             (long long)total, (long long)a->run->micro_batch);
        a->run->grad_accum = total / a->run->micro_batch;
        note(a->used, a->usedlen, "batch_size");
    }
    return 0;
}

/* gradient_checkpointing_kwargs.use_reentrant, as axolotl 0.18.0 settles it:
 * given, it wins; absent, utils/config/__init__.py normalize_config sets
 * {"use_reentrant": True} unless rl or unfrozen_parameters is set, in which
 * case core/builders/base.py _configure_gradient_checkpointing passes
 * {"use_reentrant": False}. */
static int reentrant_of(const yaml_apply *a, bool *reentrant) {
    const cJSON *kw = cJSON_GetObjectItemCaseSensitive(a->root, "gradient_checkpointing_kwargs");
    const cJSON *ur = cJSON_IsObject(kw) ? cJSON_GetObjectItemCaseSensitive(kw, "use_reentrant") : NULL;
    if (ur && !cJSON_IsNull(ur)) {
        if (!cJSON_IsBool(ur))
            return ft_errorf(a->err, a->errlen, "gradient_checkpointing_kwargs.use_reentrant must be true or false");
        *reentrant = cJSON_IsTrue(ur);
        return 0;
    }
    *reentrant = !(has(a->root, "rl") || has(a->root, "unfrozen_parameters"));
    return 0;
}

/* optimizer, and gradient_checkpointing: true recomputes whole decoder
 * layers (transformers' gradient_checkpointing_enable) through
 * torch.utils.checkpoint, reentrant or not (reentrant_of). */
static int apply_optimizer_and_checkpointing(yaml_apply *a) {
    const cJSON *root = a->root;
    const est_given *given = a->given;
    char opt[40] = "";
    if (ft_json_string(root, "optimizer", opt, sizeof opt, a->err, a->errlen) < 0) return -1;
    if (opt[0] && !given->optimizer) {
        if (optimizer_of(opt, &a->run->optimizer, a->err, a->errlen) < 0) return -1;
        /* the name says which torch AdamW (optimizers.h est_optimizer_adamw_fused) */
        if (!strcmp(opt, "adamw_torch")) a->run->adamw_impl = EST_ADAMW_FOREACH;
        if (!strcmp(opt, "adamw_torch_fused")) a->run->adamw_impl = EST_ADAMW_FUSED;
        note(a->used, a->usedlen, "optimizer");
    } else if (!opt[0] && !given->optimizer && a->run->optimizer == EST_OPT_ADAMW) {
        /* no key: axolotl's schema default, "adamw_torch_fused" whatever the
         * stack (src/axolotl/utils/schemas/training.py, HyperparametersConfig
         * optimizer, line 123 at 2026-07; OptimizerNames.ADAMW_TORCH_FUSED
         * since 2025-03), handed to the Trainer as optim */
        a->run->adamw_impl = EST_ADAMW_FUSED;
    }
    const cJSON *gc = cJSON_GetObjectItemCaseSensitive(root, "gradient_checkpointing");
    if (gc && !cJSON_IsNull(gc) && !given->checkpointing) {
        /* "offload" checkpoints as true does (axolotl_kernels.c adds the offloading) */
        const bool offload = cJSON_IsString(gc) && gc->valuestring && !strcmp(gc->valuestring, "offload");
        if (!cJSON_IsBool(gc) && !offload)
            return ft_errorf(a->err, a->errlen, "gradient_checkpointing must be true, false, offload or "
                                                "offload_disk");
        a->run->checkpointing = cJSON_IsFalse(gc) ? EST_CKPT_NONE : EST_CKPT_FULL;
        note(a->used, a->usedlen, "gradient_checkpointing");
        bool reentrant = true;
        if (!cJSON_IsFalse(gc) && !given->non_reentrant) {
            if (reentrant_of(a, &reentrant) < 0) return -1;
            a->run->ckpt_non_reentrant = !reentrant;
        }
    }
    if (has(root, "gradient_checkpointing_kwargs")) note(a->used, a->usedlen, "gradient_checkpointing_kwargs");
    return 0;
}

/* The attention: attn_implementation, or the legacy flags in axolotl's order
 * (schemas/enums.py LEGACY_ATTN_FLAG_TO_IMPL; config.py
 * normalize_attn_implementation refuses both at once). The backends ftest
 * does not model were refused by est_axolotl_unmodelled. */
static int apply_attention(yaml_apply *a) {
    char impl[64] = "";
    if (ft_json_string(a->root, "attn_implementation", impl, sizeof impl, a->err, a->errlen) < 0) return -1;
    static const struct {
        const char *flag, *impl;
    } LEGACY[] = {{"flash_attention", "flash_attention_2"}, {"sdp_attention", "sdpa"},
                  {"eager_attention", "eager"}};
    const char *key = "attn_implementation";
    for (size_t i = 0; i < sizeof LEGACY / sizeof LEGACY[0]; i++) {
        bool on = false;
        if (ft_json_bool(a->root, LEGACY[i].flag, &on, a->err, a->errlen) < 0) return -1;
        if (!on) continue;
        if (!strcmp(key, "attn_implementation") && impl[0])
            return ft_errorf(a->err, a->errlen, "attn_implementation and %s are both set (axolotl refuses it)",
                             LEGACY[i].flag);
        if (strcmp(key, "attn_implementation")) continue; /* the first flag wins */
        ft_strlcpy(impl, LEGACY[i].impl, sizeof impl);
        key = LEGACY[i].flag;
    }
    if (!impl[0] || a->given->attention) return 0;
    if (!strcmp(impl, "eager")) a->run->attention = EST_ATTN_EAGER;
    else if (!strcmp(impl, "sdpa")) a->run->attention = EST_ATTN_SDPA;
    else a->run->attention = EST_ATTN_FLASH; /* flash_attention_2 and its hub kernel */
    note(a->used, a->usedlen, key);
    return 0;
}

/* The padded row length axolotl 0.18.0's collator makes from sequence_len
 * (core/builders/causal.py build_collator: pad_to_multiple_of = m x
 * ceil(sequence_len / m) under pad_to_sequence_len, m = pad_to_multiple_of or
 * 64; unset, batches are padded to their longest in multiples of m, at most
 * that; pad_to_sequence_len: false pads to the longest sample, at most
 * sequence_len). Preference trainers pad to their longest, at most
 * sequence_len (TRL's max_length). */
static int padded_len(yaml_apply *a, int64_t seq, int64_t *out) {
    *out = seq;
    if (has(a->root, "rl")) return 0;
    int64_t multiple = 64;
    if (has(a->root, "pad_to_multiple_of") &&
        ft_json_int64(a->root, "pad_to_multiple_of", 1, EST_MAX_SEQ, &multiple, a->err, a->errlen) < 0)
        return -1;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(a->root, "pad_to_sequence_len");
    if (cJSON_IsFalse(p)) return 0;
    if (p && !cJSON_IsNull(p) && !cJSON_IsTrue(p))
        return ft_errorf(a->err, a->errlen, "pad_to_sequence_len must be true or false");
    *out = (seq + multiple - 1) / multiple * multiple;
    if (has(a->root, "pad_to_sequence_len")) note(a->used, a->usedlen, "pad_to_sequence_len");
    if (has(a->root, "pad_to_multiple_of")) note(a->used, a->usedlen, "pad_to_multiple_of");
    return 0;
}

/* sample_packing (axolotl 0.18.0): MultipackBatchSampler bins samples into
 * rows and V2BatchSamplerDataCollatorForSeq2Seq concatenates each bin, with
 * position_ids restarting at each sample, so a varlen attention keeps the
 * samples apart. With an attention that packs (flash_attention_2: enums.py
 * ATTN_IMPLS_SUPPORTING_PACKING) and multipack_real_batches unset, a
 * micro-batch is one bin of micro_batch_size x sequence_len tokens
 * (core/trainers/base.py _create_multipack_sampler: batch_size 1, batch_max_len
 * = train_batch_size x max_seq_length); with multipack_real_batches, it is
 * micro_batch_size bins of sequence_len. The rows are padded as padded_len
 * says. No sample is longer than sequence_len, which bounds the attention's
 * per-sample span (objective.h). */
static int apply_packing(yaml_apply *a) {
    bool packing = false, real = false, isolate = true;
    if (ft_json_bool(a->root, "sample_packing", &packing, a->err, a->errlen) < 0 ||
        ft_json_bool(a->root, "multipack_real_batches", &real, a->err, a->errlen) < 0 ||
        ft_json_bool(a->root, "pretrain_multipack_attn", &isolate, a->err, a->errlen) < 0)
        return -1;
    const int64_t seq = a->run->seq_len, mbs = a->run->micro_batch;
    /* Streamed pretraining data (utils/data/streaming.py wrap_streaming_dataset):
     * packed, one bin of micro_batch_size x sequence_len padded to a multiple
     * of sequence_len; pretrain_multipack_attn: false keeps one position run
     * over the whole bin (no varlen isolation). */
    const bool pretraining = has(a->root, "pretraining_dataset");
    if (pretraining) real = false;
    int64_t row = seq;
    if (!a->given->seq && !pretraining && padded_len(a, seq, &row) < 0) return -1;
    if (!packing) {
        a->run->seq_len = row;
        return 0;
    }
    a->run->packed = true;
    if (!a->given->packed_sample_len) a->run->packed_sample_len = pretraining && !isolate ? mbs * row : seq;
    if (pretraining) note(a->used, a->usedlen, "pretraining_dataset");
    /* --batch or --seq given: the rows as the flags say them */
    if (real || a->run->attention != EST_ATTN_FLASH || a->given->batch || a->given->seq) {
        a->run->seq_len = row;
    } else {
        a->run->micro_batch = 1;
        a->run->seq_len = mbs * row;
        if (mbs * row > EST_MAX_SEQ)
            return ft_errorf(a->err, a->errlen, "micro_batch_size x sequence_len is above %lld tokens",
                             (long long)EST_MAX_SEQ);
    }
    note(a->used, a->usedlen, "sample_packing");
    if (has(a->root, "multipack_real_batches")) note(a->used, a->usedlen, "multipack_real_batches");
    return 0;
}

/* rl: TRL's trainer (axolotl 0.18.0 core/builders/rl.py; IPO is DPO with
 * another loss), and precompute_ref_log_probs (core/trainers/dpo: passed to
 * DPOConfig). The other trainers were refused by est_axolotl_unmodelled. */
static int apply_rl(yaml_apply *a) {
    char rl[16] = "";
    if (ft_json_string(a->root, "rl", rl, sizeof rl, a->err, a->errlen) < 0) return -1;
    bool pre = false;
    if (ft_json_bool(a->root, "precompute_ref_log_probs", &pre, a->err, a->errlen) < 0) return -1;
    if (!rl[0] || a->given->rl) return 0;
    a->run->rl = !strcmp(rl, "orpo") ? EST_RL_ORPO : !strcmp(rl, "kto") ? EST_RL_KTO : EST_RL_DPO;
    note(a->used, a->usedlen, "rl");
    if (pre && a->run->rl != EST_RL_ORPO) {
        a->run->rl_precomputed_ref = true;
        note(a->used, a->usedlen, "precompute_ref_log_probs");
    }
    return 0;
}

/* LigerPlugin (axolotl integrations/liger/plugin.py pre_model_load, 2026-07;
 * args.py): apply_liger_kernel_to_<model_config_type>(rope=liger_rope,
 * rms_norm=liger_rms_norm, swiglu or geglu=liger_glu_activation (liger_swiglu
 * is its deprecated name), layer_norm=liger_layer_norm, cross_entropy=
 * liger_cross_entropy, fused_linear_cross_entropy=...), each passed as set:
 * an unset key (None) leaves its kernel off. Without the plugin the keys do
 * nothing. layer_norm changes nothing in the models ftest reads (no
 * LayerNorm, and apply_liger_kernel_to_llama takes no such argument). */
static const struct {
    const char *key;
    uint32_t bit; /* 0: the model's GLU kernel */
} LIGER_KEYS[] = {
    {"liger_rope", EST_LIGER_ROPE},
    {"liger_rms_norm", EST_LIGER_RMS_NORM},
    {"liger_glu_activation", 0},
    {"liger_swiglu", 0},
    {"liger_layer_norm", EST_LIGER_LAYER_NORM},
    {"liger_cross_entropy", EST_LIGER_CROSS_ENTROPY},
    {"liger_fused_linear_cross_entropy", EST_LIGER_FLCE},
};

static int apply_liger(yaml_apply *a) {
    const cJSON *plugins = cJSON_GetObjectItemCaseSensitive(a->root, "plugins"), *p;
    bool plugin = false;
    cJSON_ArrayForEach(p, plugins)
        if (cJSON_IsString(p) && p->valuestring && strstr(p->valuestring, "LigerPlugin")) plugin = true;
    if (!plugin) return 0;
    const uint32_t glu = a->run->model.activation == FT_ACT_GELU_TANH ? EST_LIGER_GEGLU : EST_LIGER_SWIGLU;
    uint32_t bits = 0;
    for (size_t i = 0; i < sizeof LIGER_KEYS / sizeof LIGER_KEYS[0]; i++) {
        bool on = false;
        if (ft_json_bool(a->root, LIGER_KEYS[i].key, &on, a->err, a->errlen) < 0) return -1;
        if (!on) continue;
        bits |= LIGER_KEYS[i].bit ? LIGER_KEYS[i].bit : glu;
        note(a->used, a->usedlen, LIGER_KEYS[i].key);
    }
    if (bits && a->run->model.arch == FT_ARCH_QWEN2_MOE)
        return ft_errorf(a->err, a->errlen, "LigerPlugin: Liger-Kernel has no apply_liger_kernel_to_qwen2_moe "
                                            "(MODEL_TYPE_TO_APPLY_LIGER_FN, v0.8.2)");
    a->run->liger = bits & ~EST_LIGER_FLCE;
    if ((bits & EST_LIGER_FLCE) && !a->given->loss) a->run->loss = EST_LOSS_CHUNKED;
    return 0;
}

/* torch_compile: true, or "auto" (axolotl 0.18 schemas/config.py
 * check_torch_compile_auto: true from torch 2.5.1 on, here the stack's
 * torch): the HF Trainer compiles the model with inductor (compile.h). */
static int apply_compile(yaml_apply *a) {
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(a->root, "torch_compile");
    if (!tc || cJSON_IsNull(tc) || cJSON_IsFalse(tc)) return 0;
    bool on = cJSON_IsTrue(tc);
    if (cJSON_IsString(tc) && tc->valuestring && !strcmp(tc->valuestring, "auto")) {
        int major = 0, minor = 0, patch = 0;
        const char *v = a->run->stack && a->run->stack->torch ? a->run->stack->torch : "";
        if (sscanf(v, "%d.%d.%d", &major, &minor, &patch) < 2) return 0;
        on = major > 2 || (major == 2 && (minor > 5 || (minor == 5 && patch >= 1)));
    } else if (!cJSON_IsBool(tc)) {
        return ft_errorf(a->err, a->errlen, "torch_compile must be true, false or auto");
    }
    a->run->compiled = on;
    note(a->used, a->usedlen, "torch_compile");
    return 0;
}

/* model_config: output_router_logits adds the router logits and the
 * load-balancing loss of an MoE model (the only override ftest models). */
static int apply_overrides(yaml_apply *a) {
    const cJSON *mc = cJSON_GetObjectItemCaseSensitive(a->root, "model_config");
    if (!mc || cJSON_IsNull(mc)) return 0;
    if (!cJSON_IsObject(mc)) return ft_errorf(a->err, a->errlen, "model_config must be a mapping");
    bool router = false;
    if (ft_json_bool(mc, "output_router_logits", &router, a->err, a->errlen) < 0) return -1;
    if (router && a->run->model.num_experts > 0) a->run->model.output_router_logits = true;
    note(a->used, a->usedlen, "model_config");
    return 0;
}

/* unfrozen_parameters: partial training (axolotl_unfrozen.c). */
static int apply_unfrozen(yaml_apply *a) {
    bool set = false;
    if (est_axolotl_unfrozen(a->root, a->given, a->run, &set, a->err, a->errlen) < 0) return -1;
    if (set) note(a->used, a->usedlen, "unfrozen_parameters");
    return 0;
}

/* Framework: DeepSpeed (its config as given or beside the YAML), FSDP or the
 * plain Trainer, unless --framework was given. */
static int apply_framework(yaml_apply *a, const char *yaml_path) {
    const cJSON *root = a->root;
    est_run *run = a->run;
    if (a->given->framework) return 0;
    char ds[1024] = "";
    if (ft_json_string(root, "deepspeed", ds, sizeof ds, a->err, a->errlen) < 0) return -1;
    bool fsdp = (has(root, "fsdp") && !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(root, "fsdp"))) ||
                has(root, "fsdp_config");
    if (ds[0] && fsdp) return ft_errorf(a->err, a->errlen, "deepspeed and fsdp are both set");
    if (ds[0]) {
        if (!a->given->ds_config) {
            char path[1100];
            ft_strlcpy(path, ds, sizeof path);
            if (access(path, R_OK) != 0) beside(yaml_path, ds, path, sizeof path);
            if (est_ds_config_load(path, run, a->err, a->errlen) < 0) return -1;
        }
        run->framework = EST_FW_DEEPSPEED;
        note(a->used, a->usedlen, "deepspeed");
    } else if (fsdp) {
        if (est_axolotl_fsdp(root, a->given, run, a->err, a->errlen) < 0) return -1;
        note(a->used, a->usedlen, has(root, "fsdp_config") ? "fsdp_config" : "fsdp");
    } else {
        run->framework = EST_FW_HF;
    }
    return 0;
}

/* Precision, once the framework is known. axolotl loads the model in bf16
 * (bf16 or bfloat16; "auto" is true on every GPU with bf16) or fp16
 * (utils/config resolve_dtype) and the Trainer runs autocast in it. With an
 * adapter that is ftest's bf16-mixed (fp32 adapters, PEFT autocast). A full
 * fine-tune keeps bf16 weights and state under the plain Trainer (bf16);
 * DeepSpeed keeps fp32 master partitions (bf16-mixed); FSDP gets a
 * MixedPrecision policy over bf16-loaded weights (bf16-mixed, --load-dtype
 * bf16), which accelerate may upcast (docs/usage.md, FSDP). */
static int apply_precision(yaml_apply *a) {
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(a->root, "bf16");
    bool bf16_auto = cJSON_IsString(b) && b->valuestring && !strcmp(b->valuestring, "auto");
    bool bf16 = false, fp16 = false, bfloat16 = false, float16 = false;
    if ((!bf16_auto && ft_json_bool(a->root, "bf16", &bf16, a->err, a->errlen) < 0) ||
        ft_json_bool(a->root, "fp16", &fp16, a->err, a->errlen) < 0 ||
        ft_json_bool(a->root, "bfloat16", &bfloat16, a->err, a->errlen) < 0 ||
        ft_json_bool(a->root, "float16", &float16, a->err, a->errlen) < 0)
        return -1;
    fp16 = fp16 || float16;
    /* resolve_dtype: bf16 "auto" yields to fp16: true. */
    bf16 = bf16 || bfloat16 || (bf16_auto && !fp16);
    if (bf16 && fp16) return ft_errorf(a->err, a->errlen, "bf16 and fp16 are both set");
    if (a->given->precision || !(bf16 || fp16 || has(a->root, "bf16") || has(a->root, "fp16"))) return 0;
    const est_framework fw = a->run->framework;
    if (bf16) {
        a->run->precision = a->adapter[0] || fw != EST_FW_HF ? EST_PREC_BF16_MIXED : EST_PREC_BF16;
        if (!a->adapter[0] && fw == EST_FW_FSDP && !a->given->load_dtype) a->run->load_dtype = EST_LOAD_BF16;
    } else if (fp16 && (a->adapter[0] || fw == EST_FW_DEEPSPEED)) {
        a->run->precision = EST_PREC_FP16_MIXED;
    } else if (fp16) {
        return ft_errorf(a->err, a->errlen, "not modelled (axolotl %s): a full fine-tune in fp16 weights "
                                            "(fp16: true); pass --precision fp16-mixed or use bf16",
                         EST_AXOLOTL_VERSION);
    } else {
        a->run->precision = EST_PREC_FP32;
    }
    note(a->used, a->usedlen, bf16 ? (bfloat16 ? "bfloat16" : "bf16") : fp16 ? "fp16" : "bf16");
    return 0;
}

/* fp8: true (axolotl core/trainers/base.py additional_accelerator_args:
 * accelerate's AORecipeKwargs(Float8LinearConfig()), torchao's default
 * tensorwise recipe; loaders/patch_manager.py also keeps MoE routers out).
 * --fp8 given wins. */
static int apply_fp8(yaml_apply *a) {
    bool fp8 = false, all_gather = false;
    if (ft_json_bool(a->root, "fp8", &fp8, a->err, a->errlen) < 0 ||
        ft_json_bool(a->root, "fp8_enable_fsdp_float8_all_gather", &all_gather, a->err, a->errlen) < 0)
        return -1;
    if (!fp8 || a->given->fp8) return 0;
    a->run->fp8 = EST_FP8_TENSORWISE;
    note(a->used, a->usedlen, "fp8");
    if (all_gather) { /* Float8LinearConfig(enable_fsdp_float8_all_gather=...) */
        a->run->fp8_all_gather = true;
        note(a->used, a->usedlen, "fp8_enable_fsdp_float8_all_gather");
    }
    return 0;
}

int est_axolotl_apply(const cJSON *root, const char *yaml_path, const est_given *given, est_run *run,
                      char *used, size_t usedlen, char *err, size_t errlen) {
    used[0] = '\0';
    if (est_axolotl_unmodelled(root, err, errlen) < 0) return -1;
    if (!given->model && has(root, "base_model")) note(used, usedlen, "base_model");
    yaml_apply a = {.root = root, .given = given, .run = run, .used = used, .usedlen = usedlen,
                    .err = err, .errlen = errlen};
    if (read_adapter(&a) < 0 || apply_lora(&a) < 0 || apply_quant(&a) < 0 ||
        apply_batch_and_seq(&a) < 0 || apply_optimizer_and_checkpointing(&a) < 0 ||
        apply_attention(&a) < 0 || apply_packing(&a) < 0 || apply_rl(&a) < 0 || apply_liger(&a) < 0 || apply_overrides(&a) < 0 ||
        apply_unfrozen(&a) < 0 ||
        apply_framework(&a, yaml_path) < 0 || apply_precision(&a) < 0 || apply_fp8(&a) < 0 ||
        est_axolotl_kernels(root, given, run, used, usedlen, err, errlen) < 0)
        return -1;
    if (apply_compile(&a) < 0) return -1;
    note_checked(root, used, usedlen);
    est_axolotl_unused(root, run->settings_ignored, sizeof run->settings_ignored, run->settings_unknown,
                       sizeof run->settings_unknown);
    return 0;
}
