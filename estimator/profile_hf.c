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
#include "profiles.h"
#include "torch_step.h"

int est_timeline_hf(const est_run *run, const est_constants *k, est_timeline *tl, char *err,
                    size_t errlen) {
    est_params p;
    est_run_params(run, &p);
    const est_dtypes d = est_dtypes_of(run);
    const int64_t N = p.total;
    const int64_t wbytes = run->precision == EST_PREC_BF16 ? 2 : 4; /* weight (and state) dtype */
    const int64_t world = est_run_world(run);
    const bool adam = run->optimizer == EST_OPT_ADAMW;
    const int64_t head = p.lm_head ? p.lm_head : p.embedding; /* the LM head's weight */

    est_sweep_terms t;
    memset(&t, 0, sizeof t);
    t.base[EST_CAT_PARAMS] = N * wbytes;
    /* Modeling buffers (4.40's per-layer rotary caches) are built in the
     * default dtype, the weights' here (modeling_qwen2.py _set_cos_sin_cache(
     * dtype=torch.get_default_dtype())), and autocast leaves them alone;
     * est_rope_cache_bytes counts them in the compute dtype, as the profiles
     * that cast the module see them. */
    const int64_t rope = est_rope_cache_bytes(run) / d.act * wbytes;
    t.base[EST_CAT_PARAMS] += rope;
    t.base[EST_CAT_OPTIMIZER] = adam ? 2 * N * wbytes : 0;
    t.base[EST_CAT_WORKSPACE] = (int64_t)k->value[EST_K_CUBLAS_WORKSPACE_BYTES];
    if (world > 1) t.base[EST_CAT_COMM] = N * wbytes; /* DDP buckets */
    if (run->grad_accum > 1) {
        t.base[EST_CAT_GRADS] = N * wbytes; /* carried from earlier micro-batches */
    } else {
        t.block_grads = p.layer.total * wbytes;
        t.head_grads = head * wbytes;
    }
    /* The embedding's new gradient (and the final norm's) at the end of
     * backward: kept when untied (with accumulation, added into the carried
     * one), added in place into the head's when tied. */
    t.embed_grads = (p.embedding + p.final_norm) * wbytes;
    if (d.autocast) {
        /* Only Linear weights and biases are cast; norms stay fp32. */
        t.block_cast_weights = (p.layer.total - p.layer.norms) * d.act;
        t.head_cast_weights = head * d.act;
        /* Weight gradients in the compute dtype before the cast backward. */
        t.block_grad_transient = p.layer.largest * d.act;
        t.head_grad_cast = head * d.act;
    }

    /* from_pretrained materializes the weights on the CPU (fp32 unless the
     * model is loaded in bf16) in every rank's process before .to(device). */
    tl->cpu_load_bytes = N * wbytes;

    int64_t live[EST_CAT_COUNT];
    memset(live, 0, sizeof live);
    est_live_add(live, EST_CAT_PARAMS, N * wbytes + rope);
    if (est_push(tl, EST_PHASE_INIT, -1, "model loaded", live, err, errlen)) return -1;

    if (est_push_forward_backward(run, &t, tl, err, errlen)) return -1;

    /* All-reduce: every gradient is in param.grad and in its bucket. */
    memcpy(live, t.base, sizeof live);
    live[EST_CAT_GRADS] = N * wbytes;
    if (est_push(tl, EST_PHASE_REDUCE, -1, "gradient all-reduce", live, err, errlen)) return -1;

    /* Optimizer step: the foreach temporary (AdamW) beside weights, grads, state. */
    if (adam) est_live_add(live, EST_CAT_WORKSPACE, N * wbytes);
    return est_push(tl, EST_PHASE_OPTIMIZER, -1,
                    adam ? "optimizer step (foreach AdamW)" : "optimizer step (SGD)", live, err,
                    errlen);
}
