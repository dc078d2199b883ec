/* Device memory outside the caching allocator (estimator/catalog/device_mem.c,
 * calibrate/fit_context.c). Expected bytes are derived by hand in each test
 * from the figures its comment names: the default per-thread stack of 1 KiB,
 * the resident threads per SM of the CUDA C++ Programming Guide's table per
 * compute capability (2048 on 8.0 and 9.0, 1536 on 8.6), the SM counts of the
 * data sheets (H200 132, A100 108, RTX 3090 82), and NCCL 2.30.7's buffer
 * sizes (src/include/device.h, src/init.cc). */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cJSON.h>

#include "check_records.h"
#include "constants.h"
#include "device_mem.h"
#include "estimate.h"
#include "fit.h"
#include "gpu.h"
#include "record.h"
#include "test_util.h"

START_TEST(test_local_memory_per_card) {
    /* H200: 1024 B x 2048 threads x 132 SMs = 276,824,064 B (264 MiB) */
    est_gpu g = test_gpu("h200-141gb");
    ck_assert_int_eq(est_cuda_local_mem_bytes(&g), 276824064LL);
    /* A100: 1024 x 2048 x 108 = 226,492,416 B (216 MiB) */
    g = test_gpu("a100-80gb");
    ck_assert_int_eq(est_cuda_local_mem_bytes(&g), 226492416LL);
    /* RTX 3090 (8.6): 1024 x 1536 x 82 = 128,974,848 B (123 MiB) */
    g = test_gpu("rtx3090-24gb");
    ck_assert_int_eq(est_cuda_local_mem_bytes(&g), 128974848LL);
    /* plus the 1 MiB printf FIFO and the 8 MiB malloc heap: 138,412,032 B */
    ck_assert_int_eq(est_cuda_context_sourced_bytes(&g), 128974848LL + 1048576 + 8388608);
}
END_TEST

START_TEST(test_nccl_buffers_per_channel) {
    /* one connection: LL 8 lines x 512 threads x 8 steps x 16 B = 524,288;
     * LL128 120 elements x 640 threads x 8 steps x 8 B = 4,915,200;
     * Simple 4 MiB = 4,194,304; together 9,633,792 B */
    ck_assert_int_eq(est_nccl_buffer_bytes(1, 1), 9633792LL);
    /* a ring of 16 channels, a receive and a send connection each:
     * 9,633,792 x 32 = 308,281,344 B (294 MiB) */
    ck_assert_int_eq(est_nccl_buffer_bytes(16, 2), 308281344LL);
    ck_assert_int_eq(est_nccl_buffer_bytes(0, 2), 0);
}
END_TEST

START_TEST(test_context_in_force_unless_a_profile_sets_it) {
    est_gpu g = test_gpu("h200-141gb");
    est_constants k;
    est_constants_defaults(&k);
    k.value[EST_K_CUDA_IMAGES_BYTES] = 1000.0 * 1048576; /* a fitted 1000 MiB */
    est_cuda_context_in_force(&g, &k);
    /* 264 MiB + 1 + 8 + 1000 = 1273 MiB */
    ck_assert_int_eq((long long)k.value[EST_K_CUDA_CONTEXT_BYTES], 1273LL * 1048576);
    est_constants_defaults(&k);
    k.value[EST_K_CUDA_CONTEXT_BYTES] = 5e8;
    strcpy(k.source[EST_K_CUDA_CONTEXT_BYTES], "a profile's measurement");
    est_cuda_context_in_force(&g, &k);
    ck_assert_int_eq((long long)k.value[EST_K_CUDA_CONTEXT_BYTES], 500000000LL);
}
END_TEST

/* Two H200 records: device used 2,000 and 1,800 MiB over reserved peaks of
 * 500 MiB: the larger bound is 1,500 - 264 - 9 = 1,227 MiB. An OOM record
 * (whatever it says) and one without device used do not count. */
START_TEST(test_fit_takes_the_largest_bound) {
    est_gpu g = test_gpu("h200-141gb");
    est_rank_measure m[4];
    est_record r[4];
    const est_record *p[4];
    const int64_t used_mib[4] = {2000, 1800, 9000, -1};
    memset(r, 0, sizeof r);
    for (int i = 0; i < 4; i++) {
        memset(&m[i], 0, sizeof m[i]);
        m[i].peak_reserved_bytes = 500LL << 20;
        m[i].device_used_bytes = used_mib[i] < 0 ? -1 : used_mib[i] << 20;
        r[i].run.gpu = g;
        r[i].ranks = &m[i];
        r[i].rank_count = 1;
        r[i].oom = i == 2;
        p[i] = &r[i];
    }
    cal_group grp = {.records = p, .count = 4, .gpu = NULL, .files = "test"};
    cJSON *sec = cJSON_CreateObject();
    char err[128];
    FILE *log = fopen("/dev/null", "w");
    ck_assert_ptr_nonnull(log);
    ck_assert_int_eq(cal_fit_context(&grp, sec, log, err, sizeof err), 0);
    fclose(log);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(sec, "cuda_step_images_bytes"),
                                                      "value");
    ck_assert_ptr_nonnull(v);
    ck_assert_int_eq((long long)v->valuedouble, 1227LL * 1048576);
    cJSON_Delete(sec);
}
END_TEST

/* ftest check holds device used to the record's reserved tolerance: a record
 * of a Llama-3.2-1B step on an H200 that says 100 GiB were in use (the step's
 * own estimate is near 30 GiB: off by about -70%) fails with tolerance 50%;
 * the same record without device_used_bytes passes (its allocated peak's
 * tolerance is 1000%, so only device used can fail it). */
static size_t check_one(const char *ranks_json, char **out) {
    char path[] = "/tmp/ftest-devmem-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    char line[1024];
    const int n = snprintf(line, sizeof line,
                           "{\"schema\":\"ftest.record/1\",\"source\":\"test\",\"date\":\"2026-11-26\","
                           "\"framework\":\"hf\",\"method\":\"measured on 1 real GPU\",\"hardware\":{\"gpu\":"
                           "\"h200-141gb\",\"gpus_per_node\":1,\"nodes\":1},\"config\":{\"model\":\"llama3.2-1b\","
                           "\"micro_batch\":1,\"grad_accum\":1,\"seq_len\":512,\"precision\":\"bf16-mixed\","
                           "\"zero\":0,\"offload\":\"none\",\"checkpointing\":\"none\",\"attention\":\"sdpa\","
                           "\"loss\":\"standard\",\"optimizer\":\"adamw\"},\"measured\":{\"oom\":false,\"ranks\":[%s]},"
                           "\"tolerance\":{\"peak_rel\":10,\"reserved_rel\":0.5}}\n",
                           ranks_json);
    ck_assert_int_eq(write(fd, line, (size_t)n), n);
    close(fd);
    est_gpu_catalog cat;
    char err[256];
    ck_assert(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0);
    size_t len = 0;
    FILE *o = open_memstream(out, &len);
    est_check_options opt = {.quiet = false};
    est_check_totals tot = {0};
    ck_assert_msg(est_check_file(path, &cat, &opt, o, &tot, err, sizeof err) == 0, "%s", err);
    fclose(o);
    unlink(path);
    est_gpu_catalog_free(&cat);
    ck_assert_uint_eq(tot.errors, 0);
    ck_assert_uint_eq(tot.records, 1);
    return tot.failed;
}

START_TEST(test_check_compares_device_used) {
    char *out = NULL;
    const char *gib30 = "\"rank\":0,\"peak_allocated_bytes\":32212254720,\"peak_reserved_bytes\":32212254720";
    char ranks[512];
    snprintf(ranks, sizeof ranks, "{%s,\"device_used_bytes\":107374182400}", gib30); /* 100 GiB */
    ck_assert_uint_eq(check_one(ranks, &out), 1);
    ck_assert_msg(strstr(out, "device used off by -") && strstr(out, "used -") && strstr(out, "(102400 vs "), "%s",
                  out);
    free(out);
    snprintf(ranks, sizeof ranks, "{%s}", gib30);
    ck_assert_uint_eq(check_one(ranks, &out), 0);
    ck_assert_msg(!strstr(out, "used "), "%s", out);
    free(out);
}
END_TEST


/* NCCL 2.21.5 on an 8 x H100 SXM node (NVSwitch), one communicator, derived
 * by hand from the source (device_mem.h cites the lines):
 * - links: 450 GB/s one direction / 25 GB/s a link = 18, x 20.6 (SM90) =
 *   370.8 GB/s; rings: 60 GB/s -> 6 channels (360); 50 -> 7 (350); 40 -> 9
 *   (360, not more); 30 -> 12 (360); 24 is below half of 60: 6 at 60;
 *   duplicated (60 >= 50) to 12, doubled by Postset to 24 channels;
 * - a connection pair: receive 4,096 + 524,288 + 4,915,200 = 5,443,584 B ->
 *   6 MiB; send 4,096 + 4,194,304 -> 6 MiB: 12,582,912 B;
 * - ring + tree (8 ranks): 24 x 2 x 12,582,912 = 603,979,776 B (576 MiB);
 * - NVLS: 16 channels x 2 x (1 MiB + 2 MiB) x 8 heads = 805,306,368 B;
 * together 1,409,286,144 B (1,344 MiB). */
START_TEST(test_nccl_h100_nvswitch_node) {
    est_gpu g = test_gpu("h100-80gb");
    ck_assert_int_eq(est_nccl_channels(&g), 24);
    ck_assert_int_eq(est_nccl_conn_pair_bytes(), 12582912LL);
    ck_assert_int_eq(est_nccl_nvls_bytes(&g, 8), 805306368LL);
    ck_assert_int_eq(est_nccl_comm_bytes(&g, 8, 1), 1409286144LL);
    /* one rank: no peer, nothing */
    ck_assert_int_eq(est_nccl_comm_bytes(&g, 1, 1), 0);
    /* DeepSpeed's two communicators on top of a 1,000 MiB context */
    est_constants k;
    est_constants_defaults(&k);
    k.value[EST_K_CUDA_CONTEXT_BYTES] = 1000.0 * 1048576;
    est_nccl_in_force(&g, 8, 1, 2, &k);
    ck_assert_int_eq((long long)k.value[EST_K_CUDA_CONTEXT_BYTES], (1000LL + 2 * 1344) * 1048576);
    ck_assert_msg(strstr(k.source[EST_K_CUDA_CONTEXT_BYTES], "NCCL 2.21.5"), "%s", k.source[EST_K_CUDA_CONTEXT_BYTES]);
}
END_TEST

/* 2 x RTX 4090 over PCIe Gen4 x16: 32 GB/s x 0.75 = 24 GB/s (16 lanes x 120
 * / 80); rings (8.9: speedArrayIntra): 20 -> 1 (20); 18 -> 1; 15 -> 1; 12
 * -> 2 (24 = the link: stop): 2 at 12 GB/s, below 25 so not duplicated,
 * doubled by Postset to 4 channels; two ranks: a ring pair only, no tree
 * pair, no NVLS (no NVSwitch): 4 x 12,582,912 = 50,331,648 B (48 MiB). */
START_TEST(test_nccl_rtx4090_pcie_pair) {
    est_gpu g = test_gpu("rtx4090-24gb");
    ck_assert_int_eq(est_nccl_channels(&g), 4);
    ck_assert_int_eq(est_nccl_nvls_bytes(&g, 2), 0);
    ck_assert_int_eq(est_nccl_comm_bytes(&g, 2, 1), 50331648LL);
    /* A100 SXM (8.0): 12 links x 20.0 = 240; 40 -> 6 = the link: 6 at 40,
     * duplicated (8.0 is not above 8.0) to 12, doubled to 24; no NVLS
     * below 9.0: 24 x 2 x 12 MiB = 576 MiB */
    g = test_gpu("a100-80gb");
    ck_assert_int_eq(est_nccl_channels(&g), 24);
    ck_assert_int_eq(est_nccl_comm_bytes(&g, 8, 1), 576LL * 1048576);
}
END_TEST

/* A record of 8 H200 ranks on one node under the HF Trainer: with NCCL (the
 * default) its context grows by one communicator, 1,344 MiB (the H100
 * derivation above: the H200 has the same links and SMs' compute
 * capability); "process_group": "fake" (a rank emulated on torch's fake
 * backend) adds nothing; any other value is refused. */
static double context_of(const char *pg) {
    char line[1024];
    const int n = snprintf(line, sizeof line,
                           "{\"schema\":\"ftest.record/1\",\"source\":\"t\",\"date\":\"2026-11-26\","
                           "\"framework\":\"hf\",\"method\":\"m\",\"hardware\":{\"gpu\":\"h200-141gb\","
                           "\"gpus_per_node\":8,\"nodes\":1%s},\"config\":{\"model\":\"llama3.2-1b\","
                           "\"micro_batch\":1,\"grad_accum\":1,\"seq_len\":512,\"precision\":\"bf16-mixed\","
                           "\"zero\":0,\"offload\":\"none\",\"checkpointing\":\"none\"},"
                           "\"measured\":{\"oom\":false,\"ranks\":[{\"rank\":0,\"peak_allocated_bytes\":1}]}}",
                           pg);
    est_gpu_catalog cat;
    char err[256];
    ck_assert(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0);
    est_record rec;
    const int rc = est_record_parse(line, (size_t)n, &cat, &rec, err, sizeof err);
    est_gpu_catalog_free(&cat);
    if (rc < 0) return -1;
    est_constants k;
    ck_assert_msg(est_estimate_constants(&rec.run, &k, err, sizeof err) == 0, "%s", err);
    est_record_free(&rec);
    return k.value[EST_K_CUDA_CONTEXT_BYTES];
}

START_TEST(test_record_fake_process_group_has_no_nccl) {
    const double nccl = context_of("");
    const double named = context_of(",\"process_group\":\"nccl\"");
    const double fake = context_of(",\"process_group\":\"fake\"");
    ck_assert_double_eq(nccl, named);
    ck_assert_int_eq((long long)(nccl - fake), 1344LL * 1048576);
    ck_assert_double_eq(context_of(",\"process_group\":\"gloo\""), -1);
}
END_TEST

Suite *suite_device_mem(void);
Suite *suite_device_mem(void) {
    Suite *s = suite_create("device_mem");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_local_memory_per_card);
    tcase_add_test(tc, test_nccl_buffers_per_channel);
    tcase_add_test(tc, test_nccl_h100_nvswitch_node);
    tcase_add_test(tc, test_nccl_rtx4090_pcie_pair);
    tcase_add_test(tc, test_record_fake_process_group_has_no_nccl);
    tcase_add_test(tc, test_context_in_force_unless_a_profile_sets_it);
    tcase_add_test(tc, test_fit_takes_the_largest_bound);
    tcase_add_test(tc, test_check_compares_device_used);
    suite_add_tcase(s, tc);
    return s;
}
