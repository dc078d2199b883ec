/* The usual strategies people try, evaluated side by side, and the one ftest
 * recommends: the fastest that fits with the run's tight margin to spare
 * (est_run.tight_margin_frac), by the time model (timing.c); where the device
 * has no time model, the order of the list, which follows the extra work each
 * option adds (recompute ~1/3 more compute, offload the PCIe round trips).
 * Only when every strategy that fits is tight is the fastest tight one
 * recommended, and it says so. */
#ifndef EST_STRATEGY_H
#define EST_STRATEGY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "estimate.h"
#include "gpu.h"
#include "run.h"

typedef struct est_strategy {
    char label[32];                /* "ZeRO-2 + offload + ckpt" */
    est_framework framework;
    int zero;
    est_offload offload;
    est_checkpointing checkpointing;
} est_strategy;

#define EST_MAX_STRATEGIES 16

/* The alternatives for a framework (deepspeed: DDP via hf, then ZeRO 1-3 with
 * and without checkpointing and offload; fsdp: its three sharding modes; hf and
 * ftrain: with and without checkpointing). Returns the count. */
size_t est_strategies(est_framework fw, est_strategy out[EST_MAX_STRATEGIES]);
/* The same for a run: FSDP2 runs get fully_shard's reshard choices
 * (fw_registry.h est_fw_strategies_of_run). */
size_t est_strategies_of_run(const est_run *base, est_strategy out[EST_MAX_STRATEGIES]);

/* Copies `base` and applies the strategy's options. */
void est_strategy_apply(const est_strategy *s, const est_run *base, est_run *out);

/* One GPU per memory size, the common rental of that size, with a column
 * label: "would this strategy fit on that GPU instead?" */
#define EST_FIT_GPU_COUNT 6
extern const char *const est_fit_gpu_names[EST_FIT_GPU_COUNT];
extern const char *const est_fit_gpu_labels[EST_FIT_GPU_COUNT];

typedef struct est_alternative {
    est_strategy strategy;
    bool valid;                    /* false when the combination is not possible */
    char why[160];                 /* the reason, when invalid */
    int64_t peak_allocated_bytes;
    int64_t device_used_bytes;
    int64_t cpu_bytes;
    bool fits;
    bool tight;                    /* fits, with less room than the run's tight margin */
    double step_time_s;            /* estimated seconds per optimizer step (0: not modelled) */
    double tokens_per_s;           /* all ranks */
    /* The estimate's figures the GPU columns reuse (est_alternatives_fit_gpus). */
    int64_t reserved_bytes;        /* the reserved peak on a roomy card */
    int64_t context_bytes;         /* the CUDA context */
    int64_t host_peak_per_node_bytes;
    bool gpu_known[EST_FIT_GPU_COUNT]; /* est_fit_gpu_names[g] is in the catalog */
    bool fits_on[EST_FIT_GPU_COUNT];   /* fits on as many of that GPU instead */
    bool tight_on[EST_FIT_GPU_COUNT];  /* ... but with less room than the tight margin */
} est_alternative;

/* Estimates every strategy for `base`; returns the count written. */
size_t est_evaluate_strategies(const est_run *base, est_alternative out[EST_MAX_STRATEGIES]);

/* Fills each valid alternative's fits_on: the same strategy on the same
 * number of each est_fit_gpu_names GPU found in `cat`. `alts` are what
 * est_evaluate_strategies made of `base`: their figures settle most cards; a
 * step is built again only for a card where the allocator must be replayed
 * within it. */
void est_alternatives_fit_gpus(const est_run *base, est_alternative *alts, size_t n,
                               const est_gpu_catalog *cat);

/* Index of the recommended alternative: the fastest that fits and is not
 * tight, else the fastest that fits (tight), or -1 when none fits. */
int est_recommend(const est_alternative *alts, size_t n);

/* Index of the valid alternative needing the least device memory (what to
 * show when nothing fits), or -1 when none is valid. */
int est_least_memory(const est_alternative *alts, size_t n);

#endif
