/* cuda_step_images_bytes: what a framework's process holds on the device
 * outside the caching allocator beyond what the sources give (device_mem.h):
 * the context's fixed state and the module images (lazily loaded kernels of
 * torch, cuBLAS, NCCL and the framework's extensions) its step loads. */
#include <math.h>
#include <stdio.h>

#include "device_mem.h"
#include "fitters.h"

/* A record's lower bound on that part: device used (cudaMemGetInfo's total -
 * free after the run) less the reserved peak (at least what was reserved
 * then) less the sourced context of its GPU; -1 when the record lacks one. */
static int64_t images_bound(const est_record *r) {
    int64_t best = -1;
    if (r->oom) return -1;
    for (size_t i = 0; i < r->rank_count; i++) {
        const est_rank_measure *m = &r->ranks[i];
        if (m->device_used_bytes < 0 || m->peak_reserved_bytes < 0) continue;
        const int64_t b = m->device_used_bytes - m->peak_reserved_bytes - est_cuda_context_sourced_bytes(&r->run.gpu);
        if (b > best) best = b;
    }
    return best;
}

/* One value per framework for every GPU: the largest lower bound over its
 * records (a process of that framework was seen to hold that much), in whole
 * MiB. The module images do not depend on the card's size; what does (the
 * local memory) is in the sourced part. */
int cal_fit_context(const cal_group *g, cJSON *section, FILE *log, char *err, size_t errlen) {
    (void)err;
    (void)errlen;
    if (g->gpu) return 0;
    int64_t best = -1;
    size_t n = 0;
    for (size_t i = 0; i < g->count; i++) {
        const int64_t b = images_bound(g->records[i]);
        if (b < 0) continue;
        n++;
        if (b > best) best = b;
    }
    if (n == 0 || best <= 0) return 0;
    const double mib = ceil((double)best / (1 << 20));
    char src[160];
    snprintf(src, sizeof src, "ftest fit: largest device used - reserved peak - sourced context over %zu records (%.60s)",
             n, g->files);
    cal_put(section, "cuda_step_images_bytes", mib * (1 << 20), src);
    fprintf(log, "  all GPUs: cuda_step_images_bytes = %.0f MiB from %zu records\n", mib, n);
    return 0;
}
