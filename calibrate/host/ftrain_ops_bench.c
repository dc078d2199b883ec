/* ftrain's CPU ops on this machine, for the CPU device of the time ledger
 * (docs/method.md, "ftrain on the CPU"): a linear layer's forward (fp32
 * through OpenBLAS sgemm, bf16 through the hand-written kernels) at shapes
 * from the tiny test models to a few hundred wide, and a memory-bound op
 * (y += x) from 64 elements to 64 MiB. Best of 21 repeats of enough calls to
 * take ~2 ms. Prints JSON lines. Build with the trainer's library:
 *
 *   cc -O2 -Itrainer/ops -Itrainer/comm -Itrainer calibrate/host/ftrain_ops_bench.c \
 *      build/libftrain.a build/libftcommon.a $(pkg-config ...openblas) -lm -lpthread
 * (`make bench-ftrain-ops` does.)
 *
 * With --profile it prints instead the CPU device of the time ledger
 * (estimator/ledger/cpu_device.h), measured at the shapes of the tiny test
 * models' steps: the median fp32 and bf16 linear rates over their GEMM shapes
 * (tokens 64 and 128; hidden 32, 64; 96/128-wide fused qkv and gate-up),
 * ftrain's flash and eager attention (4 heads of 8, 2 KV heads, batch 2) at
 * sequences 16-128, the
 * memory-bound rate of y += x over tensors of their size (4-16 K elements),
 * the cost of one parallel dispatch of ftrain's pool (tr_par_for over a
 * loop with no work: waking the workers and joining them), each rate with the
 * whole pool and with a team of one (what each rank of a multi-rank run gets,
 * trainer/train.c: threads_per_rank = threads / ranks), and one meeting of
 * 2-8 threads at a pthread barrier (trainer/comm/comm_threads.c meets twice per
 * collective) after 0, 10, 30 and 100 us of work by each, and what a meeting adds when the
 * waiter's vCPU halted while it slept (the wake-up from a halt less one on a
 * busy core, ftrain_wake.c). `make cpu-profile` writes it to
 * calibrate/host/cpu-ftrain.json. With --wake N it runs only the wake-up
 * tries (at least N), printing each on stderr. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpus.h"
#include "ftrain_kernel_rates.h"
#include "ftrain_wake.h"
#include "ops.h"
#include "parallel.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    void *out, *inp, *w;
    int64_t n, c, oc;
    tr_dtype dt;
} mm;

static void run_mm(const mm *m) { tr_cpu_matmul_fwd(m->out, m->inp, m->w, NULL, m->n, m->c, m->oc, m->dt); }

/* One call's time: calls for ~2 ms, the best of 21 repeats. On a machine
 * shared with other work a thread loses its core for whole time slices
 * (milliseconds); a window of ~2 ms mostly runs within one, so the best of
 * many measures the cores' capacity, as the records' steps (ftrain --steps 2:
 * one timed step of milliseconds, cpu_wait_s says how long it waited for a
 * CPU) mostly see it, not the share a long job gets under load. */
static double best_per_call(void (*fn)(const void *), const void *arg) {
    int calls = 1;
    for (;;) { /* calls for ~2 ms */
        double t = now_s();
        for (int i = 0; i < calls; i++) fn(arg);
        if (now_s() - t > 0.002 || calls > (1 << 24)) break;
        calls *= 2;
    }
    double best = 1e30;
    for (int r = 0; r < 21; r++) {
        const double t = now_s();
        for (int i = 0; i < calls; i++) fn(arg);
        const double d = (now_s() - t) / calls;
        if (d < best) best = d;
    }
    return best;
}

static void mm_thunk(const void *p) { run_mm(p); }

typedef struct {
    void *y, *x;
    int64_t n;
} add_args;
static void add_thunk(const void *p) {
    const add_args *a = p;
    tr_cpu_add(a->y, a->x, a->n, TR_F32);
}


static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, size_t n) {
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The GEMM rate of dtype `dt`, median over the tiny models' step shapes. */
static double tiny_gemm_flops_per_s(tr_dtype dt) {
    static const int64_t sh[][3] = {{64, 32, 96},  {64, 32, 32},  {64, 32, 128}, {64, 64, 32},
                                    {64, 32, 64},  {128, 32, 96}, {128, 32, 128}, {128, 64, 32}};
    enum { NS = sizeof sh / sizeof sh[0] };
    double rate[NS];
    for (int i = 0; i < NS; i++) {
        mm m = {.n = sh[i][0], .c = sh[i][1], .oc = sh[i][2], .dt = dt};
        m.inp = calloc((size_t)(m.n * m.c), 4);
        m.w = calloc((size_t)(m.oc * m.c), 4);
        m.out = calloc((size_t)(m.n * m.oc), 4);
        rate[i] = 2.0 * (double)(m.n * m.c * m.oc) / best_per_call(mm_thunk, &m);
        free(m.inp), free(m.w), free(m.out);
    }
    return median(rate, NS);
}

static double tiny_memory_bytes_per_s(void) {
    double rate[3];
    for (int i = 0; i < 3; i++) {
        const int64_t n = (int64_t)4096 << i;
        add_args a = {.y = calloc((size_t)n, 4), .x = calloc((size_t)n, 4), .n = n};
        rate[i] = 12.0 * (double)n / best_per_call(add_thunk, &a); /* read y, x; write y */
        free(a.y), free(a.x);
    }
    return median(rate, 3);
}

static void no_work(void *ctx, int64_t i0, int64_t i1) { (void)ctx, (void)i0, (void)i1; }
static void dispatch_thunk(const void *p) {
    (void)p;
    tr_par_for(tr_max_threads(), TR_PAR_MIN_WORK, no_work, NULL);
}

/* ftrain's flash attention of the tiny models (4 query heads, 2 KV heads, head
 * dim 8, batch 2) at sequence T: forward and backward. */
typedef struct attn_args {
    void *qkv, *out, *dout, *dqkv;
    float *lse;
    int64_t T;
    tr_dtype dt;
} attn_args;
static void attn_fwd_thunk(const void *p) {
    const attn_args *a = p;
    tr_cpu_attn_flash_fwd(a->out, a->lse, a->qkv, 2, a->T, 4, 2, 8, a->dt);
}
static void attn_bwd_thunk(const void *p) {
    const attn_args *a = p;
    tr_cpu_attn_flash_bwd(a->dqkv, a->dout, a->qkv, a->out, a->lse, 2, a->T, 4, 2, 8, a->dt);
}

/* Forward FLOPs per second of the forward [0] and of the backward [1] (the
 * backward's time against the forward's FLOPs, 4 B T^2 q / 2 causal) at
 * sequence T: the rate grows with T (per-row and per-tile costs), so the
 * profile keeps it per length. */
static void tiny_attention_rates(tr_dtype dt, int64_t T, double out[2]) {
    const int64_t q = 4 * 8, w = q + 2 * 2 * 8;
    attn_args a = {.qkv = calloc((size_t)(2 * T * w), 4), .out = calloc((size_t)(2 * T * q), 4),
                   .dout = calloc((size_t)(2 * T * q), 4), .dqkv = calloc((size_t)(2 * T * w), 4),
                   .lse = calloc((size_t)(2 * 4 * T), 4), .T = T, .dt = dt};
    const double flops = 4.0 * 2 * (double)(T * T) * (double)q * 0.5;
    out[0] = flops / best_per_call(attn_fwd_thunk, &a);
    out[1] = flops / best_per_call(attn_bwd_thunk, &a);
    free(a.qkv), free(a.out), free(a.dout), free(a.dqkv), free(a.lse);
}

/* ftrain's eager attention: P materialized (B, nh, T, T). */
typedef struct eager_args {
    void *qkv, *out, *probs, *dout, *dqkv, *dprobs;
    int64_t T;
    tr_dtype dt;
} eager_args;
static void eager_fwd_thunk(const void *p) {
    const eager_args *a = p;
    tr_cpu_attn_eager_fwd(a->out, a->probs, a->qkv, 2, a->T, 4, 2, 8, a->dt);
}
static void eager_bwd_thunk(const void *p) {
    const eager_args *a = p;
    tr_cpu_attn_eager_bwd(a->dqkv, a->dprobs, a->dout, a->qkv, a->probs, 2, a->T, 4, 2, 8, a->dt);
}

/* The eager attention's FLOPs per second as the time ledger counts them
 * (estimator/frameworks/work.c: two batched products forward, four backward,
 * 2 T^2 d each per head, the full square: 12 B T^2 q for both), over the time
 * of ftrain's eager forward and backward together, at sequence T. */
static double tiny_eager_rate(tr_dtype dt, int64_t T) {
    const int64_t q = 4 * 8, w = q + 2 * 2 * 8, P = 2 * 4 * T * T;
    eager_args a = {.qkv = calloc((size_t)(2 * T * w), 4), .out = calloc((size_t)(2 * T * q), 4),
                    .probs = calloc((size_t)P, 4), .dout = calloc((size_t)(2 * T * q), 4),
                    .dqkv = calloc((size_t)(2 * T * w), 4), .dprobs = calloc((size_t)P, 4), .T = T, .dt = dt};
    const double flops = 12.0 * 2 * (double)(T * T) * (double)q;
    const double r = flops / (best_per_call(eager_fwd_thunk, &a) + best_per_call(eager_bwd_thunk, &a));
    free(a.qkv), free(a.out), free(a.probs), free(a.dout), free(a.dqkv), free(a.dprobs);
    return r;
}

typedef struct meet_args {
    pthread_barrier_t *b;
    pthread_mutex_t mu;
    int rounds;
    double work_s;
    double t0, t1;   /* after the first meeting and the last (the barrier's serial thread) */
    double wait_s;   /* the longest any thread waited for a CPU in between */
} meet_args;

static double thread_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *meet_loop(void *p) {
    meet_args *a = p;
    if (pthread_barrier_wait(a->b) == PTHREAD_BARRIER_SERIAL_THREAD) a->t0 = now_s(); /* all started */
    const double w0 = tr_thread_wait_s();
    for (int i = 0; i < a->rounds; i++) {
        const double t = thread_cpu_s();
        while (thread_cpu_s() - t < a->work_s) { /* a rank's work between two meetings, on a CPU */
        }
        if (pthread_barrier_wait(a->b) == PTHREAD_BARRIER_SERIAL_THREAD && i == a->rounds - 1) a->t1 = now_s();
    }
    const double w1 = tr_thread_wait_s();
    pthread_mutex_lock(&a->mu);
    if (w0 < 0 || w1 < w0) a->wait_s = -1;
    else if (a->wait_s >= 0 && w1 - w0 > a->wait_s) a->wait_s = w1 - w0;
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

/* The work between meetings the profile measures at, seconds. */
static const double meet_work_s[4] = {0, 10e-6, 30e-6, 100e-6};

/* Seconds one meeting of `n` threads at a pthread barrier adds when each
 * thread does `work_s` of work (CPU time) before it: the best of 21 runs of 20
 * meetings, timed from the first meeting (starting the threads is not
 * counted), less the work and less the longest time a thread waited for a CPU
 * (tr_thread_wait_s: the machine's other work, and n > cores sharing them),
 * the same wait a record's cpu_wait_s reports. What is left is the meeting
 * itself: with work between meetings a waiting thread has gone to sleep and
 * costs a wake-up, which back-to-back meetings (work 0) hide. The wake-up of a
 * sleeper whose vCPU halted is priced apart (barrier_halt_wake_s): the best of
 * 21 runs is one on busy vCPUs when the machine has other work (the profile
 * prints how many halts all the meeting runs saw; with the vCPUs kept busy by
 * SCHED_IDLE spinners instead, a woken thread's run_delay took in the wake-up
 * itself and most meetings came out at 0). */
static double barrier_meet_s(int n, double work_s, int threads) {
    (void)threads;
    double best = 1e30;
    for (int r = 0; r < 21; r++) {
        pthread_barrier_t b;
        pthread_barrier_init(&b, NULL, (unsigned)n);
        meet_args a = {.b = &b, .mu = PTHREAD_MUTEX_INITIALIZER, .rounds = 20, .work_s = work_s};
        pthread_t t[8];
        for (int i = 0; i < n; i++) pthread_create(&t[i], NULL, meet_loop, &a);
        for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
        const double d = (a.t1 - a.t0 - (a.wait_s > 0 ? a.wait_s : 0)) / a.rounds - work_s;
        pthread_barrier_destroy(&b);
        if (d < best) best = d;
    }
    return best > 0 ? best : 0;
}

/* The rates of one team size: fp32 and bf16 linears, memory, dispatch. */
static void team_rates(int team, double out[4]) {
    tr_set_threads(team);
    out[0] = tiny_gemm_flops_per_s(TR_F32);
    out[1] = tiny_gemm_flops_per_s(TR_BF16);
    out[2] = tiny_memory_bytes_per_s();
    out[3] = best_per_call(dispatch_thunk, NULL);
}

/* One round of every rate of the profile, in the order it prints them: 8
 * scalars, then 6 attention series of NSEQ lengths (16, 32, 64, 128). */
enum { NSEQ = 4, NSCALAR = 8, NSERIES = 6, NRATE = NSCALAR + NSERIES * NSEQ };
static void profile_round(int threads, double v[NRATE]) {
    team_rates(threads, v);      /* 0-3: the whole pool */
    team_rates(1, v + 4);        /* 4-7: a team of one */
    tr_set_threads(threads);
    for (int i = 0; i < NSEQ; i++) {
        const int64_t T = (int64_t)16 << i;
        double f[2];
        tiny_attention_rates(TR_F32, T, f);
        v[NSCALAR + 0 * NSEQ + i] = f[0], v[NSCALAR + 1 * NSEQ + i] = f[1];
        tiny_attention_rates(TR_BF16, T, f);
        v[NSCALAR + 2 * NSEQ + i] = f[0], v[NSCALAR + 3 * NSEQ + i] = f[1];
        v[NSCALAR + 4 * NSEQ + i] = tiny_eager_rate(TR_F32, T);
        v[NSCALAR + 5 * NSEQ + i] = tiny_eager_rate(TR_BF16, T);
    }
}

static void print_series(const char *name, const double *v) {
    printf("  \"%s\": [", name);
    for (int i = 0; i < NSEQ; i++) printf("%s%.4g", i ? ", " : "", v[i]);
    printf("],\n");
}

/* The wake-up of a sleeper at the barrier: out[0] the median from a halted
 * vCPU, pooled over tries until WAKE_HALTED such wakes (a loaded machine's
 * vCPUs seldom halt: up to WAKE_TRIES tries), out[1] the median over the
 * tries of the median on a busy one, out[2-3] the lowest and highest load
 * average; -1 (with a message) when too few wakes came from a halt. */
enum { WAKE_HALTED = 1000, WAKE_TRIES = 400 };
static int halt_wake(int rounds, double out[4]) {
    static double h[WAKE_HALTED];
    double b[WAKE_TRIES];
    int nh = 0, tries = 0;
    out[2] = 1e30, out[3] = -1;
    while (tries < WAKE_TRIES && (tries < rounds || nh < WAKE_HALTED)) {
        cal_wake w;
        if (cal_wake_try(h, &nh, WAKE_HALTED, &w) < 0) break;
        b[tries++] = w.busy_s;
        if (w.load_avg < out[2]) out[2] = w.load_avg;
        if (w.load_avg > out[3]) out[3] = w.load_avg;
        fprintf(stderr, "ftrain_ops_bench: wake-up try %d: %d of %d from a halt (%d pooled); busy %.2f us; "
                "load average %.2f\n", tries, w.halted_wakes, CAL_WAKE_ROUNDS, nh, 1e6 * w.busy_s, w.load_avg);
    }
    if (nh < WAKE_HALTED || tries == 0) {
        fprintf(stderr, "ftrain_ops_bench: %d wake-ups from a halted vCPU in %d tries, %d needed (a loaded machine, "
                "fewer than 2 CPUs or no cpuidle counters): the profile is not written\n", nh, tries, WAKE_HALTED);
        return -1;
    }
    out[0] = median(h, (size_t)nh);
    out[1] = median(b, (size_t)tries);
    return 0;
}

/* `rounds` rounds (a shared machine's load changes from one to the next):
 * each rate the median of its rounds. */
static int profile(int rounds) {
    const int threads = tr_max_threads();
    double v[NRATE] = {0}, r[64][NRATE], meet[7][4], m[64];
    for (int i = 0; i < rounds; i++) profile_round(threads, r[i]);
    for (int k = 0; k < NRATE; k++) {
        for (int i = 0; i < rounds; i++) m[i] = r[i][k];
        v[k] = median(m, (size_t)rounds);
    }
    double kr[64][CAL_FTRAIN_KERNELS][2], kv[CAL_FTRAIN_KERNELS][2];
    for (int i = 0; i < rounds; i++) cal_ftrain_kernel_rates(best_per_call, kr[i]);
    for (int k = 0; k < CAL_FTRAIN_KERNELS; k++)
        for (int d = 0; d < 2; d++) {
            for (int i = 0; i < rounds; i++) m[i] = kr[i][k][d];
            kv[k][d] = median(m, (size_t)rounds);
        }
    const long long halts0 = cal_cpu_halts();
    for (int n = 2; n <= 8; n++)
        for (int w = 0; w < 4; w++) {
            for (int i = 0; i < rounds; i++) m[i] = barrier_meet_s(n, meet_work_s[w], threads);
            meet[n - 2][w] = median(m, (size_t)rounds);
        }
    const long long meet_halts = halts0 >= 0 ? cal_cpu_halts() - halts0 : -1;
    double wake[4];
    if (halt_wake(rounds, wake) < 0) return 1;
    char date[32];
    time_t t = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%MZ", gmtime(&t));
    printf("{\n  \"schema\": \"ftest.cpu-device/1\",\n  \"device\": \"cpu\",\n"
           "  \"measured_by\": \"calibrate/host/ftrain_ops_bench.c --profile %d: each rate the median of %d rounds, "
           "each round the best of 21 repeats of ~2 ms\",\n"
           "  \"date\": \"%s\",\n  \"threads\": %d,\n",
           rounds, rounds, date, threads);
    static const char *const names[NSCALAR] = {
        "gemm_fp32_flops_per_s", "gemm_bf16_flops_per_s", "memory_bytes_per_s", "op_dispatch_s",
        "gemm_fp32_flops_per_s_1t", "gemm_bf16_flops_per_s_1t", "memory_bytes_per_s_1t", "op_dispatch_s_1t"};
    for (int k = 0; k < NSCALAR; k++) printf("  \"%s\": %.4g,\n", names[k], v[k]);
    printf("  \"attention_seq\": [16, 32, 64, 128],\n");
    static const char *const series[NSERIES] = {
        "attention_fwd_fp32_flops_per_s", "attention_bwd_fp32_flops_per_s", "attention_fwd_bf16_flops_per_s",
        "attention_bwd_bf16_flops_per_s", "eager_attention_fp32_flops_per_s", "eager_attention_bf16_flops_per_s"};
    for (int k = 0; k < NSERIES; k++) print_series(series[k], v + NSCALAR + k * NSEQ);
    printf("  \"kernel_elems_per_s\": {");
    for (int k = 0; k < CAL_FTRAIN_KERNELS; k++)
        printf("%s\n    \"%s\": [%.4g, %.4g]", k ? "," : "", cal_ftrain_kernel_name(k), kv[k][0], kv[k][1]);
    printf("},\n");
    printf("  \"barrier_work_s\": [0, 1e-05, 3e-05, 0.0001],\n  \"barrier_meet_s_by_ranks\": [");
    for (int n = 2; n <= 8; n++)
        printf("%s[%.4g, %.4g, %.4g, %.4g]", n > 2 ? ",\n    " : "\n    ", meet[n - 2][0], meet[n - 2][1],
               meet[n - 2][2], meet[n - 2][3]);
    printf("],\n  \"barrier_wake_halted_s\": %.4g,\n  \"barrier_wake_busy_s\": %.4g,\n"
           "  \"barrier_wake_load_avg\": [%.2f, %.2f],\n  \"barrier_meet_halts\": %lld,\n"
           "  \"barrier_halt_wake_s\": %.4g\n}\n",
           wake[0], wake[1], wake[2], wake[3], meet_halts, wake[0] - wake[1] > 0 ? wake[0] - wake[1] : 0);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--wake")) { /* the wake-up rounds alone, on stderr */
        double wake[4];
        return halt_wake(argc > 2 && atoi(argv[2]) > 0 && atoi(argv[2]) <= 64 ? atoi(argv[2]) : 3, wake) < 0;
    }
    if (argc > 1 && !strcmp(argv[1], "--profile")) {
        const int rounds = argc > 2 ? atoi(argv[2]) : 5;
        if (rounds < 1 || rounds > 64) {
            fprintf(stderr, "ftrain_ops_bench: --profile ROUNDS must be 1-64\n");
            return 2;
        }
        return profile(rounds);
    }
    const int64_t shapes[][3] = {{64, 32, 64},     {64, 32, 128},    {64, 64, 32},    {128, 32, 96},
                                 {256, 64, 256},   {256, 256, 256},  {512, 256, 1024}, {1024, 512, 512},
                                 {2048, 1024, 1024}};
    const size_t ns = sizeof shapes / sizeof shapes[0];
    const tr_dtype dts[2] = {TR_F32, TR_BF16};
    for (int d = 0; d < 2; d++)
        for (size_t i = 0; i < ns; i++) {
            mm m = {.n = shapes[i][0], .c = shapes[i][1], .oc = shapes[i][2], .dt = dts[d]};
            if (d == 1 && m.n * m.c * m.oc > ((int64_t)1 << 28)) continue; /* the bf16 kernels are slow */
            m.inp = calloc((size_t)(m.n * m.c), 4);
            m.w = calloc((size_t)(m.oc * m.c), 4);
            m.out = calloc((size_t)(m.n * m.oc), 4);
            double s = best_per_call(mm_thunk, &m);
            printf("{\"op\": \"matmul_fwd\", \"dtype\": \"%s\", \"n\": %lld, \"c\": %lld, \"oc\": %lld, "
                   "\"threads\": %d, \"s_per_call\": %.4g, \"gflop_per_s\": %.2f}\n",
                   d ? "bf16" : "fp32", (long long)m.n, (long long)m.c, (long long)m.oc, tr_max_threads(), s,
                   2.0 * (double)(m.n * m.c * m.oc) / s / 1e9);
            free(m.inp), free(m.w), free(m.out);
        }
    for (int64_t n = 64; n <= ((int64_t)16 << 20); n *= 16) {
        add_args a = {.y = calloc((size_t)n, 4), .x = calloc((size_t)n, 4), .n = n};
        double s = best_per_call(add_thunk, &a);
        printf("{\"op\": \"add\", \"dtype\": \"fp32\", \"n\": %lld, \"threads\": %d, \"s_per_call\": %.4g, "
               "\"gb_per_s\": %.2f}\n", (long long)n, tr_max_threads(), s, 12.0 * (double)n / s / 1e9);
        free(a.y), free(a.x);
    }
    return 0;
}
