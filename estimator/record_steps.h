/* The per-step keys of a probe record (docs/records.md, "Per step"): every
 * timed step's wall time with the warm-up it dropped, DeepSpeed's skipped
 * steps, padded batches, and each rank's allocator after steps 1, 2 and the
 * last. Read and checked; ftest's estimate uses none of them yet (they are for
 * the replays that docs/validation.md asks for: qwenseq, hf1gpu, fsdpres2). */
#ifndef EST_RECORD_STEPS_H
#define EST_RECORD_STEPS_H

#include <stddef.h>
#include <stdint.h>

struct cJSON;

/* More per-step entries than any probe run takes: a wrong list. */
#define EST_RECORD_STEPS_MAX 100000

typedef struct est_record_steps {
    int32_t times;            /* entries of measured.step_times_s; 0 when absent */
    int32_t warmup;           /* measured.warmup_steps; 0 when absent */
    double steady_median_s;   /* median of the steps after the warm-up; NAN when absent */
    double steady_min_s, steady_max_s; /* their spread; NAN when absent */
    int32_t overflow_steps;   /* entries of measured.step_overflow; -1 when absent */
    int32_t overflowed;       /* of them, steps DeepSpeed skipped for an overflow */
    int32_t padded_steps;     /* entries of measured.step_padded; -1 when absent */
    int32_t padded;           /* of them, steps with an attention mask holding a zero */
} est_record_steps;

/* Reads the per-step keys of a record's "measured" object into *s (absent
 * keys leave their "absent" values). -1 with a message for a malformed one. */
int est_record_parse_steps(const struct cJSON *measured, est_record_steps *s, char *err, size_t errlen);

/* Checks a rank's memory_by_step (entries {"step", the allocator's figures in
 * whole bytes and counts}, steps increasing) and sets *entries to their
 * number (0 when absent). -1 with a message for a malformed one. */
int est_record_parse_memory_steps(const struct cJSON *rank, int32_t *entries, char *err, size_t errlen);

#endif
