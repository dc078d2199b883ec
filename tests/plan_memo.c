/* The shortcuts the searches take must give the long way's answers, bit for
 * bit (docs/performance.md): the plan's memo (estimator/search/plan_memo.h)
 * against est_estimate_run for runs that differ in their card, across
 * frameworks, strategies, ranks, micro-batches and allocator settings (cards
 * small enough that the allocator's pressure path decides included); its step
 * times against est_time_model; the step's allocated peak known while it is
 * built against the memory ledger's. The reference here is the estimator's
 * own long way, which the other suites check against hand derivations. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "estimate.h"
#include "memory_ledger.h"
#include "plan.h"
#include "plan_memo.h"
#include "step_build.h"
#include "test_util.h"

static est_gpu_catalog gpus;

static void setup(void) {
    char err[256];
    ck_assert_msg(est_gpu_catalog_load(NULL, &gpus, err, sizeof err) == 0, "%s", err);
}

static void teardown(void) { est_gpu_catalog_free(&gpus); }

/* The runs: a model, a strategy and its ranks, and what else changes the step. */
typedef struct shape {
    const char *model;
    est_framework fw;
    int zero;
    est_offload offload;
    est_checkpointing ckpt;
    int64_t gpus, nodes, seq, accum, lora_rank;
    bool expandable;
} shape;

/* A memo serves one plan: runs that differ only in what a plan varies
 * (strategy, ranks, micro-batch, accumulation, card, host, network). Shapes
 * with the same `plan` number share one memo, as one plan's runs do. */
static const struct {
    int plan;
    shape sh;
} shapes[] = {
    {0, {"qwen1.5-0.5b", EST_FW_HF, 0, EST_OFFLOAD_NONE, EST_CKPT_NONE, 1, 1, 2048, 1, 0, false}},
    {0, {"qwen1.5-0.5b", EST_FW_DEEPSPEED, 2, EST_OFFLOAD_NONE, EST_CKPT_FULL, 2, 1, 2048, 2, 0, false}},
    {0, {"qwen1.5-0.5b", EST_FW_DEEPSPEED, 3, EST_OFFLOAD_OPTIMIZER, EST_CKPT_NONE, 4, 2, 2048, 1, 0, false}},
    {0, {"qwen1.5-0.5b", EST_FW_DEEPSPEED, 3, EST_OFFLOAD_OPTIMIZER, EST_CKPT_NONE, 8, 1, 2048, 1, 0, false}},
    {0, {"qwen1.5-0.5b", EST_FW_FSDP, 3, EST_OFFLOAD_NONE, EST_CKPT_NONE, 2, 1, 2048, 1, 0, false}},
    {0, {"qwen1.5-0.5b", EST_FW_FTRAIN, 1, EST_OFFLOAD_NONE, EST_CKPT_NONE, 2, 1, 2048, 1, 0, false}},
    {1, {"qwen1.5-0.5b", EST_FW_HF, 0, EST_OFFLOAD_NONE, EST_CKPT_NONE, 1, 1, 1001, 1, 0, true}},
    {1, {"qwen1.5-0.5b", EST_FW_DEEPSPEED, 3, EST_OFFLOAD_NONE, EST_CKPT_NONE, 2, 1, 1001, 1, 0, true}},
    {2, {"llama3-8b", EST_FW_HF, 0, EST_OFFLOAD_NONE, EST_CKPT_FULL, 1, 1, 2048, 1, 16, false}},
    {3, {"llama3-8b", EST_FW_DEEPSPEED, 3, EST_OFFLOAD_NONE, EST_CKPT_NONE, 8, 1, 2048, 2, 0, false}},
    {3, {"llama3-8b", EST_FW_DEEPSPEED, 1, EST_OFFLOAD_NONE, EST_CKPT_FULL, 8, 2, 2048, 1, 0, false}},
    {3, {"llama3-8b", EST_FW_HF, 0, EST_OFFLOAD_NONE, EST_CKPT_FULL, 4, 4, 2048, 1, 0, false}},
    {4, {"llama3-8b", EST_FW_DEEPSPEED, 1, EST_OFFLOAD_NONE, EST_CKPT_FULL, 8, 2, 2048, 1, 0, true}},
};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

/* The memo of shape i's plan: a new one when the plan changes. */
static est_plan_memo *memo_for(est_plan_memo *m, size_t i) {
    if (m && i > 0 && shapes[i].plan == shapes[i - 1].plan) return m;
    est_plan_memo_free(m);
    m = est_plan_memo_new();
    ck_assert_ptr_nonnull(m);
    /* odd plans know their largest card (h200-141gb, the last of cards[]), as ftest plan does */
    if (shapes[i].plan % 2)
        for (size_t j = i; j < NSHAPES && shapes[j].plan == shapes[i].plan; j++)
            est_plan_memo_largest_card(m, shapes[j].sh.gpus * shapes[j].sh.nodes,
                                       est_gpu_find(&gpus, "h200-141gb")->memory_bytes);
    return m;
}

static const char *const cards[] = {"l4-24gb", "rtx3090-24gb", "a100-40gb", "l40s-48gb",
                                    "a100-80gb", "h100-80gb", "h200-141gb"};

static est_run run_of(const shape *sh, const char *card, int64_t batch) {
    ft_model m;
    char err[256];
    ck_assert_msg(ft_model_load(sh->model, &m, err, sizeof err) == 0, "%s", err);
    est_run r;
    est_run_defaults(&r, &m, est_gpu_find(&gpus, card));
    r.framework = sh->fw;
    r.zero_stage = sh->zero;
    r.offload = sh->offload;
    r.checkpointing = sh->ckpt;
    if (sh->fw == EST_FW_FTRAIN) r.attention = EST_ATTN_FLASH;
    r.gpus_per_node = sh->gpus;
    r.nodes = sh->nodes;
    r.seq_len = sh->seq;
    r.grad_accum = sh->accum;
    r.lora.rank = sh->lora_rank;
    r.expandable_segments = sh->expandable;
    r.micro_batch = batch;
    return r;
}

/* Every card asks about every micro-batch of every shape, the memo first (so
 * that later cards find what earlier ones left), then the long way. */
START_TEST(test_probes_equal_estimates) {
    const int64_t batches[] = {1, 2, 3, 5, 8, 13, 21};
    est_plan_memo *memo = NULL;
    est_estimate e;
    est_estimate_init(&e);
    size_t pressure_fits = 0, pressure_oom = 0, roomy_fits = 0, hopeless = 0, stopped = 0;
    const int64_t largest = est_gpu_find(&gpus, "h200-141gb")->memory_bytes;
    for (size_t i = 0; i < NSHAPES; i++) {
        memo = memo_for(memo, i);
        for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++)
            for (size_t c = 0; c < sizeof cards / sizeof cards[0]; c++) {
                /* half the shapes ask the cards largest first */
                const size_t card = i % 2 ? sizeof cards / sizeof cards[0] - 1 - c : c;
                est_run r = run_of(&shapes[i].sh, cards[card], batches[b]);
                est_probe_answer a;
                ck_assert_int_eq(est_plan_memo_probe(memo, &r, &a), 0);
                ck_assert_int_eq(est_estimate_run(&r, &e, NULL, 0), 0);
                const char *what = shapes[i].sh.model;
                ck_assert_msg(a.rc == 0 && a.fits == e.fits, "%s shape %zu batch %lld on %s: fits %d, want %d",
                              what, i, (long long)batches[b], cards[card], a.fits, e.fits);
                const int64_t used = est_plan_memo_device_used(memo, &r);
                /* a probe no card can hold, where the memo knows the largest card:
                 * its build stopped once its peak passed that card (plan_memo.h) */
                const bool stop = shapes[i].plan % 2 &&
                                  e.peak_allocated_bytes + e.breakdown[EST_CAT_CONTEXT] > largest;
                stopped += stop;
                ck_assert_msg(stop ? used > largest && used <= e.device_used_bytes : used == e.device_used_bytes,
                              "%s shape %zu batch %lld on %s: used %lld, want %lld", what, i,
                              (long long)batches[b], cards[card], (long long)used, (long long)e.device_used_bytes);
                if (!stop) {
                    ck_assert_int_eq(a.cpu_bytes, e.cpu_bytes);
                    ck_assert_int_eq(a.cpu_load_bytes, e.cpu_load_bytes);
                }
                ck_assert_int_eq(a.capacity_bytes, e.capacity_bytes);
                const bool hope = e.peak_allocated_bytes + e.breakdown[EST_CAT_CONTEXT] <= e.capacity_bytes;
                hopeless += !hope;
                pressure_fits += e.allocator_pressure && e.fits;
                pressure_oom += e.allocator_pressure && !e.fits;
                roomy_fits += !e.allocator_pressure && e.fits;
            }
        size_t probes, builds, replays;
        est_plan_memo_counts(memo, &probes, &builds, &replays);
        /* a step is built once per probe, and again only for a later card's replay */
        ck_assert_uint_le(builds, 2 * probes);
    }
    /* the paths the memo takes were all taken */
    ck_assert_uint_gt(pressure_fits, 0);
    ck_assert_uint_gt(pressure_oom, 0);
    ck_assert_uint_gt(roomy_fits, 0);
    ck_assert_uint_gt(hopeless, 0);
    ck_assert_uint_gt(stopped, 0);
    est_estimate_free(&e);
    est_plan_memo_free(memo);
}
END_TEST

/* A probe whose estimate fails answers -1 and keeps the last answer's figures,
 * as est_estimate_run leaves an estimate it could not make. */
START_TEST(test_failed_probe_keeps_last) {
    est_plan_memo *memo = est_plan_memo_new();
    est_run r = run_of(&shapes[0].sh, "h100-80gb", 2);
    est_probe_answer a, b;
    ck_assert_int_eq(est_plan_memo_probe(memo, &r, &a), 0);
    ck_assert(a.rc == 0 && a.fits);
    r.micro_batch = EST_MAX_BATCH + 1; /* refused by est_run_validate */
    ck_assert_int_eq(est_plan_memo_probe(memo, &r, &b), 0);
    ck_assert_int_eq(b.rc, -1);
    ck_assert_int_eq(b.device_used_bytes, a.device_used_bytes);
    ck_assert_int_eq(est_plan_memo_device_used(memo, &r), a.device_used_bytes);
    est_plan_memo_free(memo);
}
END_TEST

/* Step times: the memo's against est_time_model's, for cards and networks
 * that share a step. */
START_TEST(test_times_equal_time_model) {
    est_plan_memo *memo = NULL;
    const int64_t batches[] = {1, 4};
    const double nets[] = {0, 12.5, 50};
    for (size_t i = 0; i < NSHAPES; i++) {
        memo = memo_for(memo, i);
        for (size_t b = 0; b < 2; b++)
            for (size_t c = 0; c < sizeof cards / sizeof cards[0]; c++) {
                est_run r = run_of(&shapes[i].sh, cards[c], batches[b]);
                r.inter_node_gb_per_s = nets[c % 3];
                est_constants k, own;
                ck_assert_int_eq(est_plan_memo_constants(&r, &k), 0);
                const est_constants *kt = est_time_constants(&r, &k, &own);
                est_time_detail got, want;
                est_plan_memo_time(memo, &r, kt, &got);
                est_time_model(&r, kt, &want);
                ck_assert_msg(got.step_s == want.step_s && got.tokens_per_s == want.tokens_per_s &&
                                  got.mfu == want.mfu && got.comm_exposed_s == want.comm_exposed_s &&
                                  got.modelled == want.modelled,
                              "shape %zu batch %lld on %s: %.17g s, want %.17g s", i,
                              (long long)batches[b], cards[c], got.step_s, want.step_s);
            }
    }
    est_plan_memo_free(memo);
}
END_TEST

/* The allocated peak a step knows once built is the memory ledger's peak. */
START_TEST(test_step_peak_is_ledger_peak) {
    est_estimate e;
    est_estimate_init(&e);
    for (size_t i = 0; i < NSHAPES; i++)
        for (int64_t b = 1; b <= 4; b += 3) {
            est_run r = run_of(&shapes[i].sh, "h100-80gb", b);
            ck_assert_int_eq(est_estimate_run(&r, &e, NULL, 0), 0);
            ck_assert_int_eq(e.step.peak_allocated_bytes, e.peak_allocated_bytes);
            ck_assert_int_gt(e.step.peak_allocated_bytes, 0);
        }
    est_estimate_free(&e);
}
END_TEST

/* A plan for its table alone (table_only: searches stop once the candidates
 * are placed) prints the same table, with the same plans in the same order,
 * as the whole search. */
static char *printed(const est_plan_request *q, const est_instance_catalog *inst, const est_plan_result *r) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_ptr_nonnull(f);
    est_plan_print(f, q, inst, r, 1000);
    fclose(f);
    return buf;
}

START_TEST(test_table_only_same_table) {
    char err[256];
    est_instance_catalog inst;
    ck_assert_msg(est_instances_load(NULL, &gpus, &inst, err, sizeof err) == 0, "%s", err);
    const struct {
        const char *model;
        int64_t seq, global_batch;
    } asks[] = {{"llama3-8b", 2048, 64}, {"qwen1.5-0.5b", 1024, 96}, {"llama3-8b", 4096, 512}};
    for (size_t i = 0; i < sizeof asks / sizeof asks[0]; i++) {
        est_plan_request q;
        memset(&q, 0, sizeof q);
        ft_model m;
        ck_assert_msg(ft_model_load(asks[i].model, &m, err, sizeof err) == 0, "%s", err);
        est_run_defaults(&q.base, &m, &inst.items[0].gpu);
        q.base.seq_len = asks[i].seq;
        q.tokens = 1e9;
        q.epochs = 1;
        q.global_batch = asks[i].global_batch;
        est_plan_result whole, table;
        ck_assert_msg(est_plan_search(&q, &inst, NULL, &whole, err, sizeof err) == 0, "%s", err);
        q.table_only = true;
        ck_assert_msg(est_plan_search(&q, &inst, NULL, &table, err, sizeof err) == 0, "%s", err);
        ck_assert_uint_eq(whole.count, table.count);
        ck_assert_uint_lt(table.estimates, whole.estimates); /* it did stop early */
        for (size_t k = 0; k < whole.count; k++) {
            est_plan a = whole.plans[k], b = table.plans[k];
            ck_assert(b.device_used_bytes == -1 || b.device_used_bytes == a.device_used_bytes);
            ck_assert_int_gt(a.device_used_bytes, 0);
            a.device_used_bytes = b.device_used_bytes = 0;
            ck_assert_msg(!memcmp(&a, &b, sizeof a), "%s plan %zu differs", asks[i].model, k);
        }
        char *pa = printed(&q, &inst, &whole), *pb = printed(&q, &inst, &table);
        ck_assert_str_eq(pa, pb);
        free(pa);
        free(pb);
        est_plan_free(&whole);
        est_plan_free(&table);
    }
    est_instances_free(&inst);
}
END_TEST

/* A fit that is not monotone in the micro-batch (the caching allocator's
 * blocks move with it): mistral-small-24b on 80 GB H100s, 2 nodes x 8,
 * DeepSpeed ZeRO-2, full checkpointing, seq 2048, accumulation 2. Found by
 * estimating batches 1/2/3 (1 and 3 do not fit, 2 does) over models, cards,
 * stages and lengths (earlier cases: llama3-8b on 40 GB A100s with ZeRO-1
 * at seq 2048, which fits at no batch since the context is built per GPU,
 * estimator/catalog/device_mem.h; this model at seq 3072, which fits at no
 * batch with accumulation since ZeRO-2 keeps the first micro-batch's
 * grads_in_partition beside the boundary's, seam_deepspeed_zero12.c); the
 * test first checks
 * that this still holds, then asks the plan for that instance and strategy
 * alone, global batch 64 (4 per GPU on 2 nodes: 4 alone, 2 x 2 or 1 x 4).
 * Micro-batch 1 with accumulation is the floor and does not fit, so neither
 * search offers an accumulated plan there (the table-only shortcut used to:
 * 2 x 2 fitted, so it took 1 x 4 to fit as well). Both searches must give the
 * same plans, and every plan's micro-batch must fit by its own estimate
 * (plan.c candidate_fits: what a plan's fit means). */
static bool fits_alone(est_run r, int64_t b, int64_t ga) {
    r.micro_batch = b;
    r.grad_accum = ga;
    est_estimate e;
    est_estimate_init(&e);
    ck_assert_int_eq(est_estimate_run(&r, &e, NULL, 0), 0);
    const bool fits = e.device_fits;
    est_estimate_free(&e);
    return fits;
}

START_TEST(test_table_only_non_monotone_fit) {
    char err[256];
    est_instance_catalog inst;
    ck_assert_msg(est_instances_load(NULL, &gpus, &inst, err, sizeof err) == 0, "%s", err);
    size_t k = 0;
    while (k < inst.count && !(!strcmp(inst.items[k].gpu.name, "h100-80gb") && inst.items[k].gpus == 8 &&
                               inst.items[k].inter_node_gb_per_s > 0))
        k++;
    ck_assert_uint_lt(k, inst.count);
    inst.items[0] = inst.items[k]; /* the only instance asked (the rest are freed with the catalog) */
    const size_t count = inst.count;
    inst.count = 1;
    est_plan_request q;
    memset(&q, 0, sizeof q);
    ft_model m;
    ck_assert_msg(ft_model_load("mistral-small-24b", &m, err, sizeof err) == 0, "%s", err);
    est_run_defaults(&q.base, &m, &inst.items[0].gpu);
    q.base.framework = EST_FW_DEEPSPEED;
    q.base.zero_stage = 2;
    q.base.checkpointing = EST_CKPT_FULL;
    q.base.seq_len = 2048;
    q.strategy_fixed = true;
    q.tokens = 1e8;
    q.epochs = 1;
    q.global_batch = 64;
    est_run r = q.base;
    r.gpu = inst.items[0].gpu;
    r.gpus_per_node = 8;
    r.nodes = 2;
    r.host_ram_bytes = 0;
    r.host_ram_per_gpu_memory = 0;
    ck_assert(!fits_alone(r, 1, 2) && fits_alone(r, 2, 2) && !fits_alone(r, 3, 2));
    est_plan_result whole, table;
    ck_assert_msg(est_plan_search(&q, &inst, NULL, &whole, err, sizeof err) == 0, "%s", err);
    q.table_only = true;
    ck_assert_msg(est_plan_search(&q, &inst, NULL, &table, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(whole.count, table.count);
    for (size_t i = 0; i < whole.count; i++) {
        est_plan a = whole.plans[i], b = table.plans[i];
        a.device_used_bytes = b.device_used_bytes = 0;
        ck_assert_msg(!memcmp(&a, &b, sizeof a), "plan %zu differs", i);
        est_run pr;
        est_strategy_apply(&a.strategy, &q.base, &pr);
        pr.gpu = inst.items[0].gpu;
        pr.gpus_per_node = 8;
        pr.nodes = a.nodes;
        pr.host_ram_bytes = 0;
        pr.host_ram_per_gpu_memory = 0;
        ck_assert_msg(fits_alone(pr, a.micro_batch, a.grad_accum), "plan %zu: micro-batch %lld x %lld does not fit",
                      i, (long long)a.micro_batch, (long long)a.grad_accum);
        ck_assert(!(a.nodes == 2 && a.grad_accum > 1)); /* the floor, 1 x 4, does not fit */
    }
    est_plan_free(&whole);
    est_plan_free(&table);
    inst.count = count;
    est_instances_free(&inst);
}
END_TEST

/* The memo names the ranks by the world alone (a memory probe of FSDP by its
 * ranks per node too): every framework's step must see only the world. Steps
 * of one world split into nodes in different ways, compared event by event,
 * unit by unit and work event by work event. */
static void same_events(const est_step *a, const est_step *b, const char *what) {
    ck_assert_msg(a->count == b->count && a->work_count == b->work_count && a->unit_count == b->unit_count &&
                      a->tensor_count == b->tensor_count && a->cpu_bytes == b->cpu_bytes,
                  "%s: the steps differ in size", what);
    for (size_t i = 0; i < a->count; i++) {
        const est_event *x = &a->events[i], *y = &b->events[i];
        bool same = x->kind == y->kind;
        if (same && (x->kind == EST_EV_ALLOC || x->kind == EST_EV_FREE))
            same = x->u.mem.category == y->u.mem.category && x->u.mem.bytes == y->u.mem.bytes &&
                   x->u.mem.id == y->u.mem.id && x->u.mem.stream == y->u.mem.stream &&
                   x->u.mem.pending == y->u.mem.pending;
        if (same && x->kind == EST_EV_MOMENT)
            same = x->u.moment.phase == y->u.moment.phase && x->u.moment.layer == y->u.moment.layer &&
                   x->u.moment.span == y->u.moment.span && !strcmp(x->u.moment.label, y->u.moment.label);
        ck_assert_msg(same, "%s: event %zu differs", what, i);
    }
    /* and its work: the units and what they price */
    for (size_t i = 0; i < a->unit_count; i++)
        ck_assert_msg(a->units[i].unit == b->units[i].unit && a->units[i].layer == b->units[i].layer &&
                          a->units[i].body == b->units[i].body && a->units[i].body_len == b->units[i].body_len &&
                          a->units[i].moment == b->units[i].moment,
                      "%s: unit %zu differs", what, i);
    for (size_t i = 0; i < a->work_count; i++)
        ck_assert_msg(!memcmp(&a->work[i], &b->work[i], sizeof a->work[i]), "%s: work event %zu differs", what, i);
}

START_TEST(test_steps_see_only_the_world) {
    const struct {
        est_framework fw;
        int zero;
        est_offload offload;
        est_checkpointing ckpt;
        int64_t lora_rank;
    } runs[] = {
        {EST_FW_HF, 0, EST_OFFLOAD_NONE, EST_CKPT_NONE, 0},       {EST_FW_HF, 0, EST_OFFLOAD_NONE, EST_CKPT_FULL, 16},
        {EST_FW_DEEPSPEED, 1, EST_OFFLOAD_NONE, EST_CKPT_NONE, 0}, {EST_FW_DEEPSPEED, 2, EST_OFFLOAD_OPTIMIZER, EST_CKPT_FULL, 0},
        {EST_FW_DEEPSPEED, 3, EST_OFFLOAD_NONE, EST_CKPT_NONE, 0}, {EST_FW_DEEPSPEED, 3, EST_OFFLOAD_OPTIMIZER_PARAMS, EST_CKPT_FULL, 0},
        {EST_FW_FSDP, 3, EST_OFFLOAD_NONE, EST_CKPT_NONE, 0},      {EST_FW_FSDP, 2, EST_OFFLOAD_NONE, EST_CKPT_FULL, 0},
        {EST_FW_FSDP, 3, EST_OFFLOAD_NONE, EST_CKPT_NONE, 8},      {EST_FW_FTRAIN, 3, EST_OFFLOAD_NONE, EST_CKPT_NONE, 0},
    };
    const int64_t splits[][2] = {{8, 2}, {4, 4}, {2, 8}, {16, 1}};
    est_estimate a, b;
    est_estimate_init(&a);
    est_estimate_init(&b);
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        shape sh = {"qwen1.5-0.5b", runs[i].fw, runs[i].zero, runs[i].offload, runs[i].ckpt, 8, 2, 1024, 2,
                    runs[i].lora_rank, false};
        est_run r0 = run_of(&sh, "h100-80gb", 2);
        ck_assert_int_eq(est_estimate_step(&r0, &a, NULL, 0), 0);
        for (size_t k = 1; k < sizeof splits / sizeof splits[0]; k++) {
            est_run r = r0;
            r.gpus_per_node = splits[k][0];
            r.nodes = splits[k][1];
            char what[64];
            snprintf(what, sizeof what, "runs[%zu] as %lld x %lld", i, (long long)r.gpus_per_node, (long long)r.nodes);
            ck_assert_int_eq(est_estimate_step(&r, &b, NULL, 0), 0);
            same_events(&a.step, &b.step, what);
            /* FSDP loads one copy of the model per node: the memo keeps its ranks per node */
            if (runs[i].fw != EST_FW_FSDP) ck_assert_int_eq(a.step.cpu_load_bytes, b.step.cpu_load_bytes);
        }
    }
    est_estimate_free(&a);
    est_estimate_free(&b);
}
END_TEST

Suite *suite_plan_memo(void);
Suite *suite_plan_memo(void) {
    Suite *s = suite_create("plan_memo");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_probes_equal_estimates);
    tcase_add_test(tc, test_failed_probe_keeps_last);
    tcase_add_test(tc, test_times_equal_time_model);
    tcase_add_test(tc, test_step_peak_is_ledger_peak);
    tcase_add_test(tc, test_table_only_same_table);
    tcase_add_test(tc, test_table_only_non_monotone_fit);
    tcase_add_test(tc, test_steps_see_only_the_world);
    suite_add_tcase(s, tc);
    return s;
}
