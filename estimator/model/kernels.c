#include "kernels.h"

#include <string.h>

#include "fw_registry.h"
#include "json_util.h"
#include "lora.h"
#include "peft.h"

static const char *const NAMES[EST_KERNEL_COUNT] = {"lora-qkv", "lora-o", "lora-mlp", "fused-mlp"};

const char *est_kernel_name(est_kernel k) {
    return (unsigned)k < EST_KERNEL_COUNT ? NAMES[k] : "?";
}

int est_kernels_parse(const char *list, uint32_t *out, char *err, size_t errlen) {
    *out = 0;
    if (!strcmp(list, "none")) return 0;
    const char *p = list;
    for (;;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        int k = -1;
        for (int i = 0; i < EST_KERNEL_COUNT; i++)
            if (strlen(NAMES[i]) == n && !strncmp(p, NAMES[i], n)) k = i;
        if (k < 0)
            return ft_errorf(err, errlen, "--kernels must list lora-qkv|lora-o|lora-mlp|fused-mlp or be "
                                          "none (got \"%.60s\")", list);
        *out |= EST_KERNEL_BIT(k);
        if (!end) return 0;
        p = end + 1;
    }
}

bool est_kernel_on(const est_run *run, est_kernel k) { return (run->kernels & EST_KERNEL_BIT(k)) != 0; }

uint32_t est_kernel_lora_targets(est_kernel k) {
    switch (k) {
    case EST_KERNEL_LORA_QKV: return EST_LORA_BIT(EST_LORA_Q) | EST_LORA_BIT(EST_LORA_K) | EST_LORA_BIT(EST_LORA_V);
    case EST_KERNEL_LORA_O: return EST_LORA_BIT(EST_LORA_O);
    case EST_KERNEL_LORA_MLP:
        return EST_LORA_BIT(EST_LORA_GATE) | EST_LORA_BIT(EST_LORA_UP) | EST_LORA_BIT(EST_LORA_DOWN);
    default: return 0;
    }
}

/* axolotl's LoRA kernels: plain LoRA (its DoRA path saves more and is not
 * modelled) on separate projections (Phi-3's fused qkv_proj and gate_up_proj
 * have no q_proj/gate_proj for apply_lora_kernel_patches to find) of a dense
 * MLP (the MoE experts are patched by other kernels). */
static int lora_kernel_validate(const est_run *run, est_kernel k, char *err, size_t errlen) {
    const ft_model *m = &run->model;
    const uint32_t need = est_kernel_lora_targets(k);
    if (!est_lora_on(run) || (run->lora.targets & need) != need)
        return ft_errorf(err, errlen, "--kernels %s fuses LoRA projections: it needs --lora-rank and LoRA on "
                                      "every projection it fuses (axolotl patches nothing otherwise)",
                         NAMES[k]);
    if (run->lora.variant == EST_LORA_DORA || run->lora.variant == EST_LORA_FA)
        return ft_errorf(err, errlen, "--kernels %s with --lora-variant %s is not modelled", NAMES[k],
                         est_lora_variant_name(run->lora.variant));
    if (m->fused_qkv && (k == EST_KERNEL_LORA_QKV || k == EST_KERNEL_LORA_MLP))
        return ft_errorf(err, errlen, "--kernels %s on %s's fused projections is not modelled", NAMES[k], m->name);
    if (k == EST_KERNEL_LORA_MLP && m->num_experts > 0)
        return ft_errorf(err, errlen, "--kernels lora-mlp on mixture-of-experts MLPs is not modelled");
    return 0;
}

int est_kernels_validate(const est_run *run, char *err, size_t errlen) {
    if (run->kernels && !est_fw_of(run)->torch_stack)
        return ft_errorf(err, errlen, "--kernels replace Transformers' modeling code: a PyTorch framework "
                                      "only (hf, deepspeed, fsdp)");
    for (int k = 0; k < EST_KERNEL_COUNT; k++) {
        if (!est_kernel_on(run, (est_kernel)k)) continue;
        if (k != EST_KERNEL_FUSED_MLP) {
            if (lora_kernel_validate(run, (est_kernel)k, err, errlen) < 0) return -1;
            continue;
        }
        /* axolotl replaces LlamaMLP only (llama_attn_hijack_flash.py
         * replace_llama_mlp_with_swiglu) and refuses it with LoRA
         * (schemas/validation.py check_fused_lora). */
        if (run->model.arch != FT_ARCH_LLAMA || run->model.num_experts > 0)
            return ft_errorf(err, errlen, "--kernels fused-mlp replaces LlamaMLP: Llama models only");
        if (est_peft_on(run))
            return ft_errorf(err, errlen, "--kernels fused-mlp is full fine-tuning only (axolotl refuses it "
                                          "with LoRA)");
    }
    return 0;
}
