/* Advice for a run that does not fit: the cheapest changes that make it fit.
 * Every candidate is the user's run with one change (or, when too few single
 * changes fit, two or three), estimated again with est_estimate_run: the peak shown
 * beside each change is the estimate of that changed run, never a guess.
 * Candidates: optimizer offload, parameter offload (ZeRO-3), full activation
 * checkpointing, fewer tokens per micro-batch (a smaller micro-batch with more
 * accumulation, or a shorter sequence at micro-batch 1), a lower precision
 * (fp32 -> bf16-mixed, fp16-mixed -> bf16-mixed, bf16-mixed -> bf16), ZeRO-3,
 * more GPUs (the fewest that fit, inverse.h), and, when only the host is
 * short, a node with the host RAM the run needs.
 * "Cheapest" is GPU-seconds per trained token (GPUs / tokens per second from
 * the time model), so a change that slows the step or rents more GPUs ranks
 * behind one that costs nothing; where the time model gives no figure, the
 * device memory needed orders them. */
#ifndef EST_ADVICE_H
#define EST_ADVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "estimate.h"
#include "run.h"

#define EST_ADVICE_MAX 32  /* candidates kept (singles and pairs) */
#define EST_ADVICE_SHOWN 6 /* printed: the cheapest that fit */

typedef struct est_advice_item {
    char change[192];              /* "offload the optimizer to the CPU" */
    char flags[96];                /* how to ask for it: "--zero 2 --offload optimizer" */
    int64_t peak_allocated_bytes;  /* of the changed run, per GPU */
    int64_t device_used_bytes;
    int64_t host_peak_per_node_bytes;
    int64_t gpus;                  /* ranks of the changed run */
    double step_time_s;            /* 0 when not modelled */
    double tokens_per_s;           /* all ranks */
    double gpu_s_per_token;        /* gpus / tokens_per_s; 0 when not modelled */
    bool tight;                    /* fits within the tight margin */
} est_advice_item;

typedef struct est_advice {
    est_advice_item items[EST_ADVICE_MAX]; /* changes that fit, cheapest first */
    size_t count;
    size_t tried;                  /* candidate runs estimated */
} est_advice;

/* Fills `out` with the changes to `run` that fit, cheapest first (count 0
 * when none does or the run already fits). `tight_margin_frac` is passed to
 * every estimate. 0, or -1 with a message when out of memory. */
int est_advise(const est_run *run, double tight_margin_frac, est_advice *out, char *err,
               size_t errlen);

/* "what would fit:" and one line per change with its estimated peak (at most
 * EST_ADVICE_SHOWN), or a line saying no tried change fits. */
void est_print_advice(FILE *out, const est_advice *a);

/* The advice as a cJSON array (cJSON *, void to keep cJSON out of the header). */
void *est_advice_json(const est_advice *a);

#endif
