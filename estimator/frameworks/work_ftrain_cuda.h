/* ftrain's CUDA attention as the work of the step: its kernels
 * (trainer/backend/cuda/attention_cuda.cu, row bodies in attn_rows.h) run
 * one thread per query row (forward, dq) or key row (dk, dv), with no shared
 * memory and no matrix units, reading every operand from global memory at
 * each use. Such a kernel is bound by its L1 requests: a warp's load of one
 * element per lane costs one L1 wavefront when all lanes read the same row
 * (a broadcast) and 32 when each lane reads a row of its own (32 distinct
 * cache lines; NVIDIA Nsight Compute Kernel Profiling Guide, "Memory
 * Tables": a wavefront is the unit the L1TEX stage processes per cycle).
 * Each kernel becomes one EST_EV_SIMT event holding the wavefronts its
 * busiest SM serves; docs/trainer.md ("Step time") has the derivation. */
#ifndef EST_WORK_FTRAIN_CUDA_H
#define EST_WORK_FTRAIN_CUDA_H

#include <stdbool.h>

#include "events.h"
#include "simt.h"

/* Appends ftrain's CUDA attention core, forward or backward, for a batch of
 * B sequences of T tokens with nh query heads, nkv key/value heads of head
 * dim hd, eager or flash (the card's SMs price it: simt.h). */
void est_work_ftrain_cuda_attention(est_step *st, double B, double T, double nh, double nkv, double hd,
                                    bool eager, bool backward);

#endif
