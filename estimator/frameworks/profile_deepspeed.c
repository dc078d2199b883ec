/* HF Trainer + DeepSpeed (0.14) ZeRO stages 0-3, mixed precision, optional CPU
 * offload. Sources: DeepSpeed deepspeed/runtime/zero/stage3.py,
 * stage_1_and_2.py, partition_parameters.py, config.py, engine.py and
 * fp16/fused_optimizer.py; docs/method.md ("DeepSpeed") walks through every
 * buffer. Notation: P parameters, W ranks, n = ceil(P/W), c = bytes of the
 * compute dtype (the engine casts the module: engine.py module.half()).
 *
 * Stage 3 (stage3.py):
 *   resident: weight partition c*n in one flat buffer, gradient partition
 *   c*n (grad_partitions_flat_buffer; grad_accum_dtype = the model dtype),
 *   fp32 master 4n, Adam m and v 8n, and the contiguous-gradient bucket of
 *   reduce_bucket_size elements (5e8 by default: ~954 MiB at 2 bytes however
 *   small the model), allocated in _setup_for_real_optimizer.
 *   gathered weights: with W > 1 each fetch allocates the block's full weights
 *   (all_gather_coalesced); with W = 1 the "gathered" weight is a view of the
 *   partition (NoGatherHandle), so nothing extra.
 *   backward: a parameter's full gradient exists until its hook copies it into
 *   the bucket; at the end of backward the reduce-scatter concatenates the
 *   bucket (comm/coalesced_collectives.py).
 *   step: one parameter's gradient shard upcast to fp64 for the norm
 *   (get_grad_norm_direct), then per sub-group a flattened copy (c) and its
 *   fp32 cast (_prepare_fp32_grad_for_sub_group): +(c+4) per element, the fp32
 *   part held through the Adam update. Adam state appears at the first step.
 * Stages 1-2 (stage_1_and_2.py):
 *   resident: all weights c*P (bit16_groups_flat), fp32 master 4n, Adam m and v
 *   8n (created at init by a dummy step); the bucket exists from the start of
 *   each backward to its epilogue; stage 2 keeps a gradient partition c*n from
 *   the first flush, stage 1 full gradients c*P as autograd makes them.
 *   step: fp32 norm/overflow upcasts of one parameter, then flatten + fp32 cast.
 *   CPU offload: master, state and an fp32 gradient partition live on the host
 *   (pinned); the GPU keeps the weights, the bucket in backward and a buffer of
 *   the largest parameter's size (temp_grad_buffer_for_gpu_offload); each flush
 *   upcasts one parameter's gradient to fp64 for its norm.
 * Stage 0 (fp16/fused_optimizer.py FP16_Optimizer): weights c*P, autograd
 *   gradients c*P, fp32 flat master 4P and state 8P; the step flattens the
 *   gradients and casts them to fp32. */
#include <string.h>

#include "hf_modeling.h"
#include "profiles.h"
#include "torch_step.h"
#include "work.h"

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Bytes per element _has_inf_or_nan holds at once (stage_1_and_2.py, 0.14.2
 * and 0.16.4): x.float() 4, isnan 1, isinf 1, logical_or 1, .float() 4. */
#define OVERFLOW_CHECK_BYTES 11

/* Two pinned staging tiles of 128 Mi floats per DeepSpeedCPUAdam (stack.h). */
#define CPU_ADAM_TILE_BYTES (2 * (INT64_C(128) << 20) * 4)

typedef struct {
    int64_t P, n, W, c;
    int64_t bucket_elems;     /* reduce_bucket_size */
    int64_t prefetch;         /* stage3_prefetch_bucket_size */
    int64_t buckets;          /* 2 with overlap_comm in stages 1-2 (ipg_buffer[0], [1]) */
    int64_t bucket_bytes;     /* all of them, in the compute dtype */
    int64_t sub_group;        /* elements of the largest optimizer sub-group */
    int64_t largest;          /* elements of the largest parameter */
    int64_t head;             /* elements of the LM head (or tied embedding) */
    int64_t block;            /* elements of one decoder block */
    int64_t block_largest;    /* largest parameter of a block */
    int64_t embed_rest;       /* untied embedding and final norm: gradients made last */
    int64_t persistent;       /* stage 3: elements kept whole (small params) */
    int64_t kept_block;       /* stage 3 without zero.Init: gathered elements of one block's
                                 Linears that autograd keeps from forward to backward */
    int64_t adam_elems;       /* state elements per parameter: 2 for Adam, 0 for SGD */
    bool offload, offload_params;
} ds_sizes;

/* A DeepSpeed config's value, or the default when the config did not set it. */
static int64_t setting(int64_t configured, const est_constants *k, est_constant_id id) {
    return configured == EST_DS_UNSET ? (int64_t)k->value[id] : configured;
}

static void sizes_of(const est_run *run, const est_constants *k, const est_params *p,
                     ds_sizes *s) {
    s->P = p->total;
    s->W = est_run_world(run);
    s->n = est_shard(s->P, s->W);
    s->c = est_compute_dtype_bytes(run->precision);
    const est_ds_settings *ds = &run->ds;
    s->bucket_elems = setting(ds->reduce_bucket_elems, k, EST_K_DS_REDUCE_BUCKET_ELEMS);
    s->sub_group = min64(s->n, setting(ds->sub_group_elems, k, EST_K_DS_SUB_GROUP_ELEMS));
    s->prefetch = setting(ds->prefetch_bucket_elems, k, EST_K_DS_PREFETCH_BUCKET_ELEMS);
    s->buckets = run->zero_stage < 3 && ds->overlap_comm ? 2 : 1;
    s->bucket_bytes = s->buckets * s->bucket_elems * s->c;
    s->largest = p->largest_tensor;
    s->head = p->lm_head ? p->lm_head : p->embedding;
    s->block = p->layer.total;
    s->block_largest = p->layer.largest;
    s->embed_rest = (p->lm_head ? p->embedding : 0) + p->final_norm;
    /* Parameters under stage3_param_persistence_threshold stay whole: norms and
     * (for Qwen2) q/k/v biases. */
    int64_t thr = setting(ds->persistence_elems, k, EST_K_DS_PARAM_PERSISTENCE_ELEMS);
    const ft_model *m = &run->model;
    int64_t small = 0;
    if (m->hidden_size < thr) small += (2 * p->layers + 1) * m->hidden_size;
    if (m->qkv_bias) {
        int64_t qb = m->num_heads * m->head_dim, kb = m->num_kv_heads * m->head_dim;
        small += p->layers * ((qb < thr ? qb : 0) + 2 * (kb < thr ? kb : 0));
    }
    s->persistent = small;
    /* The Linears of a block that are gathered (not persistent): q, k, v, o,
     * gate, up, down with their biases, less the biases kept whole. */
    int64_t block_persistent = p->layers > 0 ? (small - (m->hidden_size < thr ? m->hidden_size : 0)) / p->layers : 0;
    s->kept_block = p->layer.total - block_persistent;
    s->adam_elems = run->optimizer == EST_OPT_ADAMW ? 2 : 0;
    s->offload = run->offload != EST_OFFLOAD_NONE;
    s->offload_params = run->offload == EST_OFFLOAD_OPTIMIZER_PARAMS;
}

/* ZeRO-3's stream-ordered frees on the largest rank (sweep_terms). */
static int64_t pending_free_bytes(const est_constants *k, const ds_sizes *s) {
    return (int64_t)(k->value[EST_K_ZERO3_PENDING_FREE_HEADS] * (double)(s->head * s->c));
}

/* Stage 3: the partition, its gathers, its buckets and what autograd keeps. */
static void stage3_terms(const est_run *run, const est_constants *k, const ds_sizes *s,
                         est_sweep_terms *t) {
    t->base[EST_CAT_PARAMS] += s->offload_params ? 0 : s->n * s->c;
    if (s->W > 1) t->base[EST_CAT_PARAMS] += s->persistent * s->c;
    if (!s->offload) t->base[EST_CAT_GRADS] = s->n * s->c;
    t->base[EST_CAT_COMM] = s->bucket_bytes;
    /* Stream-ordered frees: gathered parameters (free_param) and
     * gradients moved into the bucket (__add_grad_to_ipg_bucket,
     * partition_grads) are freed after record_stream on a side stream, and
     * PyTorch's caching allocator keeps such blocks active until that
     * stream's event completes (CUDACachingAllocator.cpp, free ->
     * insert_events). How much is pending at the peak depends on how far
     * the host runs ahead, so it differs between ranks; its size on the
     * largest rank is fitted from multi-rank records in units of the
     * largest gathered tensor (the LM head). */
    if (s->W > 1) t->base[EST_CAT_COMM] += pending_free_bytes(k, s);
    if (s->W > 1 || s->offload_params) {
        /* The block being computed, and the next one prefetched. */
        int64_t prefetch = min64(s->block, s->prefetch);
        t->block_gathered = (s->block + prefetch) * s->c;
        t->head_gathered = s->head * s->c;
    }
    t->block_grad_transient = s->block_largest * s->c;
    t->head_grad_transient = s->head * s->c;
    if (!run->zero_init && (s->W > 1 || s->offload_params)) {
        /* Without zero.Init, torch.nn.functional.linear is torch's own:
         * zero.Init's patch to LinearFunctionForZeroStage3
         * (partition_parameters.py patch_init_and_builtins,
         * mem_efficient_linear; 0.14.2 and 0.16.4 alike) runs only when
         * the model is built inside the context. Torch's linear saves
         * weight.t(), a view of the gathered flat buffer
         * (all_gather_coalesced), so free_param's `param.data =
         * torch.empty(0)` after the module's forward frees nothing: every
         * gathered Linear weight lives until its backward. With one rank
         * the "gathered" weight is a view of the resident partition. */
        /* Under full checkpointing (HF: torch.utils.checkpoint, reentrant in
         * transformers 4.40) a block's forward runs without grad and keeps
         * nothing; its recompute in backward keeps its own weights until its
         * backward ends, beside the weights gathered again for it. */
        if (run->checkpointing == EST_CKPT_FULL)
            t->block_recompute_kept = s->kept_block * s->c;
        else
            t->block_cast_weights = s->kept_block * s->c;
        /* A fused linear cross-entropy reads the head's weight inside its
         * own autograd function and saves gradients, not the weight
         * (Liger-Kernel fused_linear_cross_entropy.py). */
        t->head_cast_weights = run->loss == EST_LOSS_CHUNKED ? 0 : s->head * s->c;
        t->kept_are_gathered = true;
    }
}

/* Stages 1-2: whole weights, partitioned gradients (stage 2) and buckets. */
static void stage12_terms(const est_run *run, const ds_sizes *s, est_sweep_terms *t) {
    const int stage = run->zero_stage;
    t->base[EST_CAT_PARAMS] += s->P * s->c;
    t->backward_only[EST_CAT_COMM] = s->bucket_bytes;
    if (s->offload) {
        t->base[EST_CAT_WORKSPACE] += s->largest * s->c; /* temp_grad_buffer_for_gpu_offload */
    } else if (stage == 2 && s->P > s->bucket_elems) {
        /* The gradient partition appears at the first flush, once the
         * bucket has filled (the head's gradients first, then blocks from
         * the last); a model smaller than the bucket flushes at the end. */
        int64_t rest = s->bucket_elems - s->head, L = run->layers_used;
        int64_t blocks = rest <= 0 ? 0 : (rest + s->block - 1) / s->block;
        t->late_grads = s->n * s->c;
        t->late_grads_layer = L - 1 - blocks;
    }
    if (stage == 1 && !s->offload) {
        t->block_grads = s->block * s->c;
        t->head_grads = s->head * s->c;
        t->embed_grads = s->embed_rest * s->c;
    } else {
        t->block_grad_transient = s->block_largest * s->c;
        t->head_grad_transient = s->head * s->c;
    }
}

/* Resident buffers and the forward/backward terms of each stage. */
static void sweep_terms(const est_run *run, const est_constants *k, const ds_sizes *s,
                        est_sweep_terms *t) {
    memset(t, 0, sizeof *t);
    const int64_t state_elems = run->zero_stage == 0 ? s->P : s->n;
    t->base[EST_CAT_WORKSPACE] = (int64_t)k->value[EST_K_CUBLAS_WORKSPACE_BYTES];
    t->base[EST_CAT_PARAMS] += est_rope_cache_bytes(run); /* modeling buffers */
    if (!s->offload) {
        t->base[EST_CAT_MASTER] = state_elems * 4;
        t->base[EST_CAT_OPTIMIZER] = state_elems * 4 * s->adam_elems;
    }
    if (run->zero_stage == 3) {
        stage3_terms(run, k, s, t);
    } else if (run->zero_stage >= 1) {
        stage12_terms(run, s, t);
    } else {
        t->base[EST_CAT_PARAMS] += s->P * s->c;
        t->block_grads = s->block * s->c;
        t->head_grads = s->head * s->c;
        t->embed_grads = s->embed_rest * s->c;
    }
}

/* Host RAM of one rank while training and while loading. */
static void host_bytes(const est_run *run, const est_constants *k, const ds_sizes *s,
                       est_step *st) {
    const int stage = run->zero_stage;
    /* Host: fp32 master, Adam state and the fp32 gradient partition (pinned),
     * plus the compute-dtype weight partition with parameter offload. */
    if (s->offload) {
        st->cpu_bytes = s->n * 4 * (2 + s->adam_elems);
        if (stage == 3) {
            /* The gradient partition in the model dtype, pinned
             * (_setup_for_real_optimizer grad_partitions_flat_buffer). */
            st->cpu_bytes += s->n * s->c;
        } else {
            /* temp_grad_buffer_for_cpu_offload, the largest parameter; with
             * accumulation every parameter of the partition gets a pinned
             * accumulation buffer of its full size (accumulated_grads_in_cpu,
             * async_accumulate_grad_in_cpu_via_gpu): about n elements. */
            st->cpu_bytes += s->largest * s->c;
            if (run->grad_accum > 1) st->cpu_bytes += s->n * s->c;
        }
        if (s->adam_elems && run->stack->ds_cpu_adam_pinned_tiles)
            st->cpu_bytes += CPU_ADAM_TILE_BYTES;
    }
    if (s->offload_params) st->cpu_bytes += s->n * s->c;

    /* Loading. Stages 0-2: every rank's process holds the fp32 model from
     * from_pretrained, and the engine's module.half() makes the compute-dtype
     * copy on the CPU before the move (engine.py _configure_distributed_model).
     * Stage 3 with the Trainer builds the model under zero.Init (HF's
     * integration, when the DeepSpeed config exists before from_pretrained):
     * each rank keeps its fp32 partition plus the checkpoint shard being read
     * (save_pretrained's default max_shard_size, 5 GB). */
    if (stage == 3 && run->zero_init)
        st->cpu_load_bytes = s->n * 4 + (int64_t)k->value[EST_K_HF_CHECKPOINT_SHARD_BYTES];
    else if (stage == 3)
        /* Built before DeepSpeed: the fp32 model in every process, halved in
         * place parameter by parameter, then moved to the device
         * (engine.py _configure_distributed_model, 0.14.2). */
        st->cpu_load_bytes = s->P * 4 + (s->c < 4 ? s->largest * s->c : 0);
    else
        st->cpu_load_bytes = s->P * 4 + (s->c < 4 ? s->P * s->c : 0);
}

/* The model on the device before the first step. */
static int init_moments(const est_run *run, const ds_sizes *s, const est_sweep_terms *t,
                        est_step *st, char *err, size_t errlen) {
    const int stage = run->zero_stage;
    int64_t live[EST_CAT_COUNT];
    if (stage == 3 && !run->zero_init) {
        /* engine.py _configure_distributed_model (0.14.2, 0.16.4): a module
         * that is not a zero.Init model is cast (module.half() / bfloat16())
         * and moved whole to the device; DeepSpeedZeRoOffload then
         * partitions it parameter by parameter (Init(module=...)), each
         * partition allocated while its full parameter still exists. */
        memset(live, 0, sizeof live);
        live[EST_CAT_PARAMS] = s->P * s->c + est_rope_cache_bytes(run) + est_shard(s->largest, s->W) * s->c;
        if (est_push(st, EST_PHASE_INIT, -1, "model moved to the device whole", live, err, errlen))
            return -1;
    }
    memcpy(live, t->base, sizeof live);
    if (stage == 3) live[EST_CAT_OPTIMIZER] = 0; /* Adam state appears at the first step */
    return est_push(st, EST_PHASE_INIT, -1, "engine initialized", live, err, errlen);
}

/* End of backward: the bucket is reduced into the gradient partition. */
static int reduce_moment(const est_run *run, const est_constants *k, const ds_sizes *s,
                         const est_sweep_terms *t, est_step *st, char *err, size_t errlen) {
    const int stage = run->zero_stage;
    int64_t live[EST_CAT_COUNT];
    memcpy(live, t->base, sizeof live);
    int64_t in_bucket = min64(s->P, s->bucket_elems) * s->c;
    if (stage >= 1) {
        est_live_add(live, EST_CAT_COMM, t->backward_only[EST_CAT_COMM]);
        if (stage == 3) est_live_add(live, EST_CAT_COMM, in_bucket); /* coalesced reduce-scatter */
        if (stage == 2 && !s->offload) est_live_add(live, EST_CAT_GRADS, s->n * s->c);
        if (stage == 1 && !s->offload) est_live_add(live, EST_CAT_GRADS, s->P * s->c);
        /* Offload: each flushed gradient (a shard of it in stage 3) is upcast to
         * fp64 for its norm. Stages 1-2 then check the whole gradient for
         * inf/nan (update_overflow_tracker_for_param_grad, any dtype):
         * _has_inf_or_nan holds x.float(), isnan, isinf, their or and its
         * .float() at once: 4 + 1 + 1 + 1 + 4 bytes per element. */
        if (s->offload)
            est_live_add(live, EST_CAT_WORKSPACE,
                         stage == 3 ? est_shard(s->largest, s->W) * 8 : s->largest * OVERFLOW_CHECK_BYTES);
    } else {
        est_live_add(live, EST_CAT_GRADS, s->P * s->c);
    }
    return est_push_unit(st, run, k, EST_PHASE_REDUCE, -1, "gradient reduction", live,
                         EST_UNIT_REDUCE, err, errlen);
}

/* The optimizer step. The bucket of stages 1-2 is released by now. */
static int optimizer_moments(const est_run *run, const est_constants *k, const ds_sizes *s,
                             const est_sweep_terms *t, est_step *st, char *err, size_t errlen) {
    const int stage = run->zero_stage;
    int64_t live[EST_CAT_COUNT];
    memcpy(live, t->base, sizeof live);
    if (s->offload) {
        return est_push_unit(st, run, k, EST_PHASE_OPTIMIZER, -1, "optimizer step on CPU", live,
                             EST_UNIT_OPTIMIZER, err, errlen);
    }
    int64_t grads = stage == 3 || stage == 2 ? s->n * s->c : s->P * s->c;
    live[EST_CAT_GRADS] = grads;
    const int64_t ws = live[EST_CAT_WORKSPACE];
    /* fp16 only (the loss scaler's overflow check, `if self.dtype ==
     * torch.float16`): stage 3 tests the gradient partition with isinf and
     * then isnan (has_overflow: one byte per element at a time); stages 1-2
     * run _has_inf_or_nan on each gradient piece of the partition
     * (has_overflow_partitioned_grads_serial), the largest piece being the
     * largest parameter or the partition. */
    const bool overflow_check = run->precision == EST_PREC_FP16_MIXED && stage >= 1;
    if (overflow_check) {
        est_live_add(live, EST_CAT_WORKSPACE,
                     stage == 3 ? s->n : min64(s->largest, stage == 2 ? s->n : s->P) * OVERFLOW_CHECK_BYTES);
        if (est_push_unit(st, run, k, EST_PHASE_OPTIMIZER, -1, "optimizer: fp16 overflow check", live,
                          EST_UNIT_OPTIMIZER, err, errlen))
            return -1;
        live[EST_CAT_WORKSPACE] = ws;
    }
    est_live_add(live, EST_CAT_WORKSPACE, est_shard(s->largest, s->W) * 8);
    if (est_push(st, EST_PHASE_OPTIMIZER, -1, "optimizer: gradient norm (fp64)", live, err, errlen))
        return -1;
    if (!overflow_check) est_work_emit(st, run, k, EST_UNIT_OPTIMIZER, -1); /* the step starts here */
    live[EST_CAT_WORKSPACE] = ws;
    const int64_t flat = stage == 0 ? s->P : s->sub_group;
    est_live_add(live, EST_CAT_GRADS, flat * (s->c + 4));
    return est_push(st, EST_PHASE_OPTIMIZER, -1, "optimizer: flatten + fp32 gradients", live, err,
                    errlen);
}

int est_step_deepspeed_legacy(const est_run *run, const est_constants *k, est_step *st, char *err,
                       size_t errlen) {
    est_params p;
    est_run_params(run, &p);
    ds_sizes s;
    sizes_of(run, k, &p, &s);
    est_sweep_terms t;
    sweep_terms(run, k, &s, &t);
    /* Ranks allocate alike (every partition is padded to ceil(numel/W)); what
     * is still pending differs, down to nothing on the smallest rank. */
    if (run->zero_stage == 3 && s.W > 1) st->rank_spread_bytes = pending_free_bytes(k, &s);
    host_bytes(run, k, &s, st);
    if (init_moments(run, &s, &t, st, err, errlen)) return -1;
    if (est_push_forward_backward(run, k, &t, st, err, errlen)) return -1;
    if (reduce_moment(run, k, &s, &t, st, err, errlen)) return -1;
    return optimizer_moments(run, k, &s, &t, st, err, errlen);
}
