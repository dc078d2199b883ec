/* FP8 linears (--fp8; estimator/model/fp8.c, estimator/frameworks/work_fp8.c):
 * what torchao's Float8Linear saves and makes per recipe, its GEMMs at the
 * card's FP8 ceiling, and the refusals. Every figure is derived here by hand
 * from torchao 0.19.0 (torchao/float8/float8_linear.py, config.py,
 * float8_utils.py, float8_training_tensor.py, float8_ops.py) and the data
 * sheets in models/gpus.json, never read back from the program. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "block.h"
#include "fp8.h"
#include "gemm.h"
#include "gpu.h"
#include "test_util.h"
#include "work_fp8.h"

static est_module build(const est_run *run, const est_regime *g) {
    est_module m;
    char err[256];
    ck_assert_msg(est_module_block(run, g, false, &m, err, sizeof err) == 0, "%s", err);
    return m;
}

static const est_mop *op_named(const est_module *m, const char *name) {
    for (int i = 0; i < m->n_ops; i++)
        if (!strcmp(m->ops[i].name, name)) return &m->ops[i];
    ck_abort_msg("no op %s", name);
    return NULL;
}

/* What autograd keeps. matmul_with_hp_or_float8_args.forward calls
 * ctx.save_for_backward(input_hp, weight_hp_t) before any cast, in every
 * recipe: the Linear's high-precision input (the tensor nn.Linear saves too)
 * and a view of the parameter (no new bytes). So under a module cast (FSDP's
 * MixedPrecision, pure bf16: the weight is bf16 already) a Llama-3-8B block
 * saves exactly the same bytes with and without --fp8, for each of the three
 * recipes. Under autocast (the HF Trainer's bf16-mixed over fp32 weights),
 * nn.Linear saves autocast's cached bf16 copy of each weight for its input
 * gradient; Float8Linear does not make that copy (its fp8 cast reads the fp32
 * weight), so the block saves 2 bytes x its seven weights less:
 * 2 x (2 x 4096 x 4096 + 2 x 4096 x 1024 + 3 x 4096 x 14336) = 436,207,616. */
START_TEST(test_saved_bytes_per_recipe) {
    est_run run = test_run_of("llama3-8b", "h100");
    run.micro_batch = 1;
    run.seq_len = 64;
    const est_regime cast = {.act = 2, .resid = 2, .autocast = false, .weight = 2, .train_base = true,
                             .adapter = 2};
    const est_regime amp = {.act = 2, .resid = 4, .autocast = true, .weight = 4, .train_base = true,
                            .adapter = 4};
    est_module m = build(&run, &cast);
    const int64_t plain_cast = est_module_saved_bytes(&m);
    m = build(&run, &amp);
    const int64_t plain_amp = est_module_saved_bytes(&m);
    const int64_t weights = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * INT64_C(4096) * 14336;
    const est_fp8 recipes[3] = {EST_FP8_TENSORWISE, EST_FP8_ROWWISE, EST_FP8_ROWWISE_GW_HP};
    for (int i = 0; i < 3; i++) {
        run.fp8 = recipes[i];
        m = build(&run, &cast);
        ck_assert_int_eq(est_module_saved_bytes(&m), plain_cast);
        m = build(&run, &amp);
        ck_assert_int_eq(est_module_saved_bytes(&m), plain_amp - 2 * weights);
    }
}
END_TEST

/* The transients of one Float8Linear, tensorwise, on k_proj of Llama-3-8B
 * (T = 64 tokens, d_in 4096, d_out 1024, bf16). An eager cast of n elements
 * holds x.to(fp32) * scale (4 n) while to_fp8_saturated makes the clamp
 * (4 n) and the fp8 copy (n): 9 n at its peak; an fp8 operand is n bytes and
 * a 4-byte scale.
 * Forward: the input's cast 9 x 64 x 4096 = 2,359,296; then the weight's
 * beside the input's fp8 copy: 262,148 + 9 x 4,194,304 = 38,010,884 (the
 * larger); then the GEMM on both copies: 262,148 + 4,194,308.
 * Backward: grad_output's cast 9 x 65,536 = 589,824; the weight's beside it:
 * 65,540 + 37,748,736 = 37,814,276 (the larger); grad_input with the weight's
 * layout copy 65,540 + 4,194,308 + 4,194,304; the second grad_output cast
 * 65,540 + 4,194,308 + 589,824; the input's 65,540 + 4,194,308 + 65,540 +
 * 2,359,296; grad_weight with both copies 65,540 + 4,194,308 + 65,540 +
 * 262,148 + 65,536 + 262,144. */
START_TEST(test_k_proj_transients) {
    est_run run = test_run_of("llama3-8b", "h100");
    run.micro_batch = 1;
    run.seq_len = 64;
    run.fp8 = EST_FP8_TENSORWISE;
    const est_regime cast = {.act = 2, .resid = 2, .autocast = false, .weight = 2, .train_base = true,
                             .adapter = 2};
    est_module m = build(&run, &cast);
    const est_mop *k = op_named(&m, "k_proj");
    ck_assert_int_eq(k->forward_transient_bytes, 38010884);
    ck_assert_int_eq(k->backward_transient_bytes, 37814276);
    ck_assert_int_eq(k->M, 64);
    ck_assert_int_eq(k->K, 4096);
    ck_assert_int_eq(k->N, 1024);
}
END_TEST

/* The three recipes on a shape where the activations dominate: T 64, d_in
 * 32, d_out 16 (x: 2048 elements, w: 512, grad_output: 1024).
 * Forward, every recipe: the input's cast 9 x 2048 = 18,432 is the peak.
 * Backward, tensorwise (scales 4 bytes each): go0 1028, w 516, go1 1028,
 * x 2052; phases 9216, 1028 + 4608, 1028 + 516 + 512, 1028 + 516 + 9216,
 * 1028 + 516 + 1028 + 18,432 = 21,004 (the peak), and 1028 + 516 + 1028 +
 * 2052 + 1024 + 2048.
 * Rowwise (one fp32 scale per row or column: go0 by 64 rows, w^T by 32, go1
 * by 16 columns, x by 32): go0 1280, w 640, go1 1088, x 2176; grad_input
 * rescaled by an fp32 64 x 32 product (8192): 1280 + 640 + 512 + 8192 =
 * 10,624; the input's cast 1280 + 640 + 1088 + 18,432 = 21,440 (the peak);
 * grad_weight 1280 + 640 + 1088 + 2176 + 1024 + 2048 + 4 x 16 x 32.
 * rowwise_with_gw_hp: go0 rowwise 1280, the weight tensorwise 516; grad_input
 * with the layout copy and the rescale: 1280 + 516 + 512 + 8192 = 10,500 (the
 * peak); grad_weight in bf16 adds nothing.
 * Tensorwise with the weight gathered in fp8 by FSDP2 (no weight cast, the
 * weight FSDP's): forward 18,432 as before; backward 9216, 1028 + 512 (the
 * W^T layout copy), 1028 + 9216, 1028 + 1028 + 18,432 = 20,488 (the peak),
 * 1028 + 1028 + 2052 + 1024 + 2048. */
START_TEST(test_recipe_transients) {
    ck_assert_int_eq(est_fp8_forward_transient_bytes(EST_FP8_TENSORWISE, 64, 32, 16), 18432);
    ck_assert_int_eq(est_fp8_forward_transient_bytes(EST_FP8_ROWWISE, 64, 32, 16), 18432);
    ck_assert_int_eq(est_fp8_backward_transient_bytes(EST_FP8_TENSORWISE, 64, 32, 16), 21004);
    ck_assert_int_eq(est_fp8_backward_transient_bytes(EST_FP8_ROWWISE, 64, 32, 16), 21440);
    ck_assert_int_eq(est_fp8_backward_transient_bytes(EST_FP8_ROWWISE_GW_HP, 64, 32, 16), 10500);
    ck_assert_int_eq(est_fp8_forward_transient_bytes(EST_FP8_NONE, 64, 32, 16), 0);
    ck_assert_int_eq(est_fp8_gathered_forward_transient_bytes(64, 32, 16), 18432);
    ck_assert_int_eq(est_fp8_gathered_backward_transient_bytes(64, 32, 16), 20488);
}
END_TEST

/* One eager cast of 1000 bf16 elements: abs (read 2, write 2), amax (read
 * 2), .to(fp32) (read 2, write 4), * scale (read 4, write 4), clamp (read 4,
 * write 4), .to(fp8) (read 4, write 1): 33 bytes per element, 33,000; ten
 * launches: abs and amax, the scale's four (to(float64), clamp, divide,
 * to(float32)), then .to(fp32), mul, clamp and .to(fp8). An fp32 weight
 * skips .to(fp32): 3 x 4 + 8 + 8 + 5 = 33 bytes too, in 9 launches; rowwise
 * rounds each scale down to a power of two (log2, floor, exp2: 3 more). */
START_TEST(test_cast_bytes) {
    double k = 0;
    ck_assert_close(est_fp8_cast_bytes(1000, 2, false, &k), 33000, 0, 1e-12);
    ck_assert_close(k, 10, 0, 0);
    ck_assert_close(est_fp8_cast_bytes(1000, 4, false, &k), 33000, 0, 1e-12);
    ck_assert_close(k, 9, 0, 0);
    est_fp8_cast_bytes(1000, 2, true, &k);
    ck_assert_close(k, 13, 0, 0);
}
END_TEST

/* Under torch.compile inductor fuses the cast's pointwise chain: one amax
 * reduction (read 2 per bf16 element) and one kernel that scales, clamps
 * and converts (read 2, write 1): 5 bytes per element, 5,000 for 1000, in 2
 * launches, rowwise or not; an fp32 weight 4 + 4 + 1 = 9. */
START_TEST(test_cast_bytes_fused) {
    double k = 0;
    ck_assert_close(est_fp8_cast_bytes_fused(1000, 2, &k), 5000, 0, 1e-12);
    ck_assert_close(k, 2, 0, 0);
    ck_assert_close(est_fp8_cast_bytes_fused(1000, 4, &k), 9000, 0, 1e-12);
}
END_TEST

/* A large square GEMM (8192^3) is compute-bound in both dtypes and has the
 * same tiles, so its bf16 / fp8 time ratio is the ratio of the ceilings:
 * on the H100 SXM both measured (MAMF: fp8_e4m3fn 1402.6, bf16 794.5
 * TFLOP/s); on the L40S neither, so both are the data-sheet peaks (733 fp8,
 * 362.05 bf16) at the same achieved ratio: 733 / 362.05. */
START_TEST(test_gemm_ratio) {
    est_gpu_catalog cat;
    char err[256];
    ck_assert_msg(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0, "%s", err);
    const char *gpus[2] = {"h100-80gb", "l40s-48gb"};
    const double want[2] = {1402.6 / 794.5, 733.0 / 362.05};
    for (int i = 0; i < 2; i++) {
        const est_gpu *g = est_gpu_find(&cat, gpus[i]);
        ck_assert_ptr_nonnull(g);
        const est_gemm_device d16 = est_gemm_device_of(g, 2, g->hbm_gb_per_s * 1e9);
        const est_gemm_device d8 = est_gemm_device_of(g, 1, g->hbm_gb_per_s * 1e9);
        const double t16 = est_gemm_time_s(&d16, 8192, 8192, 8192, 2, 1);
        const double t8 = est_gemm_time_s(&d8, 8192, 8192, 8192, 1, 1);
        ck_assert_close(t16 / t8, want[i], 0, 1e-9);
    }
    /* Ampere has no FP8 tensor cores: no FP8 ceiling. */
    ck_assert_close(est_gpu_fp8_ceiling_tflops(est_gpu_find(&cat, "a100-80gb")), 0, 0, 0);
    est_gpu_catalog_free(&cat);
}
END_TEST

/* The command line: an FP8 run on a card without FP8 tensor cores, under
 * DeepSpeed, with LoRA or in fp32 is refused in one line naming why. */
START_TEST(test_refusals) {
    const char *cases[][2] = {
        {"--model llama3-8b --gpu a100-80gb --framework fsdp --zero 3 --gpus 8 --fp8 tensorwise",
         "no FP8 tensor cores"},
        {"--model llama3-8b --gpu rtx3090-24gb --fp8 rowwise", "no FP8 tensor cores"},
        {"--model llama3-8b --gpu h100 --framework deepspeed --zero 3 --gpus 8 --fp8 tensorwise",
         "--framework deepspeed is not"},
        {"--model llama3-8b --gpu h100 --lora-rank 16 --fp8 tensorwise", "LoRA"},
        {"--model llama3-8b --gpu h100 --framework hf --precision fp32 --fp8 tensorwise", "bf16 compute"},
        {"--model llama3-8b --gpu h100 --fp8 delayed", "must be none, tensorwise"},
        {"--model llama3-8b --gpu h100 --gpus 8 --framework fsdp --fsdp-version 2 --zero 3 --fp8 rowwise "
         "--fsdp-float8-all-gather", "needs --fp8 tensorwise"},
        {"--model llama3-8b --gpu h100 --gpus 8 --framework fsdp --zero 3 --fp8 tensorwise "
         "--fsdp-float8-all-gather", "FSDP2's"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        test_cmd_result *r = test_ftest(cases[i][0]);
        ck_assert_msg(r->status == 2, "%s: exit %d", cases[i][0], r->status);
        ck_assert_int_eq(r->err_lines, 1);
        ck_assert_msg(strstr(r->err, cases[i][1]), "%s: %s", cases[i][0], r->err);
    }
}
END_TEST

/* axolotl's fp8: true is torchao's default (tensorwise) recipe through
 * accelerate; --fp8 given wins. */
START_TEST(test_axolotl_key) {
    char path[] = "/tmp/ftest-fp8-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "w");
    fputs("fp8: true\nbf16: true\nflash_attention: true\nmicro_batch_size: 1\nsequence_len: 1024\n", f);
    fclose(f);
    est_run run;
    char err[256];
    char *argv[] = {"ftest", "--model", "llama3-8b", "--gpu", "h100", "--axolotl", path, NULL};
    ck_assert_msg(test_cli_build(7, argv, &run, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(run.fp8, EST_FP8_TENSORWISE);
    ck_assert_ptr_nonnull(strstr(run.settings_from, "fp8"));
    char *argv2[] = {"ftest", "--model", "llama3-8b", "--gpu", "h100", "--axolotl", path, "--fp8", "rowwise", NULL};
    ck_assert_msg(test_cli_build(9, argv2, &run, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(run.fp8, EST_FP8_ROWWISE);
    /* fp8_enable_fsdp_float8_all_gather (FSDP2 only, as axolotl's
     * check_fp8_config requires): the weights gathered in fp8. */
    f = fopen(path, "w");
    fputs("fp8: true\nflash_attention: true\nfp8_enable_fsdp_float8_all_gather: true\nfsdp_version: 2\n"
          "fsdp_config:\n  reshard_after_forward: true\n", f);
    fclose(f);
    char *argv3[] = {"ftest", "--model", "llama3-8b", "--gpu", "h100", "--gpus", "8", "--axolotl", path, NULL};
    ck_assert_msg(test_cli_build(9, argv3, &run, err, sizeof err) == 0, "%s", err);
    ck_assert(run.fp8_all_gather);
    ck_assert_int_eq(run.fp8, EST_FP8_TENSORWISE);
    unlink(path);
}
END_TEST

/* FSDP2 with --fsdp-float8-all-gather (torchao fsdp_utils.py
 * WeightWithDynamicFloat8CastTensor): each Float8Linear weight is cast to fp8
 * on its shard and gathered as 1 byte per element instead of bf16's 2; the
 * Linear then casts no weight. Llama-3-8B on 8 x H100, FULL_SHARD, one
 * sequence of 4096: a block's seven weights are 4096 x (2 x 4096 + 2 x 1024 +
 * 3 x 14336) = 218,103,808 elements.
 *   Wire: FULL_SHARD gathers every block twice per step (forward and
 *   backward), a ring all-gather sending 7/8 of the gathered bytes: 32 blocks
 *   x 218,103,808 bytes fewer x 2 x 7/8 = 12,213,813,248 bytes fewer per rank.
 *   Memory: at the allocated peak (the same moment in both) FSDP2 holds one
 *   block's unsharded weights: 218,103,808 bytes fewer in the comm category.
 * The casts' saving shows in the time: fewer bytes moved, so a shorter step. */
START_TEST(test_fsdp2_float8_all_gather) {
    est_run run = test_run_of("llama3-8b", "h100");
    run.framework = EST_FW_FSDP;
    run.fsdp_version = EST_FSDP2;
    run.zero_stage = 3;
    run.gpus_per_node = 8;
    run.precision = EST_PREC_BF16_MIXED;
    run.micro_batch = 1;
    run.seq_len = 4096;
    run.fp8 = EST_FP8_TENSORWISE;
    est_estimate a, b;
    test_estimate(&run, &a);
    run.fp8_all_gather = true;
    test_estimate(&run, &b);
    const double block = 4096.0 * (2 * 4096 + 2 * 1024 + 3 * 14336);
    ck_assert_close(block, 218103808.0, 0, 0);
    ck_assert_close(a.time.comm_bytes - b.time.comm_bytes, 32 * block * 2 * 7.0 / 8.0, 0, 1e-9);
    ck_assert_int_eq(a.peak_index, b.peak_index);
    ck_assert_int_eq(a.breakdown[EST_CAT_COMM] - b.breakdown[EST_CAT_COMM], (int64_t)block);
    ck_assert(b.step_time_s < a.step_time_s);
    est_estimate_free(&a);
    est_estimate_free(&b);
}
END_TEST

/* The work of one Float8Linear, k_proj of Llama-3-8B on 64 tokens (d_in
 * 4096, d_out 1024, bf16): events in order, bytes by hand (33 per element
 * per cast, test_cast_bytes; 2 per element per layout copy; a rowwise rescale
 * of M x N: 4 + 2 + 4 + 2 = 12 per element).
 * Forward: the input's cast 33 x 262,144 = 8,650,752, the weight's
 * 33 x 4,194,304 = 138,412,032, one fp8 GEMM (64, 4096, 1024).
 * Backward, tensorwise: grad_output's cast 33 x 65,536 = 2,162,688, the
 * weight's 138,412,032, its copy 8,388,608, the fp8 grad_input GEMM (64,
 * 1024, 4096), grad_output's second cast 2,162,688, the input's 8,650,752,
 * the copies of grad_output^T 131,072 and of x 524,288, the fp8 grad_weight
 * GEMM (1024, 64, 4096): 160,432,128 bytes, two 1-byte GEMMs.
 * rowwise-gw-hp: 2,162,688 + 138,412,032 + 8,388,608 + the rescale
 * 12 x 64 x 4096 = 3,145,728: 152,109,056 bytes, an fp8 grad_input GEMM and a
 * bf16 grad_weight GEMM. */
static void sum_work(const est_step *st, double *bytes, double gemm_bytes[4], int *n_gemm) {
    *bytes = 0;
    *n_gemm = 0;
    for (size_t i = 0; i < st->work_count; i++) { /* the units' work events */
        const est_event *e = &st->work[i];
        if (e->kind == EST_EV_MEMORY_OP) *bytes += e->u.op.bytes;
        if (e->kind == EST_EV_GEMM && *n_gemm < 4) gemm_bytes[(*n_gemm)++] = e->u.gemm.elem_bytes;
    }
}

START_TEST(test_linear_work) {
    est_run run = test_run_of("llama3-8b", "h100");
    run.fp8 = EST_FP8_TENSORWISE;
    const struct { bool backward; est_fp8 f; double bytes; int gemms; double second; } cases[] = {
        {false, EST_FP8_TENSORWISE, 8650752.0 + 138412032.0, 1, 0},
        {true, EST_FP8_TENSORWISE, 160432128.0, 2, 1},
        {true, EST_FP8_ROWWISE_GW_HP, 152109056.0, 2, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run.fp8 = cases[i].f;
        est_step st;
        est_step_init(&st);
        est_step_unit(&st, cases[i].backward ? EST_UNIT_BLOCK_BWD : EST_UNIT_BLOCK_FWD, 0);
        est_work_fp8_linear(&st, &run, 64, 4096, 1024, 2, 2, cases[i].backward);
        est_step_unit_end(&st);
        double bytes, gb[4];
        int n;
        sum_work(&st, &bytes, gb, &n);
        ck_assert_close(bytes, cases[i].bytes, 0, 1e-12);
        ck_assert_int_eq(n, cases[i].gemms);
        ck_assert_close(gb[0], 1, 0, 0);
        if (n > 1) ck_assert_close(gb[1], cases[i].second, 0, 0);
        est_step_free(&st);
    }
}
END_TEST

Suite *suite_fp8(void);
Suite *suite_fp8(void) {
    Suite *s = suite_create("fp8");
    TCase *tc = tcase_create("fp8");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_saved_bytes_per_recipe);
    tcase_add_test(tc, test_cast_bytes_fused);
    tcase_add_test(tc, test_k_proj_transients);
    tcase_add_test(tc, test_recipe_transients);
    tcase_add_test(tc, test_cast_bytes);
    tcase_add_test(tc, test_gemm_ratio);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_axolotl_key);
    tcase_add_test(tc, test_fsdp2_float8_all_gather);
    tcase_add_test(tc, test_linear_work);
    suite_add_tcase(s, tc);
    return s;
}
