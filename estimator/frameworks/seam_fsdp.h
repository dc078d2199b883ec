/* HF Trainer + PyTorch FSDP as a seam on autograd's step (autograd.h):
 * FSDP1 (FullyShardedDataParallel, one FlatParameter per unit) and FSDP2
 * (fully_shard, one DTensor shard per parameter). seam_fsdp.c: the units, their
 * sizes and dtypes, loading and wrapping, gradients' arrival, the optimizer
 * step; seam_fsdp1.c and seam_fsdp2.c: each version's unshard, reshard,
 * prefetch and gradient reduction, hook by hook as torch runs them.
 * docs/method.md ("fsdp") derives every tensor. */
#ifndef EST_SEAM_FSDP_H
#define EST_SEAM_FSDP_H

#include <stdbool.h>
#include <stdint.h>

#include "autograd.h"
#include "seam_util.h"
#include "timing.h"

/* Side streams. Their blocks are reused only by their own stream
 * (caching_allocator.c); a tensor one of them made and another used is freed
 * through record_stream where the source does so. */
#define FSDP_STREAM_UNSHARD 1 /* FSDP1 _unshard_stream; FSDP2 all-gather copy-in stream */
#define FSDP_STREAM_PRE 2     /* FSDP1 _pre_unshard_stream (the low-precision shard) */
#define FSDP_STREAM_REDUCE 3  /* FSDP1 _post_backward_stream; FSDP2 reduce_scatter_stream */

/* One parameter of the model as FSDP holds it. */
typedef struct fsdp_param {
    int inst, p;          /* the module parameter (autograd.h instances) */
    int unit;             /* the unit it belongs to */
    int64_t numel;        /* elements as the unit flattens or gathers them, in the compute dtype
                             (a quantized weight: its codes as compute-dtype elements) */
    int64_t shard;        /* FSDP2: one rank's elements, rows padded: ceil(rows / W) x cols */
    int32_t unsharded;    /* FSDP2: its all-gather output (W x shard elements) */
    int32_t grad;         /* its unsharded gradient from autograd, until its unit reduces */
    int32_t accum;        /* FSDP2 no_sync: its gradient accumulated in the reduce dtype */
    int32_t sharded;      /* FSDP2: its sharded parameter (init only) */
} fsdp_param;

/* One tensor the optimizer steps: FSDP1's FlatParameter shard of a unit, or
 * FSDP2's shard of one parameter. */
typedef struct fsdp_opt {
    int64_t numel;
    bool stepped;         /* its state exists (made at its first step) */
} fsdp_opt;

/* One FSDP unit: a decoder block, the root (embedding, final norm, LM head),
 * or under LoRA one adapter weight (PEFT's fsdp_auto_wrap_policy). */
typedef struct fsdp_unit {
    int first, count;      /* its parameters: params[first .. first + count) */
    int first_opt, n_opt;  /* its optimizer tensors */
    int owner;             /* the block unit whose hooks gather it (an adapter's block), else itself */
    int64_t numel;         /* U: elements whole (compute-dtype elements) */
    int64_t shard;         /* one rank's elements (FSDP1 ceil(U / W); FSDP2 the sum of its
                              parameters'; NO_SHARD U) */
    int64_t padded;        /* gathered elements: shard x W (NO_SHARD U) */
    bool trainable;        /* its parameters have gradients */
    bool gathered;         /* its unsharded parameters exist */
    bool needs_pre_backward; /* its forward ran, its pre-backward has not (FSDP1's
                              _needs_pre_backward_unshard): a backward prefetch may target it */
    bool prefetched;       /* FSDP1's handle._prefetched: a prefetch ran _unshard for it, so its
                              own hook does not (until its reshard or the end of backward) */
    int32_t full;          /* FSDP1: the padded unsharded FlatParameter, or NO_SHARD's
                              low-precision copy */
    int32_t staged;        /* FSDP1 with offload: the shard copied to the device */
    int32_t ag;            /* FSDP2: an all-gather output not yet copied out */
    int32_t accum;         /* FSDP1 no_sync: its unsharded gradient accumulated */
    int32_t grad;          /* its sharded (reduced) gradient, until zero_grad */
} fsdp_unit;

typedef struct fsdp_state {
    int64_t W;             /* ranks */
    int c, r, w;           /* bytes of the compute dtype (param_dtype), the reduce dtype and
                              the sharded parameter (its gradient and optimizer state follow it) */
    bool v2, sharded, reshard_after_forward, mixed, offload, accum;
    est_category shard_cat; /* shards in fp32 beside a low-precision compute copy: MASTER */
    fsdp_unit *units;      /* units[0] the root, units[1 + i] block i, then adapters */
    int n_units;
    fsdp_param *params;
    int n_params;
    int *param_of_slot;    /* est_sim_grad_slot -> params[] */
    fsdp_opt *opt;
    int n_opt;
    int deferred;          /* FSDP1 with forward prefetch: the block whose post-backward waits
                              for the next block's backward (-1 none) */
    int32_t freed, waited; /* FSDP1's rate limiter (seam_fsdp1.c limiter_wait): the reshards
                              that freed an unsharded FlatParameter so far, and how many of
                              their free events the host has waited for */
    /* FSDP1's clock (seam_fsdp1.c, "The host and the device"): the time ledger's units of
     * the step (est_time_ledger over a first build; unmodelled: the device-bound case), when
     * the host has issued the work so far and when the device will have run it; each
     * record_stream free waits on a virtual stream of its own (events.h EST_STREAM_VIRTUAL)
     * until the host's time passes the device's time of its event. */
    est_time_detail times;
    double host_s, device_s;
    double event_s[EST_STREAM_VIRTUAL_COUNT];   /* the limiter's free events, by reshard (ring) */
    double virtual_done_s[EST_STREAM_VIRTUAL_COUNT];
    bool virtual_pending[EST_STREAM_VIRTUAL_COUNT];
    int32_t virtual_next;
    int embed_unit, head_unit; /* FSDP2 with run->fsdp_shard_ends: the embedding's and the LM
                              head's own units (after the adapters), else -1 */
    int head_chunks_fwd, head_chunks_back; /* output chunks whose forward, backward has run
                              (seam_fsdp_ends.c) */
    int32_t ag_state;      /* FSDP2: forward's all-gather output kept until the next copy-out */
    int32_t rs_state;      /* FSDP2: the last reduce-scatter input, kept until the next */
    est_held_outputs outs; /* the caller's references on the model's outputs (the logits, the
                              KV cache) until the forward returns (seam_util.h) */
} fsdp_state;

/* seam_fsdp_units.c: bytes per element of unit u's parameters as sharded: the trainable shard
 * dtype (w), or, for a frozen unit (LoRA's base), the compute dtype. */
int fsdp_unit_elem_bytes(const est_sim *s, const fsdp_state *f, int u);
/* The same for one parameter: w if it trains, else the compute dtype. */
int fsdp_param_elem_bytes(const est_sim *s, const fsdp_state *f, const fsdp_param *q);

/* seam_fsdp_host.c: the rank's host RAM while loading and, under offload,
 * while training (st->cpu_load_bytes, st->cpu_bytes); and what torch's pinned
 * allocator takes for n bytes (the next power of two). */
void fsdp_host_bytes(est_sim *s, const fsdp_state *f);
int64_t est_pinned_bytes(int64_t n);

/* The unit whose hooks run around module instance `inst`. */
static inline int fsdp_unit_of(const est_sim *s, int inst) { return inst == s->L + 1 ? 0 : inst; }

/* seam_fsdp_units.c: the unit gathered after `u` in forward and before it in backward (the
 * recorded pre-forward and post-forward orders: root, block 0 .. L-1); -1 none. */
int fsdp_next_forward(const est_sim *s, int u);
int fsdp_next_backward(const est_sim *s, int u);

/* Version mechanics: forward and backward hooks of unit u, and the reduction
 * of a unit whose gradients are complete (seam_fsdp1.c, seam_fsdp2.c). */
void fsdp1_pre_forward(est_sim *s, fsdp_state *f, int u);
void fsdp1_post_forward(est_sim *s, fsdp_state *f, int u);
void fsdp1_pre_backward(est_sim *s, fsdp_state *f, int u);
void fsdp1_post_backward(est_sim *s, fsdp_state *f, int u);
/* The block's post-backward in autograd's order: with forward prefetch its
 * split node (made when the previous block prefetched it) runs after the
 * next block's backward. */
void fsdp1_block_backward_done(est_sim *s, fsdp_state *f, int u);
void fsdp1_unshard(est_sim *s, fsdp_state *f, int u);
/* The host waits for the device (the end of the step): every free event queued
 * by FSDP1's rate limiter has completed. */
void fsdp1_device_caught_up(est_sim *s, fsdp_state *f);
/* The clock: the unit of module `inst` has been issued (forward or backward), then
 * the frees whose events the device has passed by the host's time complete. */
void fsdp1_clock_unit(est_sim *s, fsdp_state *f, int inst, bool backward);
/* The frees whose events the device has passed by the host's time complete
 * (CUDACachingAllocator.cpp process_events at the next malloc). */
void fsdp1_observe(est_sim *s, fsdp_state *f);
/* The end of backward: no unit counts as prefetched any more. */
void fsdp1_backward_ended(fsdp_state *f);
/* A unit still gathered from the previous micro-batch (SHARD_GRAD_OP under no_sync). */
void fsdp1_kept(est_sim *s, fsdp_state *f, int u);
void fsdp2_pre_forward(est_sim *s, fsdp_state *f, int u);
void fsdp2_post_forward(est_sim *s, fsdp_state *f, int u);
void fsdp2_pre_backward(est_sim *s, fsdp_state *f, int u);
void fsdp2_post_backward(est_sim *s, fsdp_state *f, int u);
/* A backward prefetch of unit u (its all-gather, not waited for). */
void fsdp2_prefetch(est_sim *s, fsdp_state *f, int u);
/* The root's post-forward (the end of the model's forward) and the end of backward. */
void fsdp2_root_post_forward(est_sim *s, fsdp_state *f);
void fsdp2_backward_done(est_sim *s, fsdp_state *f);

/* seam_fsdp_ends.c: the embedding's and the head's own units (run->fsdp_shard_ends): the
 * hooks at the embedding (EST_INST_EMBED) and the head (L + 1); false where the call is
 * not theirs (the seam's own routing runs). */
bool fsdp2_ends_pre(est_sim *s, fsdp_state *f, int inst, bool backward);
bool fsdp2_ends_post(est_sim *s, fsdp_state *f, int inst, bool backward);
/* Around each op of the head: a call of the output projection runs its unit's hooks. */
void fsdp2_ends_op_pre(est_sim *s, fsdp_state *f, int inst, int op, bool backward);
void fsdp2_ends_op_post(est_sim *s, fsdp_state *f, int inst, int op, bool backward);

#endif
