/* Liger-Kernel's Triton kernels (linkedin/Liger-Kernel v0.8.2,
 * src/liger_kernel/ops/ and transformers/monkey_patch.py) as run settings:
 * which of them replace the eager Hugging Face ops, their names, and the set
 * apply_liger_kernel_to_<model_type>() enables by default. What each kernel
 * saves for its backward and the bytes it moves are built into the module
 * graph (block.c, block_ends.c) and priced in work.c; docs/method.md
 * ("Liger-Kernel") derives each. */
#ifndef EST_LIGER_H
#define EST_LIGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model_config.h"

#define EST_LIGER_ROPE 1u        /* ops/rope.py LigerRopeFunction */
#define EST_LIGER_RMS_NORM 2u    /* ops/rms_norm.py LigerRMSNormFunction */
#define EST_LIGER_SWIGLU 4u      /* ops/swiglu.py LigerSiLUMulFunction */
#define EST_LIGER_GEGLU 8u       /* ops/geglu.py LigerGELUMulFunction */
#define EST_LIGER_LAYER_NORM 16u /* ops/layer_norm.py: no model ftest reads has a LayerNorm */
#define EST_LIGER_CROSS_ENTROPY 32u /* ops/cross_entropy.py LigerCrossEntropyFunction */
#define EST_LIGER_FLCE 64u       /* ops/fused_linear_cross_entropy.py (the run's --loss chunked) */

/* "rms_norm,rope,swiglu,..." or "all" (the model type's defaults, resolved
 * by est_liger_resolve once the model is known): EST_LIGER_* bits, with
 * *all set for "all". */
int est_liger_parse(const char *s, uint32_t *out, bool *all, char *err, size_t errlen);
/* "rope,rms_norm,..." for the bits; returns buf. */
const char *est_liger_name(uint32_t bits, char *buf, size_t n);
/* apply_liger_kernel_to_<model_type>()'s defaults (monkey_patch.py v0.8.2):
 * RoPE, RMSNorm, SwiGLU (GeGLU for the Gemmas) and the fused linear
 * cross-entropy. */
uint32_t est_liger_defaults(const ft_model *m);
/* Checks `bits` against the model: the MLP kernel must be the model's
 * activation's, cross_entropy and the fused loss exclude each other (as
 * apply_liger_kernel_to_* asserts), and Liger's SwiGLU on MoE experts is not
 * modelled. Returns 0, or -1 with one line. */
int est_liger_check(const ft_model *m, uint32_t bits, char *err, size_t errlen);

#endif
