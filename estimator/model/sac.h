/* Op-level selective activation checkpointing: which ops of a checkpointed
 * decoder block keep their outputs from the first forward to the recompute.
 *
 * torch.utils.checkpoint(use_reentrant=False, context_fn=
 * create_selective_checkpoint_contexts(policy)) (torch 2.4-2.6
 * utils/checkpoint.py, _CachingTorchDispatchMode / _CachedTorchDispatchMode)
 * asks the policy about every aten op of the block's forward: an op answered
 * MUST_SAVE or PREFER_SAVE has its outputs stored (detached aliases, the same
 * storage) until the recompute, which pops them instead of running the op;
 * every other op runs again. The rest is the plain non-reentrant checkpoint:
 * the first forward keeps nothing else but the block's inputs, and the
 * recompute rebuilds what the block's backward needs.
 *
 * The policy is torchtitan's (v0.2.0, torchtitan/distributed/
 * activation_checkpoint.py _apply_op_sac, with the save list
 * _op_sac_save_list of torchtitan/models/llama3/infra/parallelize.py):
 *  - aten.mm, _scaled_dot_product_efficient_attention and
 *    _scaled_dot_product_flash_attention (torch's SDPA kernels),
 *    reduce_scatter_tensor and aten.max are saved;
 *  - except every second mm: a counter of mm calls per checkpoint call
 *    (forward and recompute counted apart, so both agree) recomputes the
 *    mm whose count is even;
 *  - an mm whose weight has the shape of a MoE router's gate
 *    (per_op_sac_force_recompute_mm_shapes_by_fqns = ["moe.router.gate"]) is
 *    recomputed and not counted.
 * In a block that means: a Linear without bias is F.linear -> t, mm (torch
 * 2.6 aten/src/ATen/native/Linear.cpp; checked with a dispatch-mode trace on
 * torch 2.6.0 CPU), counted; a Linear with a bias over 3-D input is one addmm,
 * neither counted nor saved; PEFT's lora_A and lora_B are Linears without
 * bias, counted in op order; SDPA is saved, flash-attn's own kernel
 * (flash_attn._flash_attn_forward, a custom op) and eager attention's bmm and
 * softmax are recomputed. Nothing else of a decoder block is on the list. */
#ifndef EST_SAC_H
#define EST_SAC_H

#include <stddef.h>
#include <stdint.h>

#include "module_graph.h"
#include "run_desc.h"

/* Marks sac_save on the ops of block `m` (built for `run`) that torchtitan's
 * op-level policy saves; clears it on every other op. */
void est_sac_mark(est_module *m, const est_run *run);

/* Bytes the policy keeps per block between its forward and its backward,
 * beside the checkpoint's input. */
int64_t est_sac_kept_bytes(const est_module *m);

/* The block of `run` in regime `g`, marked by the policy, for the figures
 * that do not walk the step (the report's kept bytes, work.c's recompute;
 * est_regime_of gives their regime). 0, or -1 (err). */
int est_sac_block(const est_run *run, const est_regime *g, est_module *m, char *err, size_t errlen);

#endif
