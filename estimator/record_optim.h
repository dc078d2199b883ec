/* The record config keys that say which implementation of torch's AdamW a
 * run used (docs/records.md; est_run.adamw_impl, optimizers.h):
 *   adamw_impl        "foreach" | "fused"
 *   optim             the HF Trainer's TrainingArguments.optim: "adamw_torch"
 *                     (foreach) or "adamw_torch_fused" (fused)
 *   settings.optimizer_foreach   true: the CPU traces' AdamW(foreach=True)
 *   probe_mode        "hf", "lora", "qlora", "deepspeed": the probe's Trainer
 *                     was given optim "adamw_torch" (calibrate/probes/
 *                     probe_run.py HF_OPTIM, training_args); "fsdp", "fsdp2":
 *                     its own loop's torch.optim.AdamW(params), foreach
 * None of them: the default of the run's loop and stack. */
#ifndef EST_RECORD_OPTIM_H
#define EST_RECORD_OPTIM_H

#include <stddef.h>

#include <cJSON.h>

#include "run_desc.h"

/* Reads those keys of `cfg` into run->adamw_impl. 0, or -1 with one line. */
int est_record_adamw_impl(const cJSON *cfg, est_run *run, char *err, size_t errlen);

#endif
