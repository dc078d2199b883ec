/* Inverse queries: how far can a run be pushed? The largest micro-batch or
 * sequence that fits, and the fewest GPUs of a type that hold it, each with
 * every other option of the run kept as given. Batch and sequence are found
 * by doubling, then bisection over the estimate; GPU counts are scanned
 * within a node and bisected over whole nodes. Bisection finds the true
 * largest (or fewest) only where "fits" changes once along the axis, and that
 * is not true everywhere: with --padding-mask and SDPA attention, a sequence
 * that is not a multiple of 8 makes every layer save a padded copy of the
 * (b, 1, s, s) mask (hf_modeling.c), so memory drops again at the next
 * multiple of 8, and a longer sequence can fit where a shorter one does not.
 * What the answer does promise: the value found fits and the next one does
 * not (both estimated and shown). "Fits" keeps the run's tight margin
 * (est_run.tight_margin_frac): a value that fits with less room is not an
 * answer, and the next value is shown as tight when that is what stops it. */
#ifndef EST_INVERSE_H
#define EST_INVERSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "estimate.h"
#include "run.h"

typedef enum { EST_Q_MAX_BATCH, EST_Q_MAX_SEQ, EST_Q_MIN_GPUS } est_question;

#define EST_MIN_GPUS_MAX_NODES 4096 /* --min-gpus searches up to this many nodes */
#define EST_MIN_GPUS_NODE_SIZE 8     /* GPUs per node for --min-gpus without --gpus: an HGX/DGX node */

typedef struct est_answer {
    est_question question;
    int64_t value;            /* the answer; 0 when nothing fits (or only an error) */
    int64_t gpus_per_node;    /* min-gpus: the layout of the answer */
    int64_t nodes;
    int64_t used_bytes;       /* device bytes at the answer */
    int64_t next_used_bytes;  /* at the answer + 1 (batch, seq) or the next smaller count; -1 if none */
    double step_time_s;       /* at the answer */
    double tokens_per_s;
    int64_t limit;            /* the largest value searched (batch, seq) */
    int64_t estimates;        /* estimates made */
    /* Host RAM per node at the answer (or, when nothing fits, at the smallest
     * value), and whether it was the host that did not fit there. */
    int64_t host_peak_per_node_bytes;
    int64_t host_ram_bytes;   /* 0 = not checked */
    bool host_short;          /* the GPU held it, the node's host RAM did not */
    int64_t next_host_peak_per_node_bytes; /* at the next value (see next_used_bytes) */
    int64_t next_host_ram_bytes;           /* ... the node's host RAM there (it scales with
                                              the GPUs per node unless --host-ram fixes it) */
    bool next_host_short;     /* ... where the host, not the GPU, is what does not fit */
    bool next_tight;          /* ... where it fits, but with less room than the margin */
    bool tight;               /* value 0: the smallest value fits, but only tight */
    double tight_margin_frac; /* the margin kept (the run's) */
    /* max-batch: the largest micro-batch is not always the fastest (per-token
     * time can rise near the edge), so the one with the best tokens/s among
     * those that fit is found too, by scanning 1..value every fastest_stride. */
    int64_t fastest_value;    /* 0 = not searched (other questions, or nothing fits) */
    double fastest_tokens_per_s;
    double fastest_step_time_s;
    int64_t fastest_stride;   /* 1 = every micro-batch was estimated */
} est_answer;

/* Answers `q` for `base`. `node_size` is the GPUs per node for --min-gpus
 * (counts 1..node_size on one node, then whole nodes). Returns 0 (answer->value
 * is 0 when even the smallest value does not fit), or -1 with a message when
 * the run itself is invalid. */
int est_answer_question(const est_run *base, est_question q, int64_t node_size, est_answer *answer,
                        char *err, size_t errlen);

/* Asks `q` (node_size as for est_answer_question) of `base` alone when
 * `single` (the user named one strategy), otherwise of every usual strategy,
 * and prints the best answer (and without `single` every strategy's row) as
 * text, or JSON with `json`, to `out`. Returns 0 when something fits, 1 when
 * nothing does, -1 with a message on bad input. The front door's
 * --max-batch / --max-seq / --min-gpus (est_inverse_command). The text opens
 * with the run at the answer, described by `print_run` (the caller's: the
 * front door passes report.h est_print_run; the searches print no run
 * themselves). */
typedef void (*est_run_printer)(FILE *out, const est_run *run);
int est_inverse_report(const est_run *base, est_question q, int64_t node_size, bool single, bool json,
                       est_run_printer print_run, FILE *out, char *err, size_t errlen);

#endif
