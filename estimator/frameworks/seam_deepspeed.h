/* HF Trainer + DeepSpeed ZeRO 0-3 (0.14-0.16) as a seam on autograd's step.
 * seam_deepspeed.c: sizes, resident states, gradients, reduction and step;
 * seam_deepspeed_zero3.c: stage 3's parameter coordinator (which submodule's
 * parameters are gathered when, prefetched, kept or released). */
#ifndef EST_SEAM_DEEPSPEED_H
#define EST_SEAM_DEEPSPEED_H

#include <stdbool.h>
#include <stdint.h>

#include "autograd.h"
#include "seam_util.h"

/* Stage 3's side streams, each a pool of its own in PyTorch's caching
 * allocator (a block freed on one stream never serves another): the
 * all-gathers run on DeepSpeedZeRoOffload's __allgather_stream
 * (parameter_offload.py; partitioned_param_coordinator.py __all_gather_params),
 * the bucket's reduce-scatter and fp16's overflow test on stage 3's
 * reduce_and_partition_stream (stage3.py 0.14.2 lines 227-228, 0.19.8
 * 340-341: a stream of its own with overlap_comm, which config.py's
 * overlap_comm_valid makes the default at stage 3, lines 305-310). */
#define DS_ALLGATHER_STREAM 1
#define DS_REDUCE_STREAM 2

/* A stage-3 fetch unit: one op's submodule (a Linear, the embedding, the LM
 * head) in the order the step meets it (DeepSpeed's trace). */
#define DS_FETCH_MAX 3
typedef struct ds_fetch {
    int inst, op;          /* module instance and op */
    bool backward;
    int count;             /* its gathered parameters (weight, bias) */
    int slot[DS_FETCH_MAX];
    int64_t numel[DS_FETCH_MAX];
} ds_fetch;

/* A coalesced all-gather call: its flat buffer, until its last parameter is waited for. */
typedef struct ds_group {
    int32_t flat;
    bool waited;
    int remaining;            /* its parameters still in the in-flight registry */
} ds_group;

typedef struct ds_state {
    est_held_outputs outs;    /* the loop's references on the model's outputs until the forward
                                 returns (seam_util.h) */
    int64_t P, n, W, c;       /* parameters, partition, ranks, compute-dtype bytes */
    int64_t comm;             /* bytes per element gradients are reduced in: c, or
                                 communication_data_type's (run->ds.comm_bytes) */
    int64_t train_P, train_n; /* the parameters that train and their partition: only those enter
                                 the optimizer's flat groups (stage3.py _get_trainable_parameter_groups,
                                 0.16.5): gradient partition, fp32 master, Adam state. P and n
                                 unless some are frozen (--trainable) */
    int64_t bucket_elems;     /* reduce_bucket_size */
    int64_t prefetch_elems;   /* stage3_prefetch_bucket_size */
    int64_t reuse_elems;      /* stage3_max_reuse_distance */
    int64_t persistence_elems;/* stage3_param_persistence_threshold */
    int64_t sub_group_elems;  /* sub_group_size */
    int64_t largest;          /* elements of the largest parameter */
    est_param_ref *refs;      /* the parameters in registration order (DeepSpeed's fp16_groups) */
    int n_refs;
    int64_t *sub_groups;      /* stage 3: elements of each optimizer sub-group's partition */
    int n_sub_groups;
    int64_t buckets;          /* stages 1-2: 2 with overlap_comm */
    int64_t adam_elems;       /* state elements per parameter: 2 (Adam) or 0 (SGD) */
    bool offload, offload_params, gathers;
    bool reduce_after_backward; /* stage 1 without overlap_comm: no gradient hooks
                                   (stage_1_and_2.py __init__); reduce_gradients walks
                                   the parameters in registration order after backward */
    bool lora;                /* LoRA: at stages 1-2 refs, P and n are the adapters' and the frozen
                                 base stays whole; at stage 3 every parameter is partitioned and
                                 train_P, train_n and the sub-groups are the adapters' */
    /* gradients waiting in the reduce bucket (elements), stage 2's partition */
    int64_t in_bucket;
    int64_t in_bucket_padded; /* stage 3: the same, each gradient padded to a multiple of W */
    int bucket_count;         /* stage 3: gradients in the bucket */
#define DS_HELD_MAX 8
    int32_t held[DS_HELD_MAX];/* stage 3: gradients larger than the bucket, until its flush */
    int32_t *loose;           /* stage 3, contiguous_gradients false: the bucket's gradients, each
                                 its own tensor until the flush (one per parameter slot) */
    int n_loose;
    int n_held;
    int32_t grad_partition;
    int32_t tied_grad;        /* a tied LM head's gradient, held until the embedding's arrives */
    int32_t bucket_ids[2];    /* stages 1-2: the reduce buckets of this backward */
    int32_t *grad;            /* stage 0-1: .grad per slot */
    /* stages 1-2 (seam_deepspeed_zero12.c) */
    int64_t *flat_off;        /* per slot: the parameter's offset in the flat bit16 buffer */
    int64_t *slot_elems;      /* per slot: its elements */
    int64_t part_lo, part_hi; /* the simulated rank's partition of the flat buffer */
    int64_t gip_elems;        /* grads_in_partition: the parameters meeting the partition */
    int32_t gip;              /* grads_in_partition, from the first copy to the step */
    int32_t gip_acc;          /* stage 2 accumulating: the earlier micro-batches' grads_in_partition */
    int *bucket_slots;        /* the parameters in the bucket, in hook order */
    int n_bucket;
    int32_t xl_grad;          /* extra_large_param_to_reduce's gradient */
    int xl_slot;
    /* stage 3's coordinator */
    int64_t max_live_elems;   /* stage3_max_live_parameters */
    ds_fetch *trace;
    int n_trace, pos, queue;  /* the trace, the current entry, the prefetch queue's head */
    int32_t *avail;           /* per slot: its gathered tensor; -1 partitioned, -2 in flight */
    int32_t *kept;            /* per slot: a released buffer autograd keeps (no zero.Init) */
    int *group_of;            /* per slot: its coalesced call while in flight, or -1 */
    int *recent;              /* per slot: the latest trace entry of it the queue has passed
                                 (__most_recent_step_id_param_fetched_for), or -1 */
    int64_t *slot_numel;
    int *where;               /* (inst, op, backward) -> trace entry, or -1 */
    int ops_per_inst;
    ds_group *groups;
    int n_groups;
    int64_t n_available;      /* gathered elements (the coordinator's __n_available_params) */
    int32_t *persist;         /* the persistent parameters' whole tensors (W > 1), in refs order */
    int n_persist;
    /* stage 3's frees through record_stream in backward, not yet passed by
       their stream (seam_deepspeed_lag.c) */
    bool lag;                 /* real ranks: the host may run ahead of the streams */
    int32_t *lag_id;          /* the tensors, in the order freed */
    int64_t *lag_at;          /* the flushes (reduce stream) or waits (compute stream) made
                                 before each was freed */
    bool *lag_compute;        /* recorded on the compute stream (free_param), else the reduce stream */
    int n_lag, cap_lag;
    int64_t flushes;          /* bucket flushes of this backward */
    int64_t waits;            /* in-flight parameters waited for in this backward */
    bool *inflight;           /* per slot: in the coordinator's in-flight registry */
    int64_t lag_bytes;        /* their bytes */
    int64_t lag_seen_peak;    /* the step's allocated peak when the lag last changed */
    int64_t lag_at_peak;      /* what was held when that peak was reached */
} ds_state;

/* seam_deepspeed_lag.c: a free through record_stream in backward (held
 * while DeepSpeed's host may be ahead of its stream), the throttle at each
 * bucket flush, the epilogue's synchronize. */
bool ds_lag_on(const est_sim *s, const ds_state *d);
void ds_lag_release(est_sim *s, ds_state *d, int32_t id, bool compute);
void ds_lag_flush(est_sim *s, ds_state *d);
void ds_lag_wait(est_sim *s, ds_state *d);
void ds_lag_drain(est_sim *s, ds_state *d);
void ds_lag_end(est_sim *s, ds_state *d);
void ds_lag_free(ds_state *d);

/* seam_deepspeed_init.c: the parameters' order and the optimizer's
 * sub-groups; the set-up on the device (deepspeed.initialize). */
int ds_layout(est_sim *s, ds_state *d);
void ds_layout_free(ds_state *d);
int ds_init_device(est_sim *s, ds_state *d);
/* seam_deepspeed_optim.c: Adam's two fp32 states for `elems` (none for SGD), and the optimizer's
 * step on a group of `elems` (the states too when `first`). */
void ds_adam_state(est_sim *s, ds_state *d, int64_t elems);
void ds_optimizer_step(est_sim *s, ds_state *d, int64_t elems, bool first);
/* `elems` in the compute dtype (a cat or a clone, named `what`) cast to fp32
 * (`name`) and dropped; in fp32 the cast is the tensor itself. Returns the
 * fp32 tensor. */
int32_t ds_to_fp32(est_sim *s, ds_state *d, est_category cat, int64_t elems, const char *what, const char *name);
/* A tensor allocated and freed at once on `stream`. */
void ds_transient(est_sim *s, est_category cat, int64_t bytes, const char *name, int stream);

/* seam_deepspeed_zero12.c: stages 1-2's buckets, partition and step. */
int ds12_layout(est_sim *s, ds_state *d);
void ds12_layout_free(ds_state *d);
void ds12_backward_begin(est_sim *s, ds_state *d);
void ds12_accumulated(est_sim *s, ds_state *d);
void ds12_grad(est_sim *s, ds_state *d, int slot, int32_t grad);
void ds12_epilogue(est_sim *s, ds_state *d);
void ds12_step(est_sim *s, ds_state *d);
/* The HF Trainer's two optimizer groups (weight decay and not) reach
 * DeepSpeed as two bit16 groups; ds12_no_decay: a parameter of the second. */
bool ds12_two_groups(est_sim *s, const ds_state *d);
bool ds12_no_decay(const est_mparam *p);
/* _has_inf_or_nan on `elems` elements (stage_1_and_2.py). */
void ds_has_inf_or_nan(est_sim *s, int64_t elems);

/* Stage 3: the trace, and the op hooks that gather and release. */
int ds_zero3_prepare(est_sim *s, ds_state *d);
void ds_zero3_free(ds_state *d);
/* The end of a step: everything gathered is released, the trace starts over. */
void ds_zero3_reset(est_sim *s, ds_state *d);
void ds_zero3_op_pre(est_sim *s, int inst, int op, bool backward);
void ds_zero3_op_post(est_sim *s, int inst, int op, bool backward);
/* The persistent parameters gathered whole (at set-up, and by the step's
 * _post_step), and released by the step's _partition_all_parameters. */
void ds_zero3_gather_persistent(est_sim *s, ds_state *d);
void ds_zero3_release_persistent(est_sim *s, ds_state *d);
/* A parameter's elements as ZeRO-3 partitions and gathers it (a 4-bit
 * weight's packed codes in compute-dtype elements), and the quantization
 * constants every rank keeps whole. */
int64_t ds_param_numel(const est_sim *s, const ds_state *d, int inst, int p);
int64_t ds_quant_constants_bytes(const est_sim *s, const ds_state *d);

#endif
