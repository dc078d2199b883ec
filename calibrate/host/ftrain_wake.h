/* The wake-up of a rank's thread asleep at ftrain's barrier (a pthread
 * barrier: trainer/comm/comm_threads.c), on a vCPU that halted because it had
 * nothing else to run and on one kept busy by a SCHED_IDLE spinner
 * (docs/method.md, "ftrain's CPU step"). */
#ifndef CAL_FTRAIN_WAKE_H
#define CAL_FTRAIN_WAKE_H

/* One try: CAL_WAKE_ROUNDS wakes each way (the waker works 50 us of its
 * thread's CPU time, then meets the waiter at a barrier of two), the
 * wake-to-run latency less the woken thread's run_delay (the part a record's
 * cpu_wait_s does not see). Wakes whose vCPU halted while the waiter slept
 * are appended to halted_s (up to cap; *n counts them); a loaded machine's
 * vCPUs seldom halt, so the caller pools them over tries. */
typedef struct cal_wake {
    double busy_s;       /* median with a SCHED_IDLE spinner on the waiter's vCPU */
    int halted_wakes;    /* of CAL_WAKE_ROUNDS without one, wakes from a halt */
    double load_avg;     /* the 1-minute load average when it ended */
} cal_wake;

enum { CAL_WAKE_ROUNDS = 2000 };

/* 0, or -1 where it cannot be measured (fewer than 2 CPUs, no schedstat or
 * cpuidle counters). */
int cal_wake_try(double *halted_s, int *n, int cap, cal_wake *out);

/* The halts of every CPU so far (cpuidle usage counters, every state but
 * POLL); -1 when the kernel does not count them. */
long long cal_cpu_halts(void);

#endif
