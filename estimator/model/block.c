/* One decoder block of the Llama family as transformers 4.40-4.49 runs it
 * (LlamaDecoderLayer and its copies), op by op:
 *
 *   residual = x
 *   x = input_layernorm(x)                          RMSNorm (est_rmsnorm)
 *   q, k, v = q_proj(x), k_proj(x), v_proj(x)
 *   cos, sin = rotary_emb(v, position_ids)          4.40: per layer, (s, d) each; from
 *                                                   4.44-4.49 the model's, once (block_ends.c)
 *   q, k = q*cos + rotate_half(q)*sin, ...          rotate_half = cat(-x2, x1)
 *   k, v = repeat_kv(k), repeat_kv(v)               a copy per query head (GQA; not flash)
 *   o = attention(q, k, v, mask)                    SDPA / flash / eager
 *   x = residual + o_proj(o)
 *   residual = x
 *   x = residual + down_proj(act(gate_proj(x')) * up_proj(x'))   x' = post_attention_layernorm(x)
 *
 * Gemma-2 adds a norm after the attention and around the MLP and soft-caps the
 * scores; MoE blocks route each token to k experts (est_moe). What each op
 * saves follows from module_graph.c's rules; nothing here lists saved bytes. */
#include <stdio.h>
#include <string.h>

#include "block.h"
#include "block_build.h"
#include "block_peft_vec.h"
#include "block_kernels.h"
#include "block_prompt.h"
#include "peft_prompt.h"
#include "kernels.h"
#include "json_util.h"
#include "liger.h"
#include "tp.h"

/* q * cos + rotate_half(q) * sin over `width` = heads x head_dim. The
 * products promote to the wider of q's and cos's dtypes: the model-level
 * cos/sin follow the hidden states' dtype (fp32 under autocast over fp32
 * weights), while q is autocast's bf16 Linear output. */
static int rope(est_bld *b, int x, int cos, int sin, int64_t width) {
    const int c = b->m->tensors[x].elem_bytes, cb = b->m->tensors[cos].elem_bytes;
    const int p = cb > c ? cb : c;
    const int64_t n = b->T * width;
    int xc = est_op2(b, EST_OP_MUL, "x * cos", n, p, x, cos);
    int neg = est_op1(b, EST_OP_COPY, "-x2", n / 2, c, x);
    int rot = est_op2(b, EST_OP_COPY, "cat(-x2, x1)", n, c, neg, x);
    int xs = est_op2(b, EST_OP_MUL, "rotate_half * sin", n, p, rot, sin);
    return est_op2(b, EST_OP_ADD, "rotary embedded", n, p, xc, xs);
}

/* LlamaRotaryEmbedding (4.40, per attention layer): inv_freq @ positions
 * (fp32), emb = cat(freqs, freqs), cos()/sin() cast to value_states' dtype. */
static void rotary(est_bld *b, int dtype, int *cos, int *sin) {
    const int64_t sd = b->s * b->run->model.head_dim;
    int freqs = est_op1(b, EST_OP_COPY, "rotary freqs", sd / 2, 4, EST_NONE);
    int emb = est_op1(b, EST_OP_COPY, "rotary emb", sd, 4, freqs);
    int c32 = est_op1(b, EST_OP_COPY, "cos fp32", sd, 4, emb);
    *cos = est_cast(b, "rope cos", c32, dtype);
    int s32 = est_op1(b, EST_OP_COPY, "sin fp32", sd, 4, emb);
    *sin = est_cast(b, "rope sin", s32, dtype);
}

/* Eager attention: softmax(q k^T / sqrt(d) + mask, fp32).to(q.dtype) @ v,
 * then transpose(1, 2).contiguous() (Gemma-2 soft-caps the scores first). */
static int eager_core(est_bld *b, int q, int k, int v, int mask) {
    const ft_model *md = &b->run->model;
    const int c = b->g->act;
    const int64_t scores = b->b * md->num_heads * b->s * b->s, out = b->T * md->num_heads * md->head_dim;
    int sc = est_op2(b, EST_OP_BMM, "q @ k^T", scores, c, q, k);
    est_module_op_gemm(b->m, (double)b->s, (double)md->head_dim, (double)b->s,
                       (double)(b->b * md->num_heads));
    sc = est_op1(b, EST_OP_SCALAR, "/ sqrt(d)", scores, c, sc);
    if (md->attn_logit_softcap > 0) {
        sc = est_op1(b, EST_OP_SCALAR, "/ softcap", scores, c, sc);
        sc = est_op1(b, EST_OP_TANH, "tanh(scores)", scores, c, sc);
        sc = est_op1(b, EST_OP_SCALAR, "* softcap", scores, c, sc);
    }
    if (mask != EST_NONE) sc = est_op2(b, EST_OP_ADD, "+ mask", scores, c, sc, mask);
    int pr = est_op1(b, EST_OP_SOFTMAX, "softmax fp32", scores, 4, sc);
    pr = est_cast(b, "probabilities", pr, c);
    int o = est_op2(b, EST_OP_BMM, "probs @ v", out, c, pr, v);
    est_module_op_gemm(b->m, (double)b->s, (double)b->s, (double)md->head_dim,
                       (double)(b->b * md->num_heads));
    return est_op1(b, EST_OP_COPY, "attention output", out, c, o);
}

/* SDPA (memory-efficient kernel) or flash: one op saving q, k, v, its output
 * and the per-row log-sum-exp (fp32; rows padded to 32 by the memory-
 * efficient kernel). A padding mask whose rows are not a multiple of 8 is
 * padded into a copy first (aten preprocess_mask), which the op saves. The
 * output's storage is already (b, s, heads, d): o_proj reads it as it is. */
static int fused_core(est_bld *b, int q, int k, int v, int mask) {
    const ft_model *md = &b->run->model;
    const int c = b->g->act;
    const bool sdpa = b->run->attention == EST_ATTN_SDPA;
    if (sdpa && mask != EST_NONE && b->s % 8 != 0 && !est_prefix_tokens(b->run)) /* prefix: padded already */
        mask = est_op1(b, EST_OP_COPY, "padded attention mask", b->b * b->s * ((b->s + 7) / 8 * 8), c,
                       mask);
    int16_t in[4] = {(int16_t)q, (int16_t)k, (int16_t)v, (int16_t)mask};
    const int n = sdpa && mask != EST_NONE ? 4 : 3;
    int o = est_module_op(b->m, EST_OP_ATTENTION, "attention output", b->T * md->num_heads * md->head_dim,
                          c, n, in);
    const int64_t rows = sdpa ? (b->s + 31) / 32 * 32 : b->s;
    est_module_op_out2(b->m, "attention logsumexp", b->b * md->num_heads * rows, 4);
    return o;
}

/* Phi-3 (modeling_phi3.py, 4.49): qkv = qkv_proj(x); q, k, v are slices of
 * it (views: the builder passes qkv itself), RoPE makes q and k anew. Flash
 * attention keeps v as given, so the whole qkv stays for backward; SDPA's
 * value.contiguous() (4.49 sdpa_attention_forward) and eager's matmul copy v
 * out of it (repeat_kv copies it under GQA). */
static void fused_qkv(est_bld *b, int x, int *q, int *k, int *v) {
    const ft_model *md = &b->run->model;
    int qkv = est_block_linear(b, EST_LORA_Q, "qkv_proj", x);
    *q = *k = *v = qkv;
    if (b->run->attention != EST_ATTN_FLASH && md->num_heads == md->num_kv_heads)
        *v = est_op1(b, EST_OP_COPY, "v.contiguous()", b->T * md->num_kv_heads * md->head_dim,
                     b->m->tensors[qkv].elem_bytes, qkv);
}

static int attention(est_bld *b, int x, int mask, int q_norm, int k_norm) {
    const ft_model *md = &b->run->model;
    const int64_t qw = md->num_heads * md->head_dim, kvw = md->num_kv_heads * md->head_dim;
    int q, k, v;
    if (md->fused_qkv) {
        fused_qkv(b, x, &q, &k, &v);
    } else {
        /* axolotl's LoRA_QKV makes q, k and v first; the norms follow. */
        const bool fused = est_kernel_on(b->run, EST_KERNEL_LORA_QKV);
        if (fused) est_kernel_lora_qkv(b, x, &q, &k, &v);
        else q = est_block_linear(b, EST_LORA_Q, "q_proj", x);
        /* Qwen3 (modeling_qwen3.py, 4.51) and Gemma 3 (modeling_gemma3.py, 4.50):
         * q_norm(q_proj(x).view(..., head_dim)), k likewise, before RoPE. */
        if (q_norm != EST_NONE) q = est_rmsnorm_over(b, "q_norm", q, q_norm, md->norm_plus_one, md->head_dim);
        if (!fused) k = est_block_linear(b, EST_LORA_K, "k_proj", x);
        if (k_norm != EST_NONE) k = est_rmsnorm_over(b, "k_norm", k, k_norm, md->norm_plus_one, md->head_dim);
        if (!fused) v = est_block_linear(b, EST_LORA_V, "v_proj", x);
    }
    int cos = b->m->shared[EST_SHARED_COS], sin = b->m->shared[EST_SHARED_SIN];
    if (cos == EST_NONE) rotary(b, b->m->tensors[v].elem_bytes, &cos, &sin);
    if (b->run->liger & EST_LIGER_ROPE) {
        est_liger_rope(b, q, k, cos, sin); /* q and k rotated where they lie */
    } else {
        q = rope(b, q, cos, sin, qw);
        k = rope(b, k, cos, sin, kvw);
    }
    est_attention_kv(b, &k, &v, mask); /* the KV cache and repeat_kv (block_kv.c) */
    if (est_prefix_tokens(b->run) > 0) mask = est_prefix_layer_mask(b, mask); /* block_prompt.c */
    if (b->g->autocast) { /* SDPA and matmul are on autocast's lower-precision list */
        q = est_cast(b, "autocast q", q, b->g->act);
        k = est_cast(b, "autocast k", k, b->g->act);
        v = est_cast(b, "autocast v", v, b->g->act);
    }
    int o = b->run->attention == EST_ATTN_EAGER ? eager_core(b, q, k, v, mask)
                                                 : fused_core(b, q, k, v, mask);
    if (est_kernel_on(b->run, EST_KERNEL_LORA_O)) return est_kernel_lora_o(b, o);
    o = est_block_linear(b, EST_LORA_O, "o_proj", o);
    return b->run->peft == EST_PEFT_ADAPTION_PROMPT ? est_adaption_prompt(b, x, o) : o; /* block_prompt.c */
}

/* Gated MLP: down(act(gate(x)) * up(x)); Phi-3: gate, up = gate_up_proj(x).chunk(2)
 * (views of one tensor, which act and the product then keep whole) and
 * down(up * act(gate)). */
static int mlp(est_bld *b, int x) {
    const int64_t n = b->T * b->run->model.intermediate_size;
    if (est_kernel_on(b->run, EST_KERNEL_FUSED_MLP)) return est_kernel_fused_mlp(b, x);
    if (est_kernel_on(b->run, EST_KERNEL_LORA_MLP)) return est_kernel_lora_mlp(b, x);
    if (b->run->liger & (EST_LIGER_SWIGLU | EST_LIGER_GEGLU)) { /* LigerSwiGLUMLP, LigerGEGLUMLP */
        if (b->run->model.fused_gate_up) {
            int gu = est_block_linear(b, EST_LORA_GATE, "gate_up_proj", x);
            return est_block_linear(b, EST_LORA_DOWN, "down_proj", est_liger_glu(b, gu, gu));
        }
        int gate = est_block_linear(b, EST_LORA_GATE, "gate_proj", x);
        int up = est_block_linear(b, EST_LORA_UP, "up_proj", x);
        return est_block_linear(b, EST_LORA_DOWN, "down_proj", est_liger_glu(b, gate, up));
    }
    if (b->run->model.fused_gate_up) {
        int gu = est_block_linear(b, EST_LORA_GATE, "gate_up_proj", x);
        const int c = b->m->tensors[gu].elem_bytes;
        int a = est_op1(b, EST_OP_ACT, "act(gate)", n, c, gu);
        int p = est_op2(b, EST_OP_MUL, "up * act(gate)", n, c, gu, a);
        return est_block_linear(b, EST_LORA_DOWN, "down_proj", p);
    }
    int gate = est_block_linear(b, EST_LORA_GATE, "gate_proj", x);
    int up = est_block_linear(b, EST_LORA_UP, "up_proj", x);
    const int c = b->m->tensors[gate].elem_bytes;
    int a = est_op1(b, EST_OP_ACT, "act(gate)", n, c, gate);
    int p = est_op2(b, EST_OP_MUL, "act(gate) * up", n, c, a, up);
    return est_block_linear(b, EST_LORA_DOWN, "down_proj", p);
}


static int norm_param_of(est_bld *b, const char *name, int64_t width) {
    int w = est_module_param(b->m, name, width, 1, EST_PK_NORM, -1, b->g->train_base, b->g->weight);
    return width == b->run->model.hidden_size ? est_vec_norm(b, w, name) : w; /* LN tuning's copy */
}

static int norm_param(est_bld *b, const char *name) { return norm_param_of(b, name, b->run->model.hidden_size); }

int est_module_block(const est_run *run, const est_regime *g, bool no_grad, est_module *m,
                     char *err, size_t errlen) {
    est_bld b;
    est_module_begin(m, EST_MODULE_BLOCK);
    m->no_grad = no_grad;
    est_bld_init(&b, m, run, g);
    const ft_model *md = &run->model;
    const bool po = md->norm_plus_one, sandwich = md->sandwich_norms;
    /* Parameters in registration order (model.parameters()): the attention's
     * and MLP's Linears, then the norms. */
    est_block_linear_params(&b);
    if (md->num_experts > 0) est_moe_params(&b);
    const int q_norm = md->qk_norm ? norm_param_of(&b, "q_norm", md->head_dim) : EST_NONE;
    const int k_norm = md->qk_norm ? norm_param_of(&b, "k_norm", md->head_dim) : EST_NONE;
    int n_in = norm_param(&b, "input_layernorm"), n_post = norm_param(&b, "post_attention_layernorm");
    int n_pre_ff = sandwich ? norm_param(&b, "pre_feedforward_layernorm") : EST_NONE;
    int n_post_ff = sandwich ? norm_param(&b, "post_feedforward_layernorm") : EST_NONE;
    const bool in_grad = g->masked ? g->in_grad : g->train_base || est_peft_on(run);
    const int64_t Ts = est_tp_seq_tokens(run, b.T); /* sequence-parallel regions (tp.h) */
    int x = est_module_input(m, "hidden states", Ts * md->hidden_size, g->resid, in_grad);
    int mask = est_prefix_tokens(run) > 0 ? est_prefix_mask_input(&b) /* block_prompt.c */
               : est_attention_masked(run) ? est_module_input(m, "attention mask", b.b * b.s * b.s, g->act, false) : EST_NONE;
    m->shared[EST_SHARED_MASK] = (int16_t)mask;
    if (est_rope_shared(run)) { /* the model's cos/sin (block_ends.c rope_shared) */
        m->shared[EST_SHARED_COS] = (int16_t)est_module_input(m, "rope cos", b.s * md->head_dim, g->resid, false);
        m->shared[EST_SHARED_SIN] = (int16_t)est_module_input(m, "rope sin", b.s * md->head_dim, g->resid, false);
    }
    int h = est_tp_gather(&b, est_rmsnorm(&b, "attn norm", x, n_in, po));
    h = est_tp_scatter(&b, attention(&b, h, mask, q_norm, k_norm));
    if (sandwich) h = est_rmsnorm(&b, "post-attention norm", h, n_post, true);
    const int rb = g->resid;
    int r1 = est_op2(&b, EST_OP_ADD, "residual + attention", Ts * md->hidden_size, rb, x, h);
    h = est_tp_gather(&b, est_rmsnorm(&b, "mlp norm", r1, sandwich ? n_pre_ff : n_post, po));
    h = est_tp_scatter(&b, md->num_experts > 0 ? est_moe_mlp(&b, h) : mlp(&b, h));
    if (sandwich) h = est_rmsnorm(&b, "post-MLP norm", h, n_post_ff, true);
    int out = est_op2(&b, EST_OP_ADD, "residual + mlp", Ts * md->hidden_size, rb, r1, h);
    return est_bld_done(&b, out, err, errlen);
}
