/* YAML to cJSON with libyaml's event parser, for the training YAML files users
 * already have (axolotl). Mappings become objects, sequences arrays, plain
 * scalars numbers, booleans or null where YAML 1.2's core schema says so, and
 * every other scalar a string. A file is untrusted: bounded size and depth,
 * no aliases (no billion-laughs expansion), one document. */
#ifndef EST_YAML_JSON_H
#define EST_YAML_JSON_H

#include <stddef.h>

#include <cJSON.h>

#define EST_YAML_MAX_BYTES ((size_t)1 << 20)
#define EST_YAML_MAX_DEPTH 32

/* Parses text (len bytes; `name` labels messages). Returns a new cJSON tree
 * the caller deletes, or NULL with one line in err. */
cJSON *est_yaml_parse(const char *text, size_t len, const char *name, char *err, size_t errlen);

/* Reads a YAML file (at most EST_YAML_MAX_BYTES) and parses it. */
cJSON *est_yaml_load(const char *path, char *err, size_t errlen);

#endif
