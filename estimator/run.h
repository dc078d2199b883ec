/* A whole run's defaults and validation. The run description itself (types,
 * names, accessors) is run_desc.h, which this header includes, so every user
 * of est_run can keep including run.h; the feature modules that est_run_defaults
 * and est_run_validate call (lora, quant, optimizers) include run_desc.h only. */
#ifndef EST_RUN_H
#define EST_RUN_H

#include "run_desc.h"

/* A run with the defaults a user gets without flags: 1 GPU, batch 1, seq 2048
 * (clamped to the model's maximum), bf16-mixed, ZeRO 0, no offload, no
 * checkpointing, sdpa attention, standard loss, AdamW, framework deepspeed. */
void est_run_defaults(est_run *run, const ft_model *model, const est_gpu *gpu);

/* Checks ranges and contradictions (ZeRO 3 param offload needs stage 3, seq above
 * the model's maximum, sizes that could overflow). 0 or -1 with one-line message. */
int est_run_validate(const est_run *run, char *err, size_t errlen);

#endif
