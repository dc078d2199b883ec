#include "plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "estimate.h"
#include "fw_registry.h"
#include "plan_memo.h"
#include "json_util.h"
#include "format.h"
#include "timing.h"

/* Memory does not depend on the network or the price, only on the GPU, the
 * rank count and the strategy: results are shared by the instances alike. */
typedef struct fit_entry {
    char gpu[EST_GPU_NAME_MAX];
    int64_t world;
    int strategy;
    bool accum;              /* grad_accum > 1 (gradients carried between micro-batches) */
    int64_t max_batch;       /* 0: micro-batch 1 does not fit; else the largest the search
                                found (searched), or 1 (the table alone: only the floor
                                was asked) */
    bool searched;           /* the search ran (not the table alone) */
    int64_t device_used_bytes; /* at max_batch (searched only; -1 otherwise) */
    int64_t cpu_bytes, cpu_load_bytes;
    est_constants k;         /* constants in force for this framework and GPU */
} fit_entry;

typedef struct search {
    fit_entry *cache;
    size_t n, cap;
    est_plan_memo *memo;     /* what every card asks of one step, worked out once (plan_memo.h) */
    est_probe_answer last;   /* what the last probe's estimate said */
    size_t estimates;
    bool oom;                /* the host ran out of memory */
} search;

/* Does `run` at micro-batch b fit: 1, 0, or -1 when its estimate fails (as
 * est_estimate_run's e.fits; s->last holds the estimate's figures). */
static int fits(search *s, est_run *run, int64_t b) {
    run->micro_batch = b;
    s->estimates++;
    est_probe_answer a;
    if (est_plan_memo_probe(s->memo, run, &a) < 0) {
        s->oom = true;
        return -1;
    }
    s->last = a;
    if (a.rc < 0) return -1;
    return a.fits ? 1 : 0;
}

/* The device bytes the last successful estimate said. */
static int64_t last_used(search *s, const est_run *run) {
    const int64_t used = est_plan_memo_device_used(s->memo, run);
    if (used < 0) s->oom = true;
    return used;
}

/* The search of `run`'s largest micro-batch: doubling, then bisection (it
 * assumes the fit is monotone in the micro-batch; the plan's candidates do
 * not rely on that: candidates()). */
static void search_batch(search *s, est_run *run, fit_entry *f) {
    /* Memory grows about linearly with the micro-batch: a guess from the
     * first two, then a bracket around it, then bisection. */
    const int64_t d1 = last_used(s, run), cap_bytes = s->last.capacity_bytes;
    int64_t lo = 1, hi = 0, x = 2;
    if (fits(s, run, 2) == 1) {
        lo = 2;
            const int64_t d2 = last_used(s, run), slope = d2 - d1;
        if (slope > 0 && cap_bytes > d2) {
            int64_t guess = 2 + (cap_bytes - d2) / slope;
            if (guess > EST_MAX_BATCH) guess = EST_MAX_BATCH;
            /* the guess and its neighbour above (or below) bracket it */
            if (guess > 2 && fits(s, run, guess) == 1) {
                lo = guess;
                            if (guess < EST_MAX_BATCH && fits(s, run, guess + 1) == 0) hi = guess + 1;
                else lo = guess + 1;
            } else if (guess > 2) {
                hi = guess;
                            if (fits(s, run, guess - 1) == 1) lo = guess - 1;
                else hi = guess - 1;
            }
        }
        for (x = lo * 2; hi == 0 && x <= EST_MAX_BATCH; x *= 2) {
                    if (fits(s, run, x) == 1) lo = x;
            else hi = x;
        }
    } else {
        hi = 2;
    }
    if (hi == 0) hi = EST_MAX_BATCH + 1;
    while (hi > lo + 1) {
            int64_t mid = lo + (hi - lo) / 2;
        if (fits(s, run, mid) == 1) lo = mid;
        else hi = mid;
    }
    f->max_batch = lo;
    fits(s, run, lo);
    f->device_used_bytes = last_used(s, run);
}

/* The floor of one (card, world, strategy, accumulation): whether micro-batch 1
 * fits (with accumulation: micro-batch 1 at accumulation `ga`, as its memory
 * sees only grad_accum > 1), and, unless `table_only`, the largest micro-batch
 * the search finds (max_batch, device_used_bytes: the whole plan's figures).
 * The table alone needs only the floor: its candidates are each probed by
 * candidates(), as in the whole search, so it skips the doubling and bisection
 * over micro-batches no plan is made of. Cached per card, world, strategy and
 * accumulation; a copy is taken by the caller (the cache may move). */
static const fit_entry *max_batch(search *s, const est_run *base, int strategy, bool accum,
                                  int64_t ga, bool table_only) {
    for (size_t i = 0; i < s->n; i++) {
        fit_entry *f = &s->cache[i];
        if (f->world == est_run_world(base) && f->strategy == strategy && f->accum == accum &&
            !strcmp(f->gpu, base->gpu.name))
            return f;
    }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 256;
        fit_entry *nc = realloc(s->cache, cap * sizeof *nc);
        if (!nc) return NULL;
        s->cache = nc;
        s->cap = cap;
    }
    fit_entry *f = &s->cache[s->n++];
    memset(f, 0, sizeof *f);
    ft_strlcpy(f->gpu, base->gpu.name, sizeof f->gpu);
    f->world = est_run_world(base);
    f->strategy = strategy;
    f->accum = accum;
    f->device_used_bytes = -1;
    est_run run = *base;
    run.grad_accum = accum ? ga : 1;
    const int r = fits(s, &run, 1);
    if (r == 1) {
        f->max_batch = 1;
        f->cpu_bytes = s->last.cpu_bytes; /* the host memory the plan checks is micro-batch 1's */
        f->cpu_load_bytes = s->last.cpu_load_bytes;
        f->searched = !table_only;
        if (!table_only) search_batch(s, &run, f);
    }
    run.micro_batch = 1;
    if (est_plan_memo_constants(&run, &f->k) < 0) est_constants_defaults(&f->k);
    return s->oom ? NULL : f;
}

/* Step time with the cached constants. */
static void time_of(search *s, const est_run *run, const fit_entry *f, est_time_detail *t) {
    est_constants own;
    est_plan_memo_time(s->memo, run, est_time_constants(run, &f->k, &own), t);
}

static int cmp_plan(const void *a, const void *b) {
    const est_plan *x = a, *y = b;
    if (x->cost_usd != y->cost_usd) return x->cost_usd < y->cost_usd ? -1 : 1;
    if (x->hours != y->hours) return x->hours < y->hours ? -1 : 1;
    return 0;
}

static int push(est_plan_result *r, size_t *cap, const est_plan *p) {
    if (r->count == *cap) {
        size_t nc = *cap ? *cap * 2 : 256;
        est_plan *np = realloc(r->plans, nc * sizeof *np);
        if (!np) return -1;
        r->plans = np;
        *cap = nc;
    }
    r->plans[r->count++] = *p;
    return 0;
}

/* Does micro-batch b at accumulation ga fit by its own estimate, where f's
 * floor (micro-batch 1 at the same accumulation or none) fits?
 *
 * Why each candidate is probed. The search of the largest micro-batch
 * (search_batch) assumes the fit is monotone in the micro-batch, and the
 * table-only shortcut used to assume it too, each in its own way: the search
 * took every micro-batch up to the largest it bisected to, the shortcut
 * took every candidate below the largest candidate that fitted. Near a card's
 * capacity the simulated caching allocator is not monotone (the blocks it
 * splits and rounds move with the micro-batch: llama3-8b on an a100-40gb,
 * 16 GPUs, ZeRO-1, full checkpointing, seq 2048, accumulation: micro-batch 1
 * reserves 41.41 GiB and does not fit, 2 reserves 39.43 GiB and fits), so
 * the two could offer different plans (tests/plan_memo.c). Both now mean the
 * same by a plan's fit: the combination's floor fits (the search starts
 * there: OUT_NO_FIT otherwise) and the plan's own micro-batch and
 * accumulation fit, as `ftest estimate` of that plan would say. The whole
 * search still runs its bisection, for the largest micro-batch it reports;
 * the table alone skips it (max_batch), which is what keeps it cheaper. The
 * probe is at the plan's own accumulation (the memo then holds its step for
 * its time too), at 2 where that is beyond EST_MAX_ACCUM (memory sees only
 * grad_accum > 1). */
static bool candidate_fits(search *s, est_run *run, const fit_entry *f, int64_t b, int64_t ga) {
    if (f->max_batch == 0 || b > EST_MAX_BATCH) return false;
    run->grad_accum = ga <= EST_MAX_ACCUM ? ga : 2;
    return fits(s, run, b) == 1;
}

/* Micro-batch candidates for one combination: the largest that fits and a
 * few halvings of it, or with a global batch the largest divisors of the
 * per-GPU share (gradient accumulation makes up the rest); each one probed
 * (candidate_fits). */
static size_t candidates(search *s, est_run run, int64_t per_gpu, const fit_entry *f1,
                         const fit_entry *fa, int64_t out_b[8], int64_t out_ga[8]) {
    size_t n = 0;
    if (per_gpu == 0) {
        for (int64_t b = f1->max_batch; b >= 1 && n < 4; b /= 2)
            if (candidate_fits(s, &run, f1, b, 1)) {
                out_b[n] = b;
                out_ga[n++] = 1;
            }
        return n;
    }
    /* Divisors in decreasing order: d <= sqrt gives per_gpu/d >= sqrt. */
    int64_t small[4096 + 1];
    size_t ns = 0;
    for (int64_t d = 1; d * d <= per_gpu && ns < sizeof small / sizeof small[0]; d++)
        if (per_gpu % d == 0) small[ns++] = d;
    for (size_t pass = 0; pass < 2 && n < 6; pass++)
        for (size_t j = 0; j < ns && n < 6; j++) {
            size_t idx = pass == 0 ? j : ns - 1 - j;
            int64_t b = pass == 0 ? per_gpu / small[idx] : small[idx];
            if (pass == 1 && b * b == per_gpu) continue; /* listed in the first pass */
            int64_t ga = per_gpu / b;
            if (!candidate_fits(s, &run, ga == 1 ? f1 : fa, b, ga)) continue;
            out_b[n] = b;
            out_ga[n++] = ga;
        }
    return n;
}

/* The user's strategy, named as in the alternatives when it is one of them. */
static void user_strategy(const est_plan_request *req, est_strategy *st) {
    memset(st, 0, sizeof *st);
    snprintf(st->label, sizeof st->label, "ZeRO-%d%s%s", req->base.zero_stage,
             req->base.offload != EST_OFFLOAD_NONE ? " + offload" : "",
             req->base.checkpointing != EST_CKPT_NONE ? " + ckpt" : "");
    st->framework = req->base.framework;
    st->zero = req->base.zero_stage;
    st->offload = req->base.offload;
    st->checkpointing = req->base.checkpointing;
    est_strategy known[EST_MAX_STRATEGIES];
    /* Its framework's list, then the list of the framework it shards under
     * (HF's DDP is also DeepSpeed's first alternative). */
    const est_framework fws[] = {req->base.framework, est_fw_of(&req->base)->sharded_by};
    for (size_t f = 0; f < 2; f++) {
        size_t nk = est_strategies(fws[f], known);
        for (size_t j = 0; j < nk; j++)
            if (known[j].framework == st->framework && known[j].zero == st->zero &&
                known[j].offload == st->offload && known[j].checkpointing == st->checkpointing) {
                *st = known[j];
                return;
            }
    }
}

/* One search: the request, the strategies it tries, the fit cache and the plans so far. */
typedef struct planner {
    const est_plan_request *req;
    est_strategy list[EST_MAX_STRATEGIES];
    size_t ns;
    double total_tokens;     /* tokens x epochs */
    search s;
    est_plan_result *out;
    size_t cap;              /* plans allocated in out */
} planner;

/* The run of one instance x nodes x strategy combination, micro-batch left to the search. */
static void combination_run(const est_plan_request *req, const est_strategy *st,
                            const est_instance *in, int64_t nodes, est_run *run) {
    est_strategy_apply(st, &req->base, run);
    run->gpu = in->gpu;
    if (!in->nvlink) run->gpu.nvlink_gb_per_s = 0; /* GPUs talk over PCIe */
    run->gpus_per_node = in->gpus;
    run->nodes = nodes;
    run->inter_node_gb_per_s = nodes == 1                     ? 0
                               : req->inter_node_gb_per_s > 0 ? req->inter_node_gb_per_s
                                                              : in->inter_node_gb_per_s;
    /* The GPU-memory fits are cached across instances with the same
     * GPU; each instance's own host RAM is checked by the caller, against
     * the same per-node figure the verdict uses (estimate.c). */
    run->host_ram_bytes = 0;
    run->host_ram_per_gpu_memory = 0;
    run->host_mem_gb_per_s = in->host_mem_gb_per_s; /* the CPU optimizer's host (0: defaults) */
    run->host_cores = in->host_cores;
    run->grad_accum = 1;
}

/* The floors and largest micro-batches without (*f1) and with (*fa) gradient
 * accumulation (max_batch; the table alone asks only the floors); *fa is *f1
 * when the per-GPU share needs no accumulation. Copies: the cache may move
 * when it grows. 0, or -1 out of memory. */
static int fit_limits(planner *p, const est_run *run, size_t si, int64_t per_gpu, fit_entry *f1,
                      fit_entry *fa) {
    const bool table_only = p->req->table_only && per_gpu > 0;
    const fit_entry *f1p = max_batch(&p->s, run, (int)si, false, 1, table_only);
    if (!f1p) return -1;
    *f1 = *f1p;
    *fa = *f1;
    if (f1->max_batch == 0 || per_gpu <= 1) return 0;
    /* micro-batch 1 at the accumulation a plan of it would have (the memo
     * keeps its step for its time) */
    const int64_t ga = per_gpu <= EST_MAX_ACCUM ? per_gpu : 2;
    const fit_entry *fap = max_batch(&p->s, run, (int)si, true, ga, table_only);
    if (!fap) return -1;
    *fa = *fap;
    return 0;
}

/* Fills the timing and price of *pl (where and how already set) for run's batch. */
static void price_plan(const planner *p, const est_instance *in, const est_run *run,
                       const est_time_detail *t, const fit_entry *f, est_plan *pl) {
    pl->micro_batch = run->micro_batch;
    pl->grad_accum = run->grad_accum;
    pl->global_batch = run->micro_batch * run->grad_accum * pl->gpus;
    pl->step_time_s = t->step_s;
    pl->tokens_per_s = t->tokens_per_s;
    pl->mfu = t->mfu;
    double per_step = (double)pl->global_batch * (double)p->req->base.seq_len;
    pl->steps = ceil(p->total_tokens / per_step);
    pl->hours = pl->steps * t->step_s / 3600.0;
    pl->cost_usd = pl->hours * in->usd_per_hour * (double)pl->nodes;
    pl->device_used_bytes = f->device_used_bytes;
}

/* The candidate micro-batch x accumulation with the most tokens/s, as a plan
 * from where (instance, nodes, strategy, host); false when none has a step time. */
static bool fastest_candidate(planner *p, const est_instance *in, est_run *run,
                              const fit_entry *f1, const fit_entry *fa, const int64_t cb[],
                              const int64_t cga[], size_t nc, const est_plan *where,
                              est_plan *best) {
    bool have = false;
    for (size_t c = 0; c < nc; c++) {
        run->micro_batch = cb[c];
        run->grad_accum = cga[c];
        const fit_entry *f = cga[c] > 1 ? fa : f1;
        est_time_detail t;
        time_of(&p->s, run, f, &t);
        if (!(t.step_s > 0)) continue;
        if (have && !(t.tokens_per_s > best->tokens_per_s)) continue;
        *best = *where;
        price_plan(p, in, run, &t, f, best);
        have = true;
    }
    return have;
}

/* What became of one instance x nodes x strategy combination. */
typedef enum outcome {
    OUT_PLAN,             /* a plan (kept unless over the limits) */
    OUT_BATCH_MISMATCH,
    OUT_NO_FIT,
    OUT_HOST_SHORT,
    OUT_ACCUM_NO_FIT,
    OUT_NO_TIME,
    OUT_OVER_LIMITS,
} outcome;

/* One combination: a combination's place in the catalog's order, and its
 * outcome once worked out. */
typedef struct combo {
    size_t instance, strategy;
    int64_t nodes;
    int64_t world;
    outcome what;
    est_plan plan; /* OUT_PLAN */
} combo;

/* Works out combination c: its fastest plan, or the reason there is none.
 * 0, or -1 out of memory. */
static int plan_combination(planner *p, const est_instance *in, combo *c, char *err, size_t errlen) {
    const est_plan_request *req = p->req;
    const size_t si = c->strategy;
    const int64_t nodes = c->nodes, W = c->world;
    est_run run;
    combination_run(req, &p->list[si], in, nodes, &run);
    int64_t per_gpu = 0;
    if (req->global_batch > 0) {
        if (req->global_batch % W) {
            c->what = OUT_BATCH_MISMATCH;
            return 0;
        }
        per_gpu = req->global_batch / W;
    }
    fit_entry f1, fa;
    if (fit_limits(p, &run, si, per_gpu, &f1, &fa) < 0) return ft_errorf(err, errlen, "out of memory");
    c->what = OUT_NO_FIT;
    if (f1.max_batch == 0) return 0;
    int64_t host = (f1.cpu_bytes > f1.cpu_load_bytes ? f1.cpu_bytes : f1.cpu_load_bytes) * in->gpus;
    c->what = OUT_HOST_SHORT;
    if (host > in->host_ram_bytes) return 0;
    int64_t cb[8], cga[8];
    size_t nc = candidates(&p->s, run, per_gpu, &f1, &fa, cb, cga);
    if (p->s.oom) return ft_errorf(err, errlen, "out of memory");
    c->what = OUT_ACCUM_NO_FIT;
    if (nc == 0) return 0;
    est_plan where;
    memset(&where, 0, sizeof where);
    where.instance = c->instance;
    where.nodes = nodes;
    where.gpus = W;
    where.strategy = p->list[si];
    where.host_bytes_per_node = host;
    where.inter_node_gb_per_s = run.inter_node_gb_per_s;
    c->what = OUT_NO_TIME;
    if (!fastest_candidate(p, in, &run, &f1, &fa, cb, cga, nc, &where, &c->plan)) return 0;
    const est_plan *best = &c->plan;
    c->what = (req->max_hours > 0 && best->hours > req->max_hours) ||
                      (req->max_cost > 0 && best->cost_usd > req->max_cost)
                  ? OUT_OVER_LIMITS
                  : OUT_PLAN;
    return 0;
}

/* Counts combination c by its outcome, and keeps its plan. 0, or -1 out of memory. */
static int tally(planner *p, const combo *c, char *err, size_t errlen) {
    est_plan_result *out = p->out;
    out->combos++;
    switch (c->what) {
    case OUT_PLAN:
        if (push(out, &p->cap, &c->plan) < 0) return ft_errorf(err, errlen, "out of memory");
        break;
    case OUT_BATCH_MISMATCH: out->batch_mismatch++; break;
    case OUT_NO_FIT: out->no_fit++; break;
    case OUT_HOST_SHORT: out->host_short++; break;
    case OUT_ACCUM_NO_FIT: out->accum_no_fit++; break;
    case OUT_NO_TIME: out->no_time++; break;
    case OUT_OVER_LIMITS: out->over_limits++; break;
    }
    return 0;
}

/* Every instance x node count (1, 2, 4, ...; more than one only with a
 * network) x strategy, in the catalog's order; NULL out of memory. */
static combo *combinations(const planner *p, const est_instance_catalog *cat, size_t *n) {
    size_t cap = cat->count * p->ns * 8, k = 0;
    combo *c = malloc((cap ? cap : 1) * sizeof *c);
    for (size_t i = 0; c && i < cat->count; i++) {
        const est_instance *in = &cat->items[i];
        for (int64_t nodes = 1; nodes <= EST_PLAN_MAX_NODES; nodes *= 2) {
            if (nodes > 1 && !(in->inter_node_gb_per_s > 0)) break;
            for (size_t si = 0; si < p->ns; si++) {
                if (k == cap) {
                    combo *nc = realloc(c, 2 * cap * sizeof *c);
                    if (!nc) {
                        free(c);
                        return NULL;
                    }
                    c = nc;
                    cap *= 2;
                }
                c[k++] = (combo){.instance = i, .strategy = si, .nodes = nodes, .world = in->gpus * nodes};
            }
        }
    }
    *n = k;
    return c;
}

/* The order combinations are worked out in: by world, then strategy, then the
 * catalog's order. Combinations of one world and strategy ask the memo for
 * the same probes on every card (plan_memo.h), so those asked together find
 * their steps still built (the memo keeps the last few); the plans are kept
 * in the catalog's order all the same. */
typedef struct work_key {
    int64_t world;
    size_t strategy, index;
} work_key;

static int cmp_work(const void *a, const void *b) {
    const work_key *x = a, *y = b;
    if (x->world != y->world) return x->world < y->world ? -1 : 1;
    if (x->strategy != y->strategy) return x->strategy < y->strategy ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* Every combination worked out (in cmp_work's order), then counted and kept
 * in the catalog's. 0, or -1 out of memory. */
static int plan_all(planner *p, const est_instance_catalog *cat, est_progress *prog, char *err,
                    size_t errlen) {
    size_t n = 0;
    combo *c = combinations(p, cat, &n);
    work_key *order = c ? malloc((n ? n : 1) * sizeof *order) : NULL;
    int rc = order ? 0 : ft_errorf(err, errlen, "out of memory");
    for (size_t k = 0; k < n && order; k++)
        order[k] = (work_key){.world = c[k].world, .strategy = c[k].strategy, .index = k};
    if (order) qsort(order, n, sizeof *order, cmp_work);
    for (size_t k = 0; k < n && order; k++) /* the cards each world is asked on */
        est_plan_memo_largest_card(p->s.memo, c[k].world, cat->items[c[k].instance].gpu.memory_bytes);
    for (size_t k = 0; k < n && rc == 0; k++) {
        if (prog) est_progress_update(prog, k, n);
        combo *w = &c[order[k].index];
        rc = plan_combination(p, &cat->items[w->instance], w, err, errlen);
    }
    for (size_t k = 0; k < n && rc == 0; k++) rc = tally(p, &c[k], err, errlen);
    free(order);
    free(c);
    return rc;
}

/* Sorts cheapest first and marks the cheapest, the fastest and the Pareto front. */
static void rank_plans(est_plan_result *out) {
    if (out->count) qsort(out->plans, out->count, sizeof *out->plans, cmp_plan);
    /* Sorted by cost, then hours: a plan is on the Pareto front when it is
     * faster than every cheaper one. */
    double best_hours = INFINITY;
    size_t fastest = 0;
    for (size_t i = 0; i < out->count; i++) {
        est_plan *p = &out->plans[i];
        if (p->hours < best_hours) {
            p->pareto = true;
            best_hours = p->hours;
        }
        if (p->hours < out->plans[fastest].hours) fastest = i;
    }
    if (out->count) {
        out->plans[0].cheapest = true;
        out->plans[fastest].fastest = true;
    }
}

int est_plan_search(const est_plan_request *req, const est_instance_catalog *cat, est_progress *prog,
                    est_plan_result *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (!(req->tokens > 0)) return ft_errorf(err, errlen, "plan needs --tokens (training tokens, e.g. 1B)");
    if (!(req->epochs > 0)) return ft_errorf(err, errlen, "--epochs must be positive");
    if (est_run_validate(&req->base, err, errlen) < 0) return -1;
    if (req->base.tp > 1) /* its instances, batches and prices count data-parallel ranks */
        return ft_errorf(err, errlen, "plan with --tp is not modelled; estimate each layout with --tp");
    if (cat->count == 0) return ft_errorf(err, errlen, "the instance catalog is empty");

    planner p = {.req = req, .out = out, .total_tokens = req->tokens * req->epochs};
    if (req->strategy_fixed) {
        p.ns = 1;
        user_strategy(req, &p.list[0]);
    } else {
        p.ns = est_strategies_of_run(&req->base, p.list);
    }
    p.s.memo = est_plan_memo_new();
    if (!p.s.memo) return ft_errorf(err, errlen, "out of memory");
    const int rc = plan_all(&p, cat, prog, err, errlen);
    out->estimates = p.s.estimates;
    est_plan_memo_counts(p.s.memo, &out->probes, &out->builds, &out->replays);
    est_plan_memo_free(p.s.memo);
    free(p.s.cache);
    if (rc < 0) {
        est_plan_free(out);
        return -1;
    }
    rank_plans(out);
    return 0;
}

void est_plan_free(est_plan_result *r) {
    free(r->plans);
    r->plans = NULL;
    r->count = 0;
}

static const char *fmt_hours(double h, char *buf, size_t n) {
    if (h < 1) snprintf(buf, n, "%.0f min", h * 60);
    else if (h < 100) snprintf(buf, n, "%.1f h", h);
    else snprintf(buf, n, "%.0f h", h);
    return buf;
}

static void print_row(FILE *out, const est_instance_catalog *cat, const est_plan *p, size_t rank) {
    const est_instance *in = &cat->items[p->instance];
    char h[32], marks[40] = "";
    if (p->cheapest) strcat(marks, " cheapest");
    if (p->fastest) strcat(marks, " fastest");
    if (p->pareto) strcat(marks, " pareto");
    char host[24]; /* host RAM needed / the instance's, GiB per node */
    snprintf(host, sizeof host, "%.0f/%.0f", (double)p->host_bytes_per_node / 1073741824.0,
             (double)in->host_ram_bytes / 1073741824.0);
    char net[16] = "-"; /* GB/s between nodes, per node */
    if (p->nodes > 1) snprintf(net, sizeof net, "%.0f", p->inter_node_gb_per_s);
    fprintf(out, "%4zu  %-22.22s %5lld %5lld %5s  %-27.27s %5lld %5lld %8.3g %10.0f %5.1f%% %9s %11.2f %10s %s\n",
            rank, in->name, (long long)p->nodes, (long long)p->gpus, net, p->strategy.label,
            (long long)p->micro_batch, (long long)p->grad_accum, p->step_time_s, p->tokens_per_s,
            100 * p->mfu, fmt_hours(p->hours, h, sizeof h), p->cost_usd, host, marks);
}

static void header(FILE *out) {
    fprintf(out, "%4s  %-22s %5s %5s %5s  %-27s %5s %5s %8s %10s %6s %9s %11s %10s\n", "rank", "instance",
            "nodes", "GPUs", "net", "strategy", "batch", "accum", "s/step", "tokens/s", "MFU", "time",
            "cost USD", "host GiB");
}

void est_plan_print(FILE *out, const est_plan_request *req, const est_instance_catalog *cat,
                    const est_plan_result *r, size_t top) {
    char tok[32];
    fprintf(out, "%s, seq %lld, %s tokens x %.3g epoch%s, %s\n", req->base.model.name,
            (long long)req->base.seq_len, est_fmt_count(req->tokens, tok, sizeof tok), req->epochs,
            req->epochs == 1 ? "" : "s", est_precision_name(req->base.precision));
    if (req->global_batch > 0)
        fprintf(out, "global batch: %lld sequences per step (--global-batch G sets it; `free`: each plan's "
                     "largest micro-batch, no accumulation)\n", (long long)req->global_batch);
    else
        fprintf(out, "global batch: free (each plan's largest micro-batch, no accumulation)\n");
    char net[48];
    if (req->inter_node_gb_per_s > 0) snprintf(net, sizeof net, "%.4g GB/s for every instance", req->inter_node_gb_per_s);
    fprintf(out, "nodes: 1, 2, 4, ... %d of instances with a network; between nodes (net, GB/s per node): "
                 "%s (--inter-node-gbps sets it)\n", EST_PLAN_MAX_NODES,
            req->inter_node_gb_per_s > 0 ? net : "each instance's");
    fprintf(out, "searched %zu instances, %zu instance x nodes x strategy combinations: %zu plan%s\n",
            cat->count, r->combos, r->count, r->count == 1 ? "" : "s");
    /* Every combination that is not a plan, by reason (they add up to combos). */
    if (r->no_fit) fprintf(out, "  %zu dropped: micro-batch 1 does not fit the GPU\n", r->no_fit);
    if (r->host_short) fprintf(out, "  %zu dropped: short of host RAM\n", r->host_short);
    if (r->batch_mismatch)
        fprintf(out, "  %zu dropped: the global batch does not split evenly over the GPUs\n", r->batch_mismatch);
    if (r->accum_no_fit)
        fprintf(out, "  %zu dropped: the global batch needs accumulation, which does not fit\n", r->accum_no_fit);
    if (r->no_time) fprintf(out, "  %zu dropped: no step time could be estimated\n", r->no_time);
    if (r->over_limits) fprintf(out, "  %zu dropped: over --max-hours/--max-cost\n", r->over_limits);
    fputc('\n', out);
    if (r->count == 0) {
        fprintf(out, "no plan fits%s.\n", r->over_limits ? " within the limits" : "");
        return;
    }
    header(out);
    /* One row per instance and node count: its cheapest strategy. */
    size_t shown = 0, rows = 0;
    bool *seen = calloc(cat->count * 64, sizeof *seen);
    for (size_t i = 0; i < r->count; i++) {
        const est_plan *p = &r->plans[i];
        int lg = 0;
        for (int64_t v = p->nodes; v > 1; v >>= 1) lg++;
        size_t key = p->instance * 64 + (size_t)(lg < 63 ? lg : 63);
        if (seen && seen[key]) continue;
        if (seen) seen[key] = true;
        rows++;
        if (shown < top) {
            print_row(out, cat, p, i + 1);
            shown++;
        }
    }
    free(seen);
    /* What the table leaves out, said rather than left to vanish. */
    fprintf(out, "(each instance x nodes at its cheapest strategy: %zu of %zu shown; the other %zu plans "
                 "are other strategies of these; --json lists all %zu)\n",
            shown, rows, r->count - rows, r->count);
    fprintf(out, "\ncost/time Pareto front (no other plan is both cheaper and faster):\n");
    header(out);
    for (size_t i = 0; i < r->count; i++)
        if (r->plans[i].pareto) print_row(out, cat, &r->plans[i], i + 1);
    const est_plan *c = &r->plans[0];
    const est_plan *f = c;
    for (size_t i = 0; i < r->count; i++)
        if (r->plans[i].fastest) f = &r->plans[i];
    char h1[32], h2[32];
    fprintf(out, "\ncheapest: %s x%lld, %s, %s, $%.2f\nfastest:  %s x%lld, %s, %s, $%.2f\n",
            cat->items[c->instance].name, (long long)c->nodes, c->strategy.label,
            fmt_hours(c->hours, h1, sizeof h1), c->cost_usd, cat->items[f->instance].name,
            (long long)f->nodes, f->strategy.label, fmt_hours(f->hours, h2, sizeof h2), f->cost_usd);
    fprintf(out, "(prices are on-demand list prices with their dates in the catalog; time is the "
                 "estimated step time x steps)\n");
}

char *est_plan_json(const est_plan_request *req, const est_instance_catalog *cat,
                    const est_plan_result *r) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    cJSON_AddStringToObject(root, "schema", "ftest.plan/1");
    cJSON_AddStringToObject(root, "model", req->base.model.name);
    cJSON_AddNumberToObject(root, "seq_len", (double)req->base.seq_len);
    cJSON_AddNumberToObject(root, "tokens", req->tokens);
    cJSON_AddNumberToObject(root, "epochs", req->epochs);
    cJSON_AddNumberToObject(root, "global_batch", (double)req->global_batch);
    cJSON_AddNumberToObject(root, "max_hours", req->max_hours);
    cJSON_AddNumberToObject(root, "max_cost", req->max_cost);
    cJSON_AddNumberToObject(root, "combinations", (double)r->combos);
    cJSON_AddNumberToObject(root, "no_fit", (double)r->no_fit);
    cJSON_AddNumberToObject(root, "host_ram_short", (double)r->host_short);
    cJSON_AddNumberToObject(root, "over_limits", (double)r->over_limits);
    cJSON_AddNumberToObject(root, "batch_mismatch", (double)r->batch_mismatch);
    cJSON_AddNumberToObject(root, "accum_no_fit", (double)r->accum_no_fit);
    cJSON_AddNumberToObject(root, "no_time", (double)r->no_time);
    cJSON_AddNumberToObject(root, "inter_node_gb_per_s", req->inter_node_gb_per_s);
    cJSON *arr = cJSON_AddArrayToObject(root, "plans");
    for (size_t i = 0; i < r->count; i++) {
        const est_plan *p = &r->plans[i];
        const est_instance *in = &cat->items[p->instance];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "rank", (double)(i + 1));
        cJSON_AddStringToObject(o, "instance", in->name);
        cJSON_AddStringToObject(o, "provider", in->provider);
        cJSON_AddStringToObject(o, "gpu", in->gpu.name);
        cJSON_AddNumberToObject(o, "nodes", (double)p->nodes);
        cJSON_AddNumberToObject(o, "gpus", (double)p->gpus);
        cJSON_AddStringToObject(o, "strategy", p->strategy.label);
        cJSON_AddStringToObject(o, "framework", est_framework_name(p->strategy.framework));
        cJSON_AddNumberToObject(o, "zero", p->strategy.zero);
        cJSON_AddStringToObject(o, "offload", est_offload_name(p->strategy.offload));
        cJSON_AddStringToObject(o, "checkpointing", est_checkpointing_name(p->strategy.checkpointing));
        cJSON_AddNumberToObject(o, "micro_batch", (double)p->micro_batch);
        cJSON_AddNumberToObject(o, "grad_accum", (double)p->grad_accum);
        cJSON_AddNumberToObject(o, "global_batch", (double)p->global_batch);
        cJSON_AddNumberToObject(o, "step_time_s", p->step_time_s);
        cJSON_AddNumberToObject(o, "tokens_per_s", p->tokens_per_s);
        cJSON_AddNumberToObject(o, "mfu", p->mfu);
        cJSON_AddNumberToObject(o, "steps", p->steps);
        cJSON_AddNumberToObject(o, "hours", p->hours);
        cJSON_AddNumberToObject(o, "cost_usd", p->cost_usd);
        cJSON_AddNumberToObject(o, "usd_per_hour", in->usd_per_hour * (double)p->nodes);
        cJSON_AddStringToObject(o, "price_date", in->price_date);
        cJSON_AddNumberToObject(o, "device_used_bytes", (double)p->device_used_bytes);
        cJSON_AddNumberToObject(o, "host_bytes_per_node", (double)p->host_bytes_per_node);
        cJSON_AddNumberToObject(o, "inter_node_gb_per_s", p->inter_node_gb_per_s);
        cJSON_AddBoolToObject(o, "cheapest", p->cheapest);
        cJSON_AddBoolToObject(o, "fastest", p->fastest);
        cJSON_AddBoolToObject(o, "pareto", p->pareto);
        cJSON_AddItemToArray(arr, o);
    }
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    return s;
}
