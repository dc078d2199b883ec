/* Reading measurement records (ftest.record/1, docs/records.md) into a run
 * description and what was measured. */
#ifndef EST_RECORD_H
#define EST_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu.h"
#include "run.h"
#include "timeline.h"

typedef struct est_rank_measure {
    int64_t rank;
    int64_t peak_allocated_bytes;  /* -1 when not recorded */
    int64_t peak_active_bytes;     /* -1 when not recorded */
    int64_t peak_reserved_bytes;   /* -1 when not recorded */
    int64_t device_used_bytes;     /* -1 when not recorded */
    char peak_phase[48];
    bool has_categories;
    int64_t at_peak[EST_CAT_ALLOCATED_COUNT];
    int64_t category_peak[EST_CAT_ALLOCATED_COUNT];
} est_rank_measure;

typedef struct est_record {
    est_run run;
    char source[200];
    char framework[16];
    bool oom;
    est_rank_measure *ranks;
    size_t rank_count;
    int64_t cpu_peak_bytes;        /* host arena peak (ftrain offload), -1 if absent */
    double step_time_s, tokens_per_s, it_per_s; /* NAN when absent */
    double tol_peak_rel;           /* NAN when absent */
    double tol_category_abs_bytes; /* NAN when absent */
    double tol_it_per_s_rel;       /* NAN when absent */
    bool final;                    /* false: a window record of a run still going (ftrain) */
    char not_expressible[200];     /* what the run used that ftest cannot express yet
                                      (record_features.h); "" when it can */
} est_record;

/* The allocator peak the estimate is compared with: allocated, else active;
 * -1 for a rank that recorded its reserved peak only. */
int64_t est_record_peak(const est_rank_measure *r);

/* Parses one JSON line. `cat` resolves hardware.gpu ("cpu" needs no entry).
 * config.model names a shipped model (models/NAME.json) or, when `base_dir`
 * is given, a relative path under base_dir (the record file's directory):
 * absolute paths, ".." and symbolic links leading out are refused, so a record
 * never makes ftest open a file outside its own folder. */
int est_record_parse_at(const char *line, size_t len, const est_gpu_catalog *cat, const char *base_dir,
                        est_record *rec, char *err, size_t errlen);
/* The same with no base directory: shipped model names (or an inline config) only. */
int est_record_parse(const char *line, size_t len, const est_gpu_catalog *cat, est_record *rec,
                     char *err, size_t errlen);
/* The directory of a record file's path into buf ("." when it has none). */
const char *est_record_dir(const char *path, char *buf, size_t n);
void est_record_free(est_record *rec);

#endif
