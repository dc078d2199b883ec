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
#include "profiles.h"
#include "rl.h"
#include "seam_deepspeed.h"
#include "seam_util.h"
#include "work.h"

/* Bytes per element _has_inf_or_nan holds at once (stage_1_and_2.py, 0.14.2
 * and 0.16.4): x.float() 4, isnan 1, isinf 1, logical_or 1, .float() 4. */
#define OVERFLOW_CHECK_BYTES 11

/* Two pinned staging tiles of 128 Mi floats per DeepSpeedCPUAdam (stack.h). */
#define CPU_ADAM_TILE_BYTES (2 * (INT64_C(128) << 20) * 4)

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static int64_t setting(int64_t configured, const est_constants *k, est_constant_id id) {
    return configured == EST_DS_UNSET ? (int64_t)k->value[id] : configured;
}

static void ds_regime(const est_run *run, est_regime *block, est_regime *ends) {
    const int c = (int)est_compute_dtype_bytes(run->precision);
    est_regime g = {.act = c, .resid = c, .autocast = false, .weight = c, .train_base = true, .adapter = c};
    *block = g;
    *ends = g;
}

static void sizes(est_sim *s, ds_state *d) {
    const est_run *run = s->run;
    const est_constants *k = s->k;
    est_params p;
    est_run_params(run, &p);
    d->P = p.total;
    d->W = est_run_world(run);
    d->n = est_shard(d->P, d->W);
    d->c = est_compute_dtype_bytes(run->precision);
    const est_ds_settings *ds = &run->ds;
    d->bucket_elems = setting(ds->reduce_bucket_elems, k, EST_K_DS_REDUCE_BUCKET_ELEMS);
    d->sub_group = min64(d->n, setting(ds->sub_group_elems, k, EST_K_DS_SUB_GROUP_ELEMS));
    d->prefetch_elems = setting(ds->prefetch_bucket_elems, k, EST_K_DS_PREFETCH_BUCKET_ELEMS);
    d->persistence_elems = setting(ds->persistence_elems, k, EST_K_DS_PARAM_PERSISTENCE_ELEMS);
    /* stage3_max_reuse_distance and stage3_max_live_parameters: 1e9 by
     * default (runtime/zero/config.py). */
    d->reuse_elems = (int64_t)1e9;
    d->max_live_elems = (int64_t)1e9;
    d->buckets = run->zero_stage < 3 && ds->overlap_comm ? 2 : 1;
    d->largest = p.largest_tensor;
    d->adam_elems = run->optimizer == EST_OPT_ADAMW ? 2 : 0;
    d->offload = run->offload != EST_OFFLOAD_NONE;
    d->offload_params = run->offload == EST_OFFLOAD_OPTIMIZER_PARAMS;
    d->gathers = run->zero_stage == 3 && (d->W > 1 || d->offload_params);
}

/* ZeRO-3's stream-ordered frees on the largest rank (fitted: docs/method.md). */
static int64_t pending_free_bytes(const est_sim *s, const ds_state *d) {
    const ft_model *m = &s->run->model;
    return (int64_t)(s->k->value[EST_K_ZERO3_PENDING_FREE_HEADS] * (double)(m->vocab_size * m->hidden_size * d->c));
}

/* The model on the device before the optimizer is built, one tensor per
 * parameter: stages 0-2 and stage 3 without zero.Init get the whole model
 * cast and moved (engine.py _configure_distributed_model: module.half(),
 * module.to(device)); stage 3 then partitions it parameter by parameter
 * (each partition allocated while its full parameter exists); under
 * zero.Init each parameter was partitioned as it was built. */
static void model_on_device(est_sim *s, ds_state *d, const est_param_ref *refs, int n, int32_t *t) {
    const bool stage3 = s->run->zero_stage == 3;
    est_step_span(s->st, EST_PHASE_INIT, -1, stage3 && s->run->zero_init ? "model partitioned (zero.Init)"
                                                                          : "model moved to the device whole");
    for (int i = 0; i < n; i++) {
        const int64_t e = est_sim_param_elems(s, refs[i].inst, refs[i].p);
        const char *name = est_sim_param(s, refs[i].inst, refs[i].p)->name;
        if (stage3 && s->run->zero_init) { /* partitions on the host under parameter offload */
            t[i] = d->offload_params ? -1 : est_sim_alloc(s, EST_CAT_PARAMS, est_shard(e, d->W) * d->c, name, 0);
            continue;
        }
        t[i] = est_sim_alloc(s, EST_CAT_PARAMS, e * d->c, name, 0);
    }
    est_sim_modeling_buffers(s, (int)d->c);
    if (!stage3 || s->run->zero_init) return;
    for (int i = 0; i < n; i++) {
        const int64_t e = est_sim_param_elems(s, refs[i].inst, refs[i].p);
        int32_t part = d->offload_params ? -1 : est_sim_alloc(s, EST_CAT_PARAMS, est_shard(e, d->W) * d->c, "partition", 0);
        est_sim_release(s, t[i]);
        t[i] = part;
    }
}

/* The optimizer flattens the weights (stages 1-2: bit16_groups_flat; stage 3:
 * the partitions, _create_fp16_partitions_with_defragmentation): the
 * per-parameter tensors go to the CPU, the cache is emptied
 * (stage_1_and_2.py and stage3.py call empty_cache() there), and one flat
 * buffer comes back. Stage 0 keeps the module's own tensors. */
static void flatten(est_sim *s, ds_state *d, int32_t *t, int n) {
    const int stage = s->run->zero_stage;
    if (stage == 0) return;
    for (int i = 0; i < n; i++) est_sim_release(s, t[i]);
    est_step_empty_cache(s->st);
    if (stage == 3) {
        if (!d->offload_params) est_sim_alloc(s, EST_CAT_PARAMS, d->n * d->c, "fp16 partition", 0);
    } else {
        est_sim_alloc(s, EST_CAT_PARAMS, d->P * d->c, "bit16 flat weights", 0);
    }
}

static void adam_state(est_sim *s, ds_state *d, int64_t elems) {
    for (int64_t i = 0; i < d->adam_elems; i++) est_sim_alloc(s, EST_CAT_OPTIMIZER, elems * 4, "Adam state", 0);
}

/* The resident model states of each stage. */
static void resident(est_sim *s, ds_state *d, const est_param_ref *refs, int n) {
    const int stage = s->run->zero_stage;
    const int64_t state_elems = stage == 0 ? d->P : d->n;
    if (stage == 3) {
        if (d->W > 1)
            for (int i = 0; i < n; i++) {
                const est_mparam *p = est_sim_param(s, refs[i].inst, refs[i].p);
                if (ds_persistent(d, p))
                    est_sim_alloc(s, EST_CAT_PARAMS, est_sim_param_elems(s, refs[i].inst, refs[i].p) * d->c,
                                  "persistent parameter", 0);
            }
    }
    if (!d->offload) {
        est_sim_alloc(s, EST_CAT_MASTER, state_elems * 4, "fp32 master", 0);
        /* Stages 0-2 make Adam's state at init (a dummy step); stage 3 at
         * its first step (step()). */
        if (stage < 3) adam_state(s, d, state_elems);
    }
    if (stage == 3) {
        if (!d->offload) d->grad_partition = est_sim_alloc(s, EST_CAT_GRADS, d->n * d->c, "gradient partition", 0);
        est_sim_alloc(s, EST_CAT_COMM, d->bucket_elems * d->c, "reduce bucket", 0);
        if (d->W > 1) est_sim_alloc(s, EST_CAT_COMM, pending_free_bytes(s, d), "pending frees", 0);
    }
    if (stage >= 1 && stage < 3 && d->offload)
        est_sim_alloc(s, EST_CAT_WORKSPACE, d->largest * d->c, "temp_grad_buffer_for_gpu_offload", 0);
}

/* Host RAM of one rank while training and while loading. */
static void host_bytes(est_sim *s, const ds_state *d) {
    const est_run *run = s->run;
    est_step *st = s->st;
    const int stage = run->zero_stage;
    /* Host: fp32 master, Adam state and the fp32 gradient partition (pinned),
     * plus the compute-dtype weight partition with parameter offload. */
    if (d->offload) {
        st->cpu_bytes = d->n * 4 * (2 + d->adam_elems);
        if (stage == 3) {
            st->cpu_bytes += d->n * d->c; /* grad_partitions_flat_buffer, pinned */
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
    if (stage == 3 && run->zero_init)
        st->cpu_load_bytes = d->n * 4 + (int64_t)s->k->value[EST_K_HF_CHECKPOINT_SHARD_BYTES];
    else if (stage == 3)
        st->cpu_load_bytes = d->P * 4 + (d->c < 4 ? d->largest * d->c : 0);
    else
        st->cpu_load_bytes = d->P * 4 + (d->c < 4 ? d->P * d->c : 0);
}

static int ds_init(est_sim *s) {
    ds_state *d = (ds_state *)s->fw;
    sizes(s, d);
    d->grad_partition = -1;
    const int slots = est_sim_slots(s);
    est_param_ref *refs = malloc((size_t)slots * sizeof *refs);
    d->grad = malloc((size_t)slots * sizeof *d->grad);
    if (!refs || !d->grad || (s->run->zero_stage == 3 && ds_zero3_prepare(s, d))) {
        free(refs);
        s->st->oom = true;
        return -1;
    }
    for (int i = 0; i < slots; i++) d->grad[i] = -1;
    const int n = est_sim_params(s, false, refs);
    int32_t *t = malloc((size_t)n * sizeof *t);
    if (!t) {
        free(refs);
        s->st->oom = true;
        return -1;
    }
    model_on_device(s, d, refs, n, t);
    est_step_span(s->st, EST_PHASE_INIT, -1, "engine initialized");
    flatten(s, d, t, n);
    free(t);
    est_sim_cublas_workspace(s);
    resident(s, d, refs, n);
    free(refs);
    host_bytes(s, d);
    if (s->run->zero_stage == 3 && d->W > 1) s->st->rank_spread_bytes = pending_free_bytes(s, d);
    return 0;
}

/* Stages 1-2: the reduce buckets exist through backward. */
static void ds_module_pre(est_sim *s, int inst, bool backward) {
    ds_state *d = (ds_state *)s->fw;
    const int stage = s->run->zero_stage;
    if (!backward || inst != s->L + 1 || stage == 0 || stage == 3) return;
    for (int64_t b = 0; b < d->buckets; b++)
        d->bucket_ids[b] = est_sim_alloc(s, EST_CAT_COMM, d->bucket_elems * d->c, "ipg bucket", 0);
}

/* A gradient from autograd: kept (stages 0-1, as .grad), or copied into the
 * bucket and freed (stages 2-3, and offload); a full bucket is reduced. */
static void ds_grad(est_sim *s, int inst, int p, int32_t grad) {
    ds_state *d = (ds_state *)s->fw;
    const int stage = s->run->zero_stage;
    if (stage == 0 || (stage == 1 && !d->offload)) {
        const int slot = est_sim_grad_slot(s, inst, p);
        if (d->grad[slot] < 0) d->grad[slot] = grad;
        else est_sim_release(s, grad); /* accumulated in place */
        return;
    }
    const int64_t elems = est_sim_param_elems(s, inst, p);
    if (d->in_bucket + elems > d->bucket_elems && d->in_bucket > 0) {
        if (stage == 3) { /* reduce_scatter_coalesced concatenates the bucket's gradients */
            int32_t flat = est_sim_alloc(s, EST_CAT_COMM, d->in_bucket * d->c, "reduce-scatter input", 1);
            est_sim_release(s, flat);
        } else if (stage == 2 && !d->offload && d->grad_partition < 0) {
            d->grad_partition = est_sim_alloc(s, EST_CAT_GRADS, d->n * d->c, "gradient partition", 0);
        }
        d->in_bucket = 0;
    }
    d->in_bucket += elems;
    /* copied into the bucket; freed through record_stream on the reduction stream */
    est_sim_release(s, grad);
}

static int fail(est_sim *s) { return ft_errorf(s->err, s->errlen, "out of memory building the step"); }

static void transient(est_sim *s, est_category cat, int64_t bytes, const char *name) {
    if (bytes > 0) est_sim_release(s, est_sim_alloc(s, cat, bytes, name, 0));
}

/* End of backward: the last bucket is reduced into the gradient partition. */
static void reduce(est_sim *s, ds_state *d) {
    const int stage = s->run->zero_stage;
    est_step_span(s->st, EST_PHASE_REDUCE, -1, "gradient reduction");
    est_work_emit(s->st, s->run, s->k, EST_UNIT_REDUCE, -1);
    if (stage == 3 && d->in_bucket > 0) transient(s, EST_CAT_COMM, d->in_bucket * d->c, "reduce-scatter input");
    if (stage == 2 && !d->offload && d->grad_partition < 0)
        d->grad_partition = est_sim_alloc(s, EST_CAT_GRADS, d->n * d->c, "gradient partition", 0);
    /* Offload: each flushed gradient (its shard in stage 3) is upcast to fp64
     * for its norm; stages 1-2 then test the whole gradient for inf/nan
     * (update_overflow_tracker_for_param_grad: _has_inf_or_nan). */
    if (d->offload && stage >= 1)
        transient(s, EST_CAT_WORKSPACE,
                  stage == 3 ? est_shard(d->largest, d->W) * 8 : d->largest * OVERFLOW_CHECK_BYTES,
                  "gradient norm / overflow check");
    for (int b = 0; b < 2; b++) {
        est_sim_release(s, d->bucket_ids[b]);
        d->bucket_ids[b] = -1;
    }
}

/* The optimizer step: fp16's overflow check, the norm, the fp32 gradients. */
static void step(est_sim *s, ds_state *d) {
    const int stage = s->run->zero_stage;
    if (d->offload) {
        est_step_span(s->st, EST_PHASE_OPTIMIZER, -1, "optimizer step on CPU");
        est_work_emit(s->st, s->run, s->k, EST_UNIT_OPTIMIZER, -1);
        return;
    }
    /* fp16 only (the loss scaler): stage 3 tests the partition with isinf
     * then isnan (one byte per element at a time); stages 1-2 run
     * _has_inf_or_nan on each piece of the partition. */
    const bool overflow_check = s->run->precision == EST_PREC_FP16_MIXED && stage >= 1;
    if (overflow_check) {
        est_step_span(s->st, EST_PHASE_OPTIMIZER, -1, "optimizer: fp16 overflow check");
        est_work_emit(s->st, s->run, s->k, EST_UNIT_OPTIMIZER, -1);
        transient(s, EST_CAT_WORKSPACE,
                  stage == 3 ? d->n : min64(d->largest, stage == 2 ? d->n : d->P) * OVERFLOW_CHECK_BYTES,
                  "overflow check");
    }
    est_step_span(s->st, EST_PHASE_OPTIMIZER, -1, "optimizer: gradient norm (fp64)");
    if (!overflow_check) est_work_emit(s->st, s->run, s->k, EST_UNIT_OPTIMIZER, -1);
    transient(s, EST_CAT_WORKSPACE, est_shard(d->largest, d->W) * 8, "gradient norm fp64");
    est_step_span(s->st, EST_PHASE_OPTIMIZER, -1, "optimizer: flatten + fp32 gradients");
    if (stage == 3 && s->first_step) adam_state(s, d, d->n);
    const int64_t flat = stage == 0 ? d->P : d->sub_group;
    int32_t f16 = est_sim_alloc(s, EST_CAT_GRADS, flat * d->c, "flattened gradients", 0);
    int32_t f32 = est_sim_alloc(s, EST_CAT_GRADS, flat * 4, "fp32 gradients", 0);
    est_sim_release(s, f16);
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
    if (s->run->zero_stage == 2) {
        est_sim_release(s, d->grad_partition);
        d->grad_partition = -1;
    }
    d->in_bucket = 0;
    if (s->run->zero_stage == 3) ds_zero3_reset(s, d);
}

static int ds_finish(est_sim *s) {
    ds_state *d = (ds_state *)s->fw;
    reduce(s, d);
    step(s, d);
    step_end(s, d);
    return s->st->oom ? fail(s) : 0;
}

const est_seam est_seam_deepspeed = {
    .name = "deepspeed",
    .regime = ds_regime,
    .init = ds_init,
    .module_pre = ds_module_pre,
    .op_pre = ds_zero3_op_pre,
    .op_post = ds_zero3_op_post,
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
    free(d.grad);
    est_sim_free(&s);
    if (rc == 0 && st->oom) rc = -1;
    return rc < 0 ? (err[0] ? -1 : ft_errorf(err, errlen, "out of memory building the step")) : 0;
}
