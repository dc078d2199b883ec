#include "check_records.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "estimate.h"
#include "json_util.h"
#include "record.h"

#define MIB (1024.0 * 1024.0)

/* "framework source": room for both fields of a record whole. */
#define GROUP_KEY_MAX (sizeof((est_record *)0)->framework + sizeof((est_record *)0)->source)

typedef struct {
    char key[GROUP_KEY_MAX];
    double *errs; /* signed relative peak errors */
    size_t n, cap;
    size_t failed, oom_total, oom_ok;
    size_t time_n;            /* records with a measured and an estimated it/s */
    double time_worst, time_abs_sum;
    double *res_errs;         /* signed relative reserved-peak errors */
    size_t res_n, res_cap;
} group;

typedef struct {
    group *items;
    size_t n, cap;
} group_list;

/* The index of a record's group (its framework and source file: the rows of
 * one sweep), added when new; -1 when out of memory. */
static long group_of(group_list *gl, const est_record *rec) {
    char key[GROUP_KEY_MAX];
    snprintf(key, sizeof key, "%s %s", rec->framework[0] ? rec->framework : "?", rec->source);
    for (size_t i = 0; i < gl->n; i++)
        if (!strcmp(gl->items[i].key, key)) return (long)i;
    if (gl->n == gl->cap) {
        size_t cap = gl->cap ? gl->cap * 2 : 16;
        group *ng = realloc(gl->items, cap * sizeof *ng);
        if (!ng) return -1;
        gl->items = ng;
        gl->cap = cap;
    }
    group *g = &gl->items[gl->n];
    memset(g, 0, sizeof *g);
    ft_strlcpy(g->key, key, sizeof g->key);
    return (long)gl->n++;
}

/* The estimate of what the record measured: the active peak where the record
 * has only that (blocks freed through record_stream still count), else the
 * allocated peak. */
static int64_t estimate_of(const est_rank_measure *m, const est_estimate *e) {
    return m->peak_allocated_bytes < 0 && m->peak_active_bytes >= 0 ? e->peak_active_bytes
                                                                     : e->peak_allocated_bytes;
}

/* The reserved peak against the largest rank's measured one (the caching
 * allocator simulated: allocator_ledger.h). */
static void reserved_add(group *g, const est_record *rec, const est_estimate *e) {
    int64_t meas = -1;
    for (size_t i = 0; i < rec->rank_count; i++)
        if (rec->ranks[i].peak_reserved_bytes > meas) meas = rec->ranks[i].peak_reserved_bytes;
    if (meas <= 0 || rec->run.framework == EST_FW_FTRAIN) return;
    if (g->res_n == g->res_cap) {
        size_t cap = g->res_cap ? g->res_cap * 2 : 64;
        double *ne = realloc(g->res_errs, cap * sizeof *ne);
        if (!ne) return;
        g->res_errs = ne;
        g->res_cap = cap;
    }
    g->res_errs[g->res_n++] = ((double)e->peak_reserved_bytes - (double)meas) / (double)meas;
}

static void group_add(group *g, double e) {
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 64;
        double *ne = realloc(g->errs, cap * sizeof *ne);
        if (!ne) return;
        g->errs = ne;
        g->cap = cap;
    }
    g->errs[g->n++] = e;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void describe(const est_run *r, char *buf, size_t n) {
    snprintf(buf, n, "%s %s x%lld z%d off=%s ckpt=%s b=%lld s=%lld", r->model.name, r->gpu.name,
             (long long)est_run_world(r), r->zero_stage, est_offload_name(r->offload),
             est_checkpointing_name(r->checkpointing), (long long)r->micro_batch,
             (long long)r->seq_len);
}

/* Exact per-category comparison (ftrain records): returns the number of
 * mismatching categories and names the first in `what`. */
static int compare_categories(const est_rank_measure *m, const est_estimate *e, int64_t tol,
                              char *what, size_t n) {
    int bad = 0;
    for (int c = 0; c < EST_CAT_ALLOCATED_COUNT; c++) {
        int64_t d1 = e->category_peak[c] - m->category_peak[c];
        int64_t d2 = e->breakdown[c] - m->at_peak[c];
        if (llabs(d1) > tol || llabs(d2) > tol) {
            if (!bad)
                snprintf(what, n, "%s: peak est %lld vs %lld, at-peak est %lld vs %lld",
                         est_category_names[c], (long long)e->category_peak[c],
                         (long long)m->category_peak[c], (long long)e->breakdown[c],
                         (long long)m->at_peak[c]);
            bad++;
        }
    }
    return bad;
}

static const char *it_note(double meas, double est, double rel) {
    static char buf[64];
    snprintf(buf, sizeof buf, "  it/s %.3g vs %.3g (%+.1f%%)", meas, est, rel * 100);
    return buf;
}

/* Markdown rows for docs/validation.md: every record of the batch sweeps and
 * OOM rows; sequence sweeps sampled every 256 tokens, around the knee
 * (896-976, every 16) and at 2041 (a length that is not a multiple of 8). */
static bool markdown_row(const est_record *rec) {
    const int64_t s = rec->run.seq_len;
    if (rec->oom || rec->run.micro_batch > 1 || !strstr(rec->source, "sequence-length")) return true;
    if (rec->rank_count > 1) return true; /* multi-rank sweeps are short: every point */
    return s == 1 || s % 256 == 0 || s == 2041 || (s >= 896 && s <= 976 && s % 16 == 0);
}

static void markdown_line(const est_record *rec, const est_estimate *e, double meas_mib,
                          double spread_mib, double rel, double it_rel, bool ok, FILE *out) {
    const est_run *r = &rec->run;
    fprintf(out, "| %lld | %lld | %s | %s | %s |", (long long)r->seq_len, (long long)r->micro_batch,
            r->checkpointing == EST_CKPT_FULL ? "full" : "none", est_offload_name(r->offload),
            r->expandable_segments ? "yes" : "no");
    if (rec->oom)
        fprintf(out, " OOM | %.0f (device) | %s |", e->device_used_bytes / MIB,
                e->fits ? "fits: **wrong**" : "does not fit");
    else
        fprintf(out, " %.0f | %.0f | %+.2f%% |", meas_mib, e->peak_allocated_bytes / MIB, rel * 100);
    if (rec->rank_count > 1 && !rec->oom)
        fprintf(out, " %.0f |", spread_mib);
    else
        fprintf(out, " |");
    if (!isnan(it_rel))
        fprintf(out, " %.3f | %.3f | %+.1f%% |", rec->it_per_s, e->it_per_s, it_rel * 100);
    else
        fprintf(out, " | | |");
    fprintf(out, "%s\n", ok ? "" : " **outside tolerance**");
}

/* One record: prints its line, returns true when within tolerance. */
static bool check_one(const est_record *rec, est_estimate *e, group *g,
                      const est_check_options *opt, FILE *out) {
    char desc[160];
    describe(&rec->run, desc, sizeof desc);
    if (rec->oom) {
        bool ok = !e->fits || e->tight; /* tight: only the free-and-retry path keeps it in */
        g->oom_total++;
        g->oom_ok += ok;
        if (opt->markdown)
            markdown_line(rec, e, 0, 0, 0, NAN, ok, out);
        else if (!opt->quiet || !ok)
            fprintf(out, "%s  OOM measured, estimate %.0f MiB used of %.0f: %s  %s\n",
                    ok ? "ok  " : "FAIL", e->device_used_bytes / MIB, e->capacity_bytes / MIB,
                    !e->fits ? "does not fit" : e->tight ? "tight" : "fits", desc);
        return ok;
    }
    /* A job fits only if its largest rank fits: the estimate (of the largest
     * rank) is compared with the largest measured peak; the spread is shown. */
    const est_rank_measure *m = &rec->ranks[0];
    int64_t smallest = est_record_peak(m);
    for (size_t i = 1; i < rec->rank_count; i++) {
        const int64_t p = est_record_peak(&rec->ranks[i]);
        if (p > est_record_peak(m)) m = &rec->ranks[i];
        if (p < smallest) smallest = p;
    }
    const int64_t meas = est_record_peak(m), est = estimate_of(m, e);
    const double rel = meas > 0 ? ((double)est - (double)meas) / (double)meas : 0;
    group_add(g, rel);
    reserved_add(g, rec, e);
    bool ok = true;
    char why[200] = "";
    if (!isnan(rec->tol_peak_rel) && fabs(rel) > rec->tol_peak_rel) {
        ok = false;
        snprintf(why, sizeof why, "peak off by %+.1f%% (tolerance %.0f%%)", rel * 100,
                 rec->tol_peak_rel * 100);
    }
    double it_rel = NAN;
    if (!isnan(rec->it_per_s) && rec->it_per_s > 0 && e->it_per_s > 0) {
        it_rel = (e->it_per_s - rec->it_per_s) / rec->it_per_s;
        g->time_n++;
        if (fabs(it_rel) > fabs(g->time_worst)) g->time_worst = it_rel;
        g->time_abs_sum += fabs(it_rel);
        if (!isnan(rec->tol_it_per_s_rel) && fabs(it_rel) > rec->tol_it_per_s_rel) {
            ok = false;
            snprintf(why, sizeof why, "it/s off by %+.1f%% (tolerance %.0f%%)", it_rel * 100,
                     rec->tol_it_per_s_rel * 100);
        }
    }
    if (ok && e->capacity_bytes > 0 && !e->fits) {
        ok = false;
        snprintf(why, sizeof why, "ran, but the estimate says it does not fit (%.0f MiB of %.0f)",
                 e->device_used_bytes / MIB, e->capacity_bytes / MIB);
    }
    if (!isnan(rec->tol_category_abs_bytes)) {
        int64_t tol = (int64_t)rec->tol_category_abs_bytes;
        if (llabs(e->peak_allocated_bytes - meas) > tol) {
            ok = false;
            snprintf(why, sizeof why, "total peak est %lld vs %lld bytes",
                     (long long)e->peak_allocated_bytes, (long long)meas);
        } else if (m->has_categories && compare_categories(m, e, tol, why, sizeof why)) {
            ok = false;
        } else if (rec->cpu_peak_bytes >= 0 && llabs(e->cpu_bytes - rec->cpu_peak_bytes) > tol) {
            ok = false;
            snprintf(why, sizeof why, "host bytes est %lld vs %lld", (long long)e->cpu_bytes,
                     (long long)rec->cpu_peak_bytes);
        }
    }
    if (!ok) g->failed++;
    if (opt->markdown) {
        if (markdown_row(rec))
            markdown_line(rec, e, (double)meas / MIB, (double)(meas - smallest) / MIB, rel, it_rel, ok,
                          out);
    } else if (!opt->quiet || !ok)
        fprintf(out, "%s %+7.2f%%  measured %10.1f MiB  estimated %10.1f MiB  %s%s%s%s\n",
                ok ? "ok  " : "FAIL", rel * 100, (double)meas / MIB, (double)est / MIB, desc,
                isnan(it_rel) ? "" : it_note(rec->it_per_s, e->it_per_s, it_rel),
                why[0] ? "  -- " : "", why);
    return ok;
}

/* Median and largest-magnitude signed error of n errors (sorts them). */
static void errs_stats(double *errs, size_t n, double *median, double *worst) {
    *median = *worst = 0;
    if (!n) return;
    qsort(errs, n, sizeof *errs, cmp_double);
    *median = n % 2 ? errs[n / 2] : 0.5 * (errs[n / 2 - 1] + errs[n / 2]);
    for (size_t j = 0; j < n; j++)
        if (fabs(errs[j]) > fabs(*worst)) *worst = errs[j];
}

static void group_stats(group *g, double *median, double *worst) {
    errs_stats(g->errs, g->n, median, worst);
}

static void summary(group *groups, size_t ngroups, bool markdown, FILE *out) {
    if (markdown)
        fprintf(out, "\n| group | records | outside tolerance | peak: median error | peak: max abs error "
                     "| OOM predicted | it/s: mean abs error | it/s: max error |\n"
                     "|---|---|---|---|---|---|---|---|\n");
    else
        fprintf(out, "\n%-8s %-8s %-9s %-9s %s\n", "records", "failed", "median", "max|err|", "group");
    for (size_t i = 0; i < ngroups; i++) {
        group *g = &groups[i];
        double med, worst;
        group_stats(g, &med, &worst);
        const size_t records = g->n + g->oom_total, failed = g->failed + (g->oom_total - g->oom_ok);
        const double time_mean = g->time_n ? 100 * g->time_abs_sum / (double)g->time_n : 0;
        if (markdown) {
            const char *key = strrchr(g->key, '/');
            fprintf(out, "| %s | %zu | %zu | %+.2f%% | %+.2f%% | ", key ? key + 1 : g->key, records,
                    failed, med * 100, worst * 100);
            if (g->oom_total) fprintf(out, "%zu of %zu", g->oom_ok, g->oom_total);
            if (g->time_n) fprintf(out, " | %.1f%% | %+.1f%% |\n", time_mean, 100 * g->time_worst);
            else fprintf(out, " | | |\n");
        } else {
            fprintf(out, "%-8zu %-8zu %+8.2f%% %+8.2f%% %s", records, failed, med * 100, worst * 100,
                    g->key);
            if (g->oom_total) fprintf(out, " (OOM predicted %zu/%zu)", g->oom_ok, g->oom_total);
            if (g->time_n)
                fprintf(out, " [it/s: mean |err| %.1f%%, max %+.1f%%]", time_mean, 100 * g->time_worst);
            if (g->res_n) {
                double rmed, rworst;
                errs_stats(g->res_errs, g->res_n, &rmed, &rworst);
                fprintf(out, " [reserved: median %+.1f%%, max %+.1f%%]", 100 * rmed, 100 * rworst);
            }
            fputc('\n', out);
        }
        free(g->errs);
        free(g->res_errs);
    }
}

int est_check_file(const char *path, const est_gpu_catalog *cat, const est_check_options *opt,
                   FILE *out, est_check_totals *totals, char *err, size_t errlen) {
    size_t len = 0;
    char *text = ft_read_file(path, (size_t)1 << 28, &len, err, errlen);
    if (!text) return -1;
    group_list groups = {0};
    size_t lineno = 0;
    est_estimate e;
    est_estimate_init(&e);
    long current = -1;
    int rc = 0;
    if (!opt->markdown) fprintf(out, "%s\n", path);
    FILE *diag = opt->diag ? opt->diag : stderr;
    char dir[4096];
    est_record_dir(path, dir, sizeof dir);
    size_t nonblank = 0;
    /* Lines are split by length, not by NUL: a NUL byte makes its own line an
     * error and the records after it are still checked. */
    for (char *line = text, *end = text + len, *next; line < end; line = next) {
        size_t n = ft_cut_line(line, end, &next);
        const bool terminated = line + n < end;
        lineno++;
        if (n && line[n - 1] == '\r') line[--n] = '\0';
        bool blank = true;
        for (size_t i = 0; i < n && blank; i++) blank = line[i] == ' ' || line[i] == '\t';
        if (blank) continue;
        nonblank++;
        est_record rec;
        char msg[256];
        int bad = 0;
        if (memchr(line, '\0', n)) {
            ft_errorf(msg, sizeof msg, "the line holds a NUL byte (not a record)");
            bad = 1;
            rec.ranks = NULL;
        } else if (est_record_parse_at(line, n, cat, dir, &rec, msg, sizeof msg) < 0 ||
                   (rec.final && est_estimate_run(&rec.run, &e, msg, sizeof msg) < 0)) {
            bad = 1;
        }
        if (bad) {
            fprintf(diag, "ERROR %s:%zu: %s%s\n", path, lineno, msg,
                    terminated ? "" : " (the last line has no newline: an interrupted write?)");
            totals->errors++;
            totals->records++;
            if (rec.ranks) est_record_free(&rec);
            continue;
        }
        if (!rec.final) { /* a window record; the run's final record is compared */
            totals->partial++;
            est_record_free(&rec);
            continue;
        }
        totals->records++;
        long gi = group_of(&groups, &rec);
        if (gi < 0) {
            est_record_free(&rec);
            rc = ft_errorf(err, errlen, "out of memory");
            break;
        }
        group *g = &groups.items[gi];
        if (opt->markdown && gi != current) {
            const char *key = strrchr(g->key, '/');
            fprintf(out, "\n#### %s\n\n%s\n\n", key ? key + 1 : g->key, rec.source);
            fprintf(out, "| seq | batch | ckpt | offload | expandable | measured MiB (largest rank) "
                         "| estimated MiB | error | rank spread MiB | it/s measured | it/s estimated "
                         "| error |\n"
                         "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
            current = gi;
        }
        if (!check_one(&rec, &e, g, opt, out)) totals->failed++;
        est_record_free(&rec);
    }
    if (nonblank == 0 && rc == 0) rc = ft_errorf(err, errlen, "%s holds no records (%s)", path,
                                                 len ? "only blank lines" : "empty file");
    summary(groups.items, groups.n, opt->markdown, out);
    est_estimate_free(&e);
    free(groups.items);
    free(text);
    return rc;
}
