/* The training driver: N ranks as threads over the in-process communicator,
 * steps of grad_accum micro-batches, the optimizer, timing and the per-rank
 * memory accounting that goes into records. */
#ifndef TR_TRAIN_H
#define TR_TRAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "arena.h"
#include "config.h"

typedef struct tr_rank_stats {
    int64_t peak[TR_CAT_COUNT];     /* each category's own maximum (device) */
    int64_t at_peak[TR_CAT_COUNT];  /* breakdown when the device total peaked */
    int64_t peak_total;             /* peak allocated (device) */
    int64_t reserved;               /* slab bytes (device) */
    char peak_phase[TR_LABEL_MAX];
    int64_t host_peak[TR_CAT_COUNT];
    int64_t host_peak_total, host_reserved;
} tr_rank_stats;

typedef struct tr_result {
    int64_t steps;
    double *loss;          /* (steps) mean over ranks and micro-batches */
    double *grad_norm;     /* (steps) before clipping */
    double *lr;            /* (steps) */
    double *step_s;        /* (steps) wall time of each optimizer step */
    double *wait_s;        /* (steps) of it, the longest time a rank's thread waited for a CPU
                              (tr_thread_wait_s; -1 where the kernel does not say) */
    int ranks;
    tr_rank_stats rank[TR_MAX_RANKS];
    double step_time_s;    /* mean step time, the first (warm-up) step left out when there are more */
    double cpu_wait_s;     /* mean wait_s over the same steps; -1 unknown */
    double tokens_per_s;   /* all ranks */
    double it_per_s;
    int64_t params_numel;
    bool oom;              /* an arena could not be allocated */
    int64_t steps_done;    /* optimizer steps completed (== steps after a whole run) */
    bool nonfinite;        /* stopped: the loss or gradient norm of step steps_done was NaN/inf */
} tr_result;

/* Called by rank 0 after every completed optimizer step with the result so
 * far (steps_done, loss, per-rank peaks, mean step time); the other ranks wait
 * meanwhile. A non-zero return stops the run (tr_train then fails with the
 * message the observer left in err). */
typedef int (*tr_step_observer)(const tr_result *so_far, void *ctx, char *err, size_t errlen);

/* Runs the whole training. 0, or -1 with a message (res->oom set when it was
 * out of memory; res is then still filled with what is known). */
int tr_train(const tr_config *cfg, tr_result *res, char *err, size_t errlen);
/* The same, calling `obs` (may be NULL) after each step. Training stops at the
 * first non-finite loss or gradient norm: -1, res->nonfinite set, res filled
 * up to that step (the step itself counted in steps_done). */
int tr_train_observed(const tr_config *cfg, tr_result *res, tr_step_observer obs, void *obs_ctx,
                      char *err, size_t errlen);
void tr_result_free(tr_result *res);

/* RAM of this machine (the CPU backend's device memory). */
int64_t tr_physical_memory_bytes(void);

#endif
