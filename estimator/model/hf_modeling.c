#include "hf_modeling.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fw_registry.h"
#include "json_util.h"
#include "lora.h"
#include "quant.h"
#include "peft.h"
#include "sac.h"

est_dtypes est_dtypes_of(const est_run *run) {
    est_dtypes d;
    d.act = est_compute_dtype_bytes(run->precision);
    /* Plain PyTorch (HF Trainer without DeepSpeed/FSDP) keeps fp32 weights and
     * runs the forward under torch.autocast: the embedding output is fp32, so
     * the residual stream stays fp32 and each Linear casts its input. DeepSpeed
     * casts the module itself (engine.py: module.half()/bfloat16()); FSDP's
     * MixedPrecision(param_dtype=...) does the same per unit. The framework
     * says which it does (fw_registry.h). */
    const est_fw_info *fw = est_fw_of(run);
    d.autocast = fw->autocast_over_master && est_has_master(run->precision);
    /* LoRA: the frozen base is loaded in the compute dtype (from_pretrained
     * torch_dtype, as PEFT's and TRL's recipes do), so the embedding output and
     * the residual stream are in it and autocast has nothing to cast but the
     * fp32 adapters (est_lora_saved). */
    if (est_lora_on(run)) d.autocast = false;
    d.resid = d.autocast ? 4 : d.act;
    /* QLoRA: PEFT's prepare_model_for_kbit_training casts every 16-bit
     * parameter that is not quantized (embedding, norms, LM head) to fp32, so
     * the residual stream is fp32 (utils/other.py, peft 0.13). Sharded QLoRA
     * (FSDP) skips that call (TRL's is_sharded_qlora): all stays bf16. */
    if (est_lora_on(run) && run->quant != EST_QUANT_NONE && fw->kbit_prepare_fp32) d.resid = 4;
    return d;
}

static void add(est_terms *t, const char *name, int64_t bytes) {
    if (bytes <= 0) return;
    t->total += bytes; /* always counted, even past the named list */
    const size_t cap = sizeof t->items / sizeof t->items[0];
    if (t->count == cap) {
        ft_strlcpy(t->items[cap - 1].name, "(more tensors)", sizeof t->items[0].name);
        t->items[cap - 1].bytes += bytes;
        return;
    }
    est_term *it = &t->items[t->count++];
    ft_strlcpy(it->name, name, sizeof it->name);
    it->bytes = bytes;
}

/* RMSNorm (LlamaRMSNorm.forward): `x.to(fp32)` is saved by pow and by the mul
 * with rsqrt(var + eps) (also saved, one fp32 per token); the normalized value
 * cast back to the input dtype is saved by `weight * y`. With an fp32 input the
 * casts are no-ops: x itself and the fp32 normalized value are what is saved.
 * GemmaRMSNorm (plus_one) multiplies the fp32 normalized value by
 * (1 + weight.float()) before casting: that mul saves the fp32 value and the
 * fp32 (1 + weight) vector. */
static void rmsnorm_saved(est_terms *t, const char *prefix, int64_t tokens, int64_t h, est_dtypes d,
                          bool plus_one) {
    char name[EST_TERM_NAME_MAX];
    snprintf(name, sizeof name, "%s fp32 input", prefix);
    add(t, name, tokens * h * 4);
    snprintf(name, sizeof name, "%s rsqrt", prefix);
    add(t, name, tokens * 4);
    snprintf(name, sizeof name, "%s normalized", prefix);
    add(t, name, tokens * h * (plus_one ? 4 : d.resid));
    if (plus_one) {
        snprintf(name, sizeof name, "%s (1 + weight) fp32", prefix);
        add(t, name, h * 4);
    }
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
        /* Gemma-2's soft-cap: scores / cap, tanh (which saves its output),
         * times cap, before the mask and softmax. */
        if (m->attn_logit_softcap > 0) add(t, "soft-capped scores (tanh)", probs * d.act);
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

/* Sparse MoE MLP (transformers 4.40 MixtralSparseMoeBlock, Qwen2MoeSparseMoeBlock):
 *   router_logits = gate(x); w = softmax(router_logits, dtype=fp32)   saves w
 *   w, sel = topk(w, k)                                     saves the indices
 *   [Mixtral] w /= w.sum(-1)              saves a clone of w and the sums
 *   for each expert e: idx, top_x = where(mask[e])          2 int64 indices
 *     xe = x[top_x]  (a gathered copy, saved by w1 and w3; under autocast
 *                     each saves its own cast)
 *     ye = w2(act(w1(xe)) * w3(xe)) * w[top_x, idx]   saves the SwiGLU four,
 *                                                     ye and the weights
 *     out.index_add_(0, top_x, ye)
 *   [Qwen2-MoE] + sigmoid(shared_gate(x)) * shared_expert(x).
 * Capacity: dropless (HF loops over experts with no capacity factor), so the
 * experts see k*T token rows in all whatever the balance; only transients
 * depend on balance (est_block_backward_working assumes it even). The router
 * logits feed no auxiliary loss unless output_router_logits is set (false in
 * the shipped configs), and nothing else keeps them. */
static void moe_saved(const est_run *run, est_terms *t, est_dtypes d) {
    const ft_model *m = &run->model;
    const int64_t T = est_tokens(run), h = m->hidden_size, E = m->num_experts;
    const int64_t kT = m->experts_per_token * T, fe = m->moe_intermediate_size;
    const int64_t fs = m->shared_expert_intermediate_size;
    /* The router, and the shared expert's gate_proj, up_proj and gate read x. */
    linear_inputs(t, "mlp norm output", T, h, d, 1 + (fs > 0 ? 3 : 0));
    add(t, "router softmax fp32", T * E * 4);
    add(t, "router top-k indices", kT * 8);
    if (m->norm_topk_prob) add(t, "top-k weights and sums fp32", kT * 4 + T * 4);
    add(t, "routed row indices", 2 * kT * 8);
    add(t, "routed inputs (gathered)", (d.autocast ? 2 : 1) * kT * h * d.act);
    add(t, "experts gate, act, up, product", 4 * kT * fe * d.act);
    add(t, "experts outputs and weights", kT * h * d.act + kT * d.resid);
    if (fs > 0) {
        add(t, "shared expert gate, act, up, product", 4 * T * fs * d.act);
        add(t, "shared expert output, sigmoid gate", T * h * d.act + T * d.act);
    }
}

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

    rmsnorm_saved(t, "attn norm", T, h, d, m->norm_plus_one);
    linear_inputs(t, "attn norm output", T, h, d, 3);
    /* RoPE: `q * cos + rotate_half(q) * sin` saves only cos and sin (q needs no
     * saving: cos does not require grad); they are gathered per layer for the
     * (1, s) position ids, so per position, not per sequence. */
    add(t, "rope cos+sin", 2 * s * m->head_dim * d.act);
    attention_saved(run, t, d, true);
    /* Gemma-2 also normalizes the attention output and the MLP output before
     * each residual add: two more norms whose inputs are fp32 copies. */
    if (m->sandwich_norms) {
        rmsnorm_saved(t, "post-attention norm", T, h, d, true);
        rmsnorm_saved(t, "post-MLP norm", T, h, d, true);
    }
    rmsnorm_saved(t, "mlp norm", T, h, d, m->norm_plus_one);
    if (m->num_experts > 0) {
        moe_saved(run, t, d);
        return;
    }
    linear_inputs(t, "mlp norm output", T, h, d, 2);
    /* SwiGLU: act_fn saves gate, the product saves act(gate) and up, down_proj
     * saves the product (GeGLU's tanh GELU saves its input the same way; Phi-3's
     * fused gate_up output holds gate and up in one tensor of the same size). */
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
    if (m->sandwich_norms) /* Gemma-2's post-attention and post-MLP norms */
        add(t, "post norms fp32 inputs, rsqrt", 2 * (T * h * 4 + T * 4));
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

/* MoE with output_router_logits (transformers 4.40 load_balancing_loss_func):
 * every layer's (T, E) router logits are returned with the outputs and kept
 * to the loss, which concatenates them and takes an fp32 softmax (saved for
 * backward). Counted for the whole forward: early layers see at most
 * L*T*E*(c + 4) bytes too many. */
static int64_t router_logits_bytes(const est_run *run) {
    const ft_model *m = &run->model;
    if (m->num_experts == 0 || !m->output_router_logits) return 0;
    return run->layers_used * est_tokens(run) * m->num_experts * (est_dtypes_of(run).act + 4);
}

int64_t est_model_saved_bytes(const est_run *run) {
    /* The (b, 1, s, s) additive mask built once per forward for SDPA/eager when
     * the batch has padding; every layer's attention saves it (unless a padded
     * per-layer copy replaced it, above). */
    const int64_t router = router_logits_bytes(run);
    if (!run->padding_mask || run->attention == EST_ATTN_FLASH) return router;
    if (run->attention == EST_ATTN_SDPA && run->seq_len % 8 != 0) return router;
    return router + run->micro_batch * run->seq_len * run->seq_len * est_dtypes_of(run).act;
}

int64_t est_rope_cache_bytes(const est_run *run) {
    /* transformers 4.40 modeling_qwen2.py and modeling_mistral.py: each layer's
     * rotary module caches cos and sin for every position up to
     * max_position_embeddings as buffers, cast with the module; 4.40's
     * modeling_llama.py LlamaRotaryEmbedding registers _cos_cached and
     * _sin_cached too ("For BC we register cos and sin cached", unused by its
     * forward). None of them once the rotary modules compute cos/sin per
     * forward (the stack's switch, estimator/catalog/stack.h). */
    const ft_model *m = &run->model;
    if (!run->stack->per_layer_rope_cache) return 0;
    /* Gemma and Phi-3 (4.40) compute cos/sin per call from inv_freq; Mixtral
     * and Qwen2-MoE copy Mistral's and Qwen2's caches. */
    if (m->arch == FT_ARCH_GEMMA || m->arch == FT_ARCH_PHI3 || m->max_position <= 0)
        return 0;
    return run->layers_used * 2 * m->max_position * m->head_dim * est_dtypes_of(run).act;
}

est_regime est_regime_of(const est_run *run) {
    const est_dtypes d = est_dtypes_of(run);
    return (est_regime){.act = (int)d.act, .resid = (int)d.resid, .autocast = d.autocast,
                        .weight = (int)d.act, .train_base = !est_peft_on(run), .adapter = (int)d.act};
}

int64_t est_block_kept_bytes(const est_run *run) {
    /* save_on_cpu copies every saved tensor to the host as it is saved: the
     * GPU keeps nothing between a block's forward and its backward. */
    if (run->activation_offload) return 0;
    return est_block_offloadable_bytes(run);
}

int64_t est_block_offloadable_bytes(const est_run *run) {
    if (est_run_ckpt_wraps(run)) { /* a checkpointed block's */
        /* torch.utils.checkpoint saves the block's input hidden states only;
         * an op-level policy also the outputs of the ops it saves (sac.h). */
        const int64_t input = est_tokens(run) * run->model.hidden_size * est_dtypes_of(run).resid;
        if (run->checkpointing != EST_CKPT_SELECTIVE_OP) return input;
        est_module *m = malloc(sizeof *m);
        char err[160];
        const est_regime g = est_regime_of(run);
        const int64_t kept = m && est_sac_block(run, &g, m, err, sizeof err) == 0 ? est_sac_kept_bytes(m) : 0;
        free(m);
        return input + kept;
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

/* The routed experts' SwiGLU tensors alive at once: transformers 4.x loops
 * over the experts, k*T/E rows each under even routing (gate, up, product);
 * 5.x's grouped_mm_experts_forward (block_moe.c, stack.h moe_experts_fused)
 * runs all k*T rows at once, its gate_up output 2 I wide beside the product. */
static int64_t routed_mlp_bytes(const est_run *run, int64_t T, int64_t bytes) {
    const ft_model *m = &run->model;
    const int64_t kT = m->experts_per_token * T, fe = m->moe_intermediate_size;
    if (run->stack && run->stack->moe_experts_fused) return 3 * kT * fe * bytes;
    return 3 * ((kT + m->num_experts - 1) / m->num_experts) * fe * bytes;
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
    if (m->num_experts > 0) {
        /* Experts run backward one at a time, each on its k*T/E rows (even
         * routing); the shared expert on all T. */
        int64_t routed = routed_mlp_bytes(run, T, d.act);
        int64_t shared = 3 * T * m->shared_expert_intermediate_size * d.act;
        mlp = routed > shared ? routed : shared;
    }
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
    rmsnorm_saved(&t, "final norm", T, h, d, run->model.norm_plus_one);
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
    if (run->loss == EST_LOSS_CCE) { /* Cut Cross-Entropy (block_kernels.c): no logits tensor */
        add(t, "cce lse", b * s * 4);
        add(t, "cce logit_avg", V * 4);
        return;
    }
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
    /* Gemma-2's final soft-cap, logits = cap * tanh(logits / cap): tanh saves
     * its compute-dtype output until the loss backward reaches it. */
    if (m->final_logit_softcap > 0) add(t, "soft-capped logits (tanh)", full * d.act);
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
    if (run->loss == EST_LOSS_CCE) {
        add(t, "grad of hidden states", run->micro_batch * run->seq_len * run->model.hidden_size * est_dtypes_of(run).act);
        return;
    }
    const int64_t shifted = run->micro_batch * (run->seq_len - 1) * run->model.vocab_size;
    if (run->model.final_logit_softcap > 0)
        add(t, "soft-capped logits (tanh)",
            run->micro_batch * run->seq_len * run->model.vocab_size * est_dtypes_of(run).act);
    add(t, "log-softmax fp32", shifted * 4);
    add(t, "grad of log-softmax", shifted * 4);
    add(t, "grad of shifted logits", shifted * 4);
}

int64_t est_block_ckpt_forward_bytes(const est_run *run) {
    const ft_model *m = &run->model;
    const est_dtypes d = est_dtypes_of(run);
    const int64_t T = est_tokens(run);
    if (m->num_experts == 0) return 3 * T * m->intermediate_size * d.act;
    /* One expert's rows at a time (even routing), or the shared expert. */
    int64_t routed = routed_mlp_bytes(run, T, d.act);
    int64_t shared = 3 * T * m->shared_expert_intermediate_size * d.act;
    return routed > shared ? routed : shared;
}
