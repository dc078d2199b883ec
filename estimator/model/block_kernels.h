/* The fused kernels of --kernels (kernels.h) as ops of the decoder block:
 * each builds the ops of one custom torch.autograd.Function, what it keeps
 * for backward being its ctx.save_for_backward (est_module_function), and
 * the buffers its backward holds to its end. Internal to estimator/model/. */
#ifndef EST_BLOCK_KERNELS_H
#define EST_BLOCK_KERNELS_H

#include "block_build.h"

/* axolotl's LoRA_QKV on the attention input x: q, k and v. */
void est_kernel_lora_qkv(est_bld *b, int x, int *q, int *k, int *v);
/* axolotl's LoRA_O on the attention output. */
int est_kernel_lora_o(est_bld *b, int x);
/* axolotl's LoRA_MLP (SwiGLU or GeGLU) on the MLP input. */
int est_kernel_lora_mlp(est_bld *b, int x);
/* xformers' SwiGLUPackedWeights (axolotl's flash_attn_fuse_mlp) on the MLP input. */
int est_kernel_fused_mlp(est_bld *b, int x);
/* Cut Cross-Entropy (--loss cce) on the final norm's output x and the LM head w: the loss. */
int est_kernel_cce_loss(est_bld *b, int x, int w);

#endif
