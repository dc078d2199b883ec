#include "torch_step.h"

#include <stdio.h>
#include <string.h>

#include "hf_modeling.h"
#include "json_util.h"
#include "work.h"

void est_live_add(int64_t live[EST_CAT_COUNT], est_category cat, int64_t bytes) {
    live[cat] += bytes;
}

int est_push(est_step *st, est_phase_kind kind, int32_t layer, const char *label,
             const int64_t live[EST_CAT_COUNT], char *err, size_t errlen) {
    est_step_moment(st, kind, layer, label, live);
    if (st->oom) return ft_errorf(err, errlen, "out of memory building the step");
    return 0;
}

int est_push_unit(est_step *st, const est_run *run, const est_constants *k, est_phase_kind kind,
                  int32_t layer, const char *label, const int64_t live[EST_CAT_COUNT],
                  est_unit unit, char *err, size_t errlen) {
    est_step_moment(st, kind, layer, label, live);
    est_work_emit(st, run, k, unit, layer);
    if (st->oom) return ft_errorf(err, errlen, "out of memory building the step");
    return 0;
}

/* One sweep: the run, the framework's terms, and the modeling code's tensors
 * (hf_modeling.c), computed once. */
typedef struct sweep {
    const est_run *run;
    const est_constants *k;
    const est_sweep_terms *t;
    est_step *st;
    char *err;
    size_t errlen;
    int64_t L;
    bool ckpt;                 /* full checkpointing */
    int64_t kept;              /* what one block keeps from its forward to its backward */
    int64_t block_full;        /* one block's whole saved set */
    int64_t fwd_inside;        /* live inside a block's forward */
    int64_t bwd_working;       /* gradients in flight inside a block's backward */
    int64_t final_norm, hidden, shared;
    int64_t logits_fwd, logits_bwd;
    int64_t head_gathered_fwd; /* the LM head's gathered weight from its forward on */
    int64_t bbase[EST_CAT_COUNT]; /* resident from the loss backward on */
} sweep;

static void sweep_init(sweep *w, const est_run *run, const est_constants *k,
                       const est_sweep_terms *t, est_step *st, char *err, size_t errlen) {
    const est_dtypes d = est_dtypes_of(run);
    *w = (sweep){.run = run, .k = k, .t = t, .st = st, .err = err, .errlen = errlen};
    w->L = run->layers_used;
    w->ckpt = run->checkpointing == EST_CKPT_FULL;
    est_terms saved, logits_fwd, logits_bwd;
    est_block_saved(run, &saved);
    w->kept = est_block_kept_bytes(run);
    w->block_full = saved.total;
    /* Inside a checkpointed block's no-grad forward only a few tensors coexist:
     * the SwiGLU gate, up and product. */
    w->fwd_inside = w->ckpt ? est_block_ckpt_forward_bytes(run)
                            : w->block_full + est_block_forward_transient(run);
    w->bwd_working = est_block_backward_working(run);
    w->final_norm = est_final_norm_saved(run);
    est_logits_forward(run, &logits_fwd);
    est_logits_backward(run, &logits_bwd);
    w->logits_fwd = logits_fwd.total;
    w->logits_bwd = logits_bwd.total;
    w->hidden = est_tokens(run) * run->model.hidden_size * d.resid; /* the residual stream */
    w->shared = est_model_saved_bytes(run);                          /* the padding mask */
    /* Without zero.Init the head's gathered weight is the kept one until the
     * head's backward gathers it afresh. */
    w->head_gathered_fwd = t->kept_are_gathered && t->head_cast_weights ? 0 : t->head_gathered;
    for (int c = 0; c < EST_CAT_COUNT; c++) w->bbase[c] = t->base[c] + t->backward_only[c];
}

static int push(sweep *w, est_phase_kind kind, int64_t layer, const char *label,
                const int64_t live[EST_CAT_COUNT], est_unit unit) {
    return est_push_unit(w->st, w->run, w->k, kind, (int32_t)layer, label, live, unit, w->err,
                         w->errlen);
}

/* The embedding lookup (its output is the first residual), then each block. */
static int sweep_forward(sweep *w) {
    const est_sweep_terms *t = w->t;
    int64_t live[EST_CAT_COUNT];
    memcpy(live, t->base, sizeof live);
    est_live_add(live, EST_CAT_COMM, t->head_gathered);
    est_live_add(live, EST_CAT_ACTIVATIONS, w->hidden);
    if (t->root_unshard_staging > w->hidden)
        est_live_add(live, EST_CAT_COMM, t->root_unshard_staging - w->hidden);
    if (push(w, EST_PHASE_FORWARD, -1, "forward embedding", live, EST_UNIT_EMBED_FWD)) return -1;
    for (int64_t i = 0; i < w->L; i++) {
        memcpy(live, t->base, sizeof live);
        est_live_add(live, EST_CAT_ACTIVATIONS, w->shared + i * w->kept + w->fwd_inside + w->hidden);
        /* Without zero.Init the block's gathered Linear weights are the ones
         * autograd goes on to keep: counted once, as kept weights. */
        est_live_add(live, EST_CAT_COMM,
                     t->block_gathered - (t->kept_are_gathered ? t->block_cast_weights : 0));
        est_live_add(live, EST_CAT_PARAMS, (i + 1) * t->block_cast_weights);
        est_live_add(live, EST_CAT_COMM, (i + 1) * t->block_gathered_kept);
        if (t->block_unshard_staging > w->fwd_inside)
            est_live_add(live, EST_CAT_COMM, t->block_unshard_staging - w->fwd_inside);
        char label[48];
        snprintf(label, sizeof label, "forward layer %lld", (long long)i);
        if (push(w, EST_PHASE_FORWARD, i, label, live, EST_UNIT_BLOCK_FWD)) return -1;
    }
    return 0;
}

/* Final norm, LM head and loss (every block's kept tensors are still live),
 * the loss backward (the log-softmax gradient) and the LM head backward (its
 * weight gradient appears; the logits are gone). The head is not gathered
 * again for its backward: DeepSpeed keeps it from its forward (its reuse in
 * backward comes next, within stage3_max_reuse_distance:
 * partitioned_param_coordinator.py __params_to_release, 0.14.2). */
static int sweep_loss(sweep *w) {
    const est_sweep_terms *t = w->t;
    const int64_t L = w->L, kept_all = w->shared + L * w->kept + w->final_norm;
    const int64_t weights = L * t->block_cast_weights + t->head_cast_weights;
    int64_t live[EST_CAT_COUNT];
    memcpy(live, t->base, sizeof live);
    est_live_add(live, EST_CAT_ACTIVATIONS, kept_all);
    est_live_add(live, EST_CAT_LOGITS, w->logits_fwd);
    est_live_add(live, EST_CAT_COMM, w->head_gathered_fwd);
    est_live_add(live, EST_CAT_PARAMS, weights);
    est_live_add(live, EST_CAT_COMM, L * t->block_gathered_kept);
    if (push(w, EST_PHASE_LOSS, -1, "loss", live, EST_UNIT_HEAD_FWD)) return -1;

    memcpy(live, w->bbase, sizeof live);
    est_live_add(live, EST_CAT_ACTIVATIONS, kept_all);
    est_live_add(live, EST_CAT_LOGITS, w->logits_bwd);
    est_live_add(live, EST_CAT_COMM, w->head_gathered_fwd);
    est_live_add(live, EST_CAT_PARAMS, weights);
    est_live_add(live, EST_CAT_COMM, L * t->block_gathered_kept + t->block_prefetched_bwd);
    if (push(w, EST_PHASE_LOSS, -1, "loss backward", live, EST_UNIT_LOSS_BWD)) return -1;

    memcpy(live, w->bbase, sizeof live);
    est_live_add(live, EST_CAT_ACTIVATIONS, kept_all + w->hidden);
    est_live_add(live, EST_CAT_COMM, w->head_gathered_fwd);
    est_live_add(live, EST_CAT_PARAMS, weights);
    est_live_add(live, EST_CAT_GRADS, t->head_grads + t->head_grad_transient);
    est_live_add(live, EST_CAT_COMM, L * t->block_gathered_kept + t->block_prefetched_bwd);
    est_live_add(live, EST_CAT_GRADS, t->root_grad_unsharded + t->head_grad_cast);
    return push(w, EST_PHASE_BACKWARD, -1, "backward LM head", live, EST_UNIT_HEAD_BWD);
}

/* Each block's backward, last block first, then the embedding's (the last
 * gradients appear). */
static int sweep_backward(sweep *w) {
    const est_sweep_terms *t = w->t;
    const int64_t L = w->L;
    int64_t live[EST_CAT_COUNT];
    for (int64_t i = L - 1; i >= 0; i--) {
        memcpy(live, w->bbase, sizeof live);
        /* Blocks below i still hold what they kept; block i holds its full saved
         * set (recomputed under checkpointing, beside the checkpoint's own input,
         * which stays until the block is done) plus the gradients in flight. */
        const int64_t act =
            w->shared + i * w->kept + w->block_full + (w->ckpt ? w->kept : 0) + w->bwd_working;
        est_live_add(live, EST_CAT_ACTIVATIONS, act);
        est_live_add(live, EST_CAT_COMM, t->block_gathered);
        est_live_add(live, EST_CAT_PARAMS, (i + 1) * t->block_cast_weights + t->block_recompute_kept);
        est_live_add(live, EST_CAT_GRADS,
                     t->head_grads + (L - i) * t->block_grads + t->block_grad_transient);
        if (i <= t->late_grads_layer) est_live_add(live, EST_CAT_GRADS, t->late_grads);
        est_live_add(live, EST_CAT_COMM, (i + 1) * t->block_gathered_kept);
        if (i >= 1) est_live_add(live, EST_CAT_COMM, t->block_prefetched_bwd);
        est_live_add(live, EST_CAT_GRADS, t->root_grad_unsharded);
        char label[48];
        snprintf(label, sizeof label, "backward layer %lld", (long long)i);
        if (push(w, EST_PHASE_BACKWARD, i, label, live, EST_UNIT_BLOCK_BWD)) return -1;
    }
    memcpy(live, w->bbase, sizeof live);
    est_live_add(live, EST_CAT_ACTIVATIONS, w->hidden);
    est_live_add(live, EST_CAT_GRADS, t->head_grads + L * t->block_grads + t->embed_grads +
                                          t->head_grad_transient + t->late_grads +
                                          t->root_grad_unsharded);
    est_live_add(live, EST_CAT_COMM, t->head_gathered);
    return push(w, EST_PHASE_BACKWARD, -1, "backward embedding", live, EST_UNIT_EMBED_BWD);
}

int est_push_forward_backward(const est_run *run, const est_constants *k, const est_sweep_terms *t,
                              est_step *st, char *err, size_t errlen) {
    sweep w;
    sweep_init(&w, run, k, t, st, err, errlen);
    if (sweep_forward(&w) || sweep_loss(&w)) return -1;
    return sweep_backward(&w);
}
