/* HF Trainer + DeepSpeed (0.14-0.16) ZeRO stages 0-3, mixed precision,
 * optional CPU offload, as a seam on autograd's step. Sources: DeepSpeed
 * deepspeed/runtime/zero/stage3.py, stage_1_and_2.py, partition_parameters.py,
 * config.py, engine.py and fp16/fused_optimizer.py; docs/method.md
 * ("DeepSpeed") walks through every buffer. Notation: P parameters, W ranks,
 * n = ceil(P/W), c bytes of the compute dtype (the engine casts the module:
 * engine.py module.half()).
 *
 * Stage 3: a flat compute-dtype partition c*n, the gradient partition c*n
 * (grad_partitions_flat_buffer), fp32 master 4n, Adam m and v 8n, and the
 * contiguous reduce bucket (__ipg_bucket_flat_buffer, reduce_bucket_size
 * elements); parameters are gathered per submodule (seam_deepspeed_zero3.c);
 * each gradient is copied into the bucket as its hook fires and freed; a full
 * bucket is reduce-scattered through a concatenated copy
 * (comm/coalesced_collectives.py reduce_scatter_coalesced). The step: per
 * sub-group a flattened copy (c) and its fp32 cast (4) of the gradients
 * (_prepare_fp32_grad_for_sub_group), one parameter's shard upcast to fp64
 * for the norm (get_grad_norm_direct).
 * Stages 1-2: all weights c*P in one flat buffer (bit16_groups_flat), fp32
 * master 4n, Adam m and v 8n (created at init by a dummy step); the reduce
 * buckets (ipg_buffer, two with overlap_comm) live through backward; stage 2
 * keeps a gradient partition c*n from the first flush, stage 1 full gradients
 * c*P as autograd makes them. CPU offload: master, state and an fp32 gradient
 * partition live on the host (pinned); the GPU keeps the weights, the bucket
 * in backward and temp_grad_buffer_for_gpu_offload (the largest parameter).
 * Stage 0 (fp16/fused_optimizer.py FP16_Optimizer): weights c*P, autograd
 * gradients c*P, fp32 flat master 4P and state 8P; the step flattens the
 * gradients and casts them to fp32. */
#include <stdlib.h>
#include <string.h>

#include "hf_modeling.h"
#include "json_util.h"
#include "lora.h"
#include "optimizers.h"
#include "profiles.h"
#include "rl.h"
#include "seam_deepspeed.h"
#include "seam_regime.h"
#include "seam_util.h"
#include "work.h"

/* stage3_max_live_parameters' and stage3_max_reuse_distance's default. */
#define DS_STAGE3_DEFAULT_ELEMS INT64_C(1000000000)

/* _constant_buffered_norm2's chunk (stage3.py, 0.14.2 and 0.16.4). */
#define DS_NORM_CHUNK_ELEMS INT64_C(250000000)

/* Two pinned staging tiles of 128 Mi floats per DeepSpeedCPUAdam (stack.h). */
#define CPU_ADAM_TILE_BYTES (2 * (INT64_C(128) << 20) * 4)

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static int64_t setting(int64_t configured, const est_constants *k, est_constant_id id) {
    return configured == EST_DS_UNSET ? (int64_t)k->value[id] : configured;
}

static void sizes(est_sim *s, ds_state *d) {
    const est_run *run = s->run;
    const est_constants *k = s->k;
    est_params p;
    est_run_params(run, &p);
    d->P = p.total;
    d->W = est_run_world(run);
    d->n = est_shard(d->P, d->W);
    d->train_P = d->P;
    d->train_n = d->n;
    d->c = est_compute_dtype_bytes(run->precision);
    const est_ds_settings *ds = &run->ds;
    d->comm = ds->comm_bytes > 0 ? ds->comm_bytes : d->c;
    d->bucket_elems = setting(ds->reduce_bucket_elems, k, EST_K_DS_REDUCE_BUCKET_ELEMS);
    d->sub_group_elems = setting(ds->sub_group_elems, k, EST_K_DS_SUB_GROUP_ELEMS);
    d->prefetch_elems = setting(ds->prefetch_bucket_elems, k, EST_K_DS_PREFETCH_BUCKET_ELEMS);
    d->persistence_elems = setting(ds->persistence_elems, k, EST_K_DS_PARAM_PERSISTENCE_ELEMS);
    /* stage3_max_reuse_distance and stage3_max_live_parameters: 1e9 by
     * default (runtime/zero/config.py, 0.14.2 and 0.16.4). */
    d->reuse_elems = ds->max_reuse_distance_elems == EST_DS_UNSET ? DS_STAGE3_DEFAULT_ELEMS : ds->max_reuse_distance_elems;
    d->max_live_elems = ds->max_live_elems == EST_DS_UNSET ? DS_STAGE3_DEFAULT_ELEMS : ds->max_live_elems;
    d->buckets = run->zero_stage < 3 && ds->overlap_comm ? 2 : 1;
    d->reduce_after_backward = run->zero_stage == 1 && !ds->overlap_comm;
    d->largest = p.largest_tensor;
    d->adam_elems = run->optimizer == EST_OPT_ADAMW ? 2 : 0;
    d->offload = run->offload != EST_OFFLOAD_NONE;
    d->offload_params = run->offload == EST_OFFLOAD_OPTIMIZER_PARAMS ||
                        (run->zero_stage == 3 && run->ds.offload_param_only);
    d->gathers = run->zero_stage == 3 && (d->W > 1 || d->offload_params);
    d->lora = est_lora_on(run);
}

/* Host RAM of one rank while training and while loading. */
static void host_bytes(est_sim *s, const ds_state *d) {
    const est_run *run = s->run;
    est_step *st = s->st;
    const int stage = run->zero_stage;
    /* Host: fp32 master, Adam state and the fp32 gradient partition (pinned),
     * plus the compute-dtype weight partition with parameter offload. */
    if (d->offload) {
        st->cpu_bytes = d->train_n * 4 * (2 + d->adam_elems);
        if (stage == 3) {
            st->cpu_bytes += d->train_n * d->c; /* grad_partitions_flat_buffer, pinned */
        } else {
            /* temp_grad_buffer_for_cpu_offload; with accumulation a pinned
             * buffer per parameter of the partition (accumulated_grads_in_cpu) */
            st->cpu_bytes += d->largest * d->c;
            if (run->grad_accum > 1) st->cpu_bytes += d->n * d->c;
        }
        if (d->adam_elems && run->stack->ds_cpu_adam_pinned_tiles) st->cpu_bytes += CPU_ADAM_TILE_BYTES;
    }
    if (d->offload_params) st->cpu_bytes += d->n * d->c;
    /* Loading: stages 0-2 hold the fp32 model from from_pretrained in every
     * process and halve it on the CPU; stage 3 under zero.Init keeps its fp32
     * partition and the checkpoint shard being read; stage 3 built before
     * DeepSpeed holds the fp32 model and halves it parameter by parameter. */
    if (d->lora) { /* from_pretrained in the compute dtype; a quantized load one shard at a time */
        est_params p;
        est_run_params(run, &p);
        const int64_t shard = (int64_t)s->k->value[EST_K_HF_CHECKPOINT_SHARD_BYTES];
        st->cpu_load_bytes = p.total * d->c;
        if (run->quant != EST_QUANT_NONE && shard < st->cpu_load_bytes) st->cpu_load_bytes = shard;
    } else if (stage == 3 && run->zero_init)
        st->cpu_load_bytes = d->n * 4 + (int64_t)s->k->value[EST_K_HF_CHECKPOINT_SHARD_BYTES];
    else if (stage == 3)
        st->cpu_load_bytes = d->P * 4 + (d->c < 4 ? d->largest * d->c : 0);
    else
        st->cpu_load_bytes = d->P * 4 + (d->c < 4 ? d->P * d->c : 0);
}

/* Stage 1 accumulating over micro-batches: the micro-batch modelled is the
 * boundary one (the last, where the reduction and the step run); autograd's
 * .grad of every trained parameter is there from the micro-batches before it,
 * since nothing reduces or frees it before the boundary
 * (reduce_ready_partitions_and_remove_grads reduces at stage 1 only when
 * is_gradient_accumulation_boundary, stage_1_and_2.py 0.16.5 line 1424;
 * engine.py allreduce_gradients calls reduce_gradients at the boundary only). */
static void accumulated_grads(est_sim *s, ds_state *d) {
    ds12_accumulated(s, d); /* stages 1-2: the buckets or the partition's gradients */
    if (s->run->zero_stage != 1 || s->run->grad_accum <= 1) return;
    for (int i = 0; i < d->n_refs; i++) {
        const est_param_ref *r = &d->refs[i];
        const est_mparam *pp = est_sim_param(s, r->inst, r->p);
        const int slot = est_sim_grad_slot(s, r->inst, r->p);
        if (!pp->trainable || slot < 0 || d->grad[slot] >= 0) continue;
        d->grad[slot] = est_sim_alloc(s, EST_CAT_GRADS, est_sim_param_elems(s, r->inst, r->p) * d->c, pp->name, 0);
    }
}

static int ds_init(est_sim *s) {
    ds_state *d = (ds_state *)s->fw;
    sizes(s, d);
    d->grad_partition = d->tied_grad = -1;
    const int slots = est_sim_slots(s);
    d->grad = malloc((size_t)slots * sizeof *d->grad);
    if (!d->grad || ds_layout(s, d) || (s->run->zero_stage == 3 && ds_zero3_prepare(s, d)) ||
        ds12_layout(s, d) || ds_init_device(s, d)) {
        s->st->oom = true;
        return -1;
    }
    for (int i = 0; i < slots; i++) d->grad[i] = -1;
    d->lag = ds_lag_on(s, d);
    host_bytes(s, d);
    return 0;
}

/* Stages 1-2 reduce through the bucket (reduce_ready_partitions_and_remove_grads:
 * stage 2 at every backward, stage 1 at the accumulation boundary, which is
 * the micro-batch modelled: accumulated_grads). */
static bool ds12_path(const est_sim *s) {
    const int stage = s->run->zero_stage;
    return stage == 1 || stage == 2;
}

/* Stages 1-2: the reduce buckets exist through backward. */
static void ds_module_pre(est_sim *s, int inst, bool backward) {
    ds_state *d = (ds_state *)s->fw;
    if (!backward && !s->recompute && inst == EST_INST_EMBED) accumulated_grads(s, d); /* the step's first module */
    if (!backward || inst != s->L + 1 || !ds12_path(s) || s->run->stack->ds_buckets_at_first_grad) return;
    ds12_backward_begin(s, d);
}

/* The model's outputs stay live through the loss, which the forward computes
 * (seam_util.h est_held_outputs); then ZeRO-3's release of what the op used. */
static void ds_op_post(est_sim *s, int inst, int op, bool backward) {
    est_hold_outputs(s, &((ds_state *)s->fw)->outs, inst, op, backward);
    ds_zero3_op_post(s, inst, op, backward);
}

/* The forward has returned: the loop keeps the loss alone. */
static void ds_module_post(est_sim *s, int inst, bool backward) {
    if (!backward && !s->recompute && inst == s->L + 1) est_release_outputs(s, &((ds_state *)s->fw)->outs);
}

static void transient(est_sim *s, est_category cat, int64_t bytes, const char *name) {
    ds_transient(s, cat, bytes, name, 0);
}

/* Stage 3's flush of the bucket (stage3.py __reduce_and_partition_ipg_grads,
 * on the reduce-and-partition stream): reduce_scatter_coalesced
 * concatenates the bucket's gradients, each padded to a multiple of the
 * ranks (comm/coalesced_collectives.py; a lone gradient that divides evenly
 * is reduced in place), partition_grads copies this rank's part into the
 * gradient partition, and the gradients too large for the bucket, which
 * stayed autograd's tensors, are dropped (record_stream, then
 * param.grad = None). */
static void zero3_flush(est_sim *s, ds_state *d) {
    if (d->in_bucket == 0) return;
    ds_lag_flush(s, d); /* the throttle on max_param_reduce_events */
    /* communication_data_type other than the gradients' (stage3.py
     * __avg_scatter_grads, 0.14.2 line 1332, 0.16.4 line 1377, 0.19.8 line 1919: each
     * gradient .to() it, all alive through the reduce-scatter, whose input is
     * then in that dtype) */
    const int32_t cast = d->comm != d->c ? est_sim_alloc(s, EST_CAT_COMM, d->in_bucket * d->comm,
                                                         "gradients in communication_data_type", DS_REDUCE_STREAM)
                                         : -1;
    if (!(d->bucket_count == 1 && d->in_bucket % d->W == 0))
        ds_transient(s, EST_CAT_COMM, d->in_bucket_padded * d->comm, "reduce-scatter input", DS_REDUCE_STREAM);
    if (cast >= 0) est_sim_release(s, cast);
    for (int i = 0; i < d->n_held; i++) ds_lag_release(s, d, d->held[i], false);
    d->n_held = 0;
    for (int i = 0; i < d->n_loose; i++) ds_lag_release(s, d, d->loose[i], false);
    d->n_loose = 0;
    d->in_bucket = d->in_bucket_padded = 0;
    d->bucket_count = 0;
    d->flushes++;
}

/* Stage 3's gradient hook (reduce_independent_p_g_buckets_and_remove_grads):
 * a bucket that cannot take the gradient is flushed first; a gradient that
 * fits is copied into the contiguous bucket on the reduce stream and its own
 * tensor freed through record_stream (__add_grad_to_ipg_bucket); one larger
 * than the whole bucket stays as it is until the next flush. */
static void zero3_grad(est_sim *s, ds_state *d, int32_t grad, int64_t elems) {
    if (d->in_bucket + elems > d->bucket_elems && d->in_bucket > 0) zero3_flush(s, d);
    if (d->loose && d->n_loose <= est_sim_slots(s)) {
        d->loose[d->n_loose++] = grad; /* contiguous_gradients false: no copy, kept to the flush */
    } else if (d->in_bucket + elems <= d->bucket_elems) {
        ds_lag_release(s, d, grad, false);
    } else if (d->n_held < DS_HELD_MAX) {
        d->held[d->n_held++] = grad;
    } else {
        est_sim_release(s, grad);
    }
    d->in_bucket += elems;
    d->in_bucket_padded += est_shard(elems, d->W) * d->W;
    d->bucket_count++;
}

/* A gradient from autograd: kept (stages 0-1, as .grad), or copied into the
 * bucket and freed (stages 2-3, and offload); a full bucket is reduced. */
static void ds_grad(est_sim *s, int inst, int p, int32_t grad) {
    ds_state *d = (ds_state *)s->fw;
    const int stage = s->run->zero_stage;
    const est_mparam *pp = est_sim_param(s, inst, p);
    if (pp->tied) { /* the head's half of a tied weight's gradient waits in autograd's InputBuffer */
        d->tied_grad = grad;
        return;
    }
    if (inst == EST_INST_EMBED && d->tied_grad >= 0) {
        /* the embedding's half arrives: autograd's InputBuffer adds the two
         * (torch/csrc/autograd/input_buffer.cpp accumulate, `old_var + var`:
         * aten::add, not add_, in a storage-level trace of torch 2.2.2 with
         * transformers 4.40), three V x h tensors at once; AccumulateGrad and
         * DeepSpeed's hook then see the sum, once */
        const int32_t sum = est_sim_alloc(s, EST_CAT_GRADS, est_step_tensor_bytes(s->st, grad), pp->name, 0);
        est_sim_release(s, d->tied_grad);
        est_sim_release(s, grad);
        d->tied_grad = -1;
        grad = sum;
    }
    if (stage < 3 && ds12_path(s) && s->run->stack->ds_buckets_at_first_grad && d->bucket_ids[0] < 0)
        ds12_backward_begin(s, d); /* setup_buckets, from the first gradient hook (0.19.8) */
    if (stage == 3) {
        zero3_grad(s, d, grad, est_sim_param_elems(s, inst, p));
    } else if (ds12_path(s) && !d->reduce_after_backward) {
        const int slot = est_sim_grad_slot(s, inst, p);
        if (d->grad[slot] >= 0) { /* autograd accumulated into the earlier .grad */
            est_sim_release(s, grad);
            grad = d->grad[slot];
            d->grad[slot] = -1;
        }
        ds12_grad(s, d, slot, grad);
    } else { /* autograd's .grad, accumulated in place */
        const int slot = est_sim_grad_slot(s, inst, p);
        if (d->grad[slot] < 0) d->grad[slot] = grad;
        else est_sim_release(s, grad);
    }
}

static int fail(est_sim *s) { return ft_errorf(s->err, s->errlen, "out of memory building the step"); }

/* End of backward: the last bucket is reduced into the gradient partition
 * (the epilogue). Stage 3 with offload upcasts each gradient partition to
 * fp64 for its norm in chunks of 2.5e8 elements (partition_grads ->
 * _constant_buffered_norm2). */
static void reduce(est_sim *s, ds_state *d) {
    const int stage = s->run->zero_stage;
    est_step_span(s->st, EST_PHASE_REDUCE, -1, "gradient reduction");
    est_work_emit(s->st, s->run, s->k, EST_UNIT_REDUCE, -1);
    if (stage == 3) {
        zero3_flush(s, d);
        /* independent_gradient_partition_epilogue: reduce_and_partition_stream
         * .synchronize() after the last flush (stage3.py 0.14.2 line 1088,
         * 0.19.8 line 1414): the frees waiting on the reduce stream complete */
        ds_lag_drain(s, d);
        est_step_sync(s->st);
        if (d->offload)
            transient(s, EST_CAT_WORKSPACE, min64(est_shard(d->largest, d->W), DS_NORM_CHUNK_ELEMS) * 8,
                      "gradient norm fp64");
    } else if (ds12_path(s)) {
        if (d->reduce_after_backward) /* reduce_gradients: each .grad, registration order */
            for (int i = 0; i < d->n_refs; i++) {
                const int slot = d->refs[i].slot;
                if (d->grad[slot] < 0) continue;
                ds12_grad(s, d, slot, d->grad[slot]);
                d->grad[slot] = -1;
            }
        ds12_epilogue(s, d);
    }
}

/* Stage 3's step (stage3.py step, 0.14.2): what is still gathered is
 * released (_partition_all_parameters); fp16's overflow check tests the
 * gradient partition with isinf and then isnan on the reduce stream
 * (has_overflow: n bools at a time, and isinf's |x|); the norm upcasts each parameter's
 * gradient shard to fp64 in turn (get_grad_norm_direct, parameter order);
 * then per sub-group _prepare_fp32_grad_for_sub_group flattens the shards (a
 * c-byte cat) and casts them to fp32, the cat dying at once; the fused Adam
 * makes its state at its first step (zeros_like, beside the fp32 gradient);
 * _release_sub_group drops the fp32 gradient. */
static void step_zero3(est_sim *s, ds_state *d) {
    ds_zero3_reset(s, d);
    ds_zero3_release_persistent(s, d);
    if (s->run->precision == EST_PREC_FP16_MIXED) {
        est_step_span(s->st, EST_PHASE_OPTIMIZER, -1, "optimizer: fp16 overflow check");
        est_work_emit(s->st, s->run, s->k, EST_UNIT_OPTIMIZER, -1);
        /* torch.isinf is `self.abs() == inf` (ATen/native/TensorCompare.cpp): a
         * compute-dtype |x| beside the bool result; isnan is `self != self` */
        const int32_t abs = est_sim_alloc(s, EST_CAT_WORKSPACE, d->train_n * d->c, "isinf: abs", DS_REDUCE_STREAM);
        const int32_t inf = est_sim_alloc(s, EST_CAT_WORKSPACE, d->train_n, "isinf", DS_REDUCE_STREAM);
        est_sim_release(s, abs);
        est_sim_release(s, inf);
        ds_transient(s, EST_CAT_WORKSPACE, d->train_n, "isnan", DS_REDUCE_STREAM);
    }
    est_step_span(s->st, EST_PHASE_OPTIMIZER, -1, "optimizer: gradient norm (fp64)");
    if (s->run->precision != EST_PREC_FP16_MIXED) est_work_emit(s->st, s->run, s->k, EST_UNIT_OPTIMIZER, -1);
    for (int i = 0; i < d->n_refs; i++) /* the parameters with a gradient */
        if (est_sim_param(s, d->refs[i].inst, d->refs[i].p)->trainable)
            transient(s, EST_CAT_WORKSPACE, est_shard(est_sim_param_elems(s, d->refs[i].inst, d->refs[i].p), d->W) * 8,
                      "gradient norm fp64");
    est_step_span(s->st, EST_PHASE_OPTIMIZER, -1, "optimizer: flatten + fp32 gradients");
    for (int g = 0; g < d->n_sub_groups; g++) {
        const int32_t f32 = ds_to_fp32(s, d, EST_CAT_GRADS, d->sub_groups[g], "flattened gradients", "fp32 gradients");
        ds_optimizer_step(s, d, d->sub_groups[g], s->first_step);
        est_sim_release(s, f32);
    }
    ds_zero3_gather_persistent(s, d); /* _post_step */
}

/* The optimizer step of stages 0-2: fp16's overflow check, the norm, the
 * fp32 gradients. With optimizer offload the update runs on the host and
 * stages 1-2 copy the fp32 partition back through the device
 * (bit16_partitions[partition_id].data.copy_(fp32_partition.to(device)):
 * a transient fp32 copy of the partition). */
static void step(est_sim *s, ds_state *d) {
    const int stage = s->run->zero_stage;
    if (d->offload) {
        if (stage == 3) {
            ds_zero3_reset(s, d);
            ds_zero3_release_persistent(s, d);
        }
        est_step_span(s->st, EST_PHASE_OPTIMIZER, -1, "optimizer step on CPU");
        est_work_emit(s->st, s->run, s->k, EST_UNIT_OPTIMIZER, -1);
        if (ds12_path(s)) transient(s, EST_CAT_WORKSPACE, (d->part_hi - d->part_lo) * 4, "fp32 partition on the device");
        if (stage == 3) ds_zero3_gather_persistent(s, d); /* _post_step */
        return;
    }
    if (stage == 3) {
        step_zero3(s, d);
        return;
    }
    if (ds12_path(s)) {
        ds12_step(s, d);
        return;
    }
    /* Stage 0 (FP16_Optimizer): autograd's whole
     * gradients; fp16's check is _has_inf_or_nan on each (stage 1) */
    const bool overflow_check = s->run->precision == EST_PREC_FP16_MIXED && stage >= 1;
    if (overflow_check) {
        est_step_span(s->st, EST_PHASE_OPTIMIZER, -1, "optimizer: fp16 overflow check");
        est_work_emit(s->st, s->run, s->k, EST_UNIT_OPTIMIZER, -1);
        ds_has_inf_or_nan(s, min64(d->largest, d->n));
    }
    est_step_span(s->st, EST_PHASE_OPTIMIZER, -1, "optimizer: gradient norm (fp64)");
    if (!overflow_check) est_work_emit(s->st, s->run, s->k, EST_UNIT_OPTIMIZER, -1);
    transient(s, EST_CAT_WORKSPACE, est_shard(d->largest, d->W) * 8, "gradient norm fp64");
    est_step_span(s->st, EST_PHASE_OPTIMIZER, -1, "optimizer: flatten + fp32 gradients");
    const int64_t flat = d->sub_groups[0]; /* stage 0: P; stage 1: the partition n */
    const int32_t f32 = ds_to_fp32(s, d, EST_CAT_GRADS, flat, "flattened gradients", "fp32 gradients");
    ds_optimizer_step(s, d, flat, stage > 0 && s->first_step);
    est_sim_release(s, f32);
}

/* After the step: zero_grad (stages 0-1 free their gradients, stage 2 its
 * partition) and, at stage 3, the coordinator releases what is still
 * gathered and starts its trace over (release_and_reset_all, reset_step). */
static void step_end(est_sim *s, ds_state *d) {
    const int slots = est_sim_slots(s);
    for (int i = 0; i < slots; i++) {
        est_sim_release(s, d->grad[i]);
        d->grad[i] = -1;
    }
    d->in_bucket = 0;
}

static int ds_finish(est_sim *s) {
    ds_state *d = (ds_state *)s->fw;
    reduce(s, d);
    step(s, d);
    step_end(s, d);
    ds_lag_end(s, d);
    return s->st->oom ? fail(s) : 0;
}

const est_seam est_seam_deepspeed = {
    .name = "deepspeed",
    .regime = est_ds_regime,
    .init = ds_init,
    .module_pre = ds_module_pre,
    .module_post = ds_module_post,
    .op_pre = ds_zero3_op_pre,
    .op_post = ds_op_post,
    .grad = ds_grad,
    .finish = ds_finish,
};

int est_step_deepspeed(const est_run *run, const est_constants *k, est_step *st, char *err,
                       size_t errlen) {
    ds_state d;
    memset(&d, 0, sizeof d);
    d.bucket_ids[0] = d.bucket_ids[1] = -1;
    est_sim s;
    if (est_sim_init(&s, run, k, &est_seam_deepspeed, &d, st, err, errlen)) return -1;
    s.objective = est_rl_objective(run); /* TRL's preference trainers (rl.c) */
    int rc = est_sim_run(&s);
    ds_zero3_free(&d);
    ds_lag_free(&d);
    ds_layout_free(&d);
    ds12_layout_free(&d);
    free(d.grad);
    est_held_free(&d.outs);
    est_sim_free(&s);
    if (rc == 0 && st->oom) rc = -1;
    return rc < 0 ? (err[0] ? -1 : ft_errorf(err, errlen, "out of memory building the step")) : 0;
}
