/* torch.compile on autograd's step (estimator/model/compile.h): what
 * AOTAutograd's min-cut partitioner (torch 2.6.0 _functorch/partitioners.py)
 * saves for a decoder block and the fused forward's memory traffic, against
 * derivations written out here from its rules as docs/method.md
 * ("torch.compile") states them. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "block.h"
#include "compile.h"
#include "estimate.h"
#include "hf_modeling.h"
#include "test_util.h"

static est_run llama_fsdp(void) {
    est_run run = test_run_of("llama3-8b", "h100");
    run.framework = EST_FW_FSDP;
    run.zero_stage = 3;
    run.gpus_per_node = 8;
    run.precision = EST_PREC_BF16;
    run.attention = EST_ATTN_SDPA;
    run.micro_batch = 1;
    run.seq_len = 2048;
    run.kv_cache_off = true;
    return run;
}

/* Llama-3-8B under FSDP in bf16 (module cast, c = 2), SDPA with GQA (32 query,
 * 8 KV heads: repeat_kv copies K and V to 32 heads), b 1, s 2048: T = 2048,
 * h = q = 4096, f = 14336. The partitioner's rules give, per block:
 *  - the block input x (a primal, banned from recompute): both norms'
 *    fp32 copies and normalized products recompute from it and the saved
 *    rsqrt, so x is cut instead of x.float() (4 bytes, and all its readers
 *    fuse: weight doubled)                                          2 T h
 *  - each norm's rsqrt: mean is a reduction 4096 times smaller than its
 *    input (banned), rsqrt as small                              2 x 4 T
 *  - each norm's output: a Linear reads it for its weight gradient
 *    (materialized in backward: banned)                          2 x 2 T h
 *  - q after RoPE and the repeat_kv copies of k and v: SDPA's backward
 *    reads them (not fusible)                                    3 x 2 T q
 *  - SDPA's output and log-sum-exp (compute-intensive)   2 T q + 4 x 32 x 2048
 *  - the residual sum x + o_proj(o): the MLP norm's input         2 T h
 *  - gate and up (mm outputs; silu's and the product's backward read them)
 *    and their product (down_proj's input)                       3 x 2 T f
 *  - RoPE's cos and sin: the model's (stack 2025-02, transformers 4.49:
 *    LlamaModel.rotary_emb once per forward), inputs of the block's graph,
 *    which its backward reads as they are                    2 x 2 s d
 *    (d = 128; on 4.40 each layer made them from the position ids, and
 *    they recomputed).
 * Eager saves, beside these, x.float() for each norm, each normalized
 * product's cast and silu(gate): (4 + 2) T h twice and 2 T f, less what
 * compile adds (x, the residual sum). */
START_TEST(test_llama_cut) {
    est_run run = llama_fsdp();
    const int64_t T = 2048, h = 4096, q = 4096, f = 14336;
    const int64_t cut = 2 * T * h + 2 * 4 * T + 2 * 2 * T * h + 3 * 2 * T * q + 2 * T * q + 4 * 32 * 2048 +
                        2 * T * h + 3 * 2 * T * f + 2 * 2 * 2048 * 128;
    const int64_t eager_extra = 2 * (4 + 2) * T * h + 2 * T * f - 2 * 2 * T * h;
    est_module *m = malloc(sizeof *m);
    char err[200];
    est_regime g = est_regime_of(&run);
    ck_assert_int_eq(est_module_block(&run, &g, false, m, err, sizeof err), 0);
    const int64_t eager = est_module_saved_bytes(m);
    ck_assert_int_eq(est_compile_partition(m), cut);
    ck_assert_int_eq(est_module_saved_bytes(m), cut);
    ck_assert_int_eq(eager - cut, eager_extra);
    /* The fused forward writes what must exist in memory: both norms'
     * outputs and rsqrt, q after RoPE, the two repeat_kv copies, the
     * residual sum, the product and the block's output (10 kernels); it
     * reads x, the q, k, v, o_proj, gate, up and down outputs, the residual
     * sum, both rsqrt, both norm weights and the model's cos and sin
     * (kv = 1024):
     *   writes 2 T (4 h + 3 q + f) + 8 T, reads 2 T (4 h + q + 2 kv + 2 f) + 8 T + 4 h + 2 x 2 s d. */
    double kernels = 0;
    const double bytes = est_compile_elementwise_bytes(m, &kernels);
    const double want = 2.0 * T * (4 * h + 3 * q + f) + 8.0 * T + 2.0 * T * (4 * h + q + 2 * 1024 + 2 * f) +
                        8.0 * T + 4.0 * h + 2.0 * 2 * 2048 * 128;
    ck_assert_double_eq_tol(bytes, want, 0.5);
    ck_assert_double_eq_tol(kernels, 10, 0.5);
    free(m);
}
END_TEST

/* On the step: with every block's forward done (the "loss" moment) the
 * compiled run holds 32 x (eager's saved bytes - the cut) fewer bytes of
 * activations; the GEMM and attention FLOPs are eager's and the step is
 * shorter (fewer bytes through memory). */
START_TEST(test_compiled_step) {
    est_run run = llama_fsdp();
    est_module *m = malloc(sizeof *m);
    char err[200];
    est_regime g = est_regime_of(&run);
    ck_assert_int_eq(est_module_block(&run, &g, false, m, err, sizeof err), 0);
    const int64_t eager_block = est_module_saved_bytes(m);
    const int64_t cut = est_compile_partition(m);
    free(m);
    est_estimate eager, comp;
    test_estimate(&run, &eager);
    run.compiled = true;
    test_estimate(&run, &comp);
    ck_assert_int_eq(test_row(&eager, "loss")->bytes[EST_CAT_ACTIVATIONS] -
                         test_row(&comp, "loss")->bytes[EST_CAT_ACTIVATIONS],
                     32 * (eager_block - cut));
    ck_assert_double_eq_tol(comp.time.executed_flops, eager.time.executed_flops, 1e-9 * eager.time.executed_flops);
    ck_assert(comp.time.step_s < eager.time.step_s);
    est_estimate_free(&eager);
    est_estimate_free(&comp);
}
END_TEST

/* With full checkpointing inside the compiled graph every op of the
 * checkpointed region is tagged for recompute (the partitioner's
 * must_recompute wins over its bans), so the cut is the region's input: the
 * forward keeps what eager checkpointing keeps (the "loss" moment holds the
 * same activations), the recompute and backward run the same GEMMs, and
 * only the elementwise traffic shrinks. */
START_TEST(test_compiled_checkpointed) {
    est_run run = llama_fsdp();
    run.checkpointing = EST_CKPT_FULL;
    est_estimate eager, comp;
    test_estimate(&run, &eager);
    run.compiled = true;
    test_estimate(&run, &comp);
    ck_assert_int_eq(test_row(&comp, "loss")->bytes[EST_CAT_ACTIVATIONS],
                     test_row(&eager, "loss")->bytes[EST_CAT_ACTIVATIONS]);
    ck_assert_double_eq_tol(comp.time.executed_flops, eager.time.executed_flops, 1e-9 * eager.time.executed_flops);
    ck_assert(comp.time.step_s < eager.time.step_s);
    est_estimate_free(&eager);
    est_estimate_free(&comp);
}
END_TEST

/* Refused in one line where the mechanism is not modelled. */
START_TEST(test_compile_refusals) {
    est_run run = llama_fsdp();
    char err[200];
    run.compiled = true;
    run.lora.rank = 16;
    run.framework = EST_FW_HF;
    run.zero_stage = 0;
    run.gpus_per_node = 1;
    run.quant = EST_QUANT_NF4;
    ck_assert_int_eq(est_run_validate(&run, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "--compile with --quant"), "%s", err);
    run = llama_fsdp();
    run.compiled = true;
    run.framework = EST_FW_FTRAIN;
    ck_assert_int_eq(est_run_validate(&run, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "--compile"));
}
END_TEST

Suite *suite_compile(void);
Suite *suite_compile(void) {
    Suite *s = suite_create("compile");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_llama_cut);
    tcase_add_test(tc, test_compiled_step);
    tcase_add_test(tc, test_compiled_checkpointed);
    tcase_add_test(tc, test_compile_refusals);
    suite_add_tcase(s, tc);
    return s;
}
