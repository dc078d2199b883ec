/* ftrain's CPU step through the time ledger (issue 23: "ftrain's CPU step
 * time predicted by the ledger within 10% median over its CPU records"): the
 * CPU device's profile parser (cpu_device.h), the ranks' synchronisation
 * counted by hand from docs/trainer.md ("Ranks and ZeRO") and
 * trainer/comm/comm_threads.c, and every committed ftrain CPU record
 * (calibrate/records/ftrain-cpu.jsonl) priced with the committed profile
 * (calibrate/host/cpu-ftrain.json), its it/s against the measured. */
#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_device.h"
#include "cpus.h"
#include "json_util.h"
#include "record.h"
#include "step_build.h"
#include "test_util.h"
#include "timing.h"
#include "simt.h"
#include "work_ftrain_cuda.h"

static const char PROFILE[] =
    "{\"schema\": \"ftest.cpu-device/1\", \"threads\": 2, \"date\": \"x\","
    " \"gemm_fp32_flops_per_s\": 4e10, \"gemm_bf16_flops_per_s\": 4e9, \"memory_bytes_per_s\": 1e11,"
    " \"op_dispatch_s\": 1e-7, \"gemm_fp32_flops_per_s_1t\": 2e10, \"gemm_bf16_flops_per_s_1t\": 2e9,"
    " \"memory_bytes_per_s_1t\": 5e10, \"attention_seq\": [16, 32, 64, 128],"
    " \"attention_fwd_fp32_flops_per_s\": [1e9, 2e9, 4e9, 8e9],"
    " \"attention_bwd_fp32_flops_per_s\": [1e9, 1e9, 1e9, 1e9], \"attention_fwd_bf16_flops_per_s\": [2e9, 2e9, 2e9, 2e9],"
    " \"attention_bwd_bf16_flops_per_s\": [5e8, 5e8, 5e8, 5e8], \"eager_attention_fp32_flops_per_s\": [4e9, 4e9, 4e9, 4e9],"
    " \"eager_attention_bf16_flops_per_s\": [3e9, 3e9, 3e9, 3e9],"
    " \"kernel_elems_per_s\": {\"rmsnorm_fwd\": [1e9, 5e8], \"rmsnorm_bwd\": [1e9, 5e8], \"rope_fwd\": [1e9, 5e8],"
    " \"rope_bwd\": [1e9, 5e8], \"swiglu_fwd\": [1e9, 5e8], \"swiglu_bwd\": [1e9, 5e8], \"add\": [1e9, 5e8],"
    " \"embedding_fwd\": [1e9, 5e8], \"embedding_bwd\": [1e9, 5e8], \"ce_fwd\": [1e9, 5e8], \"ce_bwd\": [1e9, 5e8],"
    " \"sumsq\": [1e9, 5e8], \"zero\": [1e10, 1e10], \"adamw\": [1e9, 5e8], \"sgd\": [1e9, 5e8], \"convert\": [2e9, 1e9]},"
    " \"barrier_work_s\": [0, 1e-5, 3e-5, 1e-4],"
    " \"barrier_meet_s_by_ranks\": [[1e-5, 2e-5, 4e-5, 4e-5], [2e-5, 2e-5, 2e-5, 2e-5], [3e-5, 3e-5, 3e-5, 3e-5],"
    " [4e-5, 4e-5, 4e-5, 4e-5], [5e-5, 5e-5, 5e-5, 5e-5], [6e-5, 6e-5, 6e-5, 6e-5], [7e-5, 7e-5, 7e-5, 7e-5]],"
    " \"barrier_halt_wake_s\": 5e-6}";

static int parse_variant(const char *from, const char *to) {
    char text[2048], err[256] = "";
    const char *at = strstr(PROFILE, from);
    ck_assert_ptr_nonnull(at);
    snprintf(text, sizeof text, "%.*s%s%s", (int)(at - PROFILE), PROFILE, to, at + strlen(from));
    est_cpu_device d;
    int rc = est_cpu_device_parse(text, strlen(text), &d, err, sizeof err);
    if (rc < 0) ck_assert_msg(err[0] != '\0', "a refusal says why");
    return rc;
}

START_TEST(test_profile_parser) {
    est_cpu_device d;
    char err[256];
    ck_assert_int_eq(est_cpu_device_parse(PROFILE, strlen(PROFILE), &d, err, sizeof err), 0);
    ck_assert_close(d.gemm_bf16_flops_per_s, 4e9, 0, 0);
    ck_assert_close(d.meet_s[2][2], 4e-5, 0, 0);
    ck_assert_close(d.meet_s[8][0], 7e-5, 0, 0);
    /* a missing rate, a wrong schema, a short barrier row, a negative time, not JSON */
    ck_assert_int_eq(parse_variant("\"memory_bytes_per_s\": 1e11,", ""), -1);
    ck_assert_int_eq(parse_variant("cpu-device/1", "cpu-device/2"), -1);
    ck_assert_int_eq(parse_variant("[7e-5, 7e-5, 7e-5, 7e-5]", "[7e-5, 7e-5, 7e-5]"), -1);
    ck_assert_int_eq(parse_variant("[[1e-5,", "[[-1e-5,"), -1);
    ck_assert_int_eq(parse_variant("{", "["), -1);
    ck_assert_int_eq(parse_variant("[0, 1e-5, 3e-5, 1e-4]", "[0, 3e-5, 1e-5, 1e-4]"), -1);
    /* the wake-up from a halt: required (it prices every meeting), a time */
    ck_assert_close(d.halt_wake_s, 5e-6, 0, 0);
    ck_assert_int_eq(parse_variant(", \"barrier_halt_wake_s\": 5e-6", ""), -1);
    ck_assert_int_eq(parse_variant(" \"barrier_halt_wake_s\": 5e-6", " \"barrier_halt_wake_s\": -5e-6"), -1);
    ck_assert_int_eq(parse_variant(" \"barrier_halt_wake_s\": 5e-6", " \"barrier_halt_wake_s\": \"x\""), -1);
    /* every kernel of ftrain's has a rate, [fp32, bf16], positive */
    ck_assert_int_eq(parse_variant("\"ce_bwd\": [1e9, 5e8], ", ""), -1);
    ck_assert_int_eq(parse_variant("\"adamw\": [1e9, 5e8]", "\"adamw\": [1e9]"), -1);
    ck_assert_int_eq(parse_variant("\"convert\": [2e9, 1e9]", "\"convert\": [0, 1e9]"), -1);
    ck_assert_close(d.kernel_elems_per_s[EST_CPU_K_CONVERT][0], 2e9, 0, 0);
    ck_assert_close(d.kernel_elems_per_s[EST_CPU_K_ZERO][1], 1e10, 0, 0);
    /* lengths must rise */
    ck_assert_int_eq(parse_variant("[16, 32, 64, 128]", "[16, 64, 32, 128]"), -1);
    ck_assert_int_eq(parse_variant("[1e9, 2e9, 4e9, 8e9]", "[1e9, 2e9, 4e9]"), -1);
    /* the attention rate between two lengths, log-log: at 45.25 (= 32 * 2^0.5)
     * halfway from 2e9 to 4e9 in log, 2e9 * 2^0.5; beyond the ends the end values */
    ck_assert_close(est_cpu_rate_at(&d, d.attn_fwd_flops_per_s[0], 32 * sqrt(2.0)), 2e9 * sqrt(2.0), 0, 1e-9);
    ck_assert_close(est_cpu_rate_at(&d, d.attn_fwd_flops_per_s[0], 8), 1e9, 0, 0);
    ck_assert_close(est_cpu_rate_at(&d, d.attn_fwd_flops_per_s[0], 4096), 8e9, 0, 0);
    /* the team of one: the one-thread rates once every rank is a team of one */
    est_cpu_device one = est_cpu_device_team(&d, 2), all = est_cpu_device_team(&d, 1);
    ck_assert_close(one.gemm_fp32_flops_per_s, 2e10, 0, 0);
    ck_assert_close(all.gemm_fp32_flops_per_s, 4e10, 0, 0);
    /* 4 ranks on 2 threads: each op takes twice as long; 2 ranks: as long */
    ck_assert_close(est_cpu_rank_share(&d, 4), 2, 0, 0);
    ck_assert_close(est_cpu_rank_share(&d, 2), 1, 0, 0);
}
END_TEST

/* The first committed record: tiny-llama, 2 untied blocks, one micro-batch. */
static void first_record(est_record *rec) {
    size_t len;
    char *text = test_slurp(test_repo_path("calibrate/records/ftrain-cpu.jsonl"), &len);
    char *end = text + len, *next, err[256];
    size_t n = ft_cut_line(text, end, &next);
    ck_assert_msg(est_record_parse(text, n, NULL, rec, err, sizeof err) == 0, "%s", err);
    free(text);
    ck_assert_int_eq(rec->run.layers_used, 2);
    ck_assert(!rec->run.model.tied_embeddings);
}

START_TEST(test_sync_by_hand) {
    est_cpu_device d;
    char err[256];
    ck_assert_int_eq(est_cpu_device_parse(PROFILE, strlen(PROFILE), &d, err, sizeof err), 0);
    est_record rec;
    first_record(&rec);
    est_run *run = &rec.run;
    ck_assert_close(est_cpu_sync_s(&d, run, 1e-3), 0, 0, 0); /* one rank: no communicator */
    /* Every step: the driver's two barriers (trainer/train.c) and the
     * gradient norm's all-reduce (optim.c; post + 2 meets = 3): 5 meetings.
     * Each meeting: the busy-core time of the profile's row plus one wake-up
     * from a halted vCPU (5e-6). */
    run->gpus_per_node = 2;
    run->zero_stage = 0; /* + the gradients' all-reduce: 3 */
    ck_assert_close(est_cpu_sync_s(&d, run, 0), 8 * (1e-5 + 5e-6), 1e-15, 1e-12);
    /* 160 us of compute over 8 meetings: 20 us of work before each (2 ranks
     * on 2 threads share nothing), halfway from 10 us (2e-5) to 30 us (4e-5) */
    ck_assert_close(est_cpu_sync_s(&d, run, 160e-6), 8 * (3e-5 + 5e-6), 1e-15, 1e-12);
    /* beyond the last interval: its time */
    ck_assert_close(est_cpu_sync_s(&d, run, 1), 8 * (4e-5 + 5e-6), 1e-15, 1e-12);
    /* Units: embedding, 2 blocks, head = 4. Stage 1: a reduce-scatter and an
     * all-gather per unit, 2 meetings each: 5 + 16 = 21, at 3 ranks' 2e-5. */
    run->gpus_per_node = 3;
    run->zero_stage = 1;
    ck_assert_close(est_cpu_sync_s(&d, run, 1e-3), 21 * (2e-5 + 5e-6), 1e-15, 1e-12);
    /* Stage 3, 2 micro-batches: gathers embedding + 2 blocks forward, the head
     * at the loss, 2 blocks backward = 6; buckets: head, 2 blocks, embedding =
     * 4; (6 + 4) x 2 meetings x 2 micro-batches = 40, + 5 = 45, at 4 ranks. */
    run->gpus_per_node = 4;
    run->zero_stage = 3;
    run->grad_accum = 2;
    ck_assert_close(est_cpu_sync_s(&d, run, 1e-3), 45 * (3e-5 + 5e-6), 1e-15, 1e-12);
    est_record_free(&rec);
}
END_TEST

/* ftrain's own kernels priced by hand (work_ftrain.c) for the first record
 * (tiny-llama, 2 blocks, batch 2 x 32 tokens, fp32, AdamW, one rank) at the
 * committed profile's rates. The loss unit (trainer/step.c tr_step_loss): the
 * final norm over 64 x 32, the 64 x 32 fp32 residual gradient zeroed (8192
 * bytes), the 64 x 32 @ 32 x 64 logits and the head's two gradients (3 x
 * 2 x 64 x 32 x 64 FLOPs, 3 dispatches), the loss and its gradient over
 * 64 x 64 logits, the final norm's backward. The optimizer (optim.c): the
 * norm over all 22688 parameters (models/tiny-llama.json, counted by hand in
 * docs/trainer.md), AdamW over them, their 90752 gradient bytes zeroed. */
START_TEST(test_ftrain_kernels_by_hand) {
    const est_cpu_device *d = est_cpu_device_get();
    ck_assert_ptr_nonnull(d);
    est_record rec;
    first_record(&rec);
    est_constants def, own;
    est_constants_defaults(&def);
    est_time_detail t;
    est_time_model(&rec.run, est_time_constants(&rec.run, &def, &own), &t);
    ck_assert(t.modelled);
    const double (*r)[2] = d->kernel_elems_per_s;
    const double lossk = 64 * 32 / r[EST_CPU_K_RMSNORM_FWD][0] + 8192 / r[EST_CPU_K_ZERO][0] +
                         3 * (2.0 * 64 * 32 * 64 / d->gemm_fp32_flops_per_s + d->op_dispatch_s) +
                         64 * 64 / r[EST_CPU_K_CE_FWD][0] + 64 * 64 / r[EST_CPU_K_CE_BWD][0] +
                         64 * 32 / r[EST_CPU_K_RMSNORM_BWD][0];
    ck_assert_close(t.head_fwd.gpu_s, lossk, 0, 1e-9);
    ck_assert_close(t.loss_bwd.gpu_s + t.head_bwd.gpu_s, 0, 0, 0); /* inside the loss unit */
    const double opt = 22688 / r[EST_CPU_K_SUMSQ][0] + 22688 / r[EST_CPU_K_ADAMW][0] + 90752 / r[EST_CPU_K_ZERO][0];
    ck_assert_close(t.optimizer_s, opt, 0, 1e-9);
    /* the embedding's gather and its gradient: 64 rows of 32 */
    ck_assert_close(t.embed_fwd.gpu_s, 64 * 32 / r[EST_CPU_K_EMBED_FWD][0], 0, 1e-9);
    ck_assert_close(t.embed_bwd.gpu_s, 64 * 32 / r[EST_CPU_K_EMBED_BWD][0], 0, 1e-9);
    est_record_free(&rec);
}
END_TEST

/* A record's cpu_wait_s: the scheduler's run_delay of the calling thread,
 * which only grows, and grows by at most the wall time that passes. */
START_TEST(test_thread_wait) {
    const double w0 = tr_thread_wait_s();
    if (w0 < 0) return; /* no /proc/thread-self/schedstat: the record leaves it out */
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    volatile double x = 0;
    for (int i = 0; i < 2000000; i++) x += i;
    const double w1 = tr_thread_wait_s();
    clock_gettime(CLOCK_MONOTONIC, &b);
    const double wall = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
    ck_assert(w1 >= w0);
    ck_assert(w1 - w0 <= wall + 1e-6);
}
END_TEST

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_of(double *v, size_t n) {
    qsort(v, n, sizeof *v, cmp_double);
    return n == 0 ? NAN : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The step a record measured on cores of its own: step_time_s less its
 * cpu_wait_s (how long its busiest rank's thread waited for a CPU); false for
 * records written before ftrain reported it, which keep their wall time. */
static bool own_step_s(const char *line, size_t n, const est_record *rec, double *s) {
    *s = 1 / rec->it_per_s;
    cJSON *root = cJSON_ParseWithLength(line, n);
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "measured"), "cpu_wait_s");
    const bool has = cJSON_IsNumber(w) && w->valuedouble >= 0 && w->valuedouble < *s;
    if (has) *s -= w->valuedouble;
    cJSON_Delete(root);
    return has;
}

/* |estimated it/s / measured - 1| of every record of `path` into err_all,
 * those of one rank into err_one, and each record's signed error and ranks
 * into sgn and world (in file order); every record must get a time. */
static void record_errors(const char *path, double *err_all, size_t *n_all, double *err_one, size_t *n_one,
                          double *sgn, int *world) {
    size_t len;
    char *text = test_slurp(path, &len);
    char *p = text, *end = text + len, *next, err[256];
    *n_all = *n_one = 0;
    while (p < end) {
        size_t n = ft_cut_line(p, end, &next);
        est_record rec;
        ck_assert_msg(est_record_parse(p, n, NULL, &rec, err, sizeof err) == 0, "%s", err);
        est_constants def, own;
        est_constants_defaults(&def);
        est_time_detail t;
        est_time_model(&rec.run, est_time_constants(&rec.run, &def, &own), &t);
        ck_assert_msg(t.modelled && t.it_per_s > 0 && isfinite(t.it_per_s), "record %zu has no time", *n_all + 1);
        /* cpu_wait_s also counts the ranks' waits for each other's cores when
         * they outnumber them, which the ledger prices as every op taking
         * ranks / threads as long: a step less its wait is compared with the
         * ops at one core each, plus the meetings. */
        double own_s, est_s = t.step_s;
        if (own_step_s(p, n, &rec, &own_s)) {
            const double share = est_cpu_rank_share(est_cpu_device_get(), (double)est_run_world(&rec.run));
            est_s = (t.step_s - t.comm_exposed_s) / share + t.comm_exposed_s;
        }
        const double e = fabs(own_s / est_s - 1);
        sgn[*n_all] = own_s / est_s - 1;
        world[*n_all] = (int)est_run_world(&rec.run);
        err_all[(*n_all)++] = e;
        if (rec.run.gpus_per_node * rec.run.nodes == 1) err_one[(*n_one)++] = e;
        est_record_free(&rec);
        p = next;
    }
    free(text);
}

/* The criterion (docs/validation.md, "ftrain's CPU step"): all 61
 * records within 10% median, and the 20 of one rank too. The records
 * (2026-11-26, calibrate/host/ftrain_records.py: 10 steps, of 5 runs the
 * median step less cpu_wait_s; load averages in
 * calibrate/host/ftrain-cpu-records.log) were measured by ftrain, never
 * computed by ftest. FTEST_FTRAIN_CPU_RECORDS=FILE reads a re-measurement of
 * the same 61 configurations instead (`make ftrain-cpu-records`,
 * docs/trainer.md); FTEST_OPEN_CRITERIA is no longer read here. */
START_TEST(test_records_median) {
    double all[256], one[256], sgn[256];
    int world[256];
    size_t n_all, n_one;
    const char *file = getenv("FTEST_FTRAIN_CPU_RECORDS");
    const char *path = file && *file ? file : test_repo_path("calibrate/records/ftrain-cpu.jsonl");
    record_errors(path, all, &n_all, one, &n_one, sgn, world);
    for (int w = 1; w <= 4; w++) { /* by ranks, for docs/trainer.md's table: signed and |err| */
        double g[256], a[256];
        size_t k = 0;
        for (size_t i = 0; i < n_all; i++)
            if (world[i] == w) a[k] = fabs(sgn[i]), g[k++] = sgn[i];
        printf("cpu_step: %d rank(s), %zu records: it/s signed median %+.1f%%, median |error| %.1f%%\n", w, k,
               100 * median_of(g, k), 100 * median_of(a, k));
    }
    ck_assert_uint_eq(n_all, 61);
    ck_assert_uint_eq(n_one, 20);
    const double med_all = median_of(all, n_all), med_one = median_of(one, n_one);
    printf("cpu_step: %s it/s median |error| %.1f%% over %zu records, %.1f%% over the %zu of one rank\n",
           path, 100 * med_all, n_all, 100 * med_one, n_one);
    fflush(stdout); /* a failed assertion below ends this process without flushing */
    ck_assert_msg(med_one <= 0.10, "one rank: median |error| %.1f%% > 10%%", 100 * med_one);
    ck_assert_msg(med_all <= 0.10, "median |error| %.1f%% > 10%%", 100 * med_all);
}
END_TEST

/* ftrain's CUDA attention kernels by hand (work_ftrain_cuda.h). A key-row
 * kernel (flash dkv) of 256 rows (one head, T = 256, 2 query heads per kv
 * head): 2 blocks of 4 warps; warp w's first key j = 32w runs 2 x (256 - j)
 * iterations: block 0 = 2 x (256 + 224 + 192 + 160) = 1664, block 1 =
 * 2 x (128 + 96 + 64 + 32) = 640. An iteration loading 24 elements of its
 * lane's own rows and 2 shared: 24 x 32 + 2 = 770 wavefronts; once 8 own:
 * 256 per warp. On two SMs or more the busiest holds block 0; on one, both. */
START_TEST(test_cuda_row_kernels_by_hand) {
    est_row_kernel k = {.rows = 256, .T = 256, .group = 2, .by_key = true, .distinct = 24, .shared = 2,
                        .once_distinct = 8};
    ck_assert_close(est_row_kernel_sm_cycles(&k, 132), 1664.0 * 770 + 4 * 256, 0, 0);
    ck_assert_close(est_row_kernel_sm_cycles(&k, 1), (1664.0 + 640) * 770 + 8 * 256, 0, 0);
    /* Query rows, two heads of T = 48: warp 0 (t 0..31) runs 32 keys, warp 1
     * spans both heads (t 32..47 of the first: its longest lane runs 48),
     * warp 2 (t 16..47 of the second) 48. One block; per iteration 1 own + 1
     * shared element = 33 wavefronts. */
    est_row_kernel q = {.rows = 96, .T = 48, .group = 1, .by_key = false, .distinct = 1, .shared = 1};
    ck_assert_close(est_row_kernel_sm_cycles(&q, 132), (32.0 + 48 + 48) * 33, 0, 0);
    ck_assert_close(est_row_kernel_sm_cycles(&q, 0), 0, 0, 0);
    /* One SM holds every block, whether placed block by block (64 heads of
     * T = 128: 64 blocks) or spread evenly (65 heads: more than 64 blocks per
     * SM): each head's four warps run 32 + 64 + 96 + 128 = 320 iterations. */
    q.T = 128;
    q.rows = 128 * 64;
    ck_assert_close(est_row_kernel_sm_cycles(&q, 1), 64 * 320.0 * 33, 0, 1e-12);
    q.rows = 128 * 65;
    ck_assert_close(est_row_kernel_sm_cycles(&q, 1), 65 * 320.0 * 33, 0, 1e-12);
}
END_TEST

/* Step seconds of every record of `path`, estimated and measured. */
static size_t step_times(const char *path, double *est, double *meas, size_t cap) {
    size_t len, n = 0;
    char *text = test_slurp(test_repo_path(path), &len);
    char *p = text, *end = text + len, *next, err[256];
    est_gpu_catalog cat;
    ck_assert_msg(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0, "%s", err);
    while (p < end && n < cap) {
        size_t m = ft_cut_line(p, end, &next);
        est_record rec;
        ck_assert_msg(est_record_parse(p, m, &cat, &rec, err, sizeof err) == 0, "%s", err);
        est_constants def, own;
        est_constants_defaults(&def);
        est_time_detail t;
        est_time_model(&rec.run, est_time_constants(&rec.run, &def, &own), &t);
        ck_assert_msg(t.modelled && t.step_s > 0, "record %zu has no time", n + 1);
        est[n] = t.step_s;
        meas[n++] = 1 / rec.it_per_s;
        est_record_free(&rec);
        p = next;
    }
    est_gpu_catalog_free(&cat);
    free(text);
    return n;
}

/* The 9 records of ftrain's CUDA backend on an H200
 * (calibrate/records/ftrain-h200-2026-11-26.jsonl, in file order: llama3.2-1b
 * at 2 blocks 0 b1 s1024 bf16 flash, 1 s2048, 2 b4, 3 fp32, 4 eager, 5 s2048
 * full checkpointing, 6 chunked loss, 7 qwen2.5-0.5b at 4 blocks, 8
 * tiny-llama). What changes one thing at a time must change the estimated
 * step as it changed the measured one, within 10%: the sequence (x2.28
 * measured), the batch (x2.08), the model (x2.98: qwen's 2 kv heads give its
 * dk/dv kernel a quarter of llama's threads, each looping over 7 query heads),
 * eager attention (x0.53), full checkpointing (x1.10), the chunked loss
 * (x1.08). fp32 against bf16-mixed (x0.51 measured) is NOT explained (the
 * estimate has it slower, docs/trainer.md "Step time"), so not asserted; the
 * bf16-mixed records' median |err| is. */
START_TEST(test_cuda_records) {
    double est[16], meas[16];
    ck_assert_uint_eq(step_times("calibrate/records/ftrain-h200-2026-11-26.jsonl", est, meas, 16), 9);
    static const int pairs[6][2] = {{1, 0}, {2, 0}, {7, 0}, {4, 0}, {5, 1}, {6, 0}};
    for (int i = 0; i < 6; i++) {
        const int a = pairs[i][0], b = pairs[i][1];
        const double want = meas[a] / meas[b], got = est[a] / est[b];
        printf("cpu_step: ftrain CUDA record %d over %d: measured x%.3f, estimated x%.3f\n", a, b, want, got);
        ck_assert_msg(fabs(got / want - 1) <= 0.10, "record %d over %d: x%.3f estimated, x%.3f measured", a, b, got,
                      want);
    }
    double e[9];
    size_t n = 0;
    for (int i = 0; i < 9; i++)
        if (i != 3) e[n++] = fabs(meas[i] / est[i] - 1); /* |it/s error| */
    const double med = median_of(e, n);
    printf("cpu_step: ftrain CUDA records it/s median |error| %.1f%% over the %zu not in fp32\n", 100 * med, n);
    ck_assert_msg(med <= 0.30, "median |error| %.1f%%", 100 * med);
}
END_TEST

Suite *suite_cpu_step(void);
Suite *suite_cpu_step(void) {
    Suite *s = suite_create("cpu_step");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_profile_parser);
    tcase_add_test(tc, test_sync_by_hand);
    tcase_add_test(tc, test_ftrain_kernels_by_hand);
    tcase_add_test(tc, test_thread_wait);
    tcase_add_test(tc, test_records_median);
    tcase_add_test(tc, test_cuda_row_kernels_by_hand);
    tcase_add_test(tc, test_cuda_records);
    suite_add_tcase(s, tc);
    return s;
}
