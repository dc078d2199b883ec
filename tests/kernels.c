/* Fused kernels (--kernels; estimator/model/kernels.c, block_kernels.c):
 * what each custom autograd Function keeps for backward, against figures
 * derived here by hand from its ctx.save_for_backward (axolotl 0.18.0
 * src/axolotl/kernels/lora.py; xformers csrc/swiglu/swiglu_packedw.cpp)
 * and from what the modeling code it replaces saves (derivatives.yaml's
 * rules, written out in tests/peft.c and docs/method.md). */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "block.h"
#include "estimate.h"
#include "optimizers.h"
#include "kernels.h"
#include "lora.h"
#include "test_util.h"

/* Llama-3.2-3B: h 3072, 24 heads x 128 = 3072, 8 KV heads x 128 = 1024,
 * f 8192; micro-batch 4 x 768 = T 3072 tokens; LoRA r 16 on all seven
 * Linears, no dropout, bf16 base. */
enum { T = 4 * 768, H = 3072, QW = 3072, KVW = 1024, F = 8192, R = 16 };

static est_run lora_run(uint32_t kernels) {
    est_run r = test_run_of("llama3.2-3b", "l40s-48gb");
    r.framework = EST_FW_HF;
    r.precision = EST_PREC_BF16;
    r.micro_batch = 4;
    r.seq_len = 768;
    r.lora.rank = R;
    r.lora.targets = EST_LORA_ALL_LINEAR;
    r.kernels = kernels;
    return r;
}

/* seam_hf.c's pure-bf16 regimes: LoRA (fp32 adapters) and full fine-tuning. */
static const est_regime LORA_BF16 = {.act = 2, .resid = 2, .weight = 2, .adapter = 4};
static const est_regime FULL_BF16 = {.act = 2, .resid = 2, .weight = 2, .adapter = 2, .train_base = true};

static int64_t saved_of(const est_run *r, const est_regime *g) {
    est_module *m = malloc(sizeof *m);
    char err[256];
    ck_assert_msg(est_module_block(r, g, false, m, err, sizeof err) == 0, "%s", err);
    int64_t s = est_module_saved_bytes(m);
    free(m);
    return s;
}

/* LoRA_MLP. PEFT's path saves, per adapter on gate and up, x.to(fp32) for
 * lora_A (T h 4) and A's output for lora_B (T r 4); act(gate) saves gate,
 * the product saves act(gate) and up (3 x T f 2); down's adapter saves the
 * product's fp32 copy (T f 4) and A's output (T r 4). The bf16 base saves no
 * activation (its weight is frozen).
 *   PEFT:   8 T h + 12 T r + 10 T f
 * The kernel saves X (T h 2: nothing else keeps the norm's output), gate and
 * up (2 x T f 2), and the six adapters .to(bf16): (r h + f r) each for gate
 * and up, (r f + h r) for down = 3 r (h + f) x 2.
 *   kernel: 2 T h + 4 T f + 6 r (h + f)
 *   PEFT - kernel = 6 T h + 12 T r + 6 T f - 6 r (h + f). */
START_TEST(test_lora_mlp_saved) {
    est_run plain = lora_run(0), k = lora_run(EST_KERNEL_BIT(EST_KERNEL_LORA_MLP));
    const int64_t want = 6LL * T * H + 12LL * T * R + 6LL * T * F - 6LL * R * (H + F);
    ck_assert_int_eq(saved_of(&plain, &LORA_BF16) - saved_of(&k, &LORA_BF16), want);
}
END_TEST

/* LoRA_QKV. PEFT saves, per adapter on q, k and v, its own x.to(fp32)
 * (T h 4) and A's output (T r 4): 12 T h + 12 T r. The kernel saves X once
 * (T h 2) and the adapters .to(bf16): q (r h + qw r), k and v (r h + kvw r)
 * each, x 2 bytes.
 *   PEFT - kernel = 10 T h + 12 T r - 2 r (3 h + qw + 2 kvw). */
START_TEST(test_lora_qkv_saved) {
    est_run plain = lora_run(0), k = lora_run(EST_KERNEL_BIT(EST_KERNEL_LORA_QKV));
    const int64_t want = 10LL * T * H + 12LL * T * R - 2LL * R * (3 * H + QW + 2 * KVW);
    ck_assert_int_eq(saved_of(&plain, &LORA_BF16) - saved_of(&k, &LORA_BF16), want);
}
END_TEST

/* LoRA_O. PEFT saves the attention output's fp32 copy (T qw 4) and A's
 * output (T r 4); the kernel saves X, the attention output the attention
 * already keeps (no new bytes), and A, B .to(bf16): (r qw + h r) x 2.
 *   PEFT - kernel = 4 T qw + 4 T r - 2 r (qw + h). */
START_TEST(test_lora_o_saved) {
    est_run plain = lora_run(0), k = lora_run(EST_KERNEL_BIT(EST_KERNEL_LORA_O));
    const int64_t want = 4LL * T * QW + 4LL * T * R - 2LL * R * (QW + H);
    ck_assert_int_eq(saved_of(&plain, &LORA_BF16) - saved_of(&k, &LORA_BF16), want);
}
END_TEST

/* xformers' SwiGLUPackedWeights in full bf16 fine-tuning. LlamaMLP saves x
 * for gate_proj's and up_proj's weight gradients (one tensor, T h 2),
 * act(gate) saves gate, the product saves act(gate) and up, down_proj saves
 * the product: 2 T h + 4 x T f 2. The Function saves x, x1 (gate), x2 (up)
 * and the weights (parameters: no new bytes): 2 T h + 2 x T f 2.
 *   LlamaMLP - fused = 4 T f. */
START_TEST(test_fused_mlp_saved) {
    est_run plain = lora_run(0), k = lora_run(EST_KERNEL_BIT(EST_KERNEL_FUSED_MLP));
    plain.lora.rank = k.lora.rank = 0;
    plain.lora.targets = k.lora.targets = 0;
    ck_assert_int_eq(saved_of(&plain, &FULL_BF16) - saved_of(&k, &FULL_BF16), 4LL * T * F);
}
END_TEST

/* The list, and what each kernel needs. */
START_TEST(test_kernels_cli) {
    uint32_t bits;
    char err[256];
    ck_assert_int_eq(est_kernels_parse("lora-qkv,lora-o,lora-mlp", &bits, err, sizeof err), 0);
    ck_assert_uint_eq(bits, 7u);
    ck_assert_int_eq(est_kernels_parse("none", &bits, err, sizeof err), 0);
    ck_assert_uint_eq(bits, 0u);
    ck_assert_int_lt(est_kernels_parse("lora-qkv,", &bits, err, sizeof err), 0);
    ck_assert_int_lt(est_kernels_parse("liger", &bits, err, sizeof err), 0);
    ck_assert_ptr_nonnull(strstr(err, "--kernels"));
    test_cmd_result *x = test_ftest("--model llama3.2-3b --lora-rank 8 --lora-targets q,v --kernels lora-qkv");
    ck_assert_int_eq(x->status, 2);
    ck_assert_int_eq(x->err_lines, 1);
    x = test_ftest("--model llama3.2-3b --lora-rank 8 --kernels fused-mlp");
    ck_assert_int_eq(x->status, 2);
    x = test_ftest("--model llama3.2-3b --kernels bogus");
    ck_assert_int_eq(x->status, 2);
    ck_assert_int_eq(x->err_lines, 1);
    x = test_ftest("--model llama3.2-3b --lora-rank 8 --lora-targets all-linear --kernels lora-qkv,lora-o,lora-mlp");
    ck_assert_int_lt(x->status, 2);
}
END_TEST

/* torchao 0.19 AdamW4bit (optim/adam.py, subclass_4bit.py), per state of an
 * n-element parameter: codes n / 2 bytes (two 4-bit codes a byte), scale one
 * fp32 per 128 elements, qmap 16 fp32; tensors below 4096 elements or not a
 * multiple of 128 keep zeros_like(p).
 * LoRA r 16 on q and v of Llama-3.2-3B (h 3072, kv 1024), fp32 adapters:
 *   q A 16 x 3072 = 49152, q B 3072 x 16 = 49152, v A 49152, v B 1024 x 16 = 16384
 *   per state: n/2 + n/128*4 + 64  ->  49152: 24576 + 1536 + 64 = 26176;
 *                                      16384:  8192 +  512 + 64 =  8768
 *   two states, 28 layers: 28 x 2 x (3 x 26176 + 8768) = 4,888,576 bytes.
 * A 2,048-element tensor (below 4096) keeps two fp32 copies: 16,384 bytes. */
START_TEST(test_adamw_4bit_state) {
    est_run r = lora_run(0);
    r.optimizer = EST_OPT_ADAMW_4BIT;
    r.lora.targets = EST_LORA_BIT(EST_LORA_Q) | EST_LORA_BIT(EST_LORA_V);
    est_optimizer_bytes b;
    est_optimizer_bytes_of(&r, 4, &b);
    ck_assert_int_eq(b.state_bytes, 4888576);
    est_tensor_state ts;
    est_optimizer_tensor_state(&r, 2048, 1, 4, &ts);
    ck_assert_int_eq(ts.count, 2);
    ck_assert_int_eq(ts.device[0] + ts.device[1], 16384);
}
END_TEST

/* Cut Cross-Entropy: the head keeps the final norm's output e (T h 2), lse
 * (T fp32) and logit_avg (V fp32) and no T x V tensor. PEFT's frozen head
 * (LoRA) with the standard loss keeps the fp32 log-softmax of the logits,
 * T V 4 (the labels are shifted, stack 2026-07: no shifted copy), and not e
 * (a frozen lm_head saves only its weight for the input gradient).
 * V = 128256:
 *   standard - cce = T V 4 - T h 2 - T 4 - V 4. */
START_TEST(test_cce_saved) {
    est_run r = lora_run(0);
    char err[256];
    ck_assert_int_eq(est_stack_parse("2026-07", &r.stack, err, sizeof err), 0);
    est_module *std = malloc(sizeof *std), *cce = malloc(sizeof *cce);
    ck_assert_msg(est_module_head(&r, &LORA_BF16, std, err, sizeof err) == 0, "%s", err);
    r.loss = EST_LOSS_CCE;
    ck_assert_msg(est_module_head(&r, &LORA_BF16, cce, err, sizeof err) == 0, "%s", err);
    const int64_t V = 128256;
    ck_assert_int_eq(est_module_saved_bytes(std) - est_module_saved_bytes(cce), (int64_t)T * V * 4 - 2LL * T * H - T * 4 - V * 4);
    free(std);
    free(cce);
}
END_TEST

/* axolotl's examples/qwen3/32b-qlora.yaml (the keys that matter): QKV and O
 * kernels patched, the MLP kernel not (no adapter on gate_proj), checkpoints
 * through non-reentrant torch.utils.checkpoint with TRL's offloader, Cut
 * Cross-Entropy, torchao's 4-bit AdamW. The same without the kernel keys:
 * axolotl switches them on itself. */
START_TEST(test_axolotl_recipe) {
    char path[256];
    snprintf(path, sizeof path, "/tmp/ftest-kernels-%d.yml", (int)getpid());
    setenv("HF_HUB_CACHE", test_repo_path("tests/fixtures/hf_cache"), 1);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("base_model: NousResearch/Meta-Llama-3-8B\nplugins:\n  - axolotl.integrations.cut_cross_entropy."
          "CutCrossEntropyPlugin\nload_in_4bit: true\nadapter: qlora\nlora_r: 16\nlora_target_modules:\n"
          "  - q_proj\n  - k_proj\n  - v_proj\n  - o_proj\n  - down_proj\n  - up_proj\n"
          "lora_mlp_kernel: true\nlora_qkv_kernel: true\nlora_o_kernel: true\noptimizer: adamw_torch_4bit\n"
          "bf16: auto\ngradient_checkpointing: offload\ngradient_checkpointing_kwargs:\n  use_reentrant: false\n"
          "attn_implementation: flash_attention_2\n", f);
    fclose(f);
    est_run run;
    char err[512];
    char *argv[] = {"ftest", "--axolotl", path, NULL};
    ck_assert_msg(test_cli_build(3, argv, &run, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(run.kernels, EST_KERNEL_BIT(EST_KERNEL_LORA_QKV) | EST_KERNEL_BIT(EST_KERNEL_LORA_O));
    ck_assert(run.activation_offload && run.ckpt_non_reentrant);
    ck_assert_int_eq(run.checkpointing, EST_CKPT_FULL);
    ck_assert_int_eq(run.loss, EST_LOSS_CCE);
    ck_assert_int_eq(run.optimizer, EST_OPT_ADAMW_4BIT);
    ck_assert_ptr_nonnull(strstr(run.settings_from, "lora_mlp_kernel (unpatched"));
    f = fopen(path, "w");
    fputs("base_model: NousResearch/Meta-Llama-3-8B\nadapter: lora\nlora_r: 8\nlora_target_linear: true\n", f);
    fclose(f);
    ck_assert_msg(test_cli_build(3, argv, &run, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(run.kernels, 7u); /* check_auto_enable_lora_kernels */
    f = fopen(path, "w");
    fputs("base_model: NousResearch/Meta-Llama-3-8B\nadapter: lora\nlora_r: 8\nlora_target_linear: true\n"
          "rl: dpo\n", f);
    fclose(f);
    ck_assert_msg(test_cli_build(3, argv, &run, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(run.kernels, 0u); /* not under rl */
    f = fopen(path, "w");
    fputs("base_model: NousResearch/Meta-Llama-3-8B\nadapter: lora\nflash_attn_fuse_mlp: true\n", f);
    fclose(f);
    ck_assert_int_lt(test_cli_build(3, argv, &run, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "flash_attn_fuse_mlp") && !strchr(err, '\n'), "%s", err);
    remove(path);
}
END_TEST

/* A kernel keeps nothing past the step: what is allocated between steps
 * (weights, gradients, optimizer state) is the plain run's, with and without
 * checkpointing, reentrant or not, with dropout (X_drop saved), for QLoRA's
 * dequantized base; and the peak is never below the Function's own backward:
 * saved X, gate and up, grad_output, grad_down, grad_X and one dequantized
 * weight at once (LoRA_MLP.backward), which the step's peak includes. */
START_TEST(test_kernels_leave_nothing) {
    static const est_checkpointing CKPT[] = {EST_CKPT_NONE, EST_CKPT_FULL, EST_CKPT_FULL};
    char err[256];
    for (int c = 0; c < 3; c++) {
        est_run r = lora_run(0);
        r.quant = EST_QUANT_NF4;
        r.precision = EST_PREC_BF16_MIXED;
        r.lora.dropout = 0.1;
        r.checkpointing = CKPT[c];
        r.ckpt_non_reentrant = c == 2;
        est_estimate *pe = calloc(1, sizeof *pe), *fe = calloc(1, sizeof *fe);
        ck_assert_msg(est_estimate_run(&r, pe, err, sizeof err) == 0, "%s", err);
        r.kernels = EST_KERNEL_BIT(EST_KERNEL_LORA_QKV) | EST_KERNEL_BIT(EST_KERNEL_LORA_O) |
                    EST_KERNEL_BIT(EST_KERNEL_LORA_MLP);
        ck_assert_msg(est_estimate_run(&r, fe, err, sizeof err) == 0, "%s", err);
        ck_assert_int_eq(fe->after_step_bytes, pe->after_step_bytes);
        const int64_t held = 2LL * T * H /* X, grad_output */ + 3LL * T * F * 2 /* gate, up, grad_down */ +
                             2LL * T * H /* grad_X */ + (int64_t)F * H * 2 /* one weight, bf16 */;
        ck_assert_int_ge(fe->peak_allocated_bytes, held);
        est_estimate_free(pe);
        est_estimate_free(fe);
        free(pe);
        free(fe);
    }
}
END_TEST

/* TRL's OffloadActivations with streams keeps the device tensors of the last
 * five offloaded tensors (max_fwd_stash_size=5) until later packs evict them.
 * Full checkpointing offloads one tensor per block, its input; in block 10's
 * forward the stash holds the inputs of blocks 6..10. The block's highest
 * point is in its MLP, after its input's last reader (the attention's
 * residual add), where save_on_cpu keeps none of the five on the device:
 * 5 x T h x 4 more (QLoRA on the HF Trainer: the residual stream is fp32
 * after prepare_model_for_kbit_training). Nothing is left after the step. */
static int64_t forward_activations(const est_estimate *e, const char *label) {
    for (size_t i = 0; i < e->tl.count; i++)
        if (!strcmp(e->tl.phases[i].label, label)) return e->tl.phases[i].bytes[EST_CAT_ACTIVATIONS];
    ck_abort_msg("no moment \"%s\"", label);
    return 0;
}

START_TEST(test_offload_stash) {
    est_run r = lora_run(0);
    r.quant = EST_QUANT_NF4;
    r.precision = EST_PREC_BF16_MIXED;
    r.checkpointing = EST_CKPT_FULL;
    r.ckpt_non_reentrant = true;
    r.activation_offload = true;
    char err[256];
    est_estimate *plain = calloc(1, sizeof *plain), *trl = calloc(1, sizeof *trl);
    ck_assert_msg(est_estimate_run(&r, plain, err, sizeof err) == 0, "%s", err);
    r.offload_stash = 5;
    ck_assert_msg(est_estimate_run(&r, trl, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(forward_activations(trl, "forward layer 10") - forward_activations(plain, "forward layer 10"),
                     5LL * T * H * 4);
    ck_assert_int_eq(trl->after_step_bytes, plain->after_step_bytes);
    est_estimate_free(plain);
    est_estimate_free(trl);
    free(plain);
    free(trl);
}
END_TEST

Suite *suite_kernels(void);
Suite *suite_kernels(void) {
    Suite *s = suite_create("kernels");
    TCase *tc = tcase_create("kernels");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_lora_mlp_saved);
    tcase_add_test(tc, test_lora_qkv_saved);
    tcase_add_test(tc, test_lora_o_saved);
    tcase_add_test(tc, test_fused_mlp_saved);
    tcase_add_test(tc, test_kernels_cli);
    tcase_add_test(tc, test_adamw_4bit_state);
    tcase_add_test(tc, test_cce_saved);
    tcase_add_test(tc, test_axolotl_recipe);
    tcase_add_test(tc, test_kernels_leave_nothing);
    tcase_add_test(tc, test_offload_stash);
    suite_add_tcase(s, tc);
    return s;
}
