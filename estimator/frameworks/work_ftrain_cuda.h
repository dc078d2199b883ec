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

/* One thread-per-row kernel: `rows` threads in blocks of 128 (kRowThreads,
 * trainer/backend/cuda/cuda_internal.h), warps of 32 consecutive rows. A
 * query-row thread t of a head loops over keys 0..t; a key-row thread j over
 * `group` query heads x keys j..T-1. Per iteration it loads `distinct`
 * elements of rows of its own and `shared` elements every lane of the warp
 * loads alike (or coalesced: one wavefront each); once, outside the loop,
 * `once_distinct` elements of its own. */
typedef struct est_row_kernel {
    double rows, T, group;
    bool by_key;
    double distinct, shared, once_distinct;
} est_row_kernel;

/* The L1 wavefronts the busiest of `sms` SMs serves for kernel `k`: each
 * warp runs as many iterations as its longest lane, a block's warps share
 * their SM, and the blocks go in launch order to the least loaded SM. */
double est_row_kernel_sm_cycles(const est_row_kernel *k, double sms);

/* Appends ftrain's CUDA attention core, forward or backward, for a batch of
 * B sequences of T tokens with nh query heads, nkv key/value heads of head
 * dim hd, eager or flash, on a GPU of `sms` SMs. */
void est_work_ftrain_cuda_attention(est_step *st, double B, double T, double nh, double nkv, double hd,
                                    bool eager, bool backward, double sms);

#endif
