/* DeepSpeed ZeRO's own host work per step as ATen ops (work_ds_host.h).
 * Every count is read from DeepSpeed 0.19.8 (the H200 day's stack) with
 * world size 1 and its defaults (contiguous_gradients, overlap_comm for
 * ZeRO-3 only, reduce_bucket_size 5e8, stage3_param_persistence_threshold
 * 1e5, bf16 gradients accumulated in bf16); a call through Python that
 * dispatches nothing (asserts, dict look-ups, `.data =`) is not counted:
 *
 * ZeRO-1/2, per parameter tensor that trains (runtime/zero/stage_1_and_2.py):
 *  - backward (a hook per parameter, or reduce_gradients' loop after backward
 *    for ZeRO-1 without overlap_comm, per micro-batch):
 *    count_used_parameters_in_backward (runtime/utils.py) on the first hook:
 *    _get_grad_fn_or_grad_acc's view_as per parameter: 1;
 *    reduce_independent_p_g_buckets_and_remove_grads: the bucket's narrow,
 *    grad.view(-1), copy_, view_as: 4;
 *    reduce_ipg_grads -> copy_grads_in_partition: grads_in_partition.view(-1),
 *    narrow, grad.view(-1), copy_, view_as: 5; 10 read, 12 counted on the CPU
 *    (calibrate/host/count_ds_host_ops.py: 253 per block of 9 tensors against
 *    the model's own 145), which is what is used;
 *  - step() (bf16's check_grad_overflow defaults to true, precision_config.py):
 *    check_overflow -> has_overflow_partitioned_grads_serial: per gradient
 *    has_inf_or_nan (runtime/utils.py: amax, amin, two isfinite, each eq, abs,
 *    ne, mul below autograd, logical_and, logical_not) and the `+=`: 13; then
 *    `overflow_gpu[0].item()`: the host waits for the device;
 *    scaled_global_norm -> get_grad_norm_direct: per gradient .data.to(norm
 *    dtype), detach, vector_norm (and what the CPU count adds): 4; then
 *    is_invalid_grad_norm's `bool(...)`: the host waits again;
 *    the flattened partition: 1 per gradient; unscale_and_clip_grads'
 *    is_invalid_grad_norm: a third wait, before the clip's mul_ and the
 *    optimizer's step (gradient_clipping defaults to 1.0, runtime/
 *    constants.py, and the HF Trainer fills it only where it reads "auto",
 *    integrations/deepspeed.py fill_match, transformers 5.17); after it, the bit16 copy, all_gather_dp_groups and
 *    _update_model_bit16_weights: 4 per gradient. 22 per gradient in all, 18
 *    of them before the last wait; and per step 50 ops before the last wait
 *    (the stacks, the all-reduces, the combined norm's checks) and 8 after
 *    it, beyond the torch optimizer's own. Counted on the CPU as above: 198
 *    per block of 9 tensors; between the value reads, 2 layers (21 tensors):
 *    279 | 116 | 33 | 16 (the clip and torch AdamW) | 92, 3 layers: 396 | 152
 *    | 42 | 16 | 128.
 * ZeRO-3 (runtime/zero/parameter_offload.py, partitioned_param_coordinator.py,
 * partition_parameters.py, stage3.py, runtime/comm/coalesced_collectives.py):
 *  - per module call in forward: _post_backward_module_hook's
 *    PostBackwardFunctionModule.apply on its input and _pre_backward_module_hook's
 *    PreBackwardFunctionForModule.apply on its output, each `detach()`: 2;
 *  - per gathered parameter per fetch (forward, and again in backward): a
 *    one-parameter module gathers sequentially (_all_gather_sequential):
 *    torch.empty, ds_tensor.to(device), .to(dtype), the all-gather, narrow,
 *    view, .to(device): 7; its release (free_param): record_stream,
 *    torch.empty(0): 2; 9 per pass. At one rank all_gather_coalesced takes
 *    _no_gather_coalesced instead (every partition world size is 1):
 *    NoGatherHandle's ds_tensor.data.to(device) (the same device: no op) and
 *    view, its wait()'s record_stream: 2; the release 2; 4 per pass;
 *  - per module call and pass (forward, and again in backward): the Python
 *    of the hooks that dispatches no op (fetch_sub_module's trace, status
 *    sets and prefetch queue, release_sub_module, the torch.compiler.disable
 *    wrappers around them), priced as 14 ATen ops' host time: measured on the
 *    CPU (calibrate/host/time_ds_host.py, 2026-11-26: a block's forward and
 *    backward took 5677 us under ZeRO-3 against 1805 us for the model alone,
 *    8.02 us per op over its 225 ops; less ZeRO-3's 127 counted ops, 2853 us
 *    = 356 ops' worth over 13 module calls and 2 passes: 13.7);
 *  - per parameter that trains, backward: __add_grad_to_ipg_bucket's narrow,
 *    view_as, copy_, record_stream: 4; reduce_scatter_coalesced's view(-1),
 *    the rank's slice, the output's narrow: 3; partition_grads' narrow,
 *    copy_, .to(device): 3; 10 in all;
 *  - step: get_grad_norm_direct's g.to(device), .to(norm dtype), norm: 3
 *    read; counted on the CPU (count_ds_host_ops.py 3) 62 per block of 9
 *    tensors, 7 gathered: by name a vector_norm, a _to_copy, a slice, two
 *    views and a detach per gradient (6) and about one more per gathered
 *    tensor (the other 8). Like ZeRO-1/2's it reads device values back twice
 *    (stage3.py _overflow_check_and_loss_scale_update's .item(), then the
 *    norm's check) before the optimizer: 31 of the 62 per block come before
 *    the last read, taken as 3 per gradient.
 * ZeRO-3's per-bucket and per-group ops are left out; so is the engine's
 * per-step Python that dispatches no op.
 *
 * What an op of ZeRO-1/2's step() costs the host. step() works in flat
 * Python loops over gradients and flat partitions, tensors that require no
 * grad, so its ops pass through no nn.Module call and record no autograd
 * node, where the model's forward ops (among those kernel_host_overhead_s is
 * fitted on) do both. Measured on the CPU (calibrate/host/time_ds_step.py,
 * 2026-11-26, torch 2.11.0, transformers 5.17.0, DeepSpeed 0.19.8, the tiny
 * Llama of count_ds_host_ops.py, one thread, best of 100 rounds, per block of
 * 6 layers less 2): 2.69 and 2.77 us per step op (ZeRO-2, ZeRO-1) against
 * 5.68 us per model op, 0.474 and 0.487: Z12_STEP_OP_SHARE = 0.48 of a model
 * op's host time. The hooks'
 * ops in backward cost what the model's do there (0.86 and 1.15, within
 * the measurement's spread): left at one op each. ZeRO-3's step ops are not
 * measured and stay at one op each. */
#include "work_ds_host.h"

#include <stdlib.h>

#include "block.h"
#include "fw_registry.h"
#include "host_ops.h"
#include "seam_regime.h"

enum {
    Z12_BACKWARD_PER_GRAD = 12,        /* expected-hook count, bucket copy, partition copy (CPU count) */
    Z12_STEP_WAITED_PER_GRAD = 13 + 4 + 1, /* overflow check, norm, flattening: before the last wait */
    Z12_STEP_PER_GRAD = Z12_STEP_WAITED_PER_GRAD + 4, /* ... and the bit16 copy and gather after it */
    Z12_STEP_WAITED_FIXED = 6 + 32 + 12, /* per step, before each of the three waits (CPU count) */
    Z12_STEP_FIXED = Z12_STEP_WAITED_FIXED + 8,
    Z3_PER_CALL = 2,                   /* the two autograd Functions' detach */
    Z3_PER_GATHER = 7 + 2,             /* gathered, then released */
    Z3_PER_GATHER_ONE_RANK = 2 + 2,    /* ... at one rank: no collective */
    Z3_PYTHON_PER_CALL = 14,           /* the hooks' Python per module call and pass, in ops (measured) */
    Z3_BACKWARD_PER_GRAD = 4 + 3 + 3,  /* bucket, reduce-scatter, partition */
    Z3_STEP_PER_GRAD = 6,              /* the norm and the partition's views (CPU count) */
    Z3_STEP_PER_GATHERED = 1,
    Z3_STEP_WAITED_PER_GRAD = 3,       /* ... before the step's last read-back */
    /* LlamaForCausalLM.forward: the model, its embed_tokens and rotary_emb
     * (transformers 5.17 modeling_llama.py LlamaModel.forward) before the
     * blocks; its norm and the lm_head after them */
    CALLS_BEFORE_BLOCKS = 4,
    CALLS_AFTER_BLOCKS = 2,
};

est_ds_module_count est_ds_count_module(const est_module *m, double persist_elems) {
    est_ds_module_count c = {0};
    for (int i = 0; i < m->n_params; i++) {
        const est_mparam *p = &m->params[i];
        if (p->tied) continue;
        const double n = p->copies > 0 ? (double)p->copies : 1;
        c.tensors += n;
        if (p->trainable) c.trainable += n;
        if ((double)p->rows * (double)p->cols > persist_elems) c.gathered += n;
    }
    return c;
}

double est_ds_block_ops(int zero, int ranks, const est_ds_module_count *c, bool backward) {
    if (zero == 1 || zero == 2) return backward ? Z12_BACKWARD_PER_GRAD * c->trainable : 0;
    if (zero != 3) return 0;
    const double gather = (ranks > 1 ? Z3_PER_GATHER : Z3_PER_GATHER_ONE_RANK) * c->gathered;
    const double python = Z3_PYTHON_PER_CALL * c->calls;
    if (!backward) return Z3_PER_CALL * c->calls + gather + python;
    return gather + Z3_BACKWARD_PER_GRAD * c->trainable + python;
}

double est_ds_step_ops(int zero, const est_ds_module_count *c) {
    if (zero == 1 || zero == 2) return Z12_STEP_PER_GRAD * c->trainable + Z12_STEP_FIXED;
    return zero == 3 ? Z3_STEP_PER_GRAD * c->trainable + Z3_STEP_PER_GATHERED * c->gathered : 0;
}

double est_ds_step_waited_ops(int zero, const est_ds_module_count *c) {
    if (zero == 1 || zero == 2) return Z12_STEP_WAITED_PER_GRAD * c->trainable + Z12_STEP_WAITED_FIXED;
    return zero == 3 ? Z3_STEP_WAITED_PER_GRAD * c->trainable : 0;
}

/* ZeRO-1/2 step()'s host time per op over the model's (measured, above). */
static const double Z12_STEP_OP_SHARE = 0.48;

/* The step's op count of stage `zero` in ops' worth of the model's host time. */
static double step_op_share(int zero) { return zero == 1 || zero == 2 ? Z12_STEP_OP_SHARE : 1; }

static void add_count(est_ds_module_count *to, const est_ds_module_count *c, double times) {
    to->tensors += times * c->tensors;
    to->trainable += times * c->trainable;
    to->gathered += times * c->gathered;
    to->calls += times * c->calls;
}

/* Counts of the description of `kind` (a block, the embedding, the head);
 * false where it cannot be built. */
static bool module_count(const est_run *run, double persist, est_module_kind kind, const est_module *given,
                         est_ds_module_count *out) {
    if (given) {
        *out = est_ds_count_module(given, persist);
        out->calls = est_module_host_ops(given).module_calls;
        return true;
    }
    est_module *m = malloc(sizeof *m);
    if (!m) return false;
    char err[160];
    const est_regime g = est_block_regime(run);
    const int rc = kind == EST_MODULE_BLOCK       ? est_module_block(run, &g, false, m, err, sizeof err)
                   : kind == EST_MODULE_EMBEDDING ? est_module_embedding(run, &g, m, err, sizeof err)
                                                  : est_module_head(run, &g, m, err, sizeof err);
    if (rc == 0) {
        *out = est_ds_count_module(m, persist);
        out->calls = kind == EST_MODULE_BLOCK       ? est_module_host_ops(m).module_calls
                     : kind == EST_MODULE_EMBEDDING ? CALLS_BEFORE_BLOCKS
                                                    : CALLS_AFTER_BLOCKS;
    }
    free(m);
    return rc == 0;
}

static bool counted(const est_run *run) {
    return run->framework == EST_FW_DEEPSPEED && run->zero_stage >= 1 && run->zero_stage <= 3 &&
           run->offload == EST_OFFLOAD_NONE && est_fw_of(run)->torch_stack && !run->compiled && run->stack &&
           run->stack->ds_host_ops;
}

static double persistence_elems(const est_run *run, const est_constants *k) {
    return run->ds.persistence_elems != EST_DS_UNSET ? (double)run->ds.persistence_elems
                                                     : k->value[EST_K_DS_PARAM_PERSISTENCE_ELEMS];
}

/* The whole model's counts (its blocks, the embedding, the head). */
static bool model_count(const est_run *run, double persist, est_ds_module_count *all) {
    est_ds_module_count one;
    *all = (est_ds_module_count){0};
    if (!module_count(run, persist, EST_MODULE_BLOCK, NULL, &one)) return false;
    add_count(all, &one, (double)run->layers_used);
    if (module_count(run, persist, EST_MODULE_EMBEDDING, NULL, &one)) add_count(all, &one, 1);
    if (module_count(run, persist, EST_MODULE_HEAD, NULL, &one)) add_count(all, &one, 1);
    return true;
}

double est_ds_host_waited_ops(const est_run *run, const est_constants *k, est_unit unit) {
    est_ds_module_count all;
    if (!counted(run) || unit != EST_UNIT_OPTIMIZER || !model_count(run, persistence_elems(run, k), &all)) return 0;
    return est_ds_step_waited_ops(run->zero_stage, &all) * step_op_share(run->zero_stage);
}

double est_ds_host_ops(const est_run *run, const est_constants *k, est_unit unit, const est_module *block) {
    if (!counted(run)) return 0;
    const double persist = persistence_elems(run, k);
    const int z = run->zero_stage, ranks = (int)est_run_dp(run);
    est_ds_module_count c;
    switch (unit) {
    case EST_UNIT_BLOCK_FWD:
    case EST_UNIT_BLOCK_BWD:
        if (!module_count(run, persist, EST_MODULE_BLOCK, block, &c)) return 0;
        return est_ds_block_ops(z, ranks, &c, unit == EST_UNIT_BLOCK_BWD);
    case EST_UNIT_EMBED_FWD:
    case EST_UNIT_EMBED_BWD:
        if (!module_count(run, persist, EST_MODULE_EMBEDDING, NULL, &c)) return 0;
        return est_ds_block_ops(z, ranks, &c, unit == EST_UNIT_EMBED_BWD);
    case EST_UNIT_HEAD_FWD:
    case EST_UNIT_HEAD_BWD:
        if (!module_count(run, persist, EST_MODULE_HEAD, NULL, &c)) return 0;
        return est_ds_block_ops(z, ranks, &c, unit == EST_UNIT_HEAD_BWD);
    case EST_UNIT_OPTIMIZER: return model_count(run, persist, &c) ? est_ds_step_ops(z, &c) * step_op_share(z) : 0;
    default: return 0;
    }
}
