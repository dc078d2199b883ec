/* Autograd's step, tensor by tensor (autograd.h). The rules, from PyTorch's
 * engine (torch/csrc/autograd/engine.cpp, input_buffer.cpp, saved_variable.cpp):
 *  - a tensor is alive while a Python reference or a saved variable holds it:
 *    here, one reference from the forward until the last op that reads it
 *    (the modeling code's variables go out of scope), one more while a
 *    backward node keeps it (released after that node runs);
 *  - a node's gradient inputs are accumulated in its InputBuffer: the first
 *    arrival is kept, later ones are added in place (a transient copy each);
 *    an add's backward passes its gradient on to both inputs unchanged;
 *  - the buffer is freed once the node has run; what the node returns for
 *    its inputs is new;
 *  - the gradient of a weight goes to the framework (AccumulateGrad, or a
 *    hook that moves it into a bucket).
 * A checkpointed block (torch.utils.checkpoint) runs its first forward under
 * no_grad, keeps its input, and in backward runs the forward again with grad
 * before the block's backward; under an op-level policy (sac.h) the first
 * forward also keeps the outputs of the ops the policy saves, and the
 * recompute takes them instead of making them again. */
#include "autograd.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile.h"
#include "json_util.h"
#include "objective.h"
#include "sac.h"
#include "trainable.h"
#include "work.h"

#define NT EST_MOD_MAX_TENSORS

/* Block i's module: its variant under partial training. */
static const est_module *block_of(const est_sim *s, int64_t i, bool no_grad) {
    if (s->layer_variant && i >= 0 && i < s->L) return &s->variants[2 * s->layer_variant[i] + (no_grad ? 1 : 0)];
    return no_grad ? &s->block_nograd : &s->block;
}

const est_module *est_sim_module(const est_sim *s, int inst) {
    if (inst == EST_INST_EMBED) return &s->embed;
    if (inst == s->L + 1) return &s->head;
    return block_of(s, inst - 1, s->no_grad_forward);
}

/* A block whose output needs no gradient (nothing in or before it trains)
 * has no backward: autograd never reaches it, and a checkpoint around it
 * keeps nothing. */
static bool has_backward(const est_module *m) {
    return m->output >= 0 && m->tensors[m->output].requires_grad;
}

static bool refs_room(est_sim *s, int32_t id) {
    if (id < s->refs_capacity) return true;
    int32_t cap = s->refs_capacity ? s->refs_capacity : 1024;
    while (cap <= id) cap *= 2;
    int32_t *r = realloc(s->refs, (size_t)cap * sizeof *r);
    if (!r) return false;
    memset(r + s->refs_capacity, 0, (size_t)(cap - s->refs_capacity) * sizeof *r);
    s->refs = r;
    s->refs_capacity = cap;
    return true;
}

int32_t est_sim_alloc(est_sim *s, est_category cat, int64_t bytes, const char *name, int stream) {
    int32_t id = est_step_tensor(s->st, cat, bytes, name, stream);
    if (id < 0) return -1;
    if (!refs_room(s, id)) {
        s->st->oom = true;
        return -1;
    }
    s->refs[id] = 1;
    return id;
}

void est_sim_ref(est_sim *s, int32_t id) {
    if (id >= 0 && id < s->refs_capacity) s->refs[id]++;
}

static void release(est_sim *s, int32_t id, bool pending) {
    if (id < 0 || id >= s->refs_capacity || s->refs[id] <= 0) return;
    if (--s->refs[id] == 0) est_step_tensor_free(s->st, id, pending);
}

void est_sim_release(est_sim *s, int32_t id) { release(s, id, false); }
void est_sim_release_pending(est_sim *s, int32_t id) { release(s, id, true); }

void est_sim_release_on(est_sim *s, int32_t id, int use_stream) {
    if (id < 0 || id >= s->refs_capacity || s->refs[id] <= 0) return;
    if (--s->refs[id] == 0) est_step_tensor_free_on(s->st, id, use_stream);
}

static est_category category_of(const est_mtensor *t) {
    switch (t->role) {
    case EST_ROLE_LOGITS: return EST_CAT_LOGITS;
    case EST_ROLE_WEIGHT: return EST_CAT_PARAMS;
    case EST_ROLE_ACTIVATION: break;
    }
    return EST_CAT_ACTIVATIONS;
}

static void transient(est_sim *s, int64_t bytes, const char *name) {
    if (bytes <= 0) return;
    int32_t id = est_sim_alloc(s, EST_CAT_WORKSPACE, bytes, name, 0);
    est_sim_release(s, id);
}

/* A backward node keeps a tensor: a reference on the device, or, under
 * torch.autograd.graph.save_on_cpu (--activation-offload), a pinned host
 * copy (the device tensor goes when nothing else holds it). */
static bool offloaded(const est_sim *s) { return s->run->activation_offload && !s->recompute; }

/* TRL's OffloadActivations with streams (models/activation_offloading.py,
 * pack_tensor): the device tensor of each of the last max_fwd_stash_size
 * offloaded tensors stays in fwd_stash until a later pack evicts it; the
 * first unpack in backward empties the stash. */
static void stash_push(est_sim *s, int32_t id) {
    const int n = s->run->offload_stash < 16 ? s->run->offload_stash : 16;
    if (n <= 0 || id < 0) return;
    est_sim_ref(s, id);
    if (s->stash_count == n) {
        est_sim_release(s, s->stash[0]);
        memmove(s->stash, s->stash + 1, (size_t)(n - 1) * sizeof s->stash[0]);
        s->stash_count--;
    }
    s->stash[s->stash_count++] = id;
}

static void stash_drain(est_sim *s) {
    for (int i = 0; i < s->stash_count; i++) est_sim_release(s, s->stash[i]);
    s->stash_count = 0;
}

static void keep_saved(est_sim *s, int32_t id, int64_t bytes) {
    if (!offloaded(s)) {
        est_sim_ref(s, id);
        return;
    }
    if (!s->st->quiet) s->st->cpu_bytes += bytes;
    stash_push(s, id);
}

/* The tensors each op's backward node keeps, by op, in tensor order:
 * tensor[start[j] .. start[j + 1]) for op j (one pass over the module's
 * tensors per backward rather than one per op). */
typedef struct saved_by_op {
    int16_t start[EST_MOD_MAX_OPS + 1];
    int16_t tensor[NT];
} saved_by_op;

static void index_saved(const est_module *m, saved_by_op *x) {
    memset(x->start, 0, sizeof x->start);
    for (int t = 0; t < m->n_tensors; t++)
        if (m->tensors[t].saved_until >= 0) x->start[m->tensors[t].saved_until + 1]++;
    for (int j = 0; j < m->n_ops; j++) x->start[j + 1] += x->start[j];
    int16_t fill[EST_MOD_MAX_OPS];
    memcpy(fill, x->start, sizeof fill);
    for (int t = 0; t < m->n_tensors; t++)
        if (m->tensors[t].saved_until >= 0) x->tensor[fill[m->tensors[t].saved_until]++] = (int16_t)t;
}

/* Under save_on_cpu, a node unpacks what it saved: a device copy for its
 * backward (freed after it). */
static void unpack_saved(est_sim *s, const est_module *m, const saved_by_op *saved, int j,
                         int32_t *copies, int *n) {
    *n = 0;
    if (!offloaded(s)) return;
    for (int i = saved->start[j]; i < saved->start[j + 1] && *n < 16; i++)
        copies[(*n)++] = est_sim_alloc(s, EST_CAT_ACTIVATIONS,
                                       est_mtensor_bytes(&m->tensors[saved->tensor[i]]),
                                       "unpacked saved tensor", 0);
}

/* autocast's cache takes a reference until the autocast region exits. */
static void cache_hold(est_sim *s, int32_t id) {
    if (id < 0) return;
    if (s->cache_count == s->cache_capacity) {
        int32_t cap = s->cache_capacity ? s->cache_capacity * 2 : 256;
        int32_t *c = realloc(s->cache, (size_t)cap * sizeof *c);
        if (!c) {
            s->st->oom = true;
            return;
        }
        s->cache = c;
        s->cache_capacity = cap;
    }
    est_sim_ref(s, id);
    s->cache[s->cache_count++] = id;
}

static void cache_exit(est_sim *s) {
    for (int32_t i = 0; i < s->cache_count; i++) est_sim_release(s, s->cache[i]);
    s->cache_count = 0;
}

void est_sim_cache_exit(est_sim *s) { cache_exit(s); }

/* Tensor t is one the embedding makes for every block (module_graph.h
 * est_shared): the model's forward holds it past the module. */
static bool is_shared(const est_module *m, int t) {
    for (int k = 0; k < EST_SHARED_COUNT; k++)
        if (m->shared[k] == t) return true;
    return false;
}

/* The module's own reference on tensor t ends (its last forward reader). */
static void forward_done(est_sim *s, const est_module *m, int32_t *ids, int t) {
    const est_mtensor *x = &m->tensors[t];
    if (t == m->output || x->held || is_shared(m, t)) return;
    est_sim_release(s, ids[t]);
    ids[t] = ids[t] >= 0 && s->refs[ids[t]] > 0 ? ids[t] : -1;
}

/* The slot of output k of op j of block instance `inst` under an op-level
 * policy that saves the op, or NULL. The policy is marked on s->block; the
 * no-grad build has the same ops in the same order. */
static int32_t *sac_slot(est_sim *s, int inst, int j, int k) {
    if (!(s->sac_store || s->sac_take) || inst < 1 || inst > s->L || !s->block.ops[j].sac_save) return NULL;
    return s->sac_kept + ((size_t)(inst - 1) * EST_MOD_MAX_OPS + (size_t)j) * 2 + (size_t)k;
}

/* Output k of op j: new, or under an op-level policy the stored one (its
 * reference becomes the forward's), or new and stored (one more reference). */
static int32_t make_output(est_sim *s, const est_mtensor *x, int inst, int j, int k) {
    int32_t *slot = sac_slot(s, inst, j, k);
    if (slot && s->sac_take && *slot >= 0) {
        const int32_t id = *slot;
        *slot = -1;
        return id;
    }
    const int32_t id = est_sim_alloc(s, category_of(x), est_mtensor_bytes(x), x->name, 0);
    if (slot && s->sac_store) {
        est_sim_ref(s, id);
        *slot = id;
    }
    return id;
}

static void forward_op(est_sim *s, const est_module *m, int inst, int32_t *ids, int j) {
    const est_mop *o = &m->ops[j];
    if (s->seam->op_pre && !s->detached) s->seam->op_pre(s, inst, j, false);
    if (!(s->sac_take && o->sac_save)) transient(s, o->forward_transient_bytes, o->name);
    const int outs[2] = {o->out, o->out2};
    for (int k = 0; k < 2; k++) {
        if (outs[k] < 0) continue;
        const est_mtensor *x = &m->tensors[outs[k]];
        ids[outs[k]] = make_output(s, x, inst, j, k);
        if (x->saved_until >= 0) keep_saved(s, ids[outs[k]], est_mtensor_bytes(x));
        if (x->autocast_cached) cache_hold(s, ids[outs[k]]);
    }
    for (int k = 0; k < o->n_in; k++) {
        int t = o->in[k];
        if (t < 0 || m->tensors[t].last_read != j) continue;
        bool seen = false; /* an op reading one tensor twice drops it once */
        for (int q = 0; q < k; q++) seen |= o->in[q] == t;
        if (!seen) forward_done(s, m, ids, t);
    }
    for (int k = 0; k < 2; k++)
        if (outs[k] >= 0 && m->tensors[outs[k]].last_read == EST_NONE) forward_done(s, m, ids, outs[k]);
    if (s->seam->op_post && !s->detached) s->seam->op_post(s, inst, j, false);
}

/* The last op whose backward node keeps anything (an input, a weight or an
 * output): a non-reentrant checkpoint's recompute stops after it. */
static int last_saving_op(const est_module *m) {
    for (int j = m->n_ops - 1; j >= 0; j--) {
        const est_mop *o = &m->ops[j];
        bool any = o->saves_out || o->saves_out2 || o->packs;
        for (int k = 0; k < o->n_in; k++) any |= o->saves[k];
        if (any) return j;
    }
    return -1;
}

/* A module's forward through op `last` (n_ops - 1: all of it); its output
 * becomes s->carried. Stopped early, the tensors the forward still held go
 * (an exception unwinding the modeling code's frames) and nothing is carried. */
static void forward_ops(est_sim *s, const est_module *m, int inst, int last) {
    int32_t *ids = s->ids + (size_t)inst * NT;
    for (int t = 0; t < NT; t++) ids[t] = -1;
    if (m->input >= 0) ids[m->input] = s->carried;
    for (int k = 0; k < EST_SHARED_COUNT && m->kind == EST_MODULE_BLOCK; k++)
        if (m->shared[k] >= 0) ids[m->shared[k]] = s->shared[k];
    if (s->seam->module_pre && !s->detached) s->seam->module_pre(s, inst, false);
    for (int t = 0; t < m->n_tensors; t++) /* inputs a backward node keeps */
        if (m->tensors[t].producer == EST_NONE && m->tensors[t].saved_until >= 0)
            keep_saved(s, ids[t], est_mtensor_bytes(&m->tensors[t]));
    for (int j = 0; j <= last; j++) forward_op(s, m, inst, ids, j);
    const bool whole = last == m->n_ops - 1;
    for (int t = 0; t < m->n_tensors && !whole; t++) {
        const est_mtensor *x = &m->tensors[t];
        if (!is_shared(m, t) && x->producer <= last && x->last_read > last) forward_done(s, m, ids, t);
    }
    /* A preference step's reference pass runs after the policy's log-probs,
     * while the loss function still holds what it returned. */
    if (m->kind == EST_MODULE_HEAD && !s->detached && s->objective && s->objective->after_head)
        s->objective->after_head(s);
    for (int t = 0; t < m->n_tensors; t++)
        if (m->tensors[t].held && t != m->output && m->tensors[t].producer <= last) est_sim_release(s, ids[t]);
    for (int k = 0; k < EST_SHARED_COUNT && m->kind == EST_MODULE_EMBEDDING; k++)
        if (m->shared[k] >= 0) s->shared[k] = ids[m->shared[k]];
    s->carried = m->output >= 0 && whole ? ids[m->output] : -1;
    if (s->seam->module_post && !s->detached) s->seam->module_post(s, inst, false);
    est_step_sync(s->st); /* the compute stream passes what the side streams freed */
}

static void forward_module(est_sim *s, const est_module *m, int inst) {
    forward_ops(s, m, inst, m->n_ops - 1);
}

int32_t est_sim_detached_forward(est_sim *s, const est_module *m, int32_t input) {
    const int32_t carried = s->carried;
    s->carried = input;
    s->detached = true;
    forward_ops(s, m, (int)s->L + 2, m->n_ops - 1); /* the scratch instance */
    s->detached = false;
    const int32_t out = s->carried;
    s->carried = carried;
    return out;
}

/* The gradient of input k of op o arrives. */
static void input_grad(est_sim *s, const est_module *m, const int32_t *ids, int32_t *g,
                       const est_mop *o, int k) {
    const int t = o->in[k];
    const est_mtensor *x = &m->tensors[t];
    const bool from_out = o->kind == EST_OP_ADD || (o->kind == EST_OP_KERNEL && o->grad_from_out[k]);
    if (from_out || (o->kind == EST_OP_FUSED_LOSS && k == 0) ||
        (o->kind == EST_OP_KERNEL && o->grad_into_saved[k] && !offloaded(s) && ids[t] >= 0)) {
        /* passed on unchanged (the add; an in-place kernel rewriting the
         * output's gradient), handed back from the forward (fused loss), or
         * written into the input's own saved storage (a Triton kernel; under
         * save_on_cpu it writes into the unpacked copy, which the general
         * path below stands for) */
        int32_t src = from_out ? g[o->out] : o->kind == EST_OP_FUSED_LOSS ? ids[o->out] : ids[t];
        if (g[t] < 0 && src >= 0) {
            g[t] = src;
            est_sim_ref(s, src);
        }
        return;
    }
    /* a weight cast's gradient is the weight's, in the compute dtype */
    const est_category cat = x->role == EST_ROLE_WEIGHT ? EST_CAT_GRADS : category_of(x);
    int32_t id = est_sim_alloc(s, cat, est_mtensor_bytes(x), "gradient", 0);
    if (g[t] < 0) {
        g[t] = id;
    } else {
        est_sim_release(s, id); /* added in place into the first arrival */
    }
}

static void backward_op(est_sim *s, const est_module *m, const saved_by_op *saved, int inst,
                        int32_t *ids, int32_t *g, int j, bool any_held) {
    const est_mop *o = &m->ops[j];
    if (s->seam->op_pre) s->seam->op_pre(s, inst, j, true);
    int32_t copies[16];
    int n_copies;
    unpack_saved(s, m, saved, j, copies, &n_copies);
    for (int k = 0; k < o->n_in; k++)
        if (o->grad_in[k]) input_grad(s, m, ids, g, o, k);
    for (int k = 0; k < o->n_in; k++) {
        if (!EST_IS_PARAM(o->in[k])) continue;
        const int p = EST_PARAM_INDEX(o->in[k]);
        const est_mparam *pp = &m->params[p];
        if (!pp->trainable) continue;
        int32_t gid;
        if (o->kind == EST_OP_FUSED_LOSS) {
            gid = ids[o->out2];
            est_sim_ref(s, gid);
        } else {
            gid = est_sim_alloc(s, EST_CAT_GRADS, pp->rows * pp->cols * pp->copies * pp->elem_bytes,
                                pp->name, 0);
        }
        if (s->seam->grad) s->seam->grad(s, inst, p, gid);
        else est_sim_release(s, gid);
    }
    transient(s, o->backward_transient_bytes, o->name);
    if (o->out >= 0 && g[o->out] >= 0 && o->grad_held_until < 0) {
        est_sim_release(s, g[o->out]);
        g[o->out] = -1;
    }
    /* a custom Function's node ends: the gradients its later ops held go
     * (any_held: some op of m holds one; most modules have none) */
    for (int k = j + 1; any_held && k < m->n_ops; k++) {
        const int t = m->ops[k].out;
        if (m->ops[k].grad_held_until == j && t >= 0 && g[t] >= 0) {
            est_sim_release(s, g[t]);
            g[t] = -1;
        }
    }
    if (offloaded(s)) {
        for (int c = 0; c < n_copies; c++) est_sim_release(s, copies[c]);
    } else {
        for (int i = saved->start[j]; i < saved->start[j + 1]; i++)
            if (ids[saved->tensor[i]] >= 0) est_sim_release(s, ids[saved->tensor[i]]);
    }
    if (s->seam->op_post) s->seam->op_post(s, inst, j, true);
}

/* A cuBLAS workspace, once per run and thread, at the thread's first GEMM
 * (`backward` 0: the forward's, on the Python thread; 1: backward's, the LM
 * head's GEMM). getCurrentCUDABlasHandle allocates it through the caching
 * allocator for a (handle, stream) it has not seen (CublasHandlePool.cpp
 * setWorkspaceForHandle, cublas_handle_stream_to_workspace); each thread
 * reserves its own handle (the per-thread pool window), and autograd runs a
 * CUDA graph's backward on its own device thread (torch/csrc/autograd/
 * engine.cpp, one worker thread per device). Nothing runs a GEMM before the
 * first forward. docs/method.md ("cuBLAS workspace"). */
static void cublas_workspace(est_sim *s, int backward) {
    bool *done = backward ? &s->bwd_cublas : &s->fwd_cublas;
    if (*done) return;
    *done = true;
    s->st->cublas_rows[backward] = s->st->moments > 0 ? (int32_t)s->st->moments : 1; /* the open row */
    est_sim_alloc(s, EST_CAT_WORKSPACE, (int64_t)s->k->value[EST_K_CUBLAS_WORKSPACE_BYTES],
                  backward ? "cuBLAS workspace (backward thread)" : "cuBLAS workspace", 0);
}

/* A module's backward from s->carried_grad; the gradient of its input
 * becomes s->carried_grad. `span_at_head`: open the "backward LM head" span at
 * the LM head's op. */
static void backward_module(est_sim *s, const est_module *m, int inst) {
    int32_t *ids = s->ids + (size_t)inst * NT, *g = s->grads;
    for (int t = 0; t < NT; t++) g[t] = -1;
    if (m->output >= 0) g[m->output] = s->carried_grad;
    saved_by_op saved;
    index_saved(m, &saved);
    bool any_held = false;
    for (int j = 0; j < m->n_ops; j++) any_held |= m->ops[j].grad_held_until >= 0;
    if (s->seam->module_pre) s->seam->module_pre(s, inst, true);
    for (int j = m->n_ops - 1; j >= 0; j--) {
        if (!m->ops[j].backward) continue;
        if (m->kind == EST_MODULE_HEAD &&
            (m->ops[j].kind == EST_OP_FUSED_LOSS ||
             (m->ops[j].kind == EST_OP_LINEAR && !strcmp(m->ops[j].name, "lm_head")))) {
            est_step_span(s->st, EST_PHASE_BACKWARD, -1, "backward LM head");
            est_work_emit(s->st, s->run, s->k, EST_UNIT_HEAD_BWD, -1);
            cublas_workspace(s, 1); /* backward's first GEMM */
        }
        backward_op(s, m, &saved, inst, ids, g, j, any_held);
    }
    /* A gradient no backward op took (a frozen embedding's output, which
     * PEFT's blocks still send a gradient to) goes with the module. */
    if (m->output >= 0 && g[m->output] >= 0 && m->tensors[m->output].producer >= 0 &&
        !m->ops[m->tensors[m->output].producer].backward)
        est_sim_release(s, g[m->output]);
    s->carried_grad = m->input >= 0 ? g[m->input] : -1;
    if (s->seam->module_post) s->seam->module_post(s, inst, true);
    est_step_sync(s->st);
}

static void span(est_sim *s, est_phase_kind phase, int64_t layer, const char *label, est_unit unit) {
    est_step_span(s->st, phase, (int32_t)layer, label);
    const bool block = unit == EST_UNIT_BLOCK_FWD || unit == EST_UNIT_BLOCK_BWD;
    /* the embedding's backward is priced by what of it trains (work.c embed_backward) */
    const est_module *m = block ? block_of(s, layer, false) : unit == EST_UNIT_EMBED_BWD ? &s->embed : NULL;
    est_work_emit_block(s->st, s->run, s->k, unit, (int32_t)layer, m);
}

static void block_forward(est_sim *s, int64_t i) {
    char label[48];
    snprintf(label, sizeof label, "forward layer %lld", (long long)i);
    span(s, EST_PHASE_FORWARD, i, label, EST_UNIT_BLOCK_FWD);
    const bool ckpt = est_run_block_checkpointed(s->run, i);
    const bool backward = has_backward(block_of(s, i, false));
    if (ckpt && backward) { /* the checkpoint keeps its input */
        s->ckpt_inputs[i] = s->carried;
        keep_saved(s, s->carried, s->run->activation_offload ? est_step_tensor_bytes(s->st, s->carried) : 0);
    }
    /* a checkpointed forward saves nothing but what an op-level policy stores */
    s->no_grad_forward = ckpt;
    s->sac_store = ckpt && backward && s->sac;
    forward_module(s, block_of(s, i, ckpt), est_sim_block_inst(i));
    s->sac_store = false;
    s->no_grad_forward = false;
}

/* torch.utils.checkpoint(use_reentrant=False) (torch 2.1-2.6 checkpoint.py,
 * _checkpoint_hook and _recomputation_hook): the first forward ran with grad
 * under saved-tensor hooks whose pack replaced every saved tensor by a holder,
 * so it kept nothing but the inputs (_NoopSaveInputs), as the reentrant one.
 * Backward's first unpack in the block recomputes the forward under
 * _recomputation_hook, which keeps exactly the tensors the first forward
 * saved (frame.recomputed) and, with early stop (the default), raises once
 * the last of them is packed: the ops after it (the residual add) do not run
 * again and no output is kept. Each recomputed tensor is handed over at its
 * unpack, so it goes after its node's backward as under the reentrant path.
 * The autocast region of the recompute exits with the exception. */
/* Block i's kept checkpoint input, as the recompute reads it: unpacked from
 * the host when the inputs were saved through save_on_cpu, else referenced. */
static int32_t checkpoint_input(est_sim *s, int64_t i) {
    int32_t input = s->ckpt_inputs[i];
    if (s->run->activation_offload)
        return est_sim_alloc(s, EST_CAT_ACTIVATIONS, est_step_tensor_bytes(s->st, input),
                             "unpacked checkpoint input", 0);
    est_sim_ref(s, input);
    return input;
}

static void block_backward_non_reentrant(est_sim *s, int64_t i) {
    const int inst = est_sim_block_inst(i);
    const est_module *m = block_of(s, i, false);
    const int32_t grad = s->carried_grad;
    const int32_t input = checkpoint_input(s, i);
    s->carried = input;
    s->recompute = true;
    forward_ops(s, m, inst, last_saving_op(m));
    cache_exit(s);
    s->carried_grad = grad;
    backward_module(s, m, inst);
    s->recompute = false;
    if (!s->run->activation_offload) est_sim_release(s, input);
}

static void block_backward(est_sim *s, int64_t i) {
    char label[48];
    snprintf(label, sizeof label, "backward layer %lld", (long long)i);
    const int inst = est_sim_block_inst(i);
    const est_module *m = block_of(s, i, false);
    if (!has_backward(m)) { /* autograd never reaches it: its unit does no work */
        est_step_span(s->st, EST_PHASE_BACKWARD, (int32_t)i, label);
        est_step_unit(s->st, EST_UNIT_BLOCK_BWD, (int32_t)i);
        est_step_unit_end(s->st);
        return;
    }
    span(s, EST_PHASE_BACKWARD, i, label, EST_UNIT_BLOCK_BWD);
    const bool ckpt = est_run_block_checkpointed(s->run, i);
    /* torchtitan's op-level policy recomputes without early stop (v0.2.0
     * _apply_op_sac: early_stop = ac_config.early_stop, False by default);
     * under torch.compile the recompute is part of the backward graph (no
     * early stop either) */
    if (ckpt && s->run->ckpt_non_reentrant && !s->sac && !s->run->compiled) {
        block_backward_non_reentrant(s, i);
        return;
    }
    if (ckpt) { /* recompute with grad from the kept input, then backward */
        const int32_t grad = s->carried_grad;
        const int32_t input = checkpoint_input(s, i);
        s->carried = input;
        s->recompute = true;
        s->sac_take = s->sac;
        forward_module(s, m, inst);
        s->sac_take = false;
        cache_exit(s); /* the recompute's own autocast region */
        const int32_t out = s->carried;
        s->carried_grad = grad;
        backward_module(s, m, inst);
        s->recompute = false;
        est_sim_release(s, out);
        if (!s->run->activation_offload) est_sim_release(s, input);
        return;
    }
    backward_module(s, m, inst);
}

void est_sim_release_shared(est_sim *s) {
    for (int k = 0; k < EST_SHARED_COUNT; k++) {
        est_sim_release(s, s->shared[k]);
        s->shared[k] = -1;
    }
}

int est_sim_microbatch(est_sim *s) {
    s->carried = s->carried_grad = -1;
    for (int k = 0; k < EST_SHARED_COUNT; k++) s->shared[k] = -1;
    if (s->objective && s->objective->before_forward) s->objective->before_forward(s);
    span(s, EST_PHASE_FORWARD, -1, "forward embedding", EST_UNIT_EMBED_FWD);
    forward_module(s, &s->embed, EST_INST_EMBED);
    cublas_workspace(s, 0); /* the forward's first GEMM: block 0's (the embedding gathers) */
    for (int64_t i = 0; i < s->L; i++) block_forward(s, i);
    /* The forward's reference on the mask and on RoPE's cos/sin ends with the
     * last block (LlamaModel.forward's locals); the blocks' attention and
     * RoPE keep them (or, checkpointed, each checkpoint keeps its arguments,
     * which its recompute reads again) until block 0's backward. */
    if (!s->ckpt) est_sim_release_shared(s);
    span(s, EST_PHASE_LOSS, -1, "loss", EST_UNIT_HEAD_FWD);
    forward_module(s, &s->head, (int)s->L + 1);
    cache_exit(s); /* compute_loss leaves the autocast region */
    span(s, EST_PHASE_LOSS, -1, "loss backward", EST_UNIT_LOSS_BWD);
    const int32_t loss = s->carried;
    s->carried_grad = -1;
    stash_drain(s);
    backward_module(s, &s->head, (int)s->L + 1);
    est_sim_release(s, loss);
    for (int64_t i = s->L - 1; i >= 0; i--) block_backward(s, i);
    if (s->ckpt) est_sim_release_shared(s);
    span(s, EST_PHASE_BACKWARD, -1, "backward embedding", EST_UNIT_EMBED_BWD);
    backward_module(s, &s->embed, EST_INST_EMBED);
    est_sim_release(s, s->carried_grad);
    if (s->st->oom) return ft_errorf(s->err, s->errlen, "out of memory building the step");
    return 0;
}

/* est_sim_init clears everything but the four modules, whose builders clear
 * them (est_module_begin): they are most of the struct's hundred kilobytes. */
_Static_assert(offsetof(est_sim, block) == offsetof(est_sim, embed) + sizeof(est_module) &&
                   offsetof(est_sim, block_nograd) == offsetof(est_sim, block) + sizeof(est_module) &&
                   offsetof(est_sim, head) == offsetof(est_sim, block_nograd) + sizeof(est_module) &&
                   offsetof(est_sim, L) >= offsetof(est_sim, head) + sizeof(est_module),
               "est_sim_init: the four modules must stay side by side, before L");

/* What an op-level checkpoint policy stores (sac.h) and what the compiler
 * saves (compile.h), marked on a block as built. */
static int block_policies(est_sim *s, const est_run *run, est_module *m, char *err, size_t errlen) {
    if (s->sac) est_sac_mark(m, run);
    if (run->compiled && est_compile_partition(m) < 0)
        return ft_errorf(err, errlen, "out of memory partitioning the compiled block");
    return 0;
}

/* The distinct trainable sets of the blocks (mask and whether the input
 * requires grad), each built as a block and its no_grad twin. */
static int block_variants(est_sim *s, const est_run *run, const est_train_plan *plan, char *err, size_t errlen) {
    int32_t nv = 0;
    int64_t *first = malloc((size_t)(s->L > 0 ? s->L : 1) * sizeof *first); /* each variant's first block */
    s->layer_variant = malloc((size_t)(s->L > 0 ? s->L : 1) * sizeof *s->layer_variant);
    if (!first || !s->layer_variant) {
        free(first);
        return ft_errorf(err, errlen, "out of memory");
    }
    for (int64_t i = 0; i < s->L; i++) {
        int32_t v = 0;
        while (v < nv && !(plan->block_mask[first[v]] == plan->block_mask[i] &&
                           plan->block_in_grad[first[v]] == plan->block_in_grad[i]))
            v++;
        if (v == nv) first[nv++] = i;
        s->layer_variant[i] = v;
    }
    s->variants = malloc((size_t)(2 * (nv > 0 ? nv : 1)) * sizeof *s->variants);
    int rc = s->variants ? 0 : ft_errorf(err, errlen, "out of memory");
    for (int32_t v = 0; v < nv && rc == 0; v++) {
        est_regime g = s->regime;
        est_train_plan_regime(plan, first[v], &g);
        rc = est_module_block(run, &g, false, &s->variants[2 * v], err, errlen) ||
             est_module_block(run, &g, true, &s->variants[2 * v + 1], err, errlen) ||
             block_policies(s, run, &s->variants[2 * v], err, errlen) ? -1 : 0;
    }
    free(first);
    return rc;
}

/* Partial training (trainable.h): the run's patterns resolved over the
 * modules as built, then the embedding, the head and each distinct block
 * built again with what trains. */
static int partial_init(est_sim *s, const est_run *run, char *err, size_t errlen) {
    est_train_plan plan;
    if (est_train_plan_make(run, &s->embed, &s->block, &s->head, &plan, err, errlen)) return -1;
    est_regime ge = s->ends_regime, gh = s->ends_regime;
    est_train_plan_regime(&plan, -1, &ge);
    est_train_plan_regime(&plan, plan.L, &gh);
    int rc = est_module_embedding(run, &ge, &s->embed, err, errlen) || est_module_head(run, &gh, &s->head, err, errlen) ||
             block_variants(s, run, &plan, err, errlen) ? -1 : 0;
    if (rc == 0 && s->L > 0) { /* `block` stands for block 0 where one module is asked for */
        s->block = s->variants[2 * s->layer_variant[0]];
        s->block_nograd = s->variants[2 * s->layer_variant[0] + 1];
    }
    est_train_plan_free(&plan);
    return rc;
}

int est_sim_init(est_sim *s, const est_run *run, const est_constants *k, const est_seam *seam,
                 void *fw, est_step *st, char *err, size_t errlen) {
    memset(s, 0, offsetof(est_sim, embed));
    memset(&s->L, 0, sizeof *s - offsetof(est_sim, L));
    if (est_policy_rows(run) != run->micro_batch) { /* chosen and rejected rows side by side */
        if (!(s->own_run = malloc(sizeof *s->own_run))) return ft_errorf(err, errlen, "out of memory");
        *s->own_run = *run;
        s->own_run->micro_batch = est_policy_rows(run);
        run = s->own_run;
    }
    s->st = st;
    s->run = run;
    s->k = k;
    s->seam = seam;
    s->fw = fw;
    s->err = err;
    s->errlen = errlen;
    s->L = run->layers_used;
    s->ckpt = false;
    for (int64_t i = 0; i < s->L; i++) s->ckpt |= est_run_block_checkpointed(run, i);
    s->sac = s->ckpt && run->checkpointing == EST_CKPT_SELECTIVE_OP;
    seam->regime(run, &s->regime, &s->ends_regime);
    if (est_module_embedding(run, &s->ends_regime, &s->embed, err, errlen) ||
        est_module_block(run, &s->regime, false, &s->block, err, errlen) ||
        est_module_block(run, &s->regime, true, &s->block_nograd, err, errlen) ||
        est_module_head(run, &s->ends_regime, &s->head, err, errlen)) {
        est_sim_free(s);
        return -1;
    }
    if (run->trainable.n > 0 ? partial_init(s, run, err, errlen) : block_policies(s, run, &s->block, err, errlen)) {
        est_sim_free(s);
        return -1;
    }
    const size_t inst = (size_t)s->L + 3; /* embedding, blocks, head, a scratch instance */
    s->ids = malloc(inst * NT * sizeof *s->ids);
    s->grads = malloc(NT * sizeof *s->grads);
    s->ckpt_inputs = calloc((size_t)s->L + 1, sizeof *s->ckpt_inputs);
    if (s->sac) {
        const size_t slots = ((size_t)s->L + 1) * EST_MOD_MAX_OPS * 2;
        if ((s->sac_kept = malloc(slots * sizeof *s->sac_kept)))
            for (size_t j = 0; j < slots; j++) s->sac_kept[j] = -1;
    }
    if (!s->ids || !s->grads || !s->ckpt_inputs || (s->sac && !s->sac_kept)) {
        est_sim_free(s);
        return ft_errorf(err, errlen, "out of memory building the step");
    }
    return 0;
}

void est_sim_free(est_sim *s) {
    if (s->objective && s->objective->free) s->objective->free(s);
    s->objective = NULL;
    free(s->own_run);
    s->own_run = NULL;
    free(s->ids);
    free(s->grads);
    free(s->refs);
    free(s->ckpt_inputs);
    free(s->cache);
    free(s->sac_kept);
    free(s->variants);
    free(s->layer_variant);
    s->variants = NULL;
    s->layer_variant = NULL;
    s->ids = s->grads = s->refs = s->ckpt_inputs = s->cache = s->sac_kept = NULL;
}

int est_sim_run(est_sim *s) {
    if (s->seam->init(s)) return -1;
    if (s->objective && s->objective->init && s->objective->init(s)) return -1;
    if (s->run->empty_cache_at_start) est_step_empty_cache(s->st);
    est_step_span(s->st, EST_PHASE_INIT, -1, "first step (warm-up)");
    s->first_step = s->st->quiet = true;
    int rc = est_sim_microbatch(s);
    if (rc == 0) rc = s->seam->finish(s);
    s->first_step = s->st->quiet = false;
    if (rc == 0) rc = est_sim_microbatch(s);
    if (rc == 0) rc = s->seam->finish(s);
    if (rc == 0 && s->st->oom) rc = ft_errorf(s->err, s->errlen, "out of memory building the step");
    return rc;
}
