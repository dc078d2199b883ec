/* Refuses record sets from which `ftest fit` can determine nothing, with one
 * line that says what the set lacks, instead of writing no profile (or a
 * profile of one point) and reporting success. */
#ifndef CAL_FITGUARD_H
#define CAL_FITGUARD_H

#include <stddef.h>

#include "gpu.h"
#include "record.h"

/* What a record set holds for each fitter (calibrate/fit_*.c). */
typedef struct cal_fit_census {
    size_t records;           /* readable records */
    size_t unreadable;        /* lines est_record_parse refused */
    size_t distinct;          /* distinct run descriptions among the readable ones */
    size_t timed_sizes;       /* most distinct work sizes with it/s in one framework on one GPU */
    size_t zero3_multi;       /* distinct multi-rank ZeRO-3 DeepSpeed runs that ran */
} cal_fit_census;

/* Counts what `recs` hold for the fitters. */
void cal_fit_count(const est_record *recs, size_t n, cal_fit_census *c);

/* 0 when the census determines at least one constant: two distinct work sizes
 * timed in one framework on one GPU (host time and GEMM efficiency are
 * separated only by a sweep), two distinct runs under memory pressure, or two
 * distinct multi-rank ZeRO-3 runs. Else -1 with one line naming what lacks. */
int cal_fit_census_check(const cal_fit_census *c, char *err, size_t errlen);

/* Reads the files and checks their census: the guard `ftest fit` and
 * `ftest calibrate` run before fitting. */
int cal_fit_guard(char (*files)[1024], int nfiles, const est_gpu_catalog *cat, char *err,
                  size_t errlen);

#endif
