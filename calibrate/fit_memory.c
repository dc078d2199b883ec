/* Memory constants fitted from records.
 *
 * allocator_reserve_frac: how much the caching allocator holds beyond what is
 * allocated when memory is short. Far from capacity PyTorch keeps freed blocks
 * cached (reserved/allocated of 1.2-1.4 in the Qwen1.5-0.5B sweeps), but an
 * allocation that fails first frees the cache and retries
 * (c10/cuda/CUDACachingAllocator.cpp, release_cached_blocks), so what decides
 * an OOM is the reserve of runs under pressure. The fit is the median of
 * reserved/allocated - 1 over the records whose reserved peak came within 15%
 * of the GPU's capacity. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fit.h"
#include "json_util.h"

#define PRESSURE_FRACTION 0.85

int cal_fit_memory(const cal_group *g, cJSON *section, FILE *log, char *err, size_t errlen) {
    double *ratios = malloc((g->count ? g->count : 1) * sizeof *ratios);
    if (!ratios) return ft_errorf(err, errlen, "out of memory");
    size_t n = 0;
    for (size_t i = 0; i < g->count; i++) {
        const est_record *r = g->records[i];
        if (r->oom || r->rank_count == 0 || r->run.gpu.memory_bytes <= 0) continue;
        const est_rank_measure *m = &r->ranks[0];
        int64_t peak = est_record_peak(m);
        if (m->peak_reserved_bytes <= 0 || peak <= 0) continue;
        if ((double)m->peak_reserved_bytes < PRESSURE_FRACTION * (double)r->run.gpu.memory_bytes)
            continue;
        ratios[n++] = (double)m->peak_reserved_bytes / (double)peak - 1.0;
    }
    if (n > 0) {
        cal_sort(ratios, n);
        double med = n % 2 ? ratios[n / 2] : 0.5 * (ratios[n / 2 - 1] + ratios[n / 2]);
        med = round(med * 1e4) / 1e4;
        char src[160];
        snprintf(src, sizeof src,
                 "ftest fit: median reserved/allocated-1 of %zu records within %.0f%% of capacity (%.60s)",
                 n, 100 * (1 - PRESSURE_FRACTION), g->files);
        cal_put(section, "allocator_reserve_frac", med, src);
        fprintf(log, "  %s: allocator_reserve_frac = %.4f from %zu records under memory pressure\n",
                g->gpu ? g->gpu : "all GPUs", med, n);
    }
    free(ratios);
    return 0;
}
