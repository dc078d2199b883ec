#include "liger.h"

#include <stdio.h>
#include <string.h>

#include "json_util.h"

static const struct {
    const char *name;
    uint32_t bit;
} KERNELS[] = {
    {"rope", EST_LIGER_ROPE},
    {"rms_norm", EST_LIGER_RMS_NORM},
    {"swiglu", EST_LIGER_SWIGLU},
    {"geglu", EST_LIGER_GEGLU},
    {"layer_norm", EST_LIGER_LAYER_NORM},
    {"cross_entropy", EST_LIGER_CROSS_ENTROPY},
    {"fused_linear_cross_entropy", EST_LIGER_FLCE},
};
#define N_KERNELS (sizeof KERNELS / sizeof KERNELS[0])

int est_liger_parse(const char *s, uint32_t *out, bool *all, char *err, size_t errlen) {
    *out = 0;
    *all = false;
    if (!s || !*s) return ft_errorf(err, errlen, "--liger needs a value (all, or a list of kernels)");
    if (!strcmp(s, "all")) {
        *all = true;
        return 0;
    }
    for (const char *p = s; *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        size_t k = 0;
        while (k < N_KERNELS && (strlen(KERNELS[k].name) != n || strncmp(p, KERNELS[k].name, n))) k++;
        if (k == N_KERNELS)
            return ft_errorf(err, errlen,
                             "--liger: \"%.*s\" is not one of all, rope, rms_norm, swiglu, geglu, "
                             "layer_norm, cross_entropy, fused_linear_cross_entropy",
                             (int)(n > 32 ? 32 : n), p);
        *out |= KERNELS[k].bit;
        if (!end) break;
        p = end + 1;
        if (!*p) return ft_errorf(err, errlen, "--liger: empty name after ','");
    }
    return 0;
}

const char *est_liger_name(uint32_t bits, char *buf, size_t n) {
    if (n) buf[0] = '\0';
    for (size_t k = 0; k < N_KERNELS; k++) {
        if (!(bits & KERNELS[k].bit)) continue;
        size_t used = strlen(buf);
        if (used + 1 < n) snprintf(buf + used, n - used, "%s%s", used ? "," : "", KERNELS[k].name);
    }
    return buf;
}

/* Every apply_liger_kernel_to_<type> ftest's architectures map to (llama,
 * mistral, mixtral, qwen2, qwen3, qwen3_moe, gemma, gemma2, gemma3_text,
 * phi3) defaults to rope, rms_norm, the MLP's GLU kernel and
 * fused_linear_cross_entropy, with cross_entropy off. Qwen2-MoE has no
 * apply function in v0.8.2: it gets the same set (the model type's kernels
 * would be the same modules). */
uint32_t est_liger_defaults(const ft_model *m) {
    const uint32_t glu = m->activation == FT_ACT_GELU_TANH ? EST_LIGER_GEGLU : EST_LIGER_SWIGLU;
    return EST_LIGER_ROPE | EST_LIGER_RMS_NORM | glu | EST_LIGER_FLCE;
}

int est_liger_check(const ft_model *m, uint32_t bits, char *err, size_t errlen) {
    const bool gelu = m->activation == FT_ACT_GELU_TANH;
    if ((bits & EST_LIGER_CROSS_ENTROPY) && (bits & EST_LIGER_FLCE))
        return ft_errorf(err, errlen, "--liger: cross_entropy and fused_linear_cross_entropy cannot both be on "
                                      "(apply_liger_kernel_to_* asserts it)");
    if ((bits & EST_LIGER_SWIGLU) && gelu)
        return ft_errorf(err, errlen, "--liger swiglu: %s's MLP is GeGLU (use geglu)", m->name);
    if ((bits & EST_LIGER_GEGLU) && !gelu)
        return ft_errorf(err, errlen, "--liger geglu: %s's MLP is SwiGLU (use swiglu)", m->name);
    if ((bits & (EST_LIGER_SWIGLU | EST_LIGER_GEGLU)) && m->num_experts > 0)
        return ft_errorf(err, errlen, "Liger's SwiGLU on MoE experts is not modelled");
    return 0;
}
