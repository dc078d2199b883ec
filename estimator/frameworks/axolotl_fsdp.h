/* FSDP from an axolotl YAML (fsdp, fsdp_config, fsdp_version), as axolotl
 * 0.18.0 hands them to accelerate and Transformers. */
#ifndef EST_AXOLOTL_FSDP_H
#define EST_AXOLOTL_FSDP_H

#include <stddef.h>

#include <cJSON.h>

#include "run_given.h"
#include "run.h"

/* Sets the FSDP framework, version, sharding, parameter offload and
 * activation checkpointing, except what `given` says the user gave. 0 or -1
 * with one line. */
int est_axolotl_fsdp(const cJSON *root, const est_given *given, est_run *run, char *err, size_t errlen);

#endif
