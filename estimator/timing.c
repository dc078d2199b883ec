/* Step time: the work of every unit of one training step, at achieved rates.
 * docs/method.md ("Step time") derives each term; the op lists below follow the same
 * Hugging Face modeling code (transformers 4.40 modeling_llama.py / qwen2 /
 * mistral) that hf_modeling.c reads for the activation memory.
 *
 * Notation: b micro-batch, s sequence, T = b*s tokens, h hidden, f MLP width,
 * q = heads*head_dim, kv = kv_heads*head_dim, V vocabulary, L blocks, c bytes
 * of the compute dtype, r bytes of the residual stream (4 under autocast), P
 * parameters, n a rank's shard, W ranks, GA micro-batches per step. */
#include "timing.h"

#include <math.h>
#include <string.h>

#include "hf_modeling.h"
#include "lora.h"
#include "optimizers.h"
#include "params.h"
#include "profiles.h"

/* Achieved rates of one GPU for one run. */
typedef struct rates {
    double peak;      /* dense FLOP/s of the compute precision */
    double eff_max;   /* large-GEMM fraction of peak */
    double half_dim;  /* smallest GEMM dimension at which efficiency halves */
    double attn_eff;  /* attention kernels' fraction of peak */
    double bwd_ratio; /* flash/SDPA backward FLOPs over forward */
    double bw;        /* achieved HBM bytes/s */
    double k_gpu;     /* device gap per kernel */
    double k_host;    /* host dispatch per kernel */
} rates;

double est_peak_flops(const est_run *run) {
    switch (run->precision) {
    case EST_PREC_FP32: return run->gpu.fp32_tflops * 1e12; /* allow_tf32 is off by default */
    case EST_PREC_FP16_MIXED: return run->gpu.fp16_tflops * 1e12;
    case EST_PREC_BF16_MIXED:
    case EST_PREC_BF16: return run->gpu.bf16_tflops * 1e12;
    }
    return 0;
}

/* The achieved time of one GEMM (M x K) @ (K x N) in dtype bytes c: the larger
 * of its FLOPs at a shape-dependent fraction of peak and its operand traffic
 * at achieved bandwidth (the roofline). Efficiency falls with the smallest
 * dimension d as d / (d + half_dim): tile and wave quantization leave most of
 * the GPU idle when one dimension spans few tiles. */
static double gemm_s(const rates *r, double M, double K, double N, double c) {
    double d = fmin(M, fmin(K, N));
    double eff = r->eff_max * d / (d + r->half_dim);
    double compute = 2.0 * M * K * N / (r->peak * eff);
    double memory = c * (M * K + K * N + M * N) / r->bw;
    return fmax(compute, memory);
}

static void add_gemm(est_time_part *p, const rates *r, double M, double K, double N, double c,
                     double count) {
    p->flops += count * 2.0 * M * K * N;
    p->gpu_s += count * gemm_s(r, M, K, N, c);
    p->kernels += count;
}

/* Memory-bound ops: `bytes` read and written in `kernels` kernels. */
static void add_mem(est_time_part *p, const rates *r, double bytes, double kernels) {
    p->hbm_bytes += bytes;
    p->gpu_s += bytes / r->bw;
    p->kernels += kernels;
}

static void add_part(est_time_part *dst, const est_time_part *src, double times) {
    dst->flops += times * src->flops;
    dst->hbm_bytes += times * src->hbm_bytes;
    dst->kernels += times * src->kernels;
    dst->gpu_s += times * src->gpu_s;
    dst->host_s += times * src->host_s;
}

/* Launch costs, once a part's work is complete: a gap per kernel on the device,
 * dispatch per kernel on the host, plus the framework's own host time. */
static void finish(est_time_part *p, const rates *r, double framework_host_s) {
    p->gpu_s += p->kernels * r->k_gpu;
    p->host_s += p->kernels * r->k_host + framework_host_s;
}

static double unit_s(const est_time_part *p) { return fmax(fmax(p->gpu_s, p->host_s), p->comm_s); }

/* LlamaRMSNorm.forward over `tokens` x `width`: x.to(fp32) (a copy unless the
 * stream is fp32), pow(2), mean(-1), rsqrt(var + eps) (per token), x * rsqrt,
 * .to(input dtype) (a copy unless fp32), weight * y. Bytes read + written per
 * element: (r+4) + 8 + 4 + 8 + (4+r) + 2r. */
static void add_rmsnorm(est_time_part *p, const rates *r, double tokens, double width, double rb) {
    bool cast = rb != 4;
    double per = (cast ? rb + 4 : 0) + 8 + 4 + 8 + (cast ? 4 + rb : 0) + 2 * rb;
    add_mem(p, r, tokens * width * per, 6 + (cast ? 2 : 0));
}

/* Weights that multiply activations: each block's seven projections, and the
 * LM head (the tied embedding is a matmul there too). Biases are elementwise. */
static int64_t matmul_params(const ft_model *m, int64_t layers) {
    const int64_t h = m->hidden_size, f = m->intermediate_size;
    const int64_t q = m->num_heads * m->head_dim, kv = m->num_kv_heads * m->head_dim;
    return layers * (h * q + 2 * h * kv + q * h + 3 * h * f) + m->vocab_size * h;
}

/* Parameter tensors of the model (optimizer kernel counts). */
static double param_tensors(const ft_model *m, int64_t layers) {
    double per = 9 + (m->qkv_bias ? 3 : 0) + (m->o_bias ? 1 : 0) + (m->mlp_bias ? 3 : 0);
    return 2 + (m->tied_embeddings ? 0 : 1) + (double)layers * per;
}

/* One decoder block's forward on one micro-batch. */
static void block_forward(const est_run *run, const rates *r, const est_dtypes *d, est_time_part *p,
                          est_time_part *attn_core) {
    const ft_model *m = &run->model;
    const double b = (double)run->micro_batch, s = (double)run->seq_len, T = b * s;
    const double h = (double)m->hidden_size, f = (double)m->intermediate_size;
    const double q = (double)(m->num_heads * m->head_dim);
    const double kv = (double)(m->num_kv_heads * m->head_dim);
    const double c = (double)d->act, rb = (double)d->resid;

    /* Projections (bias adds fused by addmm). */
    const double proj[7][2] = {{h, q}, {h, kv}, {h, kv}, {q, h}, {h, f}, {h, f}, {f, h}};
    for (int i = 0; i < 7; i++) add_gemm(p, r, T, proj[i][0], proj[i][1], c, 1);
    add_rmsnorm(p, r, T, h, rb);
    add_rmsnorm(p, r, T, h, rb);
    if (d->autocast) {
        /* autocast casts each Linear's fp32 input (q, k, v, gate, up read the
         * fp32 norm output) and, once per forward (its weight cache), each weight. */
        add_mem(p, r, 5 * T * h * (4 + c), 5);
        double w = h * q + 2 * h * kv + q * h + 3 * h * f;
        add_mem(p, r, w * (4 + c), 7);
    }
    /* RoPE on q and k: q*cos + rotate_half(q)*sin = neg, cat, two muls, add
     * (~10 element passes), and the per-layer cos/sin gather. */
    add_mem(p, r, 10 * T * (q + kv) * c, 12);
    const bool gqa = m->num_heads != m->num_kv_heads;
    if (gqa && run->attention != EST_ATTN_FLASH)
        add_mem(p, r, 2 * T * (kv + q) * c, 2); /* repeat_kv materializes K and V per head */

    /* The attention core. */
    memset(attn_core, 0, sizeof *attn_core);
    if (run->attention == EST_ATTN_EAGER) {
        /* QK^T and PV as batched GEMMs of (s x d) @ (d x s) and (s x s) @ (s x d)
         * per head; the scores go through /sqrt(d), + mask, softmax in fp32
         * and the cast back: (2c) + (3c) + (c+4) + (4+c) bytes per score. */
        const double hd = (double)m->head_dim, bh = b * (double)m->num_heads;
        add_gemm(attn_core, r, s, hd, s, c, bh);
        add_gemm(attn_core, r, s, s, hd, c, bh);
        attn_core->kernels -= 2 * bh - 2; /* one batched launch each */
        add_mem(attn_core, r, bh * s * s * (7 * c + 8), 4);
        add_mem(attn_core, r, 2 * T * q * c, 1); /* transpose(1,2).contiguous() of the output */
    } else {
        /* SDPA/flash: 4 b s^2 q FLOPs (QK^T and PV), half of them under a causal
         * kernel; an explicit padding mask makes SDPA compute the full square. */
        bool causal = run->attention == EST_ATTN_FLASH || !run->padding_mask;
        double flops = 4 * b * s * s * q * (causal ? 0.5 : 1.0);
        attn_core->flops = flops;
        attn_core->gpu_s = fmax(flops / (r->peak * r->attn_eff), T * (2 * q + 2 * kv) * c / r->bw);
        attn_core->kernels = run->padding_mask && run->attention == EST_ATTN_SDPA ? 3 : 1;
    }
    add_part(p, attn_core, 1);
    /* Two residual adds (read 2, write 1) and SwiGLU: silu(gate) (2) and the
     * product with up (3) passes over T x f. */
    add_mem(p, r, 2 * 3 * T * h * rb, 2);
    add_mem(p, r, 5 * T * f * c, 2);
}

/* One decoder block's backward: each GEMM twice (input and weight gradients),
 * the attention backward, elementwise backward at twice the forward traffic
 * (read the output gradient and the saved inputs, write the input gradient),
 * and the recompute of checkpointing. */
static void block_backward(const est_run *run, const rates *r, const est_dtypes *d,
                           const est_time_part *fwd, const est_time_part *attn_fwd,
                           const est_params *pp, est_time_part *p) {
    const ft_model *m = &run->model;
    const double T = (double)run->micro_batch * (double)run->seq_len;
    const double h = (double)m->hidden_size, f = (double)m->intermediate_size;
    const double q = (double)(m->num_heads * m->head_dim);
    const double kv = (double)(m->num_kv_heads * m->head_dim);
    const double c = (double)d->act;
    const double proj[7][2] = {{h, q}, {h, kv}, {h, kv}, {q, h}, {h, f}, {h, f}, {f, h}};
    /* LoRA: frozen weights get no weight gradient, only the input's (the
     * adapters' own GEMMs, 2*T*r*(d_in+d_out) each, are left out: r << h). */
    const double passes = est_lora_on(run) ? 1 : 2;
    for (int i = 0; i < 7; i++) add_gemm(p, r, T, proj[i][0], proj[i][1], c, passes);
    /* Elementwise: everything the forward spent outside GEMMs and attention, twice. */
    double elem_bytes = fwd->hbm_bytes - attn_fwd->hbm_bytes;
    double elem_kernels = fwd->kernels - 7 - attn_fwd->kernels;
    add_mem(p, r, 2 * elem_bytes, 2 * elem_kernels);
    /* Attention backward. */
    if (run->attention == EST_ATTN_EAGER) {
        add_part(p, attn_fwd, 2); /* four batched GEMMs, and the score gradients */
    } else {
        /* Reads q, k, v, o, dO; writes dq, dk, dv. */
        double flops = r->bwd_ratio * attn_fwd->flops;
        p->flops += flops;
        p->gpu_s += fmax(flops / (r->peak * r->attn_eff), T * (4 * q + 4 * kv) * c / r->bw);
        p->kernels += 2;
    }
    /* DeepSpeed ZeRO copies each gradient into its reduce bucket (or, at
     * stage 3, the contiguous gradient buffer) as the hook fires. */
    if (run->framework == EST_FW_DEEPSPEED && run->zero_stage >= 1)
        add_mem(p, r, 2 * c * (double)pp->layer.total, 9);
    if (run->checkpointing == EST_CKPT_FULL) add_part(p, fwd, 1);
    else if (run->checkpointing == EST_CKPT_SELECTIVE) add_part(p, attn_fwd, 1);
}

/* Final norm, LM head and loss forward; the loss backward; the LM head
 * backward (modeling_llama.py LlamaForCausalLM.forward, hf_modeling.c's
 * est_logits_forward for the tensors). */
static void head_parts(const est_run *run, const rates *r, const est_dtypes *d, est_time_part *fwd,
                       est_time_part *loss_bwd, est_time_part *bwd) {
    const ft_model *m = &run->model;
    const double b = (double)run->micro_batch, s = (double)run->seq_len, T = b * s;
    const double h = (double)m->hidden_size, V = (double)m->vocab_size;
    const double c = (double)d->act, rb = (double)d->resid;
    add_rmsnorm(fwd, r, T, h, rb);
    if (d->autocast) add_mem(fwd, r, T * h * (4 + c) + V * h * (4 + c), 2);
    const double up = c == 4 ? 0 : c + 4; /* .float() of the logits */
    if (run->loss == EST_LOSS_CHUNKED) {
        /* Fused linear cross-entropy (Liger-Kernel): per chunk of ~T/ceil(V/h)
         * rows, the logits GEMM, their fp32 softmax and gradient, and both
         * gradient GEMMs, all inside the forward. */
        double chunks = ceil(V / h), rows = fmax(1, ceil(T / chunks));
        add_gemm(fwd, r, rows, h, V, c, chunks);
        add_gemm(fwd, r, rows, V, h, c, chunks);
        add_gemm(fwd, r, h, rows, V, c, chunks);
        add_mem(fwd, r, T * V * (up + 12), 4 * chunks);
    } else {
        add_gemm(fwd, r, T, h, V, c, 1);
        /* logits.float(), the shifted .contiguous() copy (only when b > 1:
         * one sequence is already contiguous), log_softmax, nll. */
        add_mem(fwd, r, T * V * (up + (b > 1 ? 8 : 0) + 8), 4);
        /* Backward: nll (4), log_softmax (12), the shift's slice backward (4 + 8),
         * the cast's backward (4 + c). */
        add_mem(loss_bwd, r, T * V * (4 + 12 + 12 + up), 6);
        add_gemm(bwd, r, T, h, V, c, est_lora_on(run) ? 1 : 2); /* LoRA: frozen head */
    }
    add_rmsnorm(bwd, r, T, h, rb);
    add_rmsnorm(bwd, r, T, h, rb);
    if (d->autocast) add_mem(bwd, r, V * h * (4 + c), 1);
}

/* Embedding lookup and its dense backward (zero the V x h gradient, index_add
 * the token rows); the attention mask built once per forward when used. */
static void embed_parts(const est_run *run, const rates *r, const est_dtypes *d, est_time_part *fwd,
                        est_time_part *bwd) {
    const ft_model *m = &run->model;
    const double b = (double)run->micro_batch, s = (double)run->seq_len, T = b * s;
    const double h = (double)m->hidden_size, V = (double)m->vocab_size;
    const double rb = (double)d->resid, g = d->autocast ? 4 : (double)d->act;
    add_mem(fwd, r, T * h * 2 * rb, 1);
    if (run->padding_mask || run->attention == EST_ATTN_EAGER)
        add_mem(fwd, r, 3 * b * s * s * (double)d->act, 6); /* _update_causal_mask */
    add_mem(bwd, r, V * h * g + 3 * T * h * g, 3);
    if (m->tied_embeddings) add_mem(bwd, r, 3 * V * h * g, 1); /* added into the head's .grad */
}

/* Bytes read + written per parameter by the GPU optimizer step, and kernels. */
static double optimizer_bytes_per_param(const est_run *run, double c) {
    const bool adam = run->optimizer == EST_OPT_ADAMW;
    const double w = run->precision == EST_PREC_BF16 ? 2 : 4;
    switch (run->framework) {
    case EST_FW_DEEPSPEED: {
        /* Flatten + fp32 cast of the gradients (c+4), the norm (4), FusedAdam
         * (read p, g, m, v; write p, m, v: 28; SGD 12), the bit16 copy (4+c);
         * stage 3 upcasts each gradient to fp64 for its norm (c+16). */
        double bytes = (c + 4) + 4 + (adam ? 28 : 12) + (4 + c);
        if (run->zero_stage == 3) bytes += c + 16;
        return bytes;
    }
    case EST_FW_FTRAIN: return (adam ? 28 : 12) + (run->precision == EST_PREC_BF16_MIXED ? 2 * c : 0);
    case EST_FW_HF:
        /* Every optimizer of the HF Trainer: estimator/optimizers.c. */
        return est_optimizer_traffic_per_param(run, est_lora_on(run) ? 4 : w); /* fp32 adapters */
    case EST_FW_FSDP:
        /* Gradient clipping (norm: 1, scale: 2 passes) and torch's foreach
         * AdamW: lerp_ m (3), mul_ v (2), addcmul_ v (4), sqrt (2), div_ (2),
         * add_ eps (2), addcdiv_ p (4), decoupled weight decay mul_ (2):
         * 24 passes of w bytes; SGD: 3 + 3. */
        return (adam ? 24 : 6) * w;
    }
    return 0;
}

/* Collective traffic per rank per step (ring algorithms: each rank sends
 * (W-1)/W of the volume; ZeRO paper section 7: 2 Psi for stages 0-2, 3 Psi
 * for stage 3, per micro-batch where the framework repeats it) and whether the
 * framework overlaps it with compute. */
static void collectives(const est_run *run, double P, double c, double g, double *bytes,
                        bool *overlapped, bool *per_bucket) {
    const double W = (double)est_run_world(run), GA = (double)run->grad_accum;
    const double f = W > 1 ? (W - 1) / W : 0;
    *overlapped = false;
    *per_bucket = false;
    switch (run->framework) {
    case EST_FW_HF:
        /* DDP: one all-reduce per step (no_sync during accumulation), in
         * buckets that start while backward runs (torch DDP, Li et al. 2020). */
        *bytes = 2 * f * P * g;
        *overlapped = *per_bucket = true;
        return;
    case EST_FW_FSDP:
        if (run->zero_stage == 0) { /* NO_SHARD: an all-reduce like DDP */
            *bytes = 2 * f * P * c;
            *overlapped = *per_bucket = true;
        } else {
            /* SHARD_GRAD_OP: all-gather + reduce-scatter per micro-batch;
             * FULL_SHARD gathers again for backward. Prefetched: overlapped. */
            *bytes = (run->zero_stage == 3 ? 3 : 2) * f * P * c * GA;
            *overlapped = true;
        }
        return;
    case EST_FW_DEEPSPEED:
    case EST_FW_FTRAIN:
        switch (run->zero_stage) {
        case 3:
            *bytes = 3 * f * P * c * GA;
            /* deepspeed/runtime/zero/config.py: overlap_comm defaults to true at stage 3. */
            *overlapped = run->framework == EST_FW_DEEPSPEED;
            return;
        case 2: *bytes = (GA + 1) * f * P * c; return; /* reduce-scatter per micro-batch */
        default: *bytes = 2 * f * P * c; return;      /* once per step; overlap_comm false */
        }
    }
    *bytes = 0;
}

/* The elements DeepSpeed ZeRO-3 all-gathers for a tensor of `numel`: none
 * when it is persistent (parameter_offload.py, v0.14.2 _mark_persistent_parameters:
 * ds_numel <= stage3_param_persistence_threshold stays whole on every rank). */
static double gathered(double numel, double persist) { return numel > persist ? numel : 0; }

/* The link a collective among all ranks runs at, bytes/s: NVLink (else PCIe)
 * within a node; across nodes the slower of it and the network per node (a ring
 * crosses each node's network once per direction whatever the ring count). */
static double link_bytes_per_s(const est_run *run, const est_constants *k, double eff) {
    double link = run->gpu.nvlink_gb_per_s > 0 ? run->gpu.nvlink_gb_per_s : run->gpu.pcie_gb_per_s;
    if (run->nodes > 1) {
        double inter = run->inter_node_gb_per_s > 0 ? run->inter_node_gb_per_s
                                                    : k->value[EST_K_INTER_NODE_GB_PER_S];
        link = fmin(link, inter);
    }
    return link * 1e9 * eff;
}

/* DeepSpeed ZeRO-3 across W > 1 ranks (v0.14.2): before each submodule runs,
 * its pre-forward / pre-backward hook fetches its parameters
 * (partitioned_param_coordinator.py fetch_sub_module: all_gather_coalesced on
 * the all-gather stream, then prefetch of the next stage3_prefetch_bucket_size
 * elements of the recorded trace); the compute stream waits for that stream
 * (wait_stream), and the host blocks once more than 2 fetch events are pending
 * (__max_ongoing_fetch_events = 2, .synchronize()). In backward each
 * parameter's gradient goes to a reduce bucket whose reduce-scatter runs on
 * reduce_and_partition_stream (stage3.py __reduce_and_partition_ipg_grads,
 * overlap_comm true by default at stage 3, config.py overlap_comm_valid), the
 * host again blocking beyond 2 pending reduce events. So all three lanes -
 * host, compute, collectives - advance together, a few submodules apart: a
 * unit takes the longest lane. Per rank and unit, the gather receives (W-1)/W
 * of its non-persistent parameters, the reduce-scatter sends (W-1)/W of every
 * gradient, both in the compute dtype c (fp16/bf16 parameters;
 * communication_data_type defaults to the gradient dtype). Forward and
 * backward each gather every module's parameters: modules run in backward
 * fetch again (pre-backward hook), as the release after forward freed them.
 * A prefetch bucket of 0 leaves nothing to overlap: the compute waits for
 * each gather in turn, so the gather joins the unit's device time. */
static void zero3_lanes(const est_run *run, const est_constants *k, est_time_detail *t) {
    const double W = (double)est_run_world(run);
    if (run->framework != EST_FW_DEEPSPEED || run->zero_stage != 3 || W <= 1) return;
    const ft_model *m = &run->model;
    const double h = (double)m->hidden_size, f = (double)m->intermediate_size;
    const double q = (double)(m->num_heads * m->head_dim);
    const double kv = (double)(m->num_kv_heads * m->head_dim);
    const double V = (double)m->vocab_size, c = (double)est_dtypes_of(run).act;
    const double persist = run->ds.persistence_elems != EST_DS_UNSET
                               ? (double)run->ds.persistence_elems
                               : k->value[EST_K_DS_PARAM_PERSISTENCE_ELEMS];
    const double rate = link_bytes_per_s(run, k, k->value[EST_K_ZERO3_COMM_EFF]);
    if (!(rate > 0)) return;
    const double share = (W - 1) / W * c / rate; /* seconds per element of the full tensor */

    /* One block: seven projection weights, their biases, two norms. */
    const double weights[7] = {h * q, h * kv, h * kv, q * h, h * f, h * f, f * h};
    double block_gather = 0, block_all = 2 * h;
    for (int i = 0; i < 7; i++) block_gather += gathered(weights[i], persist), block_all += weights[i];
    const double biases[7] = {m->qkv_bias ? q : 0, m->qkv_bias ? kv : 0, m->qkv_bias ? kv : 0,
                              m->o_bias ? h : 0, m->mlp_bias ? f : 0, m->mlp_bias ? f : 0,
                              m->mlp_bias ? h : 0};
    for (int i = 0; i < 7; i++) block_gather += gathered(biases[i], persist), block_all += biases[i];
    block_gather += 2 * gathered(h, persist);
    const double embed = V * h, head = m->tied_embeddings ? 0 : V * h;

    /* A tied head is the embedding module's weight: lm_head gathers it again
     * (its own module), its gradient is reduced with the embedding's. The
     * head is not gathered for its backward: its reuse comes next, within
     * stage3_max_reuse_distance, so it is not released after its forward
     * (partitioned_param_coordinator.py __params_to_release). Under full
     * checkpointing each block is gathered once more in backward, for its
     * recomputed forward (the release after it frees the parameters again
     * before the pre-backward hook fetches them). */
    est_time_part *parts[] = {&t->block_fwd, &t->block_bwd, &t->embed_fwd,
                              &t->embed_bwd, &t->head_fwd,  &t->head_bwd};
    const double recompute = run->checkpointing == EST_CKPT_FULL ? 2 : 1;
    const double gather[] = {block_gather, recompute * block_gather, gathered(embed, persist),
                             gathered(embed, persist), gathered(V * h, persist), 0};
    const double reduce[] = {0, block_all, 0, embed, 0, head};
    const bool prefetch = run->ds.prefetch_bucket_elems != 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        if (prefetch) {
            parts[i]->comm_s = (gather[i] + reduce[i]) * share;
        } else {
            parts[i]->gpu_s += gather[i] * share;
            parts[i]->comm_s = reduce[i] * share;
        }
    }
}

int est_time_model(const est_run *run, const est_constants *k, est_time_detail *out) {
    memset(out, 0, sizeof *out);
    const double peak = est_peak_flops(run);
    const double bw = run->gpu.hbm_gb_per_s * 1e9 * k->value[EST_K_HBM_EFF];
    if (!(peak > 0) || !(bw > 0) || !(k->value[EST_K_MATMUL_PEAK_EFF] > 0) ||
        !(k->value[EST_K_ATTN_PEAK_EFF] > 0))
        return 0;
    /* Mixture of experts: the per-expert GEMMs and routing are not in the
     * time model yet (docs/method.md); memory only. */
    if (run->model.num_experts > 0) return 0;
    /* FSDP with LoRA gathers quantized or frozen weights and reduces adapter
     * gradients only: its collectives are not in the time model yet. */
    if (run->framework == EST_FW_FSDP && run->lora.rank > 0) return 0;
    rates r = {
        .peak = peak,
        .eff_max = k->value[EST_K_MATMUL_PEAK_EFF],
        .half_dim = k->value[EST_K_GEMM_HALF_EFF_DIM],
        .attn_eff = k->value[EST_K_ATTN_PEAK_EFF],
        .bwd_ratio = k->value[EST_K_FLASH_BWD_FLOPS_RATIO],
        .bw = bw,
        .k_gpu = k->value[EST_K_KERNEL_GPU_S],
        .k_host = k->value[EST_K_KERNEL_HOST_S],
    };
    out->modelled = true;
    out->peak_flops = peak;

    const ft_model *m = &run->model;
    const est_dtypes d = est_dtypes_of(run);
    est_params pp;
    est_run_params(run, &pp);
    const double L = (double)run->layers_used, GA = (double)run->grad_accum;
    const double W = (double)est_run_world(run);
    const double c = (double)d.act;
    const double layer_host = k->value[EST_K_FRAMEWORK_LAYER_HOST_S];

    /* One micro-batch. */
    est_time_part attn;
    block_forward(run, &r, &d, &out->block_fwd, &attn);
    est_time_part fwd_raw = out->block_fwd;
    block_backward(run, &r, &d, &fwd_raw, &attn, &pp, &out->block_bwd);
    finish(&out->block_fwd, &r, 0.5 * layer_host);
    finish(&out->block_bwd, &r, (run->checkpointing == EST_CKPT_FULL ? 1.0 : 0.5) * layer_host);
    head_parts(run, &r, &d, &out->head_fwd, &out->loss_bwd, &out->head_bwd);
    finish(&out->head_fwd, &r, 0);
    finish(&out->loss_bwd, &r, 0);
    finish(&out->head_bwd, &r, 0);
    embed_parts(run, &r, &d, &out->embed_fwd, &out->embed_bwd);
    finish(&out->embed_fwd, &r, 0);
    finish(&out->embed_bwd, &r, 0);
    zero3_lanes(run, k, out);

    const est_time_part *once[] = {&out->embed_fwd, &out->head_fwd, &out->loss_bwd,
                                   &out->head_bwd, &out->embed_bwd};
    out->microbatch_s = L * (unit_s(&out->block_fwd) + unit_s(&out->block_bwd));
    out->gpu_microbatch_s = L * (out->block_fwd.gpu_s + out->block_bwd.gpu_s);
    out->host_microbatch_s = L * (out->block_fwd.host_s + out->block_bwd.host_s);
    double mb_flops = L * (out->block_fwd.flops + out->block_bwd.flops);
    double lane_wait = L * (unit_s(&out->block_fwd) - fmax(out->block_fwd.gpu_s, out->block_fwd.host_s) +
                            unit_s(&out->block_bwd) - fmax(out->block_bwd.gpu_s, out->block_bwd.host_s));
    for (size_t i = 0; i < sizeof once / sizeof once[0]; i++) {
        out->microbatch_s += unit_s(once[i]);
        out->gpu_microbatch_s += once[i]->gpu_s;
        out->host_microbatch_s += once[i]->host_s;
        mb_flops += once[i]->flops;
        lane_wait += unit_s(once[i]) - fmax(once[i]->gpu_s, once[i]->host_s);
    }
    out->comm_bound_s = GA * lane_wait;
    const bool lanes = out->block_fwd.comm_s > 0 || out->head_fwd.comm_s > 0 || out->block_bwd.comm_s > 0;

    /* Collectives. */
    const double P = (double)pp.total;
    const double g = d.autocast ? 4 : c; /* gradient dtype on the wire */
    bool overlapped, per_bucket;
    collectives(run, P, c, g, &out->comm_bytes, &overlapped, &per_bucket);
    if (out->comm_bytes > 0) {
        out->link_bytes_per_s = link_bytes_per_s(
            run, k, lanes ? k->value[EST_K_ZERO3_COMM_EFF] : k->value[EST_K_NCCL_BUS_EFF]);
        out->comm_s = out->link_bytes_per_s > 0 ? out->comm_bytes / out->link_bytes_per_s : 0;
        out->comm_exposed_s = out->comm_s;
        if (lanes) {
            /* ZeRO-3 across ranks: the collectives are in the units' third lane
             * (zero3_lanes), comm_bound_s says how much they cost. */
            out->comm_exposed_s = 0;
        } else if (overlapped) {
            /* Hidden behind the compute it runs beside: the last micro-batch's
             * backward for bucketed all-reduce (the last bucket can only start
             * when backward ends), every micro-batch for ZeRO-3/FSDP. */
            double window = per_bucket ? L * out->block_bwd.gpu_s + out->head_bwd.gpu_s
                                       : GA * out->gpu_microbatch_s;
            double exposed = fmax(0, out->comm_s - window);
            if (per_bucket) {
                double bucket = run->framework == EST_FW_HF ? k->value[EST_K_DDP_BUCKET_CAP_BYTES]
                                                            : 0;
                double total = P * (run->framework == EST_FW_HF ? g : c);
                if (bucket > 0 && total > 0) exposed = fmax(exposed, out->comm_s * fmin(1, bucket / total));
            }
            out->comm_exposed_s = exposed;
        } else if (run->framework == EST_FW_DEEPSPEED && run->ds.overlap_comm &&
                   (run->zero_stage == 1 || run->zero_stage == 2)) {
            /* overlap_comm: true in a DeepSpeed config (stages 1-2): the gradient
             * reduce-scatter runs beside backward (every micro-batch's at stage 2,
             * the last one's at stage 1); the all-gather of the updated weights
             * after the step (f Psi) still waits. */
            const double f = (W - 1) / W;
            double gather = f * P * c / out->link_bytes_per_s;
            double reduce = out->comm_s - gather;
            double window = (run->zero_stage == 2 ? GA : 1) * (L * out->block_bwd.gpu_s + out->head_bwd.gpu_s);
            out->comm_exposed_s = gather + fmax(0, reduce - window);
        }
    }

    /* Optimizer step: on the GPU, or on the CPU under offload with the PCIe
     * round trip (ZeRO-Offload, Ren et al. 2021, Figure 2: fp16 gradients to
     * the host, fp16 parameters back). */
    const bool zero_sharded = (run->framework == EST_FW_DEEPSPEED || run->framework == EST_FW_FTRAIN)
                                  ? run->zero_stage >= 1
                                  : run->framework == EST_FW_FSDP && run->zero_stage >= 2;
    double n = zero_sharded ? (double)est_shard(pp.total, est_run_world(run)) : P;
    double tensors = param_tensors(m, run->layers_used);
    if (est_lora_on(run)) { /* only the adapters are stepped: A and B per target */
        n = (double)est_lora_params(run);
        tensors = 2.0 * (double)est_lora_target_count(run) * (double)run->layers_used;
    }
    const bool offload = run->offload != EST_OFFLOAD_NONE;
    if (!offload) {
        /* Multi-tensor launches cover 36 tensors each when they take four lists
         * (p, g, m, v: depth_to_max_tensors[3] in PyTorch's
         * aten/src/ATen/native/cuda/MultiTensorApply.cuh, and apex's copy that
         * DeepSpeed's FusedAdam uses). The 4 launches per chunk, torch's 2.5 times
         * as many and ZeRO-3's 2 per tensor have no cited source (docs/method.md). */
        double kernels = 4 * ceil(tensors / 36) * (run->framework == EST_FW_DEEPSPEED ? 1 : 2.5);
        if (run->framework == EST_FW_DEEPSPEED && run->zero_stage == 3) kernels += 2 * tensors;
        double gpu = n * optimizer_bytes_per_param(run, c) / bw + kernels * r.k_gpu;
        out->optimizer_s = fmax(gpu, kernels * r.k_host);
    } else {
        const double pcie = run->gpu.pcie_gb_per_s * 1e9 * k->value[EST_K_PCIE_EFF];
        double wbytes = run->framework == EST_FW_FSDP ? (run->precision == EST_PREC_BF16 ? 2 : 4) : c;
        out->pcie_bytes = GA * n * wbytes + n * wbytes; /* gradients down, parameters up */
        if (run->offload == EST_OFFLOAD_OPTIMIZER_PARAMS)
            out->pcie_bytes += 2 * GA * n * wbytes; /* fetched for forward and for backward */
        out->pcie_s = pcie > 0 ? out->pcie_bytes / pcie : 0;
        /* DeepSpeedCPUAdam (csrc/adam/cpu_adam_impl.cpp): read p, g, m, v (16),
         * write p, m, v (12) and the bit16 copy (2), the norm (4); gradients of
         * later micro-batches are accumulated on the host (12 each). FSDP's
         * CPU offload runs torch's foreach AdamW there (24 passes of 4 bytes). */
        double per = run->framework == EST_FW_FSDP ? 96 : 34;
        per += (GA - 1) * 12;
        /* The ranks of a node step at the same moment, each process with
         * its own OpenMP team over all the node's cores (csrc/adam/
         * cpu_adam_impl.cpp `#pragma omp parallel for`; the deepspeed
         * launcher sets OMP_NUM_THREADS only with --bind_cores_to_rank,
         * launcher/launch.py v0.14.2), so they share the node's memory
         * bandwidth, which bounds this streaming kernel. The rate fitted on
         * the one-GPU records (40.7 GB/s; the host is not recorded, the
         * figure fits a 2-channel DDR4-3200 desktop's 51.2 GB/s peak) is
         * taken as every GPU's share of its node: a DGX A100 has 2 AMD EPYC
         * 7742 of 8 DDR4-3200 channels each, 2 channels per GPU. A host
         * with fewer channels per GPU is slower by their ratio; ftest has
         * no host-memory input yet (docs/method.md, "CPU optimizer"). */
        double host_bw = k->value[EST_K_CPU_ADAM_BYTES_PER_S];
        out->cpu_optimizer_s = host_bw > 0 ? n * per / host_bw : 0;
    }

    out->step_s = GA * out->microbatch_s + out->comm_exposed_s + out->optimizer_s + out->pcie_s +
                  out->cpu_optimizer_s;
    out->matmul_params = matmul_params(m, run->layers_used);
    const double s = (double)run->seq_len;
    const double tokens_rank = (double)run->micro_batch * s * GA;
    const double q = (double)(m->num_heads * m->head_dim);
    /* LoRA: the frozen weights' 2N weight-gradient FLOPs are not made (4N). */
    const double per_param = est_lora_on(run) ? 4.0 : 6.0;
    out->model_flops = tokens_rank * (per_param * (double)out->matmul_params + 6.0 * L * s * q);
    out->executed_flops = GA * mb_flops;
    out->tokens_per_step = tokens_rank * W;
    if (out->step_s > 0) {
        out->it_per_s = 1.0 / out->step_s;
        out->tokens_per_s = tokens_rank * W / out->step_s;
        out->tokens_per_s_per_gpu = tokens_rank / out->step_s;
        out->mfu = out->model_flops / (out->step_s * peak);
    }
    return 0;
}

static bool same_group(const est_phase *a, const est_phase *b) {
    return a->kind == b->kind && a->layer == b->layer && !strcmp(a->label, b->label);
}

static void set_phase(est_phase *p, const est_time_part *part, double times) {
    p->flops += times * part->flops;
    p->hbm_bytes += times * part->hbm_bytes;
    p->time_s += times * unit_s(part);
}

const est_constants *est_time_constants(const est_run *run, const est_constants *k,
                                        est_constants *own) {
    if (run->framework != EST_FW_FTRAIN) return k;
    if (est_constants_for(EST_FW_FTRAIN, run->gpu.name, own, NULL, 0) < 0) est_constants_defaults(own);
    return own;
}

void est_time_fill(const est_run *run, est_estimate *e) {
    e->step_time_s = e->tokens_per_s = e->it_per_s = e->mfu = 0;
    est_timeline *tl = &e->tl;
    for (size_t i = 0; i < tl->count; i++) tl->phases[i].flops = tl->phases[i].hbm_bytes = tl->phases[i].time_s = 0;
    est_constants own;
    est_time_detail t;
    est_time_model(run, est_time_constants(run, &e->k, &own), &t);
    if (!t.modelled || tl->count == 0) return;

    bool has_loss_bwd = false, has_head_bwd = false;
    for (size_t i = 0; i < tl->count; i++) {
        const est_phase *p = &tl->phases[i];
        if (p->kind == EST_PHASE_LOSS && strstr(p->label, "backward")) has_loss_bwd = true;
        if (p->kind == EST_PHASE_BACKWARD && p->layer < 0 && strstr(p->label, "LM head")) has_head_bwd = true;
    }
    bool reduce_done = false, opt_done = false;
    bool done_embed_fwd = false, done_embed_bwd = false, done_head_fwd = false,
         done_loss_bwd = false, done_head_bwd = false;
    est_phase *last_opt = NULL, *last_micro = NULL;
    for (size_t i = 0; i < tl->count; i++) {
        est_phase *p = &tl->phases[i];
        if (p->kind == EST_PHASE_FORWARD || p->kind == EST_PHASE_LOSS || p->kind == EST_PHASE_BACKWARD)
            last_micro = p;
        if (i > 0 && same_group(p, &tl->phases[i - 1])) continue;
        switch (p->kind) {
        case EST_PHASE_INIT: break;
        case EST_PHASE_FORWARD:
            if (p->layer >= 0) set_phase(p, &t.block_fwd, 1);
            else if (!done_embed_fwd) set_phase(p, &t.embed_fwd, 1), done_embed_fwd = true;
            break;
        case EST_PHASE_LOSS:
            if (strstr(p->label, "backward")) {
                if (!done_loss_bwd) set_phase(p, &t.loss_bwd, 1), done_loss_bwd = true;
            } else if (!done_head_fwd) {
                set_phase(p, &t.head_fwd, 1);
                done_head_fwd = true;
                if (!has_loss_bwd) set_phase(p, &t.loss_bwd, 1), done_loss_bwd = true;
                if (!has_head_bwd) set_phase(p, &t.head_bwd, 1), done_head_bwd = true;
            }
            break;
        case EST_PHASE_BACKWARD:
            if (p->layer >= 0) set_phase(p, &t.block_bwd, 1);
            else if (strstr(p->label, "LM head")) {
                if (!done_head_bwd) set_phase(p, &t.head_bwd, 1), done_head_bwd = true;
            } else if (!done_embed_bwd) {
                set_phase(p, &t.embed_bwd, 1);
                done_embed_bwd = true;
            }
            break;
        case EST_PHASE_REDUCE:
            if (!reduce_done) p->time_s += t.comm_exposed_s;
            reduce_done = true;
            break;
        case EST_PHASE_OPTIMIZER:
            if (!opt_done) p->time_s += t.optimizer_s + t.pcie_s + t.cpu_optimizer_s;
            opt_done = true;
            last_opt = p;
            break;
        default: break;
        }
    }
    /* Work whose moment a profile does not push (ftrain's tied-embedding
     * backward acquires nothing) is booked on the micro-batch's last moment. */
    if (last_micro) {
        if (!done_embed_fwd) set_phase(last_micro, &t.embed_fwd, 1);
        if (!done_head_fwd) set_phase(last_micro, &t.head_fwd, 1);
        if (!done_loss_bwd) set_phase(last_micro, &t.loss_bwd, 1);
        if (!done_head_bwd) set_phase(last_micro, &t.head_bwd, 1);
        if (!done_embed_bwd) set_phase(last_micro, &t.embed_bwd, 1);
    }
    /* A profile without reduce or optimizer moments: the step's tail goes last. */
    est_phase *tail = last_opt ? last_opt : &tl->phases[tl->count - 1];
    if (!reduce_done) tail->time_s += t.comm_exposed_s;
    if (!opt_done && !last_opt) tail->time_s += t.optimizer_s + t.pcie_s + t.cpu_optimizer_s;

    e->step_time_s = t.step_s;
    e->tokens_per_s = t.tokens_per_s;
    e->it_per_s = t.it_per_s;
    e->mfu = t.mfu;
}

double est_hours_for_tokens(const est_estimate *e, double tokens) {
    if (!(e->tokens_per_s > 0) || !(tokens > 0) || !(e->step_time_s > 0)) return 0;
    /* Training moves in whole optimizer steps: a step holding more tokens
     * than asked for still takes its whole time. */
    const double per_step = e->tokens_per_s * e->step_time_s;
    return ceil(tokens / per_step) * e->step_time_s / 3600.0;
}
