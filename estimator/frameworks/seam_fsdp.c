/* HF Trainer + PyTorch FSDP as a seam on autograd's step (seam_fsdp.h),
 * derived in docs/method.md ("fsdp") from
 *   FSDP1: torch/distributed/fsdp/_runtime_utils.py, _flat_param.py,
 *          fully_sharded_data_parallel.py, _init_utils.py (torch 2.2-2.6);
 *   FSDP2: torch/distributed/_composable/fsdp/ (2.4-2.5; fsdp/_fully_shard/
 *          from 2.6) _fsdp_param_group.py, _fsdp_collectives.py, _fsdp_param.py;
 *   accelerate: utils/dataclasses.py FullyShardedDataParallelPlugin,
 *          accelerator.py prepare_model (0.29.3, 0.30.0, 1.4.0);
 *   transformers: training_args.py (fsdp_config: backward_prefetch
 *          "NO_PREFETCH", forward_prefetch false).
 * One unit per decoder block (transformer auto-wrap on the decoder layer
 * class) and the root unit holding the rest: embedding, final norm, LM head;
 * under LoRA each adapter weight is a unit of its own (PEFT utils/other.py
 * fsdp_auto_wrap_policy: its lambda policy wraps every leaf whose weight
 * requires grad). --zero 3 = FULL_SHARD (FSDP2 reshard_after_forward=True),
 * --zero 2 = SHARD_GRAD_OP (reshard_after_forward=False), --zero 0 = NO_SHARD
 * (FSDP1 only). This file: the units, dtypes, loading and wrapping, gradients'
 * arrival and the optimizer step. */
#include <stdlib.h>
#include <string.h>

#include "fsdp_policy.h"
#include "json_util.h"
#include "lora.h"
#include "optimizers.h"
#include "profiles.h"
#include "quant.h"
#include "seam_fsdp.h"
#include "seam_regime.h"
#include "seam_util.h"
#include "work.h"

static int configure(est_sim *s, fsdp_state *f) {
    const est_run *run = s->run;
    f->W = est_run_dp(run); /* the data-parallel mesh (--tp: world / tp, model/tp.h) */
    f->v2 = run->fsdp_version == EST_FSDP2;
    if (f->v2 && !run->stack->torch_has_fully_shard)
        return ft_errorf(s->err, s->errlen, "--fsdp-version 2 needs torch >= 2.4 (fully_shard); stack %s has torch %s",
                         run->stack->name, run->stack->torch);
    if (f->v2 && run->zero_stage == 0)
        return ft_errorf(s->err, s->errlen, "--fsdp-version 2 has no NO_SHARD (--zero 0); use --zero 2 "
                                            "or 3, or --framework hf for DDP");
    if (f->v2 && est_lora_on(run) && run->fsdp_wrapper == EST_FSDP_BY_ACCELERATE &&
        run->stack->fsdp2_upcasts_whole_model && est_compute_dtype_bytes(run->precision) == 2 &&
        run->precision != EST_PREC_BF16)
        return ft_errorf(s->err, s->errlen, "LoRA under FSDP2 with accelerate %s (stack %s) is not modelled: its "
                                            "fsdp2_prepare_model casts the whole model, frozen base included, to fp32",
                         run->stack->accelerate, run->stack->name);
    f->w = est_fsdp_shard_bytes(run);
    if (f->w == 0)
        return ft_errorf(s->err, s->errlen, "--load-dtype bf16 with --precision fp32: use --precision "
                                            "bf16 or a mixed precision");
    /* FSDP1 on one rank switches to NO_SHARD (_init_utils.py _init_core_state:
     * "FSDP is switching to use `NO_SHARD` instead of ... since the world size is 1"). */
    f->sharded = run->zero_stage >= 2 && (f->v2 || f->W > 1);
    f->reshard_after_forward = run->zero_stage == 3;
    f->c = (int)est_compute_dtype_bytes(run->precision);
    f->r = run->fsdp_reduce == EST_REDUCE_FP32 ? 4 : f->c;
    f->mixed = f->w != f->c;
    f->offload = run->offload != EST_OFFLOAD_NONE;
    f->accum = run->grad_accum > 1;
    f->shard_cat = f->mixed && f->w == 4 && !est_lora_on(run) ? EST_CAT_MASTER : EST_CAT_PARAMS;
    f->ag_state = f->rs_state = -1;
    f->deferred = -1;
    f->embed_unit = f->head_unit = -1;
    if (run->fsdp_shard_ends && !f->v2)
        return ft_errorf(s->err, s->errlen, "units of their own for the embedding and the head are modelled for "
                                            "--fsdp-version 2 (fully_shard)");
    if (run->fsdp_shard_ends && run->model.tied_embeddings) /* the head reads the embedding unit's weight */
        return ft_errorf(s->err, s->errlen, "units of their own for the embedding and the head: not modelled with "
                                            "tied embeddings (the head would read the embedding's resharded weight)");
    return 0;
}

/* A parameter's elements as FSDP flattens it: a bitsandbytes weight packs its
 * codes into compute-dtype elements (bnb_4bit_quant_storage = the compute
 * dtype, so that FSDP can flatten and shard it); its quantization constants
 * are no parameter and stay whole on every rank (*resident). */
static int64_t param_numel(const est_sim *s, const fsdp_state *f, int inst, int p, int64_t *resident) {
    const est_mparam *pp = est_sim_param(s, inst, p);
    const int64_t n = est_sim_param_elems(s, inst, p), storage = est_sim_param_storage(s, inst, p);
    *resident = 0;
    if (storage == n * pp->elem_bytes) return n;
    const int64_t codes = s->run->quant == EST_QUANT_NF4 ? (pp->rows * pp->cols + 1) / 2 * pp->copies : n;
    *resident = storage - codes;
    return (codes + f->c - 1) / f->c;
}

/* A parameter of the sparse MoE block (block_moe.c): the router and the
 * shared expert (Linears of no LoRA target) and the routed experts (the
 * gate/up/down targets of a mixture of experts). */
static bool in_moe_block(const est_mparam *pp) {
    if (pp->kind != EST_PK_LINEAR_WEIGHT && pp->kind != EST_PK_LINEAR_BIAS) return false;
    return pp->lora_target < 0 || pp->lora_target >= EST_LORA_GATE;
}

/* Units: the root (0), the blocks (1..L), then one per adapter. With the MoE
 * blocks wrapped (transformer_layer_cls_to_wrap = the SparseMoeBlock) a
 * block's unit holds its MoE block alone and the attention and norms fall to
 * the root, whose FlatParameter FSDP1 keeps gathered from forward to
 * backward; the block's unit is gathered with the decoder layer's forward
 * (in transformers the MoE block's forward starts after the attention: the
 * unit is counted as gathered during the attention too). */
#define UNIT_EMBED (-2) /* run->fsdp_shard_ends: placed after the adapters (build_units) */
#define UNIT_HEAD (-3)
static int unit_of_param(const est_sim *s, const est_param_ref *r, int *next_adapter) {
    const est_mparam *pp = est_sim_param(s, r->inst, r->p);
    if (s->run->fsdp_shard_ends && r->inst == EST_INST_EMBED) return UNIT_EMBED;
    if (s->run->fsdp_shard_ends && r->inst == s->L + 1 && pp->kind != EST_PK_NORM) return UNIT_HEAD;
    if (r->inst == EST_INST_EMBED || r->inst == s->L + 1) return 0;
    if (pp->kind == EST_PK_ADAPTER && s->run->fsdp_lora_wrap == EST_FSDP_LORA_WRAP_PEFT) return (*next_adapter)++;
    if (s->run->fsdp_wrap == EST_FSDP_WRAP_MOE_BLOCK && !in_moe_block(pp)) return 0;
    return r->inst;
}

/* FSDP2 shards each parameter on dim 0, padding its rows to a multiple of W
 * (_fsdp_param.py _init_sharded_param: torch.chunk, each chunk padded to the
 * first's rows); a packed quantized weight is one column; a 3-D tensor
 * (fused experts) is chunked on its first dimension. */
static int64_t param_shard(const est_sim *s, const fsdp_state *f, const fsdp_param *q) {
    const est_mparam *pp = est_sim_param(s, q->inst, q->p);
    if (!f->sharded) return q->numel;
    if (q->numel != pp->rows * pp->cols * pp->copies) return est_shard(q->numel, f->W);
    if (pp->lead > 0) return est_shard(pp->lead, f->W) * (pp->rows / pp->lead) * pp->cols * pp->copies;
    return est_shard(pp->rows, f->W) * pp->cols * pp->copies;
}

/* Sizes of one unit from its parameters. FSDP1 pads the FlatParameter to a
 * multiple of W (_flat_param.py FlatParamHandle._get_shard; use_orig_params'
 * alignment padding is not counted). */
static void unit_sizes(est_sim *s, fsdp_state *f, int u) {
    fsdp_unit *x = &f->units[u];
    x->numel = x->shard = 0;
    x->trainable = false;
    for (int i = x->first; i < x->first + x->count; i++) {
        fsdp_param *q = &f->params[i];
        q->shard = param_shard(s, f, q);
        x->numel += q->numel;
        x->shard += q->shard;
        x->trainable |= est_sim_param(s, q->inst, q->p)->trainable;
    }
    if (!f->sharded) x->shard = x->padded = x->numel;
    else if (!f->v2) x->shard = est_shard(x->numel, f->W);
    if (f->sharded) x->padded = x->shard * f->W;
}

/* FSDP1 with use_orig_params and adapters in the layer's FlatParameter: the
 * optimizer holds the original parameters, and a parameter's gradient on this
 * rank is the part of it inside the rank's shard (_flat_param.py
 * _use_sharded_grad_views: a view into the sharded gradient for a parameter
 * that requires grad and lies in the shard; None for the frozen base). One
 * optimizer tensor per adapter with elements in [rank * shard, (rank+1) * shard)
 * of the flattened unit, in registration order. */
static void orig_param_opt(est_sim *s, fsdp_state *f, fsdp_unit *x) {
    const int64_t rank = f->sharded ? s->run->rank : 0;
    const int64_t lo = rank * x->shard, hi = lo + x->shard;
    int64_t at = 0;
    for (int i = x->first; i < x->first + x->count; at += f->params[i].numel, i++) {
        if (est_sim_param(s, f->params[i].inst, f->params[i].p)->kind != EST_PK_ADAPTER) continue;
        const int64_t b = at > lo ? at : lo, e = at + f->params[i].numel < hi ? at + f->params[i].numel : hi;
        if (e > b) {
            f->opt[f->n_opt++] = (fsdp_opt){.numel = e - b};
            x->n_opt++;
        }
    }
}

/* The optimizer's tensors: a FlatParameter per trainable FSDP1 unit, a shard
 * per trainable parameter under FSDP2. */
static void opt_tensors(est_sim *s, fsdp_state *f) {
    f->n_opt = 0;
    for (int u = 0; u < f->n_units; u++) {
        fsdp_unit *x = &f->units[u];
        x->first_opt = f->n_opt;
        x->n_opt = 0;
        if (!x->trainable) continue;
        if (!f->v2 && est_fsdp_base_views_need_grad(s->run) && u > 0) {
            orig_param_opt(s, f, x);
            continue;
        }
        if (!f->v2) {
            f->opt[f->n_opt++] = (fsdp_opt){.numel = x->shard};
            x->n_opt = 1;
            continue;
        }
        for (int i = x->first; i < x->first + x->count; i++)
            if (est_sim_param(s, f->params[i].inst, f->params[i].p)->trainable) {
                f->opt[f->n_opt++] = (fsdp_opt){.numel = f->params[i].shard};
                x->n_opt++;
            }
    }
}

/* Parameters grouped by unit, in registration order within a unit. */
static int build_units(est_sim *s, fsdp_state *f, int64_t *resident) {
    const int slots = est_sim_slots(s);
    est_param_ref *refs = malloc((size_t)slots * sizeof *refs);
    int *unit = malloc((size_t)slots * sizeof *unit);
    f->params = calloc((size_t)slots, sizeof *f->params);
    f->param_of_slot = malloc((size_t)slots * sizeof *f->param_of_slot);
    f->units = calloc((size_t)slots + (size_t)s->L + 2, sizeof *f->units);
    f->opt = calloc((size_t)slots, sizeof *f->opt);
    if (!refs || !unit || !f->params || !f->param_of_slot || !f->units || !f->opt) {
        free(refs);
        free(unit);
        return -1;
    }
    const int n = est_sim_params(s, false, refs);
    int next_adapter = (int)s->L + 1;
    for (int i = 0; i < n; i++) unit[i] = unit_of_param(s, &refs[i], &next_adapter);
    f->n_units = next_adapter;
    if (s->run->fsdp_shard_ends) {
        f->embed_unit = f->n_units++;
        f->head_unit = f->n_units++;
        for (int i = 0; i < n; i++)
            if (unit[i] < 0) unit[i] = unit[i] == UNIT_EMBED ? f->embed_unit : f->head_unit;
    }
    *resident = 0;
    for (int u = 0; u < f->n_units; u++) {
        fsdp_unit *x = &f->units[u];
        *x = (fsdp_unit){.first = f->n_params, .owner = u, .full = -1, .staged = -1, .ag = -1,
                         .accum = -1, .grad = -1};
        for (int i = 0; i < n; i++) {
            if (unit[i] != u) continue;
            int64_t res;
            const int64_t numel = param_numel(s, f, refs[i].inst, refs[i].p, &res);
            *resident += res;
            if (u > s->L && u != f->embed_unit && u != f->head_unit)
                x->owner = refs[i].inst; /* an adapter: its block's unit */
            f->param_of_slot[refs[i].slot] = f->n_params;
            f->params[f->n_params++] = (fsdp_param){.inst = refs[i].inst, .p = refs[i].p, .unit = u,
                                                    .numel = numel, .unsharded = -1, .grad = -1,
                                                    .accum = -1, .sharded = -1};
        }
        x->count = f->n_params - x->first;
        unit_sizes(s, f, u);
    }
    opt_tensors(s, f);
    free(refs);
    free(unit);
    return 0;
}

/* Loading and wrapping, unit by unit, blocks first and the root last (the
 * auto-wrap policy wraps children before their parent, a block's adapters
 * before the block; the root's FullyShardedDataParallel / fully_shard comes
 * last): each unit is moved to the device (_init_utils.py
 * _move_module_to_device; FSDP2 _move_states_to_device) as loaded, one
 * tensor per parameter; FSDP1 concatenates them into the FlatParameter
 * (_flat_param.py flatten_tensors: torch.cat), clones this rank's shard
 * (shard(): _get_shard) and frees the flat tensor, or under NO_SHARD keeps
 * the flat tensor as it is (shard() skips _get_shard); FSDP2 copies each
 * parameter's padded shard (_init_sharded_param: new_zeros, copy_). The
 * originals are referenced until the unit is done (managed_params, the
 * params list of fully_shard). Under offload the shards go to the host. */
static void wrap_unit(est_sim *s, fsdp_state *f, int u) {
    fsdp_unit *x = &f->units[u];
    int32_t orig[EST_MOD_MAX_PARAMS * 2];
    const int n = x->count < EST_MOD_MAX_PARAMS * 2 ? x->count : EST_MOD_MAX_PARAMS * 2;
    for (int i = 0; i < n; i++) {
        const fsdp_param *q = &f->params[x->first + i];
        orig[i] = est_sim_alloc(s, f->shard_cat, q->numel * fsdp_param_elem_bytes(s, f, q),
                                est_sim_param(s, q->inst, q->p)->name, 0);
    }
    const int w = fsdp_unit_elem_bytes(s, f, u);
    if (!f->v2) {
        /* NO_SHARD keeps the flat tensor as its FlatParameter (shard(): no
         * _get_shard when not uses_sharded_strategy, _flat_param.py 2.11) */
        int32_t flat = est_sim_alloc(s, f->shard_cat, x->numel * w, "flattened unit", 0);
        int32_t shard = flat;
        if (f->sharded) {
            shard = est_sim_alloc(s, f->shard_cat, x->shard * w, "FlatParameter shard", 0);
            est_sim_release(s, flat);
        }
        if (f->offload) est_sim_release(s, shard); /* to the host */
    } else {
        for (int i = 0; i < n; i++) {
            fsdp_param *q = &f->params[x->first + i];
            q->sharded = est_sim_alloc(s, f->shard_cat, q->shard * fsdp_param_elem_bytes(s, f, q), "sharded parameter", 0);
            if (f->offload) est_sim_release(s, q->sharded);
        }
    }
    for (int i = 0; i < n; i++) est_sim_release(s, orig[i]);
}

static int fsdp_init(est_sim *s) {
    fsdp_state *f = (fsdp_state *)s->fw;
    if (configure(s, f)) return -1;
    int64_t resident = 0;
    if (build_units(s, f, &resident)) {
        s->st->oom = true;
        return ft_errorf(s->err, s->errlen, "out of memory building the step");
    }
    est_step_span(s->st, EST_PHASE_INIT, -1, "model sharded");
    if (resident > 0) est_sim_alloc(s, EST_CAT_PARAMS, resident, "quantization constants", 0);
    /* torchtune's shard_model (training/_distributed.py, v0.6.1) walks
     * named_modules() in reverse: the output first, the embedding last */
    if (f->head_unit >= 0) wrap_unit(s, f, f->head_unit);
    for (int b = 1; b <= s->L; b++) {
        for (int u = (int)s->L + 1; u < f->n_units; u++)
            if (f->units[u].owner == b) wrap_unit(s, f, u);
        wrap_unit(s, f, b);
    }
    if (f->embed_unit >= 0) wrap_unit(s, f, f->embed_unit);
    wrap_unit(s, f, 0);
    /* Modeling buffers, cast to buffer_dtype = param_dtype (accelerate's
     * set_mixed_precision) by the root's lazy init. */
    est_sim_modeling_buffers(s, f->c);
    fsdp_host_bytes(s, f);
    return 0;
}

/* Micro-batches before the last run under no_sync (accelerate's accumulate):
 * their unsharded gradients stay, FSDP1's in the compute dtype
 * (flat_param.grad), FSDP2's in the reduce dtype (to_accumulated_grad_if_needed),
 * and FSDP1's SHARD_GRAD_OP frees no unit in backward (_should_free_in_backward:
 * only when syncing): the last micro-batch starts with all of them gathered. */
static void accumulated(est_sim *s, fsdp_state *f) {
    for (int u = 0; u < f->n_units; u++) {
        fsdp_unit *x = &f->units[u];
        if (!x->trainable) continue;
        if (!f->v2) {
            x->accum = est_sim_alloc(s, EST_CAT_GRADS, x->numel * f->c, "accumulated gradient", 0);
        } else {
            for (int i = x->first; i < x->first + x->count; i++) {
                fsdp_param *q = &f->params[i];
                if (est_sim_param(s, q->inst, q->p)->trainable)
                    q->accum = est_sim_alloc(s, EST_CAT_GRADS, q->numel * f->r, "accumulated gradient", 0);
            }
        }
    }
    if (!f->v2 && f->sharded && !f->reshard_after_forward)
        for (int u = 0; u <= s->L; u++) fsdp1_kept(s, f, u);
}

static void fsdp_module_pre(est_sim *s, int inst, bool backward) {
    fsdp_state *f = (fsdp_state *)s->fw;
    const int u = fsdp_unit_of(s, inst);
    if (!f->v2) fsdp1_observe(s, f);
    if (inst == EST_INST_EMBED && !backward && f->accum) accumulated(s, f);
    if (fsdp2_ends_pre(s, f, inst, backward)) return;
    if (inst == s->L + 1 && !backward) return; /* the root gathered at the embedding */
    if (inst == EST_INST_EMBED && backward) return;  /* the root's pre-backward ran at the head */
    if (f->v2) {
        if (backward) fsdp2_pre_backward(s, f, u);
        else fsdp2_pre_forward(s, f, u);
    } else {
        if (backward) fsdp1_pre_backward(s, f, u);
        else fsdp1_pre_forward(s, f, u);
    }
}

static void fsdp_op_pre(est_sim *s, int inst, int op, bool backward) {
    fsdp2_ends_op_pre(s, (fsdp_state *)s->fw, inst, op, backward);
}

/* The model's outputs stay live through the loss, which the forward computes
 * (seam_util.h est_held_outputs). */
static void fsdp_op_post(est_sim *s, int inst, int op, bool backward) {
    est_hold_outputs(s, &((fsdp_state *)s->fw)->outs, inst, op, backward);
    fsdp2_ends_op_post(s, (fsdp_state *)s->fw, inst, op, backward);
}

static void fsdp_module_post(est_sim *s, int inst, bool backward) {
    fsdp_state *f = (fsdp_state *)s->fw;
    const int u = fsdp_unit_of(s, inst);
    if (!f->v2) fsdp1_clock_unit(s, f, inst, backward);
    if (fsdp2_ends_post(s, f, inst, backward)) {
        if (!backward && !s->recompute && inst == s->L + 1) est_release_outputs(s, &f->outs);
        return;
    }
    if (inst == EST_INST_EMBED && !backward) return; /* the root's forward goes on to the head */
    if (inst == s->L + 1 && backward) return;        /* its gradients wait for the embedding's */
    if (f->v2) {
        if (backward) fsdp2_post_backward(s, f, u);
        else fsdp2_post_forward(s, f, u);
        if (!backward && u == 0) fsdp2_root_post_forward(s, f);
        if (backward && u == 0) fsdp2_backward_done(s, f);
    } else {
        if (backward) fsdp1_block_backward_done(s, f, u);
        else fsdp1_post_forward(s, f, u);
    }
    if (!backward && !s->recompute && inst == s->L + 1) est_release_outputs(s, &f->outs); /* the forward returned */
}

/* A weight's gradient from autograd: kept as the unsharded gradient until its
 * unit reduces (a second one for the same tensor, a tied LM head's, is added
 * into the first). An adapter unit is complete with its one gradient: its
 * post-backward hook runs now (FSDP1's on its AccumulateGrad). */
static void fsdp_grad(est_sim *s, int inst, int p, int32_t grad) {
    fsdp_state *f = (fsdp_state *)s->fw;
    fsdp_param *q = &f->params[f->param_of_slot[est_sim_grad_slot(s, inst, p)]];
    if (q->grad < 0) q->grad = grad;
    else est_sim_release(s, grad);
    const int u = q->unit;
    if (f->units[u].owner == u) return;
    if (f->v2) fsdp2_post_backward(s, f, u);
    else fsdp1_post_backward(s, f, u);
}

/* The optimizer's state for its tensors, made at the first step for every
 * tensor before any update (torch 2.11 optim/adam.py _init_group loops over
 * the group: zeros_like(param) for exp_avg, then exp_avg_sq); then the
 * foreach step's temporaries, one per tensor, all live together
 * (_multi_tensor_adam: exp_avg_sq_sqrt = _foreach_sqrt(device_exp_avg_sqs)),
 * or a single-tensor step's, one tensor at a time. */
static void optimizer_step(est_sim *s, fsdp_state *f) {
    int32_t *tmp = malloc((size_t)(f->n_opt + 1) * sizeof *tmp);
    if (!tmp) {
        s->st->oom = true;
        return;
    }
    for (int i = 0; i < f->n_opt; i++) {
        est_tensor_state ts;
        est_optimizer_tensor_state(s->run, f->opt[i].numel, 0, f->w, &ts);
        if (!f->opt[i].stepped)
            for (int j = 0; j < ts.count; j++) est_sim_alloc(s, EST_CAT_OPTIMIZER, ts.device[j], "optimizer state", 0);
        f->opt[i].stepped = true;
    }
    for (int i = 0; i < f->n_opt; i++) {
        est_tensor_state ts;
        est_optimizer_tensor_state(s->run, f->opt[i].numel, 0, f->w, &ts);
        tmp[i] = -1;
        if (ts.foreach_bytes > 0) tmp[i] = est_sim_alloc(s, EST_CAT_WORKSPACE, ts.foreach_bytes, "foreach temporary", 0);
        else if (ts.single_bytes > 0)
            est_sim_release(s, est_sim_alloc(s, EST_CAT_WORKSPACE, ts.single_bytes, "step", 0));
    }
    for (int i = 0; i < f->n_opt; i++) est_sim_release(s, tmp[i]);
    free(tmp);
}

/* After backward every gradient is reduced into its shard (the units' post-
 * backward hooks ran in backward); the optimizer steps the shards (on the host
 * under offload: torch's AdamW over the CPU shards); the Trainer's zero_grad
 * frees the gradients (set_to_none). */
static int fsdp_finish(est_sim *s) {
    fsdp_state *f = (fsdp_state *)s->fw;
    est_step_span(s->st, EST_PHASE_REDUCE, -1, f->sharded ? "gradients reduce-scattered" : "gradients all-reduced");
    est_work_emit(s->st, s->run, s->k, EST_UNIT_REDUCE, -1);
    est_step_span(s->st, EST_PHASE_OPTIMIZER, -1,
                  f->offload ? "optimizer step on CPU" : est_optimizer_step_label(s->run));
    est_work_emit(s->st, s->run, s->k, EST_UNIT_OPTIMIZER, -1);
    if (!f->offload) optimizer_step(s, f);
    for (int u = 0; u < f->n_units; u++) {
        est_sim_release(s, f->units[u].grad);
        f->units[u].grad = -1;
    }
    /* the loop waits for the device once a step: ftest's probe in its timer's
     * torch.cuda.synchronize(), the HF Trainer in bool() of the loss's
     * isnan / isinf (logging_nan_inf_filter, transformers 5.17 trainer.py),
     * after backward: the frees still queued are the unshard stream's, whose
     * pool the optimizer's tensors do not use either way */
    if (!f->v2) {
        fsdp1_backward_ended(f);
        fsdp1_device_caught_up(s, f);
    }
    if (s->st->oom) return ft_errorf(s->err, s->errlen, "out of memory building the step");
    return 0;
}

static void fsdp_free(fsdp_state *f) {
    free(f->units);
    free(f->params);
    free(f->param_of_slot);
    free(f->opt);
    est_held_free(&f->outs);
}

const est_seam est_seam_fsdp = {
    .name = "fsdp",
    .regime = est_fsdp_regime,
    .init = fsdp_init,
    .module_pre = fsdp_module_pre,
    .module_post = fsdp_module_post,
    .op_pre = fsdp_op_pre,
    .op_post = fsdp_op_post,
    .grad = fsdp_grad,
    .finish = fsdp_finish,
};

static int build(const est_run *run, const est_constants *k, est_step *st, const est_time_detail *times,
                 char *err, size_t errlen) {
    fsdp_state f;
    memset(&f, 0, sizeof f);
    if (times) f.times = *times;
    est_sim s;
    if (est_sim_init(&s, run, k, &est_seam_fsdp, &f, st, err, errlen)) return -1;
    int rc = est_sim_run(&s);
    fsdp_free(&f);
    est_sim_free(&s);
    if (rc == 0 && st->oom) rc = -1;
    return rc < 0 ? (err[0] ? -1 : ft_errorf(err, errlen, "out of memory building the step")) : 0;
}

/* FSDP1's clock (seam_fsdp1.c) needs the units' host and device times, which
 * the time ledger prices from the step's work: a first build gives them (its
 * work does not depend on the clock, only its memory events do), a second the
 * step. FSDP2 has no clock: one build. */
int est_step_fsdp(const est_run *run, const est_constants *k, est_step *st, char *err, size_t errlen) {
    if (run->fsdp_version == EST_FSDP2) return build(run, k, st, NULL, err, errlen);
    if (build(run, k, st, NULL, err, errlen) < 0) return -1;
    est_time_detail times;
    est_time_ledger(run, st, k, &times, NULL);
    est_step_clear(st);
    return build(run, k, st, &times, err, errlen);
}
