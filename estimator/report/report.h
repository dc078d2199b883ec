/* Human-readable output of the estimator (text) and its machine-readable twin
 * (report_json.c). */
#ifndef EST_REPORT_H
#define EST_REPORT_H

#include <stdio.h>

#include "estimate.h"
#include "format.h"
#include "gpu.h"
#include "strategy.h"

/* One line describing the run: model, GPUs, framework, strategy, shapes. */
void est_print_run(FILE *out, const est_run *run);

/* Peak, where, breakdown by category, CPU RAM, DeepSpeed's figure. */
void est_print_estimate(FILE *out, const est_run *run, const est_estimate *e);

/* One line: fits, tight (and where), or does not fit and why (GPU memory or
 * host RAM), with the figures that decide it. */
void est_print_verdict(FILE *out, const est_estimate *e);
/* PEFT methods other than LoRA, the training loop and dynamic padding, in the run header. */
void est_print_peft(FILE *out, const est_run *r, int64_t total);
/* Partial training (--trainable, unfrozen_parameters): what trains. */
void est_print_trainable(FILE *out, const est_run *r);

/* The alternatives table, with whether each fits on the GPUs of
 * est_fit_gpu_names instead (est_alternatives_fit_gpus fills them). */
void est_print_alternatives(FILE *out, const est_alternative *alts, size_t n, int recommended);


/* JSON of everything: run, constants, timeline, breakdown, terms, alternatives. */
char *est_json_report(const est_run *run, const est_estimate *e, const est_alternative *alts,
                      size_t nalts, int recommended);
/* The same with the verdict's advice (advice.h; NULL: none). Declared with
 * the struct's tag so that advice, which prints through this header, and
 * this header do not include each other. */
struct est_advice;
char *est_json_report_advice(const est_run *run, const est_estimate *e, const est_alternative *alts,
                             size_t nalts, int recommended, const struct est_advice *advice);

/* The step time after the memory (report_time.c). */
void est_print_time(FILE *out, const est_run *run, const est_estimate *e);

/* "2B tokens take 3.2 h (1,234 steps) ..." after the report, for --tokens. */
void est_print_tokens_time(FILE *out, const est_run *run, const est_estimate *e, double tokens);

/* The "time" object of the JSON report (a cJSON *, declared void * to keep
 * cJSON out of this header); NULL when out of memory. */
void *est_time_json(const est_run *run, const est_estimate *e);

#endif
