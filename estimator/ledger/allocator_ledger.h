/* The allocator ledger: replays a step's tensor events through the simulated
 * CUDA caching allocator (caching_allocator.h) and reports what
 * torch.cuda.memory_stats() would: the allocated, active and reserved peaks,
 * and whether a card of a given capacity runs out (the allocator's own
 * free-and-retry path first). Frees through record_stream stay active until
 * the next SYNC event. Anonymous events (the profiles that emit byte counts
 * rather than tensors) are replayed as blocks freed last-in first-out per
 * category. */
#ifndef EST_ALLOCATOR_LEDGER_H
#define EST_ALLOCATOR_LEDGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "caching_allocator.h"
#include "events.h"

typedef struct est_alloc_replay {
    int64_t peak_allocated_bytes; /* allocated_bytes.all.peak (blocks, rounded) */
    int64_t peak_active_bytes;    /* active_bytes.all.peak */
    int64_t peak_reserved_bytes;  /* reserved_bytes.all.peak */
    size_t reserved_peak_moment;  /* the moment (index among MOMENT events) in which the
                                     reserved peak was reached */
    bool oom;                     /* a malloc failed under cfg->capacity_bytes */
    int64_t oom_request_bytes;    /* its tensor's bytes */
    size_t oom_moment;            /* the moment it happened in */
    int64_t num_alloc_retries;    /* mallocs that had to empty the cache first */
    bool capacity_reached;        /* cfg->capacity_bytes refused a segment (or pages) at least
                                     once. When it did not, the replay is the one without a
                                     capacity: without expandable segments its peaks are the
                                     roomy card's (with them, device_bytes must agree too) */
} est_alloc_replay;

/* Replays `st` through an allocator configured by `cfg`. 0, or -1 with a
 * one-line message (out of host memory). An out-of-memory on the simulated
 * card is not an error: out->oom says so. */
int est_allocator_ledger(const est_step *st, const est_alloc_config *cfg, est_alloc_replay *out,
                         char *err, size_t errlen);

/* The same, for a verdict: the replay ends at the first out-of-memory (out->oom;
 * the peaks and counts are those reached until then). */
int est_allocator_ledger_until_oom(const est_step *st, const est_alloc_config *cfg,
                                   est_alloc_replay *out, char *err, size_t errlen);

/* A replayer keeps its allocator's and its tensors' host buffers from one replay
 * to the next (an estimate replays two or three times, a search thousands). */
typedef struct est_replayer est_replayer;
est_replayer *est_replayer_new(void); /* NULL out of memory */
void est_replayer_free(est_replayer *p);
/* est_allocator_ledger (until_oom: est_allocator_ledger_until_oom) with p's buffers. */
int est_replayer_run(est_replayer *p, const est_step *st, const est_alloc_config *cfg, bool until_oom,
                     est_alloc_replay *out, char *err, size_t errlen);

#endif
