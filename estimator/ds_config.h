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

/* Reads the file and applies it. */
int est_ds_config_load(const char *path, est_run *run, char *err, size_t errlen);

#endif
