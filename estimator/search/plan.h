/* `ftest plan`: which instance to rent, and how to run on it. Searches every
 * instance of the catalog (and, where the provider offers a network between
 * instances, 2, 4, ... nodes of it) times every strategy (ZeRO stage, offload,
 * checkpointing), with the micro-batch up to the largest that fits and the
 * gradient accumulation that reaches the global batch, and ranks the plans by
 * total cost, marking the cheapest, the fastest and the cost/time Pareto
 * front. A plan's hours are steps x the estimated step time; its cost is hours
 * x the instance's on-demand price x the nodes. */
#ifndef EST_PLAN_H
#define EST_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "instances.h"
#include "progress.h"
#include "run.h"
#include "strategy.h"

#define EST_PLAN_MAX_NODES 32 /* nodes tried: 1, 2, 4, ... up to this */
/* The global batch `ftest plan` assumes without --global-batch: 64 sequences
 * per optimizer step, the supervised fine-tuning batch of Llama 2 (Touvron et
 * al. 2023, "Llama 2", section 3.1: batch size 64, sequences of 4096 tokens).
 * A fixed batch keeps plans comparable: with a free one (the old default, still
 * there as --global-batch free) each plan ran its largest micro-batch on every
 * GPU, so the fastest plan was 32 nodes at a global batch of a thousand or more
 * sequences, a different training run from the one a fine-tune asks for. It
 * also bounds the GPUs a plan may use: at most one sequence per GPU per step. */
#define EST_PLAN_DEFAULT_GLOBAL_BATCH 64

typedef struct est_plan_request {
    est_run base;           /* model, seq, precision, framework, attention, loss, optimizer */
    bool strategy_fixed;    /* only base's own strategy (the user gave --zero/--offload/--checkpointing) */
    double tokens;          /* training tokens per epoch */
    double epochs;
    int64_t global_batch;   /* sequences per optimizer step over all GPUs; 0 = free */
    double max_hours;       /* 0 = no limit */
    double max_cost;        /* USD; 0 = no limit */
    double inter_node_gb_per_s; /* > 0: replaces the network of every instance that has one */
    bool table_only;        /* the caller prints the table (est_plan_print) and nothing else:
                               with a global batch, no search for the largest micro-batch
                               runs, only micro-batch 1 and the candidates are probed (as the
                               whole search probes them: plan.c candidate_fits), and a plan's
                               device_used_bytes is -1 */
} est_plan_request;

typedef struct est_plan {
    size_t instance;        /* index in the catalog */
    int64_t nodes, gpus;
    est_strategy strategy;
    int64_t micro_batch, grad_accum;
    int64_t global_batch;   /* micro_batch x grad_accum x gpus */
    double step_time_s, tokens_per_s, mfu;
    double steps;           /* whole optimizer steps; a double: tokens x epochs can pass int64 */
    double hours, cost_usd;
    int64_t device_used_bytes;   /* per GPU at the largest micro-batch the search found (-1
                                    with table_only and a global batch) */
    int64_t host_bytes_per_node; /* host RAM the plan needs per node */
    double inter_node_gb_per_s;  /* network between nodes per node (0 on one node) */
    bool cheapest, fastest, pareto;
} est_plan;

typedef struct est_plan_result {
    est_plan *plans;        /* feasible plans within the limits, cheapest first */
    size_t count;
    size_t combos;          /* instance x nodes x strategy combinations tried */
    size_t no_fit;          /* ... where not even micro-batch 1 fits */
    size_t host_short;      /* ... where the host RAM is too small */
    size_t batch_mismatch;  /* ... where the global batch does not divide over the GPUs */
    size_t accum_no_fit;    /* ... where only accumulation reaches the global batch and it does not fit */
    size_t no_time;         /* ... where no candidate has a step time */
    size_t over_limits;     /* plans dropped by --max-hours / --max-cost */
    /* Every combination is a plan or counted once above:
     * combos = count + no_fit + host_short + batch_mismatch + accum_no_fit + no_time + over_limits. */
    size_t estimates;       /* memory estimates asked for (plan_memo.h answers them) */
    size_t probes, builds, replays; /* of which distinct probes, steps built, allocator replays */
} est_plan_result;

/* Runs the search. `prog` may be NULL. 0 (count may be 0), or -1 with a
 * message (an invalid base run, no tokens). */
int est_plan_search(const est_plan_request *req, const est_instance_catalog *cat, est_progress *prog,
                    est_plan_result *out, char *err, size_t errlen);
void est_plan_free(est_plan_result *r);

/* The ranked table (at most `top` rows, one per instance and node count) and
 * the Pareto front. */
void est_plan_print(FILE *out, const est_plan_request *req, const est_instance_catalog *cat,
                    const est_plan_result *r, size_t top);
/* Every plan as JSON (malloc'ed text, NULL when out of memory). */
char *est_plan_json(const est_plan_request *req, const est_instance_catalog *cat,
                    const est_plan_result *r);

#endif
