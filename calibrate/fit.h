/* `ftest fit`: the few constants the estimator cannot derive, fitted from
 * measurement records and written as a framework profile
 * (calibrate/profiles/<framework>.json), each value with the records and the
 * rule that produced it. */
#ifndef CAL_FIT_H
#define CAL_FIT_H

#include <stddef.h>
#include <stdio.h>

#include <cJSON.h>

#include "gpu.h"
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

/* Reads the record files, fits every framework and GPU they cover, and
 * replaces `out_dir` with the set of profiles fitted, one per framework, as
 * one commit (ft_replace_dir): a kill or a full disk leaves the old set whole,
 * and nothing from earlier profiles is kept (a profile is a function of
 * records). Nothing is written when nothing could be fitted. Returns the
 * number of profiles written (their names into `names`), or -1 with a message. */
int cal_fit_files(char (*files)[1024], int nfiles, const est_gpu_catalog *cat, const char *out_dir,
                  FILE *log, char *names, size_t names_len, char *err, size_t errlen);

#endif
