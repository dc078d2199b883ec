/* axolotl's training YAML (--axolotl FILE), the settings that change memory:
 * base_model, adapter (lora/qlora), lora_r, lora_alpha, lora_dropout,
 * lora_target_modules / lora_target_linear, load_in_4bit / load_in_8bit,
 * sequence_len, micro_batch_size, gradient_accumulation_steps, optimizer,
 * gradient_checkpointing, bf16 / fp16, flash_attention / sdp_attention,
 * deepspeed, fsdp / fsdp_config. Keys are those of axolotl's config schema
 * (axolotl 0.4-0.5 docs/config.qmd); other keys change no byte and are read
 * past. Flags given on the command line win. */
#ifndef EST_AXOLOTL_H
#define EST_AXOLOTL_H

#include <stddef.h>

#include <cJSON.h>

#include "run_given.h"
#include "run.h"

/* Reads and parses the YAML file. NULL with one line on failure. */
cJSON *est_axolotl_load(const char *path, char *err, size_t errlen);

/* The model base_model names: a shipped model whose hf_repo is base_model
 * (case-insensitive), or a local folder holding config.json (as given, or
 * relative to the YAML's folder). 0 with `out` set, 1 when the file has no
 * base_model, -1 with one line. */
int est_axolotl_model(const cJSON *root, const char *yaml_path, char *out, size_t outlen,
                      char *err, size_t errlen);

/* Applies the file's settings to `run` (model already set), except those
 * `given` says the user gave (a flag wins over the file). `used` gets "key,
 * key, ..." of what was applied, for the output. A DeepSpeed config named
 * by the file is loaded unless one was given (given->ds_config). 0 or -1 with
 * one line. */
int est_axolotl_apply(const cJSON *root, const char *yaml_path, const est_given *given, est_run *run,
                      char *used, size_t usedlen, char *err, size_t errlen);

#endif
