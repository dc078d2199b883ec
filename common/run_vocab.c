#include "run_vocab.h"

#include <string.h>

#include "json_util.h"

/* Name tables; index = enum value. */
static const char *const PRECISION_NAMES[] = {"fp32", "bf16-mixed", "fp16-mixed", "bf16"};
static const char *const OFFLOAD_NAMES[] = {"none", "optimizer", "optimizer+params"};
static const char *const CKPT_NAMES[] = {"none", "selective", "full", "selective-op"};
static const char *const ATTENTION_NAMES[] = {"eager", "sdpa", "flash"};
static const char *const LOSS_NAMES[] = {"standard", "chunked", "cce", "chunked-output"};
static const char *const OPTIMIZER_NAMES[] = {"adamw",     "sgd",  "adamw-8bit", "paged-adamw-8bit",
                                              "adafactor", "lion", "sgd-momentum",
                                              "paged-adamw-32bit", "adafactor-beta1",
                                              "adamw-4bit"};

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define MAX_NAMES 32

static const char *name_of(const char *const *names, int n, int v) {
    return (v >= 0 && v < n) ? names[v] : "?";
}

/* Parses s among the names whose bit is in `allowed`; *out is the value's
 * number in the whole table. */
static int parse_among(const char *flag, const char *const *names, int n, uint32_t allowed,
                       const char *who, const char *s, int *out, char *err, size_t errlen) {
    const char *subset[MAX_NAMES];
    int value[MAX_NAMES], m = 0;
    char have[160] = "";
    for (int i = 0; i < n && i < MAX_NAMES; i++) {
        if (!(allowed & FT_VOCAB_BIT(i))) continue;
        if (m) strncat(have, "|", sizeof have - strlen(have) - 1);
        strncat(have, names[i], sizeof have - strlen(have) - 1);
        subset[m] = names[i];
        value[m++] = i;
    }
    for (int i = 0; i < n && s; i++)
        if (!strcmp(s, names[i]) && !(allowed & FT_VOCAB_BIT(i)))
            return ft_errorf(err, errlen, "%s %s is not implemented by %s (it has %s)", flag, s, who,
                             have);
    int k;
    if (ft_parse_choice(flag, subset, m, s, &k, err, errlen) < 0) return -1;
    *out = value[k];
    return 0;
}

#define VOCAB_FNS(fn, type, table, flag)                                                      \
    const char *ft_##fn##_name(type v) { return name_of(table, COUNT(table), (int)v); }       \
    int ft_##fn##_parse(const char *s, type *out, char *err, size_t errlen) {                 \
        int v;                                                                                \
        if (ft_parse_choice(flag, table, COUNT(table), s, &v, err, errlen) < 0) return -1;    \
        *out = (type)v;                                                                       \
        return 0;                                                                             \
    }                                                                                         \
    int ft_##fn##_parse_among(const char *s, uint32_t allowed, const char *who, type *out,    \
                              char *err, size_t errlen) {                                     \
        int v;                                                                                \
        if (parse_among(flag, table, COUNT(table), allowed, who, s, &v, err, errlen) < 0)     \
            return -1;                                                                        \
        *out = (type)v;                                                                       \
        return 0;                                                                             \
    }

VOCAB_FNS(precision, ft_precision, PRECISION_NAMES, "--precision")
VOCAB_FNS(offload, ft_offload, OFFLOAD_NAMES, "--offload")
VOCAB_FNS(checkpointing, ft_checkpointing, CKPT_NAMES, "--checkpointing")
VOCAB_FNS(attention, ft_attention, ATTENTION_NAMES, "--attention")
VOCAB_FNS(loss, ft_loss, LOSS_NAMES, "--loss")
VOCAB_FNS(optimizer, ft_optimizer, OPTIMIZER_NAMES, "--optimizer")
