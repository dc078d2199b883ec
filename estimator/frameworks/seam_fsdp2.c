/* FSDP2 (fully_shard, torch 2.4-2.6; the traces of torch 2.15 agree) hook by
 * hook for one parameter group u (seam_fsdp.h). Sources (torch 2.6
 * torch/distributed/fsdp/_fully_shard/; _composable/fsdp/ in 2.4-2.5):
 * _fsdp_param_group.py (unshard, wait_for_unshard, reshard, pre_forward,
 * post_forward, pre_backward, post_backward, _backward_prefetch),
 * _fsdp_collectives.py (foreach_all_gather, _get_param_all_gather_inputs,
 * foreach_all_gather_copy_out, foreach_reduce), _fsdp_param.py
 * (alloc_all_gather_outputs, free_unsharded_param) and _fsdp_state.py
 * (_lazy_init, _post_forward, _root_post_backward_final_callback).
 *  - Unshard: on the all-gather copy-in stream, under mixed precision the
 *    shards are cast into one flat input (shard x c, foreach copy), then one
 *    flat all-gather output (padded x c) is allocated and the input dropped.
 *  - Wait: each parameter's unsharded tensor (its padded rows x cols x c) is
 *    allocated on the compute stream and filled from the flat output (copy-out).
 *    In forward the flat output is kept until the next unit's copy-out (or the
 *    root's post-forward) so that the copy-out overlaps the next all-gather;
 *    in backward it is freed at once.
 *  - Reshard: the unsharded tensors are freed (resize_(0)). After forward every
 *    group but the root reshards when reshard_after_forward (torch 2.4-2.6
 *    _lazy_init sets the root's post_forward_mesh_info = None); in backward
 *    every group reshards in its post-backward.
 *  - Prefetch: a group's pre-backward gathers the group before it in the
 *    post-forward order (the root's: the last block).
 *  - Reduce: foreach_reduce copies the group's unsharded gradients (c, one per
 *    parameter, autograd's AccumulateGrad on the unsharded parameters) into one
 *    reduce-scatter input (padded x r, compute stream), frees them, reduce-
 *    scatters into a new output (shard x r) on the reduce-scatter stream and
 *    casts it to the shard's dtype w (the sharded gradients, views of it). The
 *    input is kept until the next group's reduction (reduce_scatter_state), the
 *    last one until the end of backward.
 *  - One rank (stack.h fsdp2_one_rank_skips_gather: torch 2.15
 *    _fsdp_param_group.py, unshard and wait_for_unshard under
 *    "world_size == 1", from torch 2.9; 2.6 gathers as above): no all-gather and no
 *    flat buffers. unshard records an empty AllGatherResult; wait_for_unshard
 *    fills each parameter's unsharded tensor (all_gather_outputs[0], numel x c)
 *    straight from its all-gather input, parameter by parameter, and keeps
 *    nothing for the next copy-out (the deferred all_gather_state needs
 *    world_size > 1). The reduction is unchanged (foreach_reduce copies the
 *    reduce-scatter input into its output instead of reduce-scattering). */
#include "fp8.h"
#include "profiles.h"
#include "seam_fsdp.h"
#include "seam_util.h"

/* Bytes per element of parameter q as gathered: the compute dtype, or 1 for a
 * Float8Linear weight under --fsdp-float8-all-gather (torchao fsdp_utils.py
 * WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather casts the shard to
 * fp8 with the precomputed scale; fsdp_post_all_gather wraps the gathered
 * bytes as a Float8TrainingTensor). */
static int64_t gathered_bytes(const est_sim *s, const fsdp_state *f, const fsdp_param *q) {
    const est_mparam *pp = est_sim_param(s, q->inst, q->p);
    if (pp->kind == EST_PK_LINEAR_WEIGHT && est_fp8_gathers_weight(s->run, pp->rows, pp->cols)) return 1;
    return f->c;
}

/* One rank's shard of unit u as the all-gather sends it (elements x bytes). */
static int64_t shard_gather_bytes(const est_sim *s, const fsdp_state *f, const fsdp_unit *x) {
    int64_t n = 0;
    for (int i = x->first; i < x->first + x->count; i++) n += f->params[i].shard * gathered_bytes(s, f, &f->params[i]);
    return n;
}

/* A mesh of one rank on a torch that skips its all-gather. */
static bool alone(const est_sim *s, const fsdp_state *f) {
    return f->W == 1 && s->run->stack->fsdp2_one_rank_skips_gather;
}

static void unshard(est_sim *s, fsdp_state *f, int u) {
    fsdp_unit *x = &f->units[u];
    if (x->gathered || x->ag >= 0 || alone(s, f)) return;
    const int S = FSDP_STREAM_UNSHARD;
    /* under offload the shards are copied to the device first (all_gather_inputs:
     * sharded_param_data.to(device)); that copy is the input without mixed precision */
    int32_t staged =
        f->offload ? est_sim_alloc(s, EST_CAT_COMM, x->shard * fsdp_unit_elem_bytes(s, f, u), "shard on the device", S)
                   : -1;
    const int64_t send = shard_gather_bytes(s, f, x);
    int32_t in = f->mixed || send != x->shard * f->c ? est_sim_alloc(s, EST_CAT_COMM, send, "all-gather input", S)
                                                      : staged;
    if (in != staged) est_sim_release(s, staged);
    x->ag = est_sim_alloc(s, EST_CAT_COMM, send * f->W, "all-gather output", S);
    est_sim_release(s, in);
}

/* One rank: each parameter's all-gather input (_fsdp_param.py
 * all_gather_inputs) is its sharded data itself, or a new tensor: the shard
 * copied to the device under offload (.to(device)), cast to param_dtype under
 * mixed precision (_to_dtype_if_needed; the device copy dies with the cast),
 * or torchao's fp8 cast. The loop variable holds it until the next
 * parameter's input exists; the last dies when the wait returns. */
static void copy_in_alone(est_sim *s, fsdp_state *f, int u) {
    fsdp_unit *x = &f->units[u];
    int32_t held = -1;
    for (int i = x->first; i < x->first + x->count; i++) {
        fsdp_param *q = &f->params[i];
        const int64_t have = fsdp_param_elem_bytes(s, f, q), want = gathered_bytes(s, f, q);
        int32_t in = f->offload ? est_sim_alloc(s, EST_CAT_COMM, q->shard * have, "shard on the device", 0) : -1;
        if (want != have) {
            const int32_t cast = est_sim_alloc(s, EST_CAT_COMM, q->shard * want, "all-gather input", 0);
            est_sim_release(s, in);
            in = cast;
        }
        est_sim_release(s, held);
        held = in;
        q->unsharded = est_sim_alloc(s, EST_CAT_COMM, q->shard * want, est_sim_param(s, q->inst, q->p)->name, 0);
    }
    est_sim_release(s, held);
    x->gathered = true;
}

static void wait_for_unshard(est_sim *s, fsdp_state *f, int u, bool forward) {
    fsdp_unit *x = &f->units[u];
    if (alone(s, f) && !x->gathered) copy_in_alone(s, f, u);
    if (x->ag < 0) return;
    if (forward && f->ag_state >= 0) {
        est_sim_release(s, f->ag_state);
        f->ag_state = -1;
    }
    for (int i = x->first; i < x->first + x->count; i++) {
        fsdp_param *q = &f->params[i];
        q->unsharded = est_sim_alloc(s, EST_CAT_COMM, q->shard * f->W * gathered_bytes(s, f, q),
                                     est_sim_param(s, q->inst, q->p)->name, 0);
    }
    x->gathered = true;
    if (forward) f->ag_state = x->ag;
    else est_sim_release(s, x->ag);
    x->ag = -1;
}

static void reshard(est_sim *s, fsdp_state *f, int u) {
    fsdp_unit *x = &f->units[u];
    if (!x->gathered) return;
    for (int i = x->first; i < x->first + x->count; i++) {
        est_sim_release(s, f->params[i].unsharded);
        f->params[i].unsharded = -1;
    }
    x->gathered = false;
}

/* A block and its adapter groups (gathered by their own hooks inside the
 * block: here with the block's). */
static void gather(est_sim *s, fsdp_state *f, int u, bool forward) {
    unshard(s, f, u);
    wait_for_unshard(s, f, u, forward);
    for (int a = (int)s->L + 1; a < f->n_units && u > 0; a++)
        if (f->units[a].owner == u) {
            unshard(s, f, a);
            wait_for_unshard(s, f, a, forward);
        }
}

/* The unit gathered before u in the post-forward order (_backward_prefetch):
 * with the ends as units (seam_fsdp_ends.c) the head's is the last block, the
 * first block's the embedding's; the head's calls prefetch the head itself (its
 * previous call) until the last, which prefetches the last block
 * (seam_fsdp_ends.c). */
static int prefetch_target(const est_sim *s, const fsdp_state *f, int u) {
    if (f->head_unit >= 0 && u == f->head_unit) return -1; /* seam_fsdp_ends.c: at the last call */
    if (f->embed_unit >= 0 && u == 1) return f->embed_unit;
    return fsdp_next_backward(s, u);
}

void fsdp2_pre_backward(est_sim *s, fsdp_state *f, int u) {
    gather(s, f, u, false);
    const int prev = prefetch_target(s, f, u);
    if (prev >= 0) unshard(s, f, prev);
}

/* A checkpointed block's recompute runs on what its pre-backward gathered
 * (_fsdp_state.py _pre_forward: "the pre-backward hook is responsible for the
 * unshard"), which here comes first. */
void fsdp2_pre_forward(est_sim *s, fsdp_state *f, int u) {
    if (s->recompute) {
        fsdp2_pre_backward(s, f, u);
        return;
    }
    gather(s, f, u, true);
}

void fsdp2_prefetch(est_sim *s, fsdp_state *f, int u) { unshard(s, f, u); }

void fsdp2_post_forward(est_sim *s, fsdp_state *f, int u) {
    if (s->recompute || u == 0 || !f->reshard_after_forward) return;
    reshard(s, f, u);
    for (int a = (int)s->L + 1; a < f->n_units; a++)
        if (f->units[a].owner == u) reshard(s, f, a);
}

void fsdp2_root_post_forward(est_sim *s, fsdp_state *f) {
    est_sim_release(s, f->ag_state);
    f->ag_state = -1;
}

/* The group's gradients in the reduce dtype: autograd's, or (no_sync) the
 * accumulated ones with this micro-batch's added in. */
static int64_t grads_to_reduce(est_sim *s, fsdp_state *f, int u, int32_t *g, int cap, int64_t *shard) {
    fsdp_unit *x = &f->units[u];
    int n = 0;
    *shard = 0;
    for (int i = x->first; i < x->first + x->count && n < cap; i++) {
        fsdp_param *q = &f->params[i];
        if (q->accum >= 0) {
            est_sim_release(s, q->grad); /* accumulate_unsharded_grad_if_needed: added in */
            q->grad = q->accum;
            q->accum = -1;
        }
        if (q->grad >= 0) {
            g[n++] = q->grad;
            *shard += q->shard;
        }
        q->grad = -1;
    }
    return n;
}

void fsdp2_post_backward(est_sim *s, fsdp_state *f, int u) {
    fsdp_unit *x = &f->units[u];
    int32_t g[EST_MOD_MAX_PARAMS * 2];
    int64_t shard; /* of the parameters with gradients: a frozen one has none */
    const int64_t n = grads_to_reduce(s, f, u, g, EST_MOD_MAX_PARAMS * 2, &shard);
    reshard(s, f, u);
    if (n == 0) return;
    est_sim_release(s, f->rs_state); /* the previous reduce-scatter's input */
    const int64_t padded = f->sharded ? shard * f->W : shard;
    const int32_t in = est_sim_alloc(s, EST_CAT_GRADS, padded * f->r, "reduce-scatter input", 0);
    for (int64_t i = 0; i < n; i++) est_sim_release(s, g[i]);
    const int32_t out = est_sim_alloc(s, EST_CAT_GRADS, shard * f->r, "reduce-scatter output", FSDP_STREAM_REDUCE);
    const int32_t had = x->grad; /* a unit called more than once (seam_fsdp_ends.c): reduced before */
    if (f->r != f->w) {
        x->grad = est_sim_alloc(s, EST_CAT_GRADS, shard * f->w, "sharded gradient", FSDP_STREAM_REDUCE);
        est_sim_release(s, out);
    } else {
        x->grad = out;
    }
    if (had >= 0) { /* foreach_reduce: added into the sharded gradient (to_accumulate_grad) */
        est_sim_release(s, x->grad);
        x->grad = had;
    }
    if (f->offload) { /* copied to the host gradient (non_blocking D2H) */
        est_sim_release(s, x->grad);
        x->grad = -1;
    }
    f->rs_state = in;
}

void fsdp2_backward_done(est_sim *s, fsdp_state *f) {
    est_sim_release(s, f->rs_state);
    f->rs_state = -1;
}
