/* The forward/backward part of the step for PyTorch-based frameworks
 * (hf, deepspeed, fsdp): one moment per block in each direction plus the
 * embedding and the loss. Each framework profile supplies what differs (the
 * resident model states, gathered parameters, how gradients appear) and adds
 * its own init and optimizer-step moments around this sweep. */
#ifndef EST_TORCH_STEP_H
#define EST_TORCH_STEP_H

#include <stdbool.h>
#include <stdint.h>

#include "constants.h"
#include "run.h"
#include "events.h"

typedef struct est_sweep_terms {
    int64_t base[EST_CAT_COUNT];  /* resident through forward and backward */
    int64_t backward_only[EST_CAT_COUNT]; /* added from the loss backward on (buckets) */
    int64_t block_gathered;       /* a block's unsharded parameters while it computes (ZeRO-3, FSDP) */
    int64_t head_gathered;        /* unsharded LM head at the loss (and embedding in its forward) */
    int64_t block_grads;          /* gradients a block's backward adds that stay until the step */
    int64_t head_grads;           /* same for the LM head (and embedding, when tied) */
    int64_t embed_grads;          /* same for an untied embedding, at the end of backward */
    int64_t block_grad_transient; /* a block's gradients in flight before a bucket takes them */
    int64_t head_grad_transient;  /* same for the LM head / embedding */
    int64_t late_grads;           /* a gradient buffer allocated partway through backward... */
    int64_t late_grads_layer;     /* ...from the backward of this block on (counting down) */
    int64_t block_cast_weights;   /* weights autograd keeps per block from forward to backward:
                                     autocast's low-precision copies (hf), or ZeRO-3's gathered
                                     Linear weights without zero.Init (deepspeed) */
    int64_t head_cast_weights;    /* same for the LM head */
    int64_t block_recompute_kept; /* weights autograd keeps for the block being recomputed under
                                     checkpointing, from its recompute to the end of its backward
                                     (ZeRO-3 without zero.Init: the no-grad forward kept none) */
    bool kept_are_gathered;       /* the kept weights ARE the block's / head's gathered
                                     parameters (ZeRO-3 without zero.Init): while a block
                                     computes forward they are counted once */
    int64_t block_gathered_kept;  /* a block's unsharded parameters kept from its forward to its
                                     backward (FSDP SHARD_GRAD_OP): (i+1) blocks at forward and
                                     backward layer i, all L from the loss to the LM head backward */
    int64_t root_grad_unsharded;  /* an unsharded gradient buffer that appears at the LM head
                                     backward and stays through the embedding backward (FSDP's
                                     root unit: embedding, final norm and LM head in one flat
                                     gradient reduced when the embedding's is done) */
    int64_t block_prefetched_bwd; /* the next block in backward order gathered ahead (FSDP2's
                                     default backward prefetch): from the loss backward through
                                     backward layer 1 */
    int64_t block_unshard_staging; /* bytes live only at the instant a block is gathered for its
                                      forward, before its compute allocates (FSDP2's flat
                                      all-gather output beside the per-parameter copies): at
                                      forward layer i, what exceeds the block's own forward
                                      activations */
    int64_t root_unshard_staging;  /* same for the root unit, at the forward embedding */
    int64_t head_grad_cast;        /* at the LM head backward only: its weight gradient in the
                                      compute dtype before autocast's cast backward turns it
                                      into the fp32 gradient */
} est_sweep_terms;

/* Emits the embedding, per-block forward, loss and per-block backward
 * moments, each with the work of the unit that starts there (work.h). */
int est_push_forward_backward(const est_run *run, const est_constants *k,
                              const est_sweep_terms *terms, est_step *st, char *err, size_t errlen);

/* Adds `bytes` of category `cat` to the moment being built. */
void est_live_add(int64_t live[EST_CAT_COUNT], est_category cat, int64_t bytes);

/* Emits a moment, failing with a message when out of memory. */
int est_push(est_step *st, est_phase_kind kind, int32_t layer, const char *label,
             const int64_t live[EST_CAT_COUNT], char *err, size_t errlen);

/* Emits a moment, then the work of `unit` that starts there (work.h). */
int est_push_unit(est_step *st, const est_run *run, const est_constants *k, est_phase_kind kind,
                  int32_t layer, const char *label, const int64_t live[EST_CAT_COUNT],
                  est_unit unit, char *err, size_t errlen);

#endif
