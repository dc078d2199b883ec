/* Fused kernels that replace a block's modeling code with one custom
 * torch.autograd.Function each (--kernels): what each saves for backward is
 * its ctx.save_for_backward, not the sum of the ops it fuses. The ops are
 * built by block_kernels.c; this module names them, parses the list and says
 * which runs they apply to.
 *
 *  - lora-qkv, lora-o, lora-mlp: axolotl's LoRA_QKV, LoRA_O and LoRA_MLP
 *    (axolotl 0.18.0 src/axolotl/kernels/lora.py; axolotl's lora_qkv_kernel,
 *    lora_o_kernel, lora_mlp_kernel);
 *  - fused-mlp: xformers' SwiGLU with packed weights (swiglu_packedw,
 *    xformers/csrc/swiglu/swiglu_packedw.cpp SwiGLUPackedWeights), which
 *    axolotl's flash_attn_fuse_mlp puts in place of LlamaMLP
 *    (monkeypatch/xformers_/__init__.py FusedMLP). */
#ifndef EST_KERNELS_H
#define EST_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "run_desc.h"

typedef enum {
    EST_KERNEL_LORA_QKV, EST_KERNEL_LORA_O, EST_KERNEL_LORA_MLP, EST_KERNEL_FUSED_MLP,
    EST_KERNEL_COUNT
} est_kernel;

#define EST_KERNEL_BIT(k) (1u << (unsigned)(k))

/* "lora-qkv" ...; "?" out of range. */
const char *est_kernel_name(est_kernel k);

/* A comma list of kernel names (or "none") to bits: 0, or -1 with "--kernels
 * must list lora-qkv|lora-o|lora-mlp|fused-mlp (got "x")". */
int est_kernels_parse(const char *list, uint32_t *out, char *err, size_t errlen);

/* True when kernel k replaces the run's modeling code. */
bool est_kernel_on(const est_run *run, est_kernel k);

/* The LoRA targets kernel k needs adapters on (axolotl patches a module only
 * when every projection it fuses has one); 0 for fused-mlp. */
uint32_t est_kernel_lora_targets(est_kernel k);

/* 0 when the run's kernels apply to it, or -1 with one line naming what they
 * need (LoRA on the fused projections; fused-mlp: full fine-tuning of a
 * Llama-family MLP). */
int est_kernels_validate(const est_run *run, char *err, size_t errlen);

#endif
