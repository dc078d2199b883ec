/* What ftest does with every key of a DeepSpeed config, at the DeepSpeed
 * versions of its stacks (0.14.2, 0.16.4, 0.19.8: deepspeed/runtime/config.py,
 * constants.py, zero/config.py, zero/offload_config.py, precision_config.py,
 * activation_checkpointing/config.py). One table (ds_keys.c) classes each key:
 *   modelled   ds_config.c reads it and the estimate follows it;
 *   no effect  it changes no byte or second of what ftest estimates (logging,
 *              schedules, saving, NVMe-only sizes);
 *   refused    it changes memory or time in a way ftest does not model: the
 *              config is refused with one line naming the key and the
 *              mechanism, but only when its value differs from DeepSpeed's
 *              default (a config that spells out the default is accepted);
 *   section    an object whose own keys are in the table.
 * A key outside the table inside a section DeepSpeed validates strictly
 * (pydantic extra="forbid": zero_optimization and its offload sections at
 * every version, fp16/bf16 from 0.19.8, compile at 0.14.2 and 0.19.8) is
 * refused as DeepSpeed refuses it;
 * elsewhere DeepSpeed never reads it, and the report says so. docs/usage.md
 * ("DeepSpeed config keys") prints the same table. */
#ifndef EST_DS_KEYS_H
#define EST_DS_KEYS_H

#include <stdbool.h>
#include <stddef.h>

#include <cJSON.h>

typedef enum { EST_DSK_MODELLED, EST_DSK_NO_EFFECT, EST_DSK_REFUSED, EST_DSK_SECTION } est_ds_key_class;

typedef struct {
    const char *section; /* "" for the top level, else the dotted path of the object */
    const char *key;
    const char *alias;   /* DeepSpeed's other accepted name (pydantic alias), or NULL */
    est_ds_key_class cls;
    /* refused: DeepSpeed's default as JSON ("false", "1", "null"), or
     * "@disabled" (an object whose "enabled" is not true) */
    const char *deflt;
    const char *what;    /* refused: the mechanism; no effect: why */
    const char *since;   /* first DeepSpeed version that knows it (NULL: all of ftest's) */
    const char *removed; /* version whose DeepSpeed refuses it (NULL: none) */
    const char *until;   /* last version that knows it (NULL: all from `since`) */
} est_ds_key;

/* The table and its length. */
const est_ds_key *est_ds_keys(size_t *count);

/* Checks every key of a parsed config against the table for DeepSpeed
 * `version` ("0.16.4"; "-" or NULL: the newest of ftest's stacks). Returns -1
 * with one line ("not modelled: zero_optimization.zero_quantized_weights
 * (ZeRO++ qwZ)") on the first refused key, else 0; `unread` (may be NULL)
 * gets "a, b" of keys DeepSpeed does not read at that version. */
int est_ds_keys_check(const cJSON *root, const char *version, char *unread, size_t unreadlen, char *err,
                      size_t errlen);

/* The modelled keys the config sets, by their dotted names as the file
 * spells them ("bf16, train_batch_size, zero_optimization.stage"), into
 * out[n]; a list that does not fit ends at a whole key with "(+N more)".
 * Returns how many keys it found. */
size_t est_ds_keys_modelled(const cJSON *root, char *out, size_t n);

/* The value of `key` in a section object, under either of its names (the
 * table's alias); NULL when absent or JSON null. */
const cJSON *est_ds_key_get(const cJSON *section_obj, const char *section, const char *key);

/* A string from the file as it can appear on one line of output, into
 * buf[n] (n >= 8): control bytes become '?', a long one ends in "...". */
const char *est_ds_printable(const char *s, char *buf, size_t n);

#endif
