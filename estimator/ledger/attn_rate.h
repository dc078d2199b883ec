/* The rate of the fused attention kernels (SDPA's flash / cuDNN kernels, the
 * flash-attn package) by architecture, kernel, head width and sequence
 * length, from the kernels' published measurements (docs/method.md, "Step
 * time"). */
#ifndef EST_KERNEL_RATE_H
#define EST_KERNEL_RATE_H

#include <stdbool.h>

#include "run_desc.h"

/* Which fused kernel runs a run's attention on its card. */
typedef enum est_attn_kernel {
    EST_AK_OTHER,    /* no published per-pass figures: the flat fraction of peak */
    EST_AK_FA2,      /* FlashAttention-2 (torch's flash kernel, or flash-attn 2) */
    EST_AK_CUDNN,    /* cuDNN's fused attention (SDPA on sm90 when preferred) */
} est_attn_kernel;

est_attn_kernel est_attn_kernel_of(const est_run *run);

/* The fraction of the card's dense peak that `kernel` reaches on Hopper, in
 * the forward (causal) or backward pass, at head width `head_dim` and
 * sequence length `seq`; 0 when no figure applies (then the caller keeps its
 * flat fraction). */
double est_attn_hopper_fraction(est_attn_kernel kernel, bool backward, double head_dim, double seq);

/* The achieved FLOP/s of the attention kernels of `run` in one pass, given
 * the card's dense peak and the flat fraction used where no figure applies. */
double est_attn_flops_per_s(const est_run *run, bool backward, double peak, double flat_fraction);

#endif
