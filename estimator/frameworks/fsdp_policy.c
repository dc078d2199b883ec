#include "fsdp_policy.h"

#include <ctype.h>
#include <string.h>

#include "json_util.h"

/* Index = enum value (the enums are append-only). */
static const char *const VERSION_NAMES[] = {"1", "2"};
static const char *const LOAD_NAMES[] = {"fp32", "bf16"};
static const char *const REDUCE_NAMES[] = {"param", "fp32"};
static const char *const PREFETCH_NAMES[] = {"none", "pre", "post"};

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const char *name_of(const char *const *names, int n, int v) {
    return (v >= 0 && v < n) ? names[v] : "?";
}

const char *est_fsdp_version_name(est_fsdp_version v) {
    return name_of(VERSION_NAMES, COUNT(VERSION_NAMES), (int)v);
}
const char *est_load_dtype_name(est_load_dtype d) {
    return name_of(LOAD_NAMES, COUNT(LOAD_NAMES), (int)d);
}
const char *est_reduce_dtype_name(est_reduce_dtype d) {
    return name_of(REDUCE_NAMES, COUNT(REDUCE_NAMES), (int)d);
}
const char *est_fsdp_prefetch_name(est_fsdp_prefetch p) {
    return name_of(PREFETCH_NAMES, COUNT(PREFETCH_NAMES), (int)p);
}

int est_fsdp_version_parse(const char *s, est_fsdp_version *out, char *err, size_t errlen) {
    int v;
    if (ft_parse_choice("--fsdp-version", VERSION_NAMES, COUNT(VERSION_NAMES), s, &v, err, errlen) < 0)
        return -1;
    *out = (est_fsdp_version)v;
    return 0;
}
int est_load_dtype_parse(const char *s, est_load_dtype *out, char *err, size_t errlen) {
    int v;
    if (ft_parse_choice("--load-dtype", LOAD_NAMES, COUNT(LOAD_NAMES), s, &v, err, errlen) < 0)
        return -1;
    *out = (est_load_dtype)v;
    return 0;
}
int est_reduce_dtype_parse(const char *s, est_reduce_dtype *out, char *err, size_t errlen) {
    int v;
    if (ft_parse_choice("--fsdp-reduce-dtype", REDUCE_NAMES, COUNT(REDUCE_NAMES), s, &v, err, errlen) < 0)
        return -1;
    *out = (est_reduce_dtype)v;
    return 0;
}

int est_fsdp_prefetch_parse(const char *s, est_fsdp_prefetch *out, char *err, size_t errlen) {
    char low[32] = "";
    for (size_t i = 0; s && s[i] && i + 1 < sizeof low; i++) low[i] = (char)tolower((unsigned char)s[i]);
    const char *name = !strcmp(low, "no_prefetch") ? "none"
                       : !strncmp(low, "backward_", 9) ? low + 9
                                                       : low;
    int v;
    if (ft_parse_choice("--fsdp-backward-prefetch", PREFETCH_NAMES, COUNT(PREFETCH_NAMES), name, &v, err,
                        errlen) < 0)
        return -1;
    *out = (est_fsdp_prefetch)v;
    return 0;
}
