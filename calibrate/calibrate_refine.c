/* `ftest calibrate --refine N`: after the grid, more points where the
 * estimate errs most (calibrate_sweep.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cJSON.h>

#include "calibrate_sweep.h"
#include "estimate.h"
#include "json_util.h"
#include "record.h"

/* |estimate / measured - 1| of the largest rank's peak for a record line. */
static double residual(const char *line, const est_gpu_catalog *cat) {
    est_record r;
    char err[256];
    if (est_record_parse(line, strlen(line), cat, &r, err, sizeof err) < 0) return -1;
    double res = -1;
    int64_t peak = 0;
    for (size_t i = 0; i < r.rank_count; i++)
        if (est_record_peak(&r.ranks[i]) > peak) peak = est_record_peak(&r.ranks[i]);
    est_estimate e;
    est_estimate_init(&e);
    if (!r.oom && peak > 0 && est_estimate_run(&r.run, &e, err, sizeof err) == 0)
        res = fabs((double)e.peak_allocated_bytes / (double)peak - 1);
    est_estimate_free(&e);
    est_record_free(&r);
    return res;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The neighbour of v in the sorted list on side dir (-1, +1); v when none. */
static int64_t neighbour(const int64_t *sorted, int n, int64_t v, int dir) {
    for (int i = 0; i < n; i++)
        if (sorted[i] == v) {
            int j = i + dir;
            return j >= 0 && j < n ? sorted[j] : v;
        }
    return v;
}

/* Adaptive refinement: rank the grid's finished points by the estimate's
 * error, and add midpoints in sequence length and micro-batch around the
 * worst ones, up to --refine points in all: refinements already in the files
 * (an interrupted sweep's) count, so a rerun finishes the refinement rather
 * than adding more. */
int cal_refine(cal_sweep *s, const cal_point *pts, size_t n, const est_gpu_catalog *cat, char *err,
                  size_t errlen) {
    size_t len = 0;
    char *text = access(s->o->out, F_OK) == 0
                     ? ft_read_file(s->o->out, (size_t)1 << 30, &len, err, errlen) : NULL;
    if (!text) return 0;
    double *res = calloc(n ? n : 1, sizeof *res);
    cal_point *extra = calloc((size_t)s->o->refine + 1, sizeof *extra);
    int64_t *seqs = malloc(sizeof s->o->grid.seqs), *batches = malloc(sizeof s->o->grid.batches);
    if (!res || !extra || !seqs || !batches) {
        free(text), free(res), free(extra), free(seqs), free(batches);
        return ft_errorf(err, errlen, "out of memory");
    }
    for (size_t i = 0; i < n; i++) res[i] = -1;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        cJSON *j = cJSON_Parse(line);
        const cJSON *key = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "calibrate"), "key");
        for (size_t i = 0; cJSON_IsString(key) && i < n; i++)
            if (!strcmp(pts[i].key, key->valuestring)) res[i] = residual(line, cat);
        cJSON_Delete(j);
    }
    free(text);
    const cal_grid *g = &s->o->grid;
    memcpy(seqs, g->seqs, sizeof g->seqs);
    memcpy(batches, g->batches, sizeof g->batches);
    qsort(seqs, (size_t)g->nseqs, sizeof *seqs, cmp_i64);
    qsort(batches, (size_t)g->nbatches, sizeof *batches, cmp_i64);
    size_t already = 0;
    for (size_t i = 0; i < s->done.n; i++) already += s->done.v[i].refined;
    size_t want = (size_t)s->o->refine > already ? (size_t)s->o->refine - already : 0;
    size_t m = 0;
    while (m < want) {
        size_t worst = n;
        for (size_t i = 0; i < n; i++)
            if (res[i] >= 0 && (worst == n || res[i] > res[worst])) worst = i;
        if (worst == n) break;
        res[worst] = -1;
        for (int side = 0; side < 4 && m < want; side++) {
            cal_point c = pts[worst];
            int dir = side % 2 ? 1 : -1;
            if (side < 2) c.seq = (c.seq + neighbour(seqs, g->nseqs, c.seq, dir)) / 2;
            else c.batch = (c.batch + neighbour(batches, g->nbatches, c.batch, dir)) / 2;
            if (c.seq == pts[worst].seq && c.batch == pts[worst].batch) continue;
            cal_point_key(g->runner, &c);
            bool dup = cal_done_find(&s->done, c.key) != NULL;
            for (size_t k = 0; k < m; k++) dup |= !strcmp(extra[k].key, c.key);
            for (size_t k = 0; k < n; k++) dup |= !strcmp(pts[k].key, c.key);
            if (!dup) extra[m++] = c;
        }
    }
    free(res), free(seqs), free(batches);
    if (m > 0 && !s->o->quiet)
        fprintf(s->log, "refinement: %zu point(s) where the estimate errs most\n", m);
    s->sum->refined = m;
    s->refining = true;
    int rc = cal_run_points(s, extra, m, err, errlen);
    s->refining = false;
    free(extra);
    return rc;
}

