/* Reading a DeepSpeed config file (--deepspeed-config): the ZeRO stage,
 * offload, precision, batch and the buffer sizes that change memory, with
 * the Transformers integration's meaning of "auto"
 * (transformers/integrations/deepspeed.py, trainer_config_finalize). */
#ifndef EST_DS_CONFIG_H
#define EST_DS_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "run.h"

/* Parses config text and applies what it sets to `run` (whose model must be
 * set: "auto" sizes derive from the hidden size). Keys it does not model are
 * ignored; a malformed or contradictory one is an error. */
int est_ds_config_apply(const char *text, size_t len, est_run *run, char *err, size_t errlen);

/* After the flags: a numeric train_batch_size must equal micro-batch x
 * accumulation x world size, as DeepSpeed asserts; without a numeric
 * gradient_accumulation_steps (and no --grad-accum, `accum_flag`) the
 * accumulation is derived from it. 0 or -1 with one line. */
int est_ds_config_resolve(est_run *run, bool accum_flag, char *err, size_t errlen);

/* Reads the file and applies it. */
int est_ds_config_load(const char *path, est_run *run, char *err, size_t errlen);
/* The same, listing the modelled keys the file sets ("zero_optimization.stage,
 * bf16, ...") into used[usedlen], for the report's "from FILE:" line. */
int est_ds_config_load_noted(const char *path, est_run *run, char *used, size_t usedlen, char *err,
                             size_t errlen);

#endif
