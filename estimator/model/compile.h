/* torch.compile of a decoder block: what AOTAutograd's partitioner saves for
 * backward, and which tensors the fused forward writes to memory.
 *
 * Under torch.compile (inductor) a block's forward and backward are traced
 * as one joint graph of aten ops and split by
 * min_cut_rematerialization_partition (torch 2.6.0
 * torch/_functorch/partitioners.py, solve_min_cut; the default for training
 * under inductor). It saves a minimum-weight cut between what the forward can
 * make and what the backward reads; everything on the backward's side of the
 * cut is recomputed there, fused into the backward's kernels. The rules
 * applied here on the block description (est_module):
 *  - required by backward (edges to the sink): the tensors eager autograd
 *    saves (derivatives.yaml; the joint graph's backward reads the same);
 *  - banned from recomputation (edges from the source): the block's inputs
 *    (primals); outputs of ops not on the recomputable allowlist
 *    (get_default_op_list: mm, addmm, bmm, SDPA, flash-attn and other custom
 *    ops, bitsandbytes' kernels, dropout's random mask); a reduction whose
 *    output is over 4 times smaller than its input (ban_recompute_reductions:
 *    RMSNorm's mean); a tensor the backward reads with an op that cannot fuse
 *    (ban_recompute_materialized_backward: a Linear's input for its weight
 *    gradient, SDPA's q, k, v);
 *  - weight of saving a tensor: its bytes x 1.1^d, d its distance in ops from
 *    the backward (at least 1, at most 100), doubled when every reader of it
 *    can fuse with it (is_materialized is false: saving it costs a write
 *    that fusion would have avoided);
 *  - parameters are always available (they are resident; saving them costs
 *    no activation memory).
 * Not applied: ban_recompute_used_far_apart and ban_recompute_long_fusible_
 * chains (heuristics that in a decoder block choose between tensors of equal
 * size: torch 2.6 saves o_proj's output where this cut takes the residual
 * sum), `cat` being off the allowlist (rotate_half's cat feeds only tensors
 * SDPA makes the cut save anyway), graph breaks, CUDA graphs, dynamic shapes,
 * inductor's own buffer reuse inside a kernel. Checked on the CPU against
 * torch 2.6.0's partitioner (calibrate/probes/compile_cut.py). */
#ifndef EST_COMPILE_H
#define EST_COMPILE_H

#include <stdbool.h>
#include <stdint.h>

#include "module_graph.h"

/* Replaces what block `m` saves by the partitioner's cut: each tensor of
 * the cut is saved (until the backward of its first forward reader), every
 * other tensor is not. Returns the cut's bytes, or -1 (no room: a bug). */
int64_t est_compile_partition(est_module *m);

/* The fused forward's memory traffic of the block's elementwise ops, bytes:
 * every tensor an elementwise op writes that must exist in memory (the cut
 * saves it, an op that cannot fuse reads it, or it leaves the block) written
 * once, and every such tensor (or parameter, or input) an elementwise op
 * reads, read once. *kernels: one per written tensor. After
 * est_compile_partition. */
double est_compile_elementwise_bytes(const est_module *m, double *kernels);

#endif
