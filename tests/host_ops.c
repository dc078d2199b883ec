/* The host's ATen ops of one decoder block (model/host_ops.c), derived here
 * by hand from the block description's op listing and PyTorch's backward
 * formulas, and held against what TorchDispatchMode counted when the real
 * code ran (calibrate/host/count_host_ops.py: torch 2.11, transformers 5.17,
 * peft 0.21, on the CPU; the differences are written out below). */
#include <check.h>
#include <stdlib.h>

#include "block.h"
#include "host_ops.h"
#include "seam_regime.h"
#include "test_util.h"

static est_host_ops block_ops(const char *const *argv, int argc) {
    est_run run;
    char err[256];
    ck_assert_msg(test_cli_build(argc, (char **)argv, &run, err, sizeof err) == 0, "%s", err);
    est_module *m = malloc(sizeof *m);
    ck_assert_ptr_nonnull(m);
    const est_regime g = est_block_regime(&run);
    ck_assert_msg(est_module_block(&run, &g, false, m, err, sizeof err) == 0, "%s", err);
    const est_host_ops h = est_module_host_ops(m);
    free(m);
    return h;
}

/* Full fine-tuning of a Llama-3.2-1B block under the HF Trainer, bf16 autocast
 * over fp32 weights.
 * Forward: two RMSNorms (pow, mean, + eps, rsqrt, two muls: 12); autocast's
 * casts of the five Linear inputs q, k, v, gate, up (5) and the seven weights
 * (7); seven Linears at 4 (t, view, mm, _unsafe_view: 28); RoPE for q and
 * k: x*cos, -x2, cat, *sin, add (10), with cos and sin the model's, made once
 * per forward in the hidden states' dtype, fp32 here (block_ends.c
 * rope_shared; transformers >= 4.44), so q*cos promotes q and k to fp32 and
 * autocast casts both back before SDPA (2); repeat_kv of k and v (2); SDPA
 * (1); two residual adds, silu, its product with up (4); the attention's
 * views (q, k, v view + transpose 6, cos/sin unsqueeze 2, rotate_half's
 * slices 4, output transpose + reshape 2: 14).
 * 12 + 5 + 7 + 28 + 10 + 2 + 2 + 1 + 4 + 14 = 85.
 * Backward: seven Linears with input and weight gradients at 8 (view, t mm,
 * view; t mm t; t: 56); the 14 casts' _to_copy (14); each RMSNorm: pow 3,
 * mean 2, + eps 0, rsqrt 3, x * rsqrt 2 muls + the sum of the per-token
 * rsqrt, weight * y 2 muls + the weight's sum (14; 28); RoPE for q and k:
 * x*cos 1, neg 1, cat 2, *sin 1 (10); repeat_kv 2; SDPA 1; silu 1, its
 * product 2 (3); the views less the unsqueezes (12); gradient sums: the
 * block's input and the mid-block residual each read by pow, the normalizing
 * mul and the residual add (2 + 2), the attention norm's output by three
 * casts (2), the MLP norm's by two (1), q and k each by x*cos, neg and cat
 * (2 + 2): 11; AccumulateGrad for the nine parameters (9).
 * 56 + 14 + 28 + 10 + 2 + 1 + 3 + 12 + 11 + 9 = 146.
 * Modules: the layer, its attention, MLP and act_fn, seven Linears, two
 * norms: 13. */
START_TEST(test_llama_block_full) {
    const char *argv[] = {"ftest", "--model", "llama3.2-1b", "--framework", "hf"};
    const est_host_ops h = block_ops(argv, 5);
    ck_assert_double_eq(h.forward, 85);
    ck_assert_double_eq(h.backward, 146);
    ck_assert_double_eq(h.module_calls, 13);
}
END_TEST

/* LoRA r16 on all seven Linears of the same block (bf16 base, fp32
 * adapters under autocast, peft 0.21 tuners/lora/layer.py Linear.forward).
 * Forward: two RMSNorms with their fp32 cast and cast back (8 each: 16);
 * per adapted Linear the base Linear 4, x.to(lora_A dtype) 1, autocast's
 * input cast 1, lora_A's weight cast 1 and Linear 4, lora_B's cast 1 and
 * Linear 4, * scaling 1, the add 1 (18; x 7 = 126); RoPE 10 (cos and sin
 * are the model's, bf16 like q and k here: no promotion), repeat_kv 2, SDPA
 * 1, residual adds 2, silu 1 and its product 1 (17); views 14.
 * 16 + 126 + 17 + 14 = 173.
 * Backward: each RMSNorm cast 1, pow 3, mean 2, rsqrt 3, x * rsqrt 3, cast
 * back 1, the frozen weight's mul 1 (14; 28); per adapted Linear the frozen
 * base's input gradient 4 (view, t, mm, view), the two input casts 2, the
 * adapters' weight casts 2 and Linears 8 + 8, * scaling 1 (25; x 7 = 175);
 * RoPE 10, repeat_kv 2, SDPA 1, silu 1 and its product 2 (16); views 12;
 * gradient sums: the block input and the mid-block residual each read by the
 * norm's cast and the residual add (1 + 1), their fp32 copies by pow and the
 * normalizing mul (1 + 1), the attention norm's output by three bases and
 * three adapter casts (5), the MLP norm's by two and two (3), o_proj's and
 * down_proj's inputs by base and cast (1 + 1), q and k by their three RoPE
 * ops (2 + 2): 18; AccumulateGrad for the 14 adapter weights.
 * 28 + 175 + 16 + 12 + 18 + 14 = 263.
 * Modules: 13, and per adapted Linear PEFT's LoRA Linear, lora_dropout,
 * lora_A, lora_B (4 x 7 = 28): 41. */
START_TEST(test_llama_block_lora) {
    const char *argv[] = {"ftest",     "--model",        "llama3.2-1b", "--framework", "hf",
                          "--lora-rank", "16", "--lora-targets", "all-linear"};
    const est_host_ops h = block_ops(argv, 9);
    ck_assert_double_eq(h.forward, 173);
    ck_assert_double_eq(h.backward, 263);
    ck_assert_double_eq(h.module_calls, 41);
}
END_TEST

/* Against the real code: TorchDispatchMode's counts per block (the
 * difference between 3 and 2 layers of a small Llama, calibrate/host/
 * count_host_ops.py with torch 2.11.0, transformers 5.17.0, peft 0.21.2 on
 * the CPU): full fine-tuning 92 forward, 163 backward, 13 modules; LoRA on
 * all Linears 185, 276, 41. Our counts are a little lower: the CPU's
 * autocast casts more (22 _to_copy in backward where CUDA's casts the twelve
 * Linear operands) and the engine's detach of a few non-leaf gradients. The
 * total may not fall more than 12% short, nor exceed it. */
START_TEST(test_counts_against_dispatch_mode) {
    const char *full[] = {"ftest", "--model", "llama3.2-1b", "--framework", "hf"};
    const char *lora[] = {"ftest",     "--model",        "llama3.2-1b", "--framework", "hf",
                          "--lora-rank", "16", "--lora-targets", "all-linear"};
    const est_host_ops f = block_ops(full, 5), l = block_ops(lora, 9);
    const double measured_full = 92 + 163, measured_lora = 185 + 276;
    ck_assert_double_le(f.forward + f.backward, measured_full);
    ck_assert_double_ge(f.forward + f.backward, 0.88 * measured_full);
    ck_assert_double_le(l.forward + l.backward, measured_lora);
    ck_assert_double_ge(l.forward + l.backward, 0.88 * measured_lora);
    ck_assert_double_eq(f.module_calls, 13);
    ck_assert_double_eq(l.module_calls, 41);
}
END_TEST

Suite *suite_host_ops(void);
Suite *suite_host_ops(void) {
    Suite *s = suite_create("host_ops");
    TCase *tc = tcase_create("block");
    tcase_add_test(tc, test_llama_block_full);
    tcase_add_test(tc, test_llama_block_lora);
    tcase_add_test(tc, test_counts_against_dispatch_mode);
    suite_add_tcase(s, tc);
    return s;
}
