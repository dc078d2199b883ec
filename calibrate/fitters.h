/* What each of `ftest fit`'s fitters is given and how it writes: the group of
 * records it fits and the profile section it fills (fit.c runs them; each
 * lives in a file of its own, fit_time.c, fit_context.c). */
#ifndef CAL_FITTERS_H
#define CAL_FITTERS_H

#include <stddef.h>
#include <stdio.h>

#include <cJSON.h>

#include "record.h"

/* Records of one framework on one GPU (gpu == NULL: all GPUs of the framework). */
typedef struct cal_group {
    const est_record *const *records;
    size_t count;
    const char *gpu;          /* NULL for the framework-wide fit */
    const char *files;        /* the record files, for the provenance strings */
    const cJSON *framework;   /* GPU groups: the framework-wide section fitted first (its
                                 values are the starting point); NULL otherwise */
    const cJSON *common;      /* the profile common to the PyTorch stacks, fitted before
                                 any framework's (cal_fit_host_ops); NULL: none */
} cal_group;

/* Each fitter adds {"name": {"value": v, "source": "..."}} entries to `section`
 * for what the group's records determine, and says what it did on `log`. */
int cal_fit_time(const cal_group *g, cJSON *section, FILE *log, char *err, size_t errlen);
/* The profile common to the PyTorch stacks: the host's cost per op, over every
 * framework's and GPU's records at once (fit_time.c). */
int cal_fit_host_ops(const cal_group *g, cJSON *section, FILE *log, char *err, size_t errlen);

/* cuda_step_images_bytes per framework from the records' device used
 * (fit_context.c). */
int cal_fit_context(const cal_group *g, cJSON *section, FILE *log, char *err, size_t errlen);

/* Sets section[name] = {"value": value, "source": source}, replacing an earlier entry. */
void cal_put(cJSON *section, const char *name, double value, const char *source);

/* Sorts n doubles in increasing order. */
void cal_sort(double *v, size_t n);

#endif
