/* One estimate: a run in; its step (the framework profile's events), the
 * memory ledger's timeline and peak and the time ledger's step time out.
 * Reports read only this result. */
#ifndef EST_ESTIMATE_H
#define EST_ESTIMATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "allocator_ledger.h"
#include "constants.h"
#include "hf_modeling.h"
#include "run.h"
#include "events.h"
#include "timeline.h"
#include "timing.h"

/* The Transformers modeling tensors the PyTorch profiles' steps are made of
 * (hf_modeling.c), for the reports; absent for ftrain. */
typedef struct est_activations {
    bool present;
    est_terms block_saved, logits_forward, logits_backward;
    int64_t block_kept_bytes, block_backward_working_bytes, final_norm_saved_bytes;
} est_activations;

typedef struct est_estimate {
    est_step step;                      /* the step's events, as the profile emitted them */
    est_timeline tl;                    /* allocator categories per moment (memory ledger) */
    size_t peak_index;                  /* moment of the allocated peak */
    int64_t peak_allocated_bytes;       /* what torch.cuda.max_memory_allocated would say (the
                                           tensors' bytes, before the allocator's rounding) */
    int64_t peak_active_bytes;          /* active_bytes.all.peak: allocated plus blocks freed
                                           through record_stream not yet reusable */
    int64_t peak_reserved_bytes;        /* reserved_bytes.all.peak on a card with room to spare
                                           (the caching allocator simulated, allocator_ledger.h) */
    size_t reserved_peak_index;         /* the moment in which the reserved peak was reached */
    bool allocator_pressure;            /* the card is smaller than the roomy reserved peak: the
                                           step was replayed again under its capacity */
    int64_t alloc_retries;              /* under pressure: mallocs that emptied the cache first */
    int64_t pressured_reserved_bytes;   /* under pressure: the reserved peak within the card */
    int64_t device_used_bytes;          /* reserved plus CUDA context: what nvidia-smi shows */
    int64_t after_step_bytes;           /* allocated between steps, after the optimizer step
                                           (timeline.h EST_AFTER_STEP_LABEL); -1: not modelled */
    int64_t breakdown[EST_CAT_COUNT];   /* at the peak, with context and allocator reserve */
    int64_t category_peak[EST_CAT_COUNT]; /* each category's own maximum */
    int64_t cpu_bytes;                  /* host RAM this rank needs while training */
    int64_t cpu_load_bytes;             /* host RAM this rank needs while loading */
    int64_t rank_spread_bytes;          /* the smallest rank may hold this much less (the
                                           estimate is of the largest); 0: ranks alike */
    int64_t capacity_bytes;             /* the GPU's memory */
    bool fits;                          /* device_fits && host_fits: the verdict */
    est_constants k;                    /* constants in force */
    /* Time (the time ledger, estimator/ledger/timing.c); zero when not modelled. */
    est_time_detail time;               /* every unit and term of the step time */
    est_activations activations;
    /* DeepSpeed's own model-states estimator for this strategy
     * (deepspeed_estimator.h), for comparison; NULL function: it has none. */
    const char *deepspeed_function;
    int64_t deepspeed_bytes;
    const char *deepspeed_not_comparable; /* a DeepSpeed run its estimators do not describe: why */
    double step_time_s;                 /* one optimizer step (all micro-batches) */
    double tokens_per_s;                /* all ranks together */
    double it_per_s;                    /* optimizer steps per second */
    double mfu;                         /* model FLOPs utilization, 0..1 */
    /* Host RAM per node: the per-rank figures x ranks per node (every rank is
     * its own process on the node's host). */
    int64_t host_train_per_node_bytes;  /* cpu_bytes x GPUs per node */
    int64_t host_load_per_node_bytes;   /* cpu_load_bytes x GPUs per node */
    int64_t host_peak_per_node_bytes;   /* the larger: loading and training do not overlap */
    int64_t host_ram_bytes;             /* the node's host RAM; 0 = not checked */
    bool device_fits;                   /* device_used_bytes <= capacity_bytes */
    bool host_fits;                     /* host_peak_per_node_bytes <= host_ram_bytes (or unchecked) */
    /* Tight: it fits, but with less room than this fraction of the GPU's (or
     * the host's) memory. Set after est_estimate_init to change it. */
    double tight_margin_frac;
    bool tight;
    est_replayer *replayer;             /* the allocator's host buffers, kept between estimates */
} est_estimate;

/* EST_TIGHT_MARGIN_DEFAULT (run_desc.h) is where tight_margin_frac starts. */

typedef enum {
    EST_VERDICT_FITS,
    EST_VERDICT_TIGHT,
    EST_VERDICT_NO_FIT_GPU,  /* the GPU is too small (whatever the host) */
    EST_VERDICT_NO_FIT_HOST, /* the GPU holds it, the node's host RAM does not */
} est_verdict;

est_verdict est_verdict_of(const est_estimate *e);

/* The reserved peak on this run's card: the pressured replay's when the roomy
 * one exceeds the card and the step still fits (PyTorch frees its cache and
 * retries before it raises), else the roomy one. What a measurement taken on
 * that card is compared with. */
int64_t est_estimate_reserved_on_card(const est_estimate *e);

/* Would the estimated step fit a card of `capacity_bytes` (the same step: only
 * the allocator's capacity differs)? The allocator is replayed under that
 * capacity when the roomy reserved peak exceeds it. */
bool est_estimate_device_fits_on(const est_estimate *e, const est_run *run, int64_t capacity_bytes);
/* Its answer from an estimate's figures alone (allocated peak, roomy reserved
 * peak, context): 1 fits, 0 does not, -1 only the allocator replayed within
 * the card can say (est_estimate_device_fits_on, with the step). */
int est_device_fits_figures(int64_t allocated_bytes, int64_t reserved_bytes, int64_t context_bytes,
                            const est_run *run, int64_t capacity_bytes);
/* "fits", "tight", "gpu_memory", "host_ram": the JSON names. */
const char *est_verdict_name(est_verdict v);

/* The node's host RAM for `run` (its fixed amount, or its multiple of the
 * node's GPU memory); 0 when not checked. */
int64_t est_host_ram_of(const est_run *run);

void est_estimate_init(est_estimate *e);
void est_estimate_free(est_estimate *e);

/* Validates the run, builds its timeline with the framework's profile and
 * derives peak, breakdown and fit. Reuses e's buffers (call est_estimate_init
 * once, est_estimate_free at the end). 0, or -1 with a one-line message. */
int est_estimate_run(const est_run *run, est_estimate *e, char *err, size_t errlen);

/* The parts of est_estimate_run that searches share between cards (the step
 * does not depend on the GPU, only the allocator's capacity does):
 *  - est_estimate_constants: the constants an estimate of `run` uses (e->k);
 *  - est_estimate_step: validates `run` and builds its step into e->step with
 *    e->k; e->step.peak_allocated_bytes is then the timeline's allocated peak
 *    (no ledger runs); 0, or -1 with a message as est_estimate_run;
 *  - est_estimate_replay: the caching allocator over e->step as the run
 *    configures it, with no capacity (capacity_bytes 0: a roomy card) or within
 *    a card of capacity_bytes (less the CUDA context), as est_estimate_run
 *    replays it; `until_oom`: the replay stops at the first out-of-memory (a
 *    verdict only). */
int est_estimate_constants(const est_run *run, est_constants *k, char *err, size_t errlen);
int est_estimate_step(const est_run *run, est_estimate *e, char *err, size_t errlen);
int est_estimate_replay(est_estimate *e, const est_run *run, int64_t capacity_bytes,
                        bool until_oom, est_alloc_replay *out, char *err, size_t errlen);

/* Hours to train on `tokens` tokens at the estimate's rate (0 if not modelled). */
double est_hours_for_tokens(const est_estimate *e, double tokens);

#endif
