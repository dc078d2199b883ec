/* Small, strict helpers over cJSON and files, shared by estimator and trainer.
 *
 * Every reader here validates what it returns: a field that is present must
 * have the right type and a finite, integral (where asked) value in range, so
 * callers never see NaN, a silently truncated double or a negative size. */
#ifndef FT_JSON_UTIL_H
#define FT_JSON_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>

#include "str_util.h" /* ft_errorf, ft_strlcpy: every user of these readers needs them */

/* Reads a whole file into a NUL-terminated heap buffer; refuses files larger
 * than max_bytes. Returns NULL with a message on failure. Caller frees. */
char *ft_read_file(const char *path, size_t max_bytes, size_t *len_out, char *err, size_t errlen);

/* Cuts the line that starts at `line` in a buffer ending at `end` (*end must be
 * writable, as ft_read_file's NUL is): puts a NUL where its '\n' was (or at end),
 * sets *next to the line after it, returns the line's length. Lines are split by
 * length, not by NUL, so a NUL byte inside a line stays visible to the caller. */
size_t ft_cut_line(char *line, char *end, char **next);

/* What a parse does with a key that an object holds twice. */
typedef enum {
    /* The last value wins, as in Python's json (json.load, and so Transformers'
     * from_pretrained, the HF Trainer and accelerate): earlier ones are removed. */
    FT_JSON_LAST_WINS,
    /* Refused, naming the key (dotted path): where the tools that read the file
     * disagree on which value counts (DeepSpeed configs, ds_config.c). */
    FT_JSON_REFUSE_DUPLICATES,
} ft_json_duplicates;

/* Parses JSON text; on failure the message names `what` and the byte offset,
 * or says the nesting is deeper than cJSON reads. Duplicate keys: the last
 * wins (ft_json_parse) or, with ft_json_parse_opts, per `policy`. */
cJSON *ft_json_parse(const char *text, size_t len, const char *what, char *err, size_t errlen);
cJSON *ft_json_parse_opts(const char *text, size_t len, const char *what, ft_json_duplicates policy,
                          char *err, size_t errlen);

/* Field readers. Return 1 when the field was read, 0 when it is absent (or JSON
 * null) and *out is untouched, -1 (with message) when it is present but invalid. */
int ft_json_int64(const cJSON *obj, const char *key, int64_t min, int64_t max, int64_t *out,
                  char *err, size_t errlen);
int ft_json_double(const cJSON *obj, const char *key, double min, double max, double *out,
                   char *err, size_t errlen);
int ft_json_bool(const cJSON *obj, const char *key, bool *out, char *err, size_t errlen);
/* Copies a string field into out (size outlen); too long is an error. */
int ft_json_string(const cJSON *obj, const char *key, char *out, size_t outlen, char *err,
                   size_t errlen);

/* Finds `s` among `names` (exact match) and sets *out to its index; otherwise
 * returns -1 with "WHAT must be one of a|b|c (got "s")". */
int ft_parse_choice(const char *what, const char *const *names, int n, const char *s, int *out,
                    char *err, size_t errlen);

#endif
