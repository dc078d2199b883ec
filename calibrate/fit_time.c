/* Time constants fitted from records (estimator/ledger/timing.c, docs/method.md ("Step time")).
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

#include "cpu_device.h"
#include "fitters.h"
#include "fw_registry.h"
#include "json_util.h"
#include "profiles.h"
#include "timing.h"
#include "step_build.h"

typedef struct {
    const est_record **recs;
    size_t n;
    est_constants k;
    /* Each record's step, built on first use and priced again at every trial
     * value: the constants fitted here are the time ledger's rates, which no
     * event of a step depends on. */
    est_step *steps;
    FILE *log;          /* where a record without a step time is said */
    const double *weight; /* each record's weight in the cost; NULL: 1 each */
} objective;

/* The run whose step is timed: with batches of many lengths (seq_mean:
 * dynamic padding) the step of the mean padded length, as estimate.c's
 * time_of prices it (docs/method.md, "Sequences of many lengths"). */
static est_run timed_run(const est_record *r) {
    est_run run = r->run;
    const int64_t mean = (int64_t)llround(run.seq_mean);
    if (run.seq_mean > 0 && mean < run.seq_len) {
        run.seq_len = mean > 0 ? mean : 1;
        run.seq_mean = 0;
    }
    return run;
}

/* The time of record i at the objective's constants. */
static void time_of(objective *o, size_t i, est_time_detail *t) {
    if (!o->steps && o->n) {
        o->steps = calloc(o->n, sizeof *o->steps);
        for (size_t j = 0; o->steps && j < o->n; j++) {
            char err[160];
            const est_run run = timed_run(o->recs[j]);
            if (est_step_build(&run, &o->k, &o->steps[j], err, sizeof err) < 0) {
                o->steps[j].oom = true; /* not modelled: priced as no time, and said */
                if (o->log) fprintf(o->log, "  no step time for record %zu: %s\n", j, err);
            }
        }
    }
    const est_run run = timed_run(o->recs[i]);
    if (o->steps) est_time_ledger(&run, &o->steps[i], &o->k, t, NULL);
    else est_time_model(&run, &o->k, t);
}

static void objective_free(objective *o) {
    for (size_t j = 0; o->steps && j < o->n; j++) est_step_free(&o->steps[j]);
    free(o->steps);
    o->steps = NULL;
}

static double cost(objective *o) {
    double sum = 0;
    for (size_t i = 0; i < o->n; i++) {
        est_time_detail t;
        time_of(o, i, &t);
        if (!(t.it_per_s > 0)) return INFINITY;
        sum += (o->weight ? o->weight[i] : 1) * fabs(log(t.it_per_s / o->recs[i]->it_per_s));
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
static double median_abs_err(objective *o) {
    double *e = malloc((o->n ? o->n : 1) * sizeof *e);
    if (!e) return NAN;
    for (size_t i = 0; i < o->n; i++) {
        est_time_detail t;
        time_of(o, i, &t);
        e[i] = fabs(t.it_per_s / o->recs[i]->it_per_s - 1);
    }
    cal_sort(e, o->n);
    double m = o->n ? e[o->n / 2] : NAN;
    free(e);
    return 100 * m;
}

/* Starts from the defaults, then the framework-wide values the fit of the
 * whole framework produced (a GPU section inherits them). */
static void apply_section(const cJSON *section, est_constants *k) {
    for (int id = 0; section && id < EST_K_COUNT; id++) {
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(section, est_constant_name((est_constant_id)id));
        const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, "value") : NULL;
        if (cJSON_IsNumber(v)) k->value[id] = v->valuedouble;
    }
}

/* ... after the profile common to the PyTorch stacks (cal_fit_host_ops). */
static void start_constants(const cal_group *g, est_constants *k) {
    est_constants_defaults(k);
    apply_section(g->common, k);
    apply_section(g->framework, k);
}

/* The group's records with a measured speed the time model covers, by what
 * they fit. */
typedef struct timed_records {
    const est_record **single; /* without ZeRO-3 collectives across ranks, no offload */
    const est_record **multi;  /* DeepSpeed ZeRO-3 across ranks, no offload */
    const est_record **off;    /* CPU offload */
    size_t ns, nm, no;
} timed_records;

static void free_timed(timed_records *t) {
    free(t->single);
    free(t->multi);
    free(t->off);
}

/* Sorts g's records into *t. 0, or -1 out of memory (nothing left allocated). */
static int sort_timed(const cal_group *g, timed_records *t) {
    size_t cap = g->count ? g->count : 1;
    t->single = malloc(cap * sizeof *t->single);
    t->multi = malloc(cap * sizeof *t->multi);
    t->off = malloc(cap * sizeof *t->off);
    t->ns = t->nm = t->no = 0;
    if (!t->single || !t->multi || !t->off) {
        free_timed(t);
        return -1;
    }
    est_constants probe;
    est_constants_defaults(&probe);
    for (size_t i = 0; i < g->count; i++) {
        const est_record *r = g->records[i];
        if (r->oom || !(r->it_per_s > 0) || !isfinite(r->it_per_s)) continue;
        /* A hand-written loop's step time holds its own host work (batching,
         * padding, loss.item()), not the framework's: it checks the time
         * model, it does not fit the framework's host constant. */
        if (r->run.train_loop != EST_LOOP_TRAINER) continue;
        est_time_detail td;
        est_time_model(&r->run, &probe, &td);
        /* Not modelled, or ftrain's CPU backend: its rates are measured
         * (cpu_device.h), no constant of the GPU model applies to it. */
        if (!td.modelled || est_cpu_device_run(&r->run)) continue;
        bool zero3_ranks = est_fw_stream_ordered_frees(&r->run);
        if (r->run.offload != EST_OFFLOAD_NONE) t->off[t->no++] = r;
        else if (zero3_ranks) t->multi[t->nm++] = r;
        else t->single[t->ns++] = r;
    }
    return 0;
}

static const char *group_name(const cal_group *g) { return g->gpu ? g->gpu : "all GPUs"; }

/* Runs without ZeRO-3 collectives in the units (one rank, or another
 * framework or stage): the framework's host time per block, into o->k and
 * section. The GPU's side has no fitted constant: its GEMMs run against the
 * card's measured matmul ceiling (estimator/ledger/gemm.c). */
static void fit_host(const cal_group *g, cJSON *section, FILE *log, const timed_records *t,
                     objective *o) {
    char src[160];
    o->recs = t->single;
    o->n = t->ns;
    minimize(o, EST_K_FRAMEWORK_LAYER_HOST_S, 0, 0.02);
    double host = round(o->k.value[EST_K_FRAMEWORK_LAYER_HOST_S] * 1e7) / 1e7;
    o->k.value[EST_K_FRAMEWORK_LAYER_HOST_S] = host;
    snprintf(src, sizeof src, "ftest fit: L1 fit of log it/s over %zu records (%.60s)", t->ns,
             g->files);
    cal_put(section, "framework_layer_host_s", host, src);
    fprintf(log, "  %s: framework_layer_host_s = %.7f s from %zu records (median |err| %.1f%%)\n",
            group_name(g), host, t->ns, median_abs_err(o));
}

/* DeepSpeed ZeRO-3 across ranks: the host time stays the fit above (the
 * per-block host work of the hooks does not depend on the rank count); what
 * these records add is the share of the link DeepSpeed's per-module
 * collectives reach (the plateau of a sequence sweep). o->k takes it. */
static void fit_zero3(const cal_group *g, cJSON *section, FILE *log, const timed_records *t,
                      objective *o) {
    char src[160];
    objective om = {.recs = t->multi, .n = t->nm, .k = o->k, .log = log};
    for (int round = 0; round < 4; round++) {
        minimize(&om, EST_K_ZERO3_COMM_EFF, 0.02, 1.0);
        minimize(&om, EST_K_COMM_INTERFERENCE, 0, 3.0);
    }
    double kappa = round(om.k.value[EST_K_COMM_INTERFERENCE] * 1e4) / 1e4;
    om.k.value[EST_K_COMM_INTERFERENCE] = kappa;
    double z3 = round(om.k.value[EST_K_ZERO3_COMM_EFF] * 1e4) / 1e4;
    om.k.value[EST_K_ZERO3_COMM_EFF] = z3;
    snprintf(src, sizeof src, "ftest fit: L1 fit of log it/s over %zu ZeRO-3 multi-rank records (%.60s)",
             t->nm, g->files);
    cal_put(section, "zero3_comm_efficiency", z3, src);
    cal_put(section, "comm_compute_interference", kappa, src);
    fprintf(log, "  %s: zero3_comm_efficiency = %.4f, comm_compute_interference = %.4f from %zu "
                 "ZeRO-3 multi-rank records (median |err| %.1f%%)\n", group_name(g), z3, kappa, t->nm,
            median_abs_err(&om));
    o->k = om.k;
    objective_free(&om);
}

/* The CPU optimizer's host bandwidth from the offload records, the other
 * constants held at o->k. */
static void fit_offload(const cal_group *g, cJSON *section, FILE *log, const timed_records *t,
                        const objective *o) {
    char src[160];
    objective oo = {.recs = t->off, .n = t->no, .k = o->k, .log = log};
    minimize(&oo, EST_K_HOST_MEM_EFF, 0.02, 1.0);
    double bw = round(oo.k.value[EST_K_HOST_MEM_EFF] * 1e4) / 1e4;
    oo.k.value[EST_K_HOST_MEM_EFF] = bw;
    snprintf(src, sizeof src, "ftest fit: L1 fit of log it/s over %zu offload records (%.60s)", t->no,
             g->files);
    cal_put(section, "host_memory_efficiency", bw, src);
    fprintf(log, "  %s: host_memory_efficiency = %.4f from %zu offload records "
                 "(median |err| %.1f%%)\n", group_name(g), bw, t->no, median_abs_err(&oo));
    objective_free(&oo);
}

int cal_fit_time(const cal_group *g, cJSON *section, FILE *log, char *err, size_t errlen) {
    /* Time constants describe a framework or the hosts, never one GPU's
     * compute: they are fitted over every GPU's records together, into the
     * framework-wide section only. */
    if (g->gpu) return 0;
    timed_records t;
    if (sort_timed(g, &t) < 0) return ft_errorf(err, errlen, "out of memory");
    objective o = {.n = 0, .log = log};
    start_constants(g, &o.k);
    bool fitted = false;
    if (t.ns >= 2) {
        fit_host(g, section, log, &t, &o);
        fitted = true;
    }
    if (t.nm >= 2) {
        fit_zero3(g, section, log, &t, &o);
        fitted = true;
    }
    if (fitted && t.no >= 1) fit_offload(g, section, log, &t, &o);
    objective_free(&o);
    free_timed(&t);
    return 0;
}

/* The host's cost per ATen op (kernel_host_overhead_s: the time ledger
 * prices each op a block's description dispatches, model/host_ops.h, and
 * each kernel of the other units), fitted once over the records of every
 * PyTorch stack and GPU, the frameworks' own per-block host time held at
 * zero: the Python, dispatcher and autograd work per op is the same
 * mechanism under the HF Trainer, DeepSpeed and FSDP; what a framework adds
 * per block (hooks) is then fitted per framework on top of it. Each measured
 * series (a record's source) weighs the same in the cost, so that a sweep of
 * thousands of points does not outvote a dozen taken elsewhere. */
int cal_fit_host_ops(const cal_group *g, cJSON *section, FILE *log, char *err, size_t errlen) {
    if (g->gpu) return 0; /* one value for every GPU */
    timed_records t;
    if (sort_timed(g, &t) < 0) return ft_errorf(err, errlen, "out of memory");
    double *w = malloc((t.ns ? t.ns : 1) * sizeof *w);
    if (!w) {
        free_timed(&t);
        return ft_errorf(err, errlen, "out of memory");
    }
    for (size_t i = 0; i < t.ns; i++) {
        size_t same = 0;
        for (size_t j = 0; j < t.ns; j++) same += !strcmp(t.single[i]->source, t.single[j]->source);
        w[i] = 1.0 / (double)same;
    }
    if (t.ns >= 2) {
        char src[160];
        objective o = {.recs = t.single, .n = t.ns, .log = log, .weight = w};
        est_constants_defaults(&o.k);
        o.k.value[EST_K_FRAMEWORK_LAYER_HOST_S] = 0;
        minimize(&o, EST_K_KERNEL_HOST_S, 0, 1e-4);
        const double op_s = round(o.k.value[EST_K_KERNEL_HOST_S] * 1e9) / 1e9;
        o.k.value[EST_K_KERNEL_HOST_S] = op_s;
        snprintf(src, sizeof src, "ftest fit: L1 fit of log it/s over %zu records, each series weighed once (%.60s)",
                 t.ns, g->files);
        cal_put(section, "kernel_host_overhead_s", op_s, src);
        fprintf(log, "  all GPUs: kernel_host_overhead_s = %.3g s from %zu records (median |err| %.1f%%)\n", op_s,
                t.ns, median_abs_err(&o));
        objective_free(&o);
    }
    free(w);
    free_timed(&t);
    return 0;
}
