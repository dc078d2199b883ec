/* ZeRO-3's parameter coordinator, DeepSpeed 0.14.2 (and 0.16.4, the same
 * lines): runtime/zero/partitioned_param_coordinator.py fetch_sub_module,
 * release_sub_module and __params_to_release; partition_parameters.py
 * all_gather_coalesced and AllGatherCoalescedHandle.wait.
 *  - Hooks on every submodule fetch its parameters before its forward and its
 *    backward: one all-gather call for those not available.
 *  - The first step records the trace: no prefetch, and each submodule's
 *    parameters are released after it (release_sub_module without a
 *    complete trace).
 *  - Then, with the trace of a first step complete, it pops the module's own
 *    parameters off the trace queue and prefetches the next ones (a second
 *    call) until min(stage3_max_live_parameters - available,
 *    stage3_prefetch_bucket_size) elements are in flight.
 *  - A call for one parameter allocates its buffer (numel rounded up to a
 *    multiple of the ranks) and makes param.data a view of it. A call for
 *    several allocates one flat buffer for all of them on the all-gather
 *    stream; when the first of them is waited on, each parameter becomes a
 *    torch.cat of its pieces (a tensor of its own, on the all-gather stream)
 *    and the flat buffer goes with the handle once the last of them is waited
 *    on.
 *  - A released parameter is freed through record_stream on the compute
 *    stream (free_param): its block stays active until that stream passes.
 *  - After a submodule, its parameters are released (param.partition():
 *    param.data = empty) unless persistent (numel <= the persistence
 *    threshold: whole on every rank, never gathered) or met again within
 *    stage3_max_reuse_distance elements of the trace.
 *  - With one rank a gathered parameter is a view of its partition
 *    (_no_gather_coalesced): nothing is allocated.
 * Without zero.Init (the model built before DeepSpeed was configured) torch's
 * own F.linear runs and saves weight.t(), a view of the gathered tensor, so a
 * released Linear weight lives until that Linear's backward, which gathers it
 * again (docs/method.md, "DeepSpeed"). */
#include <stdlib.h>
#include <string.h>

#include "profiles.h"
#include "seam_deepspeed.h"
#include "seam_util.h"

/* QLoRA under ZeRO-3 (docs/method.md, "QLoRA with DeepSpeed ZeRO-3"). A
 * frozen NF4 weight is a bitsandbytes Params4bit whose data are the packed
 * codes in bnb_4bit_quant_storage (the compute dtype, as PEFT's recipe sets
 * it): bitsandbytes 0.50.2 backends/cuda/ops.py _quantize_4bit_impl, `out =
 * torch.empty(((n + 1) // (quant_storage.itemsize * 2), 1), dtype=
 * quant_storage)`. DeepSpeed partitions, gathers and releases that tensor
 * like any parameter (0.19.8 partition_parameters.py _convert_to_deepspeed_param:
 * `param.ds_numel = param.numel()`, the packed numel); the QuantState (absmax,
 * its nested codes and constants) is an attribute of the parameter, not a
 * parameter, and stays whole on every rank. Every other parameter: its own
 * numel. */
int64_t ds_param_numel(const est_sim *s, const ds_state *d, int inst, int p) {
    const est_mparam *pp = est_sim_param(s, inst, p);
    const int64_t n = est_sim_param_elems(s, inst, p);
    if (s->run->quant != EST_QUANT_NF4 || est_sim_param_storage(s, inst, p) == n * pp->elem_bytes) return n;
    return (pp->rows * pp->cols + 1) / (2 * d->c) * pp->copies;
}

/* The quantization constants of every quantized parameter: its storage less
 * its packed codes, whole on every rank. */
int64_t ds_quant_constants_bytes(const est_sim *s, const ds_state *d) {
    int64_t bytes = 0;
    for (int i = 0; i < d->n_refs; i++) {
        const est_param_ref *r = &d->refs[i];
        const est_mparam *pp = est_sim_param(s, r->inst, r->p);
        const int64_t storage = est_sim_param_storage(s, r->inst, r->p);
        if (storage == est_sim_param_elems(s, r->inst, r->p) * pp->elem_bytes) continue;
        bytes += storage - (pp->rows * pp->cols + 1) / 2 * pp->copies;
    }
    return bytes;
}

/* Whether a parameter stays whole on every rank (stage3_param_persistence_threshold
 * against its ds_numel). */
static bool persistent(const est_sim *s, const ds_state *d, int inst, int p) {
    return ds_param_numel(s, d, inst, p) <= d->persistence_elems;
}

/* The persistent parameters (W > 1): DeepSpeed gathers them whole at their
 * first fetch and never releases them after a submodule; the step's
 * _partition_all_parameters (release_and_reset_all: every parameter,
 * persistent ones too, through free_param) frees them before the optimizer
 * runs and _post_step gathers them again (persistent_parameters[0].all_gather:
 * one whole tensor each), DeepSpeed 0.14.2-0.19.8 stage3.py. */
void ds_zero3_gather_persistent(est_sim *s, ds_state *d) {
    if (d->W == 1) return;
    if (!d->persist) {
        d->persist = malloc((size_t)(d->n_refs > 0 ? d->n_refs : 1) * sizeof *d->persist);
        if (!d->persist) {
            s->st->oom = true;
            return;
        }
    }
    d->n_persist = 0;
    for (int i = 0; i < d->n_refs; i++) {
        const est_param_ref *r = &d->refs[i];
        if (persistent(s, d, r->inst, r->p))
            d->persist[d->n_persist++] = est_sim_alloc(s, EST_CAT_PARAMS, ds_param_numel(s, d, r->inst, r->p) * d->c,
                                                       "persistent parameter", 0);
    }
}

void ds_zero3_release_persistent(est_sim *s, ds_state *d) {
    for (int i = 0; i < d->n_persist; i++) est_sim_release_pending(s, d->persist[i]);
    d->n_persist = 0;
}

/* The op that dequantizes op j's weight (block_linear.c quant_linear: the
 * DEQUANT right before the matmul that takes its output), or -1. */
static int dequant_of(const est_module *m, int j) {
    const est_mop *o = &m->ops[j];
    if (j == 0 || o->kind != EST_OP_LINEAR || o->n_in < 2) return -1;
    const est_mop *q = &m->ops[j - 1];
    return q->kind == EST_OP_DEQUANT && q->out >= 0 && o->in[1] == q->out ? j - 1 : -1;
}

static void add_params(const est_sim *s, const ds_state *d, int inst, const est_mop *o, ds_fetch *f) {
    for (int k = 0; k < o->n_in && f->count < DS_FETCH_MAX; k++) {
        if (!EST_IS_PARAM(o->in[k])) continue;
        const int p = EST_PARAM_INDEX(o->in[k]);
        if (persistent(s, d, inst, p)) continue;
        f->slot[f->count] = est_sim_grad_slot(s, inst, p);
        f->numel[f->count] = ds_param_numel(s, d, inst, p);
        f->count++;
    }
}

/* The gathered parameters of one op (its submodule's). A quantized weight's
 * DEQUANT runs no backward of its own: the Linear4bit's backward (MatMul4Bit
 * dequantizes B again for grad_x) is where DeepSpeed's pre-backward hook
 * gathers it, so in backward its fetch belongs to the matmul. */
static void op_params(const est_sim *s, const ds_state *d, int inst, int op, ds_fetch *f) {
    const est_module *m = est_sim_module(s, inst);
    const est_mop *o = &m->ops[op];
    f->count = 0;
    if (f->backward && o->kind == EST_OP_DEQUANT) return;
    add_params(s, d, inst, o, f);
    const int q = f->backward ? dequant_of(m, op) : -1;
    if (q >= 0) add_params(s, d, inst, &m->ops[q], f);
}

static int push(ds_state *d, const ds_fetch *f) {
    ds_fetch *t = realloc(d->trace, (size_t)(d->n_trace + 1) * sizeof *t);
    if (!t) return -1;
    d->trace = t;
    d->trace[d->n_trace++] = *f;
    return 0;
}

static int trace_module(est_sim *s, ds_state *d, int inst, bool backward) {
    const est_module *m = est_sim_module(s, inst);
    for (int j = 0; j < m->n_ops; j++) {
        ds_fetch f = {.inst = inst, .op = backward ? m->n_ops - 1 - j : j, .backward = backward};
        op_params(s, d, inst, f.op, &f);
        if (f.count > 0 && push(d, &f)) return -1;
    }
    return 0;
}

int ds_zero3_prepare(est_sim *s, ds_state *d) {
    const int last = (int)s->L + 1;
    for (int inst = 0; inst <= last; inst++)
        if (trace_module(s, d, inst, false)) return -1;
    for (int inst = last; inst >= 0; inst--)
        if (trace_module(s, d, inst, true)) return -1;
    const int slots = est_sim_slots(s);
    d->avail = malloc((size_t)slots * sizeof *d->avail);
    d->kept = malloc((size_t)slots * sizeof *d->kept);
    d->group_of = malloc((size_t)slots * sizeof *d->group_of);
    d->recent = malloc((size_t)slots * sizeof *d->recent);
    d->slot_numel = calloc((size_t)slots, sizeof *d->slot_numel);
    d->inflight = calloc((size_t)slots, sizeof *d->inflight);
    d->loose = s->run->ds.loose_grads ? malloc((size_t)(slots + 1) * sizeof *d->loose) : NULL;
    d->n_loose = 0;
    if (s->run->ds.loose_grads && !d->loose) return -1;
    if (!d->avail || !d->kept || !d->group_of || !d->recent || !d->slot_numel || !d->inflight) return -1;
    for (int i = 0; i < slots; i++) d->avail[i] = d->kept[i] = d->group_of[i] = d->recent[i] = -1;
    for (int i = 0; i < d->n_trace; i++)
        for (int k = 0; k < d->trace[i].count; k++) d->slot_numel[d->trace[i].slot[k]] = d->trace[i].numel[k];
    d->ops_per_inst = EST_MOD_MAX_OPS;
    const size_t cells = ((size_t)last + 1) * EST_MOD_MAX_OPS * 2;
    d->where = malloc(cells * sizeof *d->where);
    if (!d->where) return -1;
    for (size_t i = 0; i < cells; i++) d->where[i] = -1;
    for (int i = 0; i < d->n_trace; i++) {
        const ds_fetch *f = &d->trace[i];
        d->where[((size_t)f->inst * EST_MOD_MAX_OPS + (size_t)f->op) * 2 + f->backward] = i;
    }
    return 0;
}

void ds_zero3_free(ds_state *d) {
    free(d->loose);
    d->loose = NULL;
    free(d->persist);
    d->persist = NULL;
    free(d->trace);
    free(d->avail);
    free(d->kept);
    free(d->group_of);
    free(d->recent);
    d->recent = NULL;
    free(d->groups);
    free(d->slot_numel);
    free(d->inflight);
    d->inflight = NULL;
    free(d->where);
    d->slot_numel = NULL;
    d->where = NULL;
    d->trace = NULL;
    d->avail = d->kept = d->group_of = NULL;
    d->groups = NULL;
}

static int64_t padded(const ds_state *d, int64_t numel) { return est_shard(numel, d->W) * d->W; }

/* One all-gather call for `n` parameters (slots). */
static void all_gather(est_sim *s, ds_state *d, const int *slot, const int64_t *numel, int n) {
    if (n == 0) return;
    for (int i = 0; i < n; i++) d->inflight[slot[i]] = true;
    if (n == 1) {
        d->avail[slot[0]] =
            est_sim_alloc(s, EST_CAT_PARAMS, padded(d, numel[0]) * d->c, "gathered parameter", DS_ALLGATHER_STREAM);
        d->n_available += numel[0];
        return;
    }
    int64_t flat = 0;
    for (int i = 0; i < n; i++) flat += padded(d, numel[i]);
    ds_group *g = realloc(d->groups, (size_t)(d->n_groups + 1) * sizeof *g);
    if (!g) {
        s->st->oom = true;
        return;
    }
    d->groups = g;
    ds_group *gr = &d->groups[d->n_groups];
    gr->flat = est_sim_alloc(s, EST_CAT_COMM, flat * d->c, "all-gather flat buffer", DS_ALLGATHER_STREAM);
    gr->waited = false;
    gr->remaining = n;
    for (int i = 0; i < n; i++) {
        d->group_of[slot[i]] = d->n_groups;
        d->avail[slot[i]] = -2; /* in flight */
        d->n_available += numel[i];
    }
    d->n_groups++;
}

/* A parameter of a coalesced call is waited for (fetch_sub_module, on the
 * all-gather stream): the first wait makes every parameter of the call a cat
 * of its pieces (AllGatherCoalescedHandle.wait), and the handle, with the flat
 * buffer its pieces view, goes once the registry has given up its last
 * parameter. */
static void wait_param(est_sim *s, ds_state *d, int slot) {
    const int group = d->group_of[slot];
    ds_group *g = &d->groups[group];
    if (!g->waited) {
        g->waited = true;
        const int slots = est_sim_slots(s);
        for (int i = 0; i < slots; i++)
            if (d->group_of[i] == group && d->avail[i] == -2)
                d->avail[i] = est_sim_alloc(s, EST_CAT_PARAMS, d->slot_numel[i] * d->c, "gathered parameter",
                                            DS_ALLGATHER_STREAM);
    }
    d->group_of[slot] = -1;
    if (--g->remaining == 0) est_sim_release(s, g->flat);
}

/* The trace entry of this op (a table built once). */
static int find(const ds_state *d, int inst, int op, bool backward) {
    return d->where[((size_t)inst * (size_t)d->ops_per_inst + (size_t)op) * 2 + backward];
}

static bool in_list(const int *slot, int n, int x) {
    for (int i = 0; i < n; i++)
        if (slot[i] == x) return true;
    return false;
}

/* The queue passes trace entry `at` of a parameter: the coordinator notes the
 * latest (__most_recent_step_id_param_fetched_for, a max). */
static void passed(ds_state *d, int slot, int at) {
    if (d->recent[slot] < at) d->recent[slot] = at;
}

/* The prefetch: pop trace entries off the queue until enough is in flight;
 * every parameter popped is noted as passed there, gathered or not. */
static void prefetch(est_sim *s, ds_state *d, int pos) {
    int64_t budget = d->max_live_elems - d->n_available;
    if (budget > d->prefetch_elems) budget = d->prefetch_elems;
    if (d->queue <= pos) d->queue = pos + 1; /* the module's own entry is popped */
    int slot[64];
    int64_t numel[64];
    int n = 0;
    int64_t prefetching = 0;
    while (d->queue < d->n_trace && prefetching < budget && n < 60) {
        const int at = d->queue++;
        const ds_fetch *f = &d->trace[at];
        for (int k = 0; k < f->count; k++) {
            passed(d, f->slot[k], at);
            if (d->avail[f->slot[k]] != -1 || in_list(slot, n, f->slot[k])) continue;
            slot[n] = f->slot[k];
            numel[n++] = f->numel[k];
            prefetching += f->numel[k];
        }
    }
    all_gather(s, d, slot, numel, n);
}

void ds_zero3_op_pre(est_sim *s, int inst, int op, bool backward) {
    ds_state *d = (ds_state *)s->fw;
    if (!d->gathers) return;
    const int pos = find(d, inst, op, backward);
    if (pos < 0) return;
    d->pos = pos;
    const ds_fetch *f = &d->trace[pos];
    int slot[DS_FETCH_MAX];
    int64_t numel[DS_FETCH_MAX];
    int n = 0;
    for (int k = 0; k < f->count; k++)
        if (d->avail[f->slot[k]] == -1) {
            slot[n] = f->slot[k];
            numel[n++] = f->numel[k];
        }
    all_gather(s, d, slot, numel, n);
    for (int k = 0; k < f->count; k++) {
        if (d->inflight[f->slot[k]]) { /* the in-flight registry's wait, throttled */
            d->inflight[f->slot[k]] = false;
            ds_lag_wait(s, d);
        }
        if (d->group_of[f->slot[k]] >= 0) wait_param(s, d, f->slot[k]);
        passed(d, f->slot[k], pos);
    }
    if (!s->first_step) prefetch(s, d, pos); /* the first step records the trace */
}

/* DeepSpeed keeps a parameter the trace meets again within the reuse distance. */
static bool reused_soon(const ds_state *d, int pos, int slot) {
    int64_t traversed = 0;
    for (int i = pos + 1; i < d->n_trace; i++) {
        if (traversed >= d->reuse_elems) return false;
        const ds_fetch *f = &d->trace[i];
        for (int k = 0; k < f->count; k++) {
            if (f->slot[k] == slot) return true;
            traversed += f->numel[k];
        }
    }
    return false;
}

static bool saves_weight(const est_sim *s, int inst, int op) {
    const est_mop *o = &est_sim_module(s, inst)->ops[op];
    return o->kind == EST_OP_LINEAR && o->n_in > 1 && o->saves[1];
}

/* MatMul4Bit keeps B, a view of the gathered packed codes, in ctx.tensors
 * when its input needs a gradient (bitsandbytes 0.50.2 autograd/
 * _functions.py: `if any(ctx.needs_input_grad[:2]): ctx.tensors = (None, B)`
 * with B = B.view(-1, 1)), so the codes live until that matmul's backward. */
static bool bnb_keeps_codes(const est_sim *s, int inst, int op) {
    const est_module *m = est_sim_module(s, inst);
    if (m->ops[op].kind != EST_OP_DEQUANT || op + 1 >= m->n_ops || dequant_of(m, op + 1) != op) return false;
    return m->ops[op + 1].backward;
}

void ds_zero3_op_post(est_sim *s, int inst, int op, bool backward) {
    ds_state *d = (ds_state *)s->fw;
    if (!d->gathers) return;
    const int pos = find(d, inst, op, backward);
    if (pos < 0) return;
    const ds_fetch *f = &d->trace[pos];
    for (int k = 0; k < f->count; k++) {
        const int slot = f->slot[k];
        if (backward && d->kept[slot] >= 0) { /* autograd's saved weight.t() goes with the node */
            ds_lag_release(s, d, d->kept[slot], true);
            d->kept[slot] = -1;
        }
        /* while the first step records the trace, release_sub_module
         * releases everything the submodule used; then it keeps a parameter
         * met again soon, or one whose later use the prefetch has already
         * passed (skipped as available: __params_to_release, 0.16.5-0.19.8) */
        if (d->avail[slot] < 0 || (!s->first_step && (reused_soon(d, pos, slot) || d->recent[slot] > pos)))
            continue;
        /* transformers builds a quantized model without zero.Init
         * (modeling_utils.py, 5.17: `is_deepspeed_zero3_enabled() and not
         * is_quantized`), so torch's own F.linear runs there too */
        const bool built_whole = !s->run->zero_init || s->run->quant != EST_QUANT_NONE;
        if (!backward && k == 0 &&
            ((built_whole && !s->run->stack->ds_linear_wrap_without_init && saves_weight(s, inst, op)) ||
             bnb_keeps_codes(s, inst, op)))
            d->kept[slot] = d->avail[slot]; /* torch's linear keeps the view */
        else /* free_param: record_stream on the compute stream, then param.data = empty */
            ds_lag_release(s, d, d->avail[slot], true);
        d->avail[slot] = -1;
        d->n_available -= f->numel[k];
    }
}

void ds_zero3_reset(est_sim *s, ds_state *d) {
    if (!d->avail) return;
    const int slots = est_sim_slots(s);
    for (int i = 0; i < slots; i++) {
        if (d->avail[i] >= 0) est_sim_release_pending(s, d->avail[i]);
        if (d->kept[i] >= 0) est_sim_release_pending(s, d->kept[i]);
        d->avail[i] = d->kept[i] = d->group_of[i] = d->recent[i] = -1;
        d->inflight[i] = false;
    }
    for (int g = 0; g < d->n_groups; g++)
        if (d->groups[g].remaining > 0) est_sim_release(s, d->groups[g].flat);
    d->n_groups = 0;
    d->queue = d->pos = 0;
    d->n_available = 0;
}
