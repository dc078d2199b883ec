/* Collectives, offload copies and optimizer steps as events of the step.
 * W ranks, GA micro-batches per step, P parameters, n a rank's shard, c bytes
 * of the compute dtype, g of the gradients on the wire. */
#include "work_parallel.h"

#include <math.h>

#include "fp8.h"
#include "fsdp_ends.h"
#include "fsdp_policy.h"
#include "hf_modeling.h"
#include "lora.h"
#include "objective.h"
#include "optimizers.h"
#include "peft.h"
#include "params.h"
#include "profiles.h"
#include "quant.h"
#include "trainable.h"
#include "work_peft.h"
#include "work_peft_vec.h"

static int64_t total_params(const est_run *run) {
    est_params pp;
    est_run_params(run, &pp);
    return pp.total;
}

/* Partial training (trainable.h): the parameters whose gradients are
 * reduced and stepped; `all` otherwise. */
static double trained_params(const est_run *run, double all) {
    int64_t t = 0;
    char err[160];
    if (run->trainable.n == 0 || est_trainable_count(run, &t, NULL, err, sizeof err)) return all;
    return (double)t;
}

static void lane(est_step *st, double elems, double elem_bytes, double ranks, bool blocking) {
    est_event *e = est_step_add(st, EST_EV_LANE_COMM);
    if (!e) return;
    e->u.lane.elems = elems;
    e->u.lane.elem_bytes = elem_bytes;
    e->u.lane.ranks = ranks;
    e->u.lane.blocking = blocking;
}

/* The elements DeepSpeed ZeRO-3 all-gathers for a tensor of `numel`: none
 * when it is persistent (parameter_offload.py, v0.14.2 _mark_persistent_parameters:
 * ds_numel <= stage3_param_persistence_threshold stays whole on every rank). */
static double gathered(double numel, double persist) { return numel > persist ? numel : 0; }

/* LoRA under ZeRO-3: one block's adapter elements ZeRO-3 gathers (every
 * adapter is partitioned like the base, stage3_param_persistence_threshold
 * keeping the small ones whole: A r x d_in and B d_out x r each). */
static double lora_gathered(const est_run *run, double persist) {
    double n = 0;
    for (int t = 0; t < EST_LORA_TARGET_COUNT; t++) {
        if (!(run->lora.targets & EST_LORA_BIT(t))) continue;
        int64_t din, dout, copies;
        est_adapter_shape(&run->model, (est_lora_target)t, &din, &dout, &copies);
        if (din <= 0) continue;
        const double r = (double)run->lora.rank;
        n += (double)copies * (gathered(r * (double)din, persist) + gathered((double)dout * r, persist));
    }
    return n;
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
 * each gather in turn (a blocking lane event).
 *
 * A tied head is the embedding module's weight: lm_head gathers it again
 * (its own module), its gradient is reduced with the embedding's. The head is
 * not gathered for its backward: its reuse comes next, within
 * stage3_max_reuse_distance, so it is not released after its forward
 * (partitioned_param_coordinator.py __params_to_release). Under full
 * checkpointing each block is gathered once more in backward, for its
 * recomputed forward (the release after it frees the parameters again before
 * the pre-backward hook fetches them). */
void est_work_zero3_lanes(est_step *st, const est_run *run, const est_constants *k, est_unit unit) {
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
    /* One block: seven projection weights, their biases, two norms. */
    const double weights[7] = {h * q, h * kv, h * kv, q * h, h * f, h * f, f * h};
    const double biases[7] = {m->qkv_bias ? q : 0, m->qkv_bias ? kv : 0, m->qkv_bias ? kv : 0,
                              m->o_bias ? h : 0,   m->mlp_bias ? f : 0, m->mlp_bias ? f : 0,
                              m->mlp_bias ? h : 0};
    /* QLoRA: a 4-bit weight is gathered as its packed codes, (n + 1) // 2c
     * compute-dtype elements (seam_deepspeed_zero3.c ds_param_numel) */
    const double cb = (double)est_compute_dtype_bytes(run->precision);
    double block_gather = 0, block_all = 2 * h;
    for (int i = 0; i < 7; i++) {
        const double g = run->quant == EST_QUANT_NF4 ? floor((weights[i] + 1) / (2 * cb)) : weights[i];
        block_gather += gathered(g, persist), block_all += weights[i];
    }
    for (int i = 0; i < 7; i++) block_gather += gathered(biases[i], persist), block_all += biases[i];
    block_gather += 2 * gathered(h, persist);
    double embed = V * h, head = m->tied_embeddings ? 0 : V * h;
    if (est_lora_on(run)) { /* the base is gathered, its gradients never reduced */
        block_gather += lora_gathered(run, persist);
        block_all = (double)est_lora_block_params(run);
        head = 0;
    }
    const bool wait = run->ds.prefetch_bucket_elems == 0;
    const double r = run->ds.comm_bytes > 0 ? (double)run->ds.comm_bytes : c; /* reduced in */
    switch (unit) {
    case EST_UNIT_BLOCK_FWD: lane(st, block_gather, c, W, wait); break;
    case EST_UNIT_BLOCK_BWD:
        lane(st, (run->checkpointing == EST_CKPT_FULL ? 2 : 1) * block_gather, c, W, wait);
        lane(st, block_all, r, W, false);
        break;
    case EST_UNIT_EMBED_FWD: lane(st, gathered(embed, persist), c, W, wait); break;
    case EST_UNIT_EMBED_BWD:
        lane(st, gathered(embed, persist), c, W, wait);
        if (!est_lora_on(run)) lane(st, embed, r, W, false);
        break;
    case EST_UNIT_HEAD_FWD: lane(st, gathered(V * h, persist), c, W, wait); break;
    case EST_UNIT_HEAD_BWD:
        if (head > 0 || !est_lora_on(run)) lane(st, head, r, W, false);
        break;
    default: break;
    }
}

/* Tensor parallelism's activation collectives (model/tp.h, block_tp.c), each
 * of the whole micro-batch's T x h activations in the compute dtype over
 * the tp ranks of a node, waited for by the compute (torchtitan's default,
 * enable_async_tensor_parallel = false). Per block in forward: an all-gather
 * before the attention and the MLP, a reduce-scatter after each (4); in
 * backward the gradients' mirror images (4), and under checkpointing the
 * recomputed forward's 4 again. The embedding reduce-scatters its output and
 * all-gathers its gradient; the head all-gathers its input and reduce-
 * scatters its gradient. (loss_parallel's all-reduces of one fp32 value per
 * token are left out: 1/h of these.) */
void est_work_tp_lanes(est_step *st, const est_run *run, est_unit unit, bool recompute) {
    if (run->tp <= 1) return;
    double n = 0;
    switch (unit) {
    case EST_UNIT_BLOCK_FWD: n = 4; break;
    case EST_UNIT_BLOCK_BWD: n = recompute ? 8 : 4; break;
    case EST_UNIT_EMBED_FWD:
    case EST_UNIT_EMBED_BWD:
    case EST_UNIT_HEAD_FWD:
    case EST_UNIT_HEAD_BWD: n = 1; break;
    default: return;
    }
    const double T = (double)run->micro_batch * (double)run->seq_len;
    est_event *e = est_step_add(st, EST_EV_LANE_COMM);
    if (!e) return;
    e->u.lane.elems = n * T * (double)run->model.hidden_size;
    e->u.lane.elem_bytes = (double)est_dtypes_of(run).act;
    e->u.lane.ranks = (double)run->tp;
    e->u.lane.collectives = n;
    e->u.lane.blocking = e->u.lane.node_local = true;
}

/* Appends the step's collective `c` (nothing when it moves no bytes). */
static void step_comm(est_step *st, est_event c) {
    if (!(c.u.comm.bytes > 0)) return;
    est_event *e = est_step_add(st, EST_EV_STEP_COMM);
    if (e) e->u.comm = c.u.comm;
}

static est_event comm(double bytes, est_overlap overlap, double windows) {
    est_event e = {.kind = EST_EV_STEP_COMM};
    e.u.comm.bytes = bytes;
    e.u.comm.overlap = overlap;
    e.u.comm.windows = windows;
    return e;
}

/* FSDP: what is gathered and what reduced: every parameter in the compute
 * dtype; under LoRA/QLoRA (seam_fsdp.c) the frozen base as it is
 * stored (NF4 codes and constants, or the compute dtype) and the adapters,
 * whose gradients alone are reduced. One FlatParameter per decoder block
 * (auto_wrap): a collective per block and pass, each of a block's share.
 * FULL_SHARD gathers the blocks again for backward but not the root unit
 * (embedding, final norm, head): the root is not resharded after its forward
 * (FSDP1 _runtime_utils.py: RESHARD_AFTER_FORWARD_HANDLE_STRATEGIES and
 * `not state._is_root`; FSDP2 _lazy_init: the root's post_forward_mesh_info
 * is None), so it stays gathered until its backward. */
/* The wire bytes of FSDP's collectives that no compute can hide (ring: f of
 * each unit's bytes). A micro-batch's forward begins with the root unit's
 * all-gather (embedding, final norm, head) and the first block's: the compute
 * stream waits for the root's unshard before anything runs, and the forward
 * prefetch of block 0 is issued only after that wait (FSDP1 _runtime_utils.py
 * _pre_forward_unshard: wait_stream(_unshard_stream), then _prefetch_handle;
 * FSDP2's root all-gathers in its pre-forward likewise). The step's backward
 * ends with the reduce-scatters of the first block and of the root, whose
 * gradients are complete only when the embedding's is: the final callback
 * makes the compute stream wait for them (FSDP1 _post_backward_final_callback:
 * wait_stream(_post_backward_stream); FSDP2's root final callback waits on the
 * reduce-scatter event), so the optimizer step starts after them. Under
 * accumulation the gathers repeat per micro-batch, the reduce once (no_sync). */
static double fsdp_exposed_ends(const est_run *run, double f, double GA, double gathered, double reduced,
                                double root, double layers) {
    const double root_g = fmin(root, gathered);
    const double root_r = est_lora_on(run) ? 0 : fmin(root, reduced); /* adapters sit in the blocks */
    const double first_gather = root_g + (gathered - root_g) / layers;
    const double last_reduce = root_r + (reduced - root_r) / layers;
    return f * (GA * first_gather + last_reduce);
}

static void fsdp_collectives(est_step *st, const est_run *run, double f, double GA, double P, double c) {
    double gathered = P * c, reduced = P * c;
    est_params pp;
    est_run_params(run, &pp);
    const double root = (double)(pp.embedding + pp.final_norm + pp.lm_head) * c;
    if (run->fp8_all_gather) /* Float8Linear weights gathered in fp8 (work_fp8.h) */
        gathered -= (double)run->layers_used * (double)est_fp8_block_weight_elems(run) * (c - 1);
    if (est_lora_on(run)) {
        const double adapters = (double)est_lora_params(run);
        gathered = (double)est_frozen_base_bytes(run, &pp) + adapters * c;
        reduced = adapters * c;
    }
    const double layers = (double)(run->layers_used > 0 ? run->layers_used : 1);
    double ends_g, ends_r; /* the ends as units of their own (fsdp_ends.h) */
    est_fsdp_ends_wire(run, (double)pp.lm_head * c, (double)pp.embedding * c,
                       est_lora_on(run) ? 0 : (double)pp.lm_head * c, &ends_g, &ends_r);
    est_event e;
    double exposed = 0;
    if (run->zero_stage == 0) /* NO_SHARD: an all-reduce like DDP */
        e = comm(2 * f * reduced, EST_OVERLAP_BACKWARD, 1);
    else { /* SHARD_GRAD_OP: all-gather + reduce-scatter per micro-batch; FULL_SHARD
              gathers again for backward. Prefetched: overlapped, but for the ends */
        exposed = fsdp_exposed_ends(run, f, GA, gathered, reduced, root, layers);
        e = comm(((run->zero_stage == 3 ? 2 * gathered - fmin(root, gathered) : gathered) + ends_g + reduced) * f *
                         GA + ends_r * f - exposed,
                 EST_OVERLAP_MICROBATCHES, GA);
    }
    e.u.comm.bucket_bytes = fmax(gathered, reduced) / layers;
    step_comm(st, e);
    if (exposed > 0) {
        est_event x = comm(exposed, EST_OVERLAP_NONE, 0);
        x.u.comm.bucket_bytes = e.u.comm.bucket_bytes;
        step_comm(st, x);
    }
}

/* Collective traffic per rank per step (ring algorithms: each rank sends
 * (W-1)/W of the volume; ZeRO paper section 7: 2 Psi for stages 0-2, 3 Psi
 * for stage 3, per micro-batch where the framework repeats it) and what of it
 * the framework overlaps with compute. */
static void transfer(est_step *st, est_event_kind kind, double bytes);

void est_work_step_collectives(est_step *st, const est_run *run, const est_constants *k) {
    const double W = (double)est_run_dp(run), GA = (double)run->grad_accum;
    const double f = W > 1 ? (W - 1) / W : 0;
    const double P = (double)total_params(run);
    const est_dtypes d = est_dtypes_of(run);
    const double c = (double)d.act, g = d.autocast ? 4 : c; /* gradient dtype on the wire */
    switch (run->framework) {
    case EST_FW_HF: {
        /* DDP: one all-reduce per step (no_sync during accumulation), in
         * buckets that start while backward runs (torch DDP, Li et al. 2020):
         * hidden behind the last micro-batch's backward, except the last
         * bucket, which can only start when backward ends. Only trained
         * parameters have gradients to reduce; with none, accelerate does not
         * wrap the model in DDP at all (accelerator.py prepare_model). */
        const double Pg = trained_params(run, P);
        if (Pg <= 0) return;
        est_event e = comm(2 * f * Pg * g, EST_OVERLAP_BACKWARD, 1);
        e.u.comm.bucket_bytes = k->value[EST_K_DDP_BUCKET_CAP_BYTES];
        e.u.comm.total_bytes = Pg * g;
        step_comm(st, e);
        return;
    }
    case EST_FW_FSDP: fsdp_collectives(st, run, f, GA, P, c); return;
    case EST_FW_DEEPSPEED:
    case EST_FW_FTRAIN: break;
    }
    const bool ds = run->framework == EST_FW_DEEPSPEED;
    /* LoRA: only the adapters are reduced (and, under ZeRO-1/2, gathered). */
    const double Pz = ds && est_lora_on(run) ? (double)est_lora_params(run) : P;
    /* ZeRO reduces gradients in communication_data_type when set (stage_1_and_2.py
     * allreduce_bucket, stage3.py __avg_scatter_grads); the gathers stay in c. */
    const double r = ds && run->ds.comm_bytes > 0 ? (double)run->ds.comm_bytes : c;
    /* ZeRO 1-2 reduce and gather in buckets of reduce_bucket_size and
     * allgather_bucket_size elements (both 5e8 by default). */
    const double bucket = r * (run->ds.reduce_bucket_elems != EST_DS_UNSET && run->ds.reduce_bucket_elems > 0
                                   ? (double)run->ds.reduce_bucket_elems
                                   : k->value[EST_K_DS_REDUCE_BUCKET_ELEMS]);
    switch (run->zero_stage) {
    case 3:
        /* deepspeed/runtime/zero/config.py: overlap_comm defaults to true at
         * stage 3; across ranks the units' lanes carry these collectives. */
        /* two gathers of every parameter, a reduce-scatter of the trained ones
         * (LoRA: the base and the adapters gathered, the adapters reduced) */
        if (ds && est_lora_on(run))
            step_comm(st, comm((2 * (P + Pz) + Pz) * f * c * GA + Pz * f * (r - c) * GA, EST_OVERLAP_IN_LANES, 0));
        else
            step_comm(st, comm((2 * P + trained_params(run, P)) * f * c * GA + trained_params(run, P) * f * (r - c) * GA,
                               ds ? EST_OVERLAP_IN_LANES : EST_OVERLAP_NONE, 0));
        if (ds && run->ds.offload_param_only) { /* each partition fetched from the host for
                                                   forward and backward, the updated one written back */
            const double n = (double)est_shard((int64_t)P, (int64_t)W);
            transfer(st, EST_EV_PCIE, 2 * GA * n * c + (double)est_shard((int64_t)trained_params(run, P), (int64_t)W) * c);
        }
        return;
    case 2:
    case 1: {
        /* Stage 2 reduce-scatters every micro-batch, stage 1 once per step.
         * overlap_comm: true in a DeepSpeed config runs the reduce-scatter beside
         * backward (every micro-batch's at stage 2, the last one's at stage 1);
         * the all-gather of the updated weights after the step (f Psi) still waits. */
        double bytes = run->zero_stage == 2 ? (GA + 1) * f * Pz * c : 2 * f * Pz * c;
        bytes += (run->zero_stage == 2 ? GA : 1) * f * Pz * (r - c); /* the reduces in r */
        est_event e = comm(bytes, EST_OVERLAP_NONE, 0);
        if (ds && run->ds.overlap_comm) {
            e = comm(bytes, EST_OVERLAP_BACKWARD, run->zero_stage == 2 ? GA : 1);
            e.u.comm.exposed_bytes = f * Pz * c;
        }
        e.u.comm.bucket_bytes = bucket;
        step_comm(st, e);
        return;
    }
    default: { /* overlap_comm false */
        est_event e = comm(2 * f * P * c, EST_OVERLAP_NONE, 0);
        e.u.comm.bucket_bytes = bucket;
        step_comm(st, e);
        return;
    }
    }
}

/* Bytes of FSDP's shards, gradients and optimizer state per element (the
 * seam's w; 4 where the seam refuses the run). */
static double fsdp_w(const est_run *run) {
    const int w = est_fsdp_shard_bytes(run);
    return w > 0 ? w : 4;
}

/* DeepSpeed's Adam on its fp32 partitions, bytes per parameter: its own
 * FusedAdam (a config that names an optimizer) reads p, g, m, v and writes p,
 * m, v (28); the client optimizer (none named: the Trainer's torch AdamW)
 * makes torch's passes, 7 fused or 21 foreach (optimizers.h). */
static double ds_adam_bytes(const est_run *run) {
    return run->ds.client_optimizer ? est_adamw_update_passes(run) * 4 : 28;
}

/* Bytes read + written per parameter by the GPU optimizer step. */
static double optimizer_bytes_per_param(const est_run *run, double c) {
    const bool adam = run->optimizer == EST_OPT_ADAMW;
    const double w = run->precision == EST_PREC_BF16 ? 2 : 4;
    switch (run->framework) {
    case EST_FW_DEEPSPEED: {
        /* Flatten + fp32 cast of the gradients (c+4), the norm (4), FusedAdam
         * (read p, g, m, v; write p, m, v: 28; SGD 12), the bit16 copy (4+c);
         * stage 3 upcasts each gradient to fp64 for its norm (c+16). */
        double bytes = (c + 4) + 4 + (adam ? ds_adam_bytes(run) : 12) + (4 + c);
        if (run->zero_stage == 3) bytes += c + 16;
        return bytes;
    }
    case EST_FW_FTRAIN: return (adam ? 28 : 12) + (run->precision == EST_PREC_BF16_MIXED ? 2 * c : 0);
    case EST_FW_HF:
        /* Every optimizer of the HF Trainer: estimator/model/optimizers.c. */
        return est_optimizer_traffic_per_param(run, est_peft_on(run) ? 4 : w); /* fp32 adapters */
    case EST_FW_FSDP:
        /* Gradient clipping (norm: 1, scale: 2 passes) and torch's foreach
         * AdamW: lerp_ m (3), mul_ v (2), addcmul_ v (4), sqrt (2), div_ (2),
         * add_ eps (2), addcdiv_ p (4), decoupled weight decay mul_ (2):
         * 24 passes of the shards' dtype (est_fsdp_shard_bytes: the loaded
         * dtype unless accelerate upcasts it); SGD: 3 + 3. */
        return (adam ? 3 + est_adamw_update_passes(run) : 6) * fsdp_w(run);
    }
    return 0;
}

/* Parameter tensors of the model (optimizer kernel counts). */
static double param_tensors(const ft_model *m, int64_t layers) {
    double per = 9 + (m->qkv_bias ? 3 : 0) + (m->o_bias ? 1 : 0) + (m->mlp_bias ? 3 : 0);
    return 2 + (m->tied_embeddings ? 0 : 1) + (double)layers * per;
}

static void transfer(est_step *st, est_event_kind kind, double bytes) {
    est_event *e = est_step_add(st, kind);
    if (e) e->u.transfer.bytes = bytes;
}

/* Launches of one multi-tensor op (PyTorch aten/src/ATen/native/cuda/
 * MultiTensorApply.cuh, torch 2.2-2.6, and apex's copy in DeepSpeed's
 * FusedAdam): a launch takes at most depth_to_max_tensors[depth - 1] = 110,
 * 64, 48, 36 tensors for 1-4 lists and depth_to_max_blocks = 320 chunks of
 * kChunkSize = 65536 elements. */
static double multi_tensor_launches(double tensors, double elems, int depth) {
    static const double max_tensors[4] = {110, 64, 48, 36};
    const double by_tensors = ceil(tensors / max_tensors[depth - 1]);
    const double by_chunks = ceil((elems / 65536 + tensors) / 320); /* a tensor's last chunk is partial */
    return fmax(1, fmax(by_tensors, by_chunks));
}

/* On the GPU. The launches are counted from the source: torch's foreach
 * AdamW (torch/optim/adamw.py _multi_tensor_adamw) runs _foreach_lerp_
 * (2 lists), mul_ (1), addcmul_ (3), sqrt (2), div_ (1), add_ (1), addcdiv_
 * (3) and the weight decay's mul_ (1), after the HF Trainer's clip_grad_norm_
 * (_foreach_norm and _foreach_mul_, 1 list each). DeepSpeed's ZeRO optimizer
 * steps one flat fp32 partition per group: the fp32 cast and flatten, the norm,
 * FusedAdam (4 lists) and the bit16 copy, one op each; at stage 3 each
 * gradient's norm is taken in fp64 one tensor at a time (stage3.py
 * get_grad_norm_direct: g.double().norm(2): two launches per tensor). */
static void optimizer_on_device(est_step *st, const est_run *run, double n, double tensors) {
    double kernels = 0;
    const est_mt_op *ops;
    if (run->framework == EST_FW_DEEPSPEED) {
        kernels = 3 + multi_tensor_launches(1, n, 4);
        if (run->ds.client_optimizer && run->optimizer == EST_OPT_ADAMW) {
            /* the client's torch AdamW on the flat partition instead of FusedAdam */
            kernels = 3;
            const int count = est_adamw_update_ops(run, &ops);
            for (int i = 0; i < count; i++) kernels += multi_tensor_launches(1, ops[i].scalars ? 1 : n, ops[i].lists);
        }
        if (run->zero_stage == 3) kernels += 2 * tensors;
    } else if (run->optimizer == EST_OPT_ADAMW) {
        /* clip's _foreach_norm and _foreach_mul_ (1 list each), then the
         * update's ops (est_adamw_update_ops: torch 2.11 optim/adam.py
         * _fused_adam, or foreach), a step counter holding one element */
        kernels = 2 * multi_tensor_launches(tensors, n, 1);
        const int count = est_adamw_update_ops(run, &ops);
        for (int i = 0; i < count; i++)
            kernels += multi_tensor_launches(tensors, ops[i].scalars ? tensors : n, ops[i].lists);
    } else {
        static const int depths10[10] = {2, 1, 3, 2, 1, 1, 3, 1, 1, 1};
        for (int i = 0; i < 10; i++) kernels += multi_tensor_launches(tensors, n, depths10[i]);
    }
    est_step_memory_op(st, n * optimizer_bytes_per_param(run, (double)est_dtypes_of(run).act), kernels);
}

/* On the CPU under offload. DeepSpeed ZeRO-1/2 with offload_optimizer
 * (deepspeed/runtime/zero/stage_1_and_2.py, v0.14.2): each gradient
 * partition is cast to fp32 on the GPU and copied to the pinned fp32 buffer
 * on the host (async_inplace_copy_grad_to_fp32_buffer_from_gpu: 4 bytes per
 * parameter down); with accumulation, the 16-bit gradient goes down after
 * the first micro-batch and up and down again after each later one
 * (async_accumulate_grad_in_cpu_via_gpu): 2c more per extra micro-batch.
 * step(): the host scales the fp32 gradients (unscale_and_clip_grads:
 * mul_, read 4 write 4), DeepSpeedCPUAdam steps the partition
 * (csrc/adam/cpu_adam_impl.cpp: read p, g, m, v, write p, m, v: 28), then the
 * fp32 partition goes up whole (fp32_partition.to(device): 4 up) and is cast
 * into the bit16 partition on the GPU. The DMA reads and writes the host's
 * DRAM too. Per parameter: PCIe 8 (+2c per extra micro-batch), host DRAM
 * 8 + 28 + 8 = 44 (+2c). DeepSpeed ZeRO-3 offload (stage3.py) moves and steps
 * the same. FSDP's CPU offload runs torch's AdamW on its fp32 shards
 * (foreach, one pass per op): its time is that of streaming
 * torch_cpu_adamw_slowdown x 28 bytes per parameter at DeepSpeedCPUAdam's
 * rate (both measured on one host, docs/method.md "The host"), and its
 * gradients and parameters cross PCIe in the parameter dtype. The time ledger
 * shares the host among the node's ranks. */
static void optimizer_on_host(est_step *st, const est_run *run, const est_constants *k, double n) {
    const double GA = (double)run->grad_accum;
    if (run->framework == EST_FW_FSDP) {
        const double w = fsdp_w(run);
        double pcie = GA * n * w + n * w; /* gradients down, parameters up */
        if (run->offload == EST_OFFLOAD_OPTIMIZER_PARAMS) pcie += 2 * GA * n * w;
        transfer(st, EST_EV_PCIE, pcie);
        transfer(st, EST_EV_HOST_MEMORY, n * 28 * k->value[EST_K_TORCH_CPU_ADAMW_SLOWDOWN] + n * w * 2);
        return;
    }
    const double c = (double)est_dtypes_of(run).act;
    double pcie = 8 * n + (GA - 1) * 2 * c * n;
    if (run->offload == EST_OFFLOAD_OPTIMIZER_PARAMS) /* ZeRO-3 parameters fetched for forward and backward */
        pcie += 2 * GA * n * c;
    transfer(st, EST_EV_PCIE, pcie);
    transfer(st, EST_EV_HOST_MEMORY, n * 44 + (GA - 1) * 2 * c * n);
}

void est_work_optimizer(est_step *st, const est_run *run, const est_constants *k) {
    est_params pp;
    est_run_params(run, &pp);
    const bool zero_sharded = (run->framework == EST_FW_DEEPSPEED || run->framework == EST_FW_FTRAIN)
                                  ? run->zero_stage >= 1
                                  : run->framework == EST_FW_FSDP && run->zero_stage >= 2;
    double n = zero_sharded ? (double)est_shard(pp.total, est_run_dp(run)) : (double)pp.total;
    double tensors = param_tensors(&run->model, run->layers_used);
    if (est_peft_on(run)) { /* only the adapters are stepped (work_peft.c), and the
                               modules_to_save copies */
        if (run->lora.variant == EST_LORA_FA && est_lora_on(run)) {
            est_work_lorafa_step(st, run);
            return;
        }
        est_work_peft_vec_step(st, run); /* AdaLoRA's regularization and rank allocator */
        n = est_peft_step_params(run) + (double)est_save_params(run);
        tensors = est_peft_step_tensors(run) +
                  (double)(((run->modules_to_save & EST_SAVE_EMBED) != 0) + ((run->modules_to_save & EST_SAVE_HEAD) != 0));
    }
    if (run->trainable.n > 0) { /* partial training: the trained parameters only */
        const double t = trained_params(run, n);
        n = zero_sharded ? (double)est_shard((int64_t)t, est_run_dp(run)) : t;
    }
    if (run->offload == EST_OFFLOAD_NONE) optimizer_on_device(st, run, n, tensors);
    else optimizer_on_host(st, run, k, n);
}
