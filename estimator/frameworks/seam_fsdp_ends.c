/* FSDP2 with the embedding and the LM head as units of their own
 * (run->fsdp_shard_ends; seam_fsdp.h embed_unit, head_unit), as torchtune's
 * shard_model (torchtune/training/_distributed.py, v0.6.1) wraps them for
 * custom_sharded_layers: ['tok_embeddings', 'output']: fully_shard on each
 * module whose name matches, then on every decoder layer, then on the root,
 * which keeps the rest (the final norm). The hooks follow torch 2.6
 * _fully_shard/_fsdp_param_group.py (pre_forward, post_forward, pre_backward,
 * post_backward) as for the blocks (seam_fsdp2.c):
 *  - the embedding's unit is gathered at its forward and resharded after it
 *    (reshard_after_forward, a non-root group), gathered again at its backward
 *    (its pre-backward hook on its output) and reduced in its post-backward;
 *  - the head's unit likewise around the output projection, once per call.
 *    Under torchtune's chunked output (TransformerDecoder.chunked_output:
 *    self.output(chunk) for each of 8 chunks) that is 8 gathers and reshards in
 *    forward, and in backward, chunk by chunk, a gather (pre-backward: its
 *    training state went to POST_BACKWARD after the previous chunk), the
 *    chunk's weight gradient, and a post-backward (RegisterPostBackwardFunction
 *    on each call's input) that reshards and reduce-scatters that chunk's share,
 *    added into the sharded gradient (_fsdp_collectives.py foreach_reduce:
 *    to_accumulate_grad); each reduce-scatter input is kept until the next
 *    (comm_ctx.reduce_scatter_state). The hooks here run around the output
 *    projection's ops (op_pre, op_post), not the head module's: the final norm
 *    before it and the loss after it run without the weight;
 *  - the root's own parameters (the final norm) are gathered at the model's
 *    pre-forward and stay so until its post-backward (the root group is never
 *    resharded after forward: _fsdp_state.py _lazy_init). */
#include "fsdp_ends.h"
#include "seam_fsdp.h"

/* An op of the head that makes one of the model's outputs: a call of the
 * output projection (a logits chunk, or the logits). */
static bool output_call(est_sim *s, const fsdp_state *f, int inst, int op) {
    if (f->head_unit < 0 || inst != s->L + 1 || s->recompute) return false;
    const est_module *m = est_sim_module(s, inst);
    return m->ops[op].out >= 0 && m->tensors[m->ops[op].out].model_output;
}

/* Before a call: its pre-forward, or its pre-backward; the last call of
 * backward prefetches the last block (post-forward order: block L-1, then the
 * head's calls; the earlier calls' targets are the head itself). */
void fsdp2_ends_op_pre(est_sim *s, fsdp_state *f, int inst, int op, bool backward) {
    if (!output_call(s, f, inst, op)) return;
    if (!backward) {
        fsdp2_pre_forward(s, f, f->head_unit);
        return;
    }
    fsdp2_pre_backward(s, f, f->head_unit);
    if (++f->head_chunks_back == est_fsdp_head_calls(s->run)) fsdp2_prefetch(s, f, (int)s->L);
}

/* After a call: its post-forward (the last one's is followed by the root's:
 * the model's forward returns, the recipe's loss runs after it), or its
 * post-backward with this call's gradient. */
void fsdp2_ends_op_post(est_sim *s, fsdp_state *f, int inst, int op, bool backward) {
    if (!output_call(s, f, inst, op)) return;
    if (backward) {
        fsdp2_post_backward(s, f, f->head_unit);
        return;
    }
    fsdp2_post_forward(s, f, f->head_unit);
    if (++f->head_chunks_fwd == est_fsdp_head_calls(s->run)) fsdp2_root_post_forward(s, f);
}

bool fsdp2_ends_pre(est_sim *s, fsdp_state *f, int inst, bool backward) {
    if (f->embed_unit < 0) return false;
    if (inst == EST_INST_EMBED && !backward) {
        fsdp2_pre_forward(s, f, 0);
        fsdp2_pre_forward(s, f, f->embed_unit);
    } else if (inst == EST_INST_EMBED) {
        fsdp2_pre_backward(s, f, f->embed_unit);
    } else if (inst == s->L + 1) {
        if (backward) f->head_chunks_back = 0;
        else f->head_chunks_fwd = 0;
    } else {
        return false;
    }
    return true;
}

bool fsdp2_ends_post(est_sim *s, fsdp_state *f, int inst, bool backward) {
    if (f->embed_unit < 0) return false;
    if (inst == EST_INST_EMBED && !backward) {
        fsdp2_post_forward(s, f, f->embed_unit);
    } else if (inst == EST_INST_EMBED) {
        fsdp2_post_backward(s, f, f->embed_unit);
        fsdp2_post_backward(s, f, 0);
        fsdp2_backward_done(s, f);
    } else if (inst == s->L + 1) {
        if (!backward) fsdp2_root_post_forward(s, f); /* none left when a call ran */
    } else {
        return false;
    }
    return true;
}
