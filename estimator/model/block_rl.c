/* The head of a preference step: TRL's trainers (trl 0.15.2, the release
 * beside transformers 4.49 and accelerate 1.4) after the final norm and the
 * LM head, on R policy rows (est_policy_rows: chosen and rejected
 * concatenated for DPO and ORPO).
 *
 * The logits leave the model's forward through accelerate's
 * convert_outputs_to_fp32 when the Trainer runs autocast (accelerator.py
 * prepare_model: model.forward = convert_outputs_to_fp32(autocast(forward))):
 * an fp32 copy of the R x s x V logits, the compute-dtype ones dropped as the
 * forward returns. Then (trainer/utils.py selective_log_softmax):
 *  - fp32 logits: torch.gather of the label logits and, row by row
 *    (`for lg in logits`: unbind), torch.logsumexp, which keeps its input: the
 *    whole fp32 logits stay for backward; one row's exp is in flight;
 *  - bf16 logits (pure bf16, no autocast): F.log_softmax row by row, each
 *    output kept (R x s x V in bf16), the logits themselves dropped.
 * Backward of the unbind: every row's gradient waits in UnbindBackward's
 * input buffer until torch.stack makes the whole (R x s x V x 4 twice).
 *  - DPO (dpo_trainer.py concatenated_forward): the per-token log-probs,
 *    and the mean chosen and rejected logits for the metrics, each a
 *    boolean-indexed copy of its half of the logits, reduced and dropped;
 *  - ORPO (orpo_trainer.py concatenated_forward): the chosen half's NLL
 *    first, logits[..., :-1, :].contiguous() (a copy) through
 *    CrossEntropyLoss (log_softmax keeps its fp32 output), then the
 *    per-token log-probs of all rows as DPO's;
 *  - KTO (kto_trainer.py forward): the per-token log-probs, and
 *    completion_logits[chosen_idx] / [rejected_idx]: copies of every row
 *    held in the returned tuple until the loss, through the reference pass.
 * The losses on R per-sequence numbers are negligible. */
#include "block_build.h"
#include "objective.h"

/* selective_log_softmax over `logits` (R x s x V): the per-token log-probs. */
static int log_probs(est_bld *b, int logits) {
    const int64_t R = b->b, s = b->s, V = b->run->model.vocab_size;
    const int lb = b->m->tensors[logits].elem_bytes;
    if (lb == 4) {
        int sel = est_op1(b, EST_OP_COPY, "gather(label logits)", R * s, 4, logits);
        /* logsumexp keeps its input (and its small result): as an activation does */
        int lse = est_op1(b, EST_OP_ACT, "logsumexp per row", R * s, 4, logits);
        est_mop *o = &b->m->ops[b->m->n_ops - 1];
        o->forward_transient_bytes = s * V * 4;      /* one row's exp(x - max) */
        o->backward_transient_bytes = R * s * V * 4; /* the rows' gradients, then stacked */
        return est_op2(b, EST_OP_ADD, "per-token log-probs", R * s, 4, sel, lse);
    }
    int ls = est_op1(b, EST_OP_SOFTMAX, "log_softmax per row", R * s * V, lb, logits);
    b->m->ops[b->m->n_ops - 1].backward_transient_bytes = R * s * V * lb; /* unbind's buffer */
    return est_op1(b, EST_OP_COPY, "gather(log-probs)", R * s, lb, ls);
}

/* An op whose result feeds only the metrics: no gradient reaches it, so its
 * node never runs backward (nothing it saves is counted either). */
static void metric_only(est_bld *b) {
    est_mop *o = &b->m->ops[b->m->n_ops - 1];
    o->backward = false;
    for (int k = 0; k < o->n_in; k++) o->saves[k] = o->grad_in[k] = false;
    o->saves_out = o->saves_out2 = false;
}

/* A boolean- or list-indexed copy of `rows` of the logits for the metrics:
 * reduced at once (DPO's mean logits) or held to the loss (KTO's). */
static void indexed_copy(est_bld *b, int logits, int64_t rows, const char *name, bool held) {
    const int64_t n = rows * b->s * b->run->model.vocab_size;
    int c = est_op1(b, EST_OP_COPY, name, n, b->m->tensors[logits].elem_bytes, logits);
    metric_only(b);
    est_module_tensor_role(b->m, c, EST_ROLE_LOGITS, held);
    if (held) return;
    est_op1(b, EST_OP_REDUCE, "mean", 1, 4, c);
    metric_only(b);
}

/* ORPO's NLL of the chosen half: the shifted copy, log_softmax, nll. */
static int chosen_nll(est_bld *b, int logits) {
    const int64_t half = b->b / 2, V = b->run->model.vocab_size;
    const int lb = b->m->tensors[logits].elem_bytes;
    const int64_t n = half * (b->s - 1) * V;
    int sh = est_op1(b, EST_OP_COPY, "chosen logits[:-1].contiguous()", n, lb, logits);
    int ls = est_op1(b, EST_OP_SOFTMAX, "chosen log_softmax", n, lb, sh);
    return est_op1(b, EST_OP_LOSS, "chosen nll", 1, 4, ls);
}

int est_rl_loss(est_bld *b, int x, int w) {
    const ft_model *md = &b->run->model;
    const int64_t R = b->b;
    const int first = est_linear_rows(b, "lm_head", x, w, b->T, md->hidden_size, md->vocab_size);
    const int logits = b->g->autocast ? est_cast(b, "outputs.logits.float()", first, 4) : first;
    int nll = b->run->rl == EST_RL_ORPO ? chosen_nll(b, logits) : EST_NONE;
    int lp = log_probs(b, logits);
    int seq = est_op1(b, EST_OP_REDUCE, "per-sequence log-probs", R, 4, lp);
    if (b->run->rl == EST_RL_DPO) {
        indexed_copy(b, logits, R / 2, "mean chosen logits", false);
        indexed_copy(b, logits, R - R / 2, "mean rejected logits", false);
    } else if (b->run->rl == EST_RL_KTO) {
        indexed_copy(b, logits, R, "chosen/rejected logits", true);
    }
    int loss = nll != EST_NONE ? est_op2(b, EST_OP_LOSS, "preference loss", 1, 4, seq, nll)
                               : est_op1(b, EST_OP_LOSS, "preference loss", 1, 4, seq);
    for (int t = first; t < b->m->n_tensors; t++) b->m->tensors[t].role = EST_ROLE_LOGITS;
    return loss;
}

int est_rl_reference_head(est_bld *b, int x, int w) {
    const ft_model *md = &b->run->model;
    const int first = est_linear_rows(b, "lm_head", x, w, b->T, md->hidden_size, md->vocab_size);
    const int logits = b->g->autocast ? est_cast(b, "outputs.logits.float()", first, 4) : first;
    int lp = log_probs(b, logits);
    int seq = est_op1(b, EST_OP_REDUCE, "reference log-probs", b->b, 4, lp);
    for (int t = first; t < b->m->n_tensors; t++) b->m->tensors[t].role = EST_ROLE_LOGITS;
    return seq;
}
