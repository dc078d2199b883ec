/* The sequence-parallel collectives of a tensor-parallel block (block_build.h).
 * torch 2.8 torch/distributed/tensor/parallel/style.py: PrepareModuleInput
 * (torchtitan's plan for attention and feed_forward: input_layouts Shard(1),
 * desired_input_layouts Replicate()) redistributes the norm's output with one
 * all-gather along the sequence, whose result the three (two) ColwiseParallel
 * projections read and autograd keeps as their saved input; RowwiseParallel
 * (output_layouts Shard(1)) turns its partial sums into this rank's rows with
 * one reduce-scatter. Backward runs the opposite collective on the gradient.
 * Each is a new tensor here; its wire time is the work's (work_parallel.c
 * est_work_tp_lanes), not this copy's. */
#include "block_build.h"
#include "tp.h"

int est_tp_gather(est_bld *b, int x) {
    if (!est_tp_on(b->run)) return x;
    const est_mtensor *t = &b->m->tensors[x];
    return est_op1(b, EST_OP_COPY, "all-gather (sequence)", t->elems * b->run->tp, t->elem_bytes, x);
}

int est_tp_scatter(est_bld *b, int x) {
    if (!est_tp_on(b->run)) return x;
    const est_mtensor *t = &b->m->tensors[x];
    return est_op1(b, EST_OP_COPY, "reduce-scatter (sequence)", t->elems / b->run->tp, t->elem_bytes, x);
}
