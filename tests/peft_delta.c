/* LoHa, LoKr, OFT, FourierFT and WaveFT (estimator/model/peft_delta.c, block_pdelta.c,
 * frameworks/work_peft_delta.c) against figures derived here by hand from
 * PEFT d787f51 (tuners/loha, lokr, oft, fourierft, waveft layer.py), the trainable
 * counts PEFT printed for the method comparison (shared/data/
 * peft-metamathqa-l40s, num_trainable_params) and the seven measured rows of
 * calibrate/records/peft-metamathqa-l40s.jsonl. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "block.h"
#include "check_records.h"
#include "estimate.h"
#include "lora.h"
#include "peft.h"
#include "peft_delta.h"
#include "test_util.h"
#include "timing.h"

/* Llama-3.2-3B (h 3072; k/v 8 x 128 = 1024) on one L40S as the method
 * comparison ran it: batch 4 x 768 (T = 3072 tokens), pure bf16. */
static est_run l40s(est_peft p, int64_t rank) {
    est_run r = test_peft_l40s_run(p);
    r.pdelta.rank = rank;
    r.pdelta.n_frequency = 1000;
    return r;
}

static const est_regime BF16 = {.act = 2, .resid = 2, .weight = 2, .adapter = 4};

static int64_t saved_of(const est_run *r) {
    est_module *m = malloc(sizeof *m);
    char err[256];
    ck_assert_msg(est_module_block(r, &BF16, false, m, err, sizeof err) == 0, "%s", err);
    ck_assert(!m->overflow);
    const int64_t s = est_module_saved_bytes(m);
    free(m);
    return s;
}

/* lokr/layer.py factorization's docstring: 256 -> (16, 16), 128 -> (8, 16),
 * 127 -> (1, 127), (128, 4) -> (4, 32); and Llama-3.2-3B's dimensions:
 * 3072 = 2^10 x 3 walks the divisors 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64
 * and stops at 64 x 48 (m >= n), swapped to (48, 64); 1024 -> (32, 32). */
START_TEST(test_factorization) {
    const int64_t cases[][4] = {{256, -1, 16, 16}, {128, -1, 8, 16}, {127, -1, 1, 127}, {128, 4, 4, 32},
                                {3072, -1, 48, 64}, {1024, -1, 32, 32}, {3072, 4, 4, 768}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t m, n;
        est_pdelta_factorization(cases[i][0], cases[i][1], &m, &n);
        ck_assert_int_eq(m, cases[i][2]);
        ck_assert_int_eq(n, cases[i][3]);
    }
}
END_TEST

/* Trainable elements, q (3072 x 3072) and v (1024 out, 3072 in), 28 layers:
 *  LoHa r32: 2 x 32 x ((3072 + 3072) + (1024 + 3072)) x 28       = 18,350,080
 *  LoKr r32, factor -1: q w1 48 x 48 + w2 64 x 64 (32 >= 64 / 2:
 *    whole); v w1 32 x 48 + w2 32 x 64: (2304 + 4096 + 1536 + 2048) x 28
 *                                                                  =    279,552
 *  LoKr r32, factor 4: w1 4 x 4 each; w2 factored (32 < 768 / 2):
 *    q 768 x 32 + 32 x 768, v 256 x 32 + 32 x 768: (16 + 49152 + 16 +
 *    32768) x 28                                                   =  2,294,656
 *  OFT r32: blocks of 3072 / 32 = 96, 96 x 95 / 2 = 4560 each:
 *    2 x 32 x 4560 x 28                                            =  8,171,520
 *  FourierFT 1000: 2 x 1000 x 28                                   =     56,000
 *  WaveFT 5000: 2 x 5000 x 28                                      =    280,000
 * as PEFT printed them (num_trainable_params), and the block description's. */
START_TEST(test_trainable_counts_published) {
    struct {
        est_peft p;
        int64_t rank, factor, expect;
    } c[] = {{EST_PEFT_LOHA, 32, -1, 18350080}, {EST_PEFT_LOKR, 32, -1, 279552}, {EST_PEFT_LOKR, 32, 4, 2294656},
             {EST_PEFT_OFT, 32, -1, 8171520},   {EST_PEFT_FOURIERFT, 0, -1, 56000},
             {EST_PEFT_WAVEFT, 0, -5000, 280000}};
    est_module *m = malloc(sizeof *m);
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        est_run r = l40s(c[i].p, c[i].rank);
        r.pdelta.factor = c[i].factor;
        if (c[i].factor < -1) r.pdelta.n_frequency = -c[i].factor; /* WaveFT's row: n 5000 */
        ck_assert_int_eq(est_peft_trainable_params(&r), c[i].expect);
        ck_assert_int_eq(est_module_block(&r, &BF16, false, m, NULL, 0), 0);
        ck_assert_int_eq(28 * est_module_trainable_elems(m), c[i].expect);
    }
    free(m);
}
END_TEST

/* What autograd keeps, T = 3072:
 *  - LoHa, LoKr, FourierFT: F.linear(x.to(fp32), delta) saves the fp32 input
 *    (T x 3072 x 4) and the fp32 delta (d_out x 3072 x 4); HadaWeight saves
 *    only its factors, kron of whole w1, w2 only parameters, ifft2 nothing.
 *    v alone over q and v: T 3072 4 + 3072 3072 4.
 *  - LoKr factor 4: kron (a broadcast product) saves w2 = w2_a @ w2_b, q
 *    768 x 768, v 256 x 768, fp32, beyond factor -1's.
 *  - OFT: the einsum's bmm saves x.to(fp32) and R; the Cayley-Neumann bmm
 *    save Q, Q^2, Q^3 (r b b = 32 x 96 x 96 each, fp32); the base saves
 *    nothing of its (rotated) input. Per Linear T 3072 4 + 4 x 32 x 96 x 96 x 4,
 *    against LoHa's T 3072 4 + d_out 3072 4.
 *  - WaveFT (db1): beside FourierFT's, conv_transpose2d saves its input, the
 *    four stacked quadrants: d_out x 3072 x 4 per Linear. */
START_TEST(test_saved_bytes) {
    const int64_t T = 3072;
    est_run qv = l40s(EST_PEFT_LOHA, 32);
    est_run q = qv;
    q.pdelta.targets = EST_LORA_BIT(EST_LORA_Q);
    const int64_t loha = saved_of(&qv);
    ck_assert_int_eq(loha - saved_of(&q), T * 3072 * 4 + 1024 * 3072 * 4);
    est_run lokr = l40s(EST_PEFT_LOKR, 32);
    ck_assert_int_eq(saved_of(&lokr), loha);
    lokr.pdelta.factor = 4;
    ck_assert_int_eq(saved_of(&lokr) - loha, (768 * 768 + 256 * 768) * 4);
    est_run fft = l40s(EST_PEFT_FOURIERFT, 0);
    ck_assert_int_eq(saved_of(&fft), loha);
    est_run wft = l40s(EST_PEFT_WAVEFT, 0);
    ck_assert_int_eq(saved_of(&wft) - loha, (3072 + 1024) * 3072 * 4);
    est_run oft = l40s(EST_PEFT_OFT, 32);
    const int64_t rbb = 32 * 96 * 96;
    ck_assert_int_eq(saved_of(&oft) - loha, 2 * 4 * rbb * 4 - (3072 + 1024) * 3072 * 4);
}
END_TEST

/* The seven rows of PEFT's method comparison these methods express (LoHa,
 * LoKr x 2, OFT, FourierFT x 2, WaveFT), each within its record's tolerance
 * (reserved 6%, after the step 1%, it/s 25%). */
START_TEST(test_records_within_tolerance) {
    size_t len = 0;
    char *text = test_slurp(test_repo_path("calibrate/records/peft-metamathqa-l40s.jsonl"), &len);
    ck_assert_ptr_nonnull(text);
    char path[] = "/tmp/ftest-peftdelta-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "w");
    int rows = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (!strstr(line, "\"peft_method\":\"loha\"") && !strstr(line, "\"peft_method\":\"lokr\"") &&
            !strstr(line, "\"peft_method\":\"oft\"") && !strstr(line, "\"peft_method\":\"fourierft\"") &&
            !strstr(line, "\"peft_method\":\"waveft\""))
            continue;
        ck_assert_ptr_nonnull(strstr(line, "\"tolerance\""));
        fprintf(f, "%s\n", line);
        rows++;
    }
    fclose(f);
    free(text);
    ck_assert_int_eq(rows, 7);
    est_gpu_catalog cat;
    char err[256];
    ck_assert(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0);
    char *out = NULL;
    size_t olen = 0;
    FILE *o = open_memstream(&out, &olen);
    est_check_options opt = {0};
    est_check_totals tot = {0};
    ck_assert_msg(est_check_file(path, &cat, &opt, o, &tot, err, sizeof err) == 0, "%s", err);
    fclose(o);
    unlink(path);
    ck_assert_uint_eq(tot.records, 7);
    ck_assert_uint_eq(tot.not_expressible, 0);
    ck_assert_uint_eq(tot.errors, 0);
    ck_assert_msg(tot.failed == 0, "%s", out);
    free(out);
    est_gpu_catalog_free(&cat);
}
END_TEST

/* Under autocast (the HF Trainer's bf16 mixed precision over a bf16 base
 * with fp32 adapters) F.linear reads bf16 copies of x.to(fp32) and of the
 * delta and saves those: v's adapter saves T 3072 2 + 1024 3072 2, and the
 * fp32 delta goes once the cast has read it. */
START_TEST(test_saved_bytes_autocast) {
    const est_regime AMP = {.act = 2, .resid = 2, .weight = 2, .adapter = 4, .autocast = true};
    est_run qv = l40s(EST_PEFT_LOHA, 32);
    est_run q = qv;
    q.pdelta.targets = EST_LORA_BIT(EST_LORA_Q);
    est_module *a = malloc(sizeof *a), *c = malloc(sizeof *c);
    char err[256];
    ck_assert_msg(est_module_block(&qv, &AMP, false, a, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(est_module_block(&q, &AMP, false, c, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(est_module_saved_bytes(a) - est_module_saved_bytes(c), 3072 * 3072 * 2 + 1024 * 3072 * 2);
    free(a);
    free(c);
}
END_TEST

/* A unit that starts with a host sync and then issues ops the device idles
 * through (FourierFT's and WaveFT's delta from CPU-held indices): the device
 * has run everything to 1.0 s, the host is at 0.5 s; the unit has 0.2 s of
 * device work in 10 kernels and 0.01 s of host work, 0.005 s of it after the
 * sync. The host catches up (1.0), the device starts at 1.005 and ends at
 * 1.205; the host's last kernel (1.01 + 0.02) is earlier. Without waited
 * ops: 1.2; without the sync the device is never idle: 1.2 too. */
START_TEST(test_waited_ops_idle_the_device) {
    est_time_part p = {.gpu_s = 0.2, .host_s = 0.01, .kernels = 10, .waits = true, .waited_s = 0.005};
    double host = 0.5;
    ck_assert_double_eq_tol(est_pipeline_unit_s(&host, 1.0, &p), 1.205, 1e-12);
    ck_assert_double_eq_tol(host, 1.01, 1e-12);
    p.waited_s = 0;
    host = 0.5;
    ck_assert_double_eq_tol(est_pipeline_unit_s(&host, 1.0, &p), 1.2, 1e-12);
    p.waits = false;
    host = 0.5;
    ck_assert_double_eq_tol(est_pipeline_unit_s(&host, 1.0, &p), 1.2, 1e-12);
}
END_TEST

/* Bad input: one line, exit 2. */
START_TEST(test_cli_bad_input) {
    const char *base = "--model llama3.2-3b --gpu l40s-48gb --batch 4 --seq 768 --precision bf16 ";
    const char *bad[] = {"--peft loha", "--peft lokr --peft-rank 0", "--peft-rank 8",
                         "--peft oft --peft-rank 7", "--lokr-factor 4", "--peft lokr --peft-rank 8 --lokr-factor 0",
                         "--n-frequency 10", "--peft fourierft --peft-rank 8",
                         "--peft waveft --n-frequency 99999999", "--peft loha --peft-rank 8 --lora-rank 8"};
    char args[512];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args, "%s%s", base, bad[i]);
        test_cmd_result *x = test_ftest(args);
        ck_assert_msg(x->status == 2, "%s: status %d", bad[i], x->status);
        ck_assert_msg(x->err_lines == 1, "%s: %d lines", bad[i], x->err_lines);
    }
    snprintf(args, sizeof args, "%s--peft lokr --peft-rank 32 --lokr-factor 4 --train-loop plain", base);
    ck_assert_int_eq(test_ftest(args)->status, 0);
}
END_TEST

Suite *suite_peft_delta(void);
Suite *suite_peft_delta(void) {
    Suite *s = suite_create("peft_delta");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_factorization);
    tcase_add_test(tc, test_trainable_counts_published);
    tcase_add_test(tc, test_saved_bytes);
    tcase_add_test(tc, test_records_within_tolerance);
    tcase_add_test(tc, test_saved_bytes_autocast);
    tcase_add_test(tc, test_waited_ops_idle_the_device);
    tcase_add_test(tc, test_cli_bad_input);
    suite_add_tcase(s, tc);
    return s;
}
