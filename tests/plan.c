/* ftest plan: the instance catalog reader (shipped catalog, malformed ones),
 * and the plan's properties: hours and cost follow from steps, step time and
 * price; the global batch is honoured; plans are ranked by cost; the
 * cheapest and the fastest are marked; the Pareto front is exactly the set
 * of plans no other plan dominates; limits drop what exceeds them. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "plan.h"
#include "progress.h"
#include "test_util.h"

static est_gpu_catalog gpus;
static est_instance_catalog inst;

static void setup(void) {
    char err[256];
    ck_assert_msg(est_gpu_catalog_load(NULL, &gpus, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(est_instances_load(NULL, &gpus, &inst, err, sizeof err) == 0, "%s", err);
}

static void teardown(void) {
    est_instances_free(&inst);
    est_gpu_catalog_free(&gpus);
}

static est_plan_request request(const char *model, double tokens) {
    est_plan_request q;
    memset(&q, 0, sizeof q);
    ft_model m;
    char err[256];
    ck_assert_msg(ft_model_load(model, &m, err, sizeof err) == 0, "%s", err);
    est_run_defaults(&q.base, &m, est_gpu_find(&gpus, "h100-80gb"));
    q.tokens = tokens;
    q.epochs = 1;
    return q;
}

START_TEST(test_shipped_catalog) {
    ck_assert_uint_ge(inst.count, 7);
    /* The shapes issue 3 names, resolved against gpus.json. */
    const struct {
        const char *gpu;
        int64_t n;
    } need[] = {{"a10-24gb", 1}, {"a100-40gb", 1}, {"a100-40gb", 8}, {"a100-80gb", 8},
                {"h100-80gb", 1}, {"h100-80gb", 8}, {"h200-141gb", 8}};
    for (size_t k = 0; k < sizeof need / sizeof need[0]; k++) {
        bool found = false;
        for (size_t i = 0; i < inst.count; i++)
            found |= !strcmp(inst.items[i].gpu.name, need[k].gpu) && inst.items[i].gpus == need[k].n;
        ck_assert_msg(found, "no %lld x %s", (long long)need[k].n, need[k].gpu);
    }
}
END_TEST

START_TEST(test_malformed_catalogs) {
    const char *ok = "{\"name\":\"x\",\"provider\":\"p\",\"gpu\":\"h100\",\"gpus\":8,\"interconnect\":\"nvlink\","
                     "\"inter_node_gb_per_s\":50,\"host_ram_bytes\":1099511627776,\"vcpus\":96,"
                     "\"usd_per_hour\":40,\"price_source\":\"https://example\",\"price_date\":\"2026-01\"}";
    char text[2048], err[256];
    est_instance_catalog c;
    snprintf(text, sizeof text, "{\"instances\":[%s]}", ok);
    ck_assert_msg(est_instances_parse(text, strlen(text), "t", &gpus, &c, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(c.count, 1);
    ck_assert(c.items[0].nvlink);
    ck_assert_str_eq(c.items[0].gpu.name, "h100-80gb"); /* aliases resolve */
    est_instances_free(&c);
    const struct {
        const char *from, *to, *expect;
    } bad[] = {
        {"\"gpu\":\"h100\"", "\"gpu\":\"h900\"", "unknown GPU"},
        {"\"gpus\":8", "\"gpus\":0", "gpus"},
        {"\"usd_per_hour\":40", "\"usd_per_hour\":-1", "usd_per_hour"},
        {"\"usd_per_hour\":40,", "", "usd_per_hour"},
        {"\"interconnect\":\"nvlink\"", "\"interconnect\":\"ib\"", "interconnect"},
        {"\"gpu\":\"h100\"", "\"gpu\":\"a10\"", "NVLink"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char one[1024];
        const char *at = strstr(ok, bad[i].from);
        ck_assert_ptr_nonnull(at);
        snprintf(one, sizeof one, "%.*s%s%s", (int)(at - ok), ok, bad[i].to, at + strlen(bad[i].from));
        snprintf(text, sizeof text, "{\"instances\":[%s]}", one);
        err[0] = '\0';
        ck_assert_int_eq(est_instances_parse(text, strlen(text), "t", &gpus, &c, err, sizeof err), -1);
        ck_assert_msg(strstr(err, bad[i].expect) && strstr(err, "\"x\""), "case %zu: %s", i, err);
    }
    const char *broken[] = {"{\"instances\":[", "{\"instances\":[]}", "[]", "{\"instances\":[1]}"};
    for (size_t i = 0; i < sizeof broken / sizeof broken[0]; i++)
        ck_assert_int_eq(est_instances_parse(broken[i], strlen(broken[i]), "t", &gpus, &c, err, sizeof err), -1);
    snprintf(text, sizeof text, "{\"instances\":[%s,%s]}", ok, ok);
    ck_assert_int_eq(est_instances_parse(text, strlen(text), "t", &gpus, &c, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "twice"), "%s", err);
}
END_TEST

static bool dominates(const est_plan *a, const est_plan *b) {
    return a->cost_usd <= b->cost_usd && a->hours <= b->hours &&
           (a->cost_usd < b->cost_usd || a->hours < b->hours);
}

START_TEST(test_plan_properties) {
    est_plan_request q = request("llama3.2-3b", 2e9);
    q.base.seq_len = 4096;
    est_plan_result r;
    char err[256];
    ck_assert_msg(est_plan_search(&q, &inst, NULL, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_gt(r.count, 20);
    size_t cheapest = 0, fastest = 0, front = 0;
    for (size_t i = 0; i < r.count; i++) {
        const est_plan *p = &r.plans[i];
        const est_instance *in = &inst.items[p->instance];
        /* Hours and cost from their parts. */
        ck_assert_int_eq(p->gpus, in->gpus * p->nodes);
        ck_assert_int_eq(p->global_batch, p->micro_batch * p->grad_accum * p->gpus);
        ck_assert(p->grad_accum == 1); /* no --global-batch: the largest micro-batch, no accumulation */
        double per_step = (double)p->global_batch * 4096;
        ck_assert((double)p->steps * per_step >= 2e9 && (double)(p->steps - 1) * per_step < 2e9);
        ck_assert_close(p->hours, (double)p->steps * p->step_time_s / 3600, 0, 1e-12);
        ck_assert_close(p->cost_usd, p->hours * in->usd_per_hour * (double)p->nodes, 0, 1e-12);
        ck_assert(p->device_used_bytes <= in->gpu.memory_bytes);
        ck_assert(p->host_bytes_per_node <= in->host_ram_bytes);
        if (p->nodes > 1) ck_assert(in->inter_node_gb_per_s > 0);
        /* Ranked by cost. */
        if (i) ck_assert(r.plans[i - 1].cost_usd <= p->cost_usd);
        cheapest += p->cheapest;
        fastest += p->fastest;
        front += p->pareto;
        /* Pareto: on the front exactly when no plan dominates it. */
        bool dominated = false;
        for (size_t j = 0; j < r.count && !dominated; j++) dominated = dominates(&r.plans[j], p);
        /* A plan tied with its predecessor may be left off the front. */
        bool tie = i > 0 && r.plans[i - 1].cost_usd == p->cost_usd && r.plans[i - 1].hours == p->hours;
        ck_assert_msg(p->pareto == !dominated || (!p->pareto && tie),
                      "plan %zu: pareto %d, dominated %d", i, p->pareto, dominated);
    }
    ck_assert_uint_eq(cheapest, 1);
    ck_assert_uint_eq(fastest, 1);
    ck_assert(r.plans[0].cheapest && r.plans[0].pareto);
    for (size_t i = 0; i < r.count; i++)
        if (r.plans[i].fastest)
            for (size_t j = 0; j < r.count; j++) ck_assert(r.plans[j].hours >= r.plans[i].hours);
    ck_assert_uint_ge(front, 2);
    est_plan_free(&r);
}
END_TEST

START_TEST(test_global_batch_and_limits) {
    est_plan_request q = request("llama3.2-1b", 1e9);
    q.global_batch = 256;
    est_plan_result r;
    char err[256];
    ck_assert_msg(est_plan_search(&q, &inst, NULL, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_gt(r.count, 0);
    double cheapest = r.plans[0].cost_usd, slowest = 0;
    for (size_t i = 0; i < r.count; i++) {
        const est_plan *p = &r.plans[i];
        ck_assert_int_eq(p->micro_batch * p->grad_accum * p->gpus, 256);
        if (p->hours > slowest) slowest = p->hours;
    }
    est_plan_free(&r);
    /* A time limit between the fastest and the slowest drops the slow plans only. */
    q.max_hours = slowest / 2;
    ck_assert(est_plan_search(&q, &inst, NULL, &r, err, sizeof err) == 0);
    ck_assert_uint_gt(r.over_limits, 0);
    for (size_t i = 0; i < r.count; i++) ck_assert(r.plans[i].hours <= q.max_hours);
    est_plan_free(&r);
    /* A budget below the cheapest plan leaves nothing. */
    q.max_hours = 0;
    q.max_cost = cheapest * 0.5;
    ck_assert(est_plan_search(&q, &inst, NULL, &r, err, sizeof err) == 0);
    ck_assert_uint_eq(r.count, 0);
    ck_assert_uint_gt(r.over_limits, 0);
    est_plan_free(&r);
    /* No tokens: an error. */
    q.tokens = 0;
    ck_assert_int_eq(est_plan_search(&q, &inst, NULL, &r, err, sizeof err), -1);
}
END_TEST

/* A 70B model: single small GPUs cannot hold it; multi-node plans appear. */
START_TEST(test_large_model_json) {
    est_plan_request q = request("llama3-70b", 1e9);
    est_plan_result r;
    char err[256];
    ck_assert(est_plan_search(&q, &inst, NULL, &r, err, sizeof err) == 0);
    bool multi = false;
    for (size_t i = 0; i < r.count; i++) {
        ck_assert(strcmp(inst.items[r.plans[i].instance].gpu.name, "rtx4090-24gb") ||
                  r.plans[i].strategy.offload != EST_OFFLOAD_NONE);
        multi |= r.plans[i].nodes > 1;
    }
    ck_assert(multi);
    char *s = est_plan_json(&q, &inst, &r);
    cJSON *root = cJSON_Parse(s);
    ck_assert_ptr_nonnull(root);
    ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(root, "plans")), (int)r.count);
    cJSON_Delete(root);
    free(s);
    est_plan_free(&r);
}
END_TEST

/* The progress line stays silent for a search under a second (and always
 * when disabled). */
START_TEST(test_progress_quiet_when_fast) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    est_progress p;
    est_progress_begin_on(&p, "test", f);
    for (size_t i = 0; i < 100; i++) est_progress_update(&p, i, 100);
    est_progress_end(&p);
    est_progress_begin_on(&p, "test", NULL);
    est_progress_update(&p, 1, 2);
    est_progress_end(&p);
    fclose(f);
    ck_assert_uint_eq(len, 0);
    free(buf);
}
END_TEST

Suite *suite_plan(void);
Suite *suite_plan(void) {
    Suite *s = suite_create("plan");
    TCase *tc = tcase_create("plan");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300); /* a whole plan is thousands of estimates (docs/performance.md) */
    tcase_add_test(tc, test_shipped_catalog);
    tcase_add_test(tc, test_malformed_catalogs);
    tcase_add_test(tc, test_plan_properties);
    tcase_add_test(tc, test_global_batch_and_limits);
    tcase_add_test(tc, test_large_model_json);
    tcase_add_test(tc, test_progress_quiet_when_fast);
    suite_add_tcase(s, tc);
    return s;
}
