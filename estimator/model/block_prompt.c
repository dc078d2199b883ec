/* Prefix tuning and P-tuning as autograd sees them (block_prompt.h), at
 * peft d787f51 with transformers 5.13 and torch 2.13 (the method
 * comparison's stack). docs/method.md ("Prefix tuning and P-tuning"). */
#include "block_prompt.h"

#include <stdio.h>

#include "peft_prompt.h"

/* One Linear of P-tuning's MLP head on the N rows of one sequence, in the
 * adapters' fp32 (autocast_adapter_dtype; no autocast in pure bf16). */
static int encoder_linear(est_bld *b, int i, int x, int64_t rows, int64_t din, int64_t dout) {
    char wn[48], bn[48];
    snprintf(wn, sizeof wn, "prompt_encoder.mlp.%d.weight", i);
    snprintf(bn, sizeof bn, "prompt_encoder.mlp.%d.bias", i);
    const int f = b->g->adapter;
    const int16_t in[3] = {(int16_t)x, (int16_t)est_module_param(b->m, wn, dout, din, EST_PK_ADAPTER, -1, true, f),
                           (int16_t)est_module_param(b->m, bn, dout, 1, EST_PK_ADAPTER, -1, true, f)};
    int y = est_module_op(b->m, EST_OP_LINEAR, wn, rows * dout, f, 3, in);
    est_module_op_gemm(b->m, (double)rows, (double)din, (double)dout, 1);
    return y;
}

/* peft_model.py PeftModelForCausalLM.forward (2125-2137) and get_prompt
 * (928-940): prompts = prompt_encoder(prompt_tokens[:1]) (PromptEncoder.
 * forward: embedding, then Linear, ReLU, Linear, ReLU, Linear; ReLU saves
 * its output, the same size as the input ACT saves), .repeat(b, 1, 1),
 * .to(inputs_embeds.dtype), torch.cat((prompts, inputs_embeds), dim=1). */
int est_p_tuning_prompts(est_bld *b, int words) {
    const int64_t N = b->run->virtual_tokens, h = b->run->model.hidden_size, H = b->run->encoder_hidden;
    const int f = b->g->adapter, c = b->m->tensors[words].elem_bytes;
    int pe = est_module_param(b->m, "prompt_encoder.embedding", N, h, EST_PK_ADAPTER, -1, true, f);
    int x = est_op1(b, EST_OP_EMBEDDING, "prompt_encoder(tokens[:1])", N * h, f, pe);
    x = est_op1(b, EST_OP_ACT, "ReLU", N * H, f, encoder_linear(b, 0, x, N, h, H));
    x = est_op1(b, EST_OP_ACT, "ReLU", N * H, f, encoder_linear(b, 2, x, N, H, H));
    x = encoder_linear(b, 4, x, N, H, h);
    int pr = est_op1(b, EST_OP_COPY, "prompts.repeat(b, 1, 1)", b->b * N * h, f, x);
    int pc = est_cast(b, "prompts.to(dtype)", pr, c);
    return est_op2(b, EST_OP_COPY, "cat(prompts, inputs_embeds)", b->T * h, c, pc, words);
}

/* get_prompt (peft_model.py 783-796, 897-905): prompt_tokens expanded to
 * (b, N), past_key_values = prompt_encoder(prompt_tokens) (b, N, 2 L d_kv)
 * in fp32, .to(base dtype), viewed and permuted into L (2, b, kv_heads, N,
 * head_dim) slices, DynamicCache(past_key_values): transformers 5.x
 * DynamicLayer.update makes torch.cat([empty, k]) per layer and tensor, a
 * copy. The fp32 lookup and its cast save nothing (embedding keeps the ids,
 * ToCopyBackward nothing) and die when get_prompt returns; the copies stay.
 * Each layer's attention then replaces its copy with cat(copy, k) over N + s
 * rows (cache_utils.py DynamicLayer.update), so the cache holds the N rows of
 * every layer until the training loop drops the outputs: one tensor here of
 * b N 2 L d_kv elements, the s rows being the block's own cache copies
 * (block_kv.c). The mask: peft_model.py 2100-2103 concatenates N ones to the
 * 2-D attention_mask, and masking_utils.py _ignore_causal_mask_sdpa cannot
 * skip the mask when the keys (N + s) outnumber the queries (s) behind a
 * filled cache, so create_causal_mask builds a boolean (b, 1, s, N + s)
 * mask once per forward. */
int est_prefix_encoder(est_bld *b) {
    const est_run *run = b->run;
    const int64_t N = run->virtual_tokens, D = run->layers_used * 2 * est_prefix_token_dim(&run->model);
    const int f = b->g->adapter, c = b->g->act;
    int pe = est_module_param(b->m, "prompt_encoder.embedding", N, D, EST_PK_ADAPTER, -1, true, f);
    int e = est_op1(b, EST_OP_EMBEDDING, "prefix_encoder(prompt_tokens)", b->b * N * D, f, pe);
    int kv = est_cast(b, "past_key_values.to(dtype)", e, c);
    int cache = est_op1(b, EST_OP_ADD, "prefix cache (cat per layer)", b->b * N * D, c, kv);
    if (cache >= 0) b->m->tensors[cache].model_output = true;
    return est_op1(b, EST_OP_COPY, "prefix causal mask (bool)", b->b * b->s * (N + b->s), 1, EST_NONE);
}

int est_prefix_mask_input(est_bld *b) {
    const int64_t keys = b->s + est_prefix_tokens(b->run);
    return est_module_input(b->m, "attention mask (bool)", b->b * b->s * keys, 1, false);
}

/* torch 2.13 aten/src/ATen/native/transformers/attention.cpp
 * scaled_dot_product_attention: convert_boolean_attn_mask makes
 * where(!mask, -inf, 0) in the query's dtype, and preprocess_mask pads its
 * last dimension to a multiple of 16 for the memory-efficient kernel (a new
 * tensor, sliced back: a view), which saves it for its backward. Per layer. */
int est_prefix_layer_mask(est_bld *b, int mask) {
    const int64_t keys = b->s + est_prefix_tokens(b->run), padded = (keys + 15) / 16 * 16;
    int m = est_op1(b, EST_OP_COPY, "SDPA mask where(!m, -inf, 0)", b->b * b->s * keys, b->g->act, mask);
    if (padded == keys) return m;
    return est_op1(b, EST_OP_COPY, "SDPA mask padded to 16", b->b * b->s * padded, b->g->act, m);
}

/* q * cos + rotate_half(q) * sin on the adapter's recomputed queries
 * (utils.py llama_compute_query_states with position_embeddings). */
static int adapter_rope(est_bld *b, int q, int64_t n) {
    const int c = b->m->tensors[q].elem_bytes;
    const int cos = b->m->shared[EST_SHARED_COS], sin = b->m->shared[EST_SHARED_SIN];
    int xc = est_op2(b, EST_OP_MUL, "adapter q * cos", n, c, q, cos);
    int neg = est_op1(b, EST_OP_COPY, "adapter -q2", n / 2, c, q);
    int rot = est_op2(b, EST_OP_COPY, "adapter rotate_half(q)", n, c, neg, q);
    int xs = est_op2(b, EST_OP_MUL, "adapter rotate_half * sin", n, c, rot, sin);
    return est_op2(b, EST_OP_ADD, "adapter query_states", n, c, xc, xs);
}

/* AdaptedAttention.forward (adaption_prompt/layer.py, peft d787f51) after
 * the wrapped attention's output `out`, on the layer's normed input x:
 *   key = k_proj(adaption_prompt), value = v_proj(adaption_prompt)  (1, A, d_kv)
 *   adapter_k = key.view(...).repeat(b, 1, 1, 1).transpose(1, 2)     a copy
 *   adapter_k = repeat_interleave(adapter_k, factor, dim=1)          (b, heads, A, d)
 *   (value likewise)
 *   query_states = RoPE(q_proj(x)); v_proj(x) made and dropped (utils.py)
 *   scores = q @ adapter_k^T / sqrt(d)                                (b, heads, s, A)
 *   scores = gate * softmax(scores, fp32).to(dtype)
 *   out + o_proj((scores @ adapter_v).transpose(1, 2).reshape(b, s, h))
 * Autograd keeps the queries and adapter_k (first matmul), the fp32 softmax,
 * its bf16 cast and the gate (the product), the gated scores and adapter_v
 * (second matmul); the frozen Linears keep nothing of size. */
int est_adaption_prompt(est_bld *b, int x, int out) {
    const ft_model *md = &b->run->model;
    const int64_t A = b->run->adapter_len, h = md->hidden_size, kvd = md->num_kv_heads * md->head_dim;
    const int64_t qw = md->num_heads * md->head_dim, scores = b->b * md->num_heads * b->s * A;
    const int c = b->g->act, w = b->g->weight;
    int ap = est_module_param(b->m, "adaption_prompt", A, h, EST_PK_ADAPTER, -1, true, w);
    int gate = est_module_param(b->m, "adaption_gate", 1, 1, EST_PK_ADAPTER, -1, true, w);
    int key = est_linear_rows(b, "k_proj(adaption_prompt)", ap, (int)b->base_param[EST_LORA_K], A, h, kvd);
    int val = est_linear_rows(b, "v_proj(adaption_prompt)", ap, (int)b->base_param[EST_LORA_V], A, h, kvd);
    key = est_op1(b, EST_OP_COPY, "adapter_k.repeat(b)", b->b * A * kvd, c, key);
    val = est_op1(b, EST_OP_COPY, "adapter_v.repeat(b)", b->b * A * kvd, c, val);
    key = est_op1(b, EST_OP_COPY, "adapter_k repeat_interleave", b->b * A * qw, c, key);
    val = est_op1(b, EST_OP_COPY, "adapter_v repeat_interleave", b->b * A * qw, c, val);
    int q = est_linear_rows(b, "q_proj (adapter queries)", x, (int)b->base_param[EST_LORA_Q], b->T, h, qw);
    est_linear_rows(b, "v_proj (made, unused)", x, (int)b->base_param[EST_LORA_V], b->T, h, kvd);
    q = adapter_rope(b, q, b->T * qw);
    int sc = est_op2(b, EST_OP_BMM, "q @ adapter_k^T", scores, c, q, key);
    sc = est_op1(b, EST_OP_SCALAR, "adapter scores / sqrt(d)", scores, c, sc);
    sc = est_op1(b, EST_OP_SOFTMAX, "adapter softmax fp32", scores, 4, sc);
    sc = est_cast(b, "adapter softmax .to(dtype)", sc, c);
    sc = est_op2(b, EST_OP_MUL, "adaption_gate * scores", scores, c, gate, sc);
    int o = est_op2(b, EST_OP_BMM, "scores @ adapter_v", b->T * qw, c, sc, val);
    o = est_op1(b, EST_OP_COPY, "adapter transpose.reshape", b->T * qw, c, o);
    o = est_linear_rows(b, "o_proj(adapter_output)", o, (int)b->base_param[EST_LORA_O], b->T, qw, h);
    return est_op2(b, EST_OP_ADD, "output + adapter_output", b->T * h, c, out, o);
}
