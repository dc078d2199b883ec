/* FSDP2's step beyond FSDP1 (work_fsdp2.h), read from torch 2.11
 * torch/distributed/fsdp/_fully_shard/ (the H200 day's stack):
 *
 * Device work per parameter group (a decoder block, or the root):
 *  - Gather (FSDPParamGroup.pre_forward, and pre_backward again when the
 *    group was resharded after forward: --zero 3): each shard is cast to
 *    param_dtype when it is held in another dtype (_fsdp_param.py
 *    all_gather_inputs -> _to_dtype_if_needed: one kernel per tensor, read w,
 *    write c); then over W > 1 ranks foreach_all_gather copies the inputs into
 *    one flat buffer (all_gather_copy_in: torch._foreach_copy_, one launch)
 *    and, after the collective, out of it into each unsharded parameter
 *    (foreach_all_gather_copy_out -> split_with_sizes_copy: one kernel, the
 *    whole group read and written); at one rank (wait_for_unshard, "world_size
 *    == 1", from torch 2.9) each parameter's unsharded tensor is filled by its
 *    own tensor.copy_(all_gather_input): one kernel per tensor, read + write.
 *  - Reduce (post_backward -> foreach_reduce, the trained tensors): chunk_cat
 *    of the unsharded gradients (dtype c) into the reduce-scatter input
 *    (dtype r): one kernel; at one rank reduce_output.copy_(input) (one
 *    kernel, r read and written) in place of the reduce-scatter;
 *    _to_dtype_if_needed(reduce_output, orig_dtype) when r != w (one kernel).
 *    No divide kernel for fp32/bf16 reduction (_get_gradient_divide_factors:
 *    ReduceOp.SUM/AVG without pre/post factors).
 * Host work: the CUDA runtime calls of each group's hooks, counted from the
 * source as one op each (as a launch is): per gather, unshard's
 * Event().record() and wait_for_unshard's copy-out event (created, recorded)
 * and the two streams' wait_event: 6; per reduction, the wait on the previous
 * reduce-scatter's event and on the post-reduce event, wait_stream (a record
 * and a wait), two stream switches in and out, two record_event: 10. Beyond
 * them the per-parameter Python (all_gather_inputs, init_unsharded_param,
 * the module attributes swapped per parameter in _to_unsharded/_to_sharded,
 * each gradient wrapped as a DTensor; AdamW's foreach ops dispatched through
 * DTensor), measured on the CPU (calibrate/host/time_fsdp_host.py, torch
 * 2.11.0, 2026-11-26, 80 rounds, the tiny Llama's 9 tensors per block, world
 * size 1, wrapped as the probe wraps): per block FSDP2 took 20 ops' host
 * time more than FSDP1 in forward and 63 more in backward (at 5.76 us per op
 * of the model alone), and its AdamW step 42 ops' more than plain tensors'. */
#include "work_fsdp2.h"

#include <stdlib.h>

#include "block.h"
#include "fsdp_policy.h"
#include "fw_registry.h"
#include "seam_regime.h"

#define MEASURED_TENSORS 9.0                           /* the tiny Llama block's */
#define FWD_OPS_PER_TENSOR (20.0 / MEASURED_TENSORS)   /* gather + reshard, beyond FSDP1 */
#define BWD_OPS_PER_TENSOR (63.0 / MEASURED_TENSORS)   /* gather again + reduce, beyond FSDP1 */
#define STEP_OPS_PER_TENSOR (42.0 / MEASURED_TENSORS)  /* DTensor foreach AdamW and zero_grad */
#define GATHER_RUNTIME_CALLS 6.0
#define REDUCE_RUNTIME_CALLS 10.0

est_fsdp2_group est_fsdp2_count(const est_module *m, double c, double w) {
    est_fsdp2_group g = {0};
    for (int i = 0; i < m->n_params; i++) {
        const est_mparam *p = &m->params[i];
        if (p->tied) continue;
        const double copies = p->copies > 0 ? (double)p->copies : 1;
        const double n = (double)p->rows * (double)p->cols * copies;
        const double gathered = p->elem_bytes < c ? p->elem_bytes : c;
        g.tensors += copies;
        g.gathered_bytes += n * gathered;
        if (!p->trainable) continue; /* a frozen shard is held in the compute dtype */
        g.trained += copies;
        g.trained_elems += n;
        if (w != gathered) {
            g.cast_bytes += n * (w + gathered);
            g.cast_tensors += copies;
        }
    }
    return g;
}

void est_fsdp2_gather_work(const est_fsdp2_group *g, double ranks, bool one_rank_copies, double *bytes,
                           double *kernels) {
    *bytes = g->cast_bytes / ranks;
    *kernels = g->cast_tensors;
    if (ranks <= 1 && one_rank_copies) { /* tensor.copy_ per parameter */
        *bytes += 2 * g->gathered_bytes;
        *kernels += g->tensors;
        return;
    }
    *bytes += 2 * g->gathered_bytes / ranks + 2 * g->gathered_bytes; /* copy-in, copy-out */
    *kernels += 2;
}

void est_fsdp2_reduce_work(const est_fsdp2_group *g, double ranks, double c, double r, double w, double *bytes,
                           double *kernels) {
    const double n = g->trained_elems;
    *bytes = n * (c + r); /* chunk_cat */
    *kernels = n > 0 ? 1 : 0;
    if (n <= 0) return;
    if (ranks <= 1) { /* reduce_output.copy_(reduce_scatter_input) */
        *bytes += 2 * n * r;
        *kernels += 1;
    }
    if (r != w) {
        *bytes += n / ranks * (r + w);
        *kernels += 1;
    }
}

double est_fsdp2_forward_ops(const est_fsdp2_group *g) {
    return FWD_OPS_PER_TENSOR * g->tensors + GATHER_RUNTIME_CALLS;
}

/* The measured backward gathered again (--zero 3); without that gather the
 * forward's share (its gather) is not taken. The rest, the reduction's, goes
 * with the tensors that have a gradient (measured with all of them trained). */
double est_fsdp2_backward_ops(const est_fsdp2_group *g, bool regather) {
    const double reduce = g->trained > 0 ? (BWD_OPS_PER_TENSOR - FWD_OPS_PER_TENSOR) * g->trained + REDUCE_RUNTIME_CALLS
                                         : 0;
    return reduce + (regather ? est_fsdp2_forward_ops(g) : 0);
}

double est_fsdp2_step_ops(const est_fsdp2_group *g) { return STEP_OPS_PER_TENSOR * g->trained; }

static bool counted(const est_run *run) {
    return run->framework == EST_FW_FSDP && run->fsdp_version == EST_FSDP2 && run->zero_stage >= 2 &&
           run->offload == EST_OFFLOAD_NONE && est_fw_of(run)->torch_stack && !run->compiled && run->stack;
}

/* Group counts of the block (`given`, or built) or of the root (the
 * embedding and the head: final norm, LM head). */
static bool group_of(const est_run *run, bool root, const est_module *given, est_fsdp2_group *out) {
    const double c = (double)est_compute_dtype_bytes(run->precision);
    const int w = est_fsdp_shard_bytes(run);
    if (w <= 0) return false;
    if (given && !root) {
        *out = est_fsdp2_count(given, c, w);
        return true;
    }
    est_module *m = malloc(sizeof *m);
    if (!m) return false;
    char err[160];
    const est_regime g = est_block_regime(run);
    int rc = root ? est_module_embedding(run, &g, m, err, sizeof err) : est_module_block(run, &g, false, m, err, sizeof err);
    if (rc == 0) *out = est_fsdp2_count(m, c, w);
    if (rc == 0 && root && (rc = est_module_head(run, &g, m, err, sizeof err)) == 0) {
        const est_fsdp2_group h = est_fsdp2_count(m, c, w);
        out->tensors += h.tensors;
        out->trained += h.trained;
        out->gathered_bytes += h.gathered_bytes;
        out->cast_bytes += h.cast_bytes;
        out->cast_tensors += h.cast_tensors;
        out->trained_elems += h.trained_elems;
    }
    free(m);
    return rc == 0;
}

static void host_ops(est_step *st, double ops) {
    est_event *e = est_step_add(st, EST_EV_HOST);
    if (e) e->u.host.extra_ops = ops;
}

static void gather(est_step *st, const est_run *run, const est_fsdp2_group *g) {
    double bytes, kernels;
    est_fsdp2_gather_work(g, (double)est_run_dp(run), run->stack->fsdp2_one_rank_skips_gather, &bytes, &kernels);
    est_step_memory_op(st, bytes, kernels);
}

/* Under accumulation the gradients are reduced at the last micro-batch only
 * (no_sync): a micro-batch carries 1/GA of the reduction. */
static void reduce(est_step *st, const est_run *run, const est_fsdp2_group *g) {
    const double c = (double)est_compute_dtype_bytes(run->precision);
    const double r = run->fsdp_reduce == EST_REDUCE_FP32 ? 4 : c, w = est_fsdp_shard_bytes(run);
    const double GA = run->grad_accum > 1 ? (double)run->grad_accum : 1;
    double bytes, kernels;
    est_fsdp2_reduce_work(g, (double)est_run_dp(run), c, r, w, &bytes, &kernels);
    est_step_memory_op(st, bytes / GA, kernels / GA);
}

void est_work_fsdp2(est_step *st, const est_run *run, est_unit unit, const est_module *block) {
    if (!counted(run)) return;
    const bool regather = run->zero_stage == 3;
    const double GA = run->grad_accum > 1 ? (double)run->grad_accum : 1;
    est_fsdp2_group g, root;
    switch (unit) {
    case EST_UNIT_EMBED_FWD: /* the root's pre-forward gathers it; it stays to its backward */
        if (!group_of(run, true, NULL, &g)) return;
        gather(st, run, &g);
        host_ops(st, est_fsdp2_forward_ops(&g));
        return;
    case EST_UNIT_BLOCK_FWD:
        if (!group_of(run, false, block, &g)) return;
        gather(st, run, &g);
        host_ops(st, est_fsdp2_forward_ops(&g));
        return;
    case EST_UNIT_BLOCK_BWD:
        if (!group_of(run, false, block, &g)) return;
        if (regather) gather(st, run, &g);
        reduce(st, run, &g);
        host_ops(st, est_fsdp2_backward_ops(&g, regather) - (1 - 1 / GA) * est_fsdp2_backward_ops(&g, false));
        return;
    case EST_UNIT_EMBED_BWD: /* the root's post-backward, after the embedding's gradient */
        if (!group_of(run, true, NULL, &g)) return;
        reduce(st, run, &g);
        host_ops(st, est_fsdp2_backward_ops(&g, false) / GA);
        return;
    case EST_UNIT_OPTIMIZER:
        if (!group_of(run, false, block, &g) || !group_of(run, true, NULL, &root)) return;
        host_ops(st, (double)run->layers_used * est_fsdp2_step_ops(&g) + est_fsdp2_step_ops(&root));
        return;
    default: return;
    }
}
