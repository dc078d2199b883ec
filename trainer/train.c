#include "train.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cpus.h"
#include "data.h"
#include "grad_dump.h"
#include "init.h"
#include "json_util.h"
#include "model.h"
#include "optim.h"
#include "parallel.h"
#include "zero.h"

typedef struct run_ctx {
    /* Start gate: rank threads wait here until all of them exist, so a failed
     * thread start can send the others home before any collective. */
    pthread_mutex_t gate_mu;
    pthread_cond_t gate_cv;
    int gate;                   /* 0 closed, 1 go, -1 give up */
    const tr_config *cfg;
    const tr_data *data;
    const tr_init *init;
    tr_rank *ranks;
    tr_result *res;
    double loss_acc[TR_MAX_RANKS];
    double wait_acc[TR_MAX_RANKS]; /* each rank's wait for a CPU during the step (-1 unknown) */
    int threads_per_rank;
    tr_step_observer obs;       /* may be NULL */
    void *obs_ctx;
    int stop;                   /* set by rank 0 between the step's two barriers */
    char stop_msg[256];
    /* A backend or communicator failure, set by any rank (under gate_mu)
     * before the step's first barrier; every rank leaves after it. */
    int failed;
    char fail_msg[300];
    float *dump;                /* (full_numel) fp32: step 1's gradients for --dump-grads, else NULL */
} run_ctx;

typedef struct rank_arg {
    run_ctx *ctx;
    int rank;
} rank_arg;

int64_t tr_physical_memory_bytes(void) {
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
    if (pages <= 0 || size <= 0) return INT64_MAX;
    return (int64_t)pages * (int64_t)size;
}

/* The micro-batch's samples into the rank's staging. A token file that no
 * longer holds a sample (truncated, changed) fails the run: the batch is
 * zeros so this rank still meets the others at every collective of the step,
 * and all of them leave after it (run_fail). */
static int load_batch(const tr_config *cfg, const tr_data *data, tr_rank *r, int64_t step, int64_t micro,
                      char *err, size_t errlen) {
    const int64_t B = cfg->micro_batch, T = cfg->seq_len, BT = B * T;
    int64_t g0 = ((step * cfg->grad_accum + micro) * cfg->ranks + r->rank) * B;
    for (int64_t b = 0; b < B; b++)
        if (tr_data_sample(data, g0 + b, T, r->host_batch + b * T, r->host_batch + BT + b * T, err, errlen)) {
            memset(r->host_batch, 0, 2 * (size_t)BT * sizeof *r->host_batch);
            return -1;
        }
    return 0;
}

static int wait_gate(run_ctx *ctx) {
    pthread_mutex_lock(&ctx->gate_mu);
    while (ctx->gate == 0) pthread_cond_wait(&ctx->gate_cv, &ctx->gate_mu);
    int go = ctx->gate > 0;
    pthread_mutex_unlock(&ctx->gate_mu);
    return go;
}

static void open_gate(run_ctx *ctx, int value) {
    pthread_mutex_lock(&ctx->gate_mu);
    ctx->gate = value;
    pthread_cond_broadcast(&ctx->gate_cv);
    pthread_mutex_unlock(&ctx->gate_mu);
}

static void collect(const tr_rank *r, tr_rank_stats *st);
static void summarize(const tr_config *cfg, tr_result *res);

/* Rank 0, after step `step` (the other ranks wait at a barrier): stop at a
 * non-finite loss or norm, else hand the result so far to the observer. */
static void after_step(run_ctx *ctx, int64_t step) {
    tr_result *res = ctx->res;
    res->steps_done = step + 1;
    if (!isfinite(res->loss[step]) || !isfinite(res->grad_norm[step])) {
        res->nonfinite = true;
        ctx->stop = 1;
        snprintf(ctx->stop_msg, sizeof ctx->stop_msg, "non-finite %s (%g) at step %lld; stopped",
                 isfinite(res->loss[step]) ? "gradient norm" : "loss",
                 isfinite(res->loss[step]) ? res->grad_norm[step] : res->loss[step], (long long)step + 1);
        return;
    }
    if (!ctx->obs) return;
    for (int k = 0; k < ctx->cfg->ranks; k++) collect(&ctx->ranks[k], &res->rank[k]);
    summarize(ctx->cfg, res);
    if (ctx->obs(res, ctx->obs_ctx, ctx->stop_msg, sizeof ctx->stop_msg)) ctx->stop = 1;
}

/* The rank's backend status after the work queued so far: 0, or the first
 * failure recorded in ctx (every rank then leaves at the next barrier). */
static int check_rank(run_ctx *ctx, tr_rank *r) {
    if (!r->be->sync(&r->bctx)) return 0;
    pthread_mutex_lock(&ctx->gate_mu);
    if (!ctx->failed) {
        ctx->failed = 1;
        snprintf(ctx->fail_msg, sizeof ctx->fail_msg, "%s backend: %s", r->be->name, r->bctx.msg);
    }
    pthread_mutex_unlock(&ctx->gate_mu);
    return -1;
}

/* Fails the run with `msg` (the first failure wins); every rank leaves at
 * the step's barrier. */
static void run_fail(run_ctx *ctx, const char *msg) {
    pthread_mutex_lock(&ctx->gate_mu);
    if (!ctx->failed) {
        ctx->failed = 1;
        snprintf(ctx->fail_msg, sizeof ctx->fail_msg, "%s", msg);
    }
    pthread_mutex_unlock(&ctx->gate_mu);
}

static int failed_now(run_ctx *ctx) {
    pthread_mutex_lock(&ctx->gate_mu);
    int f = ctx->failed;
    pthread_mutex_unlock(&ctx->gate_mu);
    return f;
}

static void barrier(tr_rank *r) {
    if (r->comm->ops->barrier(r->comm))
        tr_backend_fail(&r->bctx, "rank %d: barrier failed in the %s communicator", r->rank, r->comm->ops->name);
}

/* Rank 0, after every rank finished step `step`: the step's loss (mean over
 * ranks and micro-batches), norm, rate and time into the result, the progress
 * line, step 1's gradients to --dump-grads (a file not written stops the run),
 * then after_step. */
static void rank0_report(run_ctx *ctx, int64_t step, double norm, double step_s) {
    const tr_config *cfg = ctx->cfg;
    double sum = 0;
    for (int k = 0; k < cfg->ranks; k++) sum += ctx->loss_acc[k];
    tr_result *res = ctx->res;
    res->loss[step] = sum / (double)(cfg->ranks * cfg->grad_accum);
    res->grad_norm[step] = norm;
    res->lr[step] = tr_lr_at(cfg, step);
    res->step_s[step] = step_s;
    double wait = 0;
    for (int k = 0; k < cfg->ranks; k++) wait = ctx->wait_acc[k] < 0 || wait < 0 ? -1 : fmax(wait, ctx->wait_acc[k]);
    res->wait_s[step] = wait;
    if (!cfg->quiet)
        fprintf(stderr, "ftrain: step %lld/%lld  loss %.6f  lr %.3e  norm %.4f  %.1f ms\n", (long long)step + 1,
                (long long)cfg->steps, res->loss[step], res->lr[step], norm, 1e3 * res->step_s[step]);
    if (step == 0 && ctx->dump &&
        tr_grad_dump_write(cfg->dump_grads_path, &ctx->ranks[0].s, ctx->dump, ctx->stop_msg, sizeof ctx->stop_msg)) {
        res->steps_done = step + 1;
        ctx->stop = 1;
        return;
    }
    after_step(ctx, step);
}

/* One optimizer step of rank r: its micro-batches, the gradient reduction and
 * the optimizer, timed between two events (at step 1 with --dump-grads, the
 * copy of the reduced gradients too: step 1 is the warm-up step that the mean
 * step time leaves out). Returns the sum of the
 * micro-batches' mean losses; *norm is the gradient norm before clipping. */
static double rank_step(run_ctx *ctx, tr_rank *r, int64_t step, float scale, tr_event ev[2], double *norm,
                        double *step_s) {
    double acc = 0;
    *step_s = 0;
    const double wait0_s = tr_thread_wait_s();
    r->be->event_record(&r->bctx, &ev[0]);
    for (int64_t m = 0; m < ctx->cfg->grad_accum; m++) {
        char msg[300];
        if (load_batch(ctx->cfg, ctx->data, r, step, m, msg, sizeof msg)) run_fail(ctx, msg);
        acc += tr_rank_micro_batch(r, scale);
    }
    tr_arena_phase(&r->dev, "reduce");
    tr_zero_reduce_grads(r);
    if (step == 0 && ctx->dump) tr_grad_dump_collect(r, ctx->dump);
    tr_arena_phase(&r->dev, "optimizer");
    *norm = tr_optimizer_step(r, step);
    r->be->event_record(&r->bctx, &ev[1]);
    const double wait1_s = tr_thread_wait_s();
    ctx->wait_acc[r->rank] = wait0_s >= 0 && wait1_s >= 0 ? wait1_s - wait0_s : -1;
    r->be->event_elapsed_s(&r->bctx, &ev[0], &ev[1], step_s);
    return acc;
}

static void *rank_main(void *p) {
    rank_arg *a = p;
    run_ctx *ctx = a->ctx;
    if (!wait_gate(ctx)) return NULL;
    const tr_config *cfg = ctx->cfg;
    tr_rank *r = &ctx->ranks[a->rank];
    tr_set_threads(ctx->threads_per_rank);
    tr_rank_init_weights(r, ctx->init);
    const float scale = (float)(1.0 / ((double)cfg->micro_batch * (double)cfg->seq_len *
                                       (double)cfg->grad_accum * (double)cfg->ranks));
    tr_event ev[2];
    bool ev0_ok = !r->be->event_create(&r->bctx, &ev[0]), ev1_ok = ev0_ok && !r->be->event_create(&r->bctx, &ev[1]);
    if (!ev1_ok) tr_backend_fail(&r->bctx, "rank %d: cannot create timing events", r->rank);
    /* Every rank reads ctx->failed only after a barrier, so all of them
     * leave together: none waits at a barrier the others never reach. */
    check_rank(ctx, r);
    barrier(r);
    const bool go = !failed_now(ctx);
    for (int64_t step = 0; step < cfg->steps && go; step++) {
        double norm, step_s;
        double acc = rank_step(ctx, r, step, scale, ev, &norm, &step_s);
        check_rank(ctx, r);
        ctx->loss_acc[a->rank] = acc;
        barrier(r);
        if (failed_now(ctx)) break;
        if (a->rank == 0) rank0_report(ctx, step, norm, step_s);
        barrier(r);
        if (ctx->stop) break;
    }
    if (ev0_ok) r->be->event_destroy(&r->bctx, &ev[0]);
    if (ev1_ok) r->be->event_destroy(&r->bctx, &ev[1]);
    check_rank(ctx, r);
    return NULL;
}

static void collect(const tr_rank *r, tr_rank_stats *st) {
    memcpy(st->peak, r->dev.peak, sizeof st->peak);
    memcpy(st->at_peak, r->dev.at_peak, sizeof st->at_peak);
    st->peak_total = r->dev.peak_total;
    st->reserved = tr_arena_reserved(&r->dev);
    ft_strlcpy(st->peak_phase, r->dev.peak_phase, sizeof st->peak_phase);
    memcpy(st->host_peak, r->host.peak, sizeof st->host_peak);
    st->host_peak_total = r->host.peak_total;
    st->host_reserved = tr_arena_reserved(&r->host);
}

/* Mean step time (the first, warm-up step left out when there are more) and
 * throughput over the steps done so far. */
static void summarize(const tr_config *cfg, tr_result *res) {
    double sum = 0, wait = 0;
    int64_t n = 0;
    for (int64_t i = res->steps_done > 1 ? 1 : 0; i < res->steps_done; i++, n++) {
        sum += res->step_s[i];
        wait = res->wait_s[i] < 0 || wait < 0 ? -1 : wait + res->wait_s[i];
    }
    res->step_time_s = n ? sum / (double)n : 0;
    res->cpu_wait_s = n && wait >= 0 ? wait / (double)n : -1;
    res->it_per_s = res->tokens_per_s = 0;
    if (res->step_time_s > 0) {
        res->it_per_s = 1.0 / res->step_time_s;
        res->tokens_per_s = (double)(cfg->ranks * cfg->grad_accum * cfg->micro_batch * cfg->seq_len) /
                            res->step_time_s;
    }
}

int tr_train(const tr_config *cfg, tr_result *res, char *err, size_t errlen) {
    return tr_train_observed(cfg, res, NULL, NULL, err, errlen);
}

/* The per-step arrays of res, and what is known before the first step. */
static int alloc_results(const tr_config *cfg, const tr_sizes *s, tr_result *res, char *err, size_t errlen) {
    res->steps = cfg->steps;
    res->ranks = cfg->ranks;
    res->params_numel = s->params_numel;
    res->loss = calloc((size_t)cfg->steps, sizeof(double));
    res->grad_norm = calloc((size_t)cfg->steps, sizeof(double));
    res->lr = calloc((size_t)cfg->steps, sizeof(double));
    res->step_s = calloc((size_t)cfg->steps, sizeof(double));
    res->wait_s = calloc((size_t)cfg->steps, sizeof(double));
    res->cpu_wait_s = -1;
    if (!res->loss || !res->grad_norm || !res->lr || !res->step_s || !res->wait_s) {
        tr_result_free(res);
        return ft_errorf(err, errlen, "out of memory for %lld steps of results", (long long)cfg->steps);
    }
    return 0;
}

/* Creates the N ranks (the count that succeeded in *created). The CPU
 * backend's device is this machine's RAM, shared by the ranks. 0, or -1
 * (res->oom set when a rank's arenas did not fit). */
static int create_ranks(const tr_config *cfg, const tr_backend *be, tr_comm *comms, tr_rank *ranks, int *created,
                        tr_result *res, char *err, size_t errlen) {
    const int N = cfg->ranks;
    const int64_t budget = tr_physical_memory_bytes() / N;
    *created = 0;
    for (int k = 0; k < N; k++) {
        bool oom = false;
        if (tr_rank_create(&ranks[k], cfg, be, &comms[k], k, budget, &oom, err, errlen)) {
            res->oom = oom;
            return -1;
        }
        (*created)++;
    }
    return 0;
}

/* The pool's size: --threads, else one per available CPU; printed unless quiet. */
static int pool_threads(const tr_config *cfg) {
    int total = cfg->threads > 0 ? cfg->threads : tr_max_threads();
    if (!cfg->quiet) {
        char cpus[96];
        tr_cpus c = tr_cpus_detect();
        tr_cpus_describe(&c, cpus, sizeof cpus);
        fprintf(stderr, "ftrain: %d thread%s (%s), CPUs available: %s\n", total, total == 1 ? "" : "s",
                cfg->threads > 0 ? "--threads" : "one per available CPU", cpus);
    }
    return total;
}

/* Runs every rank to the end: one rank in this thread, several as threads
 * behind the start gate. 0, or -1 with the first failure or stop message. */
static int run_ranks(run_ctx *ctx, char *err, size_t errlen) {
    const int N = ctx->cfg->ranks;
    const int total = pool_threads(ctx->cfg);
    ctx->threads_per_rank = total / N > 0 ? total / N : 1;
    pthread_mutex_init(&ctx->gate_mu, NULL);
    pthread_cond_init(&ctx->gate_cv, NULL);
    rank_arg args[TR_MAX_RANKS];
    pthread_t tids[TR_MAX_RANKS];
    int started = 0, rc = 0;
    for (int k = 0; k < N; k++) args[k] = (rank_arg){ctx, k};
    if (N == 1) {
        ctx->gate = 1;
        rank_main(&args[0]);
        tr_set_threads(total);
    } else {
        for (int k = 0; k < N && started == k; k++)
            if (!pthread_create(&tids[k], NULL, rank_main, &args[k])) started++;
        open_gate(ctx, started == N ? 1 : -1);
        for (int k = 0; k < started; k++) pthread_join(tids[k], NULL);
        if (started < N) rc = ft_errorf(err, errlen, "cannot start %d rank threads", N);
    }
    pthread_cond_destroy(&ctx->gate_cv);
    pthread_mutex_destroy(&ctx->gate_mu);
    if (!rc && failed_now(ctx)) rc = ft_errorf(err, errlen, "%s", ctx->fail_msg);
    if (!rc && ctx->stop) rc = ft_errorf(err, errlen, "%s", ctx->stop_msg);
    return rc;
}

int tr_train_observed(const tr_config *cfg, tr_result *res, tr_step_observer obs, void *obs_ctx,
                      char *err, size_t errlen) {
    memset(res, 0, sizeof *res);
    if (tr_config_validate(cfg, err, errlen)) return -1;
    const tr_backend *be;
    if (tr_backend_select(cfg->device[0] ? cfg->device : "cpu", &be, err, errlen)) return -1;
    tr_sizes s;
    if (tr_sizes_compute(cfg, &s, err, errlen)) return -1;
    if (alloc_results(cfg, &s, res, err, errlen)) return -1;
    tr_data data;
    tr_init init;
    /* The samples the run reads: their windows are checked before the first
     * step (-1, every token, should the count not fit in 64 bits). */
    int64_t samples = cfg->steps;
    const int64_t factors[3] = {cfg->grad_accum, cfg->ranks, cfg->micro_batch};
    for (int i = 0; i < 3; i++) samples = samples < 0 || samples > INT64_MAX / factors[i] ? -1 : samples * factors[i];
    if (tr_data_open(&data, cfg->data_path, s.V, s.T, samples, cfg->seed, err, errlen)) return -1;
    if (tr_init_open(&init, cfg->init_path, cfg, &s, err, errlen)) {
        tr_data_close(&data);
        return -1;
    }
    const int N = cfg->ranks;
    tr_comm comms[TR_MAX_RANKS];
    memset(comms, 0, sizeof comms);
    tr_rank *ranks = calloc((size_t)N, sizeof *ranks);
    int created = 0, rc = 0;
    if (!ranks) rc = ft_errorf(err, errlen, "out of memory");
    if (!rc && tr_comm_threads_create(N, comms, err, errlen)) rc = -1;
    if (!rc) rc = create_ranks(cfg, be, comms, ranks, &created, res, err, errlen);
    if (!rc) {
        run_ctx ctx;
        memset(&ctx, 0, sizeof ctx);
        ctx.cfg = cfg;
        ctx.data = &data;
        ctx.init = &init;
        ctx.ranks = ranks;
        ctx.res = res;
        ctx.obs = obs;
        ctx.obs_ctx = obs_ctx;
        /* Outside the arenas, as the data loader's staging: only a run that
         * dumps its gradients holds it, and its accounting leaves it out. */
        if (cfg->dump_grads_path[0] && !(ctx.dump = calloc((size_t)s.full_numel, sizeof(float))))
            rc = ft_errorf(err, errlen, "out of memory for --dump-grads (%lld floats)", (long long)s.full_numel);
        if (!rc) rc = run_ranks(&ctx, err, errlen);
        free(ctx.dump);
    }
    if (!rc || res->nonfinite) {
        for (int k = 0; k < N; k++) collect(&ranks[k], &res->rank[k]);
        summarize(cfg, res);
    }
    for (int k = 0; k < created; k++) tr_rank_destroy(&ranks[k]);
    free(ranks);
    if (comms[0].impl) tr_comm_threads_destroy(comms, N);
    tr_init_close(&init);
    tr_data_close(&data);
    return rc;
}

void tr_result_free(tr_result *res) {
    free(res->loss);
    free(res->grad_norm);
    free(res->lr);
    free(res->step_s);
    free(res->wait_s);
    res->loss = res->grad_norm = res->lr = res->step_s = res->wait_s = NULL;
}
