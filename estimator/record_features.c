/* The record config keys that name a feature ftest does not model, and the
 * values of each that it does (record_features.h). */
#include "record_features.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "liger.h"

/* Appends one feature to the list in out. */
static void add(char *out, size_t n, int *count, const char *feature) {
    size_t used = strlen(out);
    if (used + 1 < n) snprintf(out + used, n - used, "%s%s", *count ? ", " : "", feature);
    (*count)++;
}

static const char *string_of(const cJSON *cfg, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    return cJSON_IsString(v) && v->valuestring ? v->valuestring : NULL;
}

static bool is_true(const cJSON *cfg, const char *key) {
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cfg, key));
}

/* A string key whose values other than the listed ones (NULL-terminated) are
 * not modelled: "<label> <value>". */
static void string_key(const cJSON *cfg, const char *key, const char *const *modelled,
                       const char *label, char *out, size_t n, int *count) {
    const char *v = string_of(cfg, key);
    if (!v) return;
    for (const char *const *m = modelled; *m; m++)
        if (!strcmp(v, *m)) return;
    char buf[96];
    snprintf(buf, sizeof buf, "%s %.48s", label, v);
    add(out, n, count, buf);
}

/* Liger-Kernel's kernels that ftest models are read by record.c (liger.h);
 * any other name (fused_add_rms_norm, a vision model's) is a feature. */
static void liger(const cJSON *cfg, char *out, size_t n, int *count) {
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(cfg, "liger_kernels");
    if (!cJSON_IsArray(k)) return;
    for (const cJSON *e = k->child; e; e = e->next) {
        uint32_t bits;
        bool all;
        char err[160], buf[96];
        if (!cJSON_IsString(e) || (est_liger_parse(e->valuestring, &bits, &all, err, sizeof err) == 0 && !all))
            continue;
        snprintf(buf, sizeof buf, "Liger kernel %.48s", e->valuestring);
        add(out, n, count, buf);
    }
}

int est_record_features(const cJSON *cfg, char *out, size_t n) {
    int count = 0;
    if (n) out[0] = '\0';
    if (!cJSON_IsObject(cfg)) return 0;
    static const char *const fixed_padding[] = {"none", "max_length", NULL};
    static const char *const methods[] = {"full", "lora", "ia3", "prompt_tuning", "prefix_tuning", "p_tuning",
                                          "adaption_prompt", /* peft_prompt.h */
                                          "adalora", "vera", "ln_tuning", "miss", "bone", "trainable_tokens",
                                          "pvera", "tinylora", /* peft_vec.h; bone is MiSS */
                                          "loha", "lokr", "oft", "fourierft", "waveft", NULL}; /* peft_delta.h */
    /* prefix tuning without prefix_projection, P-tuning's MLP encoder, adaption
     * prompt in every layer (peft_prompt.h); a projected prefix, an LSTM
     * encoder or adaption prompt in some of the layers is not modelled */
    static const char *const prompt_encoders[] = {"embedding", "mlp", NULL};
    static const char *const adapted_layers[] = {"all", NULL};
    static const char *const lora_variants[] = {"lora", "rslora", "dora", "lora-fa", NULL};
    /* Dynamic padding is expressed by the mean padded length (seq_mean, with
     * seq_len the longest batch's); without it the run is not. */
    if (!cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(cfg, "seq_mean")))
        string_key(cfg, "padding", fixed_padding, "padding", out, n, &count);
    liger(cfg, out, n, &count);
    string_key(cfg, "peft_method", methods, "PEFT method", out, n, &count);
    string_key(cfg, "lora_variant", lora_variants, "LoRA variant", out, n, &count);
    string_key(cfg, "prompt_encoder", prompt_encoders, "prompt encoder", out, n, &count);
    string_key(cfg, "adapted_layers", adapted_layers, "adaption prompt in layers", out, n, &count);
    /* PEFT's adapters are fp32 under every precision ftest models
     * (autocast_adapter_dtype=True, seam_hf.c's regime); bf16 adapters
     * (autocast_adapter_dtype=False) are not. */
    static const char *const fp32_adapters[] = {"fp32", NULL};
    string_key(cfg, "adapter_dtype", fp32_adapters, "adapters in", out, n, &count);
    if (is_true(cfg, "torch_compile")) add(out, n, &count, "torch.compile");
    if (is_true(cfg, "script_unknown")) add(out, n, &count, "unknown training script");
    return count;
}
