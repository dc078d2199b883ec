/* `ftest check`: estimate every measured record and compare (CI regression of
 * estimate vs measured). */
#ifndef EST_CHECK_H
#define EST_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "gpu.h"

typedef struct est_check_totals {
    size_t records;   /* records read */
    size_t failed;    /* outside their tolerance */
    size_t errors;    /* lines that could not be parsed or estimated */
} est_check_totals;

typedef struct est_check_options {
    bool quiet;       /* only failures and the group summary */
    bool markdown;    /* tables for docs/validation.md (sampled rows, group summary) */
} est_check_options;

/* Checks every line of one JSON Lines file, printing per-record lines and a
 * per-group summary to `out`. Unreadable files are an error (-1); bad lines are
 * counted in totals->errors and reported. */
int est_check_file(const char *path, const est_gpu_catalog *cat, const est_check_options *opt,
                   FILE *out, est_check_totals *totals, char *err, size_t errlen);

#endif
