/* ftrain's CPU ops on this machine, for the CPU device of the time ledger
 * (docs/method.md, "ftrain on the CPU"): a linear layer's forward (fp32
 * through OpenBLAS sgemm, bf16 through the hand-written kernels) at shapes
 * from the tiny test models to a few hundred wide, and a memory-bound op
 * (y += x) from 64 elements to 64 MiB. Best of 7 repeats of enough calls to
 * take ~20 ms. Prints JSON lines. Build with the trainer's library:
 *
 *   cc -O2 -Itrainer/ops -Itrainer/comm -Itrainer calibrate/host/ftrain_ops_bench.c \
 *      build/libftrain.a build/libftcommon.a $(pkg-config ...openblas) -lm -lpthread
 * (`make bench-ftrain-ops` does.) */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

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

static double best_per_call(void (*fn)(const void *), const void *arg) {
    int calls = 1;
    for (;;) { /* calls for ~20 ms */
        double t = now_s();
        for (int i = 0; i < calls; i++) fn(arg);
        if (now_s() - t > 0.02 || calls > (1 << 24)) break;
        calls *= 2;
    }
    double best = 1e30;
    for (int r = 0; r < 7; r++) {
        double t = now_s();
        for (int i = 0; i < calls; i++) fn(arg);
        double d = (now_s() - t) / calls;
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

int main(void) {
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
