/* The two ends of the model (transformers 4.40-4.49 and 5.x):
 *
 * Embedding (LlamaModel.forward before the blocks): embed_tokens(input_ids)
 * (Gemma: times sqrt(h), a new tensor), and, when attention takes an explicit
 * mask (a padded batch under SDPA, or eager attention), the (b, 1, s, s) mask
 * of _update_causal_mask: torch.full, triu, the per-batch clone, the padding
 * masked_fill and, for SDPA on CUDA, _unmask_unattended's product; every
 * block's attention saves the last of these.
 *
 * With prompt tuning, PEFT puts its virtual tokens in front (prompt_tuning).
 *
 * Head (LlamaForCausalLM.forward and its loss): the final norm, the LM head
 * (its logits are returned in the model's outputs, which the training loop
 * holds: module_graph.h model_output), logits.float() (alive until the loss
 * returns, inside the forward), the shifted .contiguous() copy (4.40, a view
 * when b = 1; none from 4.46), log_softmax (saved) and nll_loss. A fused linear
 * cross-entropy (Liger-Kernel) instead computes the loss and both gradients
 * in its forward, chunk by chunk, and keeps the gradients for its backward. */
#include "block.h"
#include "block_build.h"
#include "block_prompt.h"
#include "block_peft_vec.h"
#include "liger.h"
#include "block_kernels.h"
#include "tp.h"

/* _update_causal_mask (4.40): the mask every block reads. */
static int causal_mask(est_bld *b) {
    const int c = b->g->act;
    const int64_t ss = b->s * b->s;
    int full = est_op1(b, EST_OP_COPY, "causal mask full", ss, c, EST_NONE);
    int tri = est_op1(b, EST_OP_COPY, "causal mask triu", ss, c, full);
    if (!b->run->padding_mask) return est_op1(b, EST_OP_COPY, "attention mask", b->b * ss, c, tri);
    int clone = est_op1(b, EST_OP_COPY, "causal mask clone", b->b * ss, c, tri);
    int filled = est_op1(b, EST_OP_COPY, "padding masked_fill", b->b * ss, c, clone);
    if (b->run->attention != EST_ATTN_SDPA) return filled;
    return est_op1(b, EST_OP_COPY, "attention mask", b->b * ss, c, filled);
}

/* Prompt tuning (peft_model.py PeftModelForCausalLM.forward, 0.14-0.19):
 * inputs_embeds = word_embeddings(input_ids); prompts = the prompt encoder's
 * embedding of the N virtual token ids for one sequence (get_prompt takes
 * prompt_tokens[:1]), .repeat(b, 1, 1), .to(inputs_embeds.dtype); then
 * torch.cat((prompts, inputs_embeds), dim=1): the model runs on s + N
 * positions, and the labels get N leading -100s. */
static int prompt_tuning(est_bld *b, int words) {
    const ft_model *md = &b->run->model;
    const int64_t N = b->run->virtual_tokens, h = md->hidden_size;
    const int f = b->g->adapter, c = b->m->tensors[words].elem_bytes;
    int pe = est_module_param(b->m, "prompt_encoder.embedding", N, h, EST_PK_ADAPTER, -1, true, f);
    int p1 = est_op1(b, EST_OP_EMBEDDING, "prompt_encoder(prompt_tokens)", N * h, f, pe);
    int pr = est_op1(b, EST_OP_COPY, "prompts.repeat(b, 1, 1)", b->b * N * h, f, p1);
    int pc = est_cast(b, "prompts.to(dtype)", pr, c);
    return est_op2(b, EST_OP_COPY, "cat(prompts, inputs_embeds)", b->T * h, c, pc, words);
}

/* PEFT's ModulesToSaveWrapper (peft 0.12-0.14 utils/other.py): the frozen
 * original stays (model.parameters() lists it first) and a deep copy of it,
 * same shape and dtype, trains and runs the forward (_cast_adapter_dtype
 * upcasts tuner layers only, so the copy keeps the base's dtype). A tied
 * head's copy is a tensor of its own: the tie does not survive the copy.
 * Returns the weight the module's op reads. */
static int saved_copy(est_module *m, int original, uint32_t which, const est_run *run, const est_regime *g,
                      const char *name) {
    if (!(run->modules_to_save & which) || !est_peft_on(run)) return original;
    const est_mparam *o = &m->params[EST_PARAM_INDEX(original)];
    return est_module_param(m, name, o->rows, o->cols, EST_PK_EMBEDDING, -1, true, g->weight);
}

/* The model's rotary module, called once per forward on the hidden states
 * before the first layer (LlamaModel.forward: position_embeddings =
 * self.rotary_emb(hidden_states, position_ids), passed to every decoder
 * layer; transformers 4.49.0 and 5.17.0 modeling_llama.py, and each family's
 * copy: stack.h rope_once_per_forward). LlamaRotaryEmbedding.forward, under
 * autocast(enabled=False): freqs = inv_freq @ position_ids (fp32, one row of
 * positions: (1, s, d/2)), emb = cat(freqs, freqs), cos = emb.cos() *
 * attention_scaling, sin = emb.sin() * attention_scaling, returned as
 * cos.to(x.dtype), sin.to(x.dtype): fp32 made, cast to the hidden states'
 * dtype (no copy where that is fp32). Every layer's apply_rotary_pos_emb
 * saves these two tensors (q * cos keeps cos, rotate_half(q) * sin keeps
 * sin): one storage for all the layers. */
static void rope_shared(est_bld *b, int dtype) {
    const int64_t sd = b->s * b->run->model.head_dim;
    int freqs = est_op1(b, EST_OP_COPY, "rotary freqs", sd / 2, 4, EST_NONE);
    int emb = est_op1(b, EST_OP_COPY, "rotary emb", sd, 4, freqs);
    int c = est_op1(b, EST_OP_COPY, "emb.cos()", sd, 4, emb);
    c = est_op1(b, EST_OP_SCALAR, "cos * attention_scaling", sd, 4, c);
    int sn = est_op1(b, EST_OP_COPY, "emb.sin()", sd, 4, emb);
    sn = est_op1(b, EST_OP_SCALAR, "sin * attention_scaling", sd, 4, sn);
    const int cos = est_cast(b, "rope cos", c, dtype), sin = est_cast(b, "rope sin", sn, dtype);
    b->m->shared[EST_SHARED_COS] = (int16_t)cos;
    b->m->shared[EST_SHARED_SIN] = (int16_t)sin;
    /* freqs, emb and the fp32 cos and sin are the forward's locals: they go
     * when it returns (the embedding module's end), not at their last read */
    const int locals[4] = {freqs, emb, c == cos ? EST_NONE : c, sn == sin ? EST_NONE : sn};
    for (int i = 0; i < 4; i++)
        if (locals[i] >= 0) est_module_tensor_role(b->m, locals[i], EST_ROLE_ACTIVATION, true);
}

static int embedding(const est_run *run, const est_regime *g, bool no_grad, est_module *m, char *err,
                     size_t errlen) {
    est_bld b;
    est_module_begin(m, EST_MODULE_EMBEDDING);
    m->no_grad = no_grad;
    est_bld_init(&b, m, run, g);
    const ft_model *md = &run->model;
    int w = est_module_param(m, "embed_tokens", md->vocab_size, md->hidden_size, EST_PK_EMBEDDING, -1,
                             g->train_base, g->weight);
    w = saved_copy(m, w, EST_SAVE_EMBED, run, g, "modules_to_save.embed_tokens");
    est_vec_model_buffers(m, run); /* VeRA's shared vera_A, vera_B */
    w = est_vec_tokens_weight(&b, w, false); /* trainable tokens' merged weight */
    const int64_t words = b.b * run->seq_len; /* b.T counts the virtual tokens too */
    int x = est_op1(&b, EST_OP_EMBEDDING, "embedding output", words * md->hidden_size, g->weight, w);
    /* PEFT under gradient checkpointing makes the embedding's output require
     * grad (enable_input_require_grads), so that checkpointed blocks backward. */
    if (est_peft_on(run) && est_run_ckpt_wraps(run)) m->tensors[x].requires_grad = true;
    /* axolotl under unfrozen_parameters naming the embedding or the head
     * calls it too (train.py); `in_grad` says so for the embedding */
    if (g->masked && g->in_grad && x >= 0 && !no_grad) m->tensors[x].requires_grad = true;
    if (run->peft == EST_PEFT_PROMPT_TUNING) x = prompt_tuning(&b, x);
    if (run->peft == EST_PEFT_P_TUNING) x = est_p_tuning_prompts(&b, x); /* block_prompt.c */
    const int hidden_bytes = m->tensors[x].elem_bytes; /* inputs_embeds, as the rotary module gets it */
    if (md->embed_scale) x = est_op1(&b, EST_OP_SCALAR, "* sqrt(h)", b.T * md->hidden_size, g->weight, x);
    x = est_tp_scatter(&b, x); /* --tp: RowwiseParallel over the vocabulary, Shard(1) out (tp.h) */
    x = est_cast(&b, "residual stream", x, g->resid);
    if (run->peft == EST_PEFT_PREFIX_TUNING) m->shared[EST_SHARED_MASK] = (int16_t)est_prefix_encoder(&b);
    else if (est_attention_masked(run)) m->shared[EST_SHARED_MASK] = (int16_t)causal_mask(&b);
    if (est_rope_shared(run)) rope_shared(&b, hidden_bytes);
    return est_bld_done(&b, x, err, errlen);
}

/* Liger's fused linear cross-entropy: chunks of about T / ceil(V / h) rows
 * (a power of two), each chunk's logits in the compute dtype with an fp32
 * working copy, inside the forward. */
static int fused_loss(est_bld *b, int x, int w) {
    const ft_model *md = &b->run->model;
    const int64_t T = b->T, h = md->hidden_size, V = md->vocab_size;
    const int64_t inc = (V + h - 1) / h, rows = (T + inc - 1) / inc;
    int64_t chunk = 1;
    while (chunk < rows) chunk <<= 1;
    if (chunk > T) chunk = T;
    int gx = est_op2(b, EST_OP_FUSED_LOSS, "grad of hidden states", T * h, b->g->act, x, w);
    est_mop *o = &b->m->ops[b->m->n_ops - 1];
    o->forward_transient_bytes = chunk * V * (b->g->act + 4);
    est_module_op_gemm(b->m, (double)chunk, (double)h, (double)V, (double)((T + chunk - 1) / chunk));
    int gw = est_module_op_out2(b->m, "grad of LM head weight", V * h, b->g->act);
    est_module_tensor_role(b->m, gx, EST_ROLE_LOGITS, false);
    est_module_tensor_role(b->m, gw, EST_ROLE_LOGITS, false);
    return gx;
}

/* logits = lm_head(h); the loss on logits.float(): transformers 4.40 shifts
 * the logits (a contiguous copy when b > 1), >= 4.46 shifts the labels
 * instead and takes log_softmax over every row (stack.h loss_shifts_labels).
 * What the model's outputs return (module_graph.h model_output) follows the
 * same change: up to 4.45 the forward rebinds `logits = logits.float()`
 * (modeling_llama.py, modeling_qwen2.py), so the outputs hold the fp32 copy
 * and the compute-dtype logits die with the cast; from 4.46 the loss function
 * makes its fp32 copy inside (loss_utils.py ForCausalLMLoss) and the outputs
 * hold the compute-dtype logits. */
static int standard_loss(est_bld *b, int x, int w) {
    const ft_model *md = &b->run->model;
    const bool shift_labels = b->run->stack && b->run->stack->loss_shifts_labels;
    const int64_t full = b->T * md->vocab_size;
    const int64_t shifted = shift_labels ? full : b->b * (b->s - 1) * md->vocab_size;
    int logits = est_linear_rows(b, "lm_head", x, w, b->T, md->hidden_size, md->vocab_size);
    est_module_tensor_role(b->m, logits, EST_ROLE_LOGITS, false);
    const int c = b->m->tensors[logits].elem_bytes;
    if (md->final_logit_softcap > 0) { /* Gemma-2 rebinds `logits` to the capped ones */
        logits = est_op1(b, EST_OP_SCALAR, "logits / softcap", full, c, logits);
        logits = est_op1(b, EST_OP_TANH, "soft-capped logits (tanh)", full, c, logits);
        logits = est_op1(b, EST_OP_SCALAR, "logits * softcap", full, c, logits);
    }
    if (logits >= 0 && shift_labels) b->m->tensors[logits].model_output = true;
    int l32 = est_cast(b, "logits fp32", logits, 4);
    est_module_tensor_role(b->m, l32, EST_ROLE_LOGITS, true);
    if (l32 >= 0 && !shift_labels) b->m->tensors[l32].model_output = true;
    /* logits[..., :-1, :] of one sequence is contiguous already: a view. */
    int sh = b->b > 1 && !shift_labels ? est_op1(b, EST_OP_COPY, "shifted logits fp32", shifted, 4, l32) : l32;
    int loss;
    if (b->run->liger & EST_LIGER_CROSS_ENTROPY) { /* no log-softmax: the kernel's gradient in sh */
        loss = est_liger_cross_entropy(b, sh);
        est_module_tensor_role(b->m, sh, EST_ROLE_LOGITS, false);
        est_module_tensor_role(b->m, loss, EST_ROLE_LOGITS, false);
    } else {
        int ls = est_op1(b, EST_OP_SOFTMAX, "log-softmax fp32", shifted, 4, sh);
        loss = est_op1(b, EST_OP_LOSS, "loss", 1, 4, ls);
        const int logits_t[3] = {sh, ls, loss};
        for (int i = 0; i < 3; i++) est_module_tensor_role(b->m, logits_t[i], EST_ROLE_LOGITS, false);
    }
    /* every tensor made after the LM head is the loss's */
    for (int t = logits; t < b->m->n_tensors; t++)
        if (b->m->tensors[t].role == EST_ROLE_ACTIVATION) b->m->tensors[t].role = EST_ROLE_LOGITS;
    return loss;
}

/* torchtune's CEWithChunkedOutputLoss (v0.6.1 modules/loss/
 * ce_chunked_output_loss.py, num_output_chunks = 8) with the decoder's
 * chunked output (modules/transformer.py TransformerDecoder.chunked_output:
 * [self.output(c) for c in h.chunk(8, dim=1)]): eight logit chunks in the
 * compute dtype, returned in the model's outputs (the recipe holds them until
 * `del logits` after the loss); each chunk's compute_cross_entropy runs
 * F.cross_entropy(chunk.float(), ...), whose fp32 copy goes when it returns
 * and whose log-softmax is saved for backward; the chunk losses are summed. */
static int chunked_output_loss(est_bld *b, int x, int w) {
    const ft_model *md = &b->run->model;
    const int64_t V = md->vocab_size, per_seq = (b->s + 7) / 8; /* torch.chunk: ceil(s / 8) positions */
    const int first = b->m->n_tensors;
    int loss = EST_NONE;
    for (int64_t start = 0; start < b->s; start += per_seq) {
        const int64_t rows = b->b * (b->s - start < per_seq ? b->s - start : per_seq);
        int lg = est_linear_rows(b, "output chunk", x, w, rows, md->hidden_size, V);
        if (lg >= 0) b->m->tensors[lg].model_output = true;
        int l32 = est_cast(b, "logit chunk fp32", lg, 4);
        int ls = est_op1(b, EST_OP_SOFTMAX, "log-softmax fp32 chunk", rows * V, 4, l32);
        int li = est_op1(b, EST_OP_LOSS, "chunk loss", 1, 4, ls);
        loss = loss == EST_NONE ? li : est_op2(b, EST_OP_ADD, "sum of chunk losses", 1, 4, loss, li);
    }
    for (int t = first; t < b->m->n_tensors; t++)
        if (b->m->tensors[t].role == EST_ROLE_ACTIVATION) b->m->tensors[t].role = EST_ROLE_LOGITS;
    return loss;
}

static int head(const est_run *run, const est_regime *g, bool no_grad, est_module *m, char *err,
                size_t errlen) {
    est_bld b;
    est_module_begin(m, EST_MODULE_HEAD);
    m->no_grad = no_grad;
    est_bld_init(&b, m, run, g);
    const ft_model *md = &run->model;
    int nw = est_module_param(m, "norm", md->hidden_size, 1, EST_PK_NORM, -1, g->train_base, g->weight);
    nw = est_vec_norm(&b, nw, "norm"); /* LN tuning's copy (block_peft_vec.c) */
    int w = est_module_param(m, "lm_head", md->vocab_size, md->hidden_size, EST_PK_EMBEDDING, -1,
                             g->train_base, g->weight);
    m->params[EST_PARAM_INDEX(w)].tied = md->tied_embeddings;
    w = saved_copy(m, w, EST_SAVE_HEAD, run, g, "modules_to_save.lm_head");
    w = est_vec_tokens_weight(&b, w, true); /* trainable tokens on a tied head */
    const bool in_grad = g->masked ? g->in_grad : g->train_base || est_peft_on(run);
    int x = est_module_input(m, "hidden states", est_tp_seq_tokens(run, b.T) * md->hidden_size, g->resid,
                             in_grad);
    /* --tp: the final norm on this rank's tokens, gathered for the ColwiseParallel head (tp.h) */
    int h = est_tp_gather(&b, est_rmsnorm(&b, "final norm", x, nw, md->norm_plus_one));
    int out = run->rl != EST_RL_NONE ? (m->no_grad ? est_rl_reference_head(&b, h, w) : est_rl_loss(&b, h, w))
              : run->loss == EST_LOSS_CHUNKED ? fused_loss(&b, h, w)
              : run->loss == EST_LOSS_CCE     ? est_kernel_cce_loss(&b, h, w)
              : run->loss == EST_LOSS_CHUNKED_OUTPUT ? chunked_output_loss(&b, h, w)
                                               : standard_loss(&b, h, w);
    return est_bld_done(&b, out, err, errlen);
}

int est_module_embedding(const est_run *run, const est_regime *g, est_module *m, char *err,
                         size_t errlen) {
    return embedding(run, g, false, m, err, errlen);
}

int est_module_head(const est_run *run, const est_regime *g, est_module *m, char *err,
                    size_t errlen) {
    return head(run, g, false, m, err, errlen);
}

int est_module_embedding_nograd(const est_run *run, const est_regime *g, est_module *m, char *err,
                                size_t errlen) {
    return embedding(run, g, true, m, err, errlen);
}

int est_module_head_nograd(const est_run *run, const est_regime *g, est_module *m, char *err,
                           size_t errlen) {
    return head(run, g, true, m, err, errlen);
}
