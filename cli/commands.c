#include "commands.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "cli_run.h"
#include "file_io.h"
#include "inverse.h"
#include "json_util.h"
#include "plan.h"
#include "progress.h"
#include "report.h"
#include "strategy.h"
#include "svg.h"
#include "sweep.h"

#define GIB 1073741824.0

/* Without strategy flags, the strategy ftest recommends for `probe` (else
 * the one using the least memory) applied to `run`; its label into `label`. */
static int choose_strategy(const est_cli *cli, est_run *run, const est_run *probe, char *label,
                           size_t n) {
    label[0] = '\0';
    if (est_cli_strategy_given(cli)) return 0;
    est_alternative alts[EST_MAX_STRATEGIES];
    size_t na = est_evaluate_strategies(probe, alts);
    int pick = est_recommend(alts, na);
    if (pick < 0) pick = est_least_memory(alts, na);
    if (pick < 0) return -1;
    est_run chosen;
    est_strategy_apply(&alts[pick].strategy, run, &chosen);
    *run = chosen;
    ft_strlcpy(label, alts[pick].strategy.label, n);
    return alts[pick].fits ? 0 : 1;
}

/* ---- sweep ---------------------------------------------------------------------- */

static int csv_writer(FILE *f, const void *sweep) { return est_sweep_csv(f, sweep); }

/* "-" is stdout; a file is replaced atomically (file_io.h). */
static int write_csv(const char *path, const est_sweep *s, FILE *out, char *err, size_t errlen) {
    if (!strcmp(path, "-")) return est_sweep_csv(out, s) < 0 ? ft_errorf(err, errlen, "write error") : 0;
    return ft_write_atomic_with(path, csv_writer, s, err, errlen);
}

static char *sweep_json(const est_sweep *s, const char *strategy) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "schema", "ftest.sweep/1");
    cJSON_AddStringToObject(root, "variable", s->var == EST_SWEEP_SEQ ? "seq" : "batch");
    cJSON_AddStringToObject(root, "model", s->base.model.name);
    cJSON_AddStringToObject(root, "gpu", s->base.gpu.name);
    if (strategy[0]) cJSON_AddStringToObject(root, "strategy", strategy);
    cJSON_AddNumberToObject(root, "capacity_bytes", (double)s->capacity_bytes);
    cJSON_AddNumberToObject(root, "tight_margin_frac", s->base.tight_margin_frac);
    long last = est_sweep_last_fit(s);
    if (last >= 0) cJSON_AddNumberToObject(root, "last_fit", (double)s->pts[last].x);
    cJSON *arr = cJSON_AddArrayToObject(root, "points");
    for (size_t i = 0; i < s->n; i++) {
        const est_sweep_point *p = &s->pts[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "x", (double)p->x);
        cJSON_AddBoolToObject(o, "valid", p->valid);
        if (!p->valid) {
            cJSON_AddStringToObject(o, "why", p->why);
        } else {
            cJSON *c = cJSON_AddObjectToObject(o, "at_peak_bytes");
            for (int k = 0; k < EST_CAT_COUNT; k++)
                cJSON_AddNumberToObject(c, est_category_names[k], (double)p->at_peak[k]);
            cJSON_AddNumberToObject(o, "peak_allocated_bytes", (double)p->peak_allocated_bytes);
            cJSON_AddNumberToObject(o, "device_used_bytes", (double)p->device_used_bytes);
            cJSON_AddBoolToObject(o, "fits", p->fits);
            cJSON_AddBoolToObject(o, "tight", p->tight);
            cJSON_AddStringToObject(o, "peak_moment", p->peak_label);
            cJSON_AddNumberToObject(o, "step_time_s", p->step_time_s);
            cJSON_AddNumberToObject(o, "it_per_s", p->it_per_s);
            cJSON_AddNumberToObject(o, "tokens_per_s", p->tokens_per_s);
            cJSON_AddNumberToObject(o, "mfu", p->mfu);
        }
        cJSON_AddItemToArray(arr, o);
    }
    char *txt = cJSON_Print(root);
    cJSON_Delete(root);
    return txt;
}

/* The run's description with the swept variable as its range, not the
 * single value the run holds ("seq 2048" while seq goes 512..8192). */
static void print_swept_run(FILE *out, const est_run *run, est_sweep_var var, est_range r) {
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m) {
        est_print_run(out, run);
        return;
    }
    est_print_run(m, run);
    fclose(m);
    char was[48], now[96];
    if (var == EST_SWEEP_SEQ) snprintf(was, sizeof was, "seq %lld", (long long)run->seq_len);
    else snprintf(was, sizeof was, "micro-batch %lld", (long long)run->micro_batch);
    snprintf(now, sizeof now, "%s %lld..%lld (step %lld, swept)", var == EST_SWEEP_SEQ ? "seq" : "micro-batch",
             (long long)r.start, (long long)r.stop, (long long)r.step);
    const char *at = text ? strstr(text, was) : NULL;
    if (at) fprintf(out, "%.*s%s%s", (int)(at - text), text, now, at + strlen(was));
    else if (text) fputs(text, out);
    free(text);
}

static int cmd_sweep(const est_cli *cli, const est_gpu_catalog *cat, FILE *out, char *err,
                     size_t errlen) {
    if (cli->sweep_seq_set == cli->sweep_batch_set)
        return ft_errorf(err, errlen, "sweep needs one range: --seq START:STOP[:STEP] or --batch START:STOP[:STEP]");
    const est_sweep_var var = cli->sweep_seq_set ? EST_SWEEP_SEQ : EST_SWEEP_BATCH;
    const est_range r = cli->sweep_seq_set ? cli->sweep_seq : cli->sweep_batch;
    if (r.stop < r.start || r.step < 1) return ft_errorf(err, errlen, "the range's STOP is below its START");
    est_run run;
    if (est_cli_build_run(cli, cat, &run, err, errlen) < 0) return -1;
    /* The strategy: given, or recommended at the range's hardest point. */
    char label[64];
    est_run probe = run;
    int64_t stop = r.start + (r.stop - r.start) / r.step * r.step;
    if (var == EST_SWEEP_SEQ) {
        probe.seq_len = stop;
        if (run.model.max_position > 0 && probe.seq_len > run.model.max_position)
            probe.seq_len = run.model.max_position;
    } else {
        probe.micro_batch = stop;
    }
    if (choose_strategy(cli, &run, &probe, label, sizeof label) < 0)
        return ft_errorf(err, errlen, "no strategy can be estimated for this run");
    est_progress prog;
    est_progress_begin(&prog, "sweep");
    est_sweep s;
    int rc = est_sweep_run(&run, var, r, &prog, &s, err, errlen);
    est_progress_end(&prog);
    if (rc < 0) return -1;
    est_sweep_measured *m = NULL;
    size_t nm = 0;
    if (cli->records_file[0] &&
        est_sweep_measured_points(&s, cli->records_file, cat, &m, &nm, err, errlen) < 0) {
        est_sweep_free(&s);
        return -1;
    }
    /* Files first, then standard output: a reader that closes the pipe early
     * (| head) cannot stop the files from being written. */
    const bool csv_stdout = !strcmp(cli->csv, "-"), csv_file = cli->csv[0] && !csv_stdout;
    if (rc == 0 && csv_file) rc = write_csv(cli->csv, &s, out, err, errlen);
    if (rc == 0 && cli->svg[0]) rc = est_sweep_svg(cli->svg, &s, m, nm, err, errlen);
    if (rc == 0 && csv_stdout) {
        /* Standard output is the CSV alone, so it parses as one. */
        rc = write_csv(cli->csv, &s, out, err, errlen);
    } else if (rc == 0 && cli->json) {
        char *txt = sweep_json(&s, label);
        if (!txt) rc = ft_errorf(err, errlen, "out of memory");
        else fprintf(out, "%s\n", txt);
        free(txt);
    } else if (rc == 0) {
        print_swept_run(out, &run, var, r);
        if (label[0])
            fprintf(out, "strategy: %s (recommended at %s %lld; choose with --zero/--offload/--checkpointing)\n",
                    label, var == EST_SWEEP_SEQ ? "seq" : "batch",
                    (long long)(var == EST_SWEEP_SEQ ? probe.seq_len : probe.micro_batch));
        est_sweep_print(out, &s);
        if (cli->records_file[0])
            fprintf(out, "%zu measured point%s from %s match this sweep\n", nm, nm == 1 ? "" : "s",
                    cli->records_file);
        if (csv_file || cli->svg[0])
            fprintf(out, "wrote %s%s%s\n", csv_file ? cli->csv : "", csv_file && cli->svg[0] ? ", " : "",
                    cli->svg[0] ? cli->svg : "");
    }
    long last = est_sweep_last_fit(&s);
    est_sweep_free(&s);
    free(m);
    if (rc < 0) return -1;
    return last >= 0 ? 0 : 1;
}

/* ---- timeline ------------------------------------------------------------------- */

void est_print_timeline(FILE *out, const est_run *run, const est_estimate *e) {
    bool used[EST_CAT_ALLOCATED_COUNT] = {0};
    for (size_t i = 0; i < e->tl.count; i++)
        for (int c = 0; c < EST_CAT_ALLOCATED_COUNT; c++)
            if (e->tl.phases[i].bytes[c]) used[c] = true;
    /* Columns as wide as the longest category name: never cut ("activatio"). */
    int w = 9;
    for (int c = 0; c < EST_CAT_ALLOCATED_COUNT; c++)
        if (used[c] && (int)strlen(est_category_names[c]) > w) w = (int)strlen(est_category_names[c]);
    fprintf(out, "\n  %4s  %-36s", "#", "moment");
    for (int c = 0; c < EST_CAT_ALLOCATED_COUNT; c++)
        if (used[c]) fprintf(out, " %*s", w, est_category_names[c]);
    fprintf(out, " %10s %9s\n", "allocated", "time ms");
    fprintf(out, "  %4s  %-36s", "", "");
    for (int c = 0; c < EST_CAT_ALLOCATED_COUNT; c++)
        if (used[c]) fprintf(out, " %*s", w, "GiB");
    fprintf(out, " %10s %9s\n", "GiB", "");
    for (size_t i = 0; i < e->tl.count; i++) {
        const est_phase *p = &e->tl.phases[i];
        fprintf(out, "%c %4zu  %-36.36s", i == e->peak_index ? '>' : ' ', i, p->label);
        for (int c = 0; c < EST_CAT_ALLOCATED_COUNT; c++)
            if (used[c]) fprintf(out, " %*.3f", w, (double)p->bytes[c] / GIB);
        fprintf(out, " %10.3f", (double)est_phase_allocated(p) / GIB);
        if (p->time_s > 0) fprintf(out, " %9.3f", p->time_s * 1e3);
        fputc('\n', out);
    }
    char b1[32], b2[32], b3[32], b4[32], b5[32];
    fprintf(out, "\n> peak: %s allocated at \"%s\"; with the allocator reserve (%s) and the CUDA "
                 "context (%s): %s of %s\n",
            est_fmt_bytes(e->peak_allocated_bytes, b1, sizeof b1), e->tl.phases[e->peak_index].label,
            est_fmt_bytes(e->breakdown[EST_CAT_ALLOCATOR], b2, sizeof b2),
            est_fmt_bytes(e->breakdown[EST_CAT_CONTEXT], b3, sizeof b3),
            est_fmt_bytes(e->device_used_bytes, b4, sizeof b4),
            est_fmt_bytes(e->capacity_bytes, b5, sizeof b5));
    if (e->step_time_s > 0)
        fprintf(out, "  times are per micro-batch for forward, loss and backward (x%lld per step); "
                     "step %.3g s\n",
                (long long)run->grad_accum, e->step_time_s);
}

int est_timeline_svg(const char *path, const est_run *run, const est_estimate *e, char *err,
                     size_t errlen) {
    const size_t n = e->tl.count, ns = EST_CAT_ALLOCATED_COUNT + 2;
    double *x = calloc(n ? n : 1, sizeof *x), *ys = calloc((n ? n : 1) * ns, sizeof *ys);
    double *tx = calloc(n ? n : 1, sizeof *tx);
    const char **tl = calloc(n ? n : 1, sizeof *tl);
    if (!x || !ys || !tx || !tl) {
        free(x), free(ys), free(tx), free(tl);
        return ft_errorf(err, errlen, "out of memory");
    }
    const double frac = e->peak_allocated_bytes > 0
                            ? (double)e->breakdown[EST_CAT_ALLOCATOR] / (double)e->peak_allocated_bytes
                            : 0;
    size_t nt = 0;
    for (size_t i = 0; i < n; i++) {
        const est_phase *p = &e->tl.phases[i];
        x[i] = (double)i;
        for (int c = 0; c < EST_CAT_ALLOCATED_COUNT; c++) ys[c * n + i] = (double)p->bytes[c] / GIB;
        /* What the device holds beside the allocations: the context always,
         * the caching allocator's reserve in proportion (exact at the peak). */
        ys[EST_CAT_CONTEXT * n + i] = (double)e->breakdown[EST_CAT_CONTEXT] / GIB;
        ys[EST_CAT_ALLOCATOR * n + i] = frac * (double)est_phase_allocated(p) / GIB;
        if (i == 0 || p->kind != e->tl.phases[i - 1].kind) {
            tx[nt] = (double)i;
            tl[nt++] = est_phase_names[p->kind];
        }
    }
    /* Each phase's label in the middle of its moments. */
    for (size_t j = 0; j < nt; j++) tx[j] = 0.5 * (tx[j] + (j + 1 < nt ? tx[j + 1] : (double)n));
    const double *series[EST_CAT_COUNT];
    for (size_t c = 0; c < ns; c++) series[c] = ys + c * n;
    char title[160], sub[200], cap[64], peak[96], b1[32];
    snprintf(title, sizeof title, "%s on %lld x %s: memory at every moment of one step",
             run->model.name, (long long)est_run_world(run), run->gpu.display);
    snprintf(sub, sizeof sub, "%s, ZeRO-%d, offload %s, checkpointing %s, micro-batch %lld x seq %lld",
             est_framework_name(run->framework), run->zero_stage, est_offload_name(run->offload),
             est_checkpointing_name(run->checkpointing), (long long)run->micro_batch,
             (long long)run->seq_len);
    snprintf(cap, sizeof cap, "capacity %s", est_fmt_bytes(e->capacity_bytes, b1, sizeof b1));
    snprintf(peak, sizeof peak, "peak: %s", e->tl.phases[e->peak_index].label);
    est_svg_chart ch = {
        .title = title,
        .subtitle = sub,
        .x_label = "moment of the step",
        .y_label = "GiB per GPU",
        .n = n,
        .x = x,
        .steps = true,
        .nseries = ns,
        .series_names = est_category_names,
        .series = series,
        .capacity = (double)e->capacity_bytes / GIB,
        .capacity_label = cap,
        .boundary_x = NAN,
        .highlight_x = (double)e->peak_index,
        .highlight_label = peak,
        .nticks = nt,
        .tick_x = tx,
        .tick_labels = tl,
    };
    int rc = est_svg_write_file(path, &ch, err, errlen);
    free(x), free(ys), free(tx), free(tl);
    return rc;
}

static int cmd_timeline(const est_cli *cli, const est_gpu_catalog *cat, FILE *out, char *err,
                        size_t errlen) {
    est_run run;
    if (est_cli_build_run(cli, cat, &run, err, errlen) < 0) return -1;
    char label[64];
    est_run probe = run;
    if (choose_strategy(cli, &run, &probe, label, sizeof label) < 0)
        return ft_errorf(err, errlen, "no strategy can be estimated for this run");
    est_estimate e;
    est_estimate_init(&e);
    int rc = est_estimate_run(&run, &e, err, errlen);
    /* The chart first: a reader that closes the pipe early (| head) cannot
     * stop it from being written. */
    if (rc == 0 && cli->svg[0]) rc = est_timeline_svg(cli->svg, &run, &e, err, errlen);
    if (rc == 0) {
        if (cli->json) {
            char *s = est_json_report(&run, &e, NULL, 0, -1);
            if (!s) rc = ft_errorf(err, errlen, "out of memory");
            else fprintf(out, "%s\n", s);
            free(s);
        } else {
            est_print_run(out, &run);
            if (label[0]) fprintf(out, "strategy: %s (recommended; choose with --zero/--offload/--checkpointing)\n", label);
            est_print_timeline(out, &run, &e);
            if (cli->svg[0]) fprintf(out, "wrote %s\n", cli->svg);
        }
    }
    bool fits = e.fits;
    est_estimate_free(&e);
    if (rc < 0) return -1;
    return fits ? 0 : 1;
}

/* ---- plan ----------------------------------------------------------------------- */

static int cmd_plan(const est_cli *cli, const est_gpu_catalog *cat, FILE *out, char *err,
                    size_t errlen) {
    if (!cli->tokens_set) return ft_errorf(err, errlen, "plan needs --tokens T (training tokens, e.g. 2B)");
    est_plan_request req;
    memset(&req, 0, sizeof req);
    if (est_cli_build_run(cli, cat, &req.base, err, errlen) < 0) return -1;
    req.strategy_fixed = est_cli_strategy_given(cli);
    req.tokens = cli->tokens;
    req.epochs = cli->epochs > 0 ? cli->epochs : 1;
    req.global_batch = cli->global_batch_set ? cli->global_batch : EST_PLAN_DEFAULT_GLOBAL_BATCH;
    req.inter_node_gb_per_s = cli->inter_node_gb_per_s;
    req.max_hours = cli->max_hours;
    req.max_cost = cli->max_cost;
    req.table_only = !cli->json;
    est_instance_catalog inst;
    if (est_instances_load(cli->catalog[0] ? cli->catalog : NULL, cat, &inst, err, errlen) < 0) return -1;
    if (cli->gpu[0]) {
        /* --gpu narrows the plan to that GPU's instances. */
        const est_gpu *g = est_gpu_find(cat, cli->gpu);
        if (!g) {
            est_instances_free(&inst);
            return est_gpu_unknown(cat, cli->gpu, err, errlen);
        }
        size_t k = 0;
        for (size_t i = 0; i < inst.count; i++)
            if (g && !strcmp(inst.items[i].gpu.name, g->name)) inst.items[k++] = inst.items[i];
        inst.count = k;
        if (k == 0) {
            est_instances_free(&inst);
            return ft_errorf(err, errlen, "no instance in the catalog has %s GPUs", cli->gpu);
        }
    }
    est_progress prog;
    est_progress_begin(&prog, "plan");
    est_plan_result res;
    int rc = est_plan_search(&req, &inst, &prog, &res, err, errlen);
    est_progress_end(&prog);
    if (rc == 0) {
        if (cli->json) {
            char *s = est_plan_json(&req, &inst, &res);
            if (!s) rc = ft_errorf(err, errlen, "out of memory");
            else fprintf(out, "%s\n", s);
            free(s);
        } else {
            est_plan_print(out, &req, &inst, &res, 20);
        }
    }
    size_t count = res.count;
    if (rc == 0) est_plan_free(&res);
    est_instances_free(&inst);
    if (rc < 0) return -1;
    return count > 0 ? 0 : 1;
}

int est_run_command(const est_cli *cli, const est_gpu_catalog *cat, FILE *out, char *err,
                    size_t errlen) {
    switch (cli->command) {
    case EST_CMD_SWEEP: return cmd_sweep(cli, cat, out, err, errlen);
    case EST_CMD_TIMELINE: return cmd_timeline(cli, cat, out, err, errlen);
    case EST_CMD_PLAN: return cmd_plan(cli, cat, out, err, errlen);
    default: return ft_errorf(err, errlen, "not a sweep, timeline or plan command");
    }
}

int est_inverse_command(const est_cli *cli, const est_run *base, FILE *out, char *err,
                        size_t errlen) {
    const est_question q = cli->max_batch ? EST_Q_MAX_BATCH : cli->max_seq ? EST_Q_MAX_SEQ : EST_Q_MIN_GPUS;
    const int64_t node_size = cli->gpus_set ? cli->gpus : EST_MIN_GPUS_NODE_SIZE;
    return est_inverse_report(base, q, node_size, est_cli_strategy_given(cli), cli->json, est_print_run, out,
                              err, errlen);
}
