#include "sweep.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "estimate.h"
#include "json_util.h"
#include "line_reader.h"
#include "record.h"
#include "format.h"
#include "svg.h"

#define GIB 1073741824.0

int est_sweep_run(const est_run *base, est_sweep_var var, est_range r, est_progress *prog,
                  est_sweep *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (r.step < 1 || r.start < 1 || r.stop < r.start)
        return ft_errorf(err, errlen, "the sweep range must be START:STOP[:STEP] with 1 <= START <= STOP");
    size_t n = (size_t)((r.stop - r.start) / r.step) + 1;
    out->pts = calloc(n, sizeof *out->pts);
    if (!out->pts) return ft_errorf(err, errlen, "out of memory");
    out->n = n;
    out->var = var;
    out->base = *base;
    out->capacity_bytes = base->gpu.memory_bytes;
    est_estimate e;
    est_estimate_init(&e);
    e.tight_margin_frac = base->tight_margin_frac;
    size_t valid = 0;
    for (size_t i = 0; i < n; i++) {
        est_sweep_point *p = &out->pts[i];
        p->x = r.start + (int64_t)i * r.step;
        est_run run = *base;
        if (var == EST_SWEEP_SEQ) run.seq_len = p->x;
        else run.micro_batch = p->x;
        if (est_estimate_run(&run, &e, p->why, sizeof p->why) < 0) continue;
        p->valid = true;
        valid++;
        memcpy(p->at_peak, e.breakdown, sizeof p->at_peak);
        p->peak_allocated_bytes = e.peak_allocated_bytes;
        p->device_used_bytes = e.device_used_bytes;
        p->fits = e.fits;
        p->tight = e.tight;
        ft_strlcpy(p->peak_label, e.tl.phases[e.peak_index].label, sizeof p->peak_label);
        p->step_time_s = e.step_time_s;
        p->tokens_per_s = e.tokens_per_s;
        p->it_per_s = e.it_per_s;
        p->mfu = e.mfu;
        if (prog) est_progress_update(prog, i + 1, n);
    }
    est_estimate_free(&e);
    if (valid == 0) {
        int rc = ft_errorf(err, errlen, "no point of the sweep can be estimated: %s", out->pts[0].why);
        est_sweep_free(out);
        return rc;
    }
    return 0;
}

void est_sweep_free(est_sweep *s) {
    free(s->pts);
    s->pts = NULL;
    s->n = 0;
}

long est_sweep_last_fit(const est_sweep *s) {
    long last = -1;
    for (size_t i = 0; i < s->n; i++) {
        if (!s->pts[i].valid) continue;
        if (!s->pts[i].fits) return last;
        last = (long)i;
    }
    return last;
}

static const char *var_name(est_sweep_var v) { return v == EST_SWEEP_SEQ ? "seq" : "batch"; }

/* The last point that fits with the margin to spare, before the first that
 * does not (or is tight); -1 when none. */
static long last_roomy_fit(const est_sweep *s) {
    long last = -1;
    for (size_t i = 0; i < s->n; i++) {
        if (!s->pts[i].valid) continue;
        if (!s->pts[i].fits || s->pts[i].tight) return last;
        last = (long)i;
    }
    return last;
}

/* "fits up to": with the run's tight margin kept, then how far it fits tight
 * (issue 20, item 15: the margin was ignored here). */
static void print_fit_range(FILE *out, const est_sweep *s) {
    const long last = est_sweep_last_fit(s), roomy = last_roomy_fit(s);
    const double pct = s->base.tight_margin_frac * 100;
    char b1[32];
    fprintf(out, "\ncapacity %s per GPU: ", est_fmt_bytes(s->capacity_bytes, b1, sizeof b1));
    if (last < 0) {
        fprintf(out, "nothing in the range fits\n");
        return;
    }
    if (roomy < 0) fprintf(out, "nothing in the range fits with the %.4g%% margin", pct);
    else if ((size_t)roomy == s->n - 1) fprintf(out, "every point fits");
    else fprintf(out, "fits up to %s %lld", var_name(s->var), (long long)s->pts[roomy].x);
    if (last > roomy)
        fprintf(out, "%s; tight (under the %.4g%% margin) up to %s %lld", roomy >= 0 ? " with the margin" : "",
                pct, var_name(s->var), (long long)s->pts[last].x);
    fputc('\n', out);
}

void est_sweep_print(FILE *out, const est_sweep *s) {
    /* Columns for the categories that are ever non-zero. */
    bool used[EST_CAT_COUNT] = {0};
    for (size_t i = 0; i < s->n; i++)
        for (int c = 0; c < EST_CAT_COUNT; c++)
            if (s->pts[i].valid && s->pts[i].at_peak[c]) used[c] = true;
    /* Columns as wide as the longest category name: never cut ("activatio"). */
    int w = 10;
    for (int c = 0; c < EST_CAT_COUNT; c++)
        if (used[c] && (int)strlen(est_category_names[c]) > w) w = (int)strlen(est_category_names[c]);
    fprintf(out, "\n%7s", var_name(s->var));
    for (int c = 0; c < EST_CAT_COUNT; c++)
        if (used[c]) fprintf(out, " %*s", w, est_category_names[c]);
    fprintf(out, " %10s %10s %5s %9s %10s\n", "allocated", "device", "fits", "s/step", "tokens/s");
    fprintf(out, "%7s", "");
    for (int c = 0; c < EST_CAT_COUNT; c++)
        if (used[c]) fprintf(out, " %*s", w, "GiB");
    fprintf(out, " %10s %10s %5s %9s %10s\n", "GiB", "GiB", "", "", "all GPUs");
    for (size_t i = 0; i < s->n; i++) {
        const est_sweep_point *p = &s->pts[i];
        fprintf(out, "%7lld", (long long)p->x);
        if (!p->valid) {
            fprintf(out, "  n/a: %s\n", p->why);
            continue;
        }
        for (int c = 0; c < EST_CAT_COUNT; c++)
            if (used[c]) fprintf(out, " %*.3f", w, (double)p->at_peak[c] / GIB);
        fprintf(out, " %10.3f %10.3f %5s %9.4g %10.0f\n", (double)p->peak_allocated_bytes / GIB,
                (double)p->device_used_bytes / GIB, p->tight ? "tight" : p->fits ? "yes" : "no",
                p->step_time_s, p->tokens_per_s);
    }
    print_fit_range(out, s);
}

int est_sweep_csv(FILE *out, const est_sweep *s) {
    fprintf(out, "%s", var_name(s->var));
    for (int c = 0; c < EST_CAT_COUNT; c++) fprintf(out, ",%s_bytes", est_category_names[c]);
    fprintf(out, ",peak_allocated_bytes,device_used_bytes,capacity_bytes,fits,peak_moment,"
                 "step_time_s,it_per_s,tokens_per_s,mfu,tight\n");
    for (size_t i = 0; i < s->n; i++) {
        const est_sweep_point *p = &s->pts[i];
        if (!p->valid) continue;
        fprintf(out, "%lld", (long long)p->x);
        for (int c = 0; c < EST_CAT_COUNT; c++) fprintf(out, ",%lld", (long long)p->at_peak[c]);
        fprintf(out, ",%lld,%lld,%lld,%s,\"%s\",%.6g,%.6g,%.6g,%.4f,%s\n",
                (long long)p->peak_allocated_bytes, (long long)p->device_used_bytes,
                (long long)s->capacity_bytes, p->fits ? "true" : "false", p->peak_label,
                p->step_time_s, p->it_per_s, p->tokens_per_s, p->mfu, p->tight ? "true" : "false");
    }
    return ferror(out) ? -1 : 0;
}

static bool matches(const est_sweep *s, const est_record *rec) {
    const est_run *a = &s->base, *b = &rec->run;
    if (strcmp(a->model.name, b->model.name) || strcmp(a->gpu.name, b->gpu.name)) return false;
    if (a->framework != b->framework || a->precision != b->precision ||
        a->zero_stage != b->zero_stage || a->offload != b->offload ||
        a->checkpointing != b->checkpointing || a->gpus_per_node != b->gpus_per_node ||
        a->nodes != b->nodes || a->layers_used != b->layers_used)
        return false;
    int64_t x = s->var == EST_SWEEP_SEQ ? b->seq_len : b->micro_batch;
    int64_t other_a = s->var == EST_SWEEP_SEQ ? a->micro_batch : a->seq_len;
    int64_t other_b = s->var == EST_SWEEP_SEQ ? b->micro_batch : b->seq_len;
    return other_a == other_b && s->n > 0 && x >= s->pts[0].x && x <= s->pts[s->n - 1].x;
}

/* Adds the record of one line when it matches the sweep. 0, or -1 with err. */
static int add_measured(const est_sweep *s, const est_record *rec, est_sweep_measured **out, size_t *n,
                        size_t *cap, char *err, size_t errlen) {
    /* A window record of an ftrain run is superseded by its final record. */
    if (!rec->final || !matches(s, rec) || !(rec->oom || rec->rank_count > 0)) return 0;
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 64;
        est_sweep_measured *nm = realloc(*out, *cap * sizeof *nm);
        if (!nm) return ft_errorf(err, errlen, "out of memory");
        *out = nm;
    }
    est_sweep_measured *m = &(*out)[(*n)++];
    m->x = s->var == EST_SWEEP_SEQ ? rec->run.seq_len : rec->run.micro_batch;
    m->oom = rec->oom;
    m->peak_bytes = rec->oom ? 0 : est_record_peak(&rec->ranks[0]);
    m->it_per_s = rec->it_per_s;
    return 0;
}

int est_sweep_measured_points(const est_sweep *s, const char *path, const est_gpu_catalog *cat,
                              est_sweep_measured **out, size_t *n, char *err, size_t errlen) {
    *out = NULL;
    *n = 0;
    char inner[256];
    /* Streamed a line at a time, each line capped (record.h): bounded memory. */
    ft_line_reader rd;
    if (ft_lines_open(&rd, path, "", EST_RECORD_MAX_LINE_BYTES, inner, sizeof inner) < 0)
        return ft_errorf(err, errlen, "--records: %s", inner);
    size_t cap = 0;
    int rc = 0, got = 0;
    char dir[4096];
    est_record_dir(path, dir, sizeof dir);
    ft_line ln;
    /* Lines split by length, not by NUL: a NUL byte is an error, never the end. */
    while (rc == 0 && (got = ft_lines_next(&rd, &ln, inner, sizeof inner)) == 1) {
        if (!ln.text) {
            rc = ft_errorf(err, errlen, "--records %s:%zu: the line is %zu bytes, over the %zu MiB a record may take",
                           path, ln.lineno, ln.len, EST_RECORD_MAX_LINE_BYTES >> 20);
        } else if (memchr(ln.text, '\0', ln.len)) {
            rc = ft_errorf(err, errlen, "--records %s:%zu: the line holds a NUL byte", path, ln.lineno);
        } else if (ln.len && !(ln.text[0] == '\r' && ln.len == 1)) {
            est_record rec;
            if (est_record_parse_at(ln.text, ln.len, cat, dir, &rec, inner, sizeof inner) < 0) {
                rc = ft_errorf(err, errlen, "--records %s:%zu: %s", path, ln.lineno, inner);
                if (rec.ranks) est_record_free(&rec);
            } else {
                rc = add_measured(s, &rec, out, n, &cap, err, errlen);
                est_record_free(&rec);
            }
        }
    }
    if (rc == 0 && got < 0) rc = ft_errorf(err, errlen, "--records %s: %s", path, inner);
    ft_lines_close(&rd);
    if (rc < 0) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return rc;
}

int est_sweep_svg(const char *path, const est_sweep *s, const est_sweep_measured *m, size_t nm,
                  char *err, size_t errlen) {
    size_t n = 0;
    for (size_t i = 0; i < s->n; i++) n += s->pts[i].valid;
    double *x = calloc(n ? n : 1, sizeof *x);
    double *ys = calloc((n ? n : 1) * EST_CAT_COUNT, sizeof *ys);
    double *mx = calloc(nm ? nm : 1, sizeof *mx), *my = calloc(nm ? nm : 1, sizeof *my);
    bool *moom = calloc(nm ? nm : 1, sizeof *moom);
    int rc = 0;
    if (!x || !ys || !mx || !my || !moom) {
        rc = ft_errorf(err, errlen, "out of memory");
        goto done;
    }
    const double *series[EST_CAT_COUNT];
    size_t k = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (!s->pts[i].valid) continue;
        x[k] = (double)s->pts[i].x;
        for (int c = 0; c < EST_CAT_COUNT; c++) ys[c * n + k] = (double)s->pts[i].at_peak[c] / GIB;
        k++;
    }
    for (int c = 0; c < EST_CAT_COUNT; c++) series[c] = ys + c * n;
    /* Thousands of measured points would only thicken a line: keep about 400
     * (every OOM among them). */
    size_t every = nm > 400 ? (nm + 399) / 400 : 1, kept = 0;
    for (size_t i = 0; i < nm; i++) {
        if (i % every && !m[i].oom) continue;
        mx[kept] = (double)m[i].x;
        my[kept] = (double)m[i].peak_bytes / GIB;
        moom[kept++] = m[i].oom;
    }
    nm = kept;
    /* The boundary halfway between the last point that fits and the next. */
    double boundary = NAN;
    long last = est_sweep_last_fit(s);
    if (last >= 0 && (size_t)last + 1 < s->n)
        boundary = 0.5 * (double)(s->pts[last].x + s->pts[last + 1].x);
    else if (last < 0)
        boundary = (double)s->pts[0].x;
    char title[160], sub[200], xl[64], cap[64], b1[32];
    snprintf(title, sizeof title, "%s on %lld x %s: memory per GPU by %s", s->base.model.name,
             (long long)est_run_world(&s->base), s->base.gpu.display,
             s->var == EST_SWEEP_SEQ ? "sequence length" : "micro-batch");
    snprintf(sub, sizeof sub, "%s, ZeRO-%d, offload %s, checkpointing %s, %s %lld; stacked at each point's peak moment",
             est_framework_name(s->base.framework), s->base.zero_stage,
             est_offload_name(s->base.offload), est_checkpointing_name(s->base.checkpointing),
             s->var == EST_SWEEP_SEQ ? "micro-batch" : "seq",
             (long long)(s->var == EST_SWEEP_SEQ ? s->base.micro_batch : s->base.seq_len));
    snprintf(xl, sizeof xl, "%s", s->var == EST_SWEEP_SEQ ? "sequence length (tokens)" : "micro-batch (sequences per GPU)");
    snprintf(cap, sizeof cap, "capacity %s", est_fmt_bytes(s->capacity_bytes, b1, sizeof b1));
    est_svg_chart ch = {
        .title = title,
        .subtitle = sub,
        .x_label = xl,
        .y_label = "GiB per GPU",
        .n = k,
        .x = x,
        .nseries = EST_CAT_COUNT,
        .series_names = est_category_names,
        .series = series,
        .capacity = (double)s->capacity_bytes / GIB,
        .capacity_label = cap,
        .boundary_x = boundary,
        .highlight_x = NAN,
        .nmarks = nm,
        .mark_x = mx,
        .mark_y = my,
        .mark_oom = moom,
    };
    rc = est_svg_write_file(path, &ch, err, errlen);
done:
    free(x);
    free(ys);
    free(mx);
    free(my);
    free(moom);
    return rc;
}
