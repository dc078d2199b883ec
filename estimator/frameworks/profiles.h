/* Framework profiles: each emits one training step of a run as events
 * (estimator/ledger/events.h): the buffers that framework keeps, and when, and the
 * work that starts at each moment (work.h). ftrain has its own header
 * (profile_ftrain.h); the PyTorch-based ones are seams on autograd's step
 * (autograd.h: seam_hf.c, seam_deepspeed.c, seam_fsdp.c). */
#ifndef EST_PROFILES_H
#define EST_PROFILES_H

#include <stddef.h>

#include "constants.h"
#include "params.h"
#include "run.h"
#include "events.h"

/* PyTorch + Transformers Trainer, DDP across ranks (no ZeRO). */
int est_step_hf(const est_run *run, const est_constants *k, est_step *st, char *err,
                    size_t errlen);
/* HF Trainer + DeepSpeed ZeRO 0-3 with optional CPU offload. */
int est_step_deepspeed(const est_run *run, const est_constants *k, est_step *st,
                           char *err, size_t errlen);
/* HF Trainer + PyTorch FSDP1 or FSDP2 (NO_SHARD / SHARD_GRAD_OP / FULL_SHARD as
 * ZeRO 0 / 2 / 3), with LoRA / QLoRA adapters too. */
int est_step_fsdp(const est_run *run, const est_constants *k, est_step *st, char *err,
                  size_t errlen);

/* Parameters as PyTorch counts them (tied weights once) for the run's layers. */
void est_run_params(const est_run *run, est_params *p);

/* ceil(n / world): one rank's shard of n elements, as ZeRO and FSDP pad them. */
int64_t est_shard(int64_t n, int64_t world);

#endif
