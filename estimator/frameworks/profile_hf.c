/* PyTorch + Transformers Trainer (transformers 4.40-4.49, torch 2.2-2.6), DDP.
 * Derived in docs/method.md ("hf"); every term is pinned in tests/hf_ddp.c.
 *
 * Model states per rank (no sharding):
 *  - mixed precision is torch.autocast over fp32 weights: 4 B/param weights,
 *    4 B/param gradients, and autocast's bf16/fp16 copies of the Linear
 *    weights and biases (RMSNorm weights are not cast: their mul is not on
 *    autocast's list), which the Linears save for backward, so they live from
 *    a block's forward to its backward;
 *  - fp32: 4 + 4; pure bf16: 2 + 2 (the optimizer state follows the weights'
 *    dtype, torch/optim/adamw.py: zeros_like(param));
 *  - AdamW (Trainer's default "adamw_torch", foreach on CUDA) keeps exp_avg and
 *    exp_avg_sq; its step builds one temporary the size of the parameters
 *    (_multi_tensor_adamw: exp_avg_sq_sqrt = _foreach_sqrt(exp_avg_sqs));
 *  - gradients are freed after each step (Trainer calls model.zero_grad(),
 *    set_to_none=True since torch 2.0), so the first micro-batch's forward runs
 *    without them; with accumulation (DDP no_sync) later micro-batches carry
 *    them;
 *  - DDP (world > 1): Reducer::initialize_buckets (torch/csrc/distributed/c10d/
 *    reducer.cpp) allocates every bucket's flat `gradients` tensor in the
 *    parameters' dtype at construction, buckets of bucket_cap_mb = 25 (the
 *    first 1 MiB) covering every parameter that requires grad; with
 *    gradient_as_bucket_view=False (the default, torch/nn/parallel/
 *    distributed.py; neither HF nor accelerate sets it) param.grad stays its
 *    own tensor and the Reducer copies each gradient into its bucket and the
 *    averaged result back: one more copy of every gradient, resident.
 *  - under autocast each weight's gradient is computed in the compute dtype and
 *    cast to fp32 by the cast's backward before AccumulateGrad: the largest
 *    Linear weight of a block, and the LM head's weight, are in flight once in
 *    c bytes beside their fp32 gradient;
 *  - the embedding's gradient (embedding_dense_backward, fp32 under autocast)
 *    is a new V x h tensor: it stays when untied, and when tied it exists
 *    beside the LM head's gradient until AccumulateGrad adds it in place. */
#include <string.h>

#include "hf_modeling.h"
#include "json_util.h"
#include "lora.h"
#include "optimizers.h"
#include "profiles.h"
#include "quant.h"
#include "torch_step.h"
#include "work.h"

static int timeline_hf_lora(const est_run *run, const est_constants *k, est_step *st,
                            char *err, size_t errlen);

/* What one full fine-tune on the HF Trainer keeps: weights in their storage
 * dtype, optimizer state, DDP buckets and gradients (`w` bytes each). */
static void hf_resident(const est_run *run, const est_constants *k, const est_params *p,
                        const est_optimizer_bytes *ob, int64_t w, est_sweep_terms *t) {
    const est_dtypes d = est_dtypes_of(run);
    const int64_t N = p->total, head = p->lm_head ? p->lm_head : p->embedding;
    memset(t, 0, sizeof *t);
    /* Modeling buffers (4.40's per-layer rotary caches) are built in the
     * default dtype, the weights' here (modeling_qwen2.py _set_cos_sin_cache(
     * dtype=torch.get_default_dtype())), and autocast leaves them alone;
     * est_rope_cache_bytes counts them in the compute dtype, as the profiles
     * that cast the module see them. */
    t->base[EST_CAT_PARAMS] = N * w + est_rope_cache_bytes(run) / d.act * w;
    t->base[EST_CAT_OPTIMIZER] = ob->state_bytes;
    t->base[EST_CAT_WORKSPACE] = (int64_t)k->value[EST_K_CUBLAS_WORKSPACE_BYTES];
    if (est_run_world(run) > 1) t->base[EST_CAT_COMM] = N * w; /* DDP buckets */
    if (run->grad_accum > 1) {
        t->base[EST_CAT_GRADS] = N * w; /* carried from earlier micro-batches */
    } else {
        t->block_grads = p->layer.total * w;
        t->head_grads = head * w;
    }
    /* The embedding's new gradient (and the final norm's) at the end of
     * backward: kept when untied (with accumulation, added into the carried
     * one), added in place into the head's when tied. */
    t->embed_grads = (p->embedding + p->final_norm) * w;
    if (d.autocast) {
        /* Only Linear weights and biases are cast; norms stay fp32. */
        t->block_cast_weights = (p->layer.total - p->layer.norms) * d.act;
        t->head_cast_weights = head * d.act;
        /* Weight gradients in the compute dtype before the cast backward. */
        t->block_grad_transient = p->layer.largest * d.act;
        t->head_grad_cast = head * d.act;
    }
    if (run->optimizer_in_backward) {
        /* Each parameter is stepped in its post-accumulate-grad hook and its
         * gradient freed (torch >= 2.1 Tensor.register_post_accumulate_grad_hook;
         * PyTorch's "optimizer step in backward" tutorial): one tensor's
         * gradient and its step temporaries at a time, no gradient buffers. */
        const int64_t head_or_embed = p->embedding > p->lm_head ? p->embedding : p->lm_head;
        t->block_grads = t->head_grads = t->embed_grads = 0;
        t->block_grad_transient +=
            p->layer.largest * w + est_optimizer_tensor_step_bytes(run, p->layer.largest, w);
        t->head_grad_transient =
            head_or_embed * w + est_optimizer_tensor_step_bytes(run, head_or_embed, w);
    }
}

int est_step_hf_legacy(const est_run *run, const est_constants *k, est_step *st, char *err,
                size_t errlen) {
    if (est_lora_on(run)) return timeline_hf_lora(run, k, st, err, errlen);
    est_params p;
    est_run_params(run, &p);
    const int64_t N = p.total;
    const int64_t wbytes = run->precision == EST_PREC_BF16 ? 2 : 4; /* weight (and state) dtype */
    est_optimizer_bytes ob; /* estimator/model/optimizers.c: AdamW 2 N w, foreach temporary N w */
    est_optimizer_bytes_of(run, wbytes, &ob);
    est_sweep_terms t;
    hf_resident(run, k, &p, &ob, wbytes, &t);
    st->cpu_bytes += ob.paged_bytes; /* paged optimizer state: host under pressure */
    if (run->activation_offload) /* pinned host copies of every block's saved tensors */
        st->cpu_bytes += run->layers_used * est_block_offloadable_bytes(run);
    /* from_pretrained materializes the weights on the CPU (fp32 unless the
     * model is loaded in bf16) in every rank's process before .to(device). */
    st->cpu_load_bytes = N * wbytes;

    int64_t live[EST_CAT_COUNT];
    memset(live, 0, sizeof live);
    est_live_add(live, EST_CAT_PARAMS, t.base[EST_CAT_PARAMS]);
    if (est_push(st, EST_PHASE_INIT, -1, "model loaded", live, err, errlen)) return -1;
    if (est_push_forward_backward(run, k, &t, st, err, errlen)) return -1;
    if (run->optimizer_in_backward) {
        /* Stepped during backward: the reduction and the step have no moment
         * of their own; their work is booked on the last one. */
        est_work_emit(st, run, k, EST_UNIT_REDUCE, -1);
        est_work_emit(st, run, k, EST_UNIT_OPTIMIZER, -1);
        return st->oom ? ft_errorf(err, errlen, "out of memory building the step") : 0;
    }

    /* All-reduce: every gradient is in param.grad and in its bucket. */
    memcpy(live, t.base, sizeof live);
    live[EST_CAT_GRADS] = N * wbytes;
    if (est_push_unit(st, run, k, EST_PHASE_REDUCE, -1, "gradient all-reduce", live, EST_UNIT_REDUCE,
                      err, errlen))
        return -1;

    /* Optimizer step: its temporaries (AdamW's foreach temporary) beside
     * weights, grads and state; paged state migrates in one tensor at a time. */
    est_live_add(live, EST_CAT_WORKSPACE, ob.step_bytes + ob.largest_paged_bytes);
    return est_push_unit(st, run, k, EST_PHASE_OPTIMIZER, -1, est_optimizer_step_label(run), live,
                         EST_UNIT_OPTIMIZER, err, errlen);
}

/* LoRA with PEFT on the HF Trainer (peft 0.12-0.13, transformers 4.40):
 *  - the frozen base stays in its storage dtype (the compute dtype, or the
 *    quantized form of estimator/model/quant.c) and has no gradient, no optimizer
 *    state and no DDP bucket (DDP buckets only parameters that require grad);
 *  - the adapters are fp32 (PEFT's autocast_adapter_dtype) with fp32 gradients
 *    and the optimizer state of fp32 parameters; under autocast their bf16/fp16
 *    casts are cached from the forward to the backward, like the full model's;
 *  - activations: est_block_saved's frozen-block list. */
static int timeline_hf_lora(const est_run *run, const est_constants *k, est_step *st,
                            char *err, size_t errlen) {
    est_params p;
    est_run_params(run, &p);
    const int64_t base = est_frozen_base_bytes(run, &p);
    const int64_t A = est_lora_params(run), aw = est_lora_weight_bytes(run);
    const int64_t c = est_compute_dtype_bytes(run->precision);
    est_optimizer_bytes ob;
    est_optimizer_bytes_of(run, aw, &ob);

    est_sweep_terms t;
    memset(&t, 0, sizeof t);
    t.base[EST_CAT_PARAMS] = base + A * aw + est_rope_cache_bytes(run);
    t.base[EST_CAT_OPTIMIZER] = ob.state_bytes;
    st->cpu_bytes += ob.paged_bytes;
    t.base[EST_CAT_WORKSPACE] = (int64_t)k->value[EST_K_CUBLAS_WORKSPACE_BYTES];
    if (est_run_world(run) > 1) t.base[EST_CAT_COMM] = A * aw; /* DDP buckets */
    if (run->grad_accum > 1) t.base[EST_CAT_GRADS] = A * aw;
    else t.block_grads = est_lora_block_params(run) * aw;
    if (run->optimizer_in_backward) {
        /* One adapter matrix's gradient and step at a time (see above). */
        int64_t largest = 0;
        for (int i = 0; i < EST_LORA_TARGET_COUNT; i++) {
            int64_t din, dout;
            if (!(run->lora.targets & EST_LORA_BIT(i))) continue;
            est_linear_shape(&run->model, (est_lora_target)i, &din, &dout);
            int64_t big = run->lora.rank * (din > dout ? din : dout);
            if (big > largest) largest = big;
        }
        t.block_grads = 0;
        t.block_grad_transient = largest * aw + est_optimizer_tensor_step_bytes(run, largest, aw);
    }
    if (run->activation_offload)
        st->cpu_bytes += run->layers_used * est_block_offloadable_bytes(run);
    if (est_has_master(run->precision)) t.block_cast_weights = est_lora_block_params(run) * c;
    /* QLoRA: the fp32 LM head (prepare_model_for_kbit_training) is cast for
     * autocast's matmul on every forward (autocast caches only weights that
     * require grad) and the cast is saved for the hidden states' gradient. */
    if (run->quant != EST_QUANT_NONE)
        t.head_cast_weights = (p.lm_head ? p.lm_head : p.embedding) * c;

    /* from_pretrained reads the checkpoint into the storage dtype; with a
     * quantization config it loads one checkpoint shard at a time
     * (low_cpu_mem_usage) and quantizes each weight on the GPU. */
    st->cpu_load_bytes = p.total * c;
    if (run->quant != EST_QUANT_NONE) {
        int64_t shard = (int64_t)k->value[EST_K_HF_CHECKPOINT_SHARD_BYTES];
        if (shard < st->cpu_load_bytes) st->cpu_load_bytes = shard;
    }

    int64_t live[EST_CAT_COUNT];
    memset(live, 0, sizeof live);
    est_live_add(live, EST_CAT_PARAMS, base + A * aw);
    if (est_push(st, EST_PHASE_INIT, -1, "model loaded, adapters added", live, err, errlen))
        return -1;
    if (est_push_forward_backward(run, k, &t, st, err, errlen)) return -1;
    if (run->optimizer_in_backward) return 0;

    memcpy(live, t.base, sizeof live);
    live[EST_CAT_GRADS] = A * aw;
    if (est_push_unit(st, run, k, EST_PHASE_REDUCE, -1, "adapter gradient all-reduce", live,
                      EST_UNIT_REDUCE, err, errlen))
        return -1;
    est_live_add(live, EST_CAT_WORKSPACE, ob.step_bytes + ob.largest_paged_bytes);
    return est_push_unit(st, run, k, EST_PHASE_OPTIMIZER, -1, est_optimizer_step_label(run), live,
                         EST_UNIT_OPTIMIZER, err, errlen);
}
