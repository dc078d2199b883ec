/* One estimate: a run in, the step timeline and its peak out. */
#ifndef EST_ESTIMATE_H
#define EST_ESTIMATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "constants.h"
#include "run.h"
#include "timeline.h"

typedef struct est_estimate {
    est_timeline tl;                    /* allocator categories per moment */
    size_t peak_index;                  /* moment of the allocated peak */
    int64_t peak_allocated_bytes;       /* what torch.cuda.max_memory_allocated would say */
    int64_t peak_reserved_bytes;        /* allocated plus the caching allocator's reserve */
    int64_t device_used_bytes;          /* reserved plus CUDA context: what nvidia-smi shows */
    int64_t breakdown[EST_CAT_COUNT];   /* at the peak, with context and allocator reserve */
    int64_t category_peak[EST_CAT_COUNT]; /* each category's own maximum */
    int64_t cpu_bytes;                  /* host RAM this rank needs while training */
    int64_t cpu_load_bytes;             /* host RAM this rank needs while loading */
    int64_t rank_spread_bytes;          /* the smallest rank may hold this much less (the
                                           estimate is of the largest); 0: ranks alike */
    int64_t capacity_bytes;             /* the GPU's memory */
    bool fits;                          /* device_used_bytes <= capacity_bytes */
    est_constants k;                    /* constants in force */
    /* Time (estimator/timing.c); zero when not modelled. */
    double step_time_s;                 /* one optimizer step (all micro-batches) */
    double tokens_per_s;                /* all ranks together */
    double it_per_s;                    /* optimizer steps per second */
    double mfu;                         /* model FLOPs utilization, 0..1 */
} est_estimate;

void est_estimate_init(est_estimate *e);
void est_estimate_free(est_estimate *e);

/* Validates the run, builds its timeline with the framework's profile and
 * derives peak, breakdown and fit. Reuses e's buffers (call est_estimate_init
 * once, est_estimate_free at the end). 0, or -1 with a one-line message. */
int est_estimate_run(const est_run *run, est_estimate *e, char *err, size_t errlen);

#endif
