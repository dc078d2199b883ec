#include "check_records.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check_trace.h"
#include "estimate.h"
#include "fw_registry.h"
#include "json_util.h"
#include "line_reader.h"
#include "lora.h"
#include "peft.h"
#include "peft_vec.h"
#include "peft_delta.h"
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
    bool trace;               /* a group of cpu-trace records (one framework mode and N) */
    size_t phase_n, phase_ok; /* traced ranks with a peak phase; those the estimate agrees on */
    size_t boundary_n;        /* ranks with layer boundaries compared */
    double boundary_worst;    /* the largest-magnitude boundary error among them */
    double *res_errs;         /* signed relative reserved-peak errors */
    size_t res_n, res_cap;
    size_t reserved_only;     /* records with the reserved peak but no allocated peak */
    double *after_errs;       /* signed relative errors of what stays allocated after the step */
    size_t after_n, after_cap;
    double *used_errs;        /* signed relative device-used errors (device_used_bytes) */
    size_t used_n, used_cap;
} group;

typedef struct {
    group *items;
    size_t n, cap;
} group_list;

/* The index of a record's group (its framework and source file: the rows of
 * one sweep), added when new; -1 when out of memory. */
static long group_of(group_list *gl, const est_record *rec) {
    char key[GROUP_KEY_MAX];
    if (rec->cpu_trace) /* a table per framework mode and world size (docs/validation.md) */
        snprintf(key, sizeof key, "%s N=%lld", rec->probe_mode[0] ? rec->probe_mode : "cpu-trace",
                 (long long)est_run_world(&rec->run));
    else
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
    g->trace = rec->cpu_trace;
    return (long)gl->n++;
}

/* The estimate of what the record measured: the active peak where the record
 * has only that (blocks freed through record_stream still count), else the
 * allocated peak less ZeRO-3's pending frees (e->rank_spread_bytes, a term
 * resident from the engine's set-up on): PyTorch's caching allocator lowers
 * allocated_bytes when a block is freed and only then waits on its recorded
 * streams' events (CUDACachingAllocator.cpp DeviceCachingAllocator::free:
 * allocated_bytes.decrease, then insert_events), so a free still pending is
 * active, not allocated. */
static int64_t estimate_of(const est_rank_measure *m, const est_estimate *e) {
    return m->peak_allocated_bytes < 0 && m->peak_active_bytes >= 0 ? e->peak_active_bytes
                                                                     : e->peak_allocated_bytes - e->rank_spread_bytes;
}

/* The reserved peak against the largest rank's measured one (the caching
 * allocator simulated: allocator_ledger.h). */
static void reserved_add(group *g, const est_record *rec, const est_estimate *e) {
    int64_t meas = -1;
    for (size_t i = 0; i < rec->rank_count; i++)
        if (rec->ranks[i].peak_reserved_bytes > meas) meas = rec->ranks[i].peak_reserved_bytes;
    if (meas <= 0 || !est_fw_of(&rec->run)->caching_allocator) return;
    if (g->res_n == g->res_cap) {
        size_t cap = g->res_cap ? g->res_cap * 2 : 64;
        double *ne = realloc(g->res_errs, cap * sizeof *ne);
        if (!ne) return;
        g->res_errs = ne;
        g->res_cap = cap;
    }
    g->res_errs[g->res_n++] = ((double)est_estimate_reserved_on_card(e) - (double)meas) / (double)meas;
}

/* "  reserved +x.x% (measured vs estimated MiB)" for a record with a reserved
 * peak (the largest rank's) of a framework on the caching allocator; else "". */
static void reserved_note(const est_record *rec, const est_estimate *e, char *note, size_t n) {
    int64_t meas = -1;
    for (size_t i = 0; i < rec->rank_count; i++)
        if (rec->ranks[i].peak_reserved_bytes > meas) meas = rec->ranks[i].peak_reserved_bytes;
    note[0] = '\0';
    if (meas <= 0 || !est_fw_of(&rec->run)->caching_allocator) return;
    snprintf(note, n, "  reserved %+.1f%% (%.0f vs %.0f MiB)",
             100 * ((double)est_estimate_reserved_on_card(e) - (double)meas) / (double)meas, (double)meas / MIB,
             (double)est_estimate_reserved_on_card(e) / MIB);
}

static void errs_push(double **errs, size_t *n, size_t *cap, double e) {
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 64;
        double *ne = realloc(*errs, c * sizeof *ne);
        if (!ne) return;
        *errs = ne;
        *cap = c;
    }
    (*errs)[(*n)++] = e;
}

/* Device used (cudaMemGetInfo's total - free after the run: the reserved
 * peak and what lies outside the allocator, device_mem.h) against the
 * estimate's, largest rank; into the group, and "  used +x.x% (measured vs
 * estimated MiB)" into note. Held to the reserved peak's tolerance, of which
 * it is the sum with the context: returns false when outside it. */
static bool device_used_add(group *g, const est_record *rec, const est_estimate *e, char *note, size_t n,
                            char *why, size_t wn) {
    int64_t meas = -1;
    if (n) note[0] = '\0';
    for (size_t i = 0; i < rec->rank_count; i++)
        if (rec->ranks[i].device_used_bytes > meas) meas = rec->ranks[i].device_used_bytes;
    if (meas <= 0 || rec->oom || !est_fw_of(&rec->run)->caching_allocator || e->device_used_bytes <= 0) return true;
    const double rel = ((double)e->device_used_bytes - (double)meas) / (double)meas;
    errs_push(&g->used_errs, &g->used_n, &g->used_cap, rel);
    snprintf(note, n, "  used %+.1f%% (%.0f vs %.0f MiB)", rel * 100, (double)meas / MIB,
             (double)e->device_used_bytes / MIB);
    if (isnan(rec->tol_reserved_rel) || fabs(rel) <= rec->tol_reserved_rel) return true;
    if (why[0] == '\0')
        snprintf(why, wn, "device used off by %+.1f%% (tolerance %.0f%%)", rel * 100, rec->tol_reserved_rel * 100);
    return false;
}

/* A record with the reserved peak (and what stays allocated after the step)
 * but no allocated peak: those two against their tolerances, into note (the
 * line's numbers) and why (the first failure). Returns false when outside. */
static bool reserved_and_after_step(const est_record *rec, const est_estimate *e, group *g,
                                    char *note, size_t n, char *why, size_t wn) {
    int64_t res = -1, after = -1;
    for (size_t i = 0; i < rec->rank_count; i++) {
        if (rec->ranks[i].peak_reserved_bytes > res) res = rec->ranks[i].peak_reserved_bytes;
        if (rec->ranks[i].after_step_bytes > after) after = rec->ranks[i].after_step_bytes;
    }
    bool ok = true;
    size_t used = 0;
    note[0] = '\0';
    if (res > 0) {
        const double rel = ((double)est_estimate_reserved_on_card(e) - (double)res) / (double)res;
        used += (size_t)snprintf(note, n, "reserved %+.2f%% (%.0f vs %.0f MiB)", rel * 100, (double)res / MIB,
                                 (double)est_estimate_reserved_on_card(e) / MIB);
        if (!isnan(rec->tol_reserved_rel) && fabs(rel) > rec->tol_reserved_rel) {
            ok = false;
            snprintf(why, wn, "reserved peak off by %+.1f%% (tolerance %.0f%%)", rel * 100,
                     rec->tol_reserved_rel * 100);
        }
    }
    if (after > 0 && e->after_step_bytes > 0 && used < n) {
        const double rel = ((double)e->after_step_bytes - (double)after) / (double)after;
        errs_push(&g->after_errs, &g->after_n, &g->after_cap, rel);
        snprintf(note + used, n - used, "%safter step %+.2f%% (%.0f vs %.0f MiB)", used ? "  " : "",
                 rel * 100, (double)after / MIB, (double)e->after_step_bytes / MIB);
        if (ok && !isnan(rec->tol_after_step_rel) && fabs(rel) > rec->tol_after_step_rel) {
            ok = false;
            snprintf(why, wn, "allocated after the step off by %+.2f%% (tolerance %.1f%%)", rel * 100,
                     rec->tol_after_step_rel * 100);
        }
    }
    return ok;
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

/* A GPU-day point id less its job ("probe/hf-w1/hf/llama3.2-1b/s512/b1" ->
 * "hf/llama3.2-1b/s512/b1"): what the row ran, where seq and batch do not say. */
static const char *point_label(const char *point) {
    const char *p = point;
    for (int k = 0; k < 2 && strchr(p, '/'); k++) p = strchr(p, '/') + 1;
    return p;
}

static void markdown_line(const est_record *rec, const est_estimate *e, double meas_mib, double est_mib,
                          double spread_mib, double rel, double it_rel, bool ok, FILE *out) {
    const est_run *r = &rec->run;
    if (rec->point[0]) fprintf(out, "| %s ", point_label(rec->point));
    fprintf(out, "| %lld | %lld | %s | %s | %s |", (long long)r->seq_len, (long long)r->micro_batch,
            r->checkpointing == EST_CKPT_FULL ? "full" : "none", est_offload_name(r->offload),
            r->expandable_segments ? "yes" : "no");
    if (rec->oom)
        fprintf(out, " OOM | %.0f (device) | %s |", e->device_used_bytes / MIB,
                e->fits ? "fits: **wrong**" : "does not fit");
    else
        fprintf(out, " %.0f | %.0f | %+.2f%% |", meas_mib, est_mib, rel * 100);
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

static const char *phase_name(int p) { return p >= 0 ? est_trace_phase_names[p] : "?"; }

/* One cpu-trace record, like with like (check_trace.h): each traced rank
 * against the estimate less what a trace cannot hold. Such records carry no
 * tolerance until the model is meant to match them: their errors are printed
 * and summarised, and only a tolerance the record states can fail it. */
static bool check_trace_one(const est_record *rec, const est_estimate *e, group *g,
                            const est_check_options *opt, FILE *out) {
    bool all_ok = true;
    est_estimate own; /* the traced rank's own step, where ranks differ (run.h est_run.rank) */
    est_estimate_init(&own);
    for (size_t i = 0; i < rec->rank_count; i++) {
        est_run run = rec->run;
        run.rank = rec->ranks[i].rank;
        char msg[256];
        const bool per_rank = est_run_world(&run) > 1 && run.rank >= 0 &&
                              est_estimate_run(&run, &own, msg, sizeof msg) == 0;
        est_trace_compare c;
        est_trace_compare_rank(&rec->ranks[i], per_rank ? &own : e, &c);
        group_add(g, c.rel);
        if (c.traced_phase >= 0) {
            g->phase_n++;
            g->phase_ok += c.traced_phase == c.estimated_phase;
        }
        if (c.boundaries) {
            g->boundary_n++;
            if (fabs(c.boundary_worst_rel) > fabs(g->boundary_worst)) g->boundary_worst = c.boundary_worst_rel;
        }
        const bool ok = isnan(rec->tol_peak_rel) || fabs(c.rel) <= rec->tol_peak_rel;
        if (!ok) {
            all_ok = false;
            g->failed++;
        }
        if (opt->markdown || (opt->quiet && ok)) continue;
        fprintf(out, "%s %+7.2f%%  traced %8.2f MiB  estimated %8.2f MiB (less %.2f MiB cuBLAS "
                     "workspace, pending frees)  peak in %s, estimated in %s  phases",
                ok ? (isnan(rec->tol_peak_rel) ? "trace" : "ok   ") : "FAIL ", c.rel * 100,
                (double)c.traced_bytes / MIB, (double)c.estimated_bytes / MIB,
                (double)c.unseen_bytes / MIB, phase_name(c.traced_phase), phase_name(c.estimated_phase));
        for (int p = 1; p < EST_TRACE_PHASES; p++)
            if (!isnan(c.phase_rel[p])) fprintf(out, " %s %+.1f%%", est_trace_phase_names[p], c.phase_rel[p] * 100);
        if (c.boundaries) fprintf(out, "  layers: worst %+.1f%% of %d", c.boundary_worst_rel * 100, c.boundaries);
        fprintf(out, "  rank %lld  %s\n", (long long)rec->ranks[i].rank, rec->notes[0] ? rec->notes : rec->probe_mode);
    }
    est_estimate_free(&own);
    return all_ok;
}

/* Measured against estimated it/s into the group; false (and why) when the
 * record's tolerance is exceeded. *it_rel: NAN when either is missing. */
static bool time_ok(const est_record *rec, const est_estimate *e, group *g, double *it_rel, char *why,
                    size_t wn) {
    *it_rel = NAN;
    if (isnan(rec->it_per_s) || !(rec->it_per_s > 0) || !(e->it_per_s > 0)) return true;
    *it_rel = (e->it_per_s - rec->it_per_s) / rec->it_per_s;
    g->time_n++;
    if (fabs(*it_rel) > fabs(g->time_worst)) g->time_worst = *it_rel;
    g->time_abs_sum += fabs(*it_rel);
    if (isnan(rec->tol_it_per_s_rel) || fabs(*it_rel) <= rec->tol_it_per_s_rel) return true;
    snprintf(why, wn, "it/s off by %+.1f%% (tolerance %.0f%%)", *it_rel * 100, rec->tol_it_per_s_rel * 100);
    return false;
}

/* The run by its PEFT method, for the rows of a method comparison. */
static void peft_label(const est_run *r, char *buf, size_t n) {
    char targets[64];
    if (est_peft_vec_on(r))
        est_peft_vec_label(r, buf, n);
    else if (r->peft == EST_PEFT_PROMPT_TUNING)
        snprintf(buf, n, "prompt tuning, %lld virtual tokens", (long long)r->virtual_tokens);
    else if (r->peft == EST_PEFT_PREFIX_TUNING)
        snprintf(buf, n, "prefix tuning, %lld virtual tokens", (long long)r->virtual_tokens);
    else if (r->peft == EST_PEFT_ADAPTION_PROMPT)
        snprintf(buf, n, "adaption prompt, %lld tokens per layer", (long long)r->adapter_len);
    else if (r->peft == EST_PEFT_P_TUNING)
        snprintf(buf, n, "P-tuning, %lld virtual tokens, MLP %lld", (long long)r->virtual_tokens,
                 (long long)r->encoder_hidden);
    else if (r->peft == EST_PEFT_IA3)
        snprintf(buf, n, "IA3 on %s", est_lora_targets_name(r->ia3_targets, targets, sizeof targets));
    else if (est_pdelta_on(r))
        est_pdelta_label(r, buf, n); /* LoHa, LoKr, OFT, FourierFT */
    else if (r->lora.rank > 0)
        snprintf(buf, n, "%s r%lld on %s", r->lora.variant == EST_LORA_PLAIN ? "LoRA" : est_lora_variant_name(r->lora.variant),
                 (long long)r->lora.rank, est_lora_targets_name(r->lora.targets, targets, sizeof targets));
    else
        snprintf(buf, n, "full fine-tuning");
}

/* A record with no allocated peak (the reserved peak, what stays allocated
 * after the step, it/s: PEFT's method comparison). */
static bool check_reserved_only(const est_record *rec, const est_estimate *e, group *g,
                                const est_check_options *opt, FILE *out, const char *desc) {
    char why[200] = "", note[160], label[96];
    double it_rel;
    bool ok = time_ok(rec, e, g, &it_rel, why, sizeof why);
    reserved_add(g, rec, e);
    if (!reserved_and_after_step(rec, e, g, note, sizeof note, why, sizeof why)) ok = false;
    g->reserved_only++;
    if (!ok) g->failed++;
    peft_label(&rec->run, label, sizeof label);
    if (opt->markdown)
        fprintf(out, "| %s | %s |%s%s |\n", label, note, isnan(it_rel) ? "" : it_note(rec->it_per_s, e->it_per_s, it_rel),
                ok ? "" : " **outside tolerance**");
    else if (!opt->quiet || !ok)
        fprintf(out, "%s %s  %s  %s%s%s%s\n", ok ? "ok  " : "FAIL", note, label, desc,
                isnan(it_rel) ? "" : it_note(rec->it_per_s, e->it_per_s, it_rel), why[0] ? "  -- " : "", why);
    return ok;
}

static bool has_allocated_peak(const est_record *rec) {
    for (size_t i = 0; i < rec->rank_count; i++)
        if (est_record_peak(&rec->ranks[i]) >= 0) return true;
    return false;
}

/* One record: prints its line, returns true when within tolerance. */
static bool check_one(const est_record *rec, est_estimate *e, group *g,
                      const est_check_options *opt, FILE *out) {
    if (rec->cpu_trace && !rec->oom) return check_trace_one(rec, e, g, opt, out);
    char desc[160];
    describe(&rec->run, desc, sizeof desc);
    if (rec->oom) {
        bool ok = !e->fits || e->tight; /* tight: only the free-and-retry path keeps it in */
        g->oom_total++;
        g->oom_ok += ok;
        if (opt->markdown)
            markdown_line(rec, e, 0, 0, 0, 0, NAN, ok, out);
        else if (!opt->quiet || !ok)
            fprintf(out, "%s  OOM measured, estimate %.0f MiB used of %.0f: %s  %s\n",
                    ok ? "ok  " : "FAIL", e->device_used_bytes / MIB, e->capacity_bytes / MIB,
                    !e->fits ? "does not fit" : e->tight ? "tight" : "fits", desc);
        return ok;
    }
    if (!has_allocated_peak(rec)) return check_reserved_only(rec, e, g, opt, out, desc);
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
    double it_rel;
    if (!time_ok(rec, e, g, &it_rel, why, sizeof why)) ok = false;
    char used[80];
    if (!device_used_add(g, rec, e, used, sizeof used, why, sizeof why)) ok = false;
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
            markdown_line(rec, e, (double)meas / MIB, (double)est / MIB, (double)(meas - smallest) / MIB, rel,
                          it_rel, ok, out);
    } else if (!opt->quiet || !ok) {
        char res[80];
        reserved_note(rec, e, res, sizeof res);
        fprintf(out, "%s %+7.2f%%  measured %10.1f MiB  estimated %10.1f MiB  %s%s%s%s%s%s\n",
                ok ? "ok  " : "FAIL", rel * 100, (double)meas / MIB, (double)est / MIB, desc, res, used,
                isnan(it_rel) ? "" : it_note(rec->it_per_s, e->it_per_s, it_rel),
                why[0] ? "  -- " : "", why);
    }
    return ok;
}

/* A run ftest cannot express yet: one line naming what it lacks, counted
 * apart from the records compared (never silently dropped, never a failure). */
static void report_not_expressible(const est_record *rec, const est_check_options *opt, FILE *out,
                                   est_check_totals *totals, const char *path, bool *table_open) {
    char desc[160];
    describe(&rec->run, desc, sizeof desc);
    totals->not_expressible++;
    if (opt->markdown && !*table_open) {
        const char *base = strrchr(path, '/');
        fprintf(out, "\n#### %s: not expressible yet\n\n| run | what ftest cannot express yet |\n"
                     "|---|---|\n", base ? base + 1 : path);
    }
    *table_open = true;
    if (opt->markdown)
        fprintf(out, "| %s | %s |\n", desc, rec->not_expressible);
    else
        fprintf(out, "n/a   not expressible: %s  %s\n", rec->not_expressible, desc);
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

/* The table of cpu-trace groups (docs/validation.md): one row per framework
 * mode and world size, with the phase of the peak as an agreement figure. */
static void trace_summary(group *groups, size_t ngroups, bool markdown, FILE *out) {
    bool any = false;
    for (size_t i = 0; i < ngroups; i++) {
        group *g = &groups[i];
        if (!g->trace) continue;
        if (!any && markdown)
            fprintf(out, "\n| traced: mode, N | rank records | peak: median error | peak: max error "
                         "| peak phase right | layer boundaries: worst error |\n"
                         "|---|---|---|---|---|---|\n");
        else if (!any)
            fprintf(out, "\n%-8s %-9s %-9s %-13s %-10s %s\n", "ranks", "median", "max|err|",
                    "phase right", "layers", "traced group (no tolerance: errors shown, not failed)");
        any = true;
        double med, worst;
        group_stats(g, &med, &worst);
        char phase[32] = "", layers[32] = "";
        if (g->phase_n) snprintf(phase, sizeof phase, "%zu/%zu", g->phase_ok, g->phase_n);
        if (g->boundary_n) snprintf(layers, sizeof layers, "%+.1f%%", g->boundary_worst * 100);
        if (markdown)
            fprintf(out, "| %s | %zu | %+.1f%% | %+.1f%% | %s | %s |\n", g->key, g->n, med * 100,
                    worst * 100, phase, layers);
        else
            fprintf(out, "%-8zu %+8.2f%% %+8.2f%% %-13s %-10s %s\n", g->n, med * 100, worst * 100,
                    phase, layers, g->key);
    }
}

static void summary(group *groups, size_t ngroups, bool markdown, FILE *out) {
    bool plain = false;
    for (size_t i = 0; i < ngroups; i++) plain |= !groups[i].trace;
    if (plain && markdown)
        fprintf(out, "\n| group | records | outside tolerance | peak: median error | peak: max abs error "
                     "| OOM predicted | it/s: mean abs error | it/s: max error |\n"
                     "|---|---|---|---|---|---|---|---|\n");
    else if (plain)
        fprintf(out, "\n%-8s %-8s %-9s %-9s %s\n", "records", "failed", "median", "max|err|", "group");
    for (size_t i = 0; i < ngroups; i++) {
        group *g = &groups[i];
        if (g->trace) continue;
        double med, worst;
        group_stats(g, &med, &worst);
        const size_t records = g->n + g->reserved_only + g->oom_total;
        const size_t failed = g->failed + (g->oom_total - g->oom_ok);
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
            if (g->used_n) {
                double umed, uworst;
                errs_stats(g->used_errs, g->used_n, &umed, &uworst);
                fprintf(out, " [device used: median %+.1f%%, max %+.1f%%]", 100 * umed, 100 * uworst);
            }
            if (g->after_n) {
                double amed, aworst;
                errs_stats(g->after_errs, g->after_n, &amed, &aworst);
                fprintf(out, " [after step: median %+.2f%%, max %+.2f%%]", 100 * amed, 100 * aworst);
            }
            fputc('\n', out);
        }
        free(g->res_errs);
        free(g->used_errs);
        free(g->after_errs);
    }
    trace_summary(groups, ngroups, markdown, out);
    for (size_t i = 0; i < ngroups; i++) free(groups[i].errs);
}

/* A cpu-trace record of a run the estimator refuses (LoRA under DeepSpeed,
 * say): the trace is truth the model does not cover yet, printed as such and
 * counted, not an unreadable line. Frees the record. */
static void trace_unmodelled(est_record *rec, const char *why, const est_check_options *opt, FILE *out,
                             est_check_totals *totals) {
    totals->records++;
    totals->unmodelled++;
    if (!opt->markdown)
        fprintf(out, "trace    not modelled: %s  %s\n", why, rec->notes[0] ? rec->notes : rec->probe_mode);
    est_record_free(rec);
}

/* 0: parsed and (when final) estimated; 1: unreadable; 2: read, but the
 * estimator refused the run (the record is kept for the caller). */
static int read_and_estimate(const char *line, size_t n, const est_gpu_catalog *cat, const char *dir,
                             est_record *rec, est_estimate *e, char *msg, size_t msglen) {
    if (est_record_parse_at(line, n, cat, dir, rec, msg, msglen) < 0) return 1;
    if (rec->final && !rec->not_expressible[0] && est_estimate_run(&rec->run, e, msg, msglen) < 0)
        return 2;
    return 0;
}

/* One non-blank line: a record checked and counted in totals, or an error
 * reported on diag. 0, or -1 (out of memory, in err). */
/* The heading and table head of a group's rows in docs/validation.md. */
static void markdown_header(const group *g, const est_record *rec, FILE *out) {
    const char *key = strrchr(g->key, '/');
    fprintf(out, "\n#### %s\n\n%s\n\n", key ? key + 1 : g->key, rec->source);
    if (!rec->oom && !has_allocated_peak(rec)) { /* check_reserved_only's rows (an OOM row fits either) */
        fprintf(out, "| run | reserved peak and allocated after the step: error (measured vs estimated MiB) "
                     "| it/s measured vs estimated |\n|---|---|---|\n");
        return;
    }
    if (rec->point[0]) fputs("| point ", out); /* GPU-day rows: what each ran (markdown_line) */
    fprintf(out, "| seq | batch | ckpt | offload | expandable | measured MiB (largest rank) "
                 "| estimated MiB | error | rank spread MiB | it/s measured | it/s estimated "
                 "| error |\n%s"
                 "|---|---|---|---|---|---|---|---|---|---|---|---|\n", rec->point[0] ? "|---" : "");
}

/* What check_line keeps between lines. */
typedef struct line_state {
    group_list *groups;
    long *current;          /* the group whose markdown table is open */
    bool *unexpressed;      /* the markdown table of runs ftest cannot express has begun */
} line_state;

static int check_line(const char *path, const ft_line *ln, const char *dir, const est_gpu_catalog *cat,
                      const est_check_options *opt, FILE *out, line_state *ls, est_estimate *e,
                      est_check_totals *totals, char *err, size_t errlen) {
    FILE *diag = opt->diag ? opt->diag : stderr;
    est_record rec;
    char msg[256];
    int bad = 0;
    rec.ranks = NULL;
    if (!ln->text) {
        ft_errorf(msg, sizeof msg, "the line is %zu bytes, over the %zu MiB a record may take (not read)",
                  ln->len, EST_RECORD_MAX_LINE_BYTES >> 20);
        bad = 1;
    } else if (memchr(ln->text, '\0', ln->len)) {
        ft_errorf(msg, sizeof msg, "the line holds a NUL byte (not a record)");
        bad = 1;
    } else if ((bad = read_and_estimate(ln->text, ln->len, cat, dir, &rec, e, msg, sizeof msg)) == 2 &&
               rec.cpu_trace) { /* truth the model does not cover yet: said, not an error */
        trace_unmodelled(&rec, msg, opt, out, totals);
        return 0;
    }
    if (bad) {
        fprintf(diag, "ERROR %s:%zu: %s%s\n", path, ln->lineno, msg,
                ln->terminated ? "" : " (the last line has no newline: an interrupted write?)");
        totals->errors++;
        totals->records++;
        if (rec.ranks) est_record_free(&rec);
        return 0;
    }
    if (!rec.final) { /* a window record; the run's final record is compared */
        totals->partial++;
        est_record_free(&rec);
        return 0;
    }
    if (rec.not_expressible[0]) {
        report_not_expressible(&rec, opt, out, totals, path, ls->unexpressed);
        est_record_free(&rec);
        return 0;
    }
    totals->records++;
    long gi = group_of(ls->groups, &rec);
    if (gi < 0) {
        est_record_free(&rec);
        return ft_errorf(err, errlen, "out of memory");
    }
    group *g = &ls->groups->items[gi];
    if (opt->markdown && gi != *ls->current && !g->trace) {
        markdown_header(g, &rec, out);
        *ls->current = gi;
    }
    if (!check_one(&rec, e, g, opt, out)) totals->failed++;
    est_record_free(&rec);
    return 0;
}

static bool blank_line(const ft_line *ln) {
    if (!ln->text) return false;
    size_t n = ln->len;
    if (n && ln->text[n - 1] == '\r') n--;
    for (size_t i = 0; i < n; i++)
        if (ln->text[i] != ' ' && ln->text[i] != '\t') return false;
    return true;
}

int est_check_file(const char *path, const est_gpu_catalog *cat, const est_check_options *opt,
                   FILE *out, est_check_totals *totals, char *err, size_t errlen) {
    /* Streamed a line at a time: memory is one line (at most
     * EST_RECORD_MAX_LINE_BYTES) and its parse, whatever the file's size. */
    ft_line_reader rd;
    if (ft_lines_open(&rd, path, "records file ", EST_RECORD_MAX_LINE_BYTES, err, errlen) < 0) return -1;
    group_list groups = {0};
    est_estimate e;
    est_estimate_init(&e);
    long current = -1;
    int rc = 0;
    if (!opt->markdown) fprintf(out, "%s\n", path);
    char dir[4096];
    est_record_dir(path, dir, sizeof dir);
    size_t nonblank = 0;
    ft_line ln;
    char rerr[256];
    int got = 0;
    bool unexpressed_table = false; /* the markdown table of runs ftest cannot express has begun */
    /* Lines are split by length, not by NUL: a NUL byte makes its own line an
     * error and the records after it are still checked. */
    while (rc == 0 && (got = ft_lines_next(&rd, &ln, rerr, sizeof rerr)) == 1) {
        if (ln.text && ln.len && ln.text[ln.len - 1] == '\r') ln.text[--ln.len] = '\0';
        if (blank_line(&ln)) continue;
        nonblank++;
        line_state ls = {&groups, &current, &unexpressed_table};
        rc = check_line(path, &ln, dir, cat, opt, out, &ls, &e, totals, err, errlen);
    }
    if (rc == 0 && got < 0) rc = ft_errorf(err, errlen, "%s: %s", path, rerr);
    if (nonblank == 0 && rc == 0) rc = ft_errorf(err, errlen, "%s holds no records (%s)", path,
                                                 rd.bytes ? "only blank lines" : "empty file");
    ft_lines_close(&rd);
    summary(groups.items, groups.n, opt->markdown, out);
    est_estimate_free(&e);
    free(groups.items);
    return rc;
}
