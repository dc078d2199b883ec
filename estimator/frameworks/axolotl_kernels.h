/* axolotl's kernel and offloading keys (0.18.0), read after the rest of the
 * YAML (the adapter, its targets, the attention and the framework are known):
 * the fused LoRA kernels (lora_qkv_kernel, lora_o_kernel, lora_mlp_kernel,
 * which axolotl also switches on by itself), xformers' fused MLP
 * (flash_attn_fuse_mlp) and TRL's activation offloading
 * (gradient_checkpointing: offload, activation_offloading: true). */
#ifndef EST_AXOLOTL_KERNELS_H
#define EST_AXOLOTL_KERNELS_H

#include <stddef.h>

#include <cJSON.h>

#include "run.h"
#include "run_given.h"

/* Sets run->kernels and run->activation_offload from the YAML unless the
 * flags gave them, appending the keys it applied to `used` (", key"). 0, or
 * -1 with one line in err. */
int est_axolotl_kernels(const cJSON *root, const est_given *given, est_run *run, char *used, size_t usedlen,
                        char *err, size_t errlen);

#endif
