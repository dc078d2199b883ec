/* `ftest fit`: the few constants the estimator cannot derive, fitted from
 * measurement records and written as a framework profile
 * (calibrate/profiles/<framework>.json), each value with the records and the
 * rule that produced it. */
#ifndef CAL_FIT_H
#define CAL_FIT_H

#include <stddef.h>
#include <stdio.h>

#include "fitters.h"
#include "gpu.h"

/* Reads the record files, fits every framework and GPU they cover, and
 * replaces `out_dir` with the set of profiles fitted, one per framework, as
 * one commit (ft_replace_dir): a kill or a full disk leaves the old set whole,
 * and nothing from earlier profiles is kept (a profile is a function of
 * records). Nothing is written when nothing could be fitted. Returns the
 * number of profiles written (their names into `names`), or -1 with a message. */
int cal_fit_files(char (*files)[1024], int nfiles, const est_gpu_catalog *cat, const char *out_dir,
                  FILE *log, char *names, size_t names_len, char *err, size_t errlen);

#endif
