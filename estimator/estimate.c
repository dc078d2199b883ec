#include "estimate.h"
#include "tp.h"

#include <math.h>
#include <string.h>

#include "allocator_ledger.h"
#include "cublas_ws.h"
#include "device_mem.h"
#include "deepspeed_estimator.h"
#include "fw_registry.h"
#include "json_util.h"
#include "memory_ledger.h"
#include "profiles.h"
#include "step_build.h"

void est_estimate_init(est_estimate *e) {
    memset(e, 0, sizeof *e);
    est_step_init(&e->step);
    est_timeline_init(&e->tl);
    e->tight_margin_frac = EST_TIGHT_MARGIN_DEFAULT;
}

void est_estimate_free(est_estimate *e) {
    est_step_free(&e->step);
    est_timeline_free(&e->tl);
    est_replayer_free(e->replayer);
    e->replayer = NULL;
}

/* The caching allocator over e's step (e's replayer keeps the host buffers). */
static int replay_step(est_estimate *e, const est_alloc_config *cfg, bool until_oom, est_alloc_replay *out,
                       char *err, size_t errlen) {
    if (!e->replayer && !(e->replayer = est_replayer_new())) return ft_errorf(err, errlen, "out of memory");
    return est_replayer_run(e->replayer, &e->step, cfg, until_oom, out, err, errlen);
}

int64_t est_host_ram_of(const est_run *run) {
    if (run->host_ram_bytes > 0) return run->host_ram_bytes;
    if (!(run->host_ram_per_gpu_memory > 0)) return 0;
    double b = run->host_ram_per_gpu_memory * (double)run->gpus_per_node * (double)run->gpu.memory_bytes;
    return b >= 9e18 ? INT64_MAX : (int64_t)b;
}

/* a x b saturating at INT64_MAX (the profiles' figures already saturate). */
static int64_t mul_sat(int64_t a, int64_t b) {
    if (a <= 0 || b <= 0) return 0;
    return a > INT64_MAX / b ? INT64_MAX : a * b;
}

/* Host RAM per node: each rank is one process with its own host buffers
 * (pinned optimizer state, offloaded parameters, the model while loading),
 * so the node needs the per-rank figure times the ranks it runs. Loading
 * ends before training starts (the loaded copy is freed once the engine has
 * moved or partitioned it), so the node's peak is the larger of the two. */
static void host_verdict(const est_run *run, est_estimate *e) {
    e->host_train_per_node_bytes = mul_sat(e->cpu_bytes, run->gpus_per_node);
    e->host_load_per_node_bytes = mul_sat(e->cpu_load_bytes, run->gpus_per_node);
    e->host_peak_per_node_bytes = e->host_train_per_node_bytes > e->host_load_per_node_bytes
                                      ? e->host_train_per_node_bytes
                                      : e->host_load_per_node_bytes;
    e->host_ram_bytes = est_host_ram_of(run);
    e->host_fits = e->host_ram_bytes == 0 || e->host_peak_per_node_bytes <= e->host_ram_bytes;
}

/* Less room than `frac` of `capacity` (false when capacity is unknown). */
static bool room_below(int64_t capacity, int64_t used, double frac) {
    if (capacity <= 0) return false;
    return (double)(capacity - used) < frac * (double)capacity;
}

est_verdict est_verdict_of(const est_estimate *e) {
    if (!e->device_fits) return EST_VERDICT_NO_FIT_GPU;
    if (!e->host_fits) return EST_VERDICT_NO_FIT_HOST;
    return e->tight ? EST_VERDICT_TIGHT : EST_VERDICT_FITS;
}

const char *est_verdict_name(est_verdict v) {
    switch (v) {
    case EST_VERDICT_FITS: return "fits";
    case EST_VERDICT_TIGHT: return "tight";
    case EST_VERDICT_NO_FIT_GPU: return "gpu_memory";
    case EST_VERDICT_NO_FIT_HOST: return "host_ram";
    }
    return "?";
}

static void activations_of(const est_run *run, est_activations *a) {
    memset(a, 0, sizeof *a);
    if (!est_fw_of(run)->torch_stack) return;
    a->present = true;
    est_block_saved(run, &a->block_saved);
    est_logits_forward(run, &a->logits_forward);
    est_logits_backward(run, &a->logits_backward);
    a->block_kept_bytes = est_block_kept_bytes(run);
    a->block_backward_working_bytes = est_block_backward_working(run);
    a->final_norm_saved_bytes = est_final_norm_saved(run);
}

/* The allocator the run's stack has, configured as the run sets
 * PYTORCH_CUDA_ALLOC_CONF. */
static int est_alloc_config_of(const est_run *run, est_alloc_config *cfg, char *err, size_t errlen) {
    est_alloc_config_default(cfg);
    if (est_alloc_version_parse(run->stack->torch, &cfg->torch_version, err, errlen) < 0) return -1;
    cfg->expandable_segments = run->expandable_segments;
    return 0;
}

/* The caching allocator over the step: the reserved peak on a card with room
 * to spare, and, when that exceeds this card, the step again under the card's
 * capacity (the allocator empties its cache before it gives up): the verdict
 * is that replay's. ftrain's arena is its own allocator: reserved = allocated. */
static int allocator_of(const est_run *run, est_estimate *e, char *err, size_t errlen) {
    e->peak_active_bytes = e->peak_reserved_bytes = e->peak_allocated_bytes;
    e->reserved_peak_index = e->peak_index;
    e->allocator_pressure = false;
    e->pressured_reserved_bytes = e->alloc_retries = 0;
    const int64_t context = e->breakdown[EST_CAT_CONTEXT];
    bool oom = false;
    /* What is allocated alone already exceeds the card: reserved cannot be
     * less, and a search need not replay the allocator to know it. */
    const bool hopeless = e->capacity_bytes > 0 && e->peak_allocated_bytes + context > e->capacity_bytes;
    if (est_fw_of(run)->caching_allocator && !hopeless) {
        est_alloc_config cfg;
        if (est_alloc_config_of(run, &cfg, err, errlen) < 0) return -1;
        est_alloc_replay r;
        if (replay_step(e, &cfg, false, &r, err, errlen) < 0) return -1;
        e->peak_active_bytes = r.peak_active_bytes;
        e->peak_reserved_bytes = r.peak_reserved_bytes;
        e->reserved_peak_index = r.reserved_peak_moment;
        const int64_t capacity = e->capacity_bytes - context;
        e->allocator_pressure = e->capacity_bytes > 0 && r.peak_reserved_bytes > capacity;
        if (e->allocator_pressure) {
            cfg.capacity_bytes = capacity > 0 ? capacity : 1;
            cfg.device_bytes = e->capacity_bytes;
            est_alloc_replay p;
            if (replay_step(e, &cfg, false, &p, err, errlen) < 0) return -1;
            oom = p.oom;
            e->alloc_retries = p.num_alloc_retries;
            e->pressured_reserved_bytes = p.peak_reserved_bytes;
        }
    }
    /* On a card smaller than the roomy reserved peak, what the device holds is
     * what the allocator reserves under that card's capacity. */
    e->device_used_bytes = (e->allocator_pressure && !oom ? e->pressured_reserved_bytes
                                                          : e->peak_reserved_bytes) + context;
    e->breakdown[EST_CAT_ALLOCATOR] = e->device_used_bytes - context - e->peak_allocated_bytes;
    e->device_fits = e->capacity_bytes > 0 && !oom && !hopeless &&
                     (e->allocator_pressure || e->device_used_bytes <= e->capacity_bytes);
    return 0;
}

int64_t est_estimate_reserved_on_card(const est_estimate *e) {
    return e->allocator_pressure && e->device_fits ? e->pressured_reserved_bytes : e->peak_reserved_bytes;
}

int est_device_fits_figures(int64_t allocated_bytes, int64_t reserved_bytes, int64_t context_bytes,
                            const est_run *run, int64_t capacity_bytes) {
    if (capacity_bytes <= 0 || allocated_bytes + context_bytes > capacity_bytes) return 0;
    if (reserved_bytes + context_bytes <= capacity_bytes || !est_fw_of(run)->caching_allocator) return 1;
    return -1;
}

bool est_estimate_device_fits_on(const est_estimate *e, const est_run *run, int64_t capacity_bytes) {
    const int64_t context = e->breakdown[EST_CAT_CONTEXT];
    const int v = est_device_fits_figures(e->peak_allocated_bytes, e->peak_reserved_bytes, context, run,
                                          capacity_bytes);
    if (v >= 0) return v == 1;
    est_alloc_config cfg;
    if (est_alloc_config_of(run, &cfg, NULL, 0) < 0) return false;
    cfg.capacity_bytes = capacity_bytes - context;
    cfg.device_bytes = capacity_bytes;
    est_alloc_replay p;
    return est_allocator_ledger_until_oom(&e->step, &cfg, &p, NULL, 0) == 0 && !p.oom;
}

/* The time ledger over the same step, booking each unit on its moment. With
 * batches of many lengths (seq_mean: dynamic padding) the time is that of a
 * step of the mean padded length, built again; the memory stays the longest
 * batch's (docs/method.md, "Sequences of many lengths"). */
static void time_of(const est_run *run, est_estimate *e) {
    est_constants own;
    const est_constants *k = est_time_constants(run, &e->k, &own);
    const int64_t mean = (int64_t)llround(run->seq_mean);
    if (run->seq_mean > 0 && mean < run->seq_len) {
        est_run r = *run;
        r.seq_len = mean > 0 ? mean : 1;
        r.seq_mean = 0;
        est_step st;
        est_step_init(&st);
        char err[256];
        if (est_step_build(&r, &e->k, &st, err, sizeof err) == 0) {
            /* the same modules and spans: its moments are the timeline's */
            est_timeline *tl = st.moments == e->step.moments ? &e->tl : NULL;
            est_time_ledger(&r, &st, k, &e->time, tl);
            est_step_free(&st);
            /* each rank counts its own batch's tokens; the step waits for the longest rank's */
            if (run->seq_tokens_mean > 0) {
                const double share = run->seq_tokens_mean / (double)r.seq_len;
                e->time.tokens_per_s *= share;
                e->time.mfu *= share;
            }
            e->step_time_s = e->time.step_s;
            e->tokens_per_s = e->time.tokens_per_s;
            e->it_per_s = e->time.it_per_s;
            e->mfu = e->time.mfu;
            return;
        }
        est_step_free(&st);
    }
    est_time_ledger(run, &e->step, k, &e->time, &e->tl);
    e->step_time_s = e->time.step_s;
    e->tokens_per_s = e->time.tokens_per_s;
    e->it_per_s = e->time.it_per_s;
    e->mfu = e->time.mfu;
}

int est_estimate_constants(const est_run *run, est_constants *k, char *err, size_t errlen) {
    if (!est_fw_of(run)->caching_allocator) {
        est_constants_defaults(k); /* ftrain's arena has no context or reserve */
        for (int i = 0; i < EST_K_COUNT; i++) k->value[i] = 0;
        return 0;
    }
    if (est_constants_for(est_framework_name(run->framework), run->gpu.name, k, err, errlen) < 0) return -1;
    est_cublas_workspace_in_force(&run->gpu, k); /* per GPU unless a profile sets it */
    est_cuda_context_in_force(&run->gpu, k);     /* the same: device_mem.h */
    if (!run->fake_process_group) {
        const int comms = est_fw_of(run)->nccl_communicators;
        est_nccl_in_force(&run->gpu, run->gpus_per_node, run->nodes, comms > 0 ? comms : 1, k);
    }
    return 0;
}

int est_estimate_step(const est_run *run, est_estimate *e, char *err, size_t errlen) {
    if (est_run_validate(run, err, errlen) < 0) return -1;
    if (est_estimate_constants(run, &e->k, err, errlen) < 0) return -1;
    return est_step_build(run, &e->k, &e->step, err, errlen);
}

int est_estimate_replay(est_estimate *e, const est_run *run, int64_t capacity_bytes,
                        bool until_oom, est_alloc_replay *out, char *err, size_t errlen) {
    est_alloc_config cfg;
    if (est_alloc_config_of(run, &cfg, err, errlen) < 0) return -1;
    if (capacity_bytes > 0) {
        const int64_t room = capacity_bytes - (int64_t)llround(e->k.value[EST_K_CUDA_CONTEXT_BYTES]);
        cfg.capacity_bytes = room > 0 ? room : 1;
        cfg.device_bytes = capacity_bytes;
    }
    return replay_step(e, &cfg, until_oom, out, err, errlen);
}

int est_estimate_run(const est_run *run, est_estimate *e, char *err, size_t errlen) {
    est_run local; /* a tensor-parallel rank's view of the model (tp.h) */
    if (est_run_validate(run, err, errlen) < 0) return -1;
    run = est_tp_view(run, &local);
    if (est_estimate_step(run, e, err, errlen) < 0) return -1;
    if (est_memory_ledger(&e->step, &e->tl, err, errlen) < 0) return -1;
    if (e->tl.count == 0) return ft_errorf(err, errlen, "the profile produced no moments");

    e->peak_index = est_timeline_peak(&e->tl);
    const est_phase *peak = &e->tl.phases[e->peak_index];
    e->peak_allocated_bytes = est_phase_allocated(peak);
    memcpy(e->breakdown, peak->bytes, sizeof e->breakdown);
    est_timeline_category_peaks(&e->tl, e->category_peak);
    e->after_step_bytes = est_timeline_after_step(&e->tl);

    e->breakdown[EST_CAT_CONTEXT] = (int64_t)llround(e->k.value[EST_K_CUDA_CONTEXT_BYTES]);
    e->cpu_bytes = e->tl.cpu_bytes;
    e->cpu_load_bytes = e->tl.cpu_load_bytes;
    e->rank_spread_bytes = e->tl.rank_spread_bytes;
    e->capacity_bytes = run->gpu.memory_bytes;
    if (allocator_of(run, e, err, errlen) < 0) return -1;
    host_verdict(run, e);
    e->fits = e->device_fits && e->host_fits;
    e->tight = e->fits && ((e->allocator_pressure && e->tight_margin_frac > 0) ||
                           room_below(e->capacity_bytes, e->device_used_bytes, e->tight_margin_frac) ||
                           room_below(e->host_ram_bytes, e->host_peak_per_node_bytes,
                                      e->tight_margin_frac));
    time_of(run, e);
    activations_of(run, &e->activations);
    e->deepspeed_bytes = est_deepspeed_figure(run, &e->deepspeed_function);
    e->deepspeed_not_comparable = est_deepspeed_not_comparable(run);
    return 0;
}

double est_hours_for_tokens(const est_estimate *e, double tokens) {
    if (!(e->tokens_per_s > 0) || !(tokens > 0) || !(e->step_time_s > 0)) return 0;
    /* Training moves in whole optimizer steps: a step holding more tokens
     * than asked for still takes its whole time. */
    const double per_step = e->tokens_per_s * e->step_time_s;
    return ceil(tokens / per_step) * e->step_time_s / 3600.0;
}
