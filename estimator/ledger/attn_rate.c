/* Fused attention rates by kernel (attn_rate.h). */
#include "attn_rate.h"

#include <math.h>
#include <string.h>

#include "fw_registry.h"
#include "stack.h"

/* FlashAttention-3 (Shah et al. 2024, arXiv 2407.08608) §4.1, Figures 5 and
 * 6: TFLOP/s of FlashAttention-2 and of cuDNN on one H100 80GB SXM5 in
 * BF16/FP16, batch x seq = 16k tokens, hidden 2048 (32 heads of 64, or 16 of
 * 128), at sequence lengths 512, 1k, 2k, 4k, 8k, 16k. The forward figures
 * are those with the causal mask (what a causal LM runs); the paper measures
 * the backward without it only (Figure 6), so those stand for the causal
 * backward too. FLOPs are counted as the paper does (4 s^2 d heads forward,
 * halved under the causal mask; the backward 2.5x the forward), which is how
 * work.c and timing.c count them. */
#define SEQS 6
static const double SEQ_AT[SEQS] = {512, 1024, 2048, 4096, 8192, 16384};
/* [kernel: 0 FA2, 1 cuDNN][pass: 0 forward causal, 1 backward][head: 0 d=64, 1 d=128] */
static const double H100_TFLOPS[2][2][2][SEQS] = {
    {{{180, 229, 262, 284, 295, 299},   /* FA2 fwd causal d64: Fig. 5b */
      {191, 260, 298, 319, 333, 335}},  /* FA2 fwd causal d128: Fig. 5d */
     {{198, 238, 264, 279, 287, 291},   /* FA2 bwd d64: Fig. 6a */
      {214, 260, 291, 310, 318, 322}}}, /* FA2 bwd d128: Fig. 6b */
    {{{225, 288, 334, 363, 379, 388},   /* cuDNN fwd causal d64: Fig. 5b */
      {315, 410, 484, 518, 529, 539}},  /* cuDNN fwd causal d128: Fig. 5d */
     {{266, 348, 395, 417, 432, 433},   /* cuDNN bwd d64: Fig. 6a */
      {305, 408, 465, 499, 518, 516}}}, /* cuDNN bwd d128: Fig. 6b */
};
/* The H100 SXM5's dense BF16 tensor-core peak the figures are a fraction of:
 * 989.4 TFLOP/s (NVIDIA H100 Tensor Core GPU datasheet; the FA3 paper's 740
 * TFLOP/s "75% utilization" is the same denominator). */
#define H100_SXM_BF16_TFLOPS 989.4

/* Linear in log2(seq) between the measured lengths, held at the ends. */
static double along_seq(const double *row, double seq) {
    if (!(seq > SEQ_AT[0])) return row[0];
    if (seq >= SEQ_AT[SEQS - 1]) return row[SEQS - 1];
    int i = 0;
    while (seq > SEQ_AT[i + 1]) i++;
    const double t = log2(seq / SEQ_AT[i]);
    return row[i] + t * (row[i + 1] - row[i]);
}

double est_attn_hopper_fraction(est_attn_kernel kernel, bool backward, double head_dim, double seq) {
    if (kernel != EST_AK_FA2 && kernel != EST_AK_CUDNN) return 0;
    const double (*t)[SEQS] = H100_TFLOPS[kernel == EST_AK_CUDNN][backward ? 1 : 0];
    const double at64 = along_seq(t[0], seq), at128 = along_seq(t[1], seq);
    /* head widths between the two measured: linear; outside: the nearer */
    const double w = head_dim <= 64 ? 0 : head_dim >= 128 ? 1 : (head_dim - 64) / 64;
    return (at64 + w * (at128 - at64)) / H100_SXM_BF16_TFLOPS;
}

/* torch 2.11 sdp_utils.cpp: SDPA with no attention mask runs cuDNN's kernel
 * on sm90 when the stack prefers it, else the flash kernel (FA2's code,
 * aten/src/ATen/native/transformers/cuda/flash_attn); with a padding mask
 * flash is ruled out and the memory-efficient kernel runs (no figure: the
 * flat fraction). The flash-attn package is FA2. Ampere/Ada: no per-pass
 * figures (FA2's paper gives A100 rates only as the flat fraction's range).
 * A framework off the torch stack (ftrain) runs its own kernels. */
est_attn_kernel est_attn_kernel_of(const est_run *run) {
    if (strcmp(run->gpu.arch, "hopper") != 0 || !est_fw_of(run)->torch_stack) return EST_AK_OTHER;
    if (run->precision != EST_PREC_BF16_MIXED && run->precision != EST_PREC_BF16 &&
        run->precision != EST_PREC_FP16_MIXED)
        return EST_AK_OTHER;
    if (run->attention == EST_ATTN_FLASH) return EST_AK_FA2;
    if (run->attention != EST_ATTN_SDPA || run->padding_mask) return EST_AK_OTHER;
    return run->stack && run->stack->sdpa_prefers_cudnn ? EST_AK_CUDNN : EST_AK_FA2;
}

double est_attn_flops_per_s(const est_run *run, bool backward, double peak, double flat_fraction) {
    const est_attn_kernel k = est_attn_kernel_of(run);
    /* the kernel sees each sample's own length when rows are packed */
    const double seq = run->packed && run->packed_sample_len > 0 ? (double)run->packed_sample_len
                                                                  : (double)run->seq_len;
    const double f = est_attn_hopper_fraction(k, backward, (double)run->model.head_dim, seq);
    return peak * (f > 0 ? f : flat_fraction);
}
