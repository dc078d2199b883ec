#include "hf_modeling.h"

#include <stdio.h>
#include <string.h>

#include "json_util.h"

int64_t est_tokens(const est_run *run) { return run->micro_batch * run->seq_len; }

est_dtypes est_dtypes_of(const est_run *run) {
    est_dtypes d;
    d.act = est_compute_dtype_bytes(run->precision);
    /* Plain PyTorch (HF Trainer without DeepSpeed/FSDP) keeps fp32 weights and
     * runs the forward under torch.autocast: the embedding output is fp32, so
     * the residual stream stays fp32 and each Linear casts its input. DeepSpeed
     * casts the module itself (engine.py: module.half()/bfloat16()); FSDP's
     * MixedPrecision(param_dtype=...) does the same per unit. */
    d.autocast = run->framework == EST_FW_HF && est_has_master(run->precision);
    d.resid = d.autocast ? 4 : d.act;
    return d;
}

static void add(est_terms *t, const char *name, int64_t bytes) {
    if (bytes <= 0 || t->count >= sizeof t->items / sizeof t->items[0]) return;
    est_term *it = &t->items[t->count++];
    ft_strlcpy(it->name, name, sizeof it->name);
    it->bytes = bytes;
    t->total += bytes;
}

/* RMSNorm (LlamaRMSNorm.forward): x.to(fp32) is saved by pow and mul; the
 * normalized fp32 x*rsqrt is cast back to the input dtype and that cast is saved
 * by `weight * x`. With an fp32 input both casts are no-ops, so the saved tensors
 * are x itself and the fp32 normalized value. */
static void rmsnorm_saved(est_terms *t, const char *prefix, int64_t tokens, int64_t h, est_dtypes d) {
    char name[EST_TERM_NAME_MAX];
    snprintf(name, sizeof name, "%s fp32 input", prefix);
    add(t, name, tokens * h * 4);
    snprintf(name, sizeof name, "%s normalized", prefix);
    add(t, name, tokens * h * d.resid);
}

/* The input the following Linears save: the norm's output once when the module
 * runs in its own dtype; under autocast each Linear saves its own cast. */
static void linear_inputs(est_terms *t, const char *name, int64_t tokens, int64_t h, est_dtypes d,
                          int consumers) {
    add(t, name, d.autocast ? consumers * tokens * h * d.act : tokens * h * d.resid);
}

void est_block_saved(const est_run *run, est_terms *t) {
    memset(t, 0, sizeof *t);
    const ft_model *m = &run->model;
    const est_dtypes d = est_dtypes_of(run);
    const int64_t T = est_tokens(run), h = m->hidden_size, f = m->intermediate_size;
    const int64_t q = m->num_heads * m->head_dim, kv = m->num_kv_heads * m->head_dim;
    const bool grouped = m->num_heads != m->num_kv_heads;
    const bool repeat = grouped && run->attention != EST_ATTN_FLASH; /* repeat_kv copies */

    rmsnorm_saved(t, "attn norm", T, h, d);
    linear_inputs(t, "attn norm output", T, h, d, 3);
    /* q and k are saved by RoPE's `q * cos`; rotate_half builds a new tensor (cat)
     * saved by `* sin`; cos and sin are gathered per layer at (b, s, head_dim). */
    add(t, "q", T * q * d.act);
    add(t, "k", T * kv * d.act);
    add(t, "rotate_half(q)", T * q * d.act);
    add(t, "rotate_half(k)", T * kv * d.act);
    add(t, "rope cos+sin", 2 * T * m->head_dim * d.act);
    add(t, "q after rope", T * q * d.act);
    if (repeat) {
        /* repeat_kv: expand + reshape materializes K and V per query head; the
         * attention saves those copies, and neither k_embed nor v is kept. */
        add(t, "k repeated for GQA", T * q * d.act);
        add(t, "v repeated for GQA", T * q * d.act);
    } else {
        add(t, "k after rope", T * kv * d.act);
        add(t, "v", T * kv * d.act);
    }
    switch (run->attention) {
    case EST_ATTN_EAGER: {
        /* softmax(dtype=float32) saves its fp32 output; .to(dtype) is saved by the
         * matmul with V (a no-op cast in fp32). Dropout with p=0 returns its input. */
        int64_t probs = run->micro_batch * m->num_heads * run->seq_len * run->seq_len;
        add(t, "softmax probabilities fp32", probs * 4);
        if (d.act != 4) add(t, "softmax probabilities cast", probs * d.act);
        /* (b, heads, s, d) -> transpose(1, 2).contiguous(): a copy, saved by o_proj. */
        add(t, "attention output (contiguous)", T * q * d.act);
        break;
    }
    case EST_ATTN_SDPA:
    case EST_ATTN_FLASH:
        /* Memory-efficient and flash kernels save their output (whose storage is
         * already (b, s, heads, d), so the o_proj input is the same tensor) and the
         * per-row log-sum-exp in fp32. */
        add(t, "attention output", T * q * d.act);
        add(t, "attention logsumexp fp32", T * m->num_heads * 4);
        break;
    }
    rmsnorm_saved(t, "mlp norm", T, h, d);
    linear_inputs(t, "mlp norm output", T, h, d, 2);
    /* SwiGLU: act_fn saves gate, the product saves act(gate) and up, down_proj
     * saves the product. */
    add(t, "gate", T * f * d.act);
    add(t, "silu(gate)", T * f * d.act);
    add(t, "up", T * f * d.act);
    add(t, "silu(gate)*up", T * f * d.act);
}

int64_t est_block_kept_bytes(const est_run *run) {
    if (run->checkpointing == EST_CKPT_FULL) {
        /* torch.utils.checkpoint saves the block's input hidden states only. */
        return est_tokens(run) * run->model.hidden_size * est_dtypes_of(run).resid;
    }
    est_terms t;
    est_block_saved(run, &t);
    return t.total;
}

int64_t est_block_forward_transient(const est_run *run) {
    if (run->attention != EST_ATTN_EAGER) return 0;
    /* QK^T/sqrt(d) + mask exists beside the fp32 softmax output for a moment. */
    const est_dtypes d = est_dtypes_of(run);
    return run->micro_batch * run->model.num_heads * run->seq_len * run->seq_len * d.act;
}

int64_t est_block_backward_working(const est_run *run) {
    const ft_model *m = &run->model;
    const est_dtypes d = est_dtypes_of(run);
    const int64_t T = est_tokens(run), h = m->hidden_size, f = m->intermediate_size;
    const int64_t q = m->num_heads * m->head_dim, kv = m->num_kv_heads * m->head_dim;
    /* The residual gradient entering and leaving the block. */
    int64_t resid = 2 * T * h * d.resid;
    /* SwiGLU backward: d(product) then d(silu) and d(up), then d(gate). */
    int64_t mlp = 3 * T * f * d.act;
    /* Attention backward: dQ, dK, dV (per query head when K/V were repeated). */
    bool repeat = m->num_heads != m->num_kv_heads && run->attention != EST_ATTN_FLASH;
    int64_t attn = T * (q + 2 * (repeat ? q : kv)) * d.act;
    if (run->attention == EST_ATTN_EAGER) {
        /* Gradients of the probabilities (compute dtype) and of the scores (fp32). */
        attn += run->micro_batch * m->num_heads * run->seq_len * run->seq_len * (d.act + 4);
    }
    return resid + (mlp > attn ? mlp : attn);
}

int64_t est_final_norm_saved(const est_run *run) {
    est_terms t;
    memset(&t, 0, sizeof t);
    const est_dtypes d = est_dtypes_of(run);
    const int64_t T = est_tokens(run), h = run->model.hidden_size;
    rmsnorm_saved(&t, "final norm", T, h, d);
    linear_inputs(&t, "final norm output", T, h, d, 1);
    return t.total;
}

/* modeling_llama.py / modeling_qwen2.py (4.40), LlamaForCausalLM.forward:
 *   logits = lm_head(h).float()     (b, s, V) fp32; the compute-dtype logits die
 *                                   once cast (ToCopyBackward saves nothing)
 *   shift_logits = logits[..., :-1, :].contiguous()   a second fp32 copy
 *   CrossEntropyLoss -> log_softmax a third, saved for backward
 * Trainer.compute_loss drops the outputs (and so the fp32 logits) before
 * backward, where the log-softmax output, the NLL gradient and the log-softmax
 * gradient are live together (one row shorter than the logits). */
void est_logits_forward(const est_run *run, est_terms *t) {
    memset(t, 0, sizeof *t);
    const ft_model *m = &run->model;
    const est_dtypes d = est_dtypes_of(run);
    const int64_t b = run->micro_batch, s = run->seq_len, V = m->vocab_size;
    if (run->loss == EST_LOSS_CHUNKED) {
        /* Fused linear + cross-entropy (Liger-Kernel fused_linear_cross_entropy.py)
         * computes loss and gradients in the forward, chunk by chunk: chunks of
         * ~b*s*h/V rows (a power of two), each chunk's logits in the compute
         * dtype and an fp32 working copy; the hidden-state gradient (b*s*h) and
         * the head's weight gradient (V*h) are materialized whole. */
        int64_t T = b * s, h = m->hidden_size;
        int64_t inc = (V + h - 1) / h;
        int64_t rows = (T + inc - 1) / inc, chunk = 1;
        while (chunk < rows) chunk <<= 1;
        if (chunk > T) chunk = T;
        add(t, "logits chunk", chunk * V * (d.act + 4));
        add(t, "grad of hidden states", T * h * d.act);
        add(t, "grad of LM head weight", V * h * d.act);
        return;
    }
    const int64_t full = b * s * V, shifted = b * (s - 1) * V;
    /* The cast moment (compute-dtype and fp32 logits together) only matters
     * when s = 1 leaves nothing to shift. */
    if (d.act != 4 && full * d.act + full * 4 > full * 4 + 2 * shifted * 4) {
        add(t, "logits", full * d.act);
        add(t, "logits fp32", full * 4);
        return;
    }
    add(t, "logits fp32", full * 4);
    add(t, "shifted logits fp32", shifted * 4);
    add(t, "log-softmax fp32", shifted * 4);
}

void est_logits_backward(const est_run *run, est_terms *t) {
    memset(t, 0, sizeof *t);
    if (run->loss == EST_LOSS_CHUNKED) return; /* gradients were made in the forward */
    const int64_t shifted = run->micro_batch * (run->seq_len - 1) * run->model.vocab_size;
    add(t, "log-softmax fp32", shifted * 4);
    add(t, "grad of log-softmax", shifted * 4);
    add(t, "grad of shifted logits", shifted * 4);
}
