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
    size_t partial;   /* window records of ftrain runs ("final": false), not compared */
    size_t unmodelled; /* cpu-trace records of runs the estimator refuses (printed, not errors) */
    size_t not_expressible; /* runs ftest cannot express yet (record_features.h), not compared */
} est_check_totals;

typedef struct est_check_options {
    bool quiet;       /* only failures and the group summary */
    bool markdown;    /* tables for docs/validation.md (sampled rows, group summary) */
    FILE *diag;       /* where unreadable records are reported; NULL = stderr */
} est_check_options;

/* Checks every line of one JSON Lines file, printing per-record lines and a
 * per-group summary to `out`. Unreadable files, and files holding no record
 * (empty or blank), are an error (-1); bad lines (invalid JSON, a NUL byte, an
 * unknown model...) are counted in totals->errors and reported on opt->diag,
 * and the lines after them are still checked. A record's config.model may
 * name a file only under the record file's directory (est_record_parse_at). */
int est_check_file(const char *path, const est_gpu_catalog *cat, const est_check_options *opt,
                   FILE *out, est_check_totals *totals, char *err, size_t errlen);

#endif
