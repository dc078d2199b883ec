#include "inverse.h"

#include <string.h>

#include <cJSON.h>

#include "format.h"
#include "json_util.h"
#include "strategy.h"

typedef struct probe {
    const est_run *base;
    est_question q;
    est_estimate e;
    est_answer *a;
} probe;

/* The run at value v of the question (for min-gpus, v is the total and
 * node_size the GPUs per node beyond one node). */
static void at_value(const probe *p, int64_t v, int64_t node_size, est_run *run) {
    *run = *p->base;
    switch (p->q) {
    case EST_Q_MAX_BATCH: run->micro_batch = v; break;
    case EST_Q_MAX_SEQ: run->seq_len = v; break;
    case EST_Q_MIN_GPUS:
        if (v <= node_size) {
            run->gpus_per_node = v;
            run->nodes = 1;
        } else {
            run->gpus_per_node = node_size;
            run->nodes = v / node_size;
        }
        break;
    }
}

/* 1 fits, 0 does not (or cannot be estimated: too large), -1 error when
 * `strict` (the smallest value must be estimable). */
static int try_value(probe *p, int64_t v, int64_t node_size, bool strict, char *err, size_t errlen) {
    est_run run;
    at_value(p, v, node_size, &run);
    p->a->estimates++;
    char msg[256];
    if (est_estimate_run(&run, &p->e, msg, sizeof msg) < 0) {
        if (strict) return ft_errorf(err, errlen, "%s", msg);
        return 0;
    }
    return p->e.fits && !p->e.tight ? 1 : 0; /* with the run's margin to spare */
}

/* The host side of the last estimate into the answer. */
static void host_of(probe *p) {
    p->a->host_peak_per_node_bytes = p->e.host_peak_per_node_bytes;
    p->a->host_ram_bytes = p->e.host_ram_bytes;
    p->a->host_short = p->e.device_fits && !p->e.host_fits;
    p->a->tight = p->e.fits && p->e.tight;
}

/* Records used bytes and time at v into the answer (after a successful estimate). */
static void measure(probe *p, int64_t v, int64_t node_size, bool next) {
    est_run run;
    at_value(p, v, node_size, &run);
    p->a->estimates++;
    if (est_estimate_run(&run, &p->e, NULL, 0) < 0) {
        if (next) p->a->next_used_bytes = -1;
        return;
    }
    if (next) {
        p->a->next_used_bytes = p->e.device_used_bytes;
        p->a->next_host_peak_per_node_bytes = p->e.host_peak_per_node_bytes;
        p->a->next_host_ram_bytes = p->e.host_ram_bytes;
        p->a->next_host_short = p->e.device_fits && !p->e.host_fits;
        p->a->next_tight = p->e.fits && p->e.tight;
        return;
    }
    p->a->used_bytes = p->e.device_used_bytes;
    p->a->step_time_s = p->e.step_time_s;
    p->a->tokens_per_s = p->e.tokens_per_s;
    p->a->gpus_per_node = run.gpus_per_node;
    p->a->nodes = run.nodes;
    host_of(p);
}

/* Largest v in [1, limit] that fits, by doubling then bisection. */
static int search_max(probe *p, int64_t limit, char *err, size_t errlen) {
    int r = try_value(p, 1, 0, true, err, errlen);
    if (r < 0) return -1;
    if (r == 0) {
        p->a->value = 0;
        p->a->used_bytes = p->e.device_used_bytes;
        host_of(p);
        return 0;
    }
    int64_t lo = 1, hi = 0;
    for (int64_t x = 2;; x *= 2) {
        if (x >= limit) {
            if (try_value(p, limit, 0, false, NULL, 0) == 1) lo = limit;
            else hi = limit;
            break;
        }
        if (try_value(p, x, 0, false, NULL, 0) == 1) lo = x;
        else {
            hi = x;
            break;
        }
    }
    while (hi > lo + 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (try_value(p, mid, 0, false, NULL, 0) == 1) lo = mid;
        else hi = mid;
    }
    p->a->value = lo;
    measure(p, lo, 0, false);
    if (lo < limit) measure(p, lo + 1, 0, true);
    return 0;
}

/* Fewest GPUs: 1..node_size on one node, then whole nodes. */
static int search_min_gpus(probe *p, int64_t node_size, char *err, size_t errlen) {
    for (int64_t g = 1; g <= node_size; g++) {
        int r = try_value(p, g, node_size, g == 1, err, errlen);
        if (r < 0) return -1;
        if (r == 0 && g == node_size) host_of(p); /* why a full node does not fit */
        if (r == 1) {
            p->a->value = g;
            measure(p, g, node_size, false);
            if (g > 1) measure(p, g - 1, node_size, true);
            return 0;
        }
    }
    int64_t lo = 1, hi = 0; /* in nodes: lo does not fit, hi fits */
    for (int64_t n = 2; n <= EST_MIN_GPUS_MAX_NODES; n *= 2) {
        if (try_value(p, n * node_size, node_size, false, NULL, 0) == 1) {
            hi = n;
            break;
        }
        lo = n;
    }
    if (hi == 0) {
        p->a->value = 0;
        return 0;
    }
    while (hi > lo + 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (try_value(p, mid * node_size, node_size, false, NULL, 0) == 1) hi = mid;
        else lo = mid;
    }
    p->a->value = hi * node_size;
    measure(p, hi * node_size, node_size, false);
    measure(p, (hi - 1) * node_size, node_size, true);
    return 0;
}

/* The micro-batch with the best tokens/s among 1..a->value (all of which fit
 * when "fits" is monotone in batch; one that does not is skipped). Every value
 * up to EST_FASTEST_SCAN, else every stride-th and the answer itself, so the
 * scan costs at most about EST_FASTEST_SCAN estimates. */
#define EST_FASTEST_SCAN 1024
static void search_fastest(probe *p) {
    est_answer *a = p->a;
    a->fastest_value = a->value;
    a->fastest_tokens_per_s = a->tokens_per_s;
    a->fastest_step_time_s = a->step_time_s;
    a->fastest_stride = a->value > EST_FASTEST_SCAN ? (a->value + EST_FASTEST_SCAN - 1) / EST_FASTEST_SCAN : 1;
    for (int64_t b = 1; b < a->value; b += a->fastest_stride) {
        est_run run;
        at_value(p, b, 0, &run);
        a->estimates++;
        if (est_estimate_run(&run, &p->e, NULL, 0) < 0 || !p->e.fits || p->e.tight) continue;
        /* Strictly better: ties go to the larger batch already held. */
        if (p->e.tokens_per_s > a->fastest_tokens_per_s * (1 + 1e-9)) {
            a->fastest_value = b;
            a->fastest_tokens_per_s = p->e.tokens_per_s;
            a->fastest_step_time_s = p->e.step_time_s;
        }
    }
}

int est_answer_question(const est_run *base, est_question q, int64_t node_size, est_answer *answer,
                        char *err, size_t errlen) {
    memset(answer, 0, sizeof *answer);
    if (base->tp > 1 && q != EST_Q_MAX_BATCH) /* the probes would cross --tp's divisibility */
        return ft_errorf(err, errlen, "--max-seq and --min-gpus with --tp are not modelled (--max-batch is)");
    answer->question = q;
    answer->next_used_bytes = -1;
    answer->gpus_per_node = base->gpus_per_node;
    answer->nodes = base->nodes;
    if (node_size < 1) node_size = 1;
    probe p = {.base = base, .q = q, .a = answer};
    est_estimate_init(&p.e);
    p.e.tight_margin_frac = answer->tight_margin_frac = base->tight_margin_frac;
    int rc;
    switch (q) {
    case EST_Q_MAX_BATCH:
        answer->limit = EST_MAX_BATCH;
        rc = search_max(&p, answer->limit, err, errlen);
        if (rc == 0 && answer->value > 0) search_fastest(&p);
        break;
    case EST_Q_MAX_SEQ:
        answer->limit = base->model.max_position > 0 ? base->model.max_position : EST_MAX_SEQ;
        rc = search_max(&p, answer->limit, err, errlen);
        break;
    default:
        answer->limit = node_size * EST_MIN_GPUS_MAX_NODES;
        rc = search_min_gpus(&p, node_size, err, errlen);
        break;
    }
    est_estimate_free(&p.e);
    return rc;
}

static const char *question_name(est_question q) {
    return q == EST_Q_MAX_BATCH ? "max_batch" : q == EST_Q_MAX_SEQ ? "max_seq" : "min_gpus";
}

/* Is `a` a better answer than `b`? Larger batch/seq, fewer GPUs; then faster. */
static bool better(const est_answer *a, const est_answer *b) {
    if (a->value == 0) return false;
    if (b->value == 0) return true;
    if (a->value != b->value)
        return a->question == EST_Q_MIN_GPUS ? a->value < b->value : a->value > b->value;
    return a->tokens_per_s > b->tokens_per_s;
}

static void print_next(FILE *out, const est_run *run, const est_answer *a);

static void print_answer(FILE *out, const est_run *run, const est_answer *a, const char *label) {
    char b1[32], b2[32], b3[32];
    const char *what = a->question == EST_Q_MAX_BATCH ? "largest micro-batch that fits"
                       : a->question == EST_Q_MAX_SEQ ? "longest sequence that fits"
                                                      : "fewest GPUs that fit";
    if (a->value == 0) {
        if (a->question == EST_Q_MIN_GPUS)
            fprintf(out, "\n%s: none up to %lld x %s%s%s\n", what, (long long)a->limit,
                    run->gpu.display, label ? " with " : "", label ? label : "");
        else if (a->tight)
            fprintf(out, "\n%s: none%s%s with the %.4g%% margin: 1 fits, but tight (%s of %s)\n", what,
                    label ? " with " : "", label ? label : "", a->tight_margin_frac * 100,
                    est_fmt_bytes(a->used_bytes, b1, sizeof b1), est_fmt_bytes(run->gpu.memory_bytes, b2, sizeof b2));
        else if (a->host_short)
            fprintf(out, "\n%s: none%s%s: 1 needs %s of host RAM per node, the node has %s\n",
                    what, label ? " with " : "", label ? label : "",
                    est_fmt_bytes(a->host_peak_per_node_bytes, b1, sizeof b1),
                    est_fmt_bytes(a->host_ram_bytes, b2, sizeof b2));
        else
            fprintf(out, "\n%s: none%s%s: 1 needs %s of %s\n", what, label ? " with " : "",
                    label ? label : "", est_fmt_bytes(a->used_bytes, b1, sizeof b1),
                    est_fmt_bytes(run->gpu.memory_bytes, b2, sizeof b2));
        return;
    }
    fprintf(out, "\n%s: %lld", what, (long long)a->value);
    if (a->question == EST_Q_MIN_GPUS)
        fprintf(out, " (%lld node%s x %lld)", (long long)a->nodes, a->nodes > 1 ? "s" : "",
                (long long)a->gpus_per_node);
    if (label) fprintf(out, " with %s", label);
    fprintf(out, "\n  at %lld: %s of %s on the device", (long long)a->value,
            est_fmt_bytes(a->used_bytes, b1, sizeof b1), est_fmt_bytes(run->gpu.memory_bytes, b2, sizeof b2));
    if (a->host_ram_bytes > 0)
        fprintf(out, ", host RAM %s of %s per node",
                est_fmt_bytes(a->host_peak_per_node_bytes, b3, sizeof b3),
                est_fmt_bytes(a->host_ram_bytes, b1, sizeof b1));
    if (a->step_time_s > 0)
        fprintf(out, ", %.3g s/step, %.0f tokens/s in total", a->step_time_s, a->tokens_per_s);
    fputc('\n', out);
    if (a->fastest_value > 0 && a->fastest_value != a->value)
        fprintf(out, "  fastest that fits%s: micro-batch %lld, %.3g s/step, %.0f tokens/s in total "
                     "(%+.1f%% over the largest)\n", label ? " with this strategy" : "",
                (long long)a->fastest_value, a->fastest_step_time_s, a->fastest_tokens_per_s,
                a->tokens_per_s > 0 ? 100 * (a->fastest_tokens_per_s / a->tokens_per_s - 1) : 0);
    else if (a->fastest_value > 0) {
        char every[40] = "one";
        if (a->fastest_stride > 1) snprintf(every, sizeof every, "%lld-th one", (long long)a->fastest_stride);
        fprintf(out, "  no smaller micro-batch is faster%s (tokens/s estimated at every %s up to it)\n",
                label ? " with this strategy" : "", every);
    }
    print_next(out, run, a);
    if (a->next_used_bytes < 0 && a->question != EST_Q_MIN_GPUS && a->value >= a->limit)
        fprintf(out, "  (the largest value searched: %lld)\n", (long long)a->limit);
}

/* What stops the next value (one more, or one node or GPU fewer): the host
 * RAM it needs against the host RAM it would have (the node's own at that
 * count: it scales with the GPUs unless --host-ram fixes it), or the device. */
static void print_next(FILE *out, const est_run *run, const est_answer *a) {
    char b1[32], b2[32], at[48];
    if (a->next_used_bytes < 0) return;
    if (a->question == EST_Q_MIN_GPUS) snprintf(at, sizeof at, "one node or GPU fewer");
    else snprintf(at, sizeof at, "at %lld", (long long)(a->value + 1));
    const double cap = (double)run->gpu.memory_bytes;
    /* Tight on the device when its room is under the margin, else on the host. */
    const bool device_tight = a->next_tight && cap - (double)a->next_used_bytes < a->tight_margin_frac * cap;
    const char *verdict = a->next_tight ? "fits, but tight" : "does not fit";
    char margin[48] = "";
    if (a->next_tight) snprintf(margin, sizeof margin, " (under the %.4g%% margin)", a->tight_margin_frac * 100);
    if (a->next_host_short || (a->next_tight && !device_tight))
        fprintf(out, "  %s: %s of host RAM per node, the node has %s: %s%s\n", at,
                est_fmt_bytes(a->next_host_peak_per_node_bytes, b1, sizeof b1),
                est_fmt_bytes(a->next_host_ram_bytes, b2, sizeof b2), verdict, margin);
    else
        fprintf(out, "  %s: %s on the device of %s: %s%s\n", at, est_fmt_bytes(a->next_used_bytes, b1, sizeof b1),
                est_fmt_bytes(run->gpu.memory_bytes, b2, sizeof b2), verdict, margin);
}

static cJSON *answer_json(const est_answer *a, const char *label) {
    cJSON *o = cJSON_CreateObject();
    if (label) cJSON_AddStringToObject(o, "strategy", label);
    cJSON_AddNumberToObject(o, "answer", (double)a->value);
    cJSON_AddBoolToObject(o, "fits", a->value > 0);
    if (a->question == EST_Q_MIN_GPUS) {
        cJSON_AddNumberToObject(o, "gpus_per_node", (double)a->gpus_per_node);
        cJSON_AddNumberToObject(o, "nodes", (double)a->nodes);
    }
    cJSON_AddNumberToObject(o, "device_used_bytes", (double)a->used_bytes);
    if (a->next_used_bytes >= 0) cJSON_AddNumberToObject(o, "next_device_used_bytes", (double)a->next_used_bytes);
    cJSON_AddNumberToObject(o, "step_time_s", a->step_time_s);
    cJSON_AddNumberToObject(o, "tokens_per_s", a->tokens_per_s);
    cJSON_AddNumberToObject(o, "limit", (double)a->limit);
    cJSON_AddNumberToObject(o, "tight_margin_frac", a->tight_margin_frac);
    if (a->fastest_value > 0) {
        cJSON_AddNumberToObject(o, "fastest_answer", (double)a->fastest_value);
        cJSON_AddNumberToObject(o, "fastest_tokens_per_s", a->fastest_tokens_per_s);
        cJSON_AddNumberToObject(o, "fastest_step_time_s", a->fastest_step_time_s);
        cJSON_AddNumberToObject(o, "fastest_stride", (double)a->fastest_stride);
    }
    cJSON_AddNumberToObject(o, "host_peak_per_node_bytes", (double)a->host_peak_per_node_bytes);
    cJSON_AddNumberToObject(o, "host_ram_bytes", (double)a->host_ram_bytes);
    cJSON_AddBoolToObject(o, "host_short", a->host_short);
    if (a->next_used_bytes >= 0) {
        cJSON_AddNumberToObject(o, "next_host_peak_per_node_bytes", (double)a->next_host_peak_per_node_bytes);
        cJSON_AddNumberToObject(o, "next_host_ram_bytes", (double)a->next_host_ram_bytes);
        cJSON_AddBoolToObject(o, "next_host_short", a->next_host_short);
        cJSON_AddBoolToObject(o, "next_tight", a->next_tight);
    }
    return o;
}

/* One question asked of every strategy, or of the user's own one. */
typedef struct inverse_result {
    est_question q;
    bool single;                        /* the user's strategy: answers[0] only, no list */
    size_t n;
    est_strategy list[EST_MAX_STRATEGIES];
    est_answer answers[EST_MAX_STRATEGIES];
    char why[EST_MAX_STRATEGIES][160];  /* why strategy i has no answer; "" when it has one */
    int best;                           /* index of the best answer */
} inverse_result;

/* Asks r->q of the user's strategy (an error is the command's) or of every
 * strategy (an error is that strategy's why). */
static int answer_strategies(const est_run *base, int64_t node_size, inverse_result *r, char *err,
                             size_t errlen) {
    if (r->single) {
        r->n = 1;
        return est_answer_question(base, r->q, node_size, &r->answers[0], err, errlen) < 0 ? -1 : 0;
    }
    r->n = est_strategies_of_run(base, r->list);
    for (size_t i = 0; i < r->n; i++) {
        est_run run;
        est_strategy_apply(&r->list[i], base, &run);
        char *why = r->why[i];
        why[0] = '\0';
        if (est_answer_question(&run, r->q, node_size, &r->answers[i], why, sizeof r->why[i]) < 0) {
            r->answers[i].value = 0;
            r->answers[i].question = r->q;
            if (!why[0]) ft_strlcpy(why, "invalid", sizeof r->why[i]);
        }
    }
    return 0;
}

/* The index of the best valid answer, or -1 when no strategy has one. */
static int best_answer(const inverse_result *r) {
    int best = -1;
    for (size_t i = 0; i < r->n; i++)
        if ((r->single || !r->why[i][0]) && (best < 0 || better(&r->answers[i], &r->answers[best])))
            best = (int)i;
    return best;
}

static int print_inverse_json(FILE *out, const est_run *base, const inverse_result *r, char *err,
                              size_t errlen) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "schema", "ftest.inverse/1");
    cJSON_AddStringToObject(root, "question", question_name(r->q));
    cJSON_AddStringToObject(root, "model", base->model.name);
    cJSON_AddStringToObject(root, "gpu", base->gpu.name);
    cJSON_AddNumberToObject(root, "capacity_bytes", (double)base->gpu.memory_bytes);
    cJSON_AddItemToObject(root, "best",
                          answer_json(&r->answers[r->best], r->single ? NULL : r->list[r->best].label));
    if (!r->single) {
        cJSON *arr = cJSON_AddArrayToObject(root, "strategies");
        for (size_t i = 0; i < r->n; i++) {
            cJSON *o = answer_json(&r->answers[i], r->list[i].label);
            if (r->why[i][0]) cJSON_AddStringToObject(o, "why", r->why[i]);
            cJSON_AddItemToArray(arr, o);
        }
    }
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    if (!s) return ft_errorf(err, errlen, "out of memory");
    fprintf(out, "%s\n", s);
    cJSON_free(s);
    return 0;
}

/* The largest micro-batch is one answer; the run a user wants is usually the
 * fastest, which can be another strategy at a smaller batch. */
static void print_fastest_strategy(FILE *out, const inverse_result *r) {
    const int best = r->best;
    int fast = best;
    for (size_t i = 0; i < r->n; i++)
        if (!r->why[i][0] && r->answers[i].fastest_value > 0 &&
            r->answers[i].fastest_tokens_per_s > r->answers[fast].fastest_tokens_per_s * (1 + 1e-9))
            fast = (int)i;
    const est_answer *f = &r->answers[fast];
    if (fast != best)
        fprintf(out, "\nfastest that fits: micro-batch %lld with %s, %.3g s/step, %.0f tokens/s in total "
                     "(%+.1f%% over the largest micro-batch above)\n",
                (long long)f->fastest_value, r->list[fast].label, f->fastest_step_time_s,
                f->fastest_tokens_per_s,
                r->answers[best].fastest_tokens_per_s > 0
                    ? 100 * (f->fastest_tokens_per_s / r->answers[best].fastest_tokens_per_s - 1) : 0);
    else
        fprintf(out, "\nfastest that fits: the strategy above, at micro-batch %lld\n",
                (long long)f->fastest_value);
}

/* One row per strategy, the best marked with '>'. */
static void print_strategy_table(FILE *out, const inverse_result *r) {
    const est_question q = r->q;
    const char *col = q == EST_Q_MAX_BATCH ? "max batch" : q == EST_Q_MAX_SEQ ? "max seq" : "min GPUs";
    char b1[32];
    fprintf(out, "\n  %-28s %10s %11s %8s %11s%s\n", "strategy", col, "device", "s/step", "tokens/s",
            q == EST_Q_MAX_BATCH ? "   fastest   tokens/s" : "");
    for (size_t i = 0; i < r->n; i++) {
        const est_answer *a = &r->answers[i];
        fprintf(out, "%c %-28s ", (int)i == r->best ? '>' : ' ', r->list[i].label);
        if (r->why[i][0]) fprintf(out, "n/a: %s\n", r->why[i]);
        else if (a->value == 0) fprintf(out, "%10s\n", "-");
        else {
            fprintf(out, "%10lld %11s %8.3g %11.0f", (long long)a->value,
                    est_fmt_bytes(a->used_bytes, b1, sizeof b1), a->step_time_s, a->tokens_per_s);
            if (a->fastest_value > 0)
                fprintf(out, " %9lld %10.0f", (long long)a->fastest_value, a->fastest_tokens_per_s);
            fputc('\n', out);
        }
    }
}

/* The run at the answer, its description, the answer, and without a strategy
 * of the user's the fastest one and every strategy's row. */
static void print_inverse_text(FILE *out, const est_run *base, const inverse_result *r,
                               est_run_printer print_run) {
    const est_answer *a = &r->answers[r->best];
    const bool found = a->value > 0;
    est_run shown = *base;
    if (!r->single) est_strategy_apply(&r->list[r->best], base, &shown);
    if (r->q == EST_Q_MIN_GPUS) shown.gpus_per_node = a->gpus_per_node, shown.nodes = a->nodes;
    else if (found && r->q == EST_Q_MAX_BATCH) shown.micro_batch = a->value;
    else if (found) shown.seq_len = a->value;
    print_run(out, &shown);
    print_answer(out, &shown, a, r->single ? NULL : r->list[r->best].label);
    if (!r->single && r->q == EST_Q_MAX_BATCH && found) print_fastest_strategy(out, r);
    if (!r->single) print_strategy_table(out, r);
}

int est_inverse_report(const est_run *base, est_question q, int64_t node_size, bool single, bool json,
                       est_run_printer print_run, FILE *out, char *err, size_t errlen) {
    inverse_result r;
    memset(&r, 0, sizeof r);
    r.q = q;
    r.single = single;
    if (answer_strategies(base, node_size, &r, err, errlen) < 0) return -1;
    r.best = best_answer(&r);
    if (r.best < 0) return ft_errorf(err, errlen, "%s", r.n ? r.why[0] : "no strategy to search");
    const bool found = r.answers[r.best].value > 0;
    if (json) {
        if (print_inverse_json(out, base, &r, err, errlen) < 0) return -1;
    } else {
        print_inverse_text(out, base, &r, print_run);
    }
    return found ? 0 : 1;
}
