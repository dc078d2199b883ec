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

int est_push_forward_backward(const est_run *run, const est_constants *k, const est_sweep_terms *t,
                              est_step *st, char *err, size_t errlen) {
    const int64_t L = run->layers_used;
    const est_dtypes d = est_dtypes_of(run);
    const int64_t T = est_tokens(run), h = run->model.hidden_size;
    const bool ckpt = run->checkpointing == EST_CKPT_FULL;

    est_terms saved;
    est_block_saved(run, &saved);
    const int64_t kept = est_block_kept_bytes(run);
    const int64_t block_full = saved.total;
    /* Inside a checkpointed block's no-grad forward only a few tensors coexist:
     * the SwiGLU gate, up and product. */
    const int64_t fwd_inside =
        ckpt ? est_block_ckpt_forward_bytes(run) : block_full + est_block_forward_transient(run);
    const int64_t bwd_working = est_block_backward_working(run);
    const int64_t final_norm = est_final_norm_saved(run);
    est_terms logits_fwd, logits_bwd;
    est_logits_forward(run, &logits_fwd);
    est_logits_backward(run, &logits_bwd);
    const int64_t hidden = T * h * d.resid; /* the residual stream itself */
    const int64_t shared = est_model_saved_bytes(run); /* the padding mask */

    int64_t live[EST_CAT_COUNT];
    char label[48];

    /* Embedding lookup: its output is the first residual. */
    memcpy(live, t->base, sizeof live);
    est_live_add(live, EST_CAT_COMM, t->head_gathered);
    est_live_add(live, EST_CAT_ACTIVATIONS, hidden);
    if (t->root_unshard_staging > hidden)
        est_live_add(live, EST_CAT_COMM, t->root_unshard_staging - hidden);
    if (est_push_unit(st, run, k, EST_PHASE_FORWARD, -1, "forward embedding", live, EST_UNIT_EMBED_FWD, err,
                  errlen))
        return -1;

    for (int64_t i = 0; i < L; i++) {
        memcpy(live, t->base, sizeof live);
        est_live_add(live, EST_CAT_ACTIVATIONS, shared + i * kept + fwd_inside + hidden);
        /* Without zero.Init the block's gathered Linear weights are the ones
         * autograd goes on to keep: counted once, as kept weights. */
        est_live_add(live, EST_CAT_COMM,
                     t->block_gathered - (t->kept_are_gathered ? t->block_cast_weights : 0));
        est_live_add(live, EST_CAT_PARAMS, (i + 1) * t->block_cast_weights);
        est_live_add(live, EST_CAT_COMM, (i + 1) * t->block_gathered_kept);
        if (t->block_unshard_staging > fwd_inside)
            est_live_add(live, EST_CAT_COMM, t->block_unshard_staging - fwd_inside);
        snprintf(label, sizeof label, "forward layer %lld", (long long)i);
        if (est_push_unit(st, run, k, EST_PHASE_FORWARD, (int32_t)i, label, live, EST_UNIT_BLOCK_FWD, err,
                      errlen))
            return -1;
    }

    /* Final norm, LM head and loss: every block's kept tensors are still live.
     * The head's gathered weight is the kept one without zero.Init until the
     * head's backward gathers it afresh. */
    const int64_t head_gathered_fwd =
        t->kept_are_gathered && t->head_cast_weights ? 0 : t->head_gathered;
    memcpy(live, t->base, sizeof live);
    est_live_add(live, EST_CAT_ACTIVATIONS, shared + L * kept + final_norm);
    est_live_add(live, EST_CAT_LOGITS, logits_fwd.total);
    est_live_add(live, EST_CAT_COMM, head_gathered_fwd);
    est_live_add(live, EST_CAT_PARAMS, L * t->block_cast_weights + t->head_cast_weights);
    est_live_add(live, EST_CAT_COMM, L * t->block_gathered_kept);
    if (est_push_unit(st, run, k, EST_PHASE_LOSS, -1, "loss", live, EST_UNIT_HEAD_FWD, err, errlen)) return -1;

    /* From here on the framework's backward-only buffers exist. */
    int64_t bbase[EST_CAT_COUNT];
    for (int c = 0; c < EST_CAT_COUNT; c++) bbase[c] = t->base[c] + t->backward_only[c];

    /* Loss backward: the log-softmax gradient. */
    memcpy(live, bbase, sizeof live);
    est_live_add(live, EST_CAT_ACTIVATIONS, shared + L * kept + final_norm);
    est_live_add(live, EST_CAT_LOGITS, logits_bwd.total);
    est_live_add(live, EST_CAT_COMM, head_gathered_fwd);
    est_live_add(live, EST_CAT_PARAMS, L * t->block_cast_weights + t->head_cast_weights);
    est_live_add(live, EST_CAT_COMM, L * t->block_gathered_kept + t->block_prefetched_bwd);
    if (est_push_unit(st, run, k, EST_PHASE_LOSS, -1, "loss backward", live, EST_UNIT_LOSS_BWD, err, errlen))
        return -1;

    /* LM head backward: its weight gradient appears; the logits are gone. The
     * head is not gathered again: DeepSpeed keeps it from its forward (its
     * reuse in backward comes next, within stage3_max_reuse_distance:
     * partitioned_param_coordinator.py __params_to_release, 0.14.2). */
    memcpy(live, bbase, sizeof live);
    est_live_add(live, EST_CAT_ACTIVATIONS, shared + L * kept + final_norm + hidden);
    est_live_add(live, EST_CAT_COMM, head_gathered_fwd);
    est_live_add(live, EST_CAT_PARAMS, L * t->block_cast_weights + t->head_cast_weights);
    est_live_add(live, EST_CAT_GRADS, t->head_grads + t->head_grad_transient);
    est_live_add(live, EST_CAT_COMM, L * t->block_gathered_kept + t->block_prefetched_bwd);
    est_live_add(live, EST_CAT_GRADS, t->root_grad_unsharded + t->head_grad_cast);
    if (est_push_unit(st, run, k, EST_PHASE_BACKWARD, -1, "backward LM head", live, EST_UNIT_HEAD_BWD, err,
                  errlen))
        return -1;

    for (int64_t i = L - 1; i >= 0; i--) {
        memcpy(live, bbase, sizeof live);
        /* Blocks below i still hold what they kept; block i holds its full saved
         * set (recomputed under checkpointing, beside the checkpoint's own input,
         * which stays until the block is done) plus the gradients in flight. */
        const int64_t act = shared + i * kept + block_full + (ckpt ? kept : 0) + bwd_working;
        est_live_add(live, EST_CAT_ACTIVATIONS, act);
        est_live_add(live, EST_CAT_COMM, t->block_gathered);
        est_live_add(live, EST_CAT_PARAMS, (i + 1) * t->block_cast_weights + t->block_recompute_kept);
        est_live_add(live, EST_CAT_GRADS,
                     t->head_grads + (L - i) * t->block_grads + t->block_grad_transient);
        if (i <= t->late_grads_layer) est_live_add(live, EST_CAT_GRADS, t->late_grads);
        est_live_add(live, EST_CAT_COMM, (i + 1) * t->block_gathered_kept);
        if (i >= 1) est_live_add(live, EST_CAT_COMM, t->block_prefetched_bwd);
        est_live_add(live, EST_CAT_GRADS, t->root_grad_unsharded);
        snprintf(label, sizeof label, "backward layer %lld", (long long)i);
        if (est_push_unit(st, run, k, EST_PHASE_BACKWARD, (int32_t)i, label, live, EST_UNIT_BLOCK_BWD, err,
                      errlen))
            return -1;
    }

    /* Embedding backward: the last gradients appear. */
    memcpy(live, bbase, sizeof live);
    est_live_add(live, EST_CAT_ACTIVATIONS, hidden);
    est_live_add(live, EST_CAT_GRADS, t->head_grads + L * t->block_grads + t->embed_grads +
                                          t->head_grad_transient + t->late_grads +
                                          t->root_grad_unsharded);
    est_live_add(live, EST_CAT_COMM, t->head_gathered);
    return est_push_unit(st, run, k, EST_PHASE_BACKWARD, -1, "backward embedding", live, EST_UNIT_EMBED_BWD,
                     err, errlen);
}
