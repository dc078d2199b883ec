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
} est_record;

/* The allocator peak the estimate is compared with: allocated, else active. */
int64_t est_record_peak(const est_rank_measure *r);

/* Parses one JSON line. `cat` resolves hardware.gpu ("cpu" needs no entry).
 * Model names and paths are resolved against the data root. */
int est_record_parse(const char *line, size_t len, const est_gpu_catalog *cat, est_record *rec,
                     char *err, size_t errlen);
void est_record_free(est_record *rec);

#endif
