/* What ftest does with each key of a torchtune recipe config (--torchtune;
 * torchtune v0.6.1, git tag v0.6.1: what recipes/full_finetune_distributed.py,
 * lora_finetune_distributed.py, full_finetune_single_device.py and
 * lora_finetune_single_device.py read from `cfg`, and the keyword arguments of
 * the model builders in torchtune/models/<family>/_model_builders.py). Every
 * key is one of: read (torchtune.c applies it), inert (no byte or second of
 * the step depends on it, with the reason), or refused at any value but the
 * recipe's default, with one line naming the key. A key outside the table is
 * refused: ftest cannot say what it does. One table, in torchtune_keys.c; the
 * docs (docs/usage.md, "A torchtune config") list it. */
#ifndef EST_TORCHTUNE_KEYS_H
#define EST_TORCHTUNE_KEYS_H

#include <stdbool.h>
#include <stddef.h>

#include <cJSON.h>

/* The torchtune release whose recipes the table follows. */
#define EST_TORCHTUNE_VERSION "0.6.1"

/* 0 when every key of the file (top level, and model:, tokenizer:,
 * dataset:, optimizer:, loss: ...) is read, inert, or refused-unless-default
 * at its default; -1 with one line naming the first key that is not. */
int est_torchtune_keys_check(const cJSON *root, char *err, size_t errlen);

/* The table's i-th entry (NULL past the end): the section ("" for the top
 * level), its kind ("read", "inert" or "default only") and why. */
const char *est_torchtune_key_at(size_t i, const char **section, const char **kind, const char **why);

#endif
