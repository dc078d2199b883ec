#include "fsdp_policy.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "json_util.h"
#include "lora.h"

/* Index = enum value (the enums are append-only). */
static const char *const VERSION_NAMES[] = {"1", "2"};
static const char *const LOAD_NAMES[] = {"fp32", "bf16"};
static const char *const REDUCE_NAMES[] = {"param", "fp32"};
static const char *const PREFETCH_NAMES[] = {"none", "pre", "post"};

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const char *name_of(const char *const *names, int n, int v) {
    return (v >= 0 && v < n) ? names[v] : "?";
}

const char *est_fsdp_version_name(est_fsdp_version v) {
    return name_of(VERSION_NAMES, COUNT(VERSION_NAMES), (int)v);
}
const char *est_load_dtype_name(est_load_dtype d) {
    return name_of(LOAD_NAMES, COUNT(LOAD_NAMES), (int)d);
}
const char *est_reduce_dtype_name(est_reduce_dtype d) {
    return name_of(REDUCE_NAMES, COUNT(REDUCE_NAMES), (int)d);
}
const char *est_fsdp_prefetch_name(est_fsdp_prefetch p) {
    return name_of(PREFETCH_NAMES, COUNT(PREFETCH_NAMES), (int)p);
}

int est_fsdp_version_parse(const char *s, est_fsdp_version *out, char *err, size_t errlen) {
    int v;
    if (ft_parse_choice("--fsdp-version", VERSION_NAMES, COUNT(VERSION_NAMES), s, &v, err, errlen) < 0)
        return -1;
    *out = (est_fsdp_version)v;
    return 0;
}
int est_load_dtype_parse(const char *s, est_load_dtype *out, char *err, size_t errlen) {
    int v;
    if (ft_parse_choice("--load-dtype", LOAD_NAMES, COUNT(LOAD_NAMES), s, &v, err, errlen) < 0)
        return -1;
    *out = (est_load_dtype)v;
    return 0;
}
int est_reduce_dtype_parse(const char *s, est_reduce_dtype *out, char *err, size_t errlen) {
    int v;
    if (ft_parse_choice("--fsdp-reduce-dtype", REDUCE_NAMES, COUNT(REDUCE_NAMES), s, &v, err, errlen) < 0)
        return -1;
    *out = (est_reduce_dtype)v;
    return 0;
}

int est_fsdp_prefetch_parse(const char *s, est_fsdp_prefetch *out, char *err, size_t errlen) {
    char low[32] = "";
    for (size_t i = 0; s && s[i] && i + 1 < sizeof low; i++) low[i] = (char)tolower((unsigned char)s[i]);
    const char *name = !strcmp(low, "no_prefetch") ? "none"
                       : !strncmp(low, "backward_", 9) ? low + 9
                                                       : low;
    int v;
    if (ft_parse_choice("--fsdp-backward-prefetch", PREFETCH_NAMES, COUNT(PREFETCH_NAMES), name, &v, err,
                        errlen) < 0)
        return -1;
    *out = (est_fsdp_prefetch)v;
    return 0;
}

static const char *const LORA_WRAP_NAMES[] = {"peft", "layer"};
static const char *const LORA_DTYPE_NAMES[] = {"fp32", "bf16"};

int est_lora_dtype_parse(const char *s, bool *base_dtype, char *err, size_t errlen) {
    int v;
    if (ft_parse_choice("--lora-dtype", LORA_DTYPE_NAMES, COUNT(LORA_DTYPE_NAMES), s, &v, err, errlen) < 0) return -1;
    *base_dtype = v == 1;
    return 0;
}

int est_fsdp_lora_wrap_parse(const char *s, est_fsdp_lora_wrap *out, char *err, size_t errlen) {
    int v;
    if (ft_parse_choice("--fsdp-lora-wrap", LORA_WRAP_NAMES, COUNT(LORA_WRAP_NAMES), s, &v, err, errlen) < 0)
        return -1;
    *out = (est_fsdp_lora_wrap)v;
    return 0;
}

static const char *const WRAPPER_NAMES[] = {"accelerate", "torch"};

const char *est_fsdp_wrapper_name(est_fsdp_wrapper w) {
    return name_of(WRAPPER_NAMES, COUNT(WRAPPER_NAMES), (int)w);
}

int est_fsdp_wrapper_parse(const char *s, est_fsdp_wrapper *out, char *err, size_t errlen) {
    int v;
    if (ft_parse_choice("--fsdp-wrapper", WRAPPER_NAMES, COUNT(WRAPPER_NAMES), s, &v, err, errlen) < 0)
        return -1;
    *out = (est_fsdp_wrapper)v;
    return 0;
}

/* transformers' class name stem of each architecture (models/<type>/
 * modeling_<type>.py, 4.40-4.49): <stem>DecoderLayer, and for a mixture of
 * experts <stem>SparseMoeBlock. Index = ft_arch (append-only). */
static const char *const CLASS_STEMS[] = {"Llama",  "Mistral", "Qwen2",    "Gemma",  "Phi3",   "Mixtral",
                                          "Qwen2Moe", "Gemma2", "Qwen3", "Qwen3Moe", "Gemma3"};

static bool ends_with(const char *s, size_t n, const char *tail) {
    const size_t t = strlen(tail);
    return n >= t && !strncmp(s + n - t, tail, t);
}

int est_fsdp_wrap_parse(const ft_model *m, const char *classes, est_fsdp_wrap *out, char *err, size_t errlen) {
    const int a = (int)m->arch;
    if (a < 0 || a >= COUNT(CLASS_STEMS)) return ft_errorf(err, errlen, "no FSDP wrap classes known for %s", m->name);
    char layer[64], moe[64];
    snprintf(layer, sizeof layer, "%sDecoderLayer", CLASS_STEMS[a]);
    snprintf(moe, sizeof moe, "%sSparseMoeBlock", CLASS_STEMS[a]);
    const size_t n = strlen(classes);
    if (strchr(classes, ','))
        return ft_errorf(err, errlen, "not modelled: more than one FSDP wrap class (%.60s)", classes);
    if (!strcmp(classes, layer)) *out = EST_FSDP_WRAP_DECODER_LAYER;
    else if (m->num_experts > 0 && !strcmp(classes, moe)) *out = EST_FSDP_WRAP_MOE_BLOCK;
    else if (ends_with(classes, n, "DecoderLayer") || ends_with(classes, n, "SparseMoeBlock"))
        return ft_errorf(err, errlen, "transformer_layer_cls_to_wrap %.60s names no module of %s (its layers "
                                      "are %s): PEFT and accelerate stop with \"Could not find the transformer "
                                      "layer class to wrap in the model\"", classes, m->name, layer);
    else
        return ft_errorf(err, errlen, "not modelled: FSDP units other than decoder layers or MoE blocks "
                                      "(transformer_layer_cls_to_wrap %.60s)", classes);
    return 0;
}

/* The loaded dtype, as FSDP1 flattens a unit's parameters in their own dtype
 * (_flat_param.py FlatParamHandle.flatten_tensors: torch.cat of them, so the
 * FlatParameter has _orig_param_dtype = params[0].dtype; torch 2.2-2.11) and
 * FSDP2 shards each parameter as it is; a MixedPrecision param_dtype equal to
 * it makes no second copy (_uses_param_mixed_precision: _fwd_bwd_param_dtype
 * != _orig_param_dtype). AdamW's state is zeros_like(param), its foreach
 * temporaries likewise. Except: accelerate >= 0.30 upcasts FSDP1's
 * FlatParameters to fp32 under mixed precision, and 1.6-1.12 FSDP2's whole
 * model (stack.h), where accelerate
 * wraps the model, not where the script does (est_fsdp_wrapper); LoRA's
 * adapters are fp32 (PEFT autocast_adapter_dtype) from PEFT 0.12. */
int est_fsdp_shard_bytes(const est_run *run) {
    if (run->precision == EST_PREC_FP32 && run->load_dtype == EST_LOAD_BF16) return 0;
    const bool upcast = run->fsdp_wrapper == EST_FSDP_BY_ACCELERATE && run->stack->fsdp_upcasts_low_precision_params;
    /* PEFT < 0.12 made the adapters in the base's 16-bit dtype (stack.h
     * peft_adapters_in_base_dtype), and nothing upcasts them without
     * accelerate's upcast */
    if (est_lora_on(run) && run->stack->peft_adapters_in_base_dtype && !upcast &&
        est_compute_dtype_bytes(run->precision) == 2)
        return 2;
    if (est_lora_on(run)) return (int)est_lora_weight_bytes(run);
    if (run->precision == EST_PREC_BF16) return 2; /* pure bf16: no MixedPrecision policy */
    if (run->load_dtype == EST_LOAD_FP32) return 4;
    if (run->precision == EST_PREC_FP32) return 0; /* bf16 weights cannot train in fp32 */
    /* accelerate 1.6-1.12 under FSDP2: model.to(torch.float32) (stack.h) */
    if (run->fsdp_version == EST_FSDP2) return upcast && run->stack->fsdp2_upcasts_whole_model ? 4 : 2;
    return upcast ? 4 : 2;
}
