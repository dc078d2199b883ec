#include "estimate.h"

#include <math.h>
#include <string.h>

#include "json_util.h"
#include "profile_ftrain.h"
#include "profiles.h"
#include "timing.h"

void est_estimate_init(est_estimate *e) {
    memset(e, 0, sizeof *e);
    est_timeline_init(&e->tl);
}

void est_estimate_free(est_estimate *e) { est_timeline_free(&e->tl); }

static int build(const est_run *run, const est_constants *k, est_timeline *tl, char *err,
                 size_t errlen) {
    switch (run->framework) {
    case EST_FW_FTRAIN: return est_timeline_ftrain(run, tl, err, errlen);
    case EST_FW_HF: return est_timeline_hf(run, k, tl, err, errlen);
    case EST_FW_DEEPSPEED: return est_timeline_deepspeed(run, k, tl, err, errlen);
    case EST_FW_FSDP: return est_timeline_fsdp(run, k, tl, err, errlen);
    }
    return ft_errorf(err, errlen, "unknown framework");
}

int est_estimate_run(const est_run *run, est_estimate *e, char *err, size_t errlen) {
    if (est_run_validate(run, err, errlen) < 0) return -1;
    if (run->framework == EST_FW_FTRAIN) {
        est_constants_defaults(&e->k); /* ftrain's arena has no context or reserve */
        for (int i = 0; i < EST_K_COUNT; i++) e->k.value[i] = 0;
    } else if (est_constants_for(run->framework, run->gpu.name, &e->k, err, errlen) < 0) {
        return -1;
    }
    est_timeline_clear(&e->tl);
    if (build(run, &e->k, &e->tl, err, errlen) < 0) return -1;
    if (e->tl.count == 0) return ft_errorf(err, errlen, "the profile produced no moments");

    e->peak_index = est_timeline_peak(&e->tl);
    const est_phase *peak = &e->tl.phases[e->peak_index];
    e->peak_allocated_bytes = est_phase_allocated(peak);
    memcpy(e->breakdown, peak->bytes, sizeof e->breakdown);
    est_timeline_category_peaks(&e->tl, e->category_peak);

    double frac = e->k.value[EST_K_ALLOC_RESERVE_FRAC];
    e->breakdown[EST_CAT_ALLOCATOR] = (int64_t)llround((double)e->peak_allocated_bytes * frac);
    e->breakdown[EST_CAT_CONTEXT] = (int64_t)llround(e->k.value[EST_K_CUDA_CONTEXT_BYTES]);
    e->peak_reserved_bytes = e->peak_allocated_bytes + e->breakdown[EST_CAT_ALLOCATOR];
    e->device_used_bytes = e->peak_reserved_bytes + e->breakdown[EST_CAT_CONTEXT];
    e->cpu_bytes = e->tl.cpu_bytes;
    e->cpu_load_bytes = e->tl.cpu_load_bytes;
    e->rank_spread_bytes = e->tl.rank_spread_bytes;
    e->capacity_bytes = run->gpu.memory_bytes;
    e->fits = e->capacity_bytes > 0 && e->device_used_bytes <= e->capacity_bytes;
    est_time_fill(run, e); /* step time from the same timeline (timing.c) */
    return 0;
}
