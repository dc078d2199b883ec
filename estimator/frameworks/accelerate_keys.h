/* What ftest does with each key of accelerate's config YAML (--accelerate-config;
 * accelerate 1.15.0 commands/config/config_args.py ClusterConfig, the
 * questionnaire in commands/config/cluster.py, and what commands/launch.py and
 * utils/launch.py pass on to FullyShardedDataParallelPlugin, DeepSpeedPlugin,
 * DynamoPlugin and ParallelismConfig). Every key is one of: read
 * (accelerate_config.c applies it), inert (it changes no byte or second of the
 * step), dropped (accelerate launch never passes it on), or refused at a value
 * ftest does not model, with one line naming every such key of the file. A
 * top-level key outside ClusterConfig is refused, as accelerate refuses it
 * ("had unknown keys"); one under fsdp_config that launch does not read is
 * dropped by accelerate and listed as ignored. One table, in
 * accelerate_keys.c: the docs (docs/usage.md, "An accelerate config") list it. */
#ifndef EST_ACCELERATE_KEYS_H
#define EST_ACCELERATE_KEYS_H

#include <stdbool.h>
#include <stddef.h>

#include <cJSON.h>

/* The accelerate release whose config the table follows. */
#define EST_ACCELERATE_VERSION "1.15.0"

/* -1 with "not modelled (accelerate 1.15.0): FEATURE (key: value); ..." or
 * the unknown top-level keys in err, else 0. */
int est_accelerate_refused(const cJSON *root, char *err, size_t errlen);

/* Appends to `ignored` ("a, b", bounded by n) the keys of the file that are
 * inert or that accelerate drops, each as section.key. */
void est_accelerate_unused(const cJSON *root, char *ignored, size_t n);

/* The mapping `section` ("" for the top level) of the file, or NULL. */
const cJSON *est_accelerate_section(const cJSON *root, const char *section);

/* An fsdp_config setting by its full name ("fsdp_offload_params"), also
 * when written without the prefix, which accelerate launch adds
 * (commands/launch.py _validate_launch_command). NULL when absent or null. */
const cJSON *est_accelerate_fsdp_item(const cJSON *fsdp, const char *name);

/* The table's i-th key (NULL past the end): its section ("" for the top
 * level) and whether ftest reads it or refuses some value of it (what the
 * docs must name: tests/accelerate.c checks docs/usage.md does). */
const char *est_accelerate_key_at(size_t i, const char **section, bool *read_or_refused);

/* dynamo_config's dynamo_backend, or the old top-level dynamo_backend; NULL when absent. */
const cJSON *est_accelerate_dynamo_backend(const cJSON *root);

#endif
