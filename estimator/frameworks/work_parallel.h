/* The work of a step across ranks and across the PCIe link: ZeRO-3's
 * per-module collectives (in the units' third lane), the step's gradient
 * collectives, and the optimizer step on the GPU or, under offload, on the
 * host (estimator/frameworks/work.c emits the compute). */
#ifndef EST_WORK_PARALLEL_H
#define EST_WORK_PARALLEL_H

#include "constants.h"
#include "run.h"
#include "events.h"

/* DeepSpeed ZeRO-3 across ranks: the gathers and reduce-scatters of `unit`. */
void est_work_zero3_lanes(est_step *st, const est_run *run, const est_constants *k, est_unit unit);

/* Tensor parallelism (--tp): the activations' all-gathers and reduce-scatters
 * of `unit` within the node; `recompute`: a checkpointed block's backward. */
void est_work_tp_lanes(est_step *st, const est_run *run, est_unit unit, bool recompute);

/* The gradient collectives of one step, with what compute can hide of them. */
void est_work_step_collectives(est_step *st, const est_run *run, const est_constants *k);

/* The optimizer step: device traffic, or PCIe copies and the CPU optimizer. */
void est_work_optimizer(est_step *st, const est_run *run, const est_constants *k);

#endif
