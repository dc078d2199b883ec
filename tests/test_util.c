#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "caching_allocator.h"
#include "cli_run.h"
#include "gpu.h"
#include "json_util.h"
#include "options.h"
#include "record.h"

/* Tests run from the repository root (make test); FTEST_ROOT overrides. */
const char *test_repo_path(const char *relative) {
    static char buf[4][1024];
    static int next;
    const char *root = getenv("FTEST_ROOT");
    char *out = buf[next++ % 4];
    snprintf(out, sizeof buf[0], "%s/%s", root ? root : ".", relative);
    return out;
}

const char *test_build_dir(void) {
    static char dir[1024];
    const char *b = getenv("FTEST_BUILD");
    if (b && *b) return b;
    ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
    if (n <= 0) return "build";
    dir[n] = '\0';
    char *slash = strrchr(dir, '/');
    if (!slash) return "build";
    *slash = '\0';
    return dir;
}

char *test_slurp(const char *path, size_t *len) {
    size_t n;
    char err[256];
    char *text = ft_read_file(path, (size_t)1 << 30, &n, err, sizeof err);
    ck_assert_msg(text != NULL, "%s", err);
    if (len) *len = n;
    return text;
}

test_cmd_result *test_shell(const char *cmd) {
    static test_cmd_result r;
    memset(&r, 0, sizeof r);
    char errfile[] = "/tmp/ftest-test-err-XXXXXX";
    int fd = mkstemp(errfile);
    ck_assert_int_ge(fd, 0);
    close(fd);
    char full[4096];
    snprintf(full, sizeof full, "{ %s ; } 2>%s", cmd, errfile);
    FILE *p = popen(full, "r");
    ck_assert_ptr_nonnull(p);
    size_t n = fread(r.out, 1, sizeof r.out - 1, p);
    r.out[n] = '\0';
    int st = pclose(p);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    FILE *e = fopen(errfile, "r");
    if (e) {
        n = fread(r.err, 1, sizeof r.err - 1, e);
        r.err[n] = '\0';
        fclose(e);
    }
    unlink(errfile);
    for (char *c = r.err; *c; c++) r.err_lines += *c == '\n';
    return &r;
}

test_cmd_result *test_ftest(const char *args) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s/ftest %s", test_build_dir(), args);
    return test_shell(cmd);
}

est_gpu test_gpu(const char *name) {
    est_gpu_catalog cat;
    char err[256];
    ck_assert_msg(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0, "%s", err);
    const est_gpu *g = est_gpu_find(&cat, name);
    ck_assert_msg(g != NULL, "no GPU %s", name);
    est_gpu out = *g;
    est_gpu_catalog_free(&cat);
    return out;
}

est_run test_run_of(const char *model, const char *gpu) {
    ft_model m;
    char err[256];
    ck_assert_msg(ft_model_load(model, &m, err, sizeof err) == 0, "%s", err);
    est_gpu_catalog cat;
    ck_assert_msg(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0, "%s", err);
    const est_gpu *g = est_gpu_find(&cat, gpu);
    ck_assert_msg(g != NULL, "no GPU %s", gpu);
    est_run run;
    est_run_defaults(&run, &m, g);
    est_gpu_catalog_free(&cat);
    return run;
}

est_run test_peft_l40s_run(est_peft peft) {
    est_run r = test_run_of("llama3.2-3b", "l40s-48gb");
    char err[256];
    r.framework = EST_FW_HF;
    r.precision = EST_PREC_BF16;
    r.micro_batch = 4;
    r.seq_len = 768;
    ck_assert_msg(est_stack_parse("2026-07", &r.stack, err, sizeof err) == 0, "%s", err);
    r.train_loop = EST_LOOP_PLAIN;
    r.peft = peft;
    return r;
}

const char *test_write_temp(const char *stem, const char *text) {
    static char path[96];
    snprintf(path, sizeof path, "/tmp/ftest-%.40s-XXXXXX", stem);
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
    return path;
}

void test_record_within_tolerance(const est_record *rec) {
    est_estimate e;
    test_estimate(&rec->run, &e);
    const double res = (double)rec->ranks[0].peak_reserved_bytes, after = (double)rec->ranks[0].after_step_bytes;
    ck_assert_double_le(fabs((double)est_estimate_reserved_on_card(&e) - res) / res, rec->tol_reserved_rel);
    ck_assert_double_le(fabs((double)e.after_step_bytes - after) / after, rec->tol_after_step_rel);
    ck_assert_double_le(fabs(e.it_per_s - rec->it_per_s) / rec->it_per_s, rec->tol_it_per_s_rel);
    est_estimate_free(&e);
}

int test_cli_build(int argc, char *argv[], est_run *run, char *err, size_t errlen) {
    est_cli cli;
    ck_assert_msg(est_cli_parse(argc, argv, &cli, err, errlen) == 0, "%s", err);
    est_gpu_catalog cat;
    ck_assert_msg(est_gpu_catalog_load(NULL, &cat, err, errlen) == 0, "%s", err);
    int rc = est_cli_build_run(&cli, &cat, run, err, errlen);
    est_gpu_catalog_free(&cat);
    return rc;
}

int test_cli_try(int argc, char *const argv[], est_run *run, char *err, size_t errlen) {
    static est_cli cli; /* large: files[] */
    memset(&cli, 0, sizeof cli);
    if (est_cli_parse(argc, argv, &cli, err, errlen) < 0) return -1;
    est_gpu_catalog cat;
    ck_assert_msg(est_gpu_catalog_load(NULL, &cat, err, errlen) == 0, "%s", err);
    int rc = est_cli_build_run(&cli, &cat, run, err, errlen);
    est_gpu_catalog_free(&cat);
    return rc;
}

void test_estimate(const est_run *run, est_estimate *e) {
    char err[256];
    est_estimate_init(e);
    ck_assert_msg(est_estimate_run(run, e, err, sizeof err) == 0, "%s", err);
}

const est_phase *test_row(const est_estimate *e, const char *label) {
    for (size_t i = 0; i < e->tl.count; i++)
        if (strcmp(e->tl.phases[i].label, label) == 0) return &e->tl.phases[i];
    ck_abort_msg("no moment \"%s\"", label);
    return NULL;
}

/* Replays the step's events through the simulated allocator (torch's
 * defaults) until the moment `label` (the bytes reserved there) or, with
 * label NULL, the n-th empty_cache() (the bytes reserved just after it);
 * *peak gets the reserved peak before that point. -1: never reached. */
static int64_t replay_until(const est_step *st, const char *label, int n, int64_t *peak) {
    char err[256];
    est_alloc_config cfg;
    est_alloc_config_default(&cfg);
    est_alloc *a = est_alloc_new(&cfg, err, sizeof err);
    ck_assert_msg(a != NULL, "%s", err);
    est_alloc_handle *h = calloc((size_t)st->tensor_count + 1, sizeof *h);
    ck_assert_ptr_nonnull(h);
    int64_t reserved = -1;
    *peak = 0;
    for (size_t i = 0; i < st->count && reserved < 0; i++) {
        const est_event *ev = &st->events[i];
        const int32_t id = ev->u.mem.id;
        if (label && ev->kind == EST_EV_MOMENT && !strcmp(ev->u.moment.label, label))
            reserved = est_alloc_reserved_now(a);
        else if (ev->kind == EST_EV_ALLOC && id >= 0 && id < st->tensor_count)
            ck_assert_int_eq(est_alloc_malloc(a, ev->u.mem.bytes, ev->u.mem.stream, &h[id]), EST_ALLOC_OK);
        else if (ev->kind == EST_EV_FREE && id >= 0 && id < st->tensor_count && h[id] != EST_ALLOC_NULL)
            ck_assert_int_eq(est_alloc_release(a, h[id]), EST_ALLOC_OK);
        else if (ev->kind == EST_EV_EMPTY_CACHE) {
            ck_assert_int_eq(est_alloc_empty_cache(a), EST_ALLOC_OK);
            if (!label && --n == 0) reserved = est_alloc_reserved_now(a);
        }
        if (reserved < 0 && est_alloc_reserved_now(a) > *peak) *peak = est_alloc_reserved_now(a);
    }
    free(h);
    est_alloc_free(a);
    return reserved;
}

int64_t test_reserved_after_empty_cache(const est_step *st, int n, int64_t *peak) {
    return replay_until(st, NULL, n, peak);
}

int64_t test_reserved_at(const est_step *st, const char *label) {
    int64_t peak;
    const int64_t reserved = replay_until(st, label, 0, &peak);
    ck_assert_msg(reserved >= 0, "no moment \"%s\"", label);
    return reserved;
}
