#include "torchtune.h"

#include <stdio.h>
#include <string.h>

#include "fw_registry.h"
#include "json_util.h"
#include "lora.h"
#include "torchtune_keys.h"
#include "yaml_json.h"

cJSON *est_torchtune_load(const char *path, char *err, size_t errlen) {
    cJSON *root = est_yaml_load(path, err, errlen);
    if (root && est_torchtune_keys_check(root, err, errlen) < 0) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

static const char *const RECIPES[] = {"full_finetune_distributed", "lora_finetune_distributed",
                                      "full_finetune_single_device", "lora_finetune_single_device"};

const char *est_torchtune_recipe_name(est_tt_recipe r) { return RECIPES[r]; }

static bool ends_with(const char *s, size_t n, const char *tail) {
    size_t k = strlen(tail);
    return n >= k && !strncmp(s + n - k, tail, k);
}

/* torchtune/_recipe_registry.py (v0.6.1) pairs each shipped config with its
 * recipe by this naming: *_full_single_device and *_full_low_memory with
 * full_finetune_single_device; *_lora_single_device and *_qlora_single_device
 * with lora_finetune_single_device; *_full and *_full_multinode with
 * full_finetune_distributed; *_lora, *_qlora and *_dora with
 * lora_finetune_distributed (and *_dora_single_device, *_qdora_single_device
 * with the single-device one). Other names (dpo, ppo, qat, KD, generation,
 * evaluation) belong to recipes ftest does not model. */
int est_torchtune_recipe(const char *path, const char *name, est_tt_recipe *out, char *err, size_t errlen) {
    if (name && name[0]) {
        for (int i = 0; i < 4; i++)
            if (!strcmp(name, RECIPES[i])) {
                *out = (est_tt_recipe)i;
                return 0;
            }
        return ft_errorf(err, errlen, "not modelled (torchtune %s): recipe %.60s (ftest reads %s, %s, %s and %s)",
                         EST_TORCHTUNE_VERSION, name, RECIPES[0], RECIPES[1], RECIPES[2], RECIPES[3]);
    }
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    if (ends_with(base, n, ".yaml")) n -= 5;
    else if (ends_with(base, n, ".yml")) n -= 4;
    if (ends_with(base, n, "_qat_lora") || ends_with(base, n, "_qat_full")) n = 0; /* qat_*_distributed */
    static const struct {
        const char *tail;
        est_tt_recipe r;
    } BY_NAME[] = {
        {"_full_single_device", EST_TT_FULL_SINGLE},  {"_full_low_memory", EST_TT_FULL_SINGLE},
        {"_lora_single_device", EST_TT_LORA_SINGLE},  {"_dora_single_device", EST_TT_LORA_SINGLE},
        {"_full", EST_TT_FULL_DISTRIBUTED},           {"_full_multinode", EST_TT_FULL_DISTRIBUTED},
        {"_lora", EST_TT_LORA_DISTRIBUTED},           {"_qlora", EST_TT_LORA_DISTRIBUTED},
        {"_dora", EST_TT_LORA_DISTRIBUTED},           {"_qlora_single_device", EST_TT_LORA_SINGLE},
        {"_qdora_single_device", EST_TT_LORA_SINGLE},
    };
    for (size_t i = 0; i < sizeof BY_NAME / sizeof BY_NAME[0]; i++)
        if (ends_with(base, n, BY_NAME[i].tail)) {
            *out = BY_NAME[i].r;
            return 0;
        }
    return ft_errorf(err, errlen, "%.80s: the file name names no recipe torchtune pairs it with; give "
                                  "--torchtune-recipe (%s, %s, %s or %s)",
                     base, RECIPES[0], RECIPES[1], RECIPES[2], RECIPES[3]);
}

/* torchtune's model builders (torchtune/models/<family>/_model_builders.py,
 * v0.6.1) and the shipped model of the same architecture (models/NAME.json); a
 * lora_ or qlora_ builder builds its base's architecture. */
static const struct {
    const char *builder, *model;
} BUILDERS[] = {
    {"llama2_7b", "llama2-7b"},         {"llama2_13b", "llama2-13b"},     {"llama2_70b", "llama2-70b"},
    {"llama3_8b", "llama3-8b"},         {"llama3_70b", "llama3-70b"},     {"llama3_1_8b", "llama3.1-8b"},
    {"llama3_1_70b", "llama3.1-70b"},   {"llama3_1_405b", "llama3.1-405b"}, {"llama3_2_1b", "llama3.2-1b"},
    {"llama3_2_3b", "llama3.2-3b"},     {"llama3_3_70b", "llama3.3-70b"}, {"mistral_7b", "mistral-7b"},
    {"gemma_2b", "gemma-2b"},           {"gemma_7b", "gemma-7b"},         {"gemma2_9b", "gemma2-9b"},
    {"qwen2_7b", "qwen2-7b"},           {"qwen2_5_0_5b", "qwen2.5-0.5b"}, {"qwen2_5_7b_base", "qwen2.5-7b"},
    {"qwen2_5_7b_instruct", "qwen2.5-7b"}, {"phi3_mini", "phi3-mini"},
};

/* model._component_'s builder name without its module path and LoRA prefix;
 * *q set for a qlora_ builder (quantize_base=True). */
static int builder_of(const cJSON *root, char *name, size_t n, bool *q, bool *lora, char *err, size_t errlen) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    char comp[160] = "";
    if (!cJSON_IsObject(model)) return ft_errorf(err, errlen, "the config has no model: mapping");
    if (ft_json_string(model, "_component_", comp, sizeof comp, err, errlen) <= 0)
        return comp[0] ? -1 : ft_errorf(err, errlen, "model._component_ must name a torchtune model builder");
    const char *b = strrchr(comp, '.');
    b = b ? b + 1 : comp;
    *q = !strncmp(b, "qlora_", 6);
    *lora = *q || !strncmp(b, "lora_", 5);
    ft_strlcpy(name, b + (*q ? 6 : *lora ? 5 : 0), n);
    return 0;
}

int est_torchtune_model(const cJSON *root, char *out, size_t outlen, char *err, size_t errlen) {
    char name[160];
    bool q, lora;
    if (builder_of(root, name, sizeof name, &q, &lora, err, errlen) < 0) return -1;
    for (size_t i = 0; i < sizeof BUILDERS / sizeof BUILDERS[0]; i++)
        if (!strcmp(name, BUILDERS[i].builder)) {
            ft_strlcpy(out, BUILDERS[i].model, outlen);
            return 0;
        }
    return ft_errorf(err, errlen, "model._component_ builds %.60s, which ftest has no model of; pass --model "
                                  "(a shipped model or a config.json of the same architecture)",
                     name);
}

static void note(char *used, size_t n, const char *key) {
    size_t len = strlen(used);
    snprintf(used + len, n - len, "%s%s", len ? ", " : "", key);
}

/* A bool key of `sec`: 1 read, 0 absent/null (out untouched), -1. */
static int flag(const cJSON *sec, const char *key, bool *out, char *err, size_t errlen) {
    return ft_json_bool(sec, key, out, err, errlen);
}

/* custom_sharded_layers: the recipes' shard conditions (training.get_shard_conditions,
 * v0.6.1 _distributed.py) shard a module whose name's last component is listed,
 * besides every decoder layer: ftest models the stock lists, the embedding
 * (tok_embeddings) and the output projection (output), both or neither: their
 * own FSDP2 units (seam_fsdp_ends.c). A tied output (TiedLinear) is no module
 * and has no unit; the name matches nothing in it. */
static int apply_sharded_layers(const cJSON *root, const est_given *given, est_run *run, char *used, size_t n,
                                char *err, size_t errlen) {
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(root, "custom_sharded_layers"), *e;
    if (!l || cJSON_IsNull(l)) return 0;
    if (!cJSON_IsArray(l)) return ft_errorf(err, errlen, "custom_sharded_layers must be a list of module names");
    bool embed = false, out = false;
    cJSON_ArrayForEach(e, l) {
        if (!cJSON_IsString(e)) return ft_errorf(err, errlen, "custom_sharded_layers must be a list of module names");
        if (!strcmp(e->valuestring, "tok_embeddings")) embed = true;
        else if (!strcmp(e->valuestring, "output")) out = true;
        else return ft_errorf(err, errlen, "not modelled (torchtune %s): custom_sharded_layers %.40s (ftest models "
                                           "tok_embeddings and output)", EST_TORCHTUNE_VERSION, e->valuestring);
    }
    if (embed != out)
        return ft_errorf(err, errlen, "not modelled (torchtune %s): custom_sharded_layers with one of tok_embeddings "
                                      "and output (ftest models both or neither)", EST_TORCHTUNE_VERSION);
    if (embed && !given->fsdp_shard_ends) run->fsdp_shard_ends = true;
    if (embed) note(used, n, "custom_sharded_layers");
    return 0;
}

/* The recipe's framework and dtype (recipes' __init__: training.get_dtype(cfg.dtype),
 * float16 refused by every recipe; device must be cuda). */
static int apply_recipe(const cJSON *root, est_tt_recipe recipe, const est_given *given, est_run *run,
                        char *used, size_t n, char *err, size_t errlen) {
    char s[32] = "cuda";
    if (ft_json_string(root, "device", s, sizeof s, err, errlen) < 0) return -1;
    if (strcmp(s, "cuda")) return ft_errorf(err, errlen, "not modelled (torchtune %s): device %s (CUDA only)",
                                            EST_TORCHTUNE_VERSION, s);
    ft_strlcpy(s, "fp32", sizeof s);
    if (ft_json_string(root, "dtype", s, sizeof s, err, errlen) < 0) return -1;
    if (strcmp(s, "bf16") && strcmp(s, "fp32"))
        return ft_errorf(err, errlen, "dtype must be bf16 or fp32 (torchtune %s refuses fp16 training)",
                         EST_TORCHTUNE_VERSION);
    if (!given->precision) run->precision = strcmp(s, "bf16") ? EST_PREC_FP32 : EST_PREC_BF16;
    note(used, n, "dtype");
    const bool dist = recipe == EST_TT_FULL_DISTRIBUTED || recipe == EST_TT_LORA_DISTRIBUTED;
    if (!given->framework) run->framework = dist ? EST_FW_FSDP : est_fw_trainer();
    if (!given->attention) run->attention = EST_ATTN_SDPA; /* modules/attention_utils.py _sdpa_or_flex_attention */
    if (!dist) {
        if (!given->gpus) run->gpus_per_node = 1;
        if (!given->nodes) run->nodes = 1;
        return 0;
    }
    if (!given->fsdp_version) run->fsdp_version = EST_FSDP2;
    bool reshard = true, offload = false;
    if (flag(root, "fsdp_reshard_after_forward", &reshard, err, errlen) > 0) note(used, n, "fsdp_reshard_after_forward");
    if (flag(root, "fsdp_cpu_offload", &offload, err, errlen) > 0) note(used, n, "fsdp_cpu_offload");
    /* FULL_SHARD (resharded after forward) or SHARD_GRAD_OP; CPUOffloadPolicy
     * keeps the shards, gradients and optimizer step on the host */
    if (!given->zero) run->zero_stage = reshard ? 3 : 2;
    if (!given->offload) run->offload = offload ? EST_OFFLOAD_OPTIMIZER_PARAMS : EST_OFFLOAD_NONE;
    run->fsdp_lora_wrap = EST_FSDP_LORA_WRAP_LAYER; /* the adapters live inside each layer's unit */
    return apply_sharded_layers(root, given, run, used, n, err, errlen);
}

/* dataset.packed (v0.6.1): each dataset builder wraps its rows in a
 * PackedDataset (datasets/_packed.py), which packs whole samples into rows of
 * tokenizer.max_seq_len, pads each row to exactly that length (_pad_pack) and
 * records the samples' lengths; the recipe's collate is padded_collate_packed,
 * whose mask is packed_block_causal_mask (modules/attention_utils.py): a
 * flex_attention BlockMask (create_block_mask over causal & same-document, in
 * 128 x 128 blocks) on a GPU of compute capability 7.5 or more (every GPU in
 * ftest's catalog), and the attention call (_sdpa_or_flex_attention) runs the
 * compiled flex_attention on it. A list of datasets (ConcatDataset) is packed
 * when all are and refuses a mix. */
static int apply_packed(const cJSON *root, bool *packed, char *err, size_t errlen) {
    const cJSON *ds = cJSON_GetObjectItemCaseSensitive(root, "dataset"), *e;
    *packed = false;
    if (cJSON_IsObject(ds)) return flag(ds, "packed", packed, err, errlen) < 0 ? -1 : 0;
    if (!cJSON_IsArray(ds)) return 0;
    int n = 0, yes = 0;
    cJSON_ArrayForEach(e, ds) {
        bool p = false;
        if (flag(e, "packed", &p, err, errlen) < 0) return -1;
        n++, yes += p;
    }
    if (yes > 0 && yes < n)
        return ft_errorf(err, errlen, "dataset lists packed and unpacked datasets (torchtune's ConcatDataset "
                                      "refuses the mix)");
    *packed = n > 0 && yes == n;
    return 0;
}

/* batch_size, gradient_accumulation_steps, tokenizer.max_seq_len, dataset.packed. */
static int apply_batch(const cJSON *root, const est_given *given, est_run *run, char *used, size_t n, char *err,
                       size_t errlen) {
    int64_t v;
    int r = ft_json_int64(root, "batch_size", 1, 1 << 20, &v, err, errlen);
    if (r < 0) return -1;
    if (r > 0 && !given->batch) run->micro_batch = v, note(used, n, "batch_size");
    if ((r = ft_json_int64(root, "gradient_accumulation_steps", 1, 1 << 20, &v, err, errlen)) < 0) return -1;
    if (r > 0 && !given->grad_accum) run->grad_accum = v, note(used, n, "gradient_accumulation_steps");
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(root, "tokenizer");
    r = cJSON_IsObject(tok) ? ft_json_int64(tok, "max_seq_len", 1, 1 << 24, &v, err, errlen) : 0;
    if (r < 0) return -1;
    if (r > 0 && !given->seq) run->seq_len = v, note(used, n, "tokenizer.max_seq_len");
    /* padded_collate_sft pads each batch to its longest sample: with no cap the
     * length is the data's, which the config does not say */
    bool packed = false;
    if (apply_packed(root, &packed, err, errlen) < 0) return -1;
    if (r == 0 && !given->seq)
        return ft_errorf(err, errlen, packed ? "tokenizer.max_seq_len is null: PackedDataset needs it (the length "
                                               "each pack is padded to); give --seq N (that length)"
                                             : "tokenizer.max_seq_len is null: each batch is as long as its longest "
                                               "sample; give --seq N (that length)");
    if (packed) {
        run->packed = run->packed_flex = true;
        note(used, n, "dataset.packed");
    }
    return 0;
}

/* optimizer._component_ (config.instantiate) and its fused/foreach. */
static int apply_optimizer(const cJSON *root, const est_given *given, est_run *run, char *used, size_t n,
                           char *err, size_t errlen) {
    const cJSON *opt = cJSON_GetObjectItemCaseSensitive(root, "optimizer");
    char comp[96] = "";
    if (!cJSON_IsObject(opt) || ft_json_string(opt, "_component_", comp, sizeof comp, err, errlen) <= 0)
        return comp[0] ? -1 : ft_errorf(err, errlen, "optimizer._component_ must name the optimizer class");
    static const struct {
        const char *comp;
        est_optimizer opt;
    } MAP[] = {
        {"torch.optim.AdamW", EST_OPT_ADAMW},
        {"torch.optim.SGD", EST_OPT_SGD},
        {"bitsandbytes.optim.PagedAdamW8bit", EST_OPT_PAGED_ADAMW_8BIT},
        {"bitsandbytes.optim.PagedAdamW", EST_OPT_PAGED_ADAMW_32BIT},
        {"bitsandbytes.optim.PagedAdamW32bit", EST_OPT_PAGED_ADAMW_32BIT},
        {"bitsandbytes.optim.AdamW8bit", EST_OPT_ADAMW_8BIT},
    };
    size_t i = 0;
    while (i < sizeof MAP / sizeof MAP[0] && strcmp(comp, MAP[i].comp)) i++;
    if (i == sizeof MAP / sizeof MAP[0])
        return ft_errorf(err, errlen, "not modelled (torchtune %s): optimizer %.60s (torch.optim.AdamW, SGD, "
                                      "bitsandbytes PagedAdamW8bit, PagedAdamW, AdamW8bit)", EST_TORCHTUNE_VERSION, comp);
    if (given->optimizer) return 0;
    run->optimizer = MAP[i].opt;
    note(used, n, "optimizer");
    bool fused = false, foreach = true;
    if (flag(opt, "fused", &fused, err, errlen) < 0 || flag(opt, "foreach", &foreach, err, errlen) < 0) return -1;
    if (run->optimizer == EST_OPT_ADAMW) /* torch 2.x AdamW: fused when asked, else foreach on CUDA */
        run->adamw_impl = fused ? EST_ADAMW_FUSED : foreach ? EST_ADAMW_FOREACH : EST_ADAMW_DEFAULT;
    if (run->optimizer == EST_OPT_ADAMW && !fused && !foreach)
        return ft_errorf(err, errlen, "not modelled (torchtune %s): AdamW's for-loop implementation (foreach: "
                                      "false)", EST_TORCHTUNE_VERSION);
    return 0;
}

/* loss._component_: CEWithChunkedOutputLoss (modules/loss/ce_chunked_output_loss.py):
 * the model's output projection runs on 8 chunks of the hidden states
 * (TransformerDecoder.set_num_output_chunks), keeping 8 bf16 logit chunks, and
 * each chunk is upcast to fp32 for its cross-entropy (loss.h's chunked output). */
static int apply_loss(const cJSON *root, const est_given *given, est_run *run, char *used, size_t n, char *err,
                      size_t errlen) {
    const cJSON *loss = cJSON_GetObjectItemCaseSensitive(root, "loss");
    char comp[96] = "";
    if (!cJSON_IsObject(loss) || ft_json_string(loss, "_component_", comp, sizeof comp, err, errlen) <= 0)
        return comp[0] ? -1 : ft_errorf(err, errlen, "loss._component_ must name the loss class");
    if (strcmp(comp, "torchtune.modules.loss.CEWithChunkedOutputLoss"))
        return ft_errorf(err, errlen, "not modelled (torchtune %s): loss %.60s (ftest models "
                                      "CEWithChunkedOutputLoss)", EST_TORCHTUNE_VERSION, comp);
    if (!given->loss) run->loss = EST_LOSS_CHUNKED_OUTPUT, note(used, n, "loss");
    return 0;
}

/* enable_activation_checkpointing (training.set_activation_checkpointing:
 * checkpoint_wrapper, non-reentrant, on every TransformerSelfAttentionLayer),
 * enable_activation_offloading, compile, optimizer_in_bwd (the full recipes
 * read it; the LoRA ones do not). */
static int apply_step(const cJSON *root, est_tt_recipe recipe, const est_given *given, est_run *run, char *used,
                      size_t n, char *err, size_t errlen) {
    bool ckpt = false, off = false, comp = false, inbwd = false;
    int r = flag(root, "enable_activation_checkpointing", &ckpt, err, errlen);
    if (r < 0) return -1;
    if (!given->checkpointing) {
        run->checkpointing = ckpt ? EST_CKPT_FULL : EST_CKPT_NONE;
        run->ckpt_non_reentrant = ckpt;
        if (r > 0) note(used, n, "enable_activation_checkpointing");
    }
    if ((r = flag(root, "enable_activation_offloading", &off, err, errlen)) < 0) return -1;
    if (off) run->activation_offload = true;
    if (r > 0) note(used, n, "enable_activation_offloading");
    if ((r = flag(root, "compile", &comp, err, errlen)) < 0) return -1;
    if (comp) run->compiled = true;
    if (r > 0) note(used, n, "compile");
    if (recipe == EST_TT_LORA_DISTRIBUTED || recipe == EST_TT_LORA_SINGLE) return 0;
    if ((r = flag(root, "optimizer_in_bwd", &inbwd, err, errlen)) < 0) return -1;
    if (inbwd) run->optimizer_in_backward = true;
    if (r > 0) note(used, n, "optimizer_in_bwd");
    return 0;
}

/* lora_attn_modules (q_proj, k_proj, v_proj, output_proj) and apply_lora_to_mlp
 * (w1, w2, w3: gate, down, up) as ftest's target bits. */
static int targets_of(const cJSON *model, uint32_t *out, char *err, size_t errlen) {
    static const char *const TT[] = {"q_proj", "k_proj", "v_proj", "output_proj"}, *const OURS[] = {"q", "k", "v", "o"};
    char list[64] = "";
    const cJSON *mods = cJSON_GetObjectItemCaseSensitive(model, "lora_attn_modules"), *e;
    if (!cJSON_IsArray(mods)) return ft_errorf(err, errlen, "model.lora_attn_modules must list q_proj, k_proj, "
                                                            "v_proj or output_proj");
    cJSON_ArrayForEach(e, mods) {
        size_t i = 0;
        while (i < 4 && !(cJSON_IsString(e) && !strcmp(e->valuestring, TT[i]))) i++;
        if (i == 4) return ft_errorf(err, errlen, "model.lora_attn_modules must list q_proj, k_proj, v_proj or "
                                                  "output_proj");
        note(list, sizeof list, OURS[i]);
    }
    bool mlp = false;
    if (flag(model, "apply_lora_to_mlp", &mlp, err, errlen) < 0) return -1;
    if (mlp) note(list, sizeof list, "gate, up, down");
    char compact[64];
    size_t k = 0;
    for (const char *p = list; *p && k + 1 < sizeof compact; p++)
        if (*p != ' ') compact[k++] = *p;
    compact[k] = '\0';
    if (!compact[0]) return ft_errorf(err, errlen, "model.lora_attn_modules is empty and apply_lora_to_mlp false");
    return est_lora_targets_parse(compact, out, err, errlen);
}

/* The LoRA builder's arguments (models/llama3_1/_model_builders.py
 * lora_llama3_1_8b; modules/peft/lora.py LoRALinear: lora_a, lora_b built
 * under set_default_dtype(dtype), so bf16 adapters in a bf16 run; dropout an
 * nn.Identity at 0). qlora_* builders are quantize_base=True: the frozen
 * base Linears become torchao NF4Tensor (block 64, int8 scalers per block,
 * one scale per 256 blocks: dtypes/nf4tensor.py), the bytes of bnb's NF4 with
 * double quantization to within 2 bytes per 16384 weights. */
static int apply_lora(const cJSON *root, est_tt_recipe recipe, const est_given *given, est_run *run, char *used,
                      size_t n, char *err, size_t errlen) {
    char name[160];
    bool q, lora, dora = false, qb = false;
    if (builder_of(root, name, sizeof name, &q, &lora, err, errlen) < 0) return -1;
    const bool lora_recipe = recipe == EST_TT_LORA_DISTRIBUTED || recipe == EST_TT_LORA_SINGLE;
    if (lora != lora_recipe)
        return ft_errorf(err, errlen, "model._component_ %s a LoRA builder but the recipe is %s", lora ? "is" : "is not",
                         RECIPES[recipe]);
    if (!lora) return 0;
    run->lora.base_dtype = true;
    if (given->lora_rank) return 0;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    int64_t rank = 0;
    double alpha = 0, dropout = 0;
    if (ft_json_int64(model, "lora_rank", 1, 1 << 16, &rank, err, errlen) <= 0)
        return rank ? -1 : ft_errorf(err, errlen, "model.lora_rank must be a whole number above 0");
    if (ft_json_double(model, "lora_alpha", 0, 1e9, &alpha, err, errlen) < 0 ||
        ft_json_double(model, "lora_dropout", 0, 1, &dropout, err, errlen) < 0 ||
        flag(model, "use_dora", &dora, err, errlen) < 0 || flag(model, "quantize_base", &qb, err, errlen) < 0)
        return -1;
    run->lora.rank = rank;
    if (!given->lora_alpha && alpha > 0) run->lora.alpha = alpha;
    if (!given->lora_dropout) run->lora.dropout = dropout;
    if (!given->lora_targets && targets_of(model, &run->lora.targets, err, errlen) < 0) return -1;
    if (dora) run->lora.variant = EST_LORA_DORA;
    note(used, n, "model (LoRA)");
    if (!(q || qb) || given->quant) return 0;
    if (recipe == EST_TT_LORA_SINGLE)
        return ft_errorf(err, errlen, "not modelled (torchtune %s): QLoRA on one device (torchao NF4 in pure bf16 "
                                      "outside FSDP; ftest models pure-bf16 NF4 only under FSDP)",
                         EST_TORCHTUNE_VERSION);
    run->quant = EST_QUANT_NF4;
    run->double_quant = true;
    run->quant_compute = EST_CDT_BF16; /* LinearNF4: weight.to(input.dtype) */
    return 0;
}

int est_torchtune_apply(const cJSON *root, est_tt_recipe recipe, const est_given *given, est_run *run,
                        char *used, size_t usedlen, char *err, size_t errlen) {
    used[0] = '\0';
    if (apply_recipe(root, recipe, given, run, used, usedlen, err, errlen) < 0 ||
        apply_batch(root, given, run, used, usedlen, err, errlen) < 0 ||
        apply_optimizer(root, given, run, used, usedlen, err, errlen) < 0 ||
        apply_loss(root, given, run, used, usedlen, err, errlen) < 0 ||
        apply_step(root, recipe, given, run, used, usedlen, err, errlen) < 0 ||
        apply_lora(root, recipe, given, run, used, usedlen, err, errlen) < 0)
        return -1;
    return 0;
}
