/* Appends `ftest.record/1` lines (docs/records.md): the configuration with the
 * same names as the ftest flags, and per rank the arena's peaks by category,
 * the breakdown at the total peak, the peak phase, plus step time and
 * throughput. A run writes one record per completed measurement window
 * ("final": false, the same "run_id") and one at its end ("final": true), each
 * appended whole under a lock (file_io.h), so a kill loses at most a window. */
#ifndef TR_RECORD_H
#define TR_RECORD_H

#include <stdbool.h>
#include <stddef.h>

#include "config.h"
#include "train.h"

/* What a record says about the run beside its measurements. */
typedef struct tr_record_meta {
    const char *run_id;   /* the same on every record of one run */
    bool final;           /* the run is over (trained, out of memory, or stopped) */
    const char *stopped;  /* why the run stopped early (non-finite loss...), or NULL */
} tr_record_meta;

/* A run id unique enough for one host: pid, time and a counter. */
void tr_record_run_id(char *buf, size_t n);

/* The record as one line of JSON (no newline); caller frees. NULL when out of
 * memory, or with a message in err when the model config cannot be embedded. */
char *tr_record_json(const tr_config *cfg, const tr_result *res, const tr_record_meta *meta, char *err,
                     size_t errlen);
/* Appends the record (ft_append_line); a partial tail left by a killed writer
 * is repaired first and said in `note` (empty when nothing was repaired). */
int tr_record_append(const char *path, const tr_config *cfg, const tr_result *res,
                     const tr_record_meta *meta, char *note, size_t notelen, char *err, size_t errlen);

#define TR_VERSION "0.1"

#endif
