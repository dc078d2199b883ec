/* Whole numbers as every ftest option reads them (whole_number.h). */
#include "whole_number.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "json_util.h"

/* "2k" or "1M": a whole number with a size suffix, which whole-number options
 * refuse, since k may mean 1000 or 1024 (a "2k" sequence is 2048 tokens, "1k"
 * steps are 1000): both readings into hint. False when s is not of that form. */
static bool suffix_hint(const char *s, char *hint, size_t n) {
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (end == s || v <= 0 || v > 1000000 || !end[0] || end[1]) return false;
    int c = toupper((unsigned char)end[0]);
    if (c != 'K' && c != 'M') return false;
    long long bin = c == 'K' ? 1024 : 1048576, dec = c == 'K' ? 1000 : 1000000;
    snprintf(hint, n, " (whole numbers take no size suffix); did you mean %lld (%lld x %lld) or %lld?", v * bin,
             v, bin, v * dec);
    return true;
}

int est_parse_int(const char *opt, const char *s, int64_t min, int64_t max, int64_t *out,
                  char *err, size_t errlen) {
    if (!s || !*s) return ft_errorf(err, errlen, "%s needs a value", opt);
    char hint[128] = "";
    for (const char *c = s; *c; c++)
        if (!isdigit((unsigned char)*c) && !(c == s && *c == '-')) {
            suffix_hint(s, hint, sizeof hint);
            return ft_errorf(err, errlen, "%s: \"%.40s\" is not a whole number%s", opt, s, hint);
        }
    errno = 0;
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end) /* "-" alone */
        return ft_errorf(err, errlen, "%s: \"%.40s\" is not a whole number", opt, s);
    if (errno == ERANGE || v < min || v > max)
        return ft_errorf(err, errlen, "%s must be between %lld and %lld (got %.40s)", opt,
                         (long long)min, (long long)max, s);
    *out = v;
    return 0;
}

int est_split_range(const char *opt, const char *s, char *buf, char *parts[3], char *err, size_t errlen) {
    parts[0] = buf;
    parts[1] = parts[2] = NULL;
    int n = 1;
    for (char *c = buf; *c; c++)
        if (*c == ':') {
            if (n == 3) return ft_errorf(err, errlen, "%s: \"%.40s\" is not START:STOP[:STEP]", opt, s);
            *c = '\0';
            parts[n++] = c + 1;
        }
    return n;
}
