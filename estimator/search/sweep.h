/* `ftest sweep`: one run estimated along a range of sequence lengths or
 * micro-batch sizes, every other option fixed. A table (per-GPU peak per
 * category, step time, tokens/s), CSV, and an SVG chart with the measured
 * points of matching records overlaid. */
#ifndef EST_SWEEP_H
#define EST_SWEEP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "gpu.h"
#include "progress.h"
#include "run.h"
#include "timeline.h"

typedef enum { EST_SWEEP_SEQ, EST_SWEEP_BATCH } est_sweep_var;

/* An integer range "start:stop[:step]" (inclusive). */
typedef struct est_range {
    int64_t start, stop, step;
} est_range;

typedef struct est_sweep_point {
    int64_t x;                        /* the swept value */
    bool valid;                       /* false when this value cannot be estimated */
    char why[96];
    int64_t at_peak[EST_CAT_COUNT];   /* breakdown at the peak (context, allocator included) */
    int64_t peak_allocated_bytes;
    int64_t device_used_bytes;
    bool fits;
    bool tight;                       /* fits, with less room than the run's tight margin */
    char peak_label[48];
    double step_time_s, tokens_per_s, it_per_s, mfu;
} est_sweep_point;

typedef struct est_sweep {
    est_sweep_var var;
    est_run base;
    int64_t capacity_bytes;
    est_sweep_point *pts;
    size_t n;
} est_sweep;

/* A measured point from a record matching the sweep. */
typedef struct est_sweep_measured {
    int64_t x;
    int64_t peak_bytes;               /* allocator peak (allocated, else active) */
    bool oom;
    double it_per_s;                  /* NAN when not measured */
} est_sweep_measured;

/* Estimates `base` at every value of `r` (start..stop by step, stop included).
 * Values that cannot be estimated (a sequence above the model's maximum) are
 * kept as invalid points. Returns 0, or -1 with a message (the range is empty
 * or the base run is invalid). `prog` may be NULL. */
int est_sweep_run(const est_run *base, est_sweep_var var, est_range r, est_progress *prog,
                  est_sweep *out, char *err, size_t errlen);
void est_sweep_free(est_sweep *s);

/* Index of the last point that fits before the first that does not; -1 when
 * none fits, n-1 when all do. */
long est_sweep_last_fit(const est_sweep *s);

/* The table, as text. */
void est_sweep_print(FILE *out, const est_sweep *s);
/* CSV with a header line. 0, or -1 on a write error. */
int est_sweep_csv(FILE *out, const est_sweep *s);

/* Reads `path` and keeps the records of the same model, GPU, framework,
 * precision, strategy and GPU count whose other variable equals the base's
 * (the batch of a sequence sweep, the sequence of a batch sweep) and whose
 * swept value lies in the range. *out is malloc'ed; caller frees. */
int est_sweep_measured_points(const est_sweep *s, const char *path, const est_gpu_catalog *cat,
                              est_sweep_measured **out, size_t *n, char *err, size_t errlen);

/* The SVG chart (svg.h), measured points optional. */
int est_sweep_svg(const char *path, const est_sweep *s, const est_sweep_measured *m, size_t nm,
                  char *err, size_t errlen);

#endif
