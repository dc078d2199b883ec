/* HF Trainer + PyTorch FSDP (torch 2.2-2.4, use_orig_params as accelerate sets
 * it), one FSDP unit per decoder block (transformer auto-wrap), MixedPrecision
 * with param_dtype = the compute dtype. torch/distributed/fsdp/_flat_param.py,
 * _runtime_utils.py. Notation: P parameters, W ranks, n = ceil(P/W).
 *  - sharded fp32 FlatParameters: 4n (the master); fp32 sharded gradients 4n
 *    (reduce-scattered in the compute dtype, then cast);
 *  - AdamW state 8n; foreach step temporary 4n;
 *  - a unit's unsharded compute-dtype parameters while it computes (and its
 *    unsharded gradient until the reduce-scatter): NO_SHARD keeps them whole.
 *  - CPU offload (offload_params=True) moves the shards, their gradients and the
 *    optimizer to the host. */
#include <string.h>

#include "hf_modeling.h"
#include "profiles.h"
#include "torch_step.h"

int est_timeline_fsdp(const est_run *run, const est_constants *k, est_timeline *tl, char *err,
                      size_t errlen) {
    if (run->lora.rank > 0) return est_timeline_fsdp_lora(run, k, tl, err, errlen);
    est_params p;
    est_run_params(run, &p);
    const int64_t P = p.total, W = est_run_world(run);
    const bool sharded = run->zero_stage >= 2;
    const int64_t n = sharded ? est_shard(P, W) : P;
    const int64_t c = est_compute_dtype_bytes(run->precision);
    const int64_t w = run->precision == EST_PREC_BF16 ? 2 : 4; /* FlatParameter dtype */
    const bool adam = run->optimizer == EST_OPT_ADAMW;
    const bool offload = run->offload != EST_OFFLOAD_NONE;
    const int64_t head = p.lm_head ? p.lm_head : p.embedding;

    est_sweep_terms t;
    memset(&t, 0, sizeof t);
    if (!offload) {
        t.base[EST_CAT_MASTER] = w != c ? n * w : 0;
        t.base[EST_CAT_PARAMS] = w == c ? n * w : 0;
        t.base[EST_CAT_OPTIMIZER] = adam ? 2 * n * w : 0;
        if (run->grad_accum > 1) t.base[EST_CAT_GRADS] = n * w;
    }
    t.base[EST_CAT_WORKSPACE] = (int64_t)k->value[EST_K_CUBLAS_WORKSPACE_BYTES];
    t.base[EST_CAT_PARAMS] += est_rope_cache_bytes(run); /* modeling buffers */
    if (!sharded) {
        /* NO_SHARD: the unsharded compute copy of everything stays. */
        if (w != c) t.base[EST_CAT_PARAMS] += P * c;
    } else {
        t.block_gathered = p.layer.total * c;
        t.head_gathered = (head + (p.lm_head ? p.embedding : 0)) * c; /* root unit */
    }
    t.block_grad_transient = p.layer.total * c;
    t.head_grad_transient = head * c;
    if (run->grad_accum == 1 && !offload) {
        int64_t shard_of_block = sharded ? est_shard(p.layer.total, W) : p.layer.total;
        t.block_grads = shard_of_block * w;
        t.head_grads = (sharded ? est_shard(head, W) : head) * w;
    }
    if (offload) tl->cpu_bytes = n * w * (2 + (adam ? 2 : 0));
    /* Without cpu_ram_efficient_loading every rank loads the whole model. */
    tl->cpu_load_bytes = P * w;

    int64_t live[EST_CAT_COUNT];
    memcpy(live, t.base, sizeof live);
    live[EST_CAT_OPTIMIZER] = 0;
    if (est_push(tl, EST_PHASE_INIT, -1, "model sharded", live, err, errlen)) return -1;
    if (est_push_forward_backward(run, &t, tl, err, errlen)) return -1;

    memcpy(live, t.base, sizeof live);
    if (!offload) live[EST_CAT_GRADS] = n * w;
    if (est_push(tl, EST_PHASE_REDUCE, -1, "gradients reduce-scattered", live, err, errlen))
        return -1;
    if (adam && !offload) est_live_add(live, EST_CAT_WORKSPACE, n * w);
    return est_push(tl, EST_PHASE_OPTIMIZER, -1,
                    offload ? "optimizer step on CPU" : "optimizer step (foreach AdamW)", live,
                    err, errlen);
}
