/* CPUs available to the process (cpus.h). The kernel's documentation of the
 * files read here: Documentation/admin-guide/cgroup-v2.rst ("cpu.max: $MAX
 * $PERIOD", "max" meaning no limit) and, for cgroup v1,
 * Documentation/scheduler/sched-bwc.rst (cpu.cfs_quota_us, -1 meaning no
 * limit, and cpu.cfs_period_us). */
#define _GNU_SOURCE
#include "cpus.h"

#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PATH_LEN 4096

/* ceil(quota / period) for positive values, else -1. */
static int ceil_ratio(long long quota, long long period) {
    if (quota <= 0 || period <= 0) return -1;
    long long n = (quota + period - 1) / period;
    return n > 4096 ? 4096 : (int)n;
}

int tr_cpu_max_parse(const char *text) {
    char a[32];
    long long period;
    if (sscanf(text, "%31s %lld", a, &period) != 2 || period <= 0) return -1;
    if (!strcmp(a, "max")) return 0;
    char *end;
    errno = 0;
    long long quota = strtoll(a, &end, 10);
    if (*end || errno) return -1;
    return ceil_ratio(quota, period);
}

/* The first line of a small file, or -1 when it cannot be read. */
static int read_line(const char *path, char *buf, size_t len) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char *ok = fgets(buf, (int)len, f);
    fclose(f);
    return ok ? 0 : -1;
}

/* Keeps the tighter of two limits where 0 means none. */
static int tighter(int a, int b) {
    if (a <= 0) return b;
    if (b <= 0) return a;
    return a < b ? a : b;
}

/* cgroup v2: cpu.max at dir and each ancestor down to root. */
static int v2_limit(const char *root, const char *cg) {
    char dir[PATH_LEN], file[PATH_LEN + 16], line[128];
    if (snprintf(dir, sizeof dir, "%s%s", root, cg) >= (int)sizeof dir) return 0;
    const size_t root_len = strlen(root);
    int best = 0;
    for (;;) {
        size_t n = strlen(dir);
        while (n > root_len && dir[n - 1] == '/') dir[--n] = '\0';
        snprintf(file, sizeof file, "%s/cpu.max", dir);
        if (!read_line(file, line, sizeof line)) {
            int v = tr_cpu_max_parse(line);
            if (v > 0) best = tighter(best, v);
        }
        if (n <= root_len) break;
        char *slash = strrchr(dir + root_len, '/');
        if (!slash) break;
        *slash = '\0';
    }
    return best;
}

/* cgroup v1: quota and period of one directory. */
static int v1_dir_limit(const char *dir) {
    char file[PATH_LEN + 32], line[64];
    snprintf(file, sizeof file, "%s/cpu.cfs_quota_us", dir);
    if (read_line(file, line, sizeof line)) return 0;
    long long quota = strtoll(line, NULL, 10);
    snprintf(file, sizeof file, "%s/cpu.cfs_period_us", dir);
    if (read_line(file, line, sizeof line)) return 0;
    long long period = strtoll(line, NULL, 10);
    int v = ceil_ratio(quota, period);
    return v > 0 ? v : 0;
}

static int v1_limit(const char *root, const char *cg) {
    static const char *const ctl[] = {"cpu,cpuacct", "cpu"};
    char dir[PATH_LEN];
    int best = 0;
    for (size_t k = 0; k < sizeof ctl / sizeof ctl[0]; k++) {
        if (snprintf(dir, sizeof dir, "%s/%s%s", root, ctl[k], cg) < (int)sizeof dir)
            best = tighter(best, v1_dir_limit(dir));
        if (snprintf(dir, sizeof dir, "%s/%s", root, ctl[k]) < (int)sizeof dir)
            best = tighter(best, v1_dir_limit(dir));
    }
    return best;
}

/* Does a v1 controller list ("cpu,cpuacct") name the cpu controller? */
static int names_cpu(const char *list, size_t len) {
    for (size_t i = 0; i < len;) {
        size_t j = i;
        while (j < len && list[j] != ',') j++;
        if (j - i == 3 && !strncmp(list + i, "cpu", 3)) return 1;
        i = j + 1;
    }
    return 0;
}

int tr_cgroup_cpu_limit(const char *root, const char *proc_cgroup_path) {
    FILE *f = fopen(proc_cgroup_path, "r");
    if (!f) return 0;
    char line[PATH_LEN], v2[PATH_LEN] = "", v1[PATH_LEN] = "";
    int has_v2 = 0, has_v1 = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        /* hierarchy-ID:controller-list:cgroup-path */
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2 || c2[1] != '/') continue;
        if (!strncmp(line, "0::", 3)) {
            snprintf(v2, sizeof v2, "%s", c2 + 1);
            has_v2 = 1;
        } else if (names_cpu(c1 + 1, (size_t)(c2 - c1 - 1))) {
            snprintf(v1, sizeof v1, "%s", c2 + 1);
            has_v1 = 1;
        }
    }
    fclose(f);
    int best = 0;
    if (has_v2) best = tighter(best, v2_limit(root, v2));
    if (has_v1) best = tighter(best, v1_limit(root, v1));
    return best;
}

tr_cpus tr_cpus_detect(void) {
    tr_cpus c = {0, 0, 1};
    cpu_set_t set;
    if (!sched_getaffinity(0, sizeof set, &set)) c.affinity = CPU_COUNT(&set);
    if (c.affinity <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        c.affinity = n > 0 ? (int)n : 1;
    }
    c.quota = tr_cgroup_cpu_limit("/sys/fs/cgroup", "/proc/self/cgroup");
    c.available = c.quota > 0 && c.quota < c.affinity ? c.quota : c.affinity;
    if (c.available < 1) c.available = 1;
    return c;
}

void tr_cpus_describe(const tr_cpus *c, char *buf, size_t len) {
    if (c->quota > 0)
        snprintf(buf, len, "%d (affinity %d, cgroup quota %d)", c->available, c->affinity, c->quota);
    else
        snprintf(buf, len, "%d (affinity %d, no cgroup quota)", c->available, c->affinity);
}

double tr_thread_wait_s(void) {
    FILE *f = fopen("/proc/thread-self/schedstat", "r");
    if (!f) return -1;
    unsigned long long run_ns = 0, wait_ns = 0;
    const int n = fscanf(f, "%llu %llu", &run_ns, &wait_ns);
    fclose(f);
    return n == 2 ? 1e-9 * (double)wait_ns : -1;
}
