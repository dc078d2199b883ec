/* DeepSpeed ZeRO's own host work per step, counted as the ATen ops its
 * Python dispatches beyond the model's (the per-parameter gradient hooks and
 * bucket copies of ZeRO-1/2, ZeRO-3's per-module hooks and per-parameter
 * gathers and releases, the step's per-tensor norms), from the module
 * descriptions (model/module_graph.h) and priced by the time ledger at the
 * same host cost per op as the model's own ops (kernel_host_overhead_s).
 * Counts and sources: DeepSpeed 0.19.8, docs/method.md "DeepSpeed's host
 * work per step". */
#ifndef EST_WORK_DS_HOST_H
#define EST_WORK_DS_HOST_H

#include "constants.h"
#include "module_graph.h"
#include "run.h"
#include "events.h"

/* What one module's parameters and calls ask of DeepSpeed per step. */
typedef struct est_ds_module_count {
    double tensors;   /* parameter tensors (a tied head's weight is the embedding's) */
    double trainable; /* ... that take a gradient (one hook each) */
    double gathered;  /* ... that ZeRO-3 gathers and releases (above the persistence threshold) */
    double calls;     /* nn.Module calls in its forward (ZeRO-3 hooks each) */
} est_ds_module_count;

/* Counts module `m`'s parameters against ZeRO-3's persistence threshold
 * `persist_elems` (elements); `calls` is the caller's. */
est_ds_module_count est_ds_count_module(const est_module *m, double persist_elems);

/* ATen ops DeepSpeed's own code dispatches per micro-batch in a block's
 * forward or backward (`backward`), for module count `c`, ZeRO stage
 * `zero` (1-3) over `ranks` data-parallel ranks (ZeRO-3 gathers nothing at
 * one rank); ZeRO-3's hook Python that dispatches no op counted as the ops
 * whose host time it takes (measured). */
double est_ds_block_ops(int zero, int ranks, const est_ds_module_count *c, bool backward);

/* ... once per step in step(), over `c` (the whole model's counts). */
double est_ds_step_ops(int zero, const est_ds_module_count *c);

/* ... of those, the ops step() dispatches before its last host sync (the
 * overflow check's `.item()`, the norm check's `bool()`): they cannot
 * overlap the step's device work that follows (timing.c). */
double est_ds_step_waited_ops(int zero, const est_ds_module_count *c);

/* The host ops DeepSpeed adds to `unit` of run `run` (0 where it adds none
 * or is not counted: other frameworks, ZeRO-0, offload, torch.compile).
 * `block`: the block's description, NULL to build it. */
double est_ds_host_ops(const est_run *run, const est_constants *k, est_unit unit, const est_module *block);

/* ... of those, the ones issued before a host sync inside the unit
 * (est_ds_step_waited_ops for the optimizer unit; 0 elsewhere). */
double est_ds_host_waited_ops(const est_run *run, const est_constants *k, est_unit unit);

#endif
