#include "hf_modeling.h"

#include <stdio.h>
#include <string.h>

#include "json_util.h"
#include "lora.h"
#include "quant.h"

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
    /* LoRA: the frozen base is loaded in the compute dtype (from_pretrained
     * torch_dtype, as PEFT's and TRL's recipes do), so the embedding output and
     * the residual stream are in it and autocast has nothing to cast but the
     * fp32 adapters (est_lora_saved). */
    if (est_lora_on(run)) d.autocast = false;
    d.resid = d.autocast ? 4 : d.act;
    /* QLoRA: PEFT's prepare_model_for_kbit_training casts every 16-bit
     * parameter that is not quantized (embedding, norms, LM head) to fp32, so
     * the residual stream is fp32 (utils/other.py, peft 0.13). */
    if (est_lora_on(run) && run->quant != EST_QUANT_NONE) d.resid = 4;
    return d;
}

static void add(est_terms *t, const char *name, int64_t bytes) {
    if (bytes <= 0 || t->count >= sizeof t->items / sizeof t->items[0]) return;
    est_term *it = &t->items[t->count++];
    ft_strlcpy(it->name, name, sizeof it->name);
    it->bytes = bytes;
    t->total += bytes;
}

/* RMSNorm (LlamaRMSNorm.forward): `x.to(fp32)` is saved by pow and by the mul
 * with rsqrt(var + eps) (also saved, one fp32 per token); the normalized value
 * cast back to the input dtype is saved by `weight * y`. With an fp32 input the
 * casts are no-ops: x itself and the fp32 normalized value are what is saved. */
static void rmsnorm_saved(est_terms *t, const char *prefix, int64_t tokens, int64_t h, est_dtypes d) {
    char name[EST_TERM_NAME_MAX];
    snprintf(name, sizeof name, "%s fp32 input", prefix);
    add(t, name, tokens * h * 4);
    snprintf(name, sizeof name, "%s rsqrt", prefix);
    add(t, name, tokens * 4);
    snprintf(name, sizeof name, "%s normalized", prefix);
    add(t, name, tokens * h * d.resid);
}

/* The input the following Linears save: the norm's output once when the module
 * runs in its own dtype; under autocast each Linear saves its own cast. */
static void linear_inputs(est_terms *t, const char *name, int64_t tokens, int64_t h, est_dtypes d,
                          int consumers) {
    add(t, name, d.autocast ? consumers * tokens * h * d.act : tokens * h * d.resid);
}

static int64_t ceil_to(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* What the attention core saves. `o_saves_copy`: eager attention's contiguous
 * output copy is saved only by o_proj (for its weight gradient, or as its
 * input when a frozen o_proj saves it); SDPA's output is saved by SDPA itself. */
static void attention_saved(const est_run *run, est_terms *t, est_dtypes d, bool o_saves_copy) {
    const ft_model *m = &run->model;
    const int64_t b = run->micro_batch, s = run->seq_len, T = b * s;
    const int64_t q = m->num_heads * m->head_dim, kv = m->num_kv_heads * m->head_dim;
    /* repeat_kv (expand + reshape) materializes K and V per query head before
     * eager and SDPA attention; the flash-attention path takes GQA as is. */
    const bool repeat = m->num_heads != m->num_kv_heads && run->attention != EST_ATTN_FLASH;
    const int64_t kv_saved = repeat ? q : kv;
    switch (run->attention) {
    case EST_ATTN_EAGER: {
        /* QK^T saves q and k; softmax(dtype=float32) saves its fp32 output; its
         * cast back is saved by the matmul with V (which saves V too); dropout
         * with p = 0 is skipped. The output (b, heads, s, d) is transposed and
         * made contiguous: a copy, saved by o_proj. */
        int64_t probs = b * m->num_heads * s * s;
        add(t, "q after rope", T * q * d.act);
        add(t, "k after rope", T * kv_saved * d.act);
        add(t, "v", T * kv_saved * d.act);
        add(t, "softmax probabilities fp32", probs * 4);
        if (d.act != 4) add(t, "softmax probabilities cast", probs * d.act);
        if (o_saves_copy) add(t, "attention output (contiguous copy)", T * q * d.act);
        break;
    }
    case EST_ATTN_SDPA:
    case EST_ATTN_FLASH:
        /* The memory-efficient / flash kernels save q, k, v, their output (whose
         * storage is already (b, s, heads, d), so o_proj saves the same tensor)
         * and the per-row log-sum-exp in fp32, padded to 32 rows (mem-efficient). */
        add(t, "q after rope", T * q * d.act);
        add(t, "k after rope", T * kv_saved * d.act);
        add(t, "v", T * kv_saved * d.act);
        add(t, "attention output", T * q * d.act);
        add(t, "attention logsumexp fp32",
            b * m->num_heads * (run->attention == EST_ATTN_SDPA ? ceil_to(s, 32) : s) * 4);
        /* With a padding mask the mem-efficient kernel needs rows aligned to 8
         * elements; otherwise aten/.../attention.cpp preprocess_mask pads a copy
         * (b, 1, s, ceil8(s)) that each layer saves. */
        if (run->attention == EST_ATTN_SDPA && run->padding_mask && s % 8 != 0)
            add(t, "padded attention mask", b * s * ceil_to(s, 8) * d.act);
        break;
    }
}

static void frozen_block_saved(const est_run *run, est_terms *t);

void est_block_saved(const est_run *run, est_terms *t) {
    memset(t, 0, sizeof *t);
    if (est_lora_on(run)) {
        frozen_block_saved(run, t);
        return;
    }
    const ft_model *m = &run->model;
    const est_dtypes d = est_dtypes_of(run);
    const int64_t s = run->seq_len, T = run->micro_batch * s;
    const int64_t h = m->hidden_size, f = m->intermediate_size;

    rmsnorm_saved(t, "attn norm", T, h, d);
    linear_inputs(t, "attn norm output", T, h, d, 3);
    /* RoPE: `q * cos + rotate_half(q) * sin` saves only cos and sin (q needs no
     * saving: cos does not require grad); they are gathered per layer for the
     * (1, s) position ids, so per position, not per sequence. */
    add(t, "rope cos+sin", 2 * s * m->head_dim * d.act);
    attention_saved(run, t, d, true);
    rmsnorm_saved(t, "mlp norm", T, h, d);
    linear_inputs(t, "mlp norm output", T, h, d, 2);
    /* SwiGLU: act_fn saves gate, the product saves act(gate) and up, down_proj
     * saves the product. */
    add(t, "gate", T * f * d.act);
    add(t, "silu(gate)", T * f * d.act);
    add(t, "up", T * f * d.act);
    add(t, "silu(gate)*up", T * f * d.act);
}

/* A block whose base weights are frozen (LoRA). Autograd saves a tensor only
 * for the gradients it must make (torch's gen_variable_type.py guards each
 * saved input with should_compute_output): a frozen Linear (mm) keeps its
 * weight, not its input, and the RMSNorm's `weight * y` keeps no y. What
 * still flows back through every block saves as before: the norms' fp32
 * input and rsqrt, RoPE's cos/sin, the attention kernel's tensors, SwiGLU's
 * gate, silu(gate) and up. int8 (bitsandbytes MatMul8bitLt) saves its input A
 * whenever that input needs a gradient. The adapters add their own (lora.c). */
static void frozen_block_saved(const est_run *run, est_terms *t) {
    const ft_model *m = &run->model;
    const est_dtypes d = est_dtypes_of(run);
    const int64_t s = run->seq_len, T = run->micro_batch * s;
    const int64_t h = m->hidden_size, f = m->intermediate_size;
    const bool int8 = run->quant == EST_QUANT_INT8;
    /* Quantized Linears return their input's dtype (Linear4bit: .to(inp_dtype);
     * MatMul8bitLt: .to(A.dtype)): fp32 outputs on the fp32 residual stream,
     * and RoPE's cos/sin follow q's dtype. SDPA under autocast still saves
     * compute-dtype casts of q, k, v. */
    const int64_t out_b = run->quant != EST_QUANT_NONE ? d.resid : d.act;
    bool base_saves[EST_LORA_IN_COUNT] = {false};

    add(t, "attn norm fp32 input", T * h * 4);
    add(t, "attn norm rsqrt", T * 4);
    if (int8) add(t, "attn norm output (int8 q/k/v input)", T * h * d.resid);
    base_saves[EST_LORA_IN_ATTN_NORM] = int8;
    add(t, "rope cos+sin", 2 * s * m->head_dim * out_b);
    attention_saved(run, t, d, int8);
    /* SDPA's saved output is o_proj's input; eager's copy is saved only when
     * the int8 o_proj keeps its input. */
    base_saves[EST_LORA_IN_ATTN_OUT] = run->attention != EST_ATTN_EAGER || int8;
    add(t, "mlp norm fp32 input", T * h * 4);
    add(t, "mlp norm rsqrt", T * 4);
    if (int8) add(t, "mlp norm output (int8 gate/up input)", T * h * d.resid);
    base_saves[EST_LORA_IN_MLP_NORM] = int8;
    add(t, "gate", T * f * out_b);
    add(t, "silu(gate)", T * f * out_b);
    add(t, "up", T * f * out_b);
    if (int8) add(t, "silu(gate)*up (int8 down input)", T * f * out_b);
    base_saves[EST_LORA_IN_MLP_PRODUCT] = int8;

    est_lora_saved_bytes a;
    est_lora_saved(run, base_saves, &a);
    add(t, "lora A inputs", a.a_inputs);
    add(t, "lora B inputs", a.b_inputs);
    add(t, "lora dropout masks", a.dropout_masks);
}

int64_t est_model_saved_bytes(const est_run *run) {
    /* The (b, 1, s, s) additive mask built once per forward for SDPA/eager when
     * the batch has padding; every layer's attention saves it (unless a padded
     * per-layer copy replaced it, above). */
    if (!run->padding_mask || run->attention == EST_ATTN_FLASH) return 0;
    if (run->attention == EST_ATTN_SDPA && run->seq_len % 8 != 0) return 0;
    return run->micro_batch * run->seq_len * run->seq_len * est_dtypes_of(run).act;
}

int64_t est_rope_cache_bytes(const est_run *run) {
    /* transformers 4.40 modeling_qwen2.py and modeling_mistral.py: each layer's
     * rotary module caches cos and sin for every position up to
     * max_position_embeddings as buffers, cast with the module. Llama's 4.40
     * rotary module keeps only inv_freq. */
    const ft_model *m = &run->model;
    if (m->arch == FT_ARCH_LLAMA || m->max_position <= 0) return 0;
    return run->layers_used * 2 * m->max_position * m->head_dim * est_dtypes_of(run).act;
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
    /* QLoRA: a dequantized weight (or int8's input codes and product). */
    if (est_lora_on(run) && run->quant != EST_QUANT_NONE) {
        int64_t q = est_quant_forward_transient(run);
        if (run->attention != EST_ATTN_EAGER) return q;
        const est_dtypes d = est_dtypes_of(run);
        int64_t scores = run->micro_batch * run->model.num_heads * run->seq_len * run->seq_len * d.act;
        return q > scores ? q : scores;
    }
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
    if (est_lora_on(run) && run->quant != EST_QUANT_NONE) {
        /* fp32 SwiGLU gradients, and the weight dequantized for dX. */
        mlp = 3 * T * f * d.resid + est_quant_backward_transient(run);
        attn += est_quant_backward_transient(run);
    }
    return resid + (mlp > attn ? mlp : attn);
}

int64_t est_final_norm_saved(const est_run *run) {
    est_terms t;
    memset(&t, 0, sizeof t);
    const est_dtypes d = est_dtypes_of(run);
    const int64_t T = est_tokens(run), h = run->model.hidden_size;
    if (est_lora_on(run)) {
        /* Frozen norm weight and LM head (never quantized: transformers keeps
         * lm_head out of bitsandbytes, get_keys_to_not_convert): only the
         * norm's fp32 input and rsqrt are saved. */
        return T * h * 4 + T * 4;
    }
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
    /* With one sequence, logits[..., :-1, :] of a (1, s, V) tensor is already
     * contiguous: .contiguous() returns it and no copy is made. */
    const int64_t shift_copy = b > 1 ? shifted * 4 : 0;
    /* The cast moment (compute-dtype and fp32 logits together) wins only when
     * little is left to shift. */
    if (d.act != 4 && full * d.act > shift_copy + shifted * 4) {
        add(t, "logits", full * d.act);
        add(t, "logits fp32", full * 4);
        return;
    }
    add(t, "logits fp32", full * 4);
    add(t, "shifted logits fp32", shift_copy);
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
