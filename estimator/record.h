/* Reading measurement records (ftest.record/1, docs/records.md) into a run
 * description and what was measured. */
#ifndef EST_RECORD_H
#define EST_RECORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu.h"
#include "record_steps.h"
#include "run.h"
#include "timeline.h"

/* What a cpu-trace record (calibrate/probes/cpu_truth.py, docs/records.md)
 * adds per rank: the live bytes' peak in each phase and at each decoder
 * layer's boundary of the last step. */
#define EST_TRACE_PHASES 4       /* init, forward, backward, optimizer */
#define EST_TRACE_LAYERS_MAX 128
typedef struct est_rank_trace {
    bool present;
    int64_t phase_peak[EST_TRACE_PHASES];             /* -1 when absent */
    int64_t forward_layer[EST_TRACE_LAYERS_MAX];      /* live after block i's forward; -1 absent */
    int64_t backward_layer[EST_TRACE_LAYERS_MAX];     /* live when block i's input gradient is
                                                         ready (its backward done); -1 absent */
    int64_t backward_layer_peak[EST_TRACE_LAYERS_MAX]; /* peak while block i's backward runs;
                                                          -1 absent */
    int32_t layers;                                   /* entries of the two arrays */
} est_rank_trace;

/* "init", "forward", "backward", "optimizer": the phases a trace names. */
extern const char *const est_trace_phase_names[EST_TRACE_PHASES];

typedef struct est_rank_measure {
    int64_t rank;
    int64_t peak_allocated_bytes;  /* -1 when not recorded */
    int64_t peak_active_bytes;     /* -1 when not recorded */
    int64_t peak_reserved_bytes;   /* -1 when not recorded */
    int64_t device_used_bytes;     /* -1 when not recorded */
    int64_t after_step_bytes;      /* allocated after the optimizer step (model states and
                                      what the loop still holds); -1 when not recorded */
    char peak_phase[48];
    bool has_categories;
    int64_t at_peak[EST_CAT_ALLOCATED_COUNT];
    int64_t category_peak[EST_CAT_ALLOCATED_COUNT];
    est_rank_trace trace;          /* cpu-trace records only */
    int32_t memory_steps;          /* entries of memory_by_step (record_steps.h); 0 absent */
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
    double tol_reserved_rel;       /* the largest rank's reserved peak; NAN when absent */
    double tol_after_step_rel;     /* allocated after the step; NAN when absent */
    bool final;                    /* false: a window record of a run still going (ftrain) */
    bool cpu_trace;                /* method "traced without a GPU (cpu-trace)...": the
                                      framework's tensors only (no allocator, context,
                                      workspaces); compared like with like (check_trace.h) */
    bool rank_emulated;            /* method "rank-emulated: ...": one rank of a larger job on a
                                      fake process group, whose collectives return at once */
    char probe_mode[48];           /* config.probe_mode; "" when absent */
    char notes[120];               /* cpu-trace records: the matrix point's name */
    char point[120];               /* GPU-day records: the plan's point id ("probe/hf-w1/..."); "" when absent */
    char repeat_of[120];           /* a repeat at the end of its probe process (--repeat-short):
                                      the point it repeats; "" when absent */
    est_record_steps steps;        /* the per-step keys (record_steps.h) */
    char not_expressible[200];     /* what the run used that ftest cannot express yet
                                      (record_features.h); "" when it can */
} est_record;

/* What one record line may hold, so that no line can take more memory than a
 * bounded buffer and parse tree: a line over EST_RECORD_MAX_LINE_BYTES is not
 * read (readers skip it with ft_line_reader and report its length), one with
 * more than EST_RECORD_MAX_VALUES JSON values is not parsed (cJSON keeps about
 * 80 bytes per value: 1e6 values are about 80 MB). The largest committed
 * record is 2.5 KB with about 300 values. */
#define EST_RECORD_MAX_LINE_BYTES ((size_t)16 << 20)
#define EST_RECORD_MAX_VALUES ((size_t)1000000)

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
