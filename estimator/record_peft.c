/* A record's config keys for PEFT's methods, the training loop and the
 * lengths of its batches (record_peft.h; docs/records.md lists them). */
#include "record_peft.h"

#include <string.h>

#include "json_util.h"
#include "lora.h"
#include "peft.h"
#include "record_peft_vec.h"
#include "record_peft_delta.h"

/* The method as PEFT names it (PeftType, lower case, as the method comparison
 * writes it: "full", "lora", "ia3", "prompt_tuning"). Any other method is
 * left to record_features.c, which reports the record as not expressible. */
static int parse_method(const cJSON *cfg, est_run *run, char *err, size_t errlen) {
    char v[40];
    int r = ft_json_string(cfg, "peft_method", v, sizeof v, err, errlen);
    if (r <= 0) return r;
    if ((r = est_record_peft_vec(cfg, v, run, err, errlen)) != 0) return r < 0 ? -1 : 0; /* peft_vec.h */
    if (!strcmp(v, "ia3")) run->peft = EST_PEFT_IA3;
    else if (!strcmp(v, "prompt_tuning") || !strcmp(v, "prompt-tuning")) run->peft = EST_PEFT_PROMPT_TUNING;
    else if (!strcmp(v, "prefix_tuning") || !strcmp(v, "prefix-tuning")) run->peft = EST_PEFT_PREFIX_TUNING;
    else if (!strcmp(v, "p_tuning") || !strcmp(v, "p-tuning")) run->peft = EST_PEFT_P_TUNING;
    else if (!strcmp(v, "adaption_prompt") || !strcmp(v, "adaption-prompt")) run->peft = EST_PEFT_ADAPTION_PROMPT;
    else if (est_record_pdelta_method(v, &run->peft)) return est_record_pdelta(cfg, run, err, errlen);
    else run->peft = EST_PEFT_LORA; /* full, lora, or a method record_features names */
    if (run->peft == EST_PEFT_IA3) est_ia3_defaults(&run->model, &run->ia3_targets, &run->ia3_feedforward);
    return 0;
}

/* lora_variant: "lora", "rslora", "dora", "lora-fa"; others ("mica",
 * "bd-lora") are record_features.c's. */
static int parse_variant(const cJSON *cfg, est_run *run, char *err, size_t errlen) {
    char v[40], e[8];
    bool dora = false; /* the cpu-trace records' spelling (calibrate/probes/cpu_truth_matrix.py) */
    if (ft_json_bool(cfg, "lora_dora", &dora, err, errlen) < 0) return -1;
    if (dora) run->lora.variant = EST_LORA_DORA;
    /* lora_a_requires_grad: LoRA-FA's A re-enabled by the script (lora.h est_lora_a_grad) */
    if (ft_json_bool(cfg, "lora_a_requires_grad", &run->lora.fa_a_grad, err, errlen) < 0) return -1;
    int r = ft_json_string(cfg, "lora_variant", v, sizeof v, err, errlen);
    if (r <= 0) return r;
    if (est_lora_variant_parse(v, &run->lora.variant, e, sizeof e) < 0) run->lora.variant = EST_LORA_PLAIN;
    return 0;
}

static int parse_targets(const cJSON *cfg, const char *key, uint32_t *out, char *err, size_t errlen) {
    char v[128];
    int r = ft_json_string(cfg, key, v, sizeof v, err, errlen);
    if (r <= 0) return r;
    return est_lora_targets_parse(v, out, err, errlen);
}

int est_record_peft_config(const cJSON *cfg, est_run *run, char *err, size_t errlen) {
    char loop[16];
    int r;
    bool use_cache = true;
    if (parse_method(cfg, run, err, errlen) < 0 || parse_variant(cfg, run, err, errlen) < 0 ||
        parse_targets(cfg, "ia3_targets", &run->ia3_targets, err, errlen) < 0 ||
        parse_targets(cfg, "ia3_feedforward", &run->ia3_feedforward, err, errlen) < 0 ||
        ft_json_int64(cfg, "virtual_tokens", 0, EST_LORA_MAX_RANK, &run->virtual_tokens, err, errlen) < 0 ||
        ft_json_int64(cfg, "encoder_hidden", 0, 1 << 20, &run->encoder_hidden, err, errlen) < 0 ||
        ft_json_int64(cfg, "adapter_len", 0, EST_LORA_MAX_RANK, &run->adapter_len, err, errlen) < 0 ||
        ft_json_int64(cfg, "empty_cache_steps", 0, INT32_MAX, &run->empty_cache_steps, err, errlen) < 0 ||
        ft_json_double(cfg, "seq_mean", 0, (double)EST_MAX_SEQ, &run->seq_mean, err, errlen) < 0 ||
        ft_json_bool(cfg, "use_cache", &use_cache, err, errlen) < 0 ||
        (r = ft_json_string(cfg, "train_loop", loop, sizeof loop, err, errlen)) < 0)
        return -1;
    run->kv_cache_off = !use_cache;
    if (r == 1 && est_train_loop_parse(loop, &run->train_loop, err, errlen) < 0) return -1;
    return 0;
}
