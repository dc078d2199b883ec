/* What FSDP2 (fully_shard) adds to a step beyond FSDP1, per parameter
 * group and parameter: the device copies around its collectives (the
 * all-gather copy-in and copy-out, or at one rank the per-parameter copy of
 * each shard into its unsharded tensor; foreach_reduce's chunk_cat, the
 * reduce-scatter's output and the cast to the parameter's dtype) and the
 * host work of its per-parameter Python (DTensor shards, the unsharded
 * parameters swapped in and out per module, each gradient wrapped as a
 * DTensor, the optimizer's foreach ops dispatched through DTensor). Sources:
 * torch 2.11 torch/distributed/fsdp/_fully_shard/ (_fsdp_param_group.py,
 * _fsdp_collectives.py, _fsdp_param.py); docs/method.md, "FSDP2's step
 * beyond FSDP1". */
#ifndef EST_WORK_FSDP2_H
#define EST_WORK_FSDP2_H

#include <stdbool.h>

#include "constants.h"
#include "events.h"
#include "module_graph.h"
#include "run.h"

/* One parameter group's tensors and bytes (a decoder block, or the root:
 * embedding, final norm, LM head). */
typedef struct est_fsdp2_group {
    double tensors;        /* parameter tensors (a tied head's weight is the embedding's) */
    double trained;        /* ... that take a gradient */
    double gathered_bytes; /* elements x bytes as gathered (the compute dtype, or less) */
    double cast_bytes;     /* read + write of the shards cast to the compute dtype first */
    double cast_tensors;   /* ... tensors that need that cast */
    double trained_elems;  /* elements of the trained tensors */
} est_fsdp2_group;

/* Counts of module `m` for compute dtype bytes `c` and shard dtype bytes `w`. */
est_fsdp2_group est_fsdp2_count(const est_module *m, double c, double w);

/* Device work of one gather of group `g` over `ranks` ranks: bytes read +
 * written (*bytes) and kernels (*kernels); `one_rank_copies`: the torch that
 * skips the collective at one rank (stack.h fsdp2_one_rank_skips_gather). */
void est_fsdp2_gather_work(const est_fsdp2_group *g, double ranks, bool one_rank_copies, double *bytes,
                           double *kernels);

/* Device work of one reduction of group `g`: c, r, w the compute (gradient),
 * reduce and shard dtypes' bytes. */
void est_fsdp2_reduce_work(const est_fsdp2_group *g, double ranks, double c, double r, double w, double *bytes,
                           double *kernels);

/* Host ops FSDP2 adds beyond FSDP1 for group `g`: in a forward (one gather,
 * the post-forward reshard), a backward (the reduction, and with `regather`
 * the gather again: --zero 3),
 * and at the optimizer step (foreach ops through DTensor). */
double est_fsdp2_forward_ops(const est_fsdp2_group *g);
double est_fsdp2_backward_ops(const est_fsdp2_group *g, bool regather);
double est_fsdp2_step_ops(const est_fsdp2_group *g);

/* Appends FSDP2's work of `unit` (nothing for other frameworks, FSDP1,
 * offload or torch.compile). `block`: the block's description, NULL to
 * build it. */
void est_work_fsdp2(est_step *st, const est_run *run, est_unit unit, const est_module *block);

#endif
