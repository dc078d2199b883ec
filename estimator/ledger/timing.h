/* The time ledger: prices the work events of one step (estimator/ledger/events.h) at
 * the GPU's achieved rates and walks its critical path. docs/method.md ("Step
 * time") writes out every equation and where each constant comes from; the
 * constants are in estimator/catalog/constants.h (fitted per GPU by `ftest fit`,
 * calibrate/fit_time.c).
 *
 * The model in one paragraph. A micro-batch is a sequence of units (embedding,
 * each block's forward, the LM head and loss, each block's backward). Each unit
 * has a device time (GEMMs at an achieved rate that depends on the GPU's dense
 * peak and the smallest GEMM dimension, bounded below by their memory traffic;
 * the attention core at the attention efficiency; memory-bound elementwise
 * ops at achieved HBM bandwidth; a launch gap per kernel) and a host time
 * (PyTorch dispatch per kernel plus the framework's per-block overhead). The
 * host runs ahead of the device asynchronously, so a unit takes the larger of
 * the two. Collectives on their own stream beside the compute (DeepSpeed
 * ZeRO-3's per-module gathers and reduce-scatters) are a third lane: a unit
 * takes the largest of the three. A step is grad_accum micro-batches, the
 * collectives not hidden behind compute, the optimizer step (on the GPU, or on
 * the CPU with the PCIe round trip under offload). */
#ifndef EST_TIMING_H
#define EST_TIMING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "constants.h"
#include "run.h"
#include "events.h"
#include "timeline.h"

/* One unit of work on one rank. */
typedef struct est_time_part {
    double flops;      /* floating-point operations executed */
    double hbm_bytes;  /* traffic of memory-bound ops (elementwise, norms, optimizer) */
    double kernels;    /* kernels launched */
    double gpu_s;      /* device time */
    double host_s;     /* host time to issue it */
    double comm_s;     /* collectives it waits for (ZeRO-3's parameter all-gathers and
                          gradient reduce-scatters across ranks), on their own stream */
    bool waits;        /* the host waits for the device before issuing it (a host sync:
                          .item(), a bool of a device tensor; events.h) */
    double waited_s;   /* of host_s, the ops issued after a sync inside the unit before its
                          device work can go on (events.h waited_ops): the device idles */
} est_time_part;

/* Units of one micro-batch, then per-step terms. All times in seconds, per rank. */
typedef struct est_time_detail {
    bool modelled;              /* false when the device has no peak figures (ftrain's CPU) */
    char why[160];              /* when not modelled because the step could not be built: why */
    double peak_flops;          /* dense peak of the compute precision, FLOP/s */

    est_time_part embed_fwd, block_fwd, head_fwd, loss_bwd, head_bwd, block_bwd, embed_bwd;
    double microbatch_s;        /* the units as a host-to-device pipeline (est_pipeline_unit_s) */
    double gpu_microbatch_s;    /* device time of one micro-batch (the overlap window) */
    double host_microbatch_s;   /* host time of one micro-batch */

    double comm_bytes;          /* bytes each rank sends per step (ring collectives) */
    double comm_s;              /* their time on the slowest link */
    double comm_exposed_s;      /* the part not hidden behind compute, outside the micro-batches */
    double comm_bound_s;        /* per step, how much longer the micro-batches take because
                                   units wait on their collectives (ZeRO-3 at > 1 rank) */
    double link_bytes_per_s;    /* achieved bandwidth of that link */
    double optimizer_s;         /* optimizer step on the GPU (0 under offload) */
    double pcie_bytes;          /* offload traffic per step */
    double pcie_s;
    double cpu_optimizer_s;     /* DeepSpeedCPUAdam / CPU AdamW under offload */

    double step_s;              /* one optimizer step */
    double model_flops;         /* per rank per step: (6 N_matmul + 6 L s d_q) per token */
    double executed_flops;      /* per rank per step, recompute included */
    int64_t matmul_params;      /* N_matmul: weights that multiply activations (LM head included) */
    double tokens_per_step;     /* all ranks (a double: batch x seq x accumulation x ranks can pass int64) */
    double tokens_per_s;        /* all ranks */
    double tokens_per_s_per_gpu;
    double it_per_s;
    double mfu;                 /* model_flops / (step_s * peak_flops) */
} est_time_detail;

/* One unit `p` through the micro-batch's host-to-device pipeline: adds its
 * host time to *host_done_s and returns when the device has run it, given
 * the device's finish of the units before it (timing.c). */
double est_pipeline_unit_s(double *host_done_s, double device_done_s, const est_time_part *p);

/* Prices the work of step `st` (built for `run`) with the constants `k`.
 * Returns 0; `out->modelled` is false (all zeros) for a device without peak
 * figures or a run whose time is not modelled yet. When `tl` is the step's
 * timeline (from the memory ledger), each moment also gets the FLOPs, bytes and
 * time of the units booked on it: one micro-batch's for forward, loss and
 * backward moments; the exposed collectives on the reduce moment; the
 * optimizer step, PCIe copies and CPU optimizer on the optimizer moment. So
 * grad_accum * sum(micro-batch moments) + reduce + optimizer = step_s. */
int est_time_ledger(const est_run *run, const est_step *st, const est_constants *k,
                    est_time_detail *out, est_timeline *tl);

/* The constants the time model uses for `run`: `k` (an estimate's e->k), except
 * for ftrain, whose memory profile zeroes e->k (no context, no reserve): its time
 * uses the defaults and any fitted ftrain profile, loaded into `own`. */
const est_constants *est_time_constants(const est_run *run, const est_constants *k,
                                        est_constants *own);

/* The precision's dense peak of one GPU in FLOP/s (bf16, fp16; fp32 without TF32,
 * PyTorch's default for matmuls). */
double est_peak_flops(const est_run *run);

#endif
