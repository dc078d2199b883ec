#include "strategy.h"

#include <string.h>

#include "fw_registry.h"
#include "json_util.h"

static void put(est_strategy *out, size_t *n, const char *label, est_framework fw, int zero,
                est_offload off, est_checkpointing ckpt) {
    est_strategy *s = &out[(*n)++];
    ft_strlcpy(s->label, label, sizeof s->label);
    s->framework = fw;
    s->zero = zero;
    s->offload = off;
    s->checkpointing = ckpt;
}

static size_t list_of(const est_fw_strategy *s, est_strategy out[EST_MAX_STRATEGIES]) {
    size_t n = 0;
    for (; s->label && n < EST_MAX_STRATEGIES; s++)
        put(out, &n, s->label, s->framework, s->zero, s->offload, s->checkpointing);
    return n;
}

size_t est_strategies(est_framework fw, est_strategy out[EST_MAX_STRATEGIES]) {
    return list_of(est_fw_info_of(fw)->strategies, out);
}

size_t est_strategies_of_run(const est_run *base, est_strategy out[EST_MAX_STRATEGIES]) {
    return list_of(est_fw_strategies_of_run(base), out);
}

void est_strategy_apply(const est_strategy *s, const est_run *base, est_run *out) {
    *out = *base;
    out->framework = s->framework;
    out->zero_stage = s->zero;
    out->offload = s->offload;
    out->checkpointing = s->checkpointing;
    /* Flash attention is ftrain's only memory-efficient kernel; sdpa elsewhere. */
    if (out->attention == EST_ATTN_SDPA && !est_fw_has(out, EST_FEAT_SDPA))
        out->attention = EST_ATTN_FLASH;
}

const char *const est_fit_gpu_names[EST_FIT_GPU_COUNT] = {
    "rtx4090-24gb", "a100-40gb", "l40s-48gb", "h100-80gb", "h200-141gb", "b200-180gb"};
const char *const est_fit_gpu_labels[EST_FIT_GPU_COUNT] = {"4090", "A100/40", "L40S",
                                                           "H100", "H200",    "B200"};

/* Does alternative a (of `run`; its step in e once built, `built` says) fit
 * the card of `on`? */
static bool fits_on_card(const est_alternative *a, const est_run *run, const est_run *on, est_estimate *e,
                         bool *built) {
    const int64_t cap = on->gpu.memory_bytes;
    const int v = est_device_fits_figures(a->peak_allocated_bytes, a->reserved_bytes, a->context_bytes, on, cap);
    if (v >= 0) return v == 1;
    /* between the allocated and the roomy reserved peak: the step again, the
     * allocator within this card (the figures are the estimate's) */
    char err[160] = "";
    if (!*built && est_estimate_step(run, e, err, sizeof err) < 0) return false;
    *built = true;
    e->peak_allocated_bytes = a->peak_allocated_bytes;
    e->peak_reserved_bytes = a->reserved_bytes;
    e->breakdown[EST_CAT_CONTEXT] = a->context_bytes;
    return est_estimate_device_fits_on(e, on, cap);
}

void est_alternatives_fit_gpus(const est_run *base, est_alternative *alts, size_t n,
                               const est_gpu_catalog *cat) {
    est_estimate e;
    est_estimate_init(&e);
    for (size_t i = 0; i < n; i++) {
        /* The step's memory does not depend on the card: its figures, then
         * each card's capacity (the allocator replayed only where it decides). */
        est_run run;
        est_strategy_apply(&alts[i].strategy, base, &run);
        bool built = false;
        for (size_t g = 0; g < EST_FIT_GPU_COUNT; g++) {
            const est_gpu *gpu = est_gpu_find(cat, est_fit_gpu_names[g]);
            alts[i].gpu_known[g] = gpu != NULL;
            alts[i].fits_on[g] = false;
            if (!gpu || !alts[i].valid) continue;
            est_run on = run;
            on.gpu = *gpu;
            const int64_t host = est_host_ram_of(&on);
            alts[i].fits_on[g] = fits_on_card(&alts[i], &run, &on, &e, &built) &&
                                 (host == 0 || alts[i].host_peak_per_node_bytes <= host);
            /* tight there: the allocator's pressure path, or less room than the margin */
            const double used = (double)(alts[i].reserved_bytes + alts[i].context_bytes);
            alts[i].tight_on[g] = alts[i].fits_on[g] &&
                                  used > (1.0 - on.tight_margin_frac) * (double)gpu->memory_bytes;
        }
    }
    est_estimate_free(&e);
}

size_t est_evaluate_strategies(const est_run *base, est_alternative out[EST_MAX_STRATEGIES]) {
    est_strategy list[EST_MAX_STRATEGIES];
    size_t n = est_strategies_of_run(base, list);
    est_estimate e;
    est_estimate_init(&e);
    e.tight_margin_frac = base->tight_margin_frac;
    for (size_t i = 0; i < n; i++) {
        est_alternative *a = &out[i];
        memset(a, 0, sizeof *a);
        a->strategy = list[i];
        est_run run;
        est_strategy_apply(&list[i], base, &run);
        if (est_estimate_run(&run, &e, a->why, sizeof a->why) < 0) continue;
        a->valid = true;
        a->peak_allocated_bytes = e.peak_allocated_bytes;
        a->device_used_bytes = e.device_used_bytes;
        a->cpu_bytes = e.cpu_bytes;
        a->fits = e.fits;
        a->tight = e.tight;
        a->step_time_s = e.step_time_s;
        a->tokens_per_s = e.tokens_per_s;
        a->reserved_bytes = e.peak_reserved_bytes;
        a->context_bytes = e.breakdown[EST_CAT_CONTEXT];
        a->host_peak_per_node_bytes = e.host_peak_per_node_bytes;
    }
    est_estimate_free(&e);
    return n;
}

int est_recommend(const est_alternative *alts, size_t n) {
    /* The fastest that fits with the margin to spare; a tight fit only when
     * every fit is tight (issue 20, item 15: 8 x A100-40GB in fp16 was
     * recommended ZeRO-3, then called tight, while roomier strategies fit).
     * Ties and unmodelled times keep the list order. */
    int best = -1;
    for (int pass = 0; pass < 2 && best < 0; pass++)
        for (size_t i = 0; i < n; i++) {
            if (!alts[i].valid || !alts[i].fits || (pass == 0 && alts[i].tight)) continue;
            if (best < 0 || (alts[i].step_time_s > 0 && alts[best].step_time_s > 0 &&
                             alts[i].step_time_s < alts[best].step_time_s))
                best = (int)i;
        }
    return best;
}

int est_least_memory(const est_alternative *alts, size_t n) {
    int best = -1;
    for (size_t i = 0; i < n; i++)
        if (alts[i].valid && (best < 0 || alts[i].device_used_bytes < alts[best].device_used_bytes))
            best = (int)i;
    return best;
}
