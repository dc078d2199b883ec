/* What ftest does with each top-level key of an axolotl YAML (axolotl 0.18.0,
 * src/axolotl/utils/schemas/: AxolotlInputConfig and its mixins, and the
 * plugins' args.py): a key is honoured (axolotl.c reads it), ignored (it
 * changes no byte or second of the training step: logging, data preparation,
 * learning rates, saving), or names a mechanism ftest does not model yet, in
 * which case the estimate is refused with one line naming every such feature.
 * A key outside the table is listed as not known, never dropped silently. */
#ifndef EST_AXOLOTL_KEYS_H
#define EST_AXOLOTL_KEYS_H

#include <stdbool.h>
#include <stddef.h>

#include <cJSON.h>

/* The axolotl release whose schema the tables follow. */
#define EST_AXOLOTL_VERSION "0.18.0"

/* -1 with "not modelled: FEATURE (key: value); FEATURE (...)" in err when the
 * file sets a mechanism ftest does not model (the table in axolotl_keys.c),
 * else 0. Runs on the YAML alone, before the model is loaded. */
int est_axolotl_unmodelled(const cJSON *root, char *err, size_t errlen);

/* Fills `ignored` with the keys that change nothing ftest estimates and
 * `unknown` with those outside its tables, each "a, b, c" ("" when none);
 * keys set to null set nothing and are not listed. */
void est_axolotl_unused(const cJSON *root, char *ignored, size_t ignoredlen, char *unknown,
                        size_t unknownlen);

/* True when axolotl.c reads `key` (or the unmodelled table names it and its
 * value is one ftest models). */
bool est_axolotl_key_honoured(const char *key);

/* True when the unmodelled table checks `key` (whatever its value). */
bool est_axolotl_key_checked(const char *key);

/* Appends ", key" to a list of applied settings (", ..." once full). */
void est_axolotl_note(char *used, size_t n, const char *key);

#endif
