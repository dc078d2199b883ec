/* PyTorch + Transformers Trainer (transformers 4.40-4.49, torch 2.2-2.6), DDP,
 * as a seam on autograd's step (seam.h). Derived in docs/method.md ("hf").
 *  - Weights: fp32 under autocast (mixed precision) and fp32; bf16 for pure
 *    bf16; a LoRA base in the compute dtype (or bitsandbytes' storage), its
 *    adapters fp32 (PEFT autocast_adapter_dtype). Each parameter is its own
 *    tensor, moved to the device one by one (model.to(device)).
 *  - DDP (world > 1): Reducer::initialize_buckets (reducer.cpp) allocates
 *    each bucket's flat `gradients` at construction, in the parameters'
 *    dtype, for the parameters that require grad in reverse order, the first
 *    bucket 1 MiB (dist._DEFAULT_FIRST_BUCKET_BYTES), then bucket_cap_mb = 25;
 *    with gradient_as_bucket_view=False (the default) param.grad stays its own
 *    tensor and the Reducer copies into the bucket: no more memory.
 *  - Gradients: AccumulateGrad keeps the first gradient as .grad (it steals
 *    the tensor) and adds later ones in place; the Trainer's zero_grad sets
 *    them to None after each step (torch >= 2.0), so a step's first
 *    micro-batch runs without them and later ones with them.
 *  - Optimizer state (est_optimizer_tensor_state) per trainable tensor, from
 *    the first step on; the foreach AdamW step's _foreach_sqrt makes one
 *    temporary per parameter.
 *  - --optimizer-in-backward: each parameter is stepped in its
 *    post-accumulate-grad hook and its gradient freed.
 *  - --activation-offload (save_on_cpu): autograd.c moves saved tensors.
 *  - The model's outputs (the logits and the KV cache, module_graph.h
 *    model_output): the Trainer drops them when compute_loss returns (after
 *    the forward, before backward). A plain loop (--train-loop plain, PEFT's
 *    method_comparison/MetaMathQA/run.py train()) binds `outputs =
 *    model(**batch)` and keeps it until the next step's forward returns; it
 *    calls optimizer.zero_grad() at the start of each step, so the gradients
 *    live from backward through the step to the next step's start; and it
 *    may call torch.cuda.empty_cache() every N steps after the step
 *    (--empty-cache-steps), which the timeline's step follows. With a length
 *    distribution (seq_mean) the step before the one shown was of the mean
 *    length: the outputs it leaves are that long, and so are those of the
 *    step the timeline ends with (the "after the optimizer step" row, which
 *    is what the harness's memory_allocated() after each step reads). */
#include <stdlib.h>
#include <string.h>

#include "json_util.h"
#include "lora.h"
#include "optimizers.h"
#include "peft.h"
#include "profiles.h"
#include "timeline.h"
#include "rl.h"
#include "seam_regime.h"
#include "seam_util.h"
#include "work.h"

typedef struct hf_state {
    int32_t *grad;   /* per slot: the .grad tensor, or -1 */
    bool *stepped;   /* per slot: its optimizer state exists (made at its first step) */
    int n_slots;
    est_held_outputs outs; /* the loop's references on the model's outputs: this step's */
    est_held_outputs prev; /* and the previous step's (a plain loop) */
} hf_state;

static hf_state *state(est_sim *s) { return (hf_state *)s->fw; }

/* DDP's buckets over the trainable parameters in reverse order. */
static void ddp_buckets(est_sim *s, const est_param_ref *refs, int n) {
    const int64_t cap = (int64_t)s->k->value[EST_K_DDP_BUCKET_CAP_BYTES];
    int64_t bucket = 0, limit = INT64_C(1) << 20; /* the first bucket: 1 MiB */
    for (int i = n - 1; i >= 0; i--) {
        const est_mparam *p = est_sim_param(s, refs[i].inst, refs[i].p);
        if (!p->trainable) continue;
        bucket += est_sim_param_elems(s, refs[i].inst, refs[i].p) * p->elem_bytes;
        if (bucket >= limit) {
            est_sim_alloc(s, EST_CAT_COMM, bucket, "DDP bucket", 0);
            bucket = 0;
            limit = cap;
        }
    }
    if (bucket > 0) est_sim_alloc(s, EST_CAT_COMM, bucket, "DDP bucket", 0);
}

/* DDP's constructor first makes every rank's module states equal to rank 0's
 * (torch/distributed/utils.py _sync_module_states, torch 2.2-2.15): every
 * parameter, trainable or frozen, in registration order, goes through
 * dist._broadcast_coalesced with DDP's broadcast_bucket_size of 250 MiB.
 * c10d's broadcast_coalesced (csrc/distributed/c10d/comm.cpp) groups them by
 * dtype into buckets closed once they reach that size
 * (compute_bucket_assignment_by_size), flattens each into a new tensor on
 * every rank (flatten_dense_tensors: a copy), keeps at most two buckets in
 * flight, and copies the result back into the parameters in place. So the
 * set-up holds the model plus up to two flat copies of 250 MiB or more; a
 * LoRA model, whose step holds little beyond its frozen base, can peak there.
 * A dtype is told apart by its storage bits per element. Buffers (rotary
 * inv_freq, a few hundred bytes) are left out. */
#define DDP_BROADCAST_BUCKET_BYTES (INT64_C(250) << 20)
#define DDP_BROADCASTS_IN_FLIGHT 2
#define DDP_DTYPE_KINDS 4

static int storage_bits(est_sim *s, est_param_ref r) {
    const int64_t elems = est_sim_param_elems(s, r.inst, r.p);
    return elems > 0 ? (int)(8 * est_sim_param_storage(s, r.inst, r.p) / elems) : 0;
}

typedef struct ddp_flat {
    int first;     /* the bucket's first tensor, in registration order */
    int64_t bytes;
} ddp_flat;

static int by_first_tensor(const void *a, const void *b) {
    return ((const ddp_flat *)a)->first - ((const ddp_flat *)b)->first;
}

/* The buckets as compute_bucket_assignment_by_size makes them: one open per
 * dtype, closed at the size limit, the open ones closed last; sorted by their
 * first tensor. Returns the count, or -1 out of memory. */
static int ddp_broadcast_buckets(est_sim *s, const est_param_ref *refs, int n, ddp_flat **out) {
    ddp_flat *f = malloc((size_t)(n > 0 ? n : 1) * sizeof *f), open[DDP_DTYPE_KINDS];
    if (!f) return -1;
    int bits[DDP_DTYPE_KINDS], kinds = 0, count = 0;
    for (int i = 0; i < n; i++) {
        const int b = storage_bits(s, refs[i]);
        int k = 0;
        while (k < kinds && bits[k] != b) k++;
        if (k == kinds) {
            if (kinds == DDP_DTYPE_KINDS) k = kinds - 1; /* more dtypes than kept: share the last */
            else bits[kinds++] = b;
            open[k] = (ddp_flat){.first = i, .bytes = 0};
        }
        if (open[k].bytes == 0) open[k].first = i;
        open[k].bytes += est_sim_param_storage(s, refs[i].inst, refs[i].p);
        if (open[k].bytes >= DDP_BROADCAST_BUCKET_BYTES) {
            f[count++] = open[k];
            open[k].bytes = 0;
        }
    }
    for (int k = 0; k < kinds; k++)
        if (open[k].bytes > 0) f[count++] = open[k];
    qsort(f, (size_t)count, sizeof *f, by_first_tensor);
    *out = f;
    return count;
}

static int ddp_sync_module_states(est_sim *s, const est_param_ref *refs, int n) {
    ddp_flat *f;
    const int count = ddp_broadcast_buckets(s, refs, n, &f);
    if (count < 0) return -1;
    int32_t in_flight[DDP_BROADCASTS_IN_FLIGHT];
    int flying = 0;
    for (int b = 0; b < count; b++) {
        if (flying == DDP_BROADCASTS_IN_FLIGHT) { /* the oldest finishes first */
            est_sim_release(s, in_flight[0]);
            in_flight[0] = in_flight[1];
            flying = 1;
        }
        in_flight[flying++] = est_sim_alloc(s, EST_CAT_COMM, f[b].bytes, "DDP set-up broadcast", 0);
    }
    for (int j = 0; j < flying; j++) est_sim_release(s, in_flight[j]);
    free(f);
    return 0;
}

/* One trainable tensor's optimizer state, made at its first step (torch's
 * _init_group, bitsandbytes' init_state: lazily); paged state is on the host. */
static void optimizer_state(est_sim *s, int inst, int p) {
    hf_state *h = (hf_state *)s->fw;
    const int slot = est_sim_grad_slot(s, inst, p);
    const est_mparam *pp = est_sim_param(s, inst, p);
    if (!pp->trainable || h->stepped[slot] || (!est_lora_a_stepped(s->run) && est_lora_is_a(pp->name))) return;
    h->stepped[slot] = true;
    est_tensor_state ts;
    est_optimizer_tensor_state(s->run, pp->rows * pp->copies, pp->cols > 1 ? pp->cols : 0, pp->elem_bytes, &ts);
    for (int j = 0; j < ts.count; j++) est_sim_alloc(s, EST_CAT_OPTIMIZER, ts.device[j], pp->name, 0);
    s->st->cpu_bytes += ts.paged_bytes;
    /* AdaLoRA's RankAllocator keeps ipt, exp_avg_ipt, exp_avg_unc per tensor
     * from its first update_and_allocate on (peft_vec.h) */
    for (int j = 0; j < 3 && s->run->peft == EST_PEFT_ADALORA && pp->kind == EST_PK_ADAPTER; j++)
        est_sim_alloc(s, EST_CAT_OPTIMIZER, pp->rows * pp->cols * pp->copies * 4, "RankAllocator ipt", 0);
}

/* The cuBLAS workspaces a process already holds (est_run
 * allocated_at_start_bytes): CublasHandlePool.cpp keeps each (handle,
 * stream)'s workspace in cublas_handle_stream_to_workspace for the life of
 * the process, and torch.cuda.empty_cache() cannot release an allocated
 * block, so a run that follows another in the same process finds the earlier
 * run's two (the Python thread's, autograd's device thread's) allocated
 * before its model, each in its own segment, and its first GEMMs allocate
 * none. As many as the bytes cover, at most those two; a remainder (the
 * 1 MiB cuBLASLt workspace of a biased Linear, docs/method.md) is left out as
 * it is in a fresh run. docs/method.md ("cuBLAS workspace"). */
static void carried_workspaces(est_sim *s) {
    const int64_t ws = (int64_t)s->k->value[EST_K_CUBLAS_WORKSPACE_BYTES];
    if (ws <= 0) return;
    const int64_t n = s->run->allocated_at_start_bytes / ws;
    for (int thread = 0; thread < 2 && thread < n; thread++) {
        est_sim_alloc(s, EST_CAT_WORKSPACE, ws,
                      thread ? "cuBLAS workspace (backward thread)" : "cuBLAS workspace", 0);
        s->st->cublas_rows[thread] = 1; /* live from the first row */
        *(thread ? &s->bwd_cublas : &s->fwd_cublas) = true;
    }
}

static int hf_init(est_sim *s) {
    const int n_slots = est_sim_slots(s);
    hf_state *h = state(s);
    h->n_slots = n_slots;
    h->grad = malloc((size_t)n_slots * sizeof *h->grad);
    h->stepped = calloc((size_t)n_slots, sizeof *h->stepped);
    est_param_ref *refs = malloc((size_t)n_slots * sizeof *refs);
    if (!h->grad || !h->stepped || !refs) {
        free(refs);
        s->st->oom = true;
        return -1;
    }
    for (int i = 0; i < n_slots; i++) h->grad[i] = -1;
    const int n = est_sim_params(s, false, refs);
    int64_t trainable = 0, total = 0;
    est_step_span(s->st, EST_PHASE_INIT, -1, "model loaded");
    carried_workspaces(s);
    for (int i = 0; i < n; i++) {
        const est_mparam *p = est_sim_param(s, refs[i].inst, refs[i].p);
        est_sim_alloc(s, EST_CAT_PARAMS, est_sim_param_storage(s, refs[i].inst, refs[i].p), p->name, 0);
        total += est_sim_param_elems(s, refs[i].inst, refs[i].p) * (p->trainable ? p->elem_bytes : s->regime.act);
        if (p->trainable) trainable += est_sim_param_elems(s, refs[i].inst, refs[i].p) * p->elem_bytes;
    }
    est_sim_modeling_buffers(s, s->regime.weight);
    est_step_span(s->st, EST_PHASE_INIT, -1, "training state");
    if (est_run_world(s->run) > 1 && ddp_sync_module_states(s, refs, n) < 0) {
        free(refs);
        s->st->oom = true;
        return -1;
    }
    if (est_run_world(s->run) > 1) ddp_buckets(s, refs, n);
    if (s->run->grad_accum > 1) /* a later micro-batch: every .grad exists */
        for (int i = 0; i < n; i++) {
            const est_mparam *p = est_sim_param(s, refs[i].inst, refs[i].p);
            if (p->trainable)
                h->grad[refs[i].slot] = est_sim_alloc(
                    s, EST_CAT_GRADS, est_sim_param_elems(s, refs[i].inst, refs[i].p) * p->elem_bytes,
                    p->name, 0);
        }
    free(refs);
    /* from_pretrained materializes the weights on the CPU in every rank's
     * process before .to(device) (a quantized load reads one checkpoint shard
     * at a time); save_on_cpu keeps pinned copies of the saved tensors. */
    s->st->cpu_load_bytes = total;
    if (s->run->quant != EST_QUANT_NONE) {
        int64_t shard = (int64_t)s->k->value[EST_K_HF_CHECKPOINT_SHARD_BYTES];
        if (shard < s->st->cpu_load_bytes) s->st->cpu_load_bytes = shard;
    }
    (void)trainable;
    return 0;
}

static void hf_grad(est_sim *s, int inst, int p, int32_t grad) {
    hf_state *h = state(s);
    const int slot = est_sim_grad_slot(s, inst, p);
    if (s->run->optimizer_in_backward) {
        /* stepped in its hook: the single-tensor step's temporaries, then freed */
        const est_mparam *pp = est_sim_param(s, inst, p);
        optimizer_state(s, inst, p);
        est_tensor_state ts;
        est_optimizer_tensor_state(s->run, pp->rows * pp->copies, pp->cols > 1 ? pp->cols : 0,
                                   pp->elem_bytes, &ts);
        int32_t tmp = est_sim_alloc(s, EST_CAT_WORKSPACE, ts.single_bytes + ts.paged_bytes, "step", 0);
        est_sim_release(s, tmp);
        est_sim_release(s, grad);
        return;
    }
    if (h->grad[slot] < 0) h->grad[slot] = grad;
    else est_sim_release(s, grad); /* added in place into .grad */
}

/* optimizer.zero_grad() / model.zero_grad() (set_to_none): every .grad goes. */
static void zero_grad(est_sim *s) {
    hf_state *h = state(s);
    for (int i = 0; i < h->n_slots; i++) {
        est_sim_release(s, h->grad[i]);
        h->grad[i] = -1;
    }
}

/* peft 0.19 optimizers/lorafa.py LoraFAOptimizer.step, per lora_B: the
 * projected gradient (grad_B @ (A A^T)^-1 under bf16 autocast, then .to(fp32))
 * and denom_B = exp_avg_sq_B.sqrt(): two fp32 tensors of B's size at a time;
 * the moments are updated in place. */
static int64_t lorafa_step_bytes(const est_mparam *p) { return p->rows * p->cols * p->copies * 8; }

/* The loop takes a reference on each model output as the forward makes it
 * (not again when a checkpointed block recomputes). */
static void hf_op_post(est_sim *s, int inst, int op, bool backward) {
    est_hold_outputs(s, &state(s)->outs, inst, op, backward);
}

/* The forward has returned: the Trainer drops the outputs (compute_loss
 * returns); a plain loop rebinds `outputs`, dropping the previous step's. */
static void hf_module_post(est_sim *s, int inst, bool backward) {
    if (backward || s->recompute || inst != s->L + 1) return;
    hf_state *h = state(s);
    if (s->run->train_loop == EST_LOOP_TRAINER) {
        est_release_outputs(s, &h->outs);
        return;
    }
    est_release_outputs(s, &h->prev);
    const est_held_outputs held = h->prev; /* this step's become the previous */
    h->prev = h->outs;
    h->outs = held;
}

/* A plain loop's step begins with optimizer.zero_grad(). */
static void hf_module_pre(est_sim *s, int inst, bool backward) {
    if (!backward && inst == EST_INST_EMBED && s->run->train_loop == EST_LOOP_PLAIN &&
        s->run->grad_accum == 1)
        zero_grad(s);
}

/* The outputs a step of the mean length leaves (the model's output tensors at
 * (mean + N) / (s + N) of their size), in place of this step's. The
 * embedding's (prefix tuning's cache of the virtual tokens, block_prompt.c)
 * do not depend on the length. */
static void mean_length_outputs(est_sim *s) {
    hf_state *h = state(s);
    const double N = (double)(est_model_positions(s->run) - s->run->seq_len);
    const double f = (s->run->seq_mean + N) / ((double)s->run->seq_len + N);
    est_release_outputs(s, &h->prev);
    for (int64_t inst = 0; inst <= s->L + 1; inst++) {
        const est_module *m = inst == 0 ? &s->embed : inst <= s->L ? &s->block : &s->head;
        for (int t = 0; t < m->n_tensors; t++) {
            const est_mtensor *x = &m->tensors[t];
            if (!x->model_output) continue;
            const int64_t bytes = (int64_t)((double)x->elems * (inst == 0 ? 1.0 : f) + 0.5) * x->elem_bytes;
            const int32_t id = est_sim_alloc(s, EST_CAT_LOGITS, bytes, "previous step's outputs", 0);
            if (!est_held_push(s, &h->prev, id)) return;
        }
    }
}

/* After a plain loop's optimizer step: its outputs stay (as a step of the
 * mean length leaves them), the cache may be emptied before the next step,
 * and the timeline's step ends with what memory_allocated() reads then. */
static void after_plain_step(est_sim *s) {
    if (s->run->seq_mean > 0 && s->run->seq_mean < (double)s->run->seq_len) mean_length_outputs(s);
    if (s->first_step && s->run->empty_cache_steps > 0) est_step_empty_cache(s->st);
    if (!s->first_step) est_step_span(s->st, EST_PHASE_OPTIMIZER, -1, EST_AFTER_STEP_LABEL);
}

static int hf_finish(est_sim *s) {
    hf_state *h = state(s);
    if (s->run->optimizer_in_backward) {
        /* no reduction or step of their own: booked on the last moment */
        est_work_emit(s->st, s->run, s->k, EST_UNIT_REDUCE, -1);
        est_work_emit(s->st, s->run, s->k, EST_UNIT_OPTIMIZER, -1);
        return 0;
    }
    est_step_span(s->st, EST_PHASE_REDUCE, -1, est_lora_on(s->run) ? "adapter gradient all-reduce"
                                                                  : "gradient all-reduce");
    est_work_emit(s->st, s->run, s->k, EST_UNIT_REDUCE, -1);
    est_step_span(s->st, EST_PHASE_OPTIMIZER, -1, est_optimizer_step_label(s->run));
    est_work_emit(s->st, s->run, s->k, EST_UNIT_OPTIMIZER, -1);
    est_param_ref *refs = malloc((size_t)h->n_slots * sizeof *refs);
    int32_t *tmp = malloc((size_t)h->n_slots * sizeof *tmp);
    if (!refs || !tmp) {
        free(refs);
        free(tmp);
        s->st->oom = true;
        return -1;
    }
    const int n = est_sim_params(s, false, refs);
    int64_t paged_largest = 0;
    for (int i = 0; i < n; i++) optimizer_state(s, refs[i].inst, refs[i].p);
    for (int i = 0; i < n; i++) {
        const est_mparam *p = est_sim_param(s, refs[i].inst, refs[i].p);
        tmp[i] = -1;
        if (!p->trainable || (!est_lora_a_stepped(s->run) && est_lora_is_a(p->name))) continue;
        est_tensor_state ts;
        est_optimizer_tensor_state(s->run, p->rows * p->copies, p->cols > 1 ? p->cols : 0, p->elem_bytes, &ts);
        if (s->run->lora.variant == EST_LORA_FA) { /* LoraFAOptimizer: tensor by tensor */
            ts.foreach_bytes = 0;
            ts.single_bytes = lorafa_step_bytes(p);
        }
        if (ts.foreach_bytes > 0) tmp[i] = est_sim_alloc(s, EST_CAT_WORKSPACE, ts.foreach_bytes, "foreach temporary", 0);
        if (ts.paged_bytes > paged_largest) paged_largest = ts.paged_bytes;
        if (ts.foreach_bytes == 0 && ts.single_bytes > 0) /* one tensor at a time (Adafactor) */
            est_sim_release(s, est_sim_alloc(s, EST_CAT_WORKSPACE, ts.single_bytes, "step", 0));
    }
    /* paged state migrates to the device one tensor at a time */
    if (paged_largest > 0) est_sim_release(s, est_sim_alloc(s, EST_CAT_WORKSPACE, paged_largest, "paged state", 0));
    const int64_t scalars = est_optimizer_step_scalar_bytes(s->run);
    if (scalars > 0) est_sim_release(s, est_sim_alloc(s, EST_CAT_WORKSPACE, scalars, "found_inf", 0));
    for (int i = 0; i < n; i++) est_sim_release(s, tmp[i]);
    free(refs);
    free(tmp);
    /* Trainer: model.zero_grad() (set_to_none); with accumulation the next
     * micro-batches carry them, which the timeline's step starts with. A
     * plain loop zeroes them when its next step begins (hf_module_pre). */
    if (s->run->grad_accum == 1 && s->run->train_loop == EST_LOOP_TRAINER) zero_grad(s);
    if (s->run->train_loop == EST_LOOP_PLAIN) after_plain_step(s);
    return 0;
}

static void hf_free(est_sim *s) {
    free(state(s)->grad);
    free(state(s)->stepped);
    est_held_free(&state(s)->outs);
    est_held_free(&state(s)->prev);
}

const est_seam est_seam_hf = {
    .name = "hf",
    .regime = est_hf_regime,
    .init = hf_init,
    .module_pre = hf_module_pre,
    .module_post = hf_module_post,
    .op_post = hf_op_post,
    .grad = hf_grad,
    .finish = hf_finish,
};

int est_step_hf(const est_run *run, const est_constants *k, est_step *st, char *err, size_t errlen) {
    hf_state h = {0};
    est_sim s;
    if (est_sim_init(&s, run, k, &est_seam_hf, &h, st, err, errlen)) return -1;
    s.objective = est_rl_objective(run); /* TRL's preference trainers (rl.c) */
    int rc = est_sim_run(&s);
    hf_free(&s);
    est_sim_free(&s);
    if (rc == 0 && st->oom) rc = -1;
    return rc < 0 ? (err[0] ? -1 : ft_errorf(err, errlen, "out of memory building the step")) : 0;
}
