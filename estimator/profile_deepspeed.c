/* HF Trainer + DeepSpeed (0.14) ZeRO stages 0-3, mixed precision, optional CPU
 * offload. Sources are DeepSpeed's deepspeed/runtime/zero/stage3.py,
 * stage_1_and_2.py, config.py and engine.py; docs/method.md ("DeepSpeed")
 * walks through each buffer. Notation: P parameters, W ranks, n = ceil(P/W).
 *
 * Resident (every stage keeps the module cast to fp16/bf16, engine.py):
 *   stage 0/1: full compute-dtype weights 2P and full gradients 2P;
 *   stage 2:   full weights 2P, gradient partition 2n;
 *   stage 3:   weight partition 2n, gradient partition 2n
 *              (grad_partitions_flat_buffer), small parameters (< 1e5
 *              elements) kept whole, gathered blocks while they compute;
 *   fp32 master 4n and Adam state 8n (zero for offload: they live on the CPU);
 *   the contiguous-gradient bucket (reduce_bucket_size elements, 5e8 by default,
 *   in the compute dtype: ~954 MiB however small the model).
 * Optimizer step (stage 1-3): the gradient partition is flattened (a compute-
 * dtype copy) and cast to fp32 (_prepare_fp32_grad_for_sub_group in stage 3,
 * the flatten + .to(fp32) in stage_1_and_2 step): +6 bytes per element of the
 * largest sub-group, then +4 through the Adam update; the norm for clipping
 * upcasts one parameter's gradient at a time to fp64 (get_grad_norm_direct). */
#include <string.h>

#include "hf_modeling.h"
#include "profiles.h"
#include "torch_step.h"

typedef struct {
    int64_t P, n, world, c;   /* params, shard, ranks, compute-dtype bytes */
    int64_t bucket_bytes;     /* contiguous-gradient bucket */
    int64_t sub_group;        /* elements of the largest optimizer sub-group */
    int64_t largest_shard;    /* largest single parameter's shard (norm upcast) */
    int64_t persistent;       /* stage 3: elements of parameters kept whole */
    bool offload_opt, offload_params, adam;
} ds_sizes;

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static void sizes_of(const est_run *run, const est_constants *k, const est_params *p,
                     ds_sizes *s) {
    s->P = p->total;
    s->world = est_run_world(run);
    s->n = est_shard(s->P, s->world);
    s->c = est_compute_dtype_bytes(run->precision);
    s->bucket_bytes = min64((int64_t)k->value[EST_K_DS_REDUCE_BUCKET_ELEMS], s->P) * s->c;
    s->sub_group = min64(s->n, (int64_t)k->value[EST_K_DS_SUB_GROUP_ELEMS]);
    s->largest_shard = est_shard(p->largest_tensor, s->world);
    /* Stage 3 keeps whole every parameter under the persistence threshold: the
     * two norms of each block, the final norm and q/k/v biases. */
    int64_t thr = (int64_t)k->value[EST_K_DS_PARAM_PERSISTENCE_ELEMS];
    const ft_model *m = &run->model;
    int64_t small = 0;
    if (m->hidden_size < thr) small += (2 * p->layers + 1) * m->hidden_size;
    if (m->qkv_bias) {
        int64_t qb = m->num_heads * m->head_dim, kb = m->num_kv_heads * m->head_dim;
        small += p->layers * ((qb < thr ? qb : 0) + 2 * (kb < thr ? kb : 0));
    }
    s->persistent = small;
    s->offload_opt = run->offload != EST_OFFLOAD_NONE;
    s->offload_params = run->offload == EST_OFFLOAD_OPTIMIZER_PARAMS;
    s->adam = run->optimizer == EST_OPT_ADAMW;
}

int est_timeline_deepspeed(const est_run *run, const est_constants *k, est_timeline *tl,
                           char *err, size_t errlen) {
    est_params p;
    est_run_params(run, &p);
    ds_sizes s;
    sizes_of(run, k, &p, &s);
    const int stage = run->zero_stage;
    const int64_t opt_elems_per_param = s.adam ? 2 : 0; /* Adam m, v in fp32 */
    const int64_t head = p.lm_head ? p.lm_head : p.embedding;

    est_sweep_terms t;
    memset(&t, 0, sizeof t);
    /* Weights. */
    if (stage == 3)
        t.base[EST_CAT_PARAMS] = s.offload_params ? 0 : s.n * s.c + s.persistent * s.c;
    else
        t.base[EST_CAT_PARAMS] = s.P * s.c;
    /* fp32 master and optimizer state: sharded from stage 1, on the CPU when offloaded. */
    int64_t state_elems = stage == 0 ? s.P : s.n;
    if (!s.offload_opt) {
        t.base[EST_CAT_MASTER] = state_elems * 4;
        t.base[EST_CAT_OPTIMIZER] = state_elems * 4 * opt_elems_per_param;
    }
    /* Gradients. */
    if (stage <= 1)
        t.base[EST_CAT_GRADS] = s.P * s.c;
    else if (!s.offload_opt)
        t.base[EST_CAT_GRADS] = s.n * s.c;
    /* The contiguous-gradient bucket (stages 1-3). */
    if (stage >= 1) t.base[EST_CAT_COMM] = s.bucket_bytes;
    t.base[EST_CAT_WORKSPACE] = (int64_t)k->value[EST_K_CUBLAS_WORKSPACE_BYTES];

    if (stage == 3) {
        /* A block's weights are gathered whole while it computes; its full
         * gradients exist until copied into the bucket. */
        t.block_gathered = (p.layer.total - min64(p.layer.total, s.persistent / (p.layers ? p.layers : 1))) * s.c;
        t.head_gathered = head * s.c;
        t.block_grad_transient = p.layer.total * s.c;
        t.head_grad_transient = head * s.c;
    } else if (stage == 2) {
        t.block_grad_transient = p.layer.total * s.c;
        t.head_grad_transient = head * s.c;
    }

    /* Host memory: fp32 master, Adam state and (pinned) gradient partition when
     * offloaded; compute-dtype weights too with parameter offload. */
    if (s.offload_opt)
        tl->cpu_bytes = state_elems * 4 * (1 + opt_elems_per_param) + state_elems * 4;
    if (s.offload_params) tl->cpu_bytes += s.n * s.c;

    int64_t live[EST_CAT_COUNT];
    memcpy(live, t.base, sizeof live);
    live[EST_CAT_OPTIMIZER] = 0; /* Adam state appears at the first step */
    if (est_push(tl, EST_PHASE_INIT, -1, "engine initialized", live, err, errlen)) return -1;

    if (est_push_forward_backward(run, &t, tl, err, errlen)) return -1;

    /* End of backward: the bucket is reduce-scattered; the coalesced collective
     * concatenates what it holds (stage 3: comm/coalesced_collectives.py). */
    memcpy(live, t.base, sizeof live);
    if (stage == 3) est_live_add(live, EST_CAT_COMM, s.bucket_bytes);
    if (est_push(tl, EST_PHASE_REDUCE, -1, "gradient reduce-scatter", live, err, errlen)) return -1;

    if (stage == 0) {
        /* FP16_Optimizer / BF16_Optimizer: fp32 gradients for the flat master. */
        est_live_add(live, EST_CAT_GRADS, s.P * 4);
        return est_push(tl, EST_PHASE_OPTIMIZER, -1, "optimizer step (fp32 grads)", live, err,
                        errlen);
    }
    if (s.offload_opt) {
        /* The CPU optimizer updates the master; the GPU only receives weights. */
        return est_push(tl, EST_PHASE_OPTIMIZER, -1, "optimizer step on CPU", live, err, errlen);
    }
    /* Norm for clipping: one parameter's gradient shard upcast to fp64 at a time. */
    int64_t norm = live[EST_CAT_WORKSPACE];
    est_live_add(live, EST_CAT_WORKSPACE, s.largest_shard * 8);
    if (est_push(tl, EST_PHASE_OPTIMIZER, -1, "optimizer: gradient norm (fp64)", live, err, errlen))
        return -1;
    live[EST_CAT_WORKSPACE] = norm;
    /* Flatten (compute dtype) and cast to fp32: both alive for a moment. */
    est_live_add(live, EST_CAT_GRADS, s.sub_group * (s.c + 4));
    return est_push(tl, EST_PHASE_OPTIMIZER, -1, "optimizer: fp32 gradients", live, err, errlen);
}
