/* The verdict: host RAM per node is part of "fits", a fit within the margin is
 * tight, and advice lists changes that fit, each checked here by estimating
 * (or running ftest on) the changed run independently. Expected host figures
 * come from the published parameter totals and the per-rank buffers written
 * out below, not from the program's output. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cJSON.h>

#include "advice.h"
#include "estimate.h"
#include "instances.h"
#include "inverse.h"
#include "plan.h"
#include "test_util.h"

#define GIB 1073741824.0
/* Published totals: meta-llama/Meta-Llama-3-8B and -70B safetensors
 * metadata ("total" of model.safetensors.index.json / 2 bytes per bf16). */
#define LLAMA3_8B_PARAMS 8030261248.0
#define LLAMA3_70B_PARAMS 70553706496.0
#define LLAMA32_1B_PARAMS 1235814400.0 /* meta-llama/Llama-3.2-1B, tied embedding */

static est_gpu_catalog cat;

static void setup(void) {
    char err[256];
    ck_assert_msg(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0, "%s", err);
}

static void teardown(void) { est_gpu_catalog_free(&cat); }

static est_run make_run(const char *model, const char *gpu, int64_t gpus) {
    ft_model m;
    char err[256];
    ck_assert_msg(ft_model_load(model, &m, err, sizeof err) == 0, "%s", err);
    const est_gpu *g = est_gpu_find(&cat, gpu);
    ck_assert_ptr_nonnull(g);
    est_run r;
    est_run_defaults(&r, &m, g);
    r.gpus_per_node = gpus;
    return r;
}

static void estimate(const est_run *r, est_estimate *e) {
    char err[256];
    ck_assert_msg(est_estimate_run(r, e, err, sizeof err) == 0, "%s", err);
}

/* HF DDP in bf16-mixed: from_pretrained materializes the fp32 model in every
 * rank's process before .to(device), so a node of 8 ranks holds 8 fp32
 * copies while loading: 8 x 4 bytes x 8.03e9 = 257 GB. */
START_TEST(test_host_load_is_ranks_times_fp32_copy) {
    est_run r = make_run("llama3-8b", "h100-80gb", 8);
    r.framework = EST_FW_HF;
    r.checkpointing = EST_CKPT_FULL;
    est_estimate e;
    est_estimate_init(&e);
    estimate(&r, &e);
    ck_assert_close(e.host_load_per_node_bytes, 8 * 4 * LLAMA3_8B_PARAMS, 0, 1e-9);
    ck_assert_close(e.host_peak_per_node_bytes, 8 * 4 * LLAMA3_8B_PARAMS, 0, 1e-9);
    /* Two nodes of 4: each node loads 4 copies. */
    r.gpus_per_node = 4;
    r.nodes = 2;
    estimate(&r, &e);
    ck_assert_close(e.host_load_per_node_bytes, 4 * 4 * LLAMA3_8B_PARAMS, 0, 1e-9);
    /* 4 x 4 B x 8.03e9 = 128.48e9 B = 119.66 GiB: 120 GiB holds it, 119 GiB does not. */
    r.host_ram_bytes = (int64_t)(120 * GIB);
    estimate(&r, &e);
    ck_assert(e.host_fits);
    r.host_ram_bytes = (int64_t)(119 * GIB);
    estimate(&r, &e);
    ck_assert(!e.host_fits);
    ck_assert(!e.fits);
    ck_assert_int_eq(est_verdict_of(&e), e.device_fits ? EST_VERDICT_NO_FIT_HOST : EST_VERDICT_NO_FIT_GPU);
    est_estimate_free(&e);
}
END_TEST

/* ZeRO-3 with optimizer and parameter offload on 2 ranks: each rank keeps on
 * the host at least its fp32 master, fp32 gradient and Adam m and v
 * partitions, 16 bytes x P/2 (stage3.py, DeepSpeed 0.14.2:
 * fp32_partitioned_groups_flat, the pinned per-sub-group gradient buffer,
 * cpu_adam's exp_avg/exp_avg_sq), so the node needs at least 16 x 70.55e9 =
 * 1.13e12 bytes, far above 64 GiB, while the GPU holds the rest. */
START_TEST(test_offload_70b_host_short) {
    est_run r = make_run("llama3-70b", "rtx4090-24gb", 2);
    r.zero_stage = 3;
    r.offload = EST_OFFLOAD_OPTIMIZER_PARAMS;
    r.checkpointing = EST_CKPT_FULL;
    r.host_ram_bytes = (int64_t)(64 * GIB);
    est_estimate e;
    est_estimate_init(&e);
    estimate(&r, &e);
    ck_assert_msg(e.host_train_per_node_bytes >= (int64_t)(16 * LLAMA3_70B_PARAMS),
                  "host per node %lld", (long long)e.host_train_per_node_bytes);
    ck_assert(e.device_fits);
    ck_assert(!e.host_fits);
    ck_assert(!e.fits);
    ck_assert_int_eq(est_verdict_of(&e), EST_VERDICT_NO_FIT_HOST);
    ck_assert_str_eq(est_verdict_name(est_verdict_of(&e)), "host_ram");
    /* Unchecked host (records): the GPU decides alone. */
    r.host_ram_bytes = 0;
    estimate(&r, &e);
    ck_assert_int_eq(e.host_ram_bytes, 0);
    ck_assert(e.fits);
    est_estimate_free(&e);
}
END_TEST

/* The default host RAM is a multiple of the node's GPU memory. */
START_TEST(test_host_ram_ratio) {
    est_run r = make_run("tiny-llama", "a100-40gb", 4);
    r.host_ram_per_gpu_memory = 2.5;
    ck_assert_close(est_host_ram_of(&r), 2.5 * 4 * (double)r.gpu.memory_bytes, 1, 0);
    r.host_ram_bytes = 1000; /* a fixed amount wins */
    ck_assert_int_eq(est_host_ram_of(&r), 1000);
    r.host_ram_bytes = 0;
    r.host_ram_per_gpu_memory = 0;
    ck_assert_int_eq(est_host_ram_of(&r), 0);
}
END_TEST

/* The median ratio over a catalog of instances with ratios 1, 4 and 2 (and
 * then a fourth of 8): 2, then (2 + 4) / 2 = 3. */
START_TEST(test_catalog_median_ratio) {
    const est_gpu *g = est_gpu_find(&cat, "a100-40gb");
    ck_assert_ptr_nonnull(g);
    const double ratio[] = {1, 4, 2, 8};
    const int gpus[] = {1, 8, 2, 4};
    for (int n = 3; n <= 4; n++) {
        char text[4096];
        size_t used = (size_t)snprintf(text, sizeof text, "{\"instances\": [");
        for (int i = 0; i < n; i++)
            used += (size_t)snprintf(
                text + used, sizeof text - used,
                "%s{\"name\": \"i%d\", \"provider\": \"p\", \"gpu\": \"a100-40gb\", \"gpus\": %d, "
                "\"interconnect\": \"pcie\", \"inter_node_gb_per_s\": 0, \"host_ram_bytes\": %lld, "
                "\"vcpus\": 8, \"usd_per_hour\": 1, \"price_source\": \"test\", \"price_date\": "
                "\"2026-01\"}",
                i ? ", " : "", i, gpus[i], (long long)(ratio[i] * gpus[i] * (double)g->memory_bytes));
        snprintf(text + used, sizeof text - used, "]}");
        est_instance_catalog ic;
        char err[256];
        ck_assert_msg(est_instances_parse(text, strlen(text), "test", &cat, &ic, err, sizeof err) == 0,
                      "%s", err);
        ck_assert_close(est_instances_host_ratio_median(&ic), n == 3 ? 2.0 : 3.0, 0, 1e-9);
        est_instances_free(&ic);
    }
}
END_TEST

/* What the device holds is what the caching allocator reserves plus what
 * lies outside it (estimator/catalog/device_mem.h), which the allocator never
 * sees: on a card with room to spare the two differ by exactly that. On an
 * H100: the stack's local memory, 1 KiB x 2048 threads x 132 SMs =
 * 276,824,064 B, the 1 MiB printf FIFO and the 8 MiB malloc heap, and the
 * framework profile's fitted module images. */
START_TEST(test_device_holds_reserved_and_context) {
    est_run r = make_run("llama3.2-1b", "h100-80gb", 1);
    est_estimate e;
    est_estimate_init(&e);
    estimate(&r, &e);
    ck_assert(!e.allocator_pressure);
    const int64_t outside = 276824064LL + 1048576 + 8388608 + (int64_t)e.k.value[EST_K_CUDA_IMAGES_BYTES];
    ck_assert(e.k.value[EST_K_CUDA_IMAGES_BYTES] > 0);
    ck_assert_int_eq(e.device_used_bytes - e.peak_reserved_bytes, outside);
    ck_assert_int_eq(e.breakdown[EST_CAT_CONTEXT], outside);
    est_estimate_free(&e);
}
END_TEST

/* A card with room for the allocated peak and the context and not one byte
 * more: the caching allocator cannot hold the step there (its blocks round up
 * to 512 bytes, small requests share 2 MiB segments, and it cannot fill every
 * segment to the byte), so its replay under that capacity runs out of memory
 * and the verdict is "does not fit", though the allocated figure alone fits. */
START_TEST(test_allocator_oom_under_pressure_does_not_fit) {
    est_run r = make_run("llama3.2-1b", "h100-80gb", 1);
    est_estimate e;
    est_estimate_init(&e);
    estimate(&r, &e);
    r.gpu.memory_bytes = e.peak_allocated_bytes + e.breakdown[EST_CAT_CONTEXT] + 1;
    estimate(&r, &e);
    ck_assert(e.allocator_pressure);
    ck_assert(!e.fits);
    ck_assert_int_eq(est_verdict_of(&e), EST_VERDICT_NO_FIT_GPU);
    est_estimate_free(&e);
}
END_TEST

/* Tight: room below margin x capacity. */
START_TEST(test_tight_margin) {
    est_run r = make_run("llama3.2-1b", "h100-80gb", 1);
    est_estimate e;
    est_estimate_init(&e);
    estimate(&r, &e);
    ck_assert(e.fits);
    double room = (double)(e.capacity_bytes - e.device_used_bytes) / (double)e.capacity_bytes;
    e.tight_margin_frac = room * 1.01;
    estimate(&r, &e);
    ck_assert(e.fits);
    ck_assert(e.tight);
    ck_assert_int_eq(est_verdict_of(&e), EST_VERDICT_TIGHT);
    e.tight_margin_frac = room * 0.99;
    estimate(&r, &e);
    ck_assert(!e.tight);
    ck_assert_int_eq(est_verdict_of(&e), EST_VERDICT_FITS);
    est_estimate_free(&e);
}
END_TEST

/* Every advised change fits when the changed run is estimated on its own,
 * and its figures are that estimate's. */
static void check_advice(const est_run *base, const est_advice *a) {
    for (size_t i = 0; i < a->count; i++) {
        const est_advice_item *it = &a->items[i];
        ck_assert(it->flags[0]);
        ck_assert(it->device_used_bytes <= base->gpu.memory_bytes);
        if (i > 0 && it->gpu_s_per_token > 0 && a->items[i - 1].gpu_s_per_token > 0)
            ck_assert(a->items[i - 1].gpu_s_per_token <= it->gpu_s_per_token); /* cheapest first */
    }
}

/* Llama-3-8B under ZeRO-1 on one 80 GB GPU needs 16 bytes per parameter of
 * model states alone (128 GB): it does not fit. Moving the 12 bytes of fp32
 * master and Adam state to the host leaves 2 + 2 bytes (32 GB) on the GPU, so
 * optimizer offload must be among the advice. */
START_TEST(test_advice_offload) {
    est_run r = make_run("llama3-8b", "h100-80gb", 1);
    r.zero_stage = 1;
    r.host_ram_per_gpu_memory = 0; /* the GPU decides */
    est_advice *a = calloc(1, sizeof *a);
    char err[256];
    ck_assert_int_eq(est_advise(&r, EST_TIGHT_MARGIN_DEFAULT, a, err, sizeof err), 0);
    ck_assert_uint_gt(a->count, 0);
    bool offload = false;
    for (size_t i = 0; i < a->count; i++)
        if (!strcmp(a->items[i].flags, "--offload optimizer")) {
            offload = true;
            /* Re-estimate that change independently. */
            est_run t = r;
            t.offload = EST_OFFLOAD_OPTIMIZER;
            est_estimate e;
            est_estimate_init(&e);
            estimate(&t, &e);
            ck_assert(e.fits);
            ck_assert_int_eq(e.peak_allocated_bytes, a->items[i].peak_allocated_bytes);
            /* bf16 weights (2 B/param) and, at the step, the host's fp32
             * partition copied back through the device (4 B/param at one
             * rank: stage_1_and_2.py step, fp32_partition.to(device),
             * DeepSpeed PR #5301), the activations being gone by then */
            ck_assert(e.peak_allocated_bytes < (int64_t)(7 * LLAMA3_8B_PARAMS));
            est_estimate_free(&e);
        }
    ck_assert_msg(offload, "optimizer offload is not in the advice");
    check_advice(&r, a);
    /* A run that fits gets no advice. */
    r.offload = EST_OFFLOAD_OPTIMIZER;
    ck_assert_int_eq(est_advise(&r, EST_TIGHT_MARGIN_DEFAULT, a, err, sizeof err), 0);
    ck_assert_uint_eq(a->count, 0);
    free(a);
}
END_TEST

/* --min-gpus with a fixed host RAM per node: at the answer both fit; one node
 * fewer, the host does not (with full offload the host figure is the one that
 * shrinks as nodes are added). */
START_TEST(test_min_gpus_counts_host) {
    est_run r = make_run("llama3-70b", "rtx4090-24gb", 2);
    r.zero_stage = 3;
    r.offload = EST_OFFLOAD_OPTIMIZER_PARAMS;
    r.checkpointing = EST_CKPT_FULL;
    r.host_ram_bytes = (int64_t)(64 * GIB);
    est_answer a;
    char err[256];
    ck_assert_int_eq(est_answer_question(&r, EST_Q_MIN_GPUS, 8, &a, err, sizeof err), 0);
    ck_assert_int_gt(a.value, 8);
    ck_assert(a.host_peak_per_node_bytes <= r.host_ram_bytes);
    /* One node fewer: short of host RAM, or within the tight margin of it
     * (the answer keeps the margin, issue 20 item 15). */
    ck_assert(a.next_host_short || a.next_tight);
    ck_assert(a.next_host_peak_per_node_bytes > (1 - r.tight_margin_frac) * (double)r.host_ram_bytes);
    ck_assert_int_eq(a.next_host_ram_bytes, r.host_ram_bytes); /* --host-ram: fixed per node */
    /* Per node at least 16 bytes x P / nodes (see above), so nodes >= 16 P / 64 GiB. */
    ck_assert_int_ge(a.nodes, (int64_t)(16 * LLAMA3_70B_PARAMS / (64 * GIB)));
    est_run fewer = r;
    fewer.gpus_per_node = a.gpus_per_node;
    fewer.nodes = a.nodes - 1;
    est_estimate e;
    est_estimate_init(&e);
    estimate(&fewer, &e);
    ck_assert(!e.fits || e.tight);
    ck_assert(!e.host_fits || e.tight);
    est_estimate_free(&e);
}
END_TEST


/* plan: two instances alike but for host RAM. HF DDP in bf16-mixed loads 8
 * fp32 copies of Llama-3.2-1B (8 x 4 B x 1.236e9 = 36.8 GiB) on an 8-GPU
 * node, so with DDP as the fixed strategy the 32 GiB instance is short of
 * host RAM and every plan runs on the 64 GiB one, with that figure per node. */
START_TEST(test_plan_host_ram) {
    char text[4096];
    size_t used = (size_t)snprintf(text, sizeof text, "{\"instances\": [");
    const int gib[] = {32, 64};
    for (int i = 0; i < 2; i++)
        used += (size_t)snprintf(
            text + used, sizeof text - used,
            "%s{\"name\": \"h%d\", \"provider\": \"p\", \"gpu\": \"h100-80gb\", \"gpus\": 8, "
            "\"interconnect\": \"nvlink\", \"inter_node_gb_per_s\": 0, \"host_ram_bytes\": %lld, "
            "\"vcpus\": 96, \"usd_per_hour\": 10, \"price_source\": \"test\", \"price_date\": "
            "\"2026-01\"}",
            i ? ", " : "", gib[i], (long long)gib[i] << 30);
    snprintf(text + used, sizeof text - used, "]}");
    est_instance_catalog ic;
    char err[256];
    ck_assert_msg(est_instances_parse(text, strlen(text), "test", &cat, &ic, err, sizeof err) == 0, "%s",
                  err);
    est_plan_request q;
    memset(&q, 0, sizeof q);
    q.base = make_run("llama3.2-1b", "h100-80gb", 8);
    q.base.framework = EST_FW_HF;
    q.base.checkpointing = EST_CKPT_FULL;
    q.base.host_ram_bytes = 1; /* plan uses each instance's own, not the run's */
    q.strategy_fixed = true;
    q.tokens = 1e9;
    q.epochs = 1;
    est_plan_result r;
    ck_assert_msg(est_plan_search(&q, &ic, NULL, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_gt(r.count, 0);
    ck_assert_uint_eq(r.host_short, 1);
    for (size_t i = 0; i < r.count; i++) {
        ck_assert_str_eq(ic.items[r.plans[i].instance].name, "h64");
        ck_assert_close(r.plans[i].host_bytes_per_node, 8 * 4 * LLAMA32_1B_PARAMS, 0, 1e-9);
    }
    est_plan_free(&r);
    est_instances_free(&ic);
}
END_TEST


#define RUN_70B "--model llama3-70b --gpus 2 --gpu rtx4090-24gb --zero 3 --offload optimizer+params " \
                "--checkpointing full"

START_TEST(test_cli_host_ram_verdict) {
    test_cmd_result *r = test_ftest(RUN_70B " --host-ram 64");
    ck_assert_int_eq(r->status, 1);
    ck_assert_ptr_nonnull(strstr(r->out, "verdict: DOES NOT FIT: host RAM"));
    ck_assert_str_eq(r->err, "");
    r = test_ftest(RUN_70B " --host-ram 64 --json");
    ck_assert_int_eq(r->status, 1);
    cJSON *j = cJSON_Parse(r->out);
    ck_assert_ptr_nonnull(j);
    const cJSON *v = cJSON_GetObjectItem(j, "verdict");
    ck_assert_str_eq(cJSON_GetObjectItem(v, "result")->valuestring, "does_not_fit");
    ck_assert_str_eq(cJSON_GetObjectItem(v, "reason")->valuestring, "host_ram");
    ck_assert(cJSON_IsArray(cJSON_GetObjectItem(v, "advice")));
    const cJSON *mem = cJSON_GetObjectItem(j, "memory");
    ck_assert_close(cJSON_GetObjectItem(mem, "host_ram_bytes")->valuedouble, 64 * GIB, 0, 0);
    ck_assert(cJSON_IsFalse(cJSON_GetObjectItem(mem, "host_fits")));
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(mem, "device_fits")));
    cJSON_Delete(j);
    /* With 2 TiB on the node (above 16 x 70.55e9 B = 1051 GiB plus the
     * parameter partitions) the same run fits. */
    r = test_ftest(RUN_70B " --host-ram 2048");
    ck_assert_int_eq(r->status, 0);
    ck_assert_ptr_nonnull(strstr(r->out, "verdict: fits"));
    /* --max-batch names the host as the reason nothing fits. */
    r = test_ftest(RUN_70B " --host-ram 64 --max-batch");
    ck_assert_int_eq(r->status, 1);
    ck_assert_ptr_nonnull(strstr(r->out, "of host RAM per node"));
    /* --min-gpus: one node fewer is short of host RAM, not of GPU memory. */
    r = test_ftest(RUN_70B " --host-ram 64 --min-gpus");
    ck_assert_int_eq(r->status, 0);
    ck_assert_ptr_nonnull(strstr(r->out, "one node or GPU fewer: "));
    ck_assert_ptr_nonnull(strstr(r->out, "of host RAM per node, the node has 64.00 GiB"));
}
END_TEST

/* Each advised change, given to ftest as flags, fits (exit 0). */
static const char *const ADVICE_BASES[] = {
    "--model llama3-70b --gpus 1 --gpu h100-80gb --zero 2",          /* GPU memory */
    RUN_70B " --host-ram 64",                                         /* host RAM */
    "--model llama3-8b --gpus 8 --gpu a100-40gb --zero 3 --batch 4",  /* activations */
};

START_TEST(test_cli_advice_applies) {
    const char *base = ADVICE_BASES[_i];
    test_cmd_result *r = test_ftest(base);
    ck_assert_int_eq(r->status, 1);
    ck_assert_ptr_nonnull(strstr(r->out, "what would fit"));
    char args[1024];
    snprintf(args, sizeof args, "%s --json", base);
    r = test_ftest(args);
    cJSON *j = cJSON_Parse(r->out);
    ck_assert_ptr_nonnull(j);
    const cJSON *adv = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "verdict"), "advice");
    ck_assert_int_gt(cJSON_GetArraySize(adv), 0);
    char flags[8][128];
    int n = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, adv) {
        if (n < 8) snprintf(flags[n++], sizeof flags[0], "%s", cJSON_GetObjectItem(it, "flags")->valuestring);
    }
    cJSON_Delete(j);
    for (int i = 0; i < n; i++) {
        snprintf(args, sizeof args, "%s %s", base, flags[i]);
        r = test_ftest(args);
        ck_assert_msg(r->status == 0, "ftest %s exits %d", args, r->status);
    }
}
END_TEST

START_TEST(test_cli_bad_values) {
    const char *bad[] = {"--host-ram 0", "--host-ram -3", "--host-ram abc", "--host-ram 64G",
                         "--host-ram", "--tight-margin 101", "--tight-margin -1", "--tight-margin x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char args[256];
        snprintf(args, sizeof args, "--model tiny-llama %s", bad[i]);
        test_cmd_result *r = test_ftest(args);
        ck_assert_msg(r->status == 2, "%s: exit %d", bad[i], r->status);
        int lines = 0;
        for (char *c = r->err; *c; c++) lines += *c == '\n';
        ck_assert_msg(lines == 1, "%s: stderr \"%s\"", bad[i], r->err);
    }
    test_cmd_result *r = test_ftest("--model tiny-llama --zero 0 --tight-margin 0");
    ck_assert_int_eq(r->status, 0);
    ck_assert_ptr_nonnull(strstr(r->out, "verdict: fits\n"));
    /* A tiny model leaves far more than 1% but less than 100% of an 80 GB card
     * free: tight at a 99.99% margin, still exit 0. */
    r = test_ftest("--model tiny-llama --zero 0 --tight-margin 99.99");
    ck_assert_int_eq(r->status, 0);
    ck_assert_ptr_nonnull(strstr(r->out, "verdict: fits, but tight"));
    r = test_ftest("--model tiny-llama --zero 0 --tight-margin 99.99 --json");
    cJSON *j = cJSON_Parse(r->out);
    ck_assert_ptr_nonnull(j);
    ck_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "verdict"), "result")->valuestring, "tight");
    ck_assert(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "verdict"), "reason")));
    cJSON_Delete(j);
}
END_TEST

Suite *suite_verdict(void);
Suite *suite_verdict(void) {
    Suite *s = suite_create("verdict");
    TCase *tc = tcase_create("verdict");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_host_load_is_ranks_times_fp32_copy);
    tcase_add_test(tc, test_device_holds_reserved_and_context);
    tcase_add_test(tc, test_allocator_oom_under_pressure_does_not_fit);
    tcase_add_test(tc, test_offload_70b_host_short);
    tcase_add_test(tc, test_host_ram_ratio);
    tcase_add_test(tc, test_catalog_median_ratio);
    tcase_add_test(tc, test_tight_margin);
    tcase_add_test(tc, test_advice_offload);
    tcase_add_test(tc, test_min_gpus_counts_host);
    tcase_add_test(tc, test_plan_host_ram);
    tcase_add_test(tc, test_cli_host_ram_verdict);
    tcase_add_loop_test(tc, test_cli_advice_applies, 0,
                        (int)(sizeof ADVICE_BASES / sizeof ADVICE_BASES[0]));
    tcase_add_test(tc, test_cli_bad_values);
    suite_add_tcase(s, tc);
    return s;
}
