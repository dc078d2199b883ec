/* ZeRO-3's frees through record_stream, and how long they stay pending:
 * DeepSpeed 0.14.2 (the same lines in 0.16.4 and 0.19.8).
 *
 * DeepSpeed frees three kinds of tensors while a stream may still be using
 * them, each after Tensor.record_stream:
 *  - a gradient copied into the contiguous bucket on the reduce stream
 *    (stage3.py __add_grad_to_ipg_bucket: param.grad.record_stream(reduce
 *    stream), then param.grad.data = the bucket's view);
 *  - a gradient too large for the bucket, once its bucket was reduced
 *    (partition_grads: grad.record_stream(reduce stream), param.grad = None);
 *  - a gathered parameter released after its submodule, forward or backward
 *    (partition_parameters.py free_param: param.data.record_stream(compute
 *    stream), then param.data = empty), and, with the model built before
 *    DeepSpeed, the gathered weight autograd kept until that backward.
 * PyTorch's caching allocator keeps each such block active until the
 * recorded stream passes the free (CUDACachingAllocator.cpp free ->
 * insert_events; process_events at a later malloc). How far the host runs
 * ahead of those streams is bounded by DeepSpeed's two host-side waits:
 *  - each bucket flush (__reduce_and_partition_ipg_grads) synchronizes the
 *    host with the oldest of its recorded flush events once more than
 *    max_param_reduce_events = 2 are outstanding (stage3.py 0.14.2 lines
 *    1260-1263, 329; 0.19.8 1665-1667, 462), so at flush k the host has waited for flush k-3, and
 *    the reduce stream passed every free made before flush k-3 was queued;
 *  - each wait for an in-flight parameter (fetch_sub_module) first
 *    synchronizes the host with the all-gather stream's event of the wait
 *    three before once more than __max_ongoing_fetch_events = 2 are
 *    outstanding (partitioned_param_coordinator.py 0.14.2 lines 304-314,
 *    128; 0.19.8 402-404, 142); the compute stream waits on that stream
 *    before each submodule (wait_stream, 0.14.2 line 318, 0.19.8 415),
 *    and the simulation takes it to keep pace with the gathers it waits
 *    on, so it too has passed every free made before that wait.
 * Nothing else makes the host wait inside the step. The simulation takes
 * these bounds as the host's lead (it reaches them when the streams are the
 * slower side): a free made after f flushes (reduce stream) or f waits
 * (compute stream) completes at flush, or wait, f + 4; the epilogue's
 * reduce_and_partition_stream.synchronize() (stage3.py 1088) completes the
 * rest. Until it completes the tensor stays in the step (allocated in the
 * timeline, where PyTorch counts it active and not allocated:
 * st->rank_spread_bytes carries what was so held when the step's allocated
 * peak was reached, which a rank whose GPU keeps up does not hold).
 *
 * None of this on a fake process group (collectives return at once) nor in a
 * CPU trace (no streams; est_ds_settings.fake_group), nor with one rank. */
#include <stdlib.h>

#include "seam_deepspeed.h"

/* max_param_reduce_events (stage3.py 0.14.2 line 329, 0.19.8 line 462). */
#define DS_MAX_PARAM_REDUCE_EVENTS 2
/* __max_ongoing_fetch_events (partitioned_param_coordinator.py 0.14.2 line 128, 0.19.8 line 142). */
#define DS_MAX_ONGOING_FETCH_EVENTS 2

bool ds_lag_on(const est_sim *s, const ds_state *d) {
    return s->run->zero_stage == 3 && d->W > 1 && !s->run->ds.fake_group;
}

/* The lag is constant between its changes: a rise of the step's allocated
 * peak since the last change happened while lag_bytes was held. */
static void note_peak(est_sim *s, ds_state *d) {
    if (s->st->peak_allocated_bytes > d->lag_seen_peak) {
        d->lag_seen_peak = s->st->peak_allocated_bytes;
        d->lag_at_peak = d->lag_bytes;
        s->st->rank_spread_bytes = d->lag_at_peak;
    }
}

static void complete(est_sim *s, ds_state *d, int i) {
    note_peak(s, d);
    d->lag_bytes -= est_step_tensor_bytes(s->st, d->lag_id[i]);
    est_sim_release(s, d->lag_id[i]);
}

void ds_lag_release(est_sim *s, ds_state *d, int32_t id, bool compute) {
    if (id < 0) return;
    if (!d->lag) {
        est_sim_release_pending(s, id);
        return;
    }
    note_peak(s, d);
    if (d->n_lag == d->cap_lag) {
        const int cap = d->cap_lag ? 2 * d->cap_lag : 64;
        int32_t *ids = realloc(d->lag_id, (size_t)cap * sizeof *ids);
        if (ids) d->lag_id = ids;
        int64_t *at = ids ? realloc(d->lag_at, (size_t)cap * sizeof *at) : NULL;
        if (at) d->lag_at = at;
        bool *cs = at ? realloc(d->lag_compute, (size_t)cap * sizeof *cs) : NULL;
        if (cs) d->lag_compute = cs;
        if (!ids || !at || !cs) {
            s->st->oom = true;
            est_sim_release_pending(s, id);
            return;
        }
        d->cap_lag = cap;
    }
    d->lag_id[d->n_lag] = id;
    d->lag_compute[d->n_lag] = compute;
    d->lag_at[d->n_lag++] = compute ? d->waits : d->flushes;
    d->lag_bytes += est_step_tensor_bytes(s->st, id);
}

/* The host waits for the event `events` before the one it is about to
 * record: the frees of that stream made before it have passed. */
static void throttle(est_sim *s, ds_state *d, bool compute, int64_t count, int events) {
    const int64_t passed = count - (events + 1);
    int kept = 0;
    for (int i = 0; i < d->n_lag; i++) {
        if (d->lag_compute[i] == compute && d->lag_at[i] <= passed) {
            complete(s, d, i);
        } else {
            d->lag_id[kept] = d->lag_id[i];
            d->lag_compute[kept] = d->lag_compute[i];
            d->lag_at[kept++] = d->lag_at[i];
        }
    }
    d->n_lag = kept;
}

/* A flush begins: the host waits for the event of flush k-3 (k = flushes + 1). */
void ds_lag_flush(est_sim *s, ds_state *d) {
    if (d->lag) throttle(s, d, false, d->flushes, DS_MAX_PARAM_REDUCE_EVENTS);
}

/* An in-flight parameter is waited for: the host first waits for the
 * all-gather stream's event of the wait 3 before (fetch_sub_module:
 * __ongoing_fetch_events.popleft().synchronize() once more than
 * __max_ongoing_fetch_events = 2 are outstanding; partitioned_param_coordinator.py
 * 0.14.2 lines 304-314); the compute stream waits on that stream before each
 * submodule (wait_stream, line 318), so its frees made before that wait have
 * passed too when the compute keeps pace with the gathers it waits on. */
void ds_lag_wait(est_sim *s, ds_state *d) {
    if (!d->lag) return;
    throttle(s, d, true, d->waits, DS_MAX_ONGOING_FETCH_EVENTS);
    d->waits++;
}

/* The epilogue's reduce_and_partition_stream.synchronize(): every free made so far has passed. */
void ds_lag_drain(est_sim *s, ds_state *d) {
    note_peak(s, d);
    for (int i = 0; i < d->n_lag; i++) complete(s, d, i);
    d->n_lag = 0;
    d->flushes = d->waits = 0;
}

/* The step is over: a peak reached since the last change held that lag. */
void ds_lag_end(est_sim *s, ds_state *d) {
    if (d->lag) note_peak(s, d);
}

void ds_lag_free(ds_state *d) {
    free(d->lag_id);
    free(d->lag_at);
    free(d->lag_compute);
    d->lag_id = NULL;
    d->lag_at = NULL;
    d->lag_compute = NULL;
    d->n_lag = d->cap_lag = 0;
}
