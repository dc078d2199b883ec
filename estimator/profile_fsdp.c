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

int est_step_fsdp(const est_run *run, const est_constants *k, est_step *st, char *err,
                      size_t errlen) {
    if (run->lora.rank > 0) return est_step_fsdp_lora(run, k, st, err, errlen);
    est_params p;
    est_run_params(run, &p);
    const int64_t W = est_run_world(run), L = run->layers_used, P = p.total;
    const bool v2 = run->fsdp_version == EST_FSDP2;
    if (v2 && !run->stack->torch_has_fully_shard)
        return ft_errorf(err, errlen, "--fsdp-version 2 needs torch >= 2.4 (fully_shard); stack %s has torch %s",
                         run->stack->name, run->stack->torch);
    if (v2 && run->zero_stage == 0)
        return ft_errorf(err, errlen, "--fsdp-version 2 has no NO_SHARD (--zero 0); use --zero 2 or 3, "
                                      "or --framework hf for DDP");
    const int64_t w = shard_dtype_bytes(run);
    if (w == 0)
        return ft_errorf(err, errlen, "--load-dtype bf16 with --precision fp32: use --precision bf16 "
                                      "or a mixed precision");
    /* FSDP1 on one rank switches to NO_SHARD (_init_utils.py _init_core_state:
     * "FSDP is switching to use `NO_SHARD` instead of ... since the world size is 1"). */
    const bool sharded = run->zero_stage >= 2 && (v2 || W > 1);
    const bool reshard_after_forward = run->zero_stage == 3;
    const int64_t c = est_compute_dtype_bytes(run->precision);
    const int64_t r = run->fsdp_reduce == EST_REDUCE_FP32 ? 4 : c;
    /* A low-precision copy of a unit exists beside its shard when the compute
     * dtype differs from the parameter's (FSDP1 _mp_shard, FSDP2 the all-gather
     * in param_dtype); gathering always makes a copy. */
    const bool mixed = w != c;
    const bool copies = sharded || mixed;
    const bool adam = run->optimizer == EST_OPT_ADAMW;
    const bool offload = run->offload != EST_OFFLOAD_NONE;
    const bool accum = run->grad_accum > 1;

    fsdp_unit blk, root;
    block_unit(&run->model, W, v2, sharded, &blk);
    root_unit(&run->model, W, v2, sharded, &root);
    const int64_t S = L * blk.shard + root.shard; /* one rank's parameter elements */
    const int64_t head = p.lm_head ? p.lm_head : p.embedding; /* the LM head's weight */

    est_sweep_terms t;
    memset(&t, 0, sizeof t);
    const est_category shard_cat = mixed ? EST_CAT_MASTER : EST_CAT_PARAMS;
    if (!offload) {
        t.base[shard_cat] = S * w;
        /* AdamW state, zeros_like(param): the sharded parameter's dtype. */
        t.base[EST_CAT_OPTIMIZER] = adam ? 2 * S * w : 0;
    }
    t.base[EST_CAT_WORKSPACE] = (int64_t)k->value[EST_K_CUBLAS_WORKSPACE_BYTES];
    /* Modeling buffers, cast to buffer_dtype = param_dtype (accelerate's
     * set_mixed_precision) by the root's lazy init. */
    t.base[EST_CAT_PARAMS] += est_rope_cache_bytes(run);

    /* The root unit stays unsharded from its forward through its backward:
     * FSDP1 never reshards the root after forward (_post_forward_reshard:
     * `not state._is_root and ...`), FSDP2 neither (_fsdp_state.py _lazy_init:
     * root post_forward_mesh_info = None); NO_SHARD's low-precision copy is
     * made again at the root's pre-backward, before the first backward moment. */
    const int64_t block_copy = copies ? blk.padded * c : 0;
    t.base[EST_CAT_COMM] = copies ? root.padded * c : 0;
    if (v2) {
        /* FSDP2 gathers into one flat all_gather_output (param_dtype) and copies
         * it out into per-parameter tensors before freeing it
         * (_fsdp_collectives.py foreach_all_gather, foreach_all_gather_copy_out):
         * for a moment the unit exists twice. */
        t.block_unshard_staging = block_copy;
        t.root_unshard_staging = root.padded * c;
    }
    if (!sharded || reshard_after_forward) {
        /* FULL_SHARD frees a block after its forward and gathers it again in
         * backward; NO_SHARD frees its low-precision copy at the same points
         * (_flat_param.py post_reshard). */
        t.block_gathered = block_copy;
        /* FSDP2 prefetches the next unit in backward order by default
         * (_fsdp_param_group.py pre_backward -> _backward_prefetch); FSDP1
         * under the HF Trainer has backward_prefetch None ("NO_PREFETCH"). */
        if (v2) t.block_prefetched_bwd = block_copy;
    } else if (accum && !v2) {
        /* SHARD_GRAD_OP under no_sync keeps every block unsharded across
         * micro-batches (_should_free_in_backward: only when syncing). */
        t.base[EST_CAT_COMM] += L * block_copy;
    } else {
        /* SHARD_GRAD_OP: unsharded from the block's forward to its backward. */
        t.block_gathered_kept = block_copy;
    }

    /* Gradients. Autograd leaves each unit's unsharded gradient in c; the
     * post-backward hook reduces it in r and casts the result to w, which
     * stays until the step (_runtime_utils.py _post_backward_hook,
     * _cast_grad_to_param_dtype; FSDP2 _fsdp_collectives.py foreach_reduce).
     * In flight at the cast: autograd's gradient plus the reduction's buffers. */
    const bool grad_is_result = !sharded && c == w && r == c; /* NO_SHARD in one dtype */
    const int64_t blk_reduce = reduce_buffers(&blk, sharded, v2, c, r, w);
    const int64_t root_reduce = reduce_buffers(&root, sharded, v2, c, r, w);
    const int64_t blk_result = offload || accum ? 0 : blk.shard * w;
    const int64_t root_result = offload || accum ? 0 : root.shard * w;
    if (accum) {
        /* no_sync (accelerate's accumulate) leaves every unit's unsharded
         * gradient in place between micro-batches: c for FSDP1, r for FSDP2
         * (which accumulates in reduce_dtype). Counted through the whole sweep
         * instead of the sharded results, which is exact in forward and at the
         * last block's backward and above the truth in between. */
        t.base[EST_CAT_GRADS] += (L * blk.numel + root.numel) * (v2 ? r : c);
    }
    t.block_grads = blk_result;
    t.block_grad_transient = (grad_is_result ? 0 : blk.numel * c) + blk_reduce;
    /* The root's gradients: the LM head's weight gradient (c) appears at its
     * backward and waits for the embedding's (FSDP1's split-view backward
     * assembles the flat gradient only then; FSDP2 reduces the root's group
     * in its post-backward at the end). At the embedding backward the
     * embedding's and final norm's gradients, FSDP1's assembled flat gradient
     * (for NO_SHARD in one dtype, the result itself), the reduction's buffers
     * and the result exist together. */
    t.root_grad_unsharded = head * c;
    t.embed_grads = (p.embedding + p.final_norm) * c + (v2 ? 0 : root.numel * c) + root_reduce +
                    (grad_is_result ? 0 : root_result);

    if (offload) {
        /* CPUOffload(offload_params=True): shards, their gradients (copied to
         * the host in the post-backward hook) and torch's AdamW on the host. */
        st->cpu_bytes = S * w * (2 + (adam ? 2 : 0));
    }
    /* Without cpu_ram_efficient_loading every rank loads the whole model on the host. */
    st->cpu_load_bytes = P * (run->load_dtype == EST_LOAD_BF16 || run->precision == EST_PREC_BF16 ? 2 : 4);

    /* Init: units are moved to the GPU and flattened (FSDP1: torch.cat of the
     * unit's parameters beside them, then the shard cloned and the rest
     * freed; FSDP2: each parameter's padded shard copied beside the unit).
     * Blocks are wrapped first, the root last, so the root's transient comes
     * on top of every block's shard. */
    int64_t live[EST_CAT_COUNT];
    memset(live, 0, sizeof live);
    live[EST_CAT_PARAMS] = t.base[EST_CAT_PARAMS];
    if (!offload) {
        int64_t root_init = sharded ? (v2 ? root.numel + root.shard : 2 * root.numel)
                                    : 2 * root.numel; /* NO_SHARD: the parameters and their flat copy */
        est_live_add(live, shard_cat, (L * blk.shard + root_init) * w);
    }
    if (est_push(st, EST_PHASE_INIT, -1, "model sharded (root unit flattened)", live, err, errlen))
        return -1;
    if (est_push_forward_backward(run, k, &t, st, err, errlen)) return -1;

    /* After backward every unit is resharded (post-backward with gradients
     * synced) and the low-precision copies are gone. */
    memcpy(live, t.base, sizeof live);
    live[EST_CAT_COMM] = 0;
    live[EST_CAT_GRADS] = offload ? 0 : S * w;
    if (est_push_unit(st, run, k, EST_PHASE_REDUCE, -1, "gradients reduce-scattered", live,
                      EST_UNIT_REDUCE, err, errlen))
        return -1;
    /* torch AdamW foreach: exp_avg_sq_sqrt = _foreach_sqrt(exp_avg_sqs), one
     * temporary the size of the shard (torch/optim/adamw.py _multi_tensor_adamw). */
    if (adam && !offload) est_live_add(live, EST_CAT_WORKSPACE, S * w);
    const char *label = offload ? "optimizer step on CPU"
                        : adam  ? "optimizer step (foreach AdamW)"
                                : "optimizer step (SGD)";
    return est_push_unit(st, run, k, EST_PHASE_OPTIMIZER, -1, label, live, EST_UNIT_OPTIMIZER, err,
                         errlen);
}
