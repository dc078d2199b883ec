/* `ftest calibrate`: running the sweep's points (calibrate_command.c drives it).
 *
 * What makes it lose nothing:
 *  - every point is keyed by its configuration (cal_point_key); a finished
 *    record carries its key in "calibrate.key", a point that ended without a
 *    record (time limit, failure) is written to FILE.outcomes with its key, and
 *    a rerun skips every key found in either file but those whose outcome is
 *    "error" (a failure measured nothing: it runs again): no point twice;
 *  - concurrent sweeps into one FILE claim each point first (calibrate_claim.c);
 *  - the child's log and record live in a private scratch folder
 *    (calibrate_temp.h);
 *  - each line is appended whole, under flock, in one write(), fsync'ed
 *    (ft_append_line, common/file_io.c), only once the child has finished: kill -9 at any
 *    moment leaves whole lines of finished points and nothing of the rest;
 *  - the child runs in its own process group, dies with the sweep (Linux), and
 *    is killed at its time limit or on Ctrl-C (then nothing is written for it).
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cJSON.h>

#include "calibrate.h"
#include "file_io.h"
#include "calibrate_child.h"
#include "calibrate_sweep.h"
#include "json_util.h"

/* The child's command line for point `pt` (strings in `store`). */
static void build_argv(const cal_options *o, const cal_paths *p, const cal_point *pt,
                       char store[40][1100], char *argv[41]) {
    int n = 0;
#define ARG(...) (snprintf(store[n], sizeof store[n], __VA_ARGS__), argv[n] = store[n], n++)
    if (o->probe[0]) {
        ARG("%s", o->python);
        ARG("%s", p->probe);
        ARG("--mode"), ARG("%s", o->probe);
        ARG("--gpu"), ARG("%s", o->gpu);
        ARG("--world"), ARG("%lld", (long long)pt->world);
        ARG("--rank"), ARG("%lld", (long long)pt->rank);
        ARG("--offload"), ARG("%s", o->offload);
        ARG("--attention"), ARG("%s", o->attention);
        if (o->no_zero_init) ARG("--no-zero-init");
    } else {
        ARG("%s", p->ftrain);
        ARG("--ranks"), ARG("%lld", (long long)pt->world);
        ARG("--threads"), ARG("%lld", (long long)o->threads);
        ARG("--quiet");
    }
    ARG("--model"), ARG("%s", pt->model);
    ARG("--seq"), ARG("%lld", (long long)pt->seq);
    ARG("--batch"), ARG("%lld", (long long)pt->batch);
    ARG("--precision"), ARG("%s", est_precision_name(pt->precision));
    ARG("--checkpointing"), ARG("%s", est_checkpointing_name(pt->ckpt));
    ARG("--zero"), ARG("%d", pt->zero);
    ARG("--steps"), ARG("%lld", (long long)o->steps);
    if (pt->layers > 0) ARG("--layers"), ARG("%lld", (long long)pt->layers);
    ARG("--record"), ARG("%s", p->record_tmp);
#undef ARG
    argv[n] = NULL;
}

/* The last non-empty line of a small file, in buf; "" when none. */
static void last_line(const char *path, char *buf, size_t n) {
    buf[0] = '\0';
    size_t len = 0;
    char err[64];
    char *text = ft_read_file(path, (size_t)1 << 26, &len, err, sizeof err);
    if (!text) return;
    while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r')) text[--len] = '\0';
    char *start = strrchr(text, '\n');
    ft_strlcpy(buf, start ? start + 1 : text, n);
    free(text);
}

/* Per-layer extrapolation of a truncated-depth record to the model's full
 * depth, from the same point measured at the shallow depth:
 * peak(L) = peak(K) + (L - K) * (peak(K) - peak(K1)) / (K - K1), per rank. */
static cJSON *extrapolation(const cal_point *pt, const cal_done_entry *shallow, const cal_done_entry *deep) {
    ft_model m;
    char err[256];
    if (!shallow || !deep || !shallow->has_peaks || !deep->has_peaks ||
        shallow->nranks != deep->nranks || ft_model_load(pt->model, &m, err, sizeof err) < 0)
        return NULL;
    const int64_t k1 = cal_shallow_depth(pt->layers), k = pt->layers, l = m.num_layers;
    cJSON *x = cJSON_CreateObject();
    char rule[200];
    snprintf(rule, sizeof rule,
             "linear in depth: peak(%lld) = peak(%lld) + (%lld - %lld) * (peak(%lld) - peak(%lld)) / (%lld - %lld)",
             (long long)l, (long long)k, (long long)l, (long long)k, (long long)k, (long long)k1,
             (long long)k, (long long)k1);
    cJSON_AddStringToObject(x, "rule", rule);
    cJSON_AddNumberToObject(x, "from_layers", (double)k1);
    cJSON_AddNumberToObject(x, "to_layers", (double)k);
    cJSON_AddNumberToObject(x, "full_layers", (double)l);
    cJSON *ranks = cJSON_AddArrayToObject(x, "ranks");
    for (int r = 0; r < deep->nranks; r++) {
        double per = (double)(deep->peak[r] - shallow->peak[r]) / (double)(k - k1);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "per_layer_bytes", round(per));
        cJSON_AddNumberToObject(o, "full_depth_peak_bytes", round((double)deep->peak[r] + (double)(l - k) * per));
        cJSON_AddItemToArray(ranks, o);
    }
    return x;
}

static const char *outcome_word(int kind) {
    static const char *const w[] = {"ok", "oom", "timeout", "error"};
    return w[kind];
}

/* What the child gave: 0 ok, 1 oom, 2 timeout or 3 error, with message saying
 * why when it is not a record; with a record (0 or 1) its last line in line. */
static int child_outcome(const cal_sweep *s, const cal_child_result *res, char *line, size_t linelen,
                         char *message, size_t msglen) {
    if (res->outcome == CAL_CHILD_TIMEOUT) {
        snprintf(message, msglen, "killed after its %.0f s limit", s->o->limit_s);
        return 2;
    }
    if (res->outcome == CAL_CHILD_SIGNALLED) {
        snprintf(message, msglen, "died of signal %d", res->signal);
        return 3;
    }
    if (res->exit_code == 0 || res->exit_code == 1) {
        last_line(s->p.record_tmp, line, linelen);
        if (line[0]) return res->exit_code == 0 ? 0 : 1;
        snprintf(message, msglen, "exit %d without a record", res->exit_code);
        return 3;
    }
    char tail[256];
    last_line(s->p.log_tmp, tail, sizeof tail);
    snprintf(message, msglen, "exit %d: %.200s", res->exit_code, tail);
    return 3;
}

/* The record of an ok or oom outcome, or NULL (*kind becomes 3 when it is not
 * JSON); the oom flag in the record decides, not only the exit code. */
static cJSON *parse_record(const char *line, int *kind, char *message, size_t msglen) {
    cJSON *rec = *kind <= 1 ? cJSON_Parse(line) : NULL;
    if (*kind <= 1 && !rec) {
        *kind = 3;
        snprintf(message, msglen, "its record is not JSON");
    }
    if (rec) {
        const cJSON *oom = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(rec, "measured"), "oom");
        *kind = cJSON_IsTrue(oom) ? 1 : 0;
    }
    return rec;
}

/* The "calibrate" object: point key, outcome, time, limit, runner, why, refined. */
static cJSON *calibrate_json(const cal_sweep *s, const cal_point *pt, int kind, double elapsed_s,
                             const char *message) {
    cJSON *cal = cJSON_CreateObject();
    cJSON_AddStringToObject(cal, "key", pt->key);
    cJSON_AddStringToObject(cal, "outcome", outcome_word(kind));
    cJSON_AddNumberToObject(cal, "elapsed_s", round(elapsed_s * 1000) / 1000);
    cJSON_AddNumberToObject(cal, "limit_s", s->o->limit_s);
    cJSON_AddStringToObject(cal, "runner", s->o->grid.runner);
    if (message[0]) cJSON_AddStringToObject(cal, "message", message);
    if (s->refining) cJSON_AddBoolToObject(cal, "refined", true);
    return cal;
}

/* The line to append: the record with cal attached (and, for a truncated-depth
 * point whose shallow twin is done, the extrapolation to full depth), its peaks
 * read into *fresh; or cal alone as an outcome line. */
static cJSON *outcome_line(const cal_sweep *s, const cal_point *pt, cJSON *rec, cJSON *cal,
                           cal_done_entry *fresh) {
    if (!rec) {
        cJSON_AddStringToObject(cal, "schema", "ftest.calibrate-outcome/1");
        return cal;
    }
    cal_read_peaks(rec, fresh);
    if (pt->layers > 0 && s->o->grid.layers == pt->layers && cal_shallow_depth(pt->layers) < pt->layers) {
        cal_point sh = *pt;
        sh.layers = cal_shallow_depth(pt->layers);
        cal_point_key(s->o->grid.runner, &sh);
        cJSON *x = extrapolation(pt, cal_done_find(&s->done, sh.key), fresh);
        if (x) cJSON_AddItemToObject(cal, "extrapolation", x);
    }
    cJSON_AddItemToObject(rec, "calibrate", cal);
    return rec;
}

/* Marks pt done with *fresh and counts its outcome. 0, or -1 out of memory. */
static int mark_done(cal_sweep *s, const cal_point *pt, cal_done_entry *fresh, int kind, char *err,
                     size_t errlen) {
    cal_done_entry *e = cal_done_add(&s->done, pt->key);
    if (!e) return ft_errorf(err, errlen, "out of memory");
    ft_strlcpy(fresh->key, pt->key, sizeof fresh->key);
    *e = *fresh;
    size_t *count[] = {&s->sum->ok, &s->sum->oom, &s->sum->timeout, &s->sum->failed};
    (*count[kind])++;
    return 0;
}

/* The first failure of the sweep, for its summary ("KEY: why"). */
static void note_failure(cal_sweep *s, const cal_point *pt, int kind, const char *message) {
    if (kind == 3 && !s->sum->first_failure[0])
        snprintf(s->sum->first_failure, sizeof s->sum->first_failure, "%.200s: %.200s", pt->key, message);
}

/* One progress line: the outcome and the time left, judged by the mean point. */
static void log_point(const cal_sweep *s, const cal_point *pt, size_t index, size_t total, int kind,
                      double elapsed_s, const char *message) {
    double elapsed = cal_now_s() - s->t0, mean = s->run_s / (double)s->ran;
    fprintf(s->log, "[%zu/%zu] %s: %s in %.1f s%s%s; %.0f s elapsed, ~%.0f s left\n", index, total,
            pt->key, outcome_word(kind), elapsed_s, message[0] ? ", " : "", message, elapsed,
            mean * (double)(total - index));
    fflush(s->log);
}

/* Runs one point and appends what it gave. 0, 1 when interrupted, -1 on error. */
static int run_point(cal_sweep *s, const cal_point *pt, size_t index, size_t total, char *err,
                     size_t errlen) {
    char store[40][1100];
    char *argv[41];
    build_argv(s->o, &s->p, pt, store, argv);
    unlink(s->p.record_tmp);
    cal_child_result res;
    if (cal_child_run(argv, s->o->limit_s, s->p.log_tmp, s->stop, &res, err, errlen) < 0) return -1;
    s->ran++;
    s->run_s += res.elapsed_s;
    if (res.outcome == CAL_CHILD_INTERRUPTED) {
        unlink(s->p.record_tmp);
        return 1;
    }
    char line[1 << 16];
    char message[300] = "";
    int kind = child_outcome(s, &res, line, sizeof line, message, sizeof message);
    cJSON *rec = parse_record(line, &kind, message, sizeof message);
    cJSON *cal = calibrate_json(s, pt, kind, res.elapsed_s, message);
    cal_done_entry fresh = {.refined = s->refining};
    rec = outcome_line(s, pt, rec, cal, &fresh);
    char *text = cJSON_PrintUnformatted(rec);
    cJSON_Delete(rec);
    if (!text) return ft_errorf(err, errlen, "out of memory");
    int rc = ft_append_line(kind <= 1 ? s->o->out : s->p.outcomes, text, strlen(text), NULL, err,
                             errlen);
    free(text);
    unlink(s->p.record_tmp);
    if (rc < 0 || mark_done(s, pt, &fresh, kind, err, errlen) < 0) return -1;
    note_failure(s, pt, kind, message);
    if (!s->o->quiet) log_point(s, pt, index, total, kind, res.elapsed_s, message);
    return 0;
}

/* Runs the points not yet done, within the budget. Each is claimed first
 * (calibrate_claim.c): a point another sweep finished or is running is
 * skipped. 0, 1 interrupted, -1 error. */
int cal_run_points(cal_sweep *s, const cal_point *pts, size_t n, char *err, size_t errlen) {
    size_t todo = 0;
    for (size_t i = 0; i < n; i++) todo += cal_done_find(&s->done, pts[i].key) == NULL;
    s->sum->skipped += n - todo;
    size_t index = 0;
    for (size_t i = 0; i < n; i++) {
        if (cal_done_find(&s->done, pts[i].key)) continue;
        if (s->stop && *s->stop) return 1;
        /* Start no point that would end past the budget, judged by the mean
         * point so far (the first point always starts). */
        if (s->o->budget_s > 0 && s->ran > 0 &&
            cal_now_s() - s->t0 + s->run_s / (double)s->ran > s->o->budget_s) {
            s->sum->left_by_budget += todo - index;
            fprintf(s->log, "budget of %.0f s reached: %zu point(s) left for a rerun\n",
                    s->o->budget_s, todo - index);
            return 0;
        }
        index++;
        int claim = cal_claim(s, pts[i].key, err, errlen);
        if (claim < 0) return -1;
        if (claim != 1) { /* done meanwhile, or running in another sweep */
            (*(claim == 0 ? &s->sum->skipped : &s->sum->busy))++;
            continue;
        }
        int rc = run_point(s, &pts[i], index, todo, err, errlen);
        cal_release(s, pts[i].key);
        if (rc != 0) return rc;
    }
    return 0;
}
