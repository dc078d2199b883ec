/* Appends one `ftest.record/1` line (docs/records.md) describing a finished run:
 * the configuration with the same names as the ftest flags, and per rank the
 * arena's peaks by category, the breakdown at the total peak, the peak phase,
 * plus step time and throughput. The file is flushed and fsync'ed. */
#ifndef TR_RECORD_H
#define TR_RECORD_H

#include <stddef.h>

#include "config.h"
#include "train.h"

/* The record as one line of JSON (no newline); caller frees. NULL when out of memory. */
char *tr_record_json(const tr_config *cfg, const tr_result *res);
int tr_record_append(const char *path, const tr_config *cfg, const tr_result *res, char *err,
                     size_t errlen);

#define TR_VERSION "0.1"

#endif
