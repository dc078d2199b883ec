/* torchtune's recipe configs (--torchtune FILE, torchtune v0.6.1). A config
 * does not name its recipe: `tune run RECIPE --config FILE` does. The recipe
 * is given (--torchtune-recipe) or read off the config's file name as
 * torchtune/_recipe_registry.py pairs them (8B_full.yaml with
 * full_finetune_distributed, 8B_lora_single_device.yaml with
 * lora_finetune_single_device, ...). The distributed recipes shard with FSDP2
 * (training/_distributed.py shard_model: fully_shard on every decoder layer,
 * then the root), in pure bf16 (no MixedPrecisionPolicy: the model is built
 * under set_default_dtype(dtype)), LoRA adapters in the same dtype inside
 * their layer's unit; the single-device ones train the bf16 model on one GPU.
 * Every key is read, inert or refused (torchtune_keys.c). Flags given too win. */
#ifndef EST_TORCHTUNE_H
#define EST_TORCHTUNE_H

#include <stddef.h>

#include <cJSON.h>

#include "run.h"
#include "run_given.h"

typedef enum {
    EST_TT_FULL_DISTRIBUTED, EST_TT_LORA_DISTRIBUTED, EST_TT_FULL_SINGLE, EST_TT_LORA_SINGLE
} est_tt_recipe;

/* The recipe's name in torchtune (full_finetune_distributed, ...). */
const char *est_torchtune_recipe_name(est_tt_recipe r);

/* Reads the YAML and checks every key (torchtune_keys.h). NULL with one line. */
cJSON *est_torchtune_load(const char *path, char *err, size_t errlen);

/* The recipe: `name` when given (one of the four recipes above), else from
 * the file name of `path`. 0, or -1 with one line. */
int est_torchtune_recipe(const char *path, const char *name, est_tt_recipe *out, char *err, size_t errlen);

/* The shipped model (models/NAME.json) model._component_ builds, in out. 0, or
 * -1 with one line (a builder ftest has no model for: pass --model). */
int est_torchtune_model(const cJSON *root, char *out, size_t outlen, char *err, size_t errlen);

/* Applies the config to `run` (model already set) under `recipe`, except
 * what `given` says the flags give. `used` gets the keys applied. 0 or -1. */
int est_torchtune_apply(const cJSON *root, est_tt_recipe recipe, const est_given *given, est_run *run,
                        char *used, size_t usedlen, char *err, size_t errlen);

#endif
