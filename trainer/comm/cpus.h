/* How many CPUs this process may really use: the smaller of its affinity
 * mask (taskset, cpusets, container --cpuset-cpus) and its CPU bandwidth
 * quota (container --cpus, systemd CPUQuota=, Kubernetes limits), which caps
 * CPU time without hiding any CPU from the mask. A thread count above the
 * quota only makes threads wait for each other's time slices. */
#ifndef TR_CPUS_H
#define TR_CPUS_H

#include <stddef.h>

typedef struct tr_cpus {
    int affinity;     /* CPUs in the affinity mask (sysconf's online count when unknown) */
    int quota;        /* ceil(quota / period) of the tightest cgroup limit; 0 = no limit */
    int available;    /* min of the two, at least 1 */
} tr_cpus;

/* The running process, from sched_getaffinity, /proc/self/cgroup and the
 * cgroup files under /sys/fs/cgroup. */
tr_cpus tr_cpus_detect(void);

/* The quota limit of the cgroup named by a /proc/self/cgroup file, read under
 * the cgroup mount `root`: cgroup v2 cpu.max ("max 100000" or "QUOTA PERIOD")
 * at the process's cgroup and every ancestor up to `root`; else cgroup v1
 * cpu.cfs_quota_us / cpu.cfs_period_us under root/cpu,cpuacct or root/cpu at
 * the process's path and at the controller's root. Returns the tightest
 * ceil(quota / period), or 0 when no level sets a limit or nothing is
 * readable. Tests point it at hand-made trees. */
int tr_cgroup_cpu_limit(const char *root, const char *proc_cgroup_path);

/* One cpu.max text: ceil(quota / period), 0 for "max", -1 when malformed. */
int tr_cpu_max_parse(const char *text);

/* One line of the detection, for the log: "2 (affinity 2, quota none)". */
/* Seconds the calling thread has spent runnable but waiting for a CPU since it
 * started (the second field of /proc/thread-self/schedstat: the scheduler's
 * run_delay, in ns; Linux Documentation/scheduler/sched-stats.rst); -1 where
 * the kernel does not say. A step's share of it is how much longer the step
 * took because the machine's other work held the cores. */
double tr_thread_wait_s(void);

void tr_cpus_describe(const tr_cpus *c, char *buf, size_t len);

#endif
