/* The set of points a sweep has done (`ftest calibrate`): keyed by the
 * configuration, with the peaks their records carry (for --refine and
 * --layers extrapolation). Shared by the runner (calibrate_run.c) and the
 * claims of concurrent sweeps (calibrate_claim.c). */
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "calibrate_sweep.h"
#include "json_util.h"

cal_done_entry *cal_done_find(const cal_done_set *d, const char *key) {
    for (size_t i = 0; i < d->n; i++)
        if (!strcmp(d->v[i].key, key)) return &d->v[i];
    return NULL;
}

cal_done_entry *cal_done_add(cal_done_set *d, const char *key) {
    cal_done_entry *e = cal_done_find(d, key);
    if (e) return e;
    if (d->n == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 64;
        cal_done_entry *nv = realloc(d->v, cap * sizeof *nv);
        if (!nv) return NULL;
        d->v = nv;
        d->cap = cap;
    }
    e = &d->v[d->n++];
    memset(e, 0, sizeof *e);
    ft_strlcpy(e->key, key, sizeof e->key);
    return e;
}

/* The per-rank peaks of a record's "measured.ranks". */
void cal_read_peaks(const cJSON *rec, cal_done_entry *e) {
    const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(rec, "measured"), "ranks");
    e->nranks = 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, ranks) {
        if (e->nranks == CAL_MAX_RANKS) break;
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(r, "peak_allocated_bytes");
        if (!cJSON_IsNumber(a)) a = cJSON_GetObjectItemCaseSensitive(r, "peak_active_bytes");
        if (!cJSON_IsNumber(a)) return;
        e->peak[e->nranks++] = (int64_t)a->valuedouble;
    }
    e->has_peaks = e->nranks > 0;
}
