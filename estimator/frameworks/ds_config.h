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
 * set: "auto" sizes derive from the hidden size). Every key is checked
 * against ds_keys.c's table for the run's DeepSpeed version: a key that
 * changes memory or time in a way ftest does not model, set to a value other
 * than DeepSpeed's default, is refused ("not modelled: KEY (mechanism)"), as
 * is a malformed or contradictory one or one DeepSpeed itself refuses. */
int est_ds_config_apply(const char *text, size_t len, est_run *run, char *err, size_t errlen);

/* After the flags: a numeric train_batch_size must equal micro-batch x
 * accumulation x world size, as DeepSpeed asserts; without a numeric
 * gradient_accumulation_steps (and no --grad-accum, `accum_flag`) the
 * accumulation is derived from it. 0 or -1 with one line. */
int est_ds_config_resolve(est_run *run, bool accum_flag, char *err, size_t errlen);

/* Reads the file and applies it. */
int est_ds_config_load(const char *path, est_run *run, char *err, size_t errlen);
/* The same, listing the modelled keys the file sets ("train_batch_size,
 * bf16, zero_optimization.stage, zero_optimization.overlap_comm", ending at a key with
 * "(+N more)" when usedlen is short) and any keys DeepSpeed does not read
 * ("; not read by DeepSpeed 0.16.4: a, b") into used[usedlen], for the
 * report's "from FILE:" line. */
int est_ds_config_load_noted(const char *path, est_run *run, char *used, size_t usedlen, char *err,
                             size_t errlen);

#endif
