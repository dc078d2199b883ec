/* `ftest calibrate` and the fit guard: the calibrate/ side that ftest's main
 * reaches. A sweep plans a grid (calibrate_grid.h), runs each point as a child
 * with a time limit (calibrate_child.h: ftrain on the CPU, or a probe of a
 * real framework on a GPU machine), appends each finished record whole to
 * --out (calibrate_append.h) keyed by its point, skips points already there on
 * a rerun, then fits profiles from the records and checks them. */
#ifndef CAL_CALIBRATE_H
#define CAL_CALIBRATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "calibrate_fitguard.h"
#include "calibrate_grid.h"
#include "gpu.h"

typedef struct cal_options {
    cal_grid grid;
    char out[1024];            /* --out FILE: the records */
    char device[8];            /* --device cpu|cuda */
    char probe[32];            /* --probe MODE ("" = ftrain) */
    char ftrain[1024];         /* --ftrain PATH ("" = beside the ftest binary) */
    char python[256];          /* --python PATH (probes) */
    char gpu[32];              /* --gpu NAME: the GPU a probe's records name */
    char profiles[1024];       /* --profiles DIR ("" = profiles/ beside --out) */
    char offload[24];          /* probes: none|optimizer */
    char attention[8];         /* probes: eager|sdpa */
    bool no_zero_init;         /* probes: --no-zero-init */
    double limit_s;            /* --timeout-s per point */
    double budget_s;           /* from --budget-minutes or --budget-usd / --price-per-hour; 0 = none */
    int64_t steps, threads;    /* ftrain --steps, --threads */
    int64_t refine;            /* --refine N: points added after the coarse pass */
    bool no_fit, dry_run, quiet, help;
} cal_options;

/* Parses `ftest calibrate ...` (argv[0] is "calibrate"). 0, or -1 with one
 * line in err. */
int cal_options_parse(int argc, char *const argv[], cal_options *o, char *err, size_t errlen);

extern const char cal_usage[];

/* What a sweep did. */
typedef struct cal_summary {
    size_t planned, skipped, ok, oom, timeout, failed, refined, left_by_budget;
    size_t busy;               /* points another running sweep had claimed */
    char first_failure[420];   /* "KEY: why" of the first point that failed; "" = none */
    bool interrupted;          /* Ctrl-C or SIGTERM: finished points are kept */
    bool fitted;               /* profiles written */
    size_t checked, check_failed, check_errors;
} cal_summary;

/* Runs the sweep, then (unless --no-fit) the fit and the check. Progress goes
 * to `log`, the check's table to `out`. 0, or -1 with one line in err (bad
 * options, an unwritable --out, a child that cannot start). */
int cal_calibrate(const cal_options *o, const est_gpu_catalog *cat, FILE *out, FILE *log,
                  cal_summary *sum, char *err, size_t errlen);

#endif
