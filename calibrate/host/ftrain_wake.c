/* The wake-up of a thread asleep at a pthread barrier (ftrain_wake.h).
 *
 * Why a halted vCPU costs more and the records' cpu_wait_s does not see it:
 * this machine is a KVM guest whose idle driver halts at once (cpuidle
 * "haltpoll" with haltpoll.guest_halt_poll_ns=0 on its kernel command line),
 * so a vCPU whose only thread went to sleep exits to the host; waking it takes
 * an IPI through the host and the vCPU's re-entry. The guest kernel wakes a
 * task on an idle CPU through that CPU's wake list (Linux v6.18
 * kernel/sched/core.c, ttwu_queue_cond(): "If the wakee cpu is idle ... use
 * the wakelist"), so the task is queued, and its run_delay starts, only once
 * the woken CPU runs: the halt's exit is not in schedstat's run_delay.
 *
 * A wake is classed as "from a halt" when the waiter's CPU's cpuidle usage
 * counters (sysfs, every state but POLL) moved while it slept. */
#define _GNU_SOURCE
#include "ftrain_wake.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cpus.h"

static double clock_s(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    return pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

/* The halts of `cpu` so far (cpuidle states other than POLL); -1 if unknown. */
static long long halts(int cpu) {
    long long total = -1;
    for (int s = 0; s < 10; s++) {
        char path[128], name[32] = "";
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/cpuidle/state%d/name", cpu, s);
        FILE *f = fopen(path, "r");
        if (!f) break;
        const int got = fscanf(f, "%31s", name);
        fclose(f);
        if (got != 1 || !strcmp(name, "POLL")) continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/cpuidle/state%d/usage", cpu, s);
        long long u = -1;
        if ((f = fopen(path, "r"))) {
            if (fscanf(f, "%lld", &u) != 1) u = -1;
            fclose(f);
        }
        if (u >= 0) total = (total < 0 ? 0 : total) + u;
    }
    return total;
}

typedef struct wake_run {
    pthread_barrier_t b;
    double arrive_s;                 /* the waker's time as it reached the barrier */
    double unseen_s[CAL_WAKE_ROUNDS];
    int halted[CAL_WAKE_ROUNDS];
} wake_run;

static void *waiter(void *p) {
    wake_run *w = p;
    pin(1);
    for (int i = 0; i < CAL_WAKE_ROUNDS; i++) {
        const long long h0 = halts(1);
        const double d0 = tr_thread_wait_s();
        pthread_barrier_wait(&w->b);
        const double lat = clock_s(CLOCK_MONOTONIC) - w->arrive_s;
        const double d1 = tr_thread_wait_s();
        w->unseen_s[i] = lat - (d1 - d0);
        w->halted[i] = h0 >= 0 && halts(1) > h0;
        pthread_barrier_wait(&w->b); /* the next round starts together */
    }
    return NULL;
}

static atomic_int spin_stop;
static pthread_t spinners[2];
static int n_spinners;

static void *spinner(void *p) {
    pin((int)(long)p);
    struct sched_param sp = {0};
    pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
    while (!atomic_load_explicit(&spin_stop, memory_order_relaxed)) {
    }
    return NULL;
}

/* Spinners on the CPUs of `mask` (bit c: CPU c, c < 2). */
static int spin_on(unsigned mask) {
    atomic_store(&spin_stop, 0);
    n_spinners = 0;
    for (long c = 0; c < 2; c++)
        if (mask & (1u << c)) {
            if (pthread_create(&spinners[n_spinners], NULL, spinner, (void *)c)) return -1;
            n_spinners++;
        }
    return 0;
}

static void spin_stop_all(void) {
    atomic_store(&spin_stop, 1);
    for (int i = 0; i < n_spinners; i++) pthread_join(spinners[i], NULL);
    n_spinners = 0;
}

long long cal_cpu_halts(void) {
    long long total = -1;
    for (int c = 0; c < tr_cpus_detect().affinity && c < 1024; c++) {
        const long long h = halts(c);
        if (h < 0) return -1;
        total = (total < 0 ? 0 : total) + h;
    }
    return total;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of the rounds of `w`. */
static double median_all(const wake_run *w) {
    static double v[CAL_WAKE_ROUNDS];
    memcpy(v, w->unseen_s, sizeof v);
    qsort(v, CAL_WAKE_ROUNDS, sizeof *v, cmp_double);
    return v[CAL_WAKE_ROUNDS / 2];
}

/* CAL_WAKE_ROUNDS wakes of a waiter on CPU 1 by a waker on CPU 0. */
static int wake_rounds(wake_run *w) {
    pthread_barrier_init(&w->b, NULL, 2);
    pthread_t t;
    if (pin(0) || pthread_create(&t, NULL, waiter, w)) return -1;
    for (int i = 0; i < CAL_WAKE_ROUNDS; i++) {
        const double t0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
        while (clock_s(CLOCK_THREAD_CPUTIME_ID) - t0 < 50e-6) { /* the waiter goes to sleep meanwhile */
        }
        w->arrive_s = clock_s(CLOCK_MONOTONIC);
        pthread_barrier_wait(&w->b);
        pthread_barrier_wait(&w->b);
    }
    pthread_join(t, NULL);
    pthread_barrier_destroy(&w->b);
    return 0;
}

int cal_wake_try(double *halted_s, int *n, int cap, cal_wake *out) {
    static wake_run w;
    cpu_set_t saved;
    *out = (cal_wake){-1, 0, -1};
    if (tr_cpus_detect().available < 2 || tr_thread_wait_s() < 0 || halts(1) < 0 ||
        pthread_getaffinity_np(pthread_self(), sizeof saved, &saved))
        return -1;
    int rc = wake_rounds(&w);
    for (int i = 0; !rc && i < CAL_WAKE_ROUNDS; i++)
        if (w.halted[i]) {
            out->halted_wakes++;
            if (*n < cap) halted_s[(*n)++] = w.unseen_s[i];
        }
    if (!rc && spin_on(2u) == 0 && wake_rounds(&w) == 0) out->busy_s = median_all(&w);
    spin_stop_all();
    pthread_setaffinity_np(pthread_self(), sizeof saved, &saved);
    double la[1];
    if (getloadavg(la, 1) == 1) out->load_avg = la[0];
    return rc || out->busy_s < 0 ? -1 : 0;
}
