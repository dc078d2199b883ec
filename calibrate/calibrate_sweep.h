/* The sweep's internals, shared by calibrate_command.c (the command), calibrate_run.c
 * (the points), calibrate_refine.c (--refine) and calibrate_check.c (fit and
 * check afterwards). Not for other callers:
 * the public face is calibrate.h. */
#ifndef CAL_SWEEP_H
#define CAL_SWEEP_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cJSON.h>

#include "calibrate.h"

#define CAL_MAX_RANKS 64

/* A point already in the files. */
typedef struct cal_done_entry {
    char key[CAL_KEY_MAX];
    bool has_peaks;
    bool refined;              /* added by --refine (calibrate.refined) */
    int nranks;
    int64_t peak[CAL_MAX_RANKS];   /* per rank: allocated, else active */
} cal_done_entry;

typedef struct cal_done_set {
    cal_done_entry *v;
    size_t n, cap;
    int64_t read_to[2];        /* bytes of the records and the outcomes files read so far */
} cal_done_set;

/* Where the sweep's helpers live. */
typedef struct cal_paths {
    char outcomes[1100], claims[1100];  /* FILE.outcomes, FILE.claims */
    char tmp_dir[512];                  /* private scratch folder (calibrate_temp.h) */
    char record_tmp[600], log_tmp[600]; /* the child's record and log, in tmp_dir */
    char ftrain[1024], probe[1024];
} cal_paths;

typedef struct cal_sweep {
    const cal_options *o;
    cal_paths p;
    cal_done_set done;
    cal_summary *sum;
    FILE *log;
    double t0, run_s;          /* start; seconds spent in children */
    size_t ran;                /* children run in this invocation */
    bool refining;             /* the points run now are refinements */
    const volatile sig_atomic_t *stop; /* set by Ctrl-C or SIGTERM: finish no more points */
} cal_sweep;

/* The entry of `key` in the set, or NULL. */
cal_done_entry *cal_done_find(const cal_done_set *d, const char *key);
/* The entry of `key`, added empty when absent; NULL when out of memory. */
cal_done_entry *cal_done_add(cal_done_set *d, const char *key);

/* Adds the keys that the records file (outcomes false: calibrate.key) or the
 * outcomes file (key) gained since the last call; an outcome "error" is not
 * done (its point runs again). An absent file holds none. 0, or -1 with err. */
int cal_load_done(const char *path, bool outcomes, cal_done_set *d, char *err, size_t errlen);

/* Before running point `key` (calibrate_claim.c): under the lock of
 * FILE.claims, the done set brought up to date, then 1 when the point is now
 * ours to run, 0 when it is done, 2 when another running sweep has claimed it,
 * -1 with err. */
int cal_claim(cal_sweep *s, const char *key, char *err, size_t errlen);
/* Drops our claim of `key` once its line is written (or it was interrupted). */
void cal_release(cal_sweep *s, const char *key);

/* The per-rank peaks of a record's "measured.ranks" into e. */
void cal_read_peaks(const cJSON *rec, cal_done_entry *e);

/* Runs the points not yet done, within the budget. 0, 1 interrupted, -1 error. */
int cal_run_points(cal_sweep *s, const cal_point *pts, size_t n, char *err, size_t errlen);

/* Adaptive refinement after the grid (calibrate_refine.c). 0, 1 interrupted, -1 error. */
int cal_refine(cal_sweep *s, const cal_point *pts, size_t n, const est_gpu_catalog *cat, char *err,
               size_t errlen);

/* The fit (when the records determine a constant) and the check of --out. 0 or -1. */
int cal_fit_and_check(const cal_options *o, const est_gpu_catalog *cat, FILE *out, FILE *log,
                      cal_summary *sum, char *err, size_t errlen);

#endif
