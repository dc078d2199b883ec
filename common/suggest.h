/* "Did you mean ...?": the names closest to a misspelt one, shared by every
 * place a user names something from a list (models, GPUs, options, commands).
 * Part of libftcommon: the model reader (model_config.c) uses it too. */
#ifndef FT_SUGGEST_H
#define FT_SUGGEST_H

#include <stddef.h>

#define FT_SUGGEST_MAX 3 /* names offered at most */

/* Writes to `out` up to FT_SUGGEST_MAX names from `names` close to `query`,
 * closest first, joined as "a, b or c"; "" when none is close. Close means:
 * the name starts with the query or contains it (a100 -> a100-40gb), or is
 * within a third of the query's length in edits (case-insensitive Levenshtein:
 * llama-8b -> llama3-8b). When some names start with the query, only those are
 * offered (fp16 -> fp16-mixed, not bf16). Returns how many were written. */
size_t ft_suggest_close(const char *query, const char *const *names, size_t n, char *out,
                        size_t outlen);

/* Case-insensitive Levenshtein distance, each side capped at 64 characters. */
int ft_edit_distance(const char *a, const char *b);

#endif
