/* zero3_pending_free_heads: how much of a ZeRO-3 rank's active memory at its
 * peak is freed-but-pending, in units of the largest gathered tensor.
 *
 * DeepSpeed's stage 3 frees gathered parameters and gradients after
 * record_stream on its side streams (partition_parameters.py free_param,
 * stage3.py __add_grad_to_ipg_bucket and partition_grads, 0.14.2); PyTorch's
 * caching allocator keeps such a block active until the recorded stream passes
 * the free. The amount depends on how far each rank's host runs ahead of its
 * GPU, so it is measured, not derived: the largest rank's active peak minus the
 * allocated peak the timeline derives, over the multi-rank ZeRO-3 records. The
 * term is additive and the same at every moment, so the residual of the
 * current estimate plus the value in force is the value that zeroes it. */
#include <stdlib.h>

#include "estimate.h"
#include "fit.h"
#include "fw_registry.h"
#include "json_util.h"
#include "profiles.h"

/* Real multi-rank runs of the active peak only. A pending free is active, not
 * allocated (PyTorch lowers allocated_bytes at the free, before insert_events),
 * and ftest check compares an allocated peak without it; and a rank emulated
 * on a fake process group (the GPU day's probe) has collectives that return at
 * once, so nothing waits on a side stream there. */
static bool applies(const est_record *r) {
    if (!est_fw_stream_ordered_frees(&r->run) || r->oom || r->rank_count == 0 || r->rank_emulated) return false;
    for (size_t i = 0; i < r->rank_count; i++)
        if (r->ranks[i].peak_allocated_bytes >= 0) return false;
    return true;
}

static int64_t largest_rank_peak(const est_record *r) {
    int64_t best = 0;
    for (size_t i = 0; i < r->rank_count; i++) {
        int64_t p = est_record_peak(&r->ranks[i]);
        if (p > best) best = p;
    }
    return best;
}

int cal_fit_zero3_pending(const cal_group *g, cJSON *section, FILE *log, char *err, size_t errlen) {
    double *v = malloc((g->count ? g->count : 1) * sizeof *v);
    if (!v) return ft_errorf(err, errlen, "out of memory");
    est_estimate e;
    est_estimate_init(&e);
    size_t n = 0;
    int rc = 0;
    for (size_t i = 0; i < g->count && rc == 0; i++) {
        const est_record *r = g->records[i];
        if (!applies(r)) continue;
        if (est_estimate_run(&r->run, &e, err, errlen) < 0) {
            rc = -1;
            break;
        }
        est_params p;
        est_run_params(&r->run, &p);
        const double head = (double)(p.lm_head ? p.lm_head : p.embedding) *
                            (double)est_compute_dtype_bytes(r->run.precision);
        const double now = e.k.value[EST_K_ZERO3_PENDING_FREE_HEADS];
        v[n++] = now + ((double)largest_rank_peak(r) - (double)e.peak_active_bytes) / head;
    }
    est_estimate_free(&e);
    if (rc == 0 && n > 0) {
        cal_sort(v, n);
        double med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
        /* two decimals: the estimate depends on the constant in force only to
         * within the allocator's rounding, so a refit reproduces the same value */
        med = (double)(int64_t)(med * 1e2 + (med >= 0 ? 0.5 : -0.5)) / 1e2;
        char src[160];
        snprintf(src, sizeof src,
                 "ftest fit: median (largest-rank active - estimated active)/LM head of %zu "
                 "ZeRO-3 multi-rank records (%.50s)", n, g->files);
        cal_put(section, "zero3_pending_free_heads", med, src);
        fprintf(log, "  %s: zero3_pending_free_heads = %.3f from %zu multi-rank ZeRO-3 records\n",
                g->gpu ? g->gpu : "all GPUs", med, n);
    }
    free(v);
    return rc;
}

int cal_fit_deepspeed(const cal_group *g, cJSON *section, FILE *log, char *err, size_t errlen) {
    if (cal_fit_time(g, section, log, err, errlen) < 0) return -1;
    return cal_fit_zero3_pending(g, section, log, err, errlen);
}
