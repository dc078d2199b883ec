/* HF Trainer + PyTorch FSDP, derived in docs/method.md ("fsdp") from
 *   FSDP1: torch/distributed/fsdp/_runtime_utils.py, _flat_param.py,
 *          fully_sharded_data_parallel.py, _init_utils.py (torch 2.2-2.6);
 *   FSDP2: torch/distributed/_composable/fsdp/_fsdp_param.py,
 *          _fsdp_collectives.py, _fsdp_param_group.py, _fsdp_state.py
 *          (torch 2.4-2.6; torch/distributed/fsdp/_fully_shard/ later);
 *   accelerate: utils/dataclasses.py FullyShardedDataParallelPlugin,
 *          accelerator.py prepare_model (0.29.3, 0.30.0, 1.4.0),
 *          utils/fsdp_utils.py fsdp2_prepare_model (1.6-1.13);
 *   transformers: training_args.py (fsdp_config defaults: backward_prefetch
 *          "NO_PREFETCH", sync_module_states true).
 *
 * One FSDP unit per decoder block (transformer auto-wrap on the decoder layer
 * class) and the root unit holding the rest: embedding, final norm, LM head.
 * --zero 3 = FULL_SHARD (FSDP2 reshard_after_forward=True), --zero 2 =
 * SHARD_GRAD_OP (reshard_after_forward=False), --zero 0 = NO_SHARD (FSDP1
 * only). Notation: W ranks; per unit U parameters, `shard` elements per
 * rank, `padded` = shard * W elements when gathered; w bytes of the sharded
 * parameter (its gradient and Adam state follow it), c of the compute dtype
 * (MixedPrecision.param_dtype), r of the reduction dtype. */
#include <string.h>

#include "hf_modeling.h"
#include "json_util.h"
#include "profiles.h"
#include "torch_step.h"

/* One unit's sizes. */
typedef struct fsdp_unit {
    int64_t numel;  /* U: parameters in the unit */
    int64_t shard;  /* elements one rank holds (NO_SHARD: U) */
    int64_t padded; /* elements of the gathered, padded unit (shard * W; NO_SHARD: U) */
} fsdp_unit;

/* Adds one parameter of rows x cols. FSDP2 shards every parameter on dim 0,
 * padding the rows to a multiple of W (_fsdp_param.py _init_sharded_param:
 * torch.chunk(param, W, dim=0), each chunk padded to the first one's rows). */
static void add_param(fsdp_unit *u, int64_t rows, int64_t cols, int64_t W, bool v2) {
    u->numel += rows * cols;
    if (v2) u->shard += est_shard(rows, W) * cols;
}

/* FSDP1 flattens the unit into one FlatParameter and pads it to a multiple of W
 * (_flat_param.py FlatParamHandle._get_shard: chunk, then pad to the first
 * chunk's numel). Alignment padding of use_orig_params (16 bytes per original
 * parameter at most) is not counted. */
static void finish_unit(fsdp_unit *u, int64_t W, bool v2, bool sharded) {
    if (!sharded) {
        u->shard = u->padded = u->numel;
        return;
    }
    if (!v2) u->shard = est_shard(u->numel, W);
    u->padded = u->shard * W;
}

static void block_unit(const ft_model *m, int64_t W, bool v2, bool sharded, fsdp_unit *u) {
    const int64_t h = m->hidden_size, I = m->intermediate_size;
    const int64_t q = m->num_heads * m->head_dim, kv = m->num_kv_heads * m->head_dim;
    memset(u, 0, sizeof *u);
    add_param(u, q, h, W, v2);
    add_param(u, kv, h, W, v2);
    add_param(u, kv, h, W, v2);
    add_param(u, h, q, W, v2);
    if (m->qkv_bias) {
        add_param(u, q, 1, W, v2);
        add_param(u, kv, 1, W, v2);
        add_param(u, kv, 1, W, v2);
    }
    if (m->o_bias) add_param(u, h, 1, W, v2);
    add_param(u, I, h, W, v2);
    add_param(u, I, h, W, v2);
    add_param(u, h, I, W, v2);
    if (m->mlp_bias) {
        add_param(u, I, 1, W, v2);
        add_param(u, I, 1, W, v2);
        add_param(u, h, 1, W, v2);
    }
    add_param(u, h, 1, W, v2); /* input_layernorm */
    add_param(u, h, 1, W, v2); /* post_attention_layernorm */
    finish_unit(u, W, v2, sharded);
}

static void root_unit(const ft_model *m, int64_t W, bool v2, bool sharded, fsdp_unit *u) {
    memset(u, 0, sizeof *u);
    add_param(u, m->vocab_size, m->hidden_size, W, v2); /* embed_tokens */
    add_param(u, m->hidden_size, 1, W, v2);             /* final norm */
    if (!m->tied_embeddings) add_param(u, m->vocab_size, m->hidden_size, W, v2); /* lm_head */
    finish_unit(u, W, v2, sharded);
}

/* Bytes the reduction of one unit's gradient allocates beside autograd's
 * unsharded gradient (c) and the result that stays (w). */
static int64_t reduce_buffers(const fsdp_unit *u, bool sharded, bool v2, int64_t c, int64_t r,
                              int64_t w) {
    int64_t b = 0;
    if (sharded && !v2) {
        if (r != c) b += u->numel * r;                       /* grad.to(reduce_dtype) */
        if (u->padded != u->numel) b += u->padded * r;       /* F.pad for the reduce-scatter */
        if (r != w) b += u->shard * r;                       /* reduce-scatter output, before the cast */
    } else if (sharded) {
        b += u->padded * r;                                  /* reduce-scatter input (copy-in) */
        if (r != w) b += u->shard * r;                       /* reduce-scatter output, before the cast */
    } else if (r != c && r != w) {
        b += u->numel * r;                                   /* NO_SHARD: the all-reduced cast */
    }
    return b;
}

/* Bytes of the sharded parameters (and so of their gradients and Adam state):
 * the loaded dtype, except that accelerate >= 0.30 upcasts FSDP1's
 * FlatParameters to fp32 under mixed precision (stack.h). 0 when the
 * combination cannot be run. */
static int64_t shard_dtype_bytes(const est_run *run) {
    if (run->precision == EST_PREC_BF16) return 2; /* pure bf16: no MixedPrecision policy */
    if (run->load_dtype == EST_LOAD_FP32) return 4;
    if (run->precision == EST_PREC_FP32) return 0; /* bf16 weights cannot train in fp32 */
    return run->fsdp_version == EST_FSDP1 && run->stack->fsdp_upcasts_low_precision_params ? 4 : 2;
}

/* One FSDP run: its configuration, units and the terms being built. */
typedef struct fsdp_ctx {
    const est_run *run;
    est_params p;
    int64_t W, L, w, c, r, S, head;
    bool v2, sharded, reshard_after_forward, mixed, copies, adam, offload, accum;
    fsdp_unit blk, root;
    est_category shard_cat;
    est_sweep_terms t;
} fsdp_ctx;

/* The configuration, or -1 with a message for one FSDP cannot run. */
static int fsdp_configure(const est_run *run, fsdp_ctx *x, char *err, size_t errlen) {
    memset(x, 0, sizeof *x);
    x->run = run;
    est_run_params(run, &x->p);
    x->W = est_run_world(run);
    x->L = run->layers_used;
    x->v2 = run->fsdp_version == EST_FSDP2;
    if (x->v2 && !run->stack->torch_has_fully_shard)
        return ft_errorf(err, errlen, "--fsdp-version 2 needs torch >= 2.4 (fully_shard); stack %s has torch %s",
                         run->stack->name, run->stack->torch);
    if (x->v2 && run->zero_stage == 0)
        return ft_errorf(err, errlen, "--fsdp-version 2 has no NO_SHARD (--zero 0); use --zero 2 or 3, "
                                      "or --framework hf for DDP");
    x->w = shard_dtype_bytes(run);
    if (x->w == 0)
        return ft_errorf(err, errlen, "--load-dtype bf16 with --precision fp32: use --precision bf16 "
                                      "or a mixed precision");
    /* FSDP1 on one rank switches to NO_SHARD (_init_utils.py _init_core_state:
     * "FSDP is switching to use `NO_SHARD` instead of ... since the world size is 1"). */
    x->sharded = run->zero_stage >= 2 && (x->v2 || x->W > 1);
    x->reshard_after_forward = run->zero_stage == 3;
    x->c = est_compute_dtype_bytes(run->precision);
    x->r = run->fsdp_reduce == EST_REDUCE_FP32 ? 4 : x->c;
    /* A low-precision copy of a unit exists beside its shard when the compute
     * dtype differs from the parameter's (FSDP1 _mp_shard, FSDP2 the all-gather
     * in param_dtype); gathering always makes a copy. */
    x->mixed = x->w != x->c;
    x->copies = x->sharded || x->mixed;
    x->adam = run->optimizer == EST_OPT_ADAMW;
    x->offload = run->offload != EST_OFFLOAD_NONE;
    x->accum = run->grad_accum > 1;
    block_unit(&run->model, x->W, x->v2, x->sharded, &x->blk);
    root_unit(&run->model, x->W, x->v2, x->sharded, &x->root);
    x->S = x->L * x->blk.shard + x->root.shard; /* one rank's parameter elements */
    x->head = x->p.lm_head ? x->p.lm_head : x->p.embedding; /* the LM head's weight */
    x->shard_cat = x->mixed ? EST_CAT_MASTER : EST_CAT_PARAMS;
    return 0;
}

/* Shards, optimizer state, buffers, and the units' unsharded copies. */
static void fsdp_resident(fsdp_ctx *x, const est_constants *k) {
    est_sweep_terms *t = &x->t;
    const int64_t c = x->c, L = x->L;
    if (!x->offload) {
        t->base[x->shard_cat] = x->S * x->w;
        /* AdamW state, zeros_like(param): the sharded parameter's dtype. */
        t->base[EST_CAT_OPTIMIZER] = x->adam ? 2 * x->S * x->w : 0;
    }
    t->base[EST_CAT_WORKSPACE] = (int64_t)k->value[EST_K_CUBLAS_WORKSPACE_BYTES];
    /* Modeling buffers, cast to buffer_dtype = param_dtype (accelerate's
     * set_mixed_precision) by the root's lazy init. */
    t->base[EST_CAT_PARAMS] += est_rope_cache_bytes(x->run);

    /* The root unit stays unsharded from its forward through its backward:
     * FSDP1 never reshards the root after forward (_post_forward_reshard:
     * `not state._is_root and ...`), FSDP2 neither (_fsdp_state.py _lazy_init:
     * root post_forward_mesh_info = None); NO_SHARD's low-precision copy is
     * made again at the root's pre-backward, before the first backward moment. */
    const int64_t block_copy = x->copies ? x->blk.padded * c : 0;
    t->base[EST_CAT_COMM] = x->copies ? x->root.padded * c : 0;
    if (x->v2) {
        /* FSDP2 gathers into one flat all_gather_output (param_dtype) and copies
         * it out into per-parameter tensors before freeing it
         * (_fsdp_collectives.py foreach_all_gather, foreach_all_gather_copy_out):
         * for a moment the unit exists twice. */
        t->block_unshard_staging = block_copy;
        t->root_unshard_staging = x->root.padded * c;
    }
    if (!x->sharded || x->reshard_after_forward) {
        /* FULL_SHARD frees a block after its forward and gathers it again in
         * backward; NO_SHARD frees its low-precision copy at the same points
         * (_flat_param.py post_reshard). */
        t->block_gathered = block_copy;
        /* FSDP2 prefetches the next unit in backward order by default
         * (_fsdp_param_group.py pre_backward -> _backward_prefetch); FSDP1
         * under the HF Trainer has backward_prefetch None ("NO_PREFETCH"). */
        if (x->v2) t->block_prefetched_bwd = block_copy;
    } else if (x->accum && !x->v2) {
        /* SHARD_GRAD_OP under no_sync keeps every block unsharded across
         * micro-batches (_should_free_in_backward: only when syncing). */
        t->base[EST_CAT_COMM] += L * block_copy;
    } else {
        /* SHARD_GRAD_OP: unsharded from the block's forward to its backward. */
        t->block_gathered_kept = block_copy;
    }
}

/* Gradients. Autograd leaves each unit's unsharded gradient in c; the
 * post-backward hook reduces it in r and casts the result to w, which stays
 * until the step (_runtime_utils.py _post_backward_hook,
 * _cast_grad_to_param_dtype; FSDP2 _fsdp_collectives.py foreach_reduce). In
 * flight at the cast: autograd's gradient plus the reduction's buffers. */
static void fsdp_gradients(fsdp_ctx *x) {
    est_sweep_terms *t = &x->t;
    const int64_t c = x->c, r = x->r, w = x->w;
    const bool grad_is_result = !x->sharded && c == w && r == c; /* NO_SHARD in one dtype */
    const int64_t blk_reduce = reduce_buffers(&x->blk, x->sharded, x->v2, c, r, w);
    const int64_t root_reduce = reduce_buffers(&x->root, x->sharded, x->v2, c, r, w);
    const int64_t blk_result = x->offload || x->accum ? 0 : x->blk.shard * w;
    const int64_t root_result = x->offload || x->accum ? 0 : x->root.shard * w;
    if (x->accum) {
        /* no_sync (accelerate's accumulate) leaves every unit's unsharded
         * gradient in place between micro-batches: c for FSDP1, r for FSDP2
         * (which accumulates in reduce_dtype). Counted through the whole sweep
         * instead of the sharded results, which is exact in forward and at the
         * last block's backward and above the truth in between. */
        t->base[EST_CAT_GRADS] += (x->L * x->blk.numel + x->root.numel) * (x->v2 ? r : c);
    }
    t->block_grads = blk_result;
    t->block_grad_transient = (grad_is_result ? 0 : x->blk.numel * c) + blk_reduce;
    /* The root's gradients: the LM head's weight gradient (c) appears at its
     * backward and waits for the embedding's (FSDP1's split-view backward
     * assembles the flat gradient only then; FSDP2 reduces the root's group
     * in its post-backward at the end). At the embedding backward the
     * embedding's and final norm's gradients, FSDP1's assembled flat gradient
     * (for NO_SHARD in one dtype, the result itself), the reduction's buffers
     * and the result exist together. */
    t->root_grad_unsharded = x->head * c;
    t->embed_grads = (x->p.embedding + x->p.final_norm) * c + (x->v2 ? 0 : x->root.numel * c) +
                     root_reduce + (grad_is_result ? 0 : root_result);
}

/* Init: units are moved to the GPU and flattened (FSDP1: torch.cat of the
 * unit's parameters beside them, then the shard cloned and the rest freed;
 * FSDP2: each parameter's padded shard copied beside the unit). Blocks are
 * wrapped first, the root last, so the root's transient comes on top of every
 * block's shard. */
static int fsdp_init_moment(fsdp_ctx *x, est_step *st, char *err, size_t errlen) {
    int64_t live[EST_CAT_COUNT];
    memset(live, 0, sizeof live);
    live[EST_CAT_PARAMS] = x->t.base[EST_CAT_PARAMS];
    if (!x->offload) {
        const int64_t n = x->root.numel;
        int64_t root_init = x->sharded ? (x->v2 ? n + x->root.shard : 2 * n)
                                       : 2 * n; /* NO_SHARD: the parameters and their flat copy */
        est_live_add(live, x->shard_cat, (x->L * x->blk.shard + root_init) * x->w);
    }
    return est_push(st, EST_PHASE_INIT, -1, "model sharded (root unit flattened)", live, err, errlen);
}

/* After backward every unit is resharded (post-backward with gradients
 * synced) and the low-precision copies are gone; then the optimizer step. */
static int fsdp_step_tail(fsdp_ctx *x, const est_constants *k, est_step *st, char *err,
                          size_t errlen) {
    int64_t live[EST_CAT_COUNT];
    memcpy(live, x->t.base, sizeof live);
    live[EST_CAT_COMM] = 0;
    live[EST_CAT_GRADS] = x->offload ? 0 : x->S * x->w;
    if (est_push_unit(st, x->run, k, EST_PHASE_REDUCE, -1, "gradients reduce-scattered", live,
                      EST_UNIT_REDUCE, err, errlen))
        return -1;
    /* torch AdamW foreach: exp_avg_sq_sqrt = _foreach_sqrt(exp_avg_sqs), one
     * temporary the size of the shard (torch/optim/adamw.py _multi_tensor_adamw). */
    if (x->adam && !x->offload) est_live_add(live, EST_CAT_WORKSPACE, x->S * x->w);
    const char *label = x->offload ? "optimizer step on CPU"
                        : x->adam  ? "optimizer step (foreach AdamW)"
                                   : "optimizer step (SGD)";
    return est_push_unit(st, x->run, k, EST_PHASE_OPTIMIZER, -1, label, live, EST_UNIT_OPTIMIZER,
                         err, errlen);
}

int est_step_fsdp(const est_run *run, const est_constants *k, est_step *st, char *err,
                  size_t errlen) {
    if (run->lora.rank > 0) return est_step_fsdp_lora(run, k, st, err, errlen);
    fsdp_ctx x;
    if (fsdp_configure(run, &x, err, errlen)) return -1;
    fsdp_resident(&x, k);
    fsdp_gradients(&x);
    if (x.offload) {
        /* CPUOffload(offload_params=True): shards, their gradients (copied to
         * the host in the post-backward hook) and torch's AdamW on the host. */
        st->cpu_bytes = x.S * x.w * (2 + (x.adam ? 2 : 0));
    }
    /* Without cpu_ram_efficient_loading every rank loads the whole model on the host. */
    st->cpu_load_bytes =
        x.p.total * (run->load_dtype == EST_LOAD_BF16 || run->precision == EST_PREC_BF16 ? 2 : 4);
    if (fsdp_init_moment(&x, st, err, errlen)) return -1;
    if (est_push_forward_backward(run, k, &x.t, st, err, errlen)) return -1;
    return fsdp_step_tail(&x, k, st, err, errlen);
}
