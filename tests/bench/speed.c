/* make bench: the figures of docs/performance.md.
 *  - estimates per second (memory timeline + step time) for a few shapes;
 *  - one full plan over the shipped instance catalog, in process;
 *  - the time of the `ftest` commands users type (a fresh process each, best
 *    of several runs): the default estimate and `ftest plan`, as the CPU time
 *    the process used (user + system, from wait4) and as wall time. The
 *    development machine is shared (its load average is often above its two
 *    cores), where the wall time measures the queue more than the program; on
 *    an idle machine the two agree within a few milliseconds.
 * Budgets (issues 2 and 3): the estimate under 50 ms, the plan under 200 ms,
 * of CPU time; exit status 1 when one is exceeded. */
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "estimate.h"
#include "plan.h"

extern char **environ;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The CPU time of this thread: what the in-process figures are measured in. */
static double cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int die(const char *what, const char *err) {
    fprintf(stderr, "bench: %s: %s\n", what, err);
    return 2;
}

/* Estimates per second of one run, over about half a second. */
static double estimates_per_s(const est_run *run, size_t *phases) {
    est_estimate e;
    est_estimate_init(&e);
    char err[256];
    size_t n = 0;
    double t0 = cpu_s(), t;
    do {
        for (int i = 0; i < 100; i++, n++) {
            est_run r = *run;
            r.micro_batch = 1 + (int64_t)(n % 4); /* defeat nothing, vary a little */
            if (est_estimate_run(&r, &e, err, sizeof err) < 0) {
                fprintf(stderr, "bench: %s\n", err);
                exit(2);
            }
        }
        t = cpu_s() - t0;
    } while (t < 0.5);
    *phases = e.tl.count;
    est_estimate_free(&e);
    return (double)n / t;
}

/* Best CPU time (user + system) and best wall time of `argv` run as a fresh
 * process, stdout to /dev/null; the CPU time, or -1. */
static double command_s(char *const argv[], int runs, double *wall_s) {
    double best = 1e9;
    *wall_s = 1e9;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    for (int i = 0; i < runs; i++) {
        pid_t pid;
        double t0 = now_s();
        if (posix_spawn(&pid, argv[0], &fa, NULL, argv, environ) != 0) return -1;
        int st;
        struct rusage ru;
        wait4(pid, &st, 0, &ru);
        double t = now_s() - t0;
        if (!WIFEXITED(st) || WEXITSTATUS(st) > 1) return -1;
        double cpu = (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
                     (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
        if (t < *wall_s) *wall_s = t;
        if (cpu < best) best = cpu;
    }
    posix_spawn_file_actions_destroy(&fa);
    return best;
}

int main(int argc, char **argv) {
    const char *ftest = argc > 1 ? argv[1] : "build/ftest";
    char err[256];
    est_gpu_catalog cat;
    if (est_gpu_catalog_load(NULL, &cat, err, sizeof err) < 0) return die("gpus", err);

    printf("estimates per second (memory timeline and step time, one thread, CPU time):\n");
    const struct {
        const char *model, *gpu;
        int64_t gpus, seq;
        int zero;
    } shapes[] = {{"qwen1.5-0.5b", "rtx3090-24gb", 1, 2048, 3},
                  {"llama3-8b", "h100-80gb", 8, 2048, 3},
                  {"llama3-70b", "h100-80gb", 64, 4096, 3}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        ft_model m;
        if (ft_model_load(shapes[i].model, &m, err, sizeof err) < 0) return die("model", err);
        est_run r;
        est_run_defaults(&r, &m, est_gpu_find(&cat, shapes[i].gpu));
        r.gpus_per_node = shapes[i].gpus > 8 ? 8 : shapes[i].gpus;
        r.nodes = shapes[i].gpus > 8 ? shapes[i].gpus / 8 : 1;
        r.seq_len = shapes[i].seq;
        r.zero_stage = shapes[i].zero;
        size_t phases = 0;
        double rate = estimates_per_s(&r, &phases);
        printf("  %-14s %3lld x %-13s seq %5lld ZeRO-%d: %9.0f estimates/s (%.1f us each, %zu moments)\n",
               shapes[i].model, (long long)shapes[i].gpus, shapes[i].gpu, (long long)shapes[i].seq,
               shapes[i].zero, rate, 1e6 / rate, phases);
    }

    est_instance_catalog inst;
    if (est_instances_load(NULL, &cat, &inst, err, sizeof err) < 0) return die("instances", err);
    printf("\nftest plan in process (whole catalog: %zu instances, up to %d nodes each; global batch free, "
           "every search to its end; CPU time, best of 5):\n",
           inst.count, EST_PLAN_MAX_NODES);
    const char *plan_models[] = {"llama3-8b", "llama3-70b"};
    for (size_t i = 0; i < 2; i++) {
        est_plan_request q;
        memset(&q, 0, sizeof q);
        ft_model m;
        if (ft_model_load(plan_models[i], &m, err, sizeof err) < 0) return die("model", err);
        est_run_defaults(&q.base, &m, &inst.items[0].gpu);
        q.tokens = 1e9;
        q.epochs = 1;
        double best = 1e9;
        est_plan_result r;
        for (int k = 0; k < 5; k++) {
            double t0 = cpu_s();
            if (est_plan_search(&q, &inst, NULL, &r, err, sizeof err) < 0) return die("plan", err);
            double t = cpu_s() - t0;
            if (t < best) best = t;
            if (k < 4) est_plan_free(&r);
        }
        printf("  %-11s seq 2048, 1B tokens: %6.1f ms (%zu combinations, %zu memory estimates: %zu "
               "distinct, %zu steps built, %zu allocator replays; %zu plans)\n",
               plan_models[i], best * 1e3, r.combos, r.estimates, r.probes, r.builds, r.replays, r.count);
        est_plan_free(&r);
    }
    est_instances_free(&inst);
    est_gpu_catalog_free(&cat);

    printf("\ncommands as users type them (fresh process, best of 10; CPU time, then wall time):\n");
    char *est_argv[] = {(char *)ftest, "--model", "llama3-8b", "--gpus", "8", "--seq", "2048", NULL};
    char *plan_argv[] = {(char *)ftest, "plan", "--model", "llama3-8b", "--seq", "2048", "--tokens", "1B", NULL};
    char *plan70_argv[] = {(char *)ftest, "plan", "--model", "llama3-70b", "--seq", "2048", "--tokens", "1B", NULL};
    double we, wp, wp70;
    double te = command_s(est_argv, 10, &we), tp = command_s(plan_argv, 10, &wp),
           tp70 = command_s(plan70_argv, 10, &wp70);
    if (te < 0 || tp < 0 || tp70 < 0) return die(ftest, "could not run");
    printf("  ftest --model llama3-8b --gpus 8 --seq 2048            %6.1f ms, wall %6.1f ms (budget 50 ms)\n",
           te * 1e3, we * 1e3);
    printf("  ftest plan --model llama3-8b --seq 2048 --tokens 1B    %6.1f ms, wall %6.1f ms (budget 200 ms)\n",
           tp * 1e3, wp * 1e3);
    printf("  ftest plan --model llama3-70b --seq 2048 --tokens 1B   %6.1f ms, wall %6.1f ms (budget 200 ms)\n",
           tp70 * 1e3, wp70 * 1e3);
    double load[1] = {0};
    if (getloadavg(load, 1) == 1) printf("  (1-minute load average %.1f)\n", load[0]);
    int over = te > 0.050 || tp > 0.200 || tp70 > 0.200;
    printf("\n%s\n", over ? "OVER BUDGET" : "within budget");
    return over ? 1 : 0;
}
