/* Prefix tuning and P-tuning in the module descriptions (peft_prompt.h):
 * what the embedding module makes for them and what each block's attention
 * reads. Internal to estimator/model/. */
#ifndef EST_BLOCK_PROMPT_H
#define EST_BLOCK_PROMPT_H

#include "block_build.h"

/* P-tuning: the prompt encoder's N rows, repeated over the batch, cast and
 * put before the word embeddings `words`; returns the concatenation. */
int est_p_tuning_prompts(est_bld *b, int words);

/* Prefix tuning, in the embedding module: the prefix encoder's lookup, its
 * cast and the DynamicCache's copies (held in the model's outputs); returns
 * the boolean (b, 1, s, N + s) mask every block's attention reads. */
int est_prefix_encoder(est_bld *b);

/* Prefix tuning, in a block: the mask as the block receives it (its input),
 * and as SDPA converts it for the memory-efficient kernel. */
int est_prefix_mask_input(est_bld *b);
int est_prefix_layer_mask(est_bld *b, int mask);

/* Adaption prompt, in a block: the adapter's attention of every query over
 * adapter_len trained tokens, added to the layer's attention output `out`
 * (x: the attention's normed input); returns the sum. */
int est_adaption_prompt(est_bld *b, int x, int out);

#endif
