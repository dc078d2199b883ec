/* The ops PEFT's methods of peft_vec.h add to a block (block_peft_vec.c):
 * internal to estimator/model/, called by block_linear.c, block.c and
 * block_ends.c. */
#ifndef EST_BLOCK_PEFT_VEC_H
#define EST_BLOCK_PEFT_VEC_H

#include "block_build.h"

/* Declares Linear t's adapter parameters (stem: its module name). */
void est_vec_params(est_bld *b, int t, const char *stem, int64_t din, int64_t dout);
/* MiSS "bat" runs Linear t itself (a full weight built per call). */
bool est_vec_replaces_base(const est_bld *b, int t);
int est_vec_bat_linear(est_bld *b, int t, int x, int64_t din, int64_t dout);
/* The adapter on Linear t's base output y (input x); y when t has none. */
int est_vec_adapter(est_bld *b, int t, int x, int y, int64_t din, int64_t dout);
/* LN tuning: the norm the module runs, given its frozen original (a
 * trained copy beside it, or the original itself). */
int est_vec_norm(est_bld *b, int original, const char *name);
/* Trainable tokens: the weight the embedding (or the tied LM head) reads,
 * given its frozen one w: W.index_copy(0, indices, delta.to(W)), or w. */
int est_vec_tokens_weight(est_bld *b, int w, bool head);
/* VeRA's shared vera_A and vera_B, declared once, in the embedding module. */
void est_vec_model_buffers(est_module *m, const est_run *run);

#endif
