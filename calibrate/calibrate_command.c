/* `ftest calibrate` (calibrate.h): plan the grid, skip what the files
 * already hold, run the rest (calibrate_run.c), refine (calibrate_refine.c),
 * fit and check (calibrate_check.c). What makes a sweep lose nothing is in
 * calibrate_run.c. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cJSON.h>

#include "calibrate.h"
#include "calibrate_child.h"
#include "calibrate_sweep.h"
#include "calibrate_temp.h"
#include "file_io.h"
#include "json_util.h"

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) {
    (void)sig;
    g_stop = 1;
}

/* FILE.outcomes, FILE.claims, the scratch folder and its files, the runner. */
static int resolve_paths(const cal_options *o, cal_paths *p, char *err, size_t errlen) {
    snprintf(p->outcomes, sizeof p->outcomes, "%s.outcomes", o->out);
    snprintf(p->claims, sizeof p->claims, "%s.claims", o->out);
    if (o->ftrain[0]) {
        ft_strlcpy(p->ftrain, o->ftrain, sizeof p->ftrain);
    } else {
        /* ftrain beside this ftest (make builds both into $(BUILD)). */
        char self[1024];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        self[n > 0 ? n : 0] = '\0';
        char *slash = strrchr(self, '/');
        if (slash) slash[1] = '\0';
        snprintf(p->ftrain, sizeof p->ftrain, "%sftrain", n > 0 ? self : "");
    }
    ft_data_path("calibrate/probes/ftest_probe.py", p->probe, sizeof p->probe);
    if (o->dry_run) return 0;
    /* A private folder (calibrate_temp.h): no predictable name in a shared
     * /tmp that another user could plant a link at. */
    cal_temp_sweep_stale();
    if (cal_temp_make(p->tmp_dir, sizeof p->tmp_dir, err, errlen) < 0) return -1;
    snprintf(p->record_tmp, sizeof p->record_tmp, "%s/record", p->tmp_dir);
    snprintf(p->log_tmp, sizeof p->log_tmp, "%s/log", p->tmp_dir);
    return 0;
}

int cal_calibrate(const cal_options *o, const est_gpu_catalog *cat, FILE *out, FILE *log,
                  cal_summary *sum, char *err, size_t errlen) {
    memset(sum, 0, sizeof *sum);
    cal_sweep s = {.o = o, .sum = sum, .log = log, .t0 = cal_now_s()};
    size_t n = cal_grid_plan(&o->grid, NULL, 0); /* the count first */
    if (n > CAL_MAX_POINTS)
        return ft_errorf(err, errlen, "the grid has %zu points; at most %d", n, CAL_MAX_POINTS);
    cal_point *pts = malloc((n ? n : 1) * sizeof *pts);
    if (!pts) return ft_errorf(err, errlen, "out of memory");
    cal_grid_plan(&o->grid, pts, n);
    int rc = 0;
    sum->planned = n;
    if (resolve_paths(o, &s.p, err, errlen) < 0 || cal_load_done(o->out, false, &s.done, err, errlen) < 0 ||
        cal_load_done(s.p.outcomes, true, &s.done, err, errlen) < 0) {
        rc = -1;
        goto done;
    }
    if (o->dry_run) {
        for (size_t i = 0; i < n; i++)
            fprintf(out, "%s  %s\n", cal_done_find(&s.done, pts[i].key) ? "done" : "todo", pts[i].key);
        goto done;
    }
    if (!o->probe[0] && access(s.p.ftrain, X_OK) != 0) {
        rc = ft_errorf(err, errlen, "cannot run %s (build it with make, or give --ftrain PATH)",
                       s.p.ftrain);
        goto done;
    }
    if (!o->quiet) {
        size_t already = 0;
        for (size_t i = 0; i < n; i++) already += cal_done_find(&s.done, pts[i].key) != NULL;
        fprintf(log, "calibrate: %zu points planned, %zu already in %s or its outcomes\n", n,
                already, o->out);
    }
    struct sigaction sa, old_int, old_term, old_hup;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    g_stop = 0;
    s.stop = &g_stop;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    sigaction(SIGHUP, &sa, &old_hup);
    rc = cal_run_points(&s, pts, n, err, errlen);
    if (rc == 0 && o->refine > 0 && sum->left_by_budget == 0) rc = cal_refine(&s, pts, n, cat, err, errlen);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGHUP, &old_hup, NULL);
    if (rc == 1) {
        sum->interrupted = true;
        fprintf(log, "interrupted: the finished points are in %s; rerun to go on\n", o->out);
        rc = 0;
        goto done;
    }
    if (rc < 0) goto done;
    fprintf(log, "sweep: %zu ok, %zu out of memory, %zu timed out, %zu failed, %zu already done",
            sum->ok, sum->oom, sum->timeout, sum->failed, sum->skipped);
    if (sum->busy) fprintf(log, ", %zu running in another sweep", sum->busy);
    fprintf(log, "%s\n", sum->left_by_budget ? " (budget reached)" : "");
    if (!o->no_fit) rc = cal_fit_and_check(o, cat, out, log, sum, err, errlen);
done:
    cal_temp_remove(s.p.tmp_dir);
    free(pts);
    free(s.done.v);
    return rc;
}
