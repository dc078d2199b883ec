/* Names of the FSDP settings of a run (estimator/run_desc.h: est_fsdp_version,
 * est_load_dtype, est_reduce_dtype) for the command line, records and output.
 * What each setting does to memory is in estimator/frameworks/profile_fsdp.c. */
#ifndef EST_FSDP_POLICY_H
#define EST_FSDP_POLICY_H

#include <stddef.h>

#include "run.h"

const char *est_fsdp_version_name(est_fsdp_version v);
const char *est_load_dtype_name(est_load_dtype d);
const char *est_reduce_dtype_name(est_reduce_dtype d);

/* 0 and *out set, or -1 with a message listing the choices. */
int est_fsdp_version_parse(const char *s, est_fsdp_version *out, char *err, size_t errlen);
int est_load_dtype_parse(const char *s, est_load_dtype *out, char *err, size_t errlen);
int est_reduce_dtype_parse(const char *s, est_reduce_dtype *out, char *err, size_t errlen);

#endif
