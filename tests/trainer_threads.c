/* ftrain's threads: the pool runs every iteration exactly once for any team
 * size, nests inline, serves several submitting threads at once; the CPU count
 * reads cgroup v1 and v2 quota files (hand-made trees here, values worked
 * out by hand from the kernel's definition: ceil(quota / period)). */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cpus.h"
#include "parallel.h"

/* ---- pool ---- */
typedef struct {
    int *hits;      /* hits[i]: how often iteration i ran */
    int nested;     /* run a nested tr_par_for inside each range */
    int *inner;     /* the nested loop's hits */
    int64_t inner_n;
} cover_ctx;

static void inner_range(void *p, int64_t i0, int64_t i1) {
    int *inner = p;
    for (int64_t i = i0; i < i1; i++) __atomic_add_fetch(&inner[i], 1, __ATOMIC_RELAXED);
}

static void cover_range(void *p, int64_t i0, int64_t i1) {
    cover_ctx *c = p;
    for (int64_t i = i0; i < i1; i++) __atomic_add_fetch(&c->hits[i], 1, __ATOMIC_RELAXED);
    if (c->nested) tr_par_for(c->inner_n, TR_PAR_MIN_WORK, inner_range, c->inner);
}

START_TEST(test_pool_covers_each_iteration_once) {
    const int64_t sizes[] = {1, 2, 3, 7, 64, 1000, 100003};
    for (int threads = 1; threads <= 5; threads++) {
        tr_set_threads(threads);
        ck_assert_int_eq(tr_max_threads(), threads);
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            const int64_t n = sizes[k];
            int *hits = calloc((size_t)n, sizeof *hits);
            cover_ctx c = {hits, 0, NULL, 0};
            tr_par_for(n, TR_PAR_MIN_WORK, cover_range, &c);
            for (int64_t i = 0; i < n; i++)
                ck_assert_msg(hits[i] == 1, "threads %d n %lld: iteration %lld ran %d times", threads,
                              (long long)n, (long long)i, hits[i]);
            free(hits);
        }
    }
    /* Below the work threshold the loop runs on the caller, still once each. */
    int hits[10] = {0};
    cover_ctx c = {hits, 0, NULL, 0};
    tr_par_for(10, 10, cover_range, &c);
    for (int i = 0; i < 10; i++) ck_assert_int_eq(hits[i], 1);
    tr_set_threads(0);
    ck_assert_int_eq(tr_max_threads(), 1); /* n < 1 means one */
}
END_TEST

START_TEST(test_pool_nested_runs_inline) {
    tr_set_threads(3);
    const int64_t n = 12, inner_n = 50;
    int hits[12] = {0}, *inner = calloc((size_t)inner_n, sizeof *inner);
    cover_ctx c = {hits, 1, inner, inner_n};
    tr_par_for(n, TR_PAR_MIN_WORK, cover_range, &c);
    for (int64_t i = 0; i < n; i++) ck_assert_int_eq(hits[i], 1);
    for (int64_t i = 0; i < inner_n; i++) ck_assert_int_eq(inner[i], (int)n); /* once per outer iteration */
    free(inner);
}
END_TEST

/* Four submitters (as four rank threads) share the pool. */
typedef struct {
    int team;
    int ok;
} submitter_arg;

static void *submitter(void *p) {
    submitter_arg *a = p;
    tr_set_threads(a->team);
    a->ok = 1;
    for (int rep = 0; rep < 50; rep++) {
        const int64_t n = 5000;
        int *hits = calloc((size_t)n, sizeof *hits);
        cover_ctx c = {hits, 0, NULL, 0};
        tr_par_for(n, TR_PAR_MIN_WORK, cover_range, &c);
        for (int64_t i = 0; i < n; i++)
            if (hits[i] != 1) a->ok = 0;
        free(hits);
    }
    return NULL;
}

START_TEST(test_pool_concurrent_submitters) {
    pthread_t t[4];
    submitter_arg a[4];
    for (int k = 0; k < 4; k++) {
        a[k] = (submitter_arg){1 + k % 3, 0};
        ck_assert_int_eq(pthread_create(&t[k], NULL, submitter, &a[k]), 0);
    }
    for (int k = 0; k < 4; k++) {
        pthread_join(t[k], NULL);
        ck_assert_msg(a[k].ok, "submitter %d saw an iteration run other than once", k);
    }
}
END_TEST

/* ---- CPU count ---- */
static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

static void mkdirs(const char *root, const char *rel) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    for (char *p = path + strlen(root) + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0755);
            *p = '/';
        }
    mkdir(path, 0755);
}

static void put(const char *root, const char *rel, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    write_file(path, text);
}

START_TEST(test_cpu_max_parse) {
    ck_assert_int_eq(tr_cpu_max_parse("max 100000\n"), 0);
    ck_assert_int_eq(tr_cpu_max_parse("200000 100000\n"), 2);
    ck_assert_int_eq(tr_cpu_max_parse("150000 100000"), 2);  /* 1.5 CPUs: two threads share them */
    ck_assert_int_eq(tr_cpu_max_parse("50000 100000"), 1);
    ck_assert_int_eq(tr_cpu_max_parse("400000 50000"), 8);
    ck_assert_int_eq(tr_cpu_max_parse("max"), -1);
    ck_assert_int_eq(tr_cpu_max_parse("abc 100000"), -1);
    ck_assert_int_eq(tr_cpu_max_parse("100000 0"), -1);
    ck_assert_int_eq(tr_cpu_max_parse("-5 100000"), -1);
    ck_assert_int_eq(tr_cpu_max_parse(""), -1);
}
END_TEST

START_TEST(test_cgroup_v2_tree) {
    char root[] = "/tmp/ftrain_cgroup_XXXXXX";
    ck_assert(mkdtemp(root) != NULL);
    char proc[600];
    snprintf(proc, sizeof proc, "%s/self_cgroup", root);
    /* root: no file (the root cgroup has no cpu.max); /a: 3.5 CPUs; /a/b: none. */
    mkdirs(root, "fs/a/b");
    char fs[600];
    snprintf(fs, sizeof fs, "%s/fs", root);
    put(fs, "a/cpu.max", "350000 100000\n");
    put(fs, "a/b/cpu.max", "max 100000\n");
    write_file(proc, "0::/a/b\n");
    ck_assert_int_eq(tr_cgroup_cpu_limit(fs, proc), 4);
    /* A tighter leaf wins: 1.2 CPUs. */
    put(fs, "a/b/cpu.max", "120000 100000\n");
    ck_assert_int_eq(tr_cgroup_cpu_limit(fs, proc), 2);
    /* A tighter ancestor wins too. */
    put(fs, "a/cpu.max", "100000 100000\n");
    ck_assert_int_eq(tr_cgroup_cpu_limit(fs, proc), 1);
    /* No limit anywhere. */
    put(fs, "a/cpu.max", "max 100000\n");
    put(fs, "a/b/cpu.max", "max 100000\n");
    ck_assert_int_eq(tr_cgroup_cpu_limit(fs, proc), 0);
    /* Inside a container the process sees "/" and the namespace root's file. */
    put(fs, "cpu.max", "200000 100000\n");
    write_file(proc, "0::/\n");
    ck_assert_int_eq(tr_cgroup_cpu_limit(fs, proc), 2);
    /* Garbage and missing files mean no limit, never a failure. */
    put(fs, "cpu.max", "garbage\n");
    ck_assert_int_eq(tr_cgroup_cpu_limit(fs, proc), 0);
    write_file(proc, "not a cgroup file\n");
    ck_assert_int_eq(tr_cgroup_cpu_limit(fs, proc), 0);
    char missing[700];
    snprintf(missing, sizeof missing, "%s/absent", root);
    ck_assert_int_eq(tr_cgroup_cpu_limit(fs, missing), 0);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(test_cgroup_v1_tree) {
    char root[] = "/tmp/ftrain_cgroup_XXXXXX";
    ck_assert(mkdtemp(root) != NULL);
    char proc[600];
    snprintf(proc, sizeof proc, "%s/self_cgroup", root);
    mkdirs(root, "fs/cpu,cpuacct/docker/abc");
    char fs[600];
    snprintf(fs, sizeof fs, "%s/fs", root);
    /* 2.5 CPUs at the process's cgroup, unlimited (-1) at the controller root. */
    put(fs, "cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "250000\n");
    put(fs, "cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
    put(fs, "cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
    put(fs, "cpu,cpuacct/cpu.cfs_period_us", "100000\n");
    write_file(proc, "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n");
    ck_assert_int_eq(tr_cgroup_cpu_limit(fs, proc), 3);
    put(fs, "cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "-1\n");
    ck_assert_int_eq(tr_cgroup_cpu_limit(fs, proc), 0);
    /* "cpuacct" alone is not the cpu controller. */
    put(fs, "cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "100000\n");
    write_file(proc, "4:cpuacct:/docker/abc\n");
    ck_assert_int_eq(tr_cgroup_cpu_limit(fs, proc), 0);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* This process: at least one CPU, never more than its affinity mask. */
START_TEST(test_cpus_detect) {
    tr_cpus c = tr_cpus_detect();
    ck_assert_int_ge(c.available, 1);
    ck_assert_int_le(c.available, c.affinity);
    if (c.quota > 0) ck_assert_int_le(c.available, c.quota);
    char line[128];
    tr_cpus_describe(&c, line, sizeof line);
    ck_assert(strstr(line, "affinity") != NULL);
}
END_TEST

Suite *suite_trainer_threads(void); /* registered by the Makefile */
Suite *suite_trainer_threads(void) {
    Suite *s = suite_create("trainer_threads");
    TCase *tc = tcase_create("threads");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_pool_covers_each_iteration_once);
    tcase_add_test(tc, test_pool_nested_runs_inline);
    tcase_add_test(tc, test_pool_concurrent_submitters);
    tcase_add_test(tc, test_cpu_max_parse);
    tcase_add_test(tc, test_cgroup_v2_tree);
    tcase_add_test(tc, test_cgroup_v1_tree);
    tcase_add_test(tc, test_cpus_detect);
    suite_add_tcase(s, tc);
    return s;
}
