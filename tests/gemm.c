/* GEMM time from the shape (estimator/ledger/gemm.c) against hand derivations
 * from the catalog's measured ceilings: tiles, waves over the SMs, split-K,
 * the memory floor of thin GEMMs; and the orderings issue 23 asks for (the
 * same chip with more bandwidth is never slower, an H100 is faster than an
 * A100 by no more than its ceiling or bandwidth ratio). */
#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "gemm.h"
#include "gpu.h"
#include "test_util.h"

static est_gpu_catalog cat;

static void setup(void) {
    char err[256];
    ck_assert_msg(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0, "%s", err);
}
static void teardown(void) { est_gpu_catalog_free(&cat); }

static est_gemm_device dev(const char *gpu) {
    const est_gpu *g = est_gpu_find(&cat, gpu);
    ck_assert_ptr_nonnull(g);
    return est_gemm_device_of(g, 2, g->hbm_gb_per_s * 1e9);
}

/* LoRA's B on Llama-3-8B's q projection at 2048 tokens: (2048 x 16) @ (16 x
 * 4096). 1024 tiles of 128x64 keep every SM busy, so compute takes ~1 us,
 * while its operands are 2 x (2048*16 + 16*4096 + 2048*4096) = 16.97 MB: at
 * the A100's 2039 GB/s, 8.3 us. Memory-bound. */
START_TEST(test_thin_gemm_is_memory_bound) {
    const est_gemm_device d = dev("a100-80gb");
    const double bytes = 2.0 * (2048.0 * 16 + 16.0 * 4096 + 2048.0 * 4096);
    ck_assert_close(est_gemm_time_s(&d, 2048, 16, 4096, 2, 1), bytes / 2039e9, 0, 1e-12);
}
END_TEST

/* One 128x128 output tile with K = 65536 on 108 SMs: K is split 108 ways
 * (each slice 606 elements, above the 256 minimum), one full wave. The time
 * is the larger of the compute at the full-tile rate and the traffic: A and B
 * (2 x 128 x 65536 x 2 B = 33.55 MB), C (32 KB) and 108 fp32 partial tiles
 * written and read back (2 x 108 x 128 x 128 x 4 B = 14.16 MB), 47.74 MB at
 * 2039 GB/s. */
START_TEST(test_split_k) {
    const est_gemm_device d = dev("a100-80gb");
    const double bytes = 2.0 * 128 * 65536 * 2 + 128.0 * 128 * 2 + 2.0 * 108 * 128 * 128 * 4;
    const double full = 271.2e12 / (320.0 / 324.0); /* the MAMF shape's tiles (tests/ledgers.c) */
    const double compute = 2.0 * 128 * 128 * 65536 / full;
    ck_assert_close(est_gemm_time_s(&d, 128, 65536, 128, 2, 1), fmax(bytes / 2039e9, compute), 0, 1e-12);
    ck_assert_close(est_gemm_shape_efficiency(&d, 128, 65536, 128, 1), 1.0, 0, 1e-12);
}
END_TEST

/* The RTX 3090's ceiling was measured at M = N = K = 1280 (68.27 TFLOP/s,
 * triton-lang/triton#319): the model gives back that rate at that shape. Its
 * SMs need a reuse of 68.3e12 / 2 / 82 / 33.4e9 = 12.5, so 64x64 tiles (400
 * blocks, 5 waves of 82: 400/410) are fed; a shape of full tiles in full waves
 * (82 x 2 tiles of 64 x 64 ... here 5248 x 128) runs 410/400 faster. */
START_TEST(test_ceiling_at_its_own_shape) {
    const est_gemm_device d = dev("rtx3090-24gb");
    const double n = 1280;
    ck_assert_close(2 * n * n * n / est_gemm_time_s(&d, n, n, n, 2, 1), 68.3e12, 0, 1e-9);
    const double full = 68.3e12 * 410.0 / 400.0;
    const double M = 64.0 * 82, N = 128, K = 8192;
    ck_assert_close(2 * M * N * K / est_gemm_time_s(&d, M, K, N, 2, 1), full, 0, 1e-9);
}
END_TEST

/* A batched launch shares its waves: 32 heads' 128x128 score GEMMs (K = 128)
 * in one launch fill 32 of 108 SMs; apart, each takes a wave of its own. */
START_TEST(test_batched_launch_shares_waves) {
    const est_gemm_device d = dev("a100-80gb");
    const double one = est_gemm_time_s(&d, 128, 128, 128, 2, 1);
    const double batched = est_gemm_time_s(&d, 128, 128, 128, 2, 32);
    ck_assert(batched < 32 * one);
    ck_assert(batched >= one);
}
END_TEST

/* Issue 23: for the same GEMMs the A100 80GB (2039 GB/s) is never slower
 * than the 40GB (1555 GB/s, the same chip and ceiling), and the H100 SXM is
 * faster than the A100 80GB, over a grid of shapes from one token to large
 * batches. One GEMM may gain more than the ceiling ratio (794.5 / 271.2) where
 * its tiles fill 132 SMs better than 108 (1000 x 4096 x 2048: 3.6x), but never
 * by more than a wave's worth on top of it (x 1.25); over the grid the
 * geometric mean stays within the larger of the ceiling and bandwidth
 * (3350 / 2039) ratios. tests/timing.c checks whole steps. */
START_TEST(test_gpu_orderings) {
    const est_gemm_device a40 = dev("a100-40gb"), a80 = dev("a100-80gb"), h = dev("h100-80gb");
    const double ratio = fmax(794.5 / 271.2, 3350.0 / 2039.0), bound = ratio * 1.25;
    double log_sum = 0;
    int count = 0;
    const double dims[] = {1, 16, 128, 1000, 2048, 4096, 14336, 65536};
    const int n = (int)(sizeof dims / sizeof dims[0]);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            for (int k = 0; k < n; k++) {
                const double M = dims[i], K = dims[j], N = dims[k];
                const double t40 = est_gemm_time_s(&a40, M, K, N, 2, 1);
                const double t80 = est_gemm_time_s(&a80, M, K, N, 2, 1);
                const double th = est_gemm_time_s(&h, M, K, N, 2, 1);
                ck_assert_msg(t80 <= t40, "A100 80GB slower at %g x %g x %g", M, K, N);
                ck_assert_msg(t80 / th <= bound, "H100 %.2fx the A100 at %g x %g x %g", t80 / th, M, K, N);
                ck_assert_msg(th <= t80, "H100 slower at %g x %g x %g", M, K, N);
                log_sum += log(t80 / th);
                count++;
            }
    ck_assert_msg(exp(log_sum / count) <= ratio, "H100 %.2fx the A100 in the mean", exp(log_sum / count));
}
END_TEST

Suite *suite_gemm(void);
Suite *suite_gemm(void) {
    Suite *s = suite_create("gemm");
    TCase *tc = tcase_create("shapes");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_thin_gemm_is_memory_bound);
    tcase_add_test(tc, test_split_k);
    tcase_add_test(tc, test_ceiling_at_its_own_shape);
    tcase_add_test(tc, test_batched_launch_shares_waves);
    tcase_add_test(tc, test_gpu_orderings);
    suite_add_tcase(s, tc);
    return s;
}
