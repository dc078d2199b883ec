/* The math of one micro-batch on one rank: the ops of every stage of the
 * forward and backward, called by model.c in the order of the memory timeline.
 * These functions acquire nothing except the short-lived workspaces named in
 * their comments; model.c owns the lifetimes of everything else. */
#ifndef TR_STEP_H
#define TR_STEP_H

#include <stdbool.h>

#include "rank.h"

/* encoded = embedding rows of the input tokens. */
void tr_step_embedding_fwd(tr_rank *r);
/* dW_emb += scatter of dres by token. */
void tr_step_embedding_bwd(tr_rank *r);

/* One block from its input x into the tensors of v. With recompute (full
 * checkpointing, in backward) it stops before the block output, which is
 * already saved. Selective checkpointing acquires and releases att_ws around
 * the attention core. */
void tr_step_block_fwd(tr_rank *r, int64_t l, tr_layer_acts *v, const void *x, bool recompute);
/* Selective checkpointing: recomputes the attention core's probabilities (eager)
 * or logsumexp (flash) into the live att_ws from the saved q, k. */
void tr_step_attention_recompute(tr_rank *r, tr_layer_acts *v);
/* Backward of block l: dres holds d(output) on entry and d(input) on exit;
 * weight gradients accumulate. Eager attention acquires datt_ws around its
 * backward. */
void tr_step_block_bwd(tr_rank *r, int64_t l, tr_layer_acts *v, const void *x);

/* The "loss" phase: final norm, LM head (whole or in chunks), cross-entropy,
 * and the backward of all three, leaving d(last block output) in dres. It
 * acquires and releases its own buffers (docs/trainer.md, "loss"). Returns the
 * mean loss of the micro-batch. */
double tr_step_loss(tr_rank *r, float loss_scale);

#endif
