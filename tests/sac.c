/* Checkpointing policies on autograd's step (estimator/model/sac.h,
 * estimator/frameworks/autograd.c, work.c): torchtitan's op-level selective
 * checkpointing and its every-N-th-block option, each against a derivation
 * written out here from torchtitan 0.2.0's and torch 2.6's source as
 * docs/method.md ("Op-level selective checkpointing") walks it. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "estimate.h"
#include "hf_modeling.h"
#include "sac.h"
#include "test_util.h"

/* Llama-3-8B under FSDP2 in bf16 (module cast: c = r = 2), SDPA, b 1, s 2048:
 * T = 2048, h = q = 4096, kv = 1024, f = 14336, 32 heads, 32 blocks.
 * torchtitan's policy counts the block's mm calls in forward order, q_proj 1,
 * k_proj 2, v_proj 3, o_proj 4, gate 5, up 6, down 7, and saves the odd ones,
 * plus SDPA (memory-efficient kernel: output and log-sum-exp, rows padded to
 * 32). Per block it keeps, beside the checkpoint's input:
 *   q_proj out  T x 4096 x 2      v_proj out  T x 1024 x 2
 *   gate out    T x 14336 x 2     down out    T x 4096 x 2
 *   SDPA out    T x 4096 x 2      lse         4 x 1 x 32 x 2048
 * Once every block has gone forward (the "loss" moment) the op-level run
 * holds 32 times that more activations than the fully checkpointed one. */
START_TEST(test_op_level_kept) {
    est_run run = test_run_of("llama3-8b", "h100");
    run.framework = EST_FW_FSDP;
    run.fsdp_version = EST_FSDP2;
    run.zero_stage = 3;
    run.gpus_per_node = 8;
    run.precision = EST_PREC_BF16;
    run.attention = EST_ATTN_SDPA;
    run.micro_batch = 1;
    run.seq_len = 2048;
    const int64_t T = 2048;
    const int64_t kept = T * 2 * (4096 + 1024 + 14336 + 4096) + T * 4096 * 2 + 4 * 32 * 2048;
    est_module *m = malloc(sizeof *m);
    char err[200];
    run.checkpointing = EST_CKPT_SELECTIVE_OP;
    est_regime g = est_regime_of(&run);
    ck_assert_int_eq(est_sac_block(&run, &g, m, err, sizeof err), 0);
    ck_assert_int_eq(est_sac_kept_bytes(m), kept);
    free(m);
    est_estimate sac, full;
    test_estimate(&run, &sac);
    run.checkpointing = EST_CKPT_FULL;
    test_estimate(&run, &full);
    ck_assert_int_eq(test_row(&sac, "loss")->bytes[EST_CAT_ACTIVATIONS] -
                         test_row(&full, "loss")->bytes[EST_CAT_ACTIVATIONS],
                     32 * kept);
    /* Time: the recompute skips the saved mm, q (h -> 4096), v (h -> 1024),
     * gate (h -> f) and down (f -> h), 2 T d_in d_out FLOPs each, and SDPA's
     * forward (4 b s^2 q, halved by the causal kernel) in each of 32 blocks. */
    const double gemm = 2.0 * T * (4096.0 * 4096 + 4096.0 * 1024 + 4096.0 * 14336 + 14336.0 * 4096);
    const double attn = 4.0 * 2048 * 2048 * 4096 / 2;
    ck_assert_double_eq_tol(full.time.executed_flops - sac.time.executed_flops, 32 * (gemm + attn),
                            1e-6 * full.time.executed_flops);
    est_estimate_free(&sac);
    est_estimate_free(&full);
}
END_TEST

/* Qwen1.5-0.5B (h = q = 1024, f = 2816, 16 heads, q/k/v with bias), SDPA,
 * b 1, s 512, bf16: q, k and v are F.linear with a bias over 3-D input, one
 * addmm each (torch 2.6 Linear.cpp), neither counted nor saved; o_proj is mm
 * 1 (saved), gate 2, up 3 (saved), down 4. Kept: o_proj's T x h, up's T x f,
 * SDPA's output T x q and log-sum-exp 4 x 16 x 512, all 2 bytes but the
 * last. Under flash-attn (its own kernel, not on the list) the attention
 * keeps nothing. */
START_TEST(test_op_level_bias_and_flash) {
    est_run run = test_run_of("qwen1.5-0.5b", "h100");
    run.framework = EST_FW_FSDP;
    run.precision = EST_PREC_BF16;
    run.attention = EST_ATTN_SDPA;
    run.checkpointing = EST_CKPT_SELECTIVE_OP;
    run.micro_batch = 1;
    run.seq_len = 512;
    const int64_t T = 512, attn = T * 1024 * 2 + 4 * 16 * 512;
    est_module *m = malloc(sizeof *m);
    char err[200];
    est_regime g = est_regime_of(&run);
    ck_assert_int_eq(est_sac_block(&run, &g, m, err, sizeof err), 0);
    ck_assert_int_eq(est_sac_kept_bytes(m), T * 2 * (1024 + 2816) + attn);
    run.attention = EST_ATTN_FLASH;
    ck_assert_int_eq(est_sac_block(&run, &g, m, err, sizeof err), 0);
    ck_assert_int_eq(est_sac_kept_bytes(m), T * 2 * (1024 + 2816));
    free(m);
}
END_TEST

/* Every second block checkpointed (torchtitan selective_ac_option "2": blocks
 * 1, 3, ..., 31 of 0..31): at the "loss" moment the 16 checkpointed blocks
 * keep their input, the other 16 everything, so the activations are the
 * mean of the un-checkpointed and the fully checkpointed runs' (the KV cache
 * is off in all three: HF makes none under checkpointing). */
START_TEST(test_every_second_block) {
    est_run run = test_run_of("llama3-8b", "h100");
    run.framework = EST_FW_FSDP;
    run.zero_stage = 3;
    run.gpus_per_node = 8;
    run.precision = EST_PREC_BF16;
    run.attention = EST_ATTN_FLASH;
    run.kv_cache_off = true;
    run.seq_len = 2048;
    est_estimate none, full, half;
    test_estimate(&run, &none);
    run.checkpointing = EST_CKPT_FULL;
    test_estimate(&run, &full);
    run.ckpt_every = 2;
    test_estimate(&run, &half);
    const int64_t a_none = test_row(&none, "loss")->bytes[EST_CAT_ACTIVATIONS];
    const int64_t a_full = test_row(&full, "loss")->bytes[EST_CAT_ACTIVATIONS];
    ck_assert_int_eq(2 * test_row(&half, "loss")->bytes[EST_CAT_ACTIVATIONS], a_none + a_full);
    ck_assert_int_lt(a_full, a_none);
    /* the recompute: half the blocks' forward GEMMs again */
    ck_assert_double_eq_tol(2 * half.time.executed_flops, none.time.executed_flops + full.time.executed_flops,
                            1e-9 * full.time.executed_flops);
    est_estimate_free(&none);
    est_estimate_free(&full);
    est_estimate_free(&half);
}
END_TEST

/* Refused in one line, never ignored. */
START_TEST(test_policy_refusals) {
    est_run run = test_run_of("llama3-8b", "h100");
    char err[200];
    run.framework = EST_FW_DEEPSPEED;
    run.checkpointing = EST_CKPT_SELECTIVE_OP;
    ck_assert_int_eq(est_run_validate(&run, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "selective-op"));
    run.framework = EST_FW_HF;
    run.checkpointing = EST_CKPT_NONE;
    run.ckpt_every = 2;
    ck_assert_int_eq(est_run_validate(&run, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "--ckpt-every"));
}
END_TEST

Suite *suite_sac(void);
Suite *suite_sac(void) {
    Suite *s = suite_create("sac");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_op_level_kept);
    tcase_add_test(tc, test_op_level_bias_and_flash);
    tcase_add_test(tc, test_every_second_block);
    tcase_add_test(tc, test_policy_refusals);
    suite_add_tcase(s, tc);
    return s;
}
