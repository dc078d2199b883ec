/* A record's AdaLoRA, VeRA, LN tuning, MiSS, trainable tokens, PVeRA or
 * TinyLoRA settings (record_peft_vec.h). */
#include "record_peft_vec.h"

#include <string.h>

#include "json_util.h"
#include "lora.h"
#include "record_peft_targets.h"
#include "peft_vec.h"

/* target_modules as the method comparison writes them ("q_proj;v_proj"). */
static int targets(const cJSON *cfg, est_run *run, char *err, size_t errlen) {
    return est_record_peft_targets(cfg, &run->vec.targets, err, errlen);
}

/* LN tuning's and trainable tokens' target_modules are modelled at PEFT's
 * defaults only (every RMSNorm of a Llama; the input embedding). */
static int default_targets(const cJSON *cfg, const char *want, char *err, size_t errlen) {
    char v[160];
    int r = ft_json_string(cfg, "peft_target_modules", v, sizeof v, err, errlen);
    if (r <= 0 || !strcmp(v, want)) return r < 0 ? -1 : 0;
    return ft_errorf(err, errlen, "peft_target_modules %s is not modelled (only %s)", v, want);
}

/* The methods' dropout on x (each config's *_dropout, 0 in every
 * experiment of the comparison) is not modelled: a record with one above 0
 * is refused rather than estimated without it. */
static int no_dropout(const cJSON *keys, char *err, size_t errlen) {
    static const char *const names[] = {"lora_dropout", "vera_dropout", "pvera_dropout", "miss_dropout",
                                        "tinylora_dropout"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        double p = 0;
        if (ft_json_double(keys, names[i], 0, 1, &p, err, errlen) < 0) return -1;
        if (p > 0) return ft_errorf(err, errlen, "peft_key_params.%s %g is not modelled (0 only)", names[i], p);
    }
    return 0;
}

/* init_weights: true, false, "bat" or "mini" (MissConfig). */
static int miss_init(const cJSON *keys, est_run *run, char *err, size_t errlen) {
    const cJSON *iw = cJSON_GetObjectItemCaseSensitive(keys, "init_weights");
    if (!cJSON_IsString(iw)) return 0;
    if (est_miss_init_parse(iw->valuestring, &run->vec.miss, err, errlen) < 0) return -1;
    if (run->vec.miss == EST_MISS_MINI)
        return ft_json_int64(keys, "mini_r", 1, EST_LORA_MAX_RANK, &run->vec.mini_r, err, errlen) < 0 ? -1 : 0;
    return 0;
}

int est_record_peft_vec(const cJSON *cfg, const char *method, est_run *run, char *err, size_t errlen) {
    if (!strcmp(method, "adalora")) run->peft = EST_PEFT_ADALORA;
    else if (!strcmp(method, "vera")) run->peft = EST_PEFT_VERA;
    else if (!strcmp(method, "ln_tuning")) run->peft = EST_PEFT_LN_TUNING;
    else if (!strcmp(method, "miss")) run->peft = EST_PEFT_MISS;
    /* Bone (peft 0.18.1.dev0, 8be1a16 tuners/bone/layer.py) is MiSS under its
     * old name: forward lines 313-348 are MiSS's (d787f51 miss/layer.py
     * 326-367, less its dropout, Identity at 0, and quantized base), and
     * bone_block is (r, out) or, for "bat", (out / r, r, r) as miss_block
     * (bone 90/93, miss 114/117). Bone has no "mini". */
    else if (!strcmp(method, "bone")) run->peft = EST_PEFT_MISS;
    else if (!strcmp(method, "trainable_tokens")) run->peft = EST_PEFT_TRAINABLE_TOKENS;
    else if (!strcmp(method, "pvera")) run->peft = EST_PEFT_PVERA;
    else if (!strcmp(method, "tinylora")) run->peft = EST_PEFT_TINYLORA;
    else return 0;
    if (run->peft == EST_PEFT_LN_TUNING) /* PEFT's default norms (peft_vec.c) */
        return default_targets(cfg, "input_layernorm;norm;post_attention_layernorm", err, errlen) < 0 ? -1 : 1;
    const cJSON *keys = cJSON_GetObjectItemCaseSensitive(cfg, "peft_key_params");
    if (!cJSON_IsObject(keys)) return ft_errorf(err, errlen, "peft_method %s needs peft_key_params", method);
    if (run->peft == EST_PEFT_TRAINABLE_TOKENS) { /* token_indices: the rows trained */
        const cJSON *ti = cJSON_GetObjectItemCaseSensitive(keys, "token_indices");
        if (!cJSON_IsArray(ti) || cJSON_GetArraySize(ti) < 1)
            return ft_errorf(err, errlen, "peft_key_params.token_indices must be a list of token ids");
        run->vec.tokens = cJSON_GetArraySize(ti);
        return default_targets(cfg, "model.embed_tokens", err, errlen) < 0 ? -1 : 1;
    }
    if (no_dropout(keys, err, errlen) < 0) return -1;
    /* AdaLoRA starts at init_r (its r is unused: adalora/model.py) */
    const char *rank_key = run->peft == EST_PEFT_ADALORA ? "init_r" : "r";
    const int got = ft_json_int64(keys, rank_key, 1, EST_LORA_MAX_RANK, &run->vec.rank, err, errlen);
    if (got < 0) return -1;
    if (got == 0) return ft_errorf(err, errlen, "peft_key_params has no %s", rank_key);
    if (targets(cfg, run, err, errlen) < 0) return -1;
    if (run->peft == EST_PEFT_MISS && miss_init(keys, run, err, errlen) < 0) return -1;
    if (!strcmp(method, "bone") && run->vec.miss == EST_MISS_MINI)
        return ft_errorf(err, errlen, "peft_key_params.init_weights \"mini\" is MiSS's; Bone has none");
    if (run->peft == EST_PEFT_TINYLORA && /* TinyLoraConfig u and weight_tying */
        (ft_json_int64(keys, "u", 1, EST_LORA_MAX_RANK, &run->vec.u, err, errlen) < 0 ||
         ft_json_double(keys, "weight_tying", 0, 1, &run->vec.tying, err, errlen) < 0))
        return -1;
    return 1;
}
