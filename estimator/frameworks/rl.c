/* TRL's preference trainers on autograd's step (rl.h). The order of one
 * micro-batch (trl 0.15.2):
 *  - KTO's forward() first runs the policy on the KL completions under
 *    torch.no_grad (kto_trainer.py: `with torch.no_grad(): KL_logits =
 *    model(...)`), then the policy with grad;
 *  - the policy's forward and log-probs (block_rl.c);
 *  - get_batch_loss_metrics then runs the reference under torch.no_grad
 *    (DPO compute_ref_log_probs, KTO: forward(ref) with its own KL pass):
 *    ref_model, or, when it is None under PEFT, the policy inside
 *    null_ref_context() (peft's disable_adapter(): LoRA layers return
 *    base_layer(x), ModulesToSaveWrapper its original module); the
 *    policy's saved tensors are all live, the policy forward's autocast
 *    region is over;
 *  - the loss, and backward.
 * A full fine-tune's reference is a model of its own: axolotl 0.18.0 loads it
 * as it loads the policy (the same dtype), TRL prepares it for evaluation
 * (DeepSpeed stages 0-2: an engine at stage 0, the whole model per rank) and
 * its weights never train. precompute_ref_log_probs computes the reference
 * log-probs before training: no reference in the step. ORPO has no reference. */
#include "rl.h"

#include <stdlib.h>
#include <string.h>

#include "block.h"
#include "json_util.h"
#include "lora.h"
#include "objective.h"
#include "work.h"

typedef struct rl_state {
    est_module ref_embed, ref_block, ref_head; /* the reference model under no_grad */
    est_module kl_embed, kl_head;              /* KTO: the policy's KL pass (its blocks:
                                                  s->block_nograd) */
    est_run ref_run;                            /* the reference as run: adapters off */
    est_regime regime, ends;                    /* the reference's dtypes */
} rl_state;

static rl_state *state(est_sim *s) { return (rl_state *)s->obj_state; }

/* The reference modules: the policy's run and dtypes with the adapters and
 * modules_to_save copies disabled (LoRA), or a frozen model of the policy's
 * dtypes (a full fine-tune). */
static int build_reference(est_sim *s, rl_state *r) {
    r->ref_run = *s->run;
    r->ref_run.lora.targets = 0; /* disable_adapter(): no adapter branch (a quantized base stays) */
    r->ref_run.modules_to_save = 0;
    r->regime = s->regime;
    r->ends = s->ends_regime;
    r->regime.train_base = r->ends.train_base = false;
    return est_module_embedding_nograd(&r->ref_run, &r->ends, &r->ref_embed, s->err, s->errlen) ||
           est_module_block(&r->ref_run, &r->regime, true, &r->ref_block, s->err, s->errlen) ||
           est_module_head_nograd(&r->ref_run, &r->ends, &r->ref_head, s->err, s->errlen);
}

/* Bytes of a module's parameters as loaded (a tied head's weight once). */
static int64_t module_bytes(const est_module *m) {
    int64_t n = 0;
    for (int i = 0; i < m->n_params; i++) {
        const est_mparam *p = &m->params[i];
        if (!p->tied) n += p->rows * p->cols * p->copies * p->elem_bytes;
    }
    return n;
}

static int rl_init(est_sim *s) {
    rl_state *r = calloc(1, sizeof *r);
    if (!r) return ft_errorf(s->err, s->errlen, "out of memory building the step");
    s->obj_state = r;
    if (build_reference(s, r)) return -1;
    if (s->run->rl == EST_RL_KTO &&
        (est_module_embedding_nograd(s->run, &s->ends_regime, &r->kl_embed, s->err, s->errlen) ||
         est_module_head_nograd(s->run, &s->ends_regime, &r->kl_head, s->err, s->errlen)))
        return -1;
    if (est_rl_reference_copy(s->run)) {
        est_step_span(s->st, EST_PHASE_INIT, -1, "reference model loaded");
        const int64_t bytes = module_bytes(&r->ref_embed) + s->L * module_bytes(&r->ref_block) +
                              module_bytes(&r->ref_head);
        est_sim_alloc(s, EST_CAT_PARAMS, bytes, "reference model", 0);
    }
    return 0;
}

/* One model's forward under no_grad, embedding to log-probs, with its work. */
static void nograd_pass(est_sim *s, const est_module *embed, const est_module *block,
                        const est_module *head) {
    int32_t policy_shared[EST_SHARED_COUNT];
    memcpy(policy_shared, s->shared, sizeof policy_shared);
    for (int k = 0; k < EST_SHARED_COUNT; k++) s->shared[k] = -1;
    est_work_emit(s->st, s->run, s->k, EST_UNIT_EMBED_FWD, -1);
    int32_t x = est_sim_detached_forward(s, embed, -1);
    for (int64_t i = 0; i < s->L; i++) {
        est_work_emit(s->st, s->run, s->k, EST_UNIT_BLOCK_FWD, (int32_t)i);
        x = est_sim_detached_forward(s, block, x);
    }
    est_sim_release_shared(s);
    memcpy(s->shared, policy_shared, sizeof policy_shared);
    est_work_emit(s->st, s->run, s->k, EST_UNIT_HEAD_FWD, -1);
    est_sim_release(s, est_sim_detached_forward(s, head, x));
    est_sim_cache_exit(s); /* the model forward's autocast region */
}

static void rl_before_forward(est_sim *s) {
    if (s->run->rl != EST_RL_KTO) return;
    rl_state *r = state(s);
    est_step_span(s->st, EST_PHASE_FORWARD, -1, "KL forward (no_grad)");
    nograd_pass(s, &r->kl_embed, &s->block_nograd, &r->kl_head);
}

static void rl_after_head(est_sim *s) {
    if (!est_rl_reference_forward(s->run)) return;
    rl_state *r = state(s);
    est_sim_cache_exit(s); /* the policy's forward returned before its log-probs */
    est_step_span(s->st, EST_PHASE_LOSS, -1, "reference forward (no_grad)");
    if (s->run->rl == EST_RL_KTO) nograd_pass(s, &r->ref_embed, &r->ref_block, &r->ref_head); /* its KL pass */
    nograd_pass(s, &r->ref_embed, &r->ref_block, &r->ref_head);
}

static void rl_free(est_sim *s) {
    free(s->obj_state);
    s->obj_state = NULL;
}

static const est_objective RL_OBJECTIVE = {
    .init = rl_init,
    .before_forward = rl_before_forward,
    .after_head = rl_after_head,
    .free = rl_free,
};

const est_objective *est_rl_objective(const est_run *run) {
    return run->rl == EST_RL_NONE ? NULL : &RL_OBJECTIVE;
}
