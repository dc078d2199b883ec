/* FSDP1 (FullyShardedDataParallel, torch 2.2-2.6; the traces of torch 2.15
 * agree) hook by hook, for one unit u (seam_fsdp.h). Sources:
 * torch/distributed/fsdp/_runtime_utils.py (_unshard, _reshard,
 * _pre_forward_unshard, _post_forward_reshard, _pre_backward_hook,
 * _post_backward_hook, _reduce_grad, _reduce_grad_no_shard,
 * _get_reduce_scatter_tensors, _cast_grad_to_param_dtype, _prefetch_handle)
 * and _flat_param.py (pre_unshard, _use_low_precision_shard, unshard,
 * _alloc_padded_unsharded_flat_param, post_unshard, reshard, post_reshard,
 * _free_unsharded_flat_param). Notation as seam_fsdp.h: U elements of the
 * unit, `shard` one rank's, `padded` = shard x W; c, r, w the compute, reduce
 * and shard dtypes' bytes.
 *  - Unshard: under mixed precision the shard is cast into `_mp_shard`
 *    (shard x c, the pre-unshard stream), all-gathered into the padded
 *    unsharded FlatParameter (padded x c, the unshard stream), and `_mp_shard`
 *    freed through record_stream. NO_SHARD's `_mp_shard` (U x c) is the
 *    unsharded parameter itself; without mixed precision NO_SHARD computes on
 *    the FlatParameter. Under CPU offload the shard is first copied to the
 *    device (flat_param_to / _local_shard.to(device)).
 *  - Reshard: `_free_unsharded_flat_param` frees it through record_stream on
 *    the compute stream, and the rate limiter (limit_all_gathers, on by
 *    default) queues a free event: the block is reusable once the device has
 *    passed the free by the host's clock ("The host and the device" below),
 *    not at the module's end;
 *    NO_SHARD's post_reshard frees `_mp_shard`. After forward every unit but
 *    the root reshards under FULL_SHARD (RESHARD_AFTER_FORWARD_HANDLE_STRATEGIES,
 *    `not state._is_root`); SHARD_GRAD_OP keeps it to its backward; every
 *    sharded unit reshards in its post-backward hook when gradients sync.
 *  - Prefetch: backward_prefetch BACKWARD_PRE gathers the unit before this
 *    one in the post-forward order at this unit's pre-backward, BACKWARD_POST
 *    at its post-backward after the reshard; forward_prefetch the next unit in
 *    the pre-forward order at this one's pre-forward, from the second
 *    iteration (the order is recorded in the first).
 *  - Gradients: the views' gradients meet in the split's backward (torch.cat:
 *    the unsharded flat gradient, U x c); the post-backward hook casts it to r
 *    (grad.to(reduce_dtype)), pads it to W x shard (F.pad), reduce-scatters
 *    into a new shard x r tensor, casts that to w (the sharded gradient kept
 *    until the step) and lets the rest go; autograd's flat gradient is freed
 *    through record_stream on the post-backward stream (torch 2.11
 *    _runtime_utils.py _post_backward_hook, lines 754-775), reusable by the
 *    same clock. NO_SHARD all-reduces in place and casts to w; its flat
 *    gradient is a block of the unshard stream's pool (flat_grad). */
#include "profiles.h"
#include "seam_fsdp.h"

static int32_t comm(est_sim *s, int64_t bytes, const char *name, int stream) {
    return est_sim_alloc(s, EST_CAT_COMM, bytes, name, stream);
}

/* FSDP1's rate limiter (limit_all_gathers: True in FullyShardedDataParallel's
 * signature, torch 2.2-2.11, and in accelerate's FullyShardedDataParallelPlugin,
 * 0.29-1.15). _reshard (_runtime_utils.py) frees the unsharded FlatParameter
 * through record_stream on the compute stream (_flat_param.py
 * _free_unsharded_flat_param), then records a free event on that stream and
 * enqueues it on the root's queue, shared by every unit (_FreeEventQueue,
 * _limiter_utils.py; _runtime_utils.py _share_state_and_init_handle_attrs);
 * _unshard, before it allocates, makes the host wait for the oldest event once
 * two are queued (dequeue_if_needed, _max_num_inflight_all_gathers = 2:
 * event.synchronize()).
 *
 * The host and the device. A block freed through record_stream returns to its
 * pool only once the allocator sees the event it recorded at the free complete
 * (CUDACachingAllocator.cpp free -> insert_events; process_events, at the start
 * of each malloc, torch 2.2-2.11), so what a later allocation can reuse depends
 * on how far the device lags the host there. Here the two are clocked unit by
 * unit with the time ledger's own figures (timing.c est_pipeline_unit_s: the
 * host issues each unit in its host time, the device runs it in its device time
 * once issued): a free's event passes at the device's time at the free, and the
 * allocator sees it at the first allocation the host makes after that time.
 * The limiter's wait sets the host's time to its event's. A unit whose device
 * time exceeds its host time (a block at seq 2048 on an H200: 3.3 ms of device
 * time to 2.0 ms of host time in backward) leaves the frees of the unit before
 * it pending when its own gradient is allocated; a host-bound one (seq 1024:
 * 1.8 ms to 2.0 ms) does not. Each free waits on a virtual stream of its own
 * (events.h EST_STREAM_VIRTUAL, 32 used in turn; one still pending 32 frees
 * later is taken as passed). The retry path of an allocation that does not fit
 * synchronizes every stream (synchronize_and_free_events), virtual ones
 * included. Without the time ledger's figures (a device without peak figures)
 * the device is taken to lag without bound: only the limiter's waits and the
 * end of the step pass the frees. */
static int take_virtual(est_sim *s, fsdp_state *f) {
    const int k = (int)(f->virtual_next++ % EST_STREAM_VIRTUAL_COUNT);
    if (f->virtual_pending[k]) est_step_sync_stream(s->st, EST_STREAM_VIRTUAL + k);
    f->virtual_pending[k] = true;
    f->virtual_done_s[k] = f->device_s;
    return EST_STREAM_VIRTUAL + k;
}

void fsdp1_observe(est_sim *s, fsdp_state *f) {
    for (int k = 0; k < EST_STREAM_VIRTUAL_COUNT; k++)
        if (f->virtual_pending[k] && f->virtual_done_s[k] <= f->host_s) {
            est_step_sync_stream(s->st, EST_STREAM_VIRTUAL + k);
            f->virtual_pending[k] = false;
        }
}

/* A tensor freed through record_stream: its block waits for the device's time now. */
static void free_on_device_time(est_sim *s, fsdp_state *f, int32_t id) {
    if (id >= 0) est_sim_release_on(s, id, take_virtual(s, f));
}

static void limiter_free(est_sim *s, fsdp_state *f, int32_t full) {
    f->event_s[f->freed++ % EST_STREAM_VIRTUAL_COUNT] = f->device_s;
    free_on_device_time(s, f, full);
}

static void limiter_wait(est_sim *s, fsdp_state *f) {
    if (f->freed - f->waited < 2) return;
    const double event_s = f->event_s[f->waited++ % EST_STREAM_VIRTUAL_COUNT];
    if (f->host_s < event_s) f->host_s = event_s;
    fsdp1_observe(s, f);
}

void fsdp1_device_caught_up(est_sim *s, fsdp_state *f) {
    if (f->host_s < f->device_s) f->host_s = f->device_s;
    f->device_s = f->host_s;
    for (int k = 0; k < EST_STREAM_VIRTUAL_COUNT; k++) f->virtual_done_s[k] = 0;
    fsdp1_observe(s, f);
}

/* The time ledger's part for the unit of module `inst` (the head's backward is
 * the loss's and the head's); without figures the device-bound case. */
static void clock_part(fsdp_state *f, const est_time_part *p) {
    static const est_time_part device_bound = {.gpu_s = 1, .kernels = 1};
    f->device_s = est_pipeline_unit_s(&f->host_s, f->device_s, f->times.modelled ? p : &device_bound);
}

void fsdp1_clock_unit(est_sim *s, fsdp_state *f, int inst, bool backward) {
    const est_time_detail *t = &f->times;
    if (s->recompute) return; /* the block's backward unit holds its recompute */
    if (inst == EST_INST_EMBED) clock_part(f, backward ? &t->embed_bwd : &t->embed_fwd);
    else if (inst == s->L + 1 && !backward) clock_part(f, &t->head_fwd);
    else if (inst == s->L + 1) {
        clock_part(f, &t->loss_bwd);
        clock_part(f, &t->head_bwd);
    } else clock_part(f, backward ? &t->block_bwd : &t->block_fwd);
    fsdp1_observe(s, f);
}

/* torch's _unshard for unit u. Already gathered (the root, or a unit kept
 * from forward), it allocates nothing, but the limiter's wait runs all the same. */
void fsdp1_unshard(est_sim *s, fsdp_state *f, int u) {
    fsdp_unit *x = &f->units[u];
    if (x->gathered) {
        if (f->sharded) limiter_wait(s, f);
        return;
    }
    x->gathered = true;
    if (!f->sharded && !f->mixed) return; /* NO_SHARD in one dtype: the FlatParameter itself */
    /* under offload the shard is copied to the device in its own dtype
     * (pre_unshard: flat_param_to(device), or into _mp_shard) */
    int32_t staged = f->offload ? comm(s, x->shard * fsdp_unit_elem_bytes(s, f, u), "shard on the device",
                                       FSDP_STREAM_PRE)
                                : -1;
    if (!f->sharded) { /* NO_SHARD: _mp_shard is the unsharded parameter */
        x->full = comm(s, x->numel * f->c, "low-precision unit", FSDP_STREAM_PRE);
        /* _use_low_precision_shard copies `_local_shard.to(device)` into
         * _mp_shard and drops the copy (_flat_param.py, torch 2.2-2.11), as
         * the sharded branch below does */
        est_sim_release(s, staged);
        return;
    }
    /* _uses_param_mixed_precision is per FlatParameter: the frozen base of a
     * LoRA run, stored in the compute dtype (bf16, or QLoRA's bf16
     * quant_storage), is gathered from its shard without a _mp_shard */
    int32_t mp = -1;
    if (fsdp_unit_elem_bytes(s, f, u) != f->c) {
        mp = comm(s, x->shard * f->c, "low-precision shard", FSDP_STREAM_PRE);
        est_sim_release(s, staged); /* the .to(device) copy went into _mp_shard */
        staged = -1;
    }
    limiter_wait(s, f); /* _unshard: after pre_unshard, before unshard() allocates */
    x->full = comm(s, x->padded * f->c, "unsharded FlatParameter", FSDP_STREAM_UNSHARD);
    est_sim_release_pending(s, mp); /* post_unshard: record_stream on the unshard stream */
    /* Offloaded without a cast, the shard copied to the device was the
     * FlatParameter's data only until the gather: _all_gather_flat_param hands
     * it to the unshard stream (record_stream) and _use_unsharded_flat_param
     * points the data at the gathered tensor, so nothing holds it after the
     * all-gather (torch 2.11 _flat_param.py lines 1383-1384, 1483-1490). */
    est_sim_release_pending(s, staged);
    x->staged = -1;
}

void fsdp1_kept(est_sim *s, fsdp_state *f, int u) {
    fsdp_unit *x = &f->units[u];
    if (x->gathered) return;
    x->gathered = true;
    const int64_t gathered_bytes = x->padded * f->c;
    x->full = comm(s, gathered_bytes, "unsharded FlatParameter", FSDP_STREAM_UNSHARD);
}

/* A block and its adapters (each its own unit, gathered by their own hooks
 * inside the block's forward: here with the block's), by their own hooks
 * (_pre_forward_unshard, _pre_backward_hook: _unshard unless prefetched) or
 * by a prefetch (_prefetch_handle: _unshard, then _prefetched = True). */
static void unshard_unit(est_sim *s, fsdp_state *f, int u, bool prefetch) {
    fsdp_unit *x = &f->units[u];
    if (x->prefetched) return;
    fsdp1_unshard(s, f, u);
    x->prefetched = prefetch;
}

static void gather_as(est_sim *s, fsdp_state *f, int u, bool prefetch) {
    if (u < 0) return;
    unshard_unit(s, f, u, prefetch);
    for (int a = (int)s->L + 1; a < f->n_units && u > 0; a++)
        if (f->units[a].owner == u) unshard_unit(s, f, a, prefetch);
}

static void gather(est_sim *s, fsdp_state *f, int u) { gather_as(s, f, u, false); }

void fsdp1_backward_ended(fsdp_state *f) {
    for (int u = 0; u < f->n_units; u++) f->units[u].prefetched = false; /* _post_backward_final_callback */
}

static void reshard(est_sim *s, fsdp_state *f, int u, bool free_unsharded) {
    fsdp_unit *x = &f->units[u];
    x->prefetched = false; /* _reshard, freed or not */
    if (!x->gathered) return;
    if (f->sharded && !free_unsharded) return;
    if (!f->sharded && !f->mixed) return; /* NO_SHARD in one dtype: nothing to free */
    if (f->sharded) limiter_free(s, f, x->full); /* NO_SHARD frees _mp_shard: no event queued */
    else est_sim_release_pending(s, x->full);
    est_sim_release_pending(s, x->staged);
    x->full = x->staged = -1;
    x->gathered = false;
}

void fsdp1_pre_forward(est_sim *s, fsdp_state *f, int u) {
    if (s->recompute) { /* the recompute runs on what the pre-backward gathered */
        fsdp1_pre_backward(s, f, u);
        return;
    }
    gather(s, f, u);
    if (!s->run->fsdp_forward_prefetch || s->first_step || s->recompute) return;
    const int next = fsdp_next_forward(s, u);
    if (next >= 0) gather_as(s, f, next, true);
}

void fsdp1_post_forward(est_sim *s, fsdp_state *f, int u) {
    if (s->recompute) return;
    f->units[u].needs_pre_backward = true; /* _register_pre_backward_hooks */
    const bool free_unsharded = u != 0 && f->reshard_after_forward;
    reshard(s, f, u, free_unsharded);
    for (int a = (int)s->L + 1; a < f->n_units && u > 0; a++)
        if (f->units[a].owner == u) reshard(s, f, a, free_unsharded);
}

/* _get_handle_to_prefetch: the unit before u in the post-forward order, if its
 * pre-backward is still to come and it is not gathered already. */
static void prefetch_backward(est_sim *s, fsdp_state *f, int u) {
    const int prev = fsdp_next_backward(s, u);
    if (prev >= 0 && f->units[prev].needs_pre_backward) gather_as(s, f, prev, true);
}

void fsdp1_pre_backward(est_sim *s, fsdp_state *f, int u) {
    gather(s, f, u);
    f->units[u].needs_pre_backward = false;
    if (s->run->fsdp_backward_prefetch == EST_FSDP_PREFETCH_PRE) prefetch_backward(s, f, u);
}

/* The unit's unsharded gradients leave autograd: FSDP1 concatenates them into
 * the flat gradient (returned; -1 without gradients; FSDP2 hands them over one
 * by one, seam_fsdp2.c). With accumulation they add into what earlier
 * micro-batches left. */
static int32_t flat_grad(est_sim *s, fsdp_state *f, int u) {
    fsdp_unit *x = &f->units[u];
    if (!x->trainable) return -1;
    /* the views' gradients meet in the split's backward: torch.cat. The split
     * ran in the forward inside _unshard's `with stream(unshard_stream)`
     * (_runtime_utils.py _unshard -> handle.unshard() -> _use_unsharded_views,
     * @torch.enable_grad(), torch 2.11), and autograd runs a node's backward on
     * its forward's stream: the cat, and so the flat gradient's block, come from
     * the unshard stream's pool, which the compute stream's tensors never reuse.
     * Applied to NO_SHARD (one rank) only: the sharded strategies' frees of it
     * are timed by the clock below, built on the compute stream's pool, and
     * moving them as well moves the 8-rank records (docs/validation.md, "FSDP
     * on one GPU: the flat gradient's stream").
     * Not modelled either: each weight gradient reaches its view's backward
     * (unshard stream) from the compute stream, and autograd records it there
     * (torch 2.11 InputBuffer::add, first producer, case A:
     * record_stream_any_impl(var, consumer stream)), so its block waits for the
     * unshard stream's event after the cat. Timed by the clock below it makes
     * both H200 FSDP groups worse (docs/validation.md, "FSDP1: the streams of
     * the flat gradient's cat"); tests/fsdp.c replays it by hand. */
    const int stream = f->sharded ? 0 : FSDP_STREAM_UNSHARD;
    int32_t flat = est_sim_alloc(s, EST_CAT_GRADS, x->numel * f->c, "unsharded flat gradient", stream);
    for (int i = x->first; i < x->first + x->count; i++) {
        est_sim_release(s, f->params[i].grad);
        f->params[i].grad = -1;
    }
    if (x->accum < 0) return flat;
    est_sim_release(s, flat); /* added into the accumulated gradient */
    flat = x->accum;
    x->accum = -1;
    return flat;
}

/* The sharded strategies' reduction of the flat gradient `flat` (U x c). */
static void reduce_scatter(est_sim *s, fsdp_state *f, int u, int32_t flat) {
    fsdp_unit *x = &f->units[u];
    const int R = FSDP_STREAM_REDUCE;
    int32_t cast = f->r != f->c ? est_sim_alloc(s, EST_CAT_GRADS, x->numel * f->r, "gradient in reduce dtype", R) : -1;
    int32_t pad = x->padded != x->numel ? est_sim_alloc(s, EST_CAT_GRADS, x->padded * f->r, "padded gradient", R) : -1;
    int32_t out = est_sim_alloc(s, EST_CAT_GRADS, x->shard * f->r, "reduce-scatter output", R);
    if (f->r != f->w) {
        x->grad = est_sim_alloc(s, EST_CAT_GRADS, x->shard * f->w, "sharded gradient", R);
        est_sim_release(s, out);
    } else {
        x->grad = out;
    }
    est_sim_release(s, pad);
    est_sim_release(s, cast);
    /* autograd's flat gradient: record_stream on the post-backward stream, whose
     * work follows the compute stream's to here */
    free_on_device_time(s, f, flat);
}

/* NO_SHARD: the flat gradient all-reduced in place (after its cast to r), then
 * cast to w; in one dtype it is the result. */
static void all_reduce(est_sim *s, fsdp_state *f, int u, int32_t flat) {
    fsdp_unit *x = &f->units[u];
    const int R = FSDP_STREAM_REDUCE;
    int32_t g = f->r != f->c ? est_sim_alloc(s, EST_CAT_GRADS, x->numel * f->r, "gradient in reduce dtype", R) : flat;
    if (f->r != f->w) {
        x->grad = est_sim_alloc(s, EST_CAT_GRADS, x->numel * f->w, "gradient", R);
        if (g != flat) est_sim_release(s, g);
    } else {
        x->grad = g;
    }
    if (x->grad != flat) est_sim_release_pending(s, flat);
}

void fsdp1_post_backward(est_sim *s, fsdp_state *f, int u) {
    const int32_t flat = flat_grad(s, f, u);
    reshard(s, f, u, true);
    if (s->run->fsdp_backward_prefetch == EST_FSDP_PREFETCH_POST && f->units[u].owner == u)
        prefetch_backward(s, f, u);
    if (flat < 0) return;
    if (f->sharded) reduce_scatter(s, f, u, flat);
    else all_reduce(s, f, u, flat);
    if (f->offload) { /* _offload_grad: copied into the host gradient */
        est_sim_release(s, f->units[u].grad);
        f->units[u].grad = -1;
    }
}

void fsdp1_block_backward_done(est_sim *s, fsdp_state *f, int u) {
    const bool deferring = s->run->fsdp_forward_prefetch && !s->first_step;
    if (f->deferred >= 0) {
        fsdp1_post_backward(s, f, f->deferred);
        f->deferred = -1;
    }
    if (deferring && u != 0) f->deferred = u;
    else fsdp1_post_backward(s, f, u);
}
