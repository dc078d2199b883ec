/* A thread-per-row GPU kernel as the time ledger prices it: the work is the
 * kernel's shape (EST_EV_SIMT events carry it, card-free, as every event of a
 * step is), the card's SM count and clock turn it into seconds when the step
 * is priced (timing.c), so one step serves every card a plan compares
 * (search/plan_memo.c). The model is ftrain's CUDA attention's
 * (frameworks/work_ftrain_cuda.h, docs/trainer.md "Step time"). */
#ifndef EST_SIMT_H
#define EST_SIMT_H

#include <stdbool.h>

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

#endif
