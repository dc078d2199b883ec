/* The work of prefix tuning's and P-tuning's encoders and prefix tuning's
 * masks (estimator/model/peft_prompt.h), priced as work.c prices the rest:
 * GEMMs by shape, elementwise ops as bytes with their launches. The
 * attention over N + s keys and repeat_kv over them are work.c's. */
#ifndef EST_WORK_PEFT_PROMPT_H
#define EST_WORK_PEFT_PROMPT_H

#include <stdbool.h>

#include "events.h"
#include "run.h"

/* Once per micro-batch of b sequences of s positions (the embedding unit),
 * forward or backward; nothing for other methods. */
void est_work_prompt_encoder(est_step *st, const est_run *run, double b, double s, double c, bool backward);

/* Adaption prompt's work in one block beyond its Linears (the block
 * description's GEMMs): the two batched matmuls over A keys and the
 * elementwise ops; nothing for other methods. */
void est_work_adaption_block(est_step *st, const est_run *run, double b, double s, double c, bool backward);

#endif
