/* What a step trains on beyond plain next-token SFT of padded rows, as run
 * settings: TRL's preference objectives (DPO, ORPO, KTO: rows per
 * micro-batch, the reference model), PEFT's modules_to_save (trainable copies
 * of embed_tokens / lm_head), sample packing, and non-reentrant
 * checkpointing. Names, parsing, the trainable elements they add and their
 * checks against the rest of the run; the step itself is built by the
 * modules (block_ends.c, block_rl.c) and autograd (estimator/frameworks/rl.c).
 * docs/method.md derives each ("Preference training", "modules_to_save",
 * "Sample packing", "Non-reentrant checkpointing"). */
#ifndef EST_OBJECTIVE_H
#define EST_OBJECTIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "run_desc.h"

const char *est_rl_name(est_rl r);
int est_rl_parse(const char *s, est_rl *out, char *err, size_t errlen);

/* "embed_tokens,lm_head" (also "embed", "head"): EST_SAVE_* bits. */
int est_save_parse(const char *s, uint32_t *out, char *err, size_t errlen);
/* "embed_tokens,lm_head" for the bits; returns buf. */
const char *est_save_name(uint32_t bits, char *buf, size_t n);

/* Rows of one micro-batch as the policy model runs them: DPO and ORPO
 * concatenate each pair's chosen and rejected completions (2 x micro_batch);
 * KTO and SFT run micro_batch rows. */
int64_t est_policy_rows(const est_run *run);

/* True when the step runs a reference model's forward: DPO and KTO without
 * precompute_ref_log_probs. */
bool est_rl_reference_forward(const est_run *run);

/* True when the reference is a model of its own (a full fine-tune: a frozen
 * copy); under LoRA it is the policy with its adapters disabled. */
bool est_rl_reference_copy(const est_run *run);

/* Trainable elements of the modules_to_save copies (V x h each). */
int64_t est_save_params(const est_run *run);

/* One line saying what of the above the run does ("" when none): the
 * objective, its rows and reference, packing, the checkpoint's kind. */
const char *est_objective_describe(const est_run *run, char *buf, size_t n);

/* The settings above against the rest of the run: 0, or -1 with one line. */
int est_objective_validate(const est_run *run, char *err, size_t errlen);

#endif
