/* What `ftest plan` asks of many runs that differ only in their GPU, remembered
 * so that it is worked out once (docs/performance.md, "The plan's memo").
 *
 * A step's events do not depend on the GPU (estimator/frameworks/ read no GPU
 * field; the constants they read are keyed here by value), only the caching
 * allocator's capacity does. So for one run less its GPU at one micro-batch
 * (a probe) the step is built once; its allocated peak settles every card it
 * cannot fit; the allocator is replayed once without a capacity (its reserved
 * peak settles every card at least that large) and, for a card between the
 * two, once within that card (the allocator's free-and-retry path), as
 * est_estimate_run does. Steps that come out the same for different runs (a
 * data-parallel step is the same on 16 ranks as on 32) share their replays,
 * matched by a 128-bit hash of their allocator-visible events. The answers
 * are est_estimate_run's, bit for bit: tests/plan.c compares them.
 *
 * Step times are remembered the same way: the work of a step at one
 * micro-batch and accumulation (est_time_model builds it), priced again for
 * each card and network. */
#ifndef EST_PLAN_MEMO_H
#define EST_PLAN_MEMO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "constants.h"
#include "run.h"
#include "timing.h"

typedef struct est_plan_memo est_plan_memo;

/* What est_estimate_run would leave in an est_estimate for the fields a
 * search reads, for a run whose host RAM is not checked. */
typedef struct est_probe_answer {
    int rc;                    /* est_estimate_run's status: 0, or -1 (the fields below are
                                  then those of the last probe that succeeded) */
    bool fits;                 /* e.fits (host RAM unchecked: e.device_fits) */
    int64_t device_used_bytes; /* e.device_used_bytes; see est_plan_memo_device_used */
    int64_t cpu_bytes, cpu_load_bytes;
    int64_t capacity_bytes;    /* the card's memory */
} est_probe_answer;

est_plan_memo *est_plan_memo_new(void);
void est_plan_memo_free(est_plan_memo *m);

/* No card the memo is asked about for a run of `world` ranks has more memory
 * than `bytes` (the plan's catalog; called once per card, the largest is
 * kept; for up to 32 worlds): a probe's build stops once its allocated peak
 * shows that no card of its world can hold it (est_step.stop_above_bytes),
 * as every such card would find. Such a
 * probe answers fits false, as est_estimate_run; but its device_used_bytes is
 * the peak where the build stopped (with the context: above every card, at
 * most est_estimate_run's) and its host figures are the stopped build's. The
 * plan reads neither of a probe that does not fit. */
void est_plan_memo_largest_card(est_plan_memo *m, int64_t world, int64_t bytes);

/* est_estimate_run(run) as far as a fit goes. The answer's device_used_bytes
 * is filled when it fits; otherwise call est_plan_memo_device_used (it may
 * replay the allocator once more). 0, or -1 out of host memory. */
int est_plan_memo_probe(est_plan_memo *m, const est_run *run, est_probe_answer *out);

/* What a probe says without the allocator: its host memory, and the least
 * device memory it needs (its allocated peak and the CUDA context; a card
 * smaller than that cannot hold it). */
typedef struct est_probe_host {
    int64_t cpu_bytes, cpu_load_bytes; /* e.cpu_bytes, e.cpu_load_bytes */
    int64_t least_device_bytes;
} est_probe_host;

/* The probe of `run` (built when new) as far as it goes without a card: no
 * allocator replay. 0; -1 when est_estimate_run would fail; -2 out of host
 * memory. */
int est_plan_memo_host(est_plan_memo *m, const est_run *run, est_probe_host *out);

/* e.device_used_bytes after the last est_plan_memo_probe with this run's card:
 * the last successful probe's. -1 out of host memory. */
int64_t est_plan_memo_device_used(est_plan_memo *m, const est_run *run);

/* The constants an estimate of `run` uses (est_estimate_constants). */
int est_plan_memo_constants(const est_run *run, est_constants *k);

/* est_time_model(run, k, out), the step remembered across cards. */
void est_plan_memo_time(est_plan_memo *m, const est_run *run, const est_constants *k,
                        est_time_detail *out);

/* Counts, for docs/performance.md: distinct probes, steps built (for memory or
 * for time), allocator replays. */
void est_plan_memo_counts(const est_plan_memo *m, size_t *probes, size_t *builds, size_t *replays);

#endif
