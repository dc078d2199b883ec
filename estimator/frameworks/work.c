/* The compute of each unit, from the same Hugging Face modeling code
 * (transformers 4.40 modeling_llama.py / qwen2 / mistral) that hf_modeling.c
 * reads for the activation memory; the collectives, offload copies and
 * optimizer steps are in work_parallel.c.
 *
 * Notation: b micro-batch, s sequence, T = b*s tokens, h hidden, f MLP width,
 * q = heads*head_dim, kv = kv_heads*head_dim, V vocabulary, c bytes of the
 * compute dtype, r bytes of the residual stream (4 under autocast). */
#include "work.h"

#include <math.h>

#include "hf_modeling.h"
#include "lora.h"
#include "profiles.h"
#include "work_parallel.h"

/* What every emitter of one run needs. */
typedef struct shape {
    double b, s, T, h, f, q, kv, V, c, rb;
    bool autocast;
} shape;

static shape shape_of(const est_run *run) {
    const ft_model *m = &run->model;
    const est_dtypes d = est_dtypes_of(run);
    shape x = {
        .b = (double)run->micro_batch,
        .s = (double)run->seq_len,
        .h = (double)m->hidden_size,
        .f = (double)m->intermediate_size,
        .q = (double)(m->num_heads * m->head_dim),
        .kv = (double)(m->num_kv_heads * m->head_dim),
        .V = (double)m->vocab_size,
        .c = (double)d.act,
        .rb = (double)d.resid,
        .autocast = d.autocast,
    };
    x.T = x.b * x.s;
    return x;
}

int64_t est_matmul_params(const est_run *run) {
    const ft_model *m = &run->model;
    const int64_t h = m->hidden_size, f = m->intermediate_size;
    const int64_t q = m->num_heads * m->head_dim, kv = m->num_kv_heads * m->head_dim;
    return run->layers_used * (h * q + 2 * h * kv + q * h + 3 * h * f) + m->vocab_size * h;
}

/* One block's parameters as PyTorch counts them. */
static int64_t block_params(const est_run *run) {
    est_params pp;
    est_run_params(run, &pp);
    return pp.layer.total;
}

static void host(est_step *st, double layer_host_frac) {
    est_event *e = est_step_add(st, EST_EV_HOST);
    if (e) e->u.host.layer_host_frac = layer_host_frac;
}

/* LlamaRMSNorm.forward over `tokens` x `width`: x.to(fp32) (a copy unless the
 * stream is fp32), pow(2), mean(-1), rsqrt(var + eps) (per token), x * rsqrt,
 * .to(input dtype) (a copy unless fp32), weight * y. Bytes read + written per
 * element: (r+4) + 8 + 4 + 8 + (4+r) + 2r. `scale` 2: its backward. */
static void rmsnorm(est_step *st, double tokens, double width, double rb, double scale) {
    bool cast = rb != 4;
    double per = (cast ? rb + 4 : 0) + 8 + 4 + 8 + (cast ? 4 + rb : 0) + 2 * rb;
    est_step_memory_op(st, scale * (tokens * width * per), scale * (6 + (cast ? 2 : 0)));
}

/* The seven projections (bias adds fused by addmm), `passes` times each: 1 in
 * forward; in backward 2 (input and weight gradients), 1 under LoRA (frozen
 * weights get no weight gradient; the adapters' own GEMMs, 2*T*r*(d_in+d_out)
 * each, are left out: r << h). */
static void block_gemms(est_step *st, const shape *x, double passes) {
    const double proj[7][2] = {{x->h, x->q}, {x->h, x->kv}, {x->h, x->kv}, {x->q, x->h},
                               {x->h, x->f}, {x->h, x->f},  {x->f, x->h}};
    for (int i = 0; i < 7; i++) est_step_gemm(st, x->T, proj[i][0], proj[i][1], x->c, passes, passes);
}

/* A block's elementwise work before its attention core; `scale` 2 is its
 * backward (read the output gradient and the saved inputs, write the input
 * gradient). */
static void block_elementwise_pre(est_step *st, const est_run *run, const shape *x, double scale) {
    rmsnorm(st, x->T, x->h, x->rb, scale);
    rmsnorm(st, x->T, x->h, x->rb, scale);
    if (x->autocast) {
        /* autocast casts each Linear's fp32 input (q, k, v, gate, up read the
         * fp32 norm output) and, once per forward (its weight cache), each weight. */
        est_step_memory_op(st, scale * (5 * x->T * x->h * (4 + x->c)), scale * 5);
        double w = x->h * x->q + 2 * x->h * x->kv + x->q * x->h + 3 * x->h * x->f;
        est_step_memory_op(st, scale * (w * (4 + x->c)), scale * 7);
    }
    /* RoPE on q and k: q*cos + rotate_half(q)*sin = neg, cat, two muls, add
     * (~10 element passes), and the per-layer cos/sin gather. */
    est_step_memory_op(st, scale * (10 * x->T * (x->q + x->kv) * x->c), scale * 12);
    const bool gqa = run->model.num_heads != run->model.num_kv_heads;
    if (gqa && run->attention != EST_ATTN_FLASH) /* repeat_kv materializes K and V per head */
        est_step_memory_op(st, scale * (2 * x->T * (x->kv + x->q) * x->c), scale * 2);
}

/* After the core: two residual adds (read 2, write 1) and SwiGLU: silu(gate)
 * (2) and the product with up (3) passes over T x f. */
static void block_elementwise_post(est_step *st, const shape *x, double scale) {
    est_step_memory_op(st, scale * (2 * 3 * x->T * x->h * x->rb), scale * 2);
    est_step_memory_op(st, scale * (5 * x->T * x->f * x->c), scale * 2);
}

/* The attention core, forward (`scale` 1, or 2 for eager's backward: four
 * batched GEMMs and the score gradients) or the fused kernels' backward. */
static void attention_core(est_step *st, const est_run *run, const shape *x, bool backward,
                           double scale) {
    const ft_model *m = &run->model;
    if (run->attention == EST_ATTN_EAGER) {
        /* QK^T and PV as batched GEMMs of (s x d) @ (d x s) and (s x s) @ (s x d)
         * per head, one launch each; the scores go through /sqrt(d), + mask,
         * softmax in fp32 and the cast back: (2c) + (3c) + (c+4) + (4+c) bytes
         * per score; the output's transpose(1,2).contiguous(). */
        const double hd = (double)m->head_dim, bh = x->b * (double)m->num_heads;
        est_step_gemm(st, x->s, hd, x->s, x->c, scale * bh, scale);
        est_step_gemm(st, x->s, x->s, hd, x->c, scale * bh, scale);
        est_step_memory_op(st, scale * (bh * x->s * x->s * (7 * x->c + 8)), scale * 4);
        est_step_memory_op(st, scale * (2 * x->T * x->q * x->c), scale);
        return;
    }
    /* SDPA/flash: 4 b s^2 q FLOPs (QK^T and PV), half of them under a causal
     * kernel; an explicit padding mask makes SDPA compute the full square.
     * Forward reads q, k, v and writes o; backward reads q, k, v, o, dO and
     * writes dq, dk, dv. */
    bool causal = run->attention == EST_ATTN_FLASH || !run->padding_mask;
    est_event *e = est_step_add(st, EST_EV_ATTENTION);
    if (!e) return;
    e->u.attn.flops = 4 * x->b * x->s * x->s * x->q * (causal ? 0.5 : 1.0);
    e->u.attn.backward = backward;
    if (backward) {
        e->u.attn.bytes = x->T * (4 * x->q + 4 * x->kv) * x->c;
        e->u.attn.kernels = 2;
    } else {
        e->u.attn.bytes = x->T * (2 * x->q + 2 * x->kv) * x->c;
        e->u.attn.kernels = run->padding_mask && run->attention == EST_ATTN_SDPA ? 3 : 1;
    }
}

static void block_forward_compute(est_step *st, const est_run *run, const shape *x) {
    block_gemms(st, x, 1);
    block_elementwise_pre(st, run, x, 1);
    attention_core(st, run, x, false, 1);
    block_elementwise_post(st, x, 1);
}

/* One decoder block's backward: each GEMM's gradients, the elementwise ops at
 * twice their forward traffic, the attention backward, and the recompute of
 * checkpointing. */
static void block_backward_compute(est_step *st, const est_run *run, const shape *x) {
    block_gemms(st, x, est_lora_on(run) ? 1 : 2);
    block_elementwise_pre(st, run, x, 2);
    block_elementwise_post(st, x, 2);
    if (run->attention == EST_ATTN_EAGER) attention_core(st, run, x, false, 2);
    else attention_core(st, run, x, true, 1);
    /* DeepSpeed ZeRO copies each gradient into its reduce bucket (or, at
     * stage 3, the contiguous gradient buffer) as the hook fires. */
    if (run->framework == EST_FW_DEEPSPEED && run->zero_stage >= 1)
        est_step_memory_op(st, 2 * x->c * (double)block_params(run), 9);
    if (run->checkpointing == EST_CKPT_FULL) block_forward_compute(st, run, x);
    else if (run->checkpointing == EST_CKPT_SELECTIVE) attention_core(st, run, x, false, 1);
}

/* Final norm, LM head and loss forward (modeling_llama.py
 * LlamaForCausalLM.forward; hf_modeling.c's est_logits_forward for the tensors). */
static void head_forward(est_step *st, const est_run *run, const shape *x) {
    rmsnorm(st, x->T, x->h, x->rb, 1);
    if (x->autocast) est_step_memory_op(st, x->T * x->h * (4 + x->c) + x->V * x->h * (4 + x->c), 2);
    const double up = x->c == 4 ? 0 : x->c + 4; /* .float() of the logits */
    if (run->loss == EST_LOSS_CHUNKED) {
        /* Fused linear cross-entropy (Liger-Kernel): per chunk of ~T/ceil(V/h)
         * rows, the logits GEMM, their fp32 softmax and gradient, and both
         * gradient GEMMs, all inside the forward. */
        double chunks = ceil(x->V / x->h), rows = fmax(1, ceil(x->T / chunks));
        est_step_gemm(st, rows, x->h, x->V, x->c, chunks, chunks);
        est_step_gemm(st, rows, x->V, x->h, x->c, chunks, chunks);
        est_step_gemm(st, x->h, rows, x->V, x->c, chunks, chunks);
        est_step_memory_op(st, x->T * x->V * (up + 12), 4 * chunks);
        return;
    }
    est_step_gemm(st, x->T, x->h, x->V, x->c, 1, 1);
    /* logits.float(), the shifted .contiguous() copy (only when b > 1: one
     * sequence is already contiguous), log_softmax, nll. */
    est_step_memory_op(st, x->T * x->V * (up + (x->b > 1 ? 8 : 0) + 8), 4);
}

/* The loss backward: nll (4), log_softmax (12), the shift's slice backward
 * (4 + 8), the cast's backward (4 + c). Inside the forward when chunked. */
static void loss_backward(est_step *st, const est_run *run, const shape *x) {
    if (run->loss == EST_LOSS_CHUNKED) return;
    const double up = x->c == 4 ? 0 : x->c + 4;
    est_step_memory_op(st, x->T * x->V * (4 + 12 + 12 + up), 6);
}

static void head_backward(est_step *st, const est_run *run, const shape *x) {
    if (run->loss != EST_LOSS_CHUNKED) /* LoRA: a frozen head has no weight gradient */
        est_step_gemm(st, x->T, x->h, x->V, x->c, est_lora_on(run) ? 1 : 2, est_lora_on(run) ? 1 : 2);
    rmsnorm(st, x->T, x->h, x->rb, 1);
    rmsnorm(st, x->T, x->h, x->rb, 1);
    if (x->autocast) est_step_memory_op(st, x->V * x->h * (4 + x->c), 1);
}

/* Embedding lookup, and the attention mask built once per forward when used. */
static void embed_forward(est_step *st, const est_run *run, const shape *x) {
    est_step_memory_op(st, x->T * x->h * 2 * x->rb, 1);
    if (run->padding_mask || run->attention == EST_ATTN_EAGER) /* _update_causal_mask */
        est_step_memory_op(st, 3 * x->b * x->s * x->s * x->c, 6);
}

/* The dense backward: zero the V x h gradient, index_add the token rows. */
static void embed_backward(est_step *st, const est_run *run, const shape *x) {
    const double g = x->autocast ? 4 : x->c;
    est_step_memory_op(st, x->V * x->h * g + 3 * x->T * x->h * g, 3);
    if (run->model.tied_embeddings) /* added into the head's .grad */
        est_step_memory_op(st, 3 * x->V * x->h * g, 1);
}

void est_work_emit(est_step *st, const est_run *run, const est_constants *k, est_unit unit,
                   int32_t layer) {
    /* Every decoder block has the same shapes, so block i does block 0's work. */
    if ((unit == EST_UNIT_BLOCK_FWD || unit == EST_UNIT_BLOCK_BWD) &&
        est_step_unit_repeat(st, unit, layer))
        return;
    est_step_unit(st, unit, layer);
    const shape x = shape_of(run);
    const double layer_host = run->checkpointing == EST_CKPT_FULL ? 1.0 : 0.5;
    switch (unit) {
    case EST_UNIT_EMBED_FWD: embed_forward(st, run, &x); break;
    case EST_UNIT_BLOCK_FWD:
        block_forward_compute(st, run, &x);
        host(st, 0.5); /* the framework's host time per block, half in each direction */
        break;
    case EST_UNIT_HEAD_FWD: head_forward(st, run, &x); break;
    case EST_UNIT_LOSS_BWD: loss_backward(st, run, &x); break;
    case EST_UNIT_HEAD_BWD: head_backward(st, run, &x); break;
    case EST_UNIT_BLOCK_BWD:
        block_backward_compute(st, run, &x);
        host(st, layer_host); /* full checkpointing runs the block's forward hooks again */
        break;
    case EST_UNIT_EMBED_BWD: embed_backward(st, run, &x); break;
    case EST_UNIT_REDUCE: est_work_step_collectives(st, run, k); break;
    case EST_UNIT_OPTIMIZER: est_work_optimizer(st, run); break;
    case EST_UNIT_COUNT: break;
    }
    est_work_zero3_lanes(st, run, k, unit);
    est_step_unit_end(st);
}

void est_work_emit_units(est_step *st, const est_run *run, const est_constants *k, unsigned units,
                         int32_t layer) {
    for (int u = 0; u < EST_UNIT_COUNT; u++)
        if (units & EST_UNIT_BIT(u)) est_work_emit(st, run, k, (est_unit)u, layer);
}
