/* The elementwise work of AdaLoRA, VeRA, MiSS and LN tuning (peft_vec.h)
 * in one block, forward or backward, for the time ledger; their GEMMs are
 * the block description's (work.c block_gemms) but MiSS "bat"'s batched
 * product, priced here. */
#ifndef EST_WORK_PEFT_VEC_H
#define EST_WORK_PEFT_VEC_H

#include <stdbool.h>

#include "events.h"
#include "run.h"

/* T tokens whose activations are c bytes per element. */
void est_work_peft_vec_block(est_step *st, const est_run *run, double T, double c, bool backward);

/* AdaLoRA's work once a step beside the blocks': the orthogonal
 * regularization AdaLoraModel.forward adds to the loss (and its backward),
 * and RankAllocator.update_and_allocate after the optimizer step. */
void est_work_peft_vec_step(est_step *st, const est_run *run);

/* Trainable tokens' work in the embedding's and the tied head's units (T
 * tokens, hidden h, vocabulary V, c bytes per element). */
void est_work_peft_vec_unit(est_step *st, const est_run *run, est_unit unit, double T, double h, double V, double c);

#endif
