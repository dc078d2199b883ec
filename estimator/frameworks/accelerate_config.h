/* accelerate's config YAML (--accelerate-config FILE, what `accelerate config`
 * writes, accelerate 0.28-1.15): distributed_type, num_processes,
 * num_machines, mixed_precision, fsdp_config (version, sharding, offload,
 * activation checkpointing, loading, units, prefetch), deepspeed_config (a
 * config file, or zero_stage, offload devices and zero3_init_flag) and
 * dynamo_config (torch.compile). Every key is in accelerate_keys.c's table:
 * read here, inert, or refused in one line. Flags given as well win. */
#ifndef EST_ACCELERATE_CONFIG_H
#define EST_ACCELERATE_CONFIG_H

#include <stddef.h>

#include <cJSON.h>

#include "run_given.h"
#include "run.h"

/* Applies the file's settings to `run` except those `given` says the user
 * gave; `used` gets the keys applied. 0 or -1 with one line. */
int est_accelerate_apply(const cJSON *root, const char *yaml_path, const est_given *given, est_run *run,
                         char *used, size_t usedlen, char *err, size_t errlen);

#endif
