#include "calibrate_grid.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_util.h"
#include "whole_number.h"

int cal_parse_int_list(const char *opt, const char *s, int64_t min, int64_t max, int64_t *out,
                       int cap, char *err, size_t errlen) {
    char buf[512];
    if (!s || !*s) return ft_errorf(err, errlen, "%s needs a value", opt);
    if (!ft_strlcpy(buf, s, sizeof buf)) return ft_errorf(err, errlen, "%s: value is too long", opt);
    if (strchr(buf, ':')) {
        char *parts[3];
        const int n = est_split_range(opt, s, buf, parts, err, errlen);
        if (n < 0) return -1;
        int64_t v[3] = {0, 0, 1};
        for (int i = 0; i < n; i++)
            if (est_parse_int(opt, parts[i], i == 2 ? 1 : min, max, &v[i], err, errlen) < 0) return -1;
        if (n == 1) v[1] = v[0];
        if (v[1] < v[0]) return ft_errorf(err, errlen, "%s: STOP is below START", opt);
        if ((v[1] - v[0]) / v[2] + 1 > cap)
            return ft_errorf(err, errlen, "%s: more than %d values", opt, cap);
        int k = 0;
        for (int64_t x = v[0]; x <= v[1]; x += v[2]) out[k++] = x;
        return k;
    }
    int k = 0;
    for (char *tok = buf, *next; tok; tok = next) {
        next = strchr(tok, ',');
        if (next) *next++ = '\0';
        if (k == cap) return ft_errorf(err, errlen, "%s: more than %d values", opt, cap);
        if (est_parse_int(opt, tok, min, max, &out[k], err, errlen) < 0) return -1;
        for (int j = 0; j < k; j++)
            if (out[j] == out[k]) return ft_errorf(err, errlen, "%s: %lld given twice", opt, (long long)out[k]);
        k++;
    }
    return k;
}

void cal_point_key(const char *runner, cal_point *p) {
    snprintf(p->key, sizeof p->key,
             "%s model=%.120s layers=%lld seq=%lld batch=%lld ckpt=%s zero=%d prec=%s world=%lld rank=%lld",
             runner, p->model, (long long)p->layers, (long long)p->seq, (long long)p->batch,
             est_checkpointing_name(p->ckpt), p->zero, est_precision_name(p->precision),
             (long long)p->world, (long long)p->rank);
}

int64_t cal_shallow_depth(int64_t k) {
    return k / 2 > 0 ? k / 2 : 1;
}

size_t cal_grid_plan(const cal_grid *g, cal_point *out, size_t cap) {
    int64_t depths[2] = {0, 0};
    int ndepths = 1;
    if (g->layers > 0) {
        depths[0] = g->layers;
        if (cal_shallow_depth(g->layers) < g->layers) {
            depths[0] = cal_shallow_depth(g->layers);
            depths[1] = g->layers;
            ndepths = 2;
        }
    }
    int64_t zero_rank = 0;
    const int64_t *ranks = g->nemulated ? g->emulated : &zero_rank;
    int nranks = g->nemulated ? g->nemulated : 1;
    size_t n = 0;
    for (int m = 0; m < g->nmodels; m++)
        for (int pr = 0; pr < g->nprecisions; pr++)
            for (int z = 0; z < g->nzeros; z++)
                for (int c = 0; c < g->nckpts; c++)
                    for (int s = 0; s < g->nseqs; s++)
                        for (int b = 0; b < g->nbatches; b++)
                            for (int r = 0; r < nranks; r++)
                                for (int d = 0; d < ndepths; d++, n++) {
                                    if (n >= cap) continue;
                                    cal_point *p = &out[n];
                                    memset(p, 0, sizeof *p);
                                    ft_strlcpy(p->model, g->models[m], sizeof p->model);
                                    p->precision = g->precisions[pr];
                                    p->zero = g->zeros[z];
                                    p->ckpt = g->ckpts[c];
                                    p->seq = g->seqs[s];
                                    p->batch = g->batches[b];
                                    p->world = g->world;
                                    p->rank = ranks[r];
                                    p->layers = depths[d];
                                    cal_point_key(g->runner, p);
                                }
    return n;
}
