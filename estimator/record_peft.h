/* The record config keys of PEFT's methods, the training loop and the
 * lengths of a run's batches (docs/records.md):
 *   peft_method       "full" | "lora" | "ia3" | "prompt_tuning" | "prefix_tuning" |
 *                     "p_tuning" | "adaption_prompt" (PEFT's names; others:
 *                     not expressible, record_features.h)
 *   lora_variant      "lora" | "rslora" | "dora" | "lora-fa"
 *   ia3_targets, ia3_feedforward   "k,v,down", "down" (default: PEFT's for the model)
 *   virtual_tokens    num_virtual_tokens (prompt tuning, prefix tuning, P-tuning)
 *   encoder_hidden    P-tuning's encoder_hidden_size
 *   adapter_len       adaption prompt's adapter_len
 *   adapted_layers    "all": adaption prompt in every layer; "some" is not expressible
 *   prompt_encoder    "embedding" (prefix tuning without prefix_projection) | "mlp"
 *                     (P-tuning's MLP); others are not expressible (record_features.c)
 *   train_loop        "trainer" | "plain"
 *   empty_cache_steps the loop empties the allocator's cache every N steps
 *   seq_mean          mean padded tokens per sequence (seq_len: the longest batch's)
 *   use_cache         false: the model ran without a KV cache */
#ifndef EST_RECORD_PEFT_H
#define EST_RECORD_PEFT_H

#include <stddef.h>

#include <cJSON.h>

#include "run_desc.h"

/* Reads those keys of `cfg` into run (after the model and LoRA keys). 0, or
 * -1 with one line. */
int est_record_peft_config(const cJSON *cfg, est_run *run, char *err, size_t errlen);

#endif
