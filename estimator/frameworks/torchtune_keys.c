#include "torchtune_keys.h"

#include <stdio.h>
#include <string.h>

#include "json_util.h"

typedef enum {
    TT_READ,    /* torchtune.c applies or checks it */
    TT_INERT,   /* no byte or second of the step depends on it */
    TT_DEFAULT, /* refused at any value but the recipe's default (`def`) */
} tt_kind;

typedef struct {
    const char *section; /* "" for the top level; key "*": every key of that section */
    const char *key;
    tt_kind kind;
    const char *def; /* TT_DEFAULT: "false", "null", "[]", or a number */
    const char *why; /* inert: why nothing moves; default only: what is not modelled */
} tt_key;

/* ======================================================================
 * THE TABLE (torchtune v0.6.1). The recipes' reads: `cfg.get(KEY, DEFAULT)`
 * and `cfg.KEY` in recipes/{full,lora}_finetune_{distributed,single_device}.py;
 * the model builders' keyword arguments in torchtune/models/llama3_1/
 * _model_builders.py (lora_llama3_1_8b: lora_attn_modules, apply_lora_to_mlp,
 * apply_lora_to_output, lora_rank, lora_alpha, lora_dropout, use_dora,
 * quantize_base); CEWithChunkedOutputLoss(num_output_chunks=8, ignore_index)
 * in torchtune/modules/loss/ce_chunked_output_loss.py.
 * ====================================================================== */
static const tt_key KEYS[] = {
    {"", "model", TT_READ, NULL, NULL},
    {"", "tokenizer", TT_READ, NULL, NULL},
    {"", "dataset", TT_READ, NULL, NULL},
    {"", "optimizer", TT_READ, NULL, NULL},
    {"", "loss", TT_READ, NULL, NULL},
    {"", "batch_size", TT_READ, NULL, NULL},
    {"", "gradient_accumulation_steps", TT_READ, NULL, NULL},
    {"", "dtype", TT_READ, NULL, NULL},
    {"", "device", TT_READ, NULL, NULL},
    {"", "enable_activation_checkpointing", TT_READ, NULL, NULL},
    {"", "enable_activation_offloading", TT_READ, NULL, NULL},
    {"", "compile", TT_READ, NULL, NULL},
    {"", "optimizer_in_bwd", TT_READ, NULL, NULL},
    {"", "fsdp_cpu_offload", TT_READ, NULL, NULL},
    {"", "fsdp_reshard_after_forward", TT_READ, NULL, NULL},
    {"", "custom_sharded_layers", TT_READ, NULL, NULL},
    {"", "tensor_parallel_dim", TT_DEFAULT, "1", "tensor parallelism (tensor_parallel_dim above 1)"},
    {"", "tensor_parallel_plan", TT_INERT, NULL, "read only with tensor_parallel_dim above 1"},
    {"", "ac_mode", TT_DEFAULT, "null", "selective activation checkpointing (ac_mode)"},
    {"", "ac_option", TT_DEFAULT, "null", "selective activation checkpointing (ac_option)"},
    {"", "collate_fn", TT_DEFAULT, "torchtune.data.padded_collate_sft", "a collate function other than padded_collate_sft"},
    {"", "clip_grad_norm", TT_INERT, NULL, "one norm over the gradients after backward: a scalar per tensor"},
    {"", "output_dir", TT_INERT, NULL, "where checkpoints go"},
    {"", "checkpointer", TT_INERT, NULL, "checkpoint files; the model is model._component_'s"},
    {"", "resume_from_checkpoint", TT_INERT, NULL, "set-up, before the first step"},
    {"", "save_adapter_weights_only", TT_INERT, NULL, "what is written at an epoch's end"},
    {"", "enable_async_checkpointing", TT_INERT, NULL, "what is written at an epoch's end"},
    {"", "seed", TT_INERT, NULL, "data order"},
    {"", "shuffle", TT_INERT, NULL, "data order"},
    {"", "epochs", TT_INERT, NULL, "the number of steps, not each step"},
    {"", "max_steps_per_epoch", TT_INERT, NULL, "the number of steps, not each step"},
    {"", "lr_scheduler", TT_INERT, NULL, "the learning rate, a scalar"},
    {"", "metric_logger", TT_INERT, NULL, "host-side logging"},
    {"", "log_every_n_steps", TT_INERT, NULL, "host-side logging"},
    {"", "log_peak_memory_stats", TT_INERT, NULL, "reads the allocator's counters"},
    {"", "cudnn_deterministic_mode", TT_INERT, NULL, "no cuDNN kernel in a decoder's step"},
    {"", "low_cpu_ram", TT_INERT, NULL, "host memory while loading"},
    {"", "fsdp", TT_INERT, NULL, "no recipe reads it (fsdp_cpu_offload is the key; llama3_1/405B_qlora.yaml carries a stale fsdp.cpu_offload)"},
    {"", "profiler", TT_READ, NULL, NULL},
    {"profiler", "enabled", TT_DEFAULT, "false", "the torch profiler's own memory and time (profiler.enabled)"},
    {"profiler", "*", TT_INERT, NULL, "read only with profiler.enabled"},
    {"model", "_component_", TT_READ, NULL, NULL},
    {"model", "lora_attn_modules", TT_READ, NULL, NULL},
    {"model", "apply_lora_to_mlp", TT_READ, NULL, NULL},
    {"model", "apply_lora_to_output", TT_DEFAULT, "false", "LoRA on the output projection (apply_lora_to_output)"},
    {"model", "lora_rank", TT_READ, NULL, NULL},
    {"model", "lora_alpha", TT_READ, NULL, NULL},
    {"model", "lora_dropout", TT_READ, NULL, NULL},
    {"model", "use_dora", TT_READ, NULL, NULL},
    {"model", "quantize_base", TT_READ, NULL, NULL},
    {"tokenizer", "max_seq_len", TT_READ, NULL, NULL},
    {"tokenizer", "*", TT_INERT, NULL, "the tokenizer's files and template (host side)"},
    {"dataset", "packed", TT_READ, NULL, NULL},
    {"dataset", "*", TT_INERT, NULL, "which samples; their lengths are --seq's (tokenizer.max_seq_len)"},
    {"optimizer", "_component_", TT_READ, NULL, NULL},
    {"optimizer", "fused", TT_READ, NULL, NULL},
    {"optimizer", "foreach", TT_READ, NULL, NULL},
    {"optimizer", "lr", TT_INERT, NULL, "a scalar"},
    {"optimizer", "weight_decay", TT_INERT, NULL, "a scalar"},
    {"optimizer", "betas", TT_INERT, NULL, "scalars"},
    {"optimizer", "eps", TT_INERT, NULL, "a scalar"},
    {"optimizer", "amsgrad", TT_DEFAULT, "false", "AdamW's amsgrad (a third state per parameter)"},
    {"loss", "_component_", TT_READ, NULL, NULL},
    {"loss", "num_output_chunks", TT_DEFAULT, "8", "a chunk count other than CEWithChunkedOutputLoss's 8"},
    {"loss", "ignore_index", TT_INERT, NULL, "which labels count"},
};
#define N_KEYS (sizeof KEYS / sizeof KEYS[0])

/* The table's entry for section.key, or NULL. */
static const tt_key *find(const char *section, const char *key) {
    const tt_key *star = NULL;
    for (size_t i = 0; i < N_KEYS; i++) {
        if (strcmp(KEYS[i].section, section)) continue;
        if (!strcmp(KEYS[i].key, key)) return &KEYS[i];
        if (!strcmp(KEYS[i].key, "*")) star = &KEYS[i];
    }
    return star;
}

/* True when `it` holds the default `def` ("false", "null", "[]", a number or a string). */
static bool at_default(const cJSON *it, const char *def) {
    if (!it || cJSON_IsNull(it)) return true;
    if (!strcmp(def, "false")) return cJSON_IsFalse(it);
    if (!strcmp(def, "null")) return false;
    if (!strcmp(def, "[]")) return cJSON_IsArray(it) && cJSON_GetArraySize(it) == 0;
    if (cJSON_IsNumber(it)) {
        double d;
        return sscanf(def, "%lf", &d) == 1 && it->valuedouble == d;
    }
    return cJSON_IsString(it) && it->valuestring && !strcmp(it->valuestring, def);
}

/* One key of `section`: 0, or -1 with the refusal. */
static int check_one(const char *section, const cJSON *it, char *err, size_t errlen) {
    const char *dot = section[0] ? "." : "";
    const tt_key *k = find(section, it->string);
    if (!k)
        return ft_errorf(err, errlen, "not modelled (torchtune %s): unknown key %s%s%s (ftest cannot say what it does)",
                         EST_TORCHTUNE_VERSION, section, dot, it->string);
    if (k->kind == TT_DEFAULT && !at_default(it, k->def))
        return ft_errorf(err, errlen, "not modelled (torchtune %s): %s (%s%s%s)", EST_TORCHTUNE_VERSION, k->why,
                         section, dot, it->string);
    return 0;
}

int est_torchtune_keys_check(const cJSON *root, char *err, size_t errlen) {
    if (!cJSON_IsObject(root)) return ft_errorf(err, errlen, "a torchtune config must be a mapping");
    const cJSON *it;
    cJSON_ArrayForEach(it, root) {
        if (!it->string) continue;
        if (check_one("", it, err, errlen) < 0) return -1;
        /* the sections whose keys the table lists one by one */
        static const char *const SECTIONS[] = {"model", "tokenizer", "dataset", "optimizer", "loss", "profiler"};
        for (size_t s = 0; s < sizeof SECTIONS / sizeof SECTIONS[0]; s++) {
            if (strcmp(it->string, SECTIONS[s])) continue;
            /* a list of datasets (torchtune's ConcatDataset): each entry's keys */
            const cJSON *sec = it, *e;
            if (cJSON_IsArray(sec) && !strcmp(it->string, "dataset")) {
                cJSON_ArrayForEach(e, sec) {
                    const cJSON *k;
                    if (!cJSON_IsObject(e)) return ft_errorf(err, errlen, "dataset must list mappings");
                    cJSON_ArrayForEach(k, e) if (k->string && check_one("dataset", k, err, errlen) < 0) return -1;
                }
                continue;
            }
            if (!cJSON_IsObject(sec)) return ft_errorf(err, errlen, "%s must be a mapping", it->string);
            cJSON_ArrayForEach(e, sec) if (e->string && check_one(SECTIONS[s], e, err, errlen) < 0) return -1;
        }
    }
    return 0;
}

const char *est_torchtune_key_at(size_t i, const char **section, const char **kind, const char **why) {
    if (i >= N_KEYS) return NULL;
    static const char *const KINDS[] = {"read", "inert", "default only"};
    *section = KEYS[i].section;
    *kind = KINDS[KEYS[i].kind];
    *why = KEYS[i].why ? KEYS[i].why : "";
    return KEYS[i].key;
}
