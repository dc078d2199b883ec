/* Time constants fitted from records (estimator/timing.c, docs/method.md ("Step time")).
 *
 * What measured iterations per second determine, and how:
 *  - framework_layer_host_s (the framework's host time per decoder block per
 *    micro-batch) and matmul_peak_efficiency (the large-GEMM fraction of the
 *    GPU's dense peak), jointly, from the records without CPU offload. Short
 *    sequences are host-bound (the plateau of a sequence sweep sets the host
 *    time), long ones device-bound (the slope sets the efficiency), so a sweep
 *    over sequence length or batch determines both.
 *  - cpu_adam_host_bytes_per_s, from the records with CPU offload, the other
 *    two held at their fitted values.
 * Each fit minimizes the sum of |log(predicted / measured)| over the records:
 * the L1 norm, so that a few outliers (a warm-up step measured as a run) do not
 * pull the fit. The framework-wide section gets only the host-side constants;
 * the efficiency is a property of the GPU and goes to its own section. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fit.h"
#include "json_util.h"
#include "timing.h"

typedef struct {
    const est_record **recs;
    size_t n;
    est_constants k;
} objective;

static double cost(const objective *o) {
    double sum = 0;
    for (size_t i = 0; i < o->n; i++) {
        est_time_detail t;
        est_time_model(&o->recs[i]->run, &o->k, &t);
        if (!(t.it_per_s > 0)) return INFINITY;
        sum += fabs(log(t.it_per_s / o->recs[i]->it_per_s));
    }
    return sum;
}

/* Minimizes cost over k.value[id] in [lo, hi]: a grid, then golden-section
 * search in the bracket around the best grid point. Leaves the best value set. */
static void minimize(objective *o, est_constant_id id, double lo, double hi) {
    enum { GRID = 24, GOLDEN = 40 };
    double best = lo, best_c = INFINITY;
    for (int i = 0; i <= GRID; i++) {
        double x = lo + (hi - lo) * i / GRID;
        o->k.value[id] = x;
        double c = cost(o);
        if (c < best_c) best_c = c, best = x;
    }
    double a = fmax(lo, best - (hi - lo) / GRID), b = fmin(hi, best + (hi - lo) / GRID);
    const double phi = (sqrt(5.0) - 1) / 2;
    double x1 = b - phi * (b - a), x2 = a + phi * (b - a);
    o->k.value[id] = x1;
    double c1 = cost(o);
    o->k.value[id] = x2;
    double c2 = cost(o);
    for (int i = 0; i < GOLDEN; i++) {
        if (c1 <= c2) {
            b = x2, x2 = x1, c2 = c1, x1 = b - phi * (b - a);
            o->k.value[id] = x1;
            c1 = cost(o);
        } else {
            a = x1, x1 = x2, c1 = c2, x2 = a + phi * (b - a);
            o->k.value[id] = x2;
            c2 = cost(o);
        }
    }
    double x = c1 <= c2 ? x1 : x2, c = fmin(c1, c2);
    o->k.value[id] = c <= best_c ? x : best;
}

/* Median |log error| in percent of what the records predict now. */
static double median_abs_err(const objective *o) {
    double *e = malloc((o->n ? o->n : 1) * sizeof *e);
    if (!e) return NAN;
    for (size_t i = 0; i < o->n; i++) {
        est_time_detail t;
        est_time_model(&o->recs[i]->run, &o->k, &t);
        e[i] = fabs(t.it_per_s / o->recs[i]->it_per_s - 1);
    }
    cal_sort(e, o->n);
    double m = o->n ? e[o->n / 2] : NAN;
    free(e);
    return 100 * m;
}

int cal_fit_time(const cal_group *g, cJSON *section, FILE *log, char *err, size_t errlen) {
    const est_record **plain = malloc((g->count ? g->count : 1) * sizeof *plain);
    const est_record **off = malloc((g->count ? g->count : 1) * sizeof *off);
    if (!plain || !off) {
        free(plain);
        free(off);
        return ft_errorf(err, errlen, "out of memory");
    }
    size_t np = 0, no = 0;
    est_constants probe;
    est_constants_defaults(&probe);
    for (size_t i = 0; i < g->count; i++) {
        const est_record *r = g->records[i];
        if (r->oom || !(r->it_per_s > 0) || !isfinite(r->it_per_s)) continue;
        est_time_detail t;
        est_time_model(&r->run, &probe, &t);
        if (!t.modelled) continue; /* a device without peak figures (ftrain's CPU backend) */
        if (r->run.offload == EST_OFFLOAD_NONE) plain[np++] = r;
        else off[no++] = r;
    }
    const char *who = g->gpu ? g->gpu : "all GPUs";
    char src[160];
    if (np >= 2) {
        objective o = {.recs = plain, .n = np};
        est_constants_defaults(&o.k);
        /* Coordinate descent; each 1-D fit is convex enough in practice. */
        for (int round = 0; round < 4; round++) {
            minimize(&o, EST_K_FRAMEWORK_LAYER_HOST_S, 0, 0.02);
            minimize(&o, EST_K_MATMUL_PEAK_EFF, 0.05, 1.0);
        }
        double host = round(o.k.value[EST_K_FRAMEWORK_LAYER_HOST_S] * 1e7) / 1e7;
        double eff = round(o.k.value[EST_K_MATMUL_PEAK_EFF] * 1e4) / 1e4;
        o.k.value[EST_K_FRAMEWORK_LAYER_HOST_S] = host;
        o.k.value[EST_K_MATMUL_PEAK_EFF] = eff;
        snprintf(src, sizeof src, "ftest fit: L1 fit of log it/s over %zu records (%.60s)", np, g->files);
        cal_put(section, "framework_layer_host_s", host, src);
        if (g->gpu) cal_put(section, "matmul_peak_efficiency", eff, src);
        fprintf(log, "  %s: framework_layer_host_s = %.7f s, matmul_peak_efficiency = %.4f%s "
                     "from %zu records (median |err| %.1f%%)\n",
                who, host, eff, g->gpu ? "" : " (GPU sections only)", np, median_abs_err(&o));
        if (no >= 1) {
            objective oo = {.recs = off, .n = no, .k = o.k};
            minimize(&oo, EST_K_CPU_ADAM_BYTES_PER_S, 1e9, 200e9);
            double bw = round(oo.k.value[EST_K_CPU_ADAM_BYTES_PER_S] / 1e7) * 1e7;
            oo.k.value[EST_K_CPU_ADAM_BYTES_PER_S] = bw;
            snprintf(src, sizeof src, "ftest fit: L1 fit of log it/s over %zu offload records (%.60s)",
                     no, g->files);
            cal_put(section, "cpu_adam_host_bytes_per_s", bw, src);
            fprintf(log, "  %s: cpu_adam_host_bytes_per_s = %.3g from %zu offload records "
                         "(median |err| %.1f%%)\n", who, bw, no, median_abs_err(&oo));
        }
    }
    free(plain);
    free(off);
    return 0;
}
