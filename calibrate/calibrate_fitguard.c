/* The census of a record set for `ftest fit`: what each fitter could use,
 * counted the way the fitters select records (fit_time.c: runs without
 * offload whose time the model covers, and the multi-rank ZeRO-3 DeepSpeed
 * runs of zero3_comm_efficiency). Duplicates count once: a set of identical lines says no
 * more than one of them. */
#include "calibrate_fitguard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "constants.h"
#include "cpu_device.h"
#include "fw_registry.h"
#include "json_util.h"
#include "line_reader.h"
#include "step_build.h"
#include "timing.h"

enum { KEY_MAX = 320 };

/* The run description as a string: two records with the same key describe
 * the same run. */
static void run_key(const est_run *r, char *out, size_t n) {
    snprintf(out, n, "%s|%s|%s|%lld|%lld|%lld|%lld|%lld|%lld|%d|%d|%d|%d|%d|%d|%d|%d|%d|%s",
             r->model.name, r->gpu.name, est_framework_name(r->framework),
             (long long)r->gpus_per_node, (long long)r->nodes, (long long)r->layers_used,
             (long long)r->micro_batch, (long long)r->grad_accum, (long long)r->seq_len,
             (int)r->precision, r->zero_stage, (int)r->offload, (int)r->checkpointing,
             (int)r->attention, (int)r->loss, (int)r->optimizer, (int)r->zero_init,
             (int)r->expandable_segments, r->stack ? r->stack->name : "");
}

/* Adds key to the set unless present; returns true when it was new. */
static bool add_unique(char (*set)[KEY_MAX], size_t *n, const char *key) {
    for (size_t i = 0; i < *n; i++)
        if (!strcmp(set[i], key)) return false;
    ft_strlcpy(set[(*n)++], key, KEY_MAX);
    return true;
}

void cal_fit_count(const est_record *recs, size_t n, cal_fit_census *c) {
    size_t unreadable = c->unreadable;
    memset(c, 0, sizeof *c);
    c->records = n;
    c->unreadable = unreadable;
    char(*all)[KEY_MAX] = calloc(n ? n : 1, KEY_MAX);
    char(*z3)[KEY_MAX] = calloc(n ? n : 1, KEY_MAX);
    char(*sizes)[KEY_MAX] = calloc(n ? n : 1, KEY_MAX);
    if (!all || !z3 || !sizes) goto out;
    size_t nall = 0, nz3 = 0, nsizes = 0;
    est_constants k;
    est_constants_defaults(&k);
    for (size_t i = 0; i < n; i++) {
        const est_record *r = &recs[i];
        char key[KEY_MAX];
        run_key(&r->run, key, sizeof key);
        if (!add_unique(all, &nall, key)) continue;
        if (r->oom) continue;
        if (est_fw_stream_ordered_frees(&r->run) && r->rank_count > 0)
            add_unique(z3, &nz3, key);
        if (r->it_per_s > 0 && r->run.offload == EST_OFFLOAD_NONE) {
            est_time_detail t;
            est_time_model(&r->run, &k, &t);
            if (!t.modelled || est_cpu_device_run(&r->run)) continue; /* measured, not fitted */
            /* The work of one micro-batch: model, depth and tokens. */
            char size[KEY_MAX];
            snprintf(size, sizeof size, "%s|%s|%s|%lld|%lld", est_framework_name(r->run.framework),
                     r->run.gpu.name, r->run.model.name, (long long)r->run.layers_used,
                     (long long)(r->run.micro_batch * r->run.seq_len));
            add_unique(sizes, &nsizes, size);
        }
    }
    c->distinct = nall;
    c->zero3_multi = nz3;
    /* The most sizes in one framework-and-GPU group: the prefix up to the
     * model name names the group. */
    for (size_t i = 0; i < nsizes; i++) {
        size_t same = 0;
        const char *bar = strchr(sizes[i], '|');
        bar = bar ? strchr(bar + 1, '|') : NULL;
        size_t plen = bar ? (size_t)(bar - sizes[i]) : strlen(sizes[i]);
        for (size_t j = 0; j < nsizes; j++)
            if (!strncmp(sizes[i], sizes[j], plen) && sizes[j][plen] == '|') same++;
        if (same > c->timed_sizes) c->timed_sizes = same;
    }
out:
    free(all);
    free(z3);
    free(sizes);
}

int cal_fit_census_check(const cal_fit_census *c, char *err, size_t errlen) {
    if (c->records == 0)
        return ft_errorf(err, errlen, "no readable records (%zu unreadable lines): nothing to fit, nothing written",
                         c->unreadable);
    if (c->timed_sizes >= 2 || c->zero3_multi >= 2) return 0;
    return ft_errorf(err, errlen,
                     "the records determine no constant (%zu records, %zu distinct; %zu timed sizes "
                     "in one framework on one GPU, %zu multi-rank ZeRO-3): "
                     "fitting needs two of one kind; nothing written",
                     c->records, c->distinct, c->timed_sizes, c->zero3_multi);
}

/* Appends the record of one line to recs; an unreadable line is an error
 * naming FILE:LINE (fit uses whole records only: a line it cannot read is not
 * skipped in silence, as `ftest check` and `sweep --records` refuse it too). */
static int add_line(const char *path, const char *dir, const ft_line *ln, const est_gpu_catalog *cat,
                    est_record **recs, size_t *n, size_t *cap, char *err, size_t errlen) {
    char msg[256];
    if (!ln->text)
        snprintf(msg, sizeof msg, "the line is %zu bytes, over the %zu MiB a record may take", ln->len,
                 EST_RECORD_MAX_LINE_BYTES >> 20);
    else if (memchr(ln->text, '\0', ln->len))
        snprintf(msg, sizeof msg, "the line holds a NUL byte");
    if (!ln->text || memchr(ln->text, '\0', ln->len))
        return ft_errorf(err, errlen, "%s:%zu: %s; fit reads whole records only (ftest check %s lists "
                         "every unreadable line); nothing written", path, ln->lineno, msg, path);
    if (*n == *cap) {
        size_t ncap = *cap ? 2 * *cap : 256;
        est_record *nr = realloc(*recs, ncap * sizeof *nr);
        if (!nr) return ft_errorf(err, errlen, "out of memory");
        *recs = nr;
        *cap = ncap;
    }
    if (est_record_parse_at(ln->text, ln->len, cat, dir, &(*recs)[*n], msg, sizeof msg) < 0)
        return ft_errorf(err, errlen, "%s:%zu: %s; fit reads whole records only (ftest check %s lists "
                         "every unreadable line); nothing written", path, ln->lineno, msg, path);
    (*n)++;
    return 0;
}

static bool is_blank(const ft_line *ln) {
    for (size_t i = 0; ln->text && i < ln->len; i++)
        if (ln->text[i] != ' ' && ln->text[i] != '\t' && ln->text[i] != '\r') return false;
    return ln->text != NULL;
}

int cal_fit_guard(char (*files)[1024], int nfiles, const est_gpu_catalog *cat, char *err,
                  size_t errlen) {
    est_record *recs = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    for (int f = 0; f < nfiles && rc == 0; f++) {
        ft_line_reader rd;
        if (ft_lines_open(&rd, files[f], "records file ", EST_RECORD_MAX_LINE_BYTES, err, errlen) < 0) {
            rc = -1;
            break;
        }
        char dir[4096];
        est_record_dir(files[f], dir, sizeof dir);
        ft_line ln;
        int got = 0;
        while (rc == 0 && (got = ft_lines_next(&rd, &ln, err, errlen)) == 1)
            if (!is_blank(&ln)) rc = add_line(files[f], dir, &ln, cat, &recs, &n, &cap, err, errlen);
        if (rc == 0 && got < 0) rc = -1;
        ft_lines_close(&rd);
    }
    if (rc == 0) {
        cal_fit_census c = {.unreadable = 0};
        cal_fit_count(recs, n, &c);
        rc = cal_fit_census_check(&c, err, errlen);
    }
    for (size_t i = 0; i < n; i++) est_record_free(&recs[i]);
    free(recs);
    return rc;
}
