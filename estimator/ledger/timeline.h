/* The step timeline: the ordered moments of one training step on one rank, each
 * with the GPU bytes live at that moment by category. Peak memory is the maximum
 * over the moments, so a short transient (the optimizer step's temporaries) and a
 * long-lived bulk (activations at the end of forward) compete honestly: that is
 * what reproduces the knee in a sequence-length sweep. */
#ifndef EST_TIMELINE_H
#define EST_TIMELINE_H

#include <stddef.h>
#include <stdint.h>

/* Append-only: the names are persisted in records and JSON output. The first
 * eight are what an allocator sees (ftrain's arena tags exactly these); CONTEXT
 * and ALLOCATOR are added on top for what the device reports as used. */
typedef enum {
    EST_CAT_PARAMS,      /* weights in the compute dtype (or fp32 when training in fp32) */
    EST_CAT_MASTER,      /* fp32 master weights of mixed precision */
    EST_CAT_GRADS,       /* gradients, any dtype */
    EST_CAT_OPTIMIZER,   /* optimizer state (Adam m and v) */
    EST_CAT_ACTIVATIONS, /* tensors saved for backward, and their gradients in flight */
    EST_CAT_LOGITS,      /* LM-head output, loss and their gradients */
    EST_CAT_COMM,        /* communication buckets and gather buffers */
    EST_CAT_WORKSPACE,   /* temporaries of one op, library workspaces */
    EST_CAT_CONTEXT,     /* CUDA context, kernels and library handles (not allocator-visible) */
    EST_CAT_ALLOCATOR,   /* caching-allocator reserve beyond what is allocated */
    EST_CAT_COUNT
} est_category;

#define EST_CAT_ALLOCATED_COUNT EST_CAT_CONTEXT /* categories an allocator counts */

typedef enum {
    EST_PHASE_INIT,      /* loading weights, building optimizer state */
    EST_PHASE_FORWARD,   /* forward of one block (layer >= 0) or of embedding/head */
    EST_PHASE_LOSS,      /* LM head, loss and its gradient */
    EST_PHASE_BACKWARD,  /* backward of one block */
    EST_PHASE_REDUCE,    /* gradient reduction across ranks */
    EST_PHASE_OPTIMIZER, /* optimizer step */
    EST_PHASE_COUNT
} est_phase_kind;

typedef struct est_phase {
    est_phase_kind kind;
    int32_t layer;                   /* block index for forward/backward moments, else -1 */
    char label[48];                  /* "forward layer 3", "optimizer step: fp32 grads" */
    int64_t bytes[EST_CAT_COUNT];    /* GPU bytes live at this moment, per category (a span:
                                        at its highest point) */
    int64_t own_max[EST_CAT_COUNT];  /* each category's own highest point in the moment (a
                                        snapshot: its bytes) */
    /* Time model (filled by timing.c; zero where not modelled). */
    double flops;                    /* floating-point operations in this phase */
    double hbm_bytes;                /* device-memory traffic of memory-bound ops */
    double time_s;                   /* modelled duration */
} est_phase;

typedef struct est_timeline {
    est_phase *phases;
    size_t count, capacity;
    int64_t cpu_bytes;               /* host RAM needed by this rank (offload, pinned buffers) */
    int64_t cpu_load_bytes;          /* host RAM this rank's process needs while loading the model */
    int64_t rank_spread_bytes;       /* how much less than the estimated (largest) rank the
                                        smallest may hold at every moment (ZeRO-3's pending frees) */
} est_timeline;

void est_timeline_init(est_timeline *tl);
void est_timeline_free(est_timeline *tl);
void est_timeline_clear(est_timeline *tl);

/* Appends a moment; `live` holds bytes per category. Returns the new phase, or
 * NULL when out of memory. */
est_phase *est_timeline_push(est_timeline *tl, est_phase_kind kind, int32_t layer,
                             const char *label, const int64_t live[EST_CAT_COUNT]);

/* The label of the row a step ends with when the framework says what stays
 * allocated between steps (seam_hf.c, a plain loop: weights, gradients,
 * optimizer state, the outputs the loop still holds). */
#define EST_AFTER_STEP_LABEL "after the optimizer step"

/* Allocated bytes of the row labelled EST_AFTER_STEP_LABEL; -1 when none. */
int64_t est_timeline_after_step(const est_timeline *tl);

/* Sum of the allocator-visible categories of one moment. */
int64_t est_phase_allocated(const est_phase *p);

/* Index of the moment with the largest allocated total (first one on ties). */
size_t est_timeline_peak(const est_timeline *tl);

/* Per-category maxima over all moments (each category's own peak). */
void est_timeline_category_peaks(const est_timeline *tl, int64_t out[EST_CAT_COUNT]);

extern const char *const est_category_names[EST_CAT_COUNT]; /* "params", "master", ... */
extern const char *const est_phase_names[EST_PHASE_COUNT];  /* "init", "forward", ... */

#endif
