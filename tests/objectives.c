/* Issue 19's mechanisms on autograd's step (estimator/model/objective.h,
 * block_rl.c, estimator/frameworks/rl.c, autograd.c), each against a
 * derivation written out here from the frameworks' source as
 * docs/method.md walks it: non-reentrant checkpointing, sample packing,
 * PEFT's modules_to_save and TRL's preference trainers. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "estimate.h"
#include "lora.h"
#include "objective.h"
#include "step_build.h"
#include "test_util.h"

/* Category c's own highest point within the moment. */
static int64_t own(const est_estimate *e, const char *label, est_category c) {
    return test_row(e, label)->own_max[c];
}

static int64_t peak_alloc(const est_run *run) {
    est_estimate e;
    test_estimate(run, &e);
    const int64_t p = e.peak_allocated_bytes;
    est_estimate_free(&e);
    return p;
}

/* Llama-3-8B, pure bf16 full fine-tune on the HF Trainer, flash attention,
 * full checkpointing, b 2, s 2048: T = 4096, h = 4096.
 * Reentrant (CheckpointFunction.backward) recomputes the whole block and
 * keeps the recomputed output (T x h, bf16) in `outputs` until the block's
 * backward returns. Non-reentrant recomputes up to the last op whose node
 * saved a tensor (down_proj, which keeps its input and weight) and keeps
 * only those: the residual add's output is never made again. So every
 * moment of a block's backward holds T x h x 2 bytes less of activations. */
START_TEST(test_non_reentrant) {
    est_run run = test_run_of("llama3-8b", "h100");
    run.framework = EST_FW_HF;
    run.precision = EST_PREC_BF16;
    run.attention = EST_ATTN_FLASH;
    run.checkpointing = EST_CKPT_FULL;
    run.micro_batch = 2;
    run.seq_len = 2048;
    est_estimate re, nr;
    test_estimate(&run, &re);
    run.ckpt_non_reentrant = true;
    test_estimate(&run, &nr);
    const int64_t Th2 = INT64_C(4096) * 4096 * 2;
    ck_assert_int_eq(own(&re, "backward layer 20", EST_CAT_ACTIVATIONS) -
                         own(&nr, "backward layer 20", EST_CAT_ACTIVATIONS),
                     Th2);
    /* The forward is the same: the checkpoint keeps the block inputs alone. */
    ck_assert_int_eq(own(&re, "forward layer 20", EST_CAT_ACTIVATIONS),
                     own(&nr, "forward layer 20", EST_CAT_ACTIVATIONS));
    est_estimate_free(&re);
    est_estimate_free(&nr);
    /* Without checkpointing the flag is refused, not ignored. */
    char err[200];
    run.checkpointing = EST_CKPT_NONE;
    ck_assert_int_eq(est_run_validate(&run, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "--checkpointing full"));
}
END_TEST

/* The attention work of one block's forward (ATTENTION events of the first
 * block_forward unit). */
static double block_attention_flops(const est_run *run) {
    est_step st;
    est_step_init(&st);
    char err[200];
    est_constants k;
    est_constants_defaults(&k);
    ck_assert_msg(est_step_build(run, &k, &st, err, sizeof err) == 0, "%s", err);
    double flops = -1;
    for (size_t i = 0; i < st.unit_count && flops < 0; i++) {
        const est_unit_ref *u = &st.units[i];
        if (u->unit != EST_UNIT_BLOCK_FWD) continue;
        flops = 0;
        for (size_t j = u->body; j < u->body + u->body_len; j++)
            if (st.work[j].kind == EST_EV_ATTENTION) flops += st.work[j].u.attn.flops;
    }
    est_step_free(&st);
    return flops;
}

/* Packing with flash varlen: a row of s = 8192 tokens holding samples of 512
 * tokens attends within each sample, 16 causal squares of 512:
 *   4 x b x (16 x 512^2) x q x 1/2 = 4 x 8192 x 512 x 4096 / 2 FLOPs
 * (q = 32 heads x 128) where the unpacked row's causal square is
 *   4 x 8192^2 x 4096 / 2. Memory is the unpacked flash run's: no mask is
 * built, the varlen views make no copies. */
START_TEST(test_packing) {
    est_run run = test_run_of("llama3-8b", "h100");
    run.framework = EST_FW_HF;
    run.attention = EST_ATTN_FLASH;
    run.lora.rank = 16;
    run.checkpointing = EST_CKPT_FULL;
    run.seq_len = 8192;
    ck_assert_double_eq(block_attention_flops(&run), 4.0 * 8192 * 8192 * 4096 / 2);
    const int64_t unpacked = peak_alloc(&run);
    run.packed = true;
    ck_assert_double_eq(block_attention_flops(&run), 4.0 * 8192 * 8192 * 4096 / 2); /* unknown: the bound */
    run.packed_sample_len = 512;
    ck_assert_double_eq(block_attention_flops(&run), 4.0 * 8192 * 512 * 4096 / 2);
    ck_assert_int_eq(peak_alloc(&run), unpacked);
    /* Positions restart at every sample: the row may pass the model's 8192. */
    run.seq_len = 16384;
    char err[200];
    ck_assert_msg(est_run_validate(&run, err, sizeof err) == 0, "%s", err);
    run.packed_sample_len = 0;
    ck_assert_int_eq(est_run_validate(&run, err, sizeof err), -1);
    /* Packing needs a varlen attention. */
    run.packed_sample_len = 512;
    run.attention = EST_ATTN_SDPA;
    ck_assert_int_eq(est_run_validate(&run, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "flash"));
}
END_TEST

/* What category c holds at the moment's highest point. */
static int64_t at(const est_estimate *e, const char *label, est_category c) {
    return test_row(e, label)->bytes[c];
}

/* PEFT modules_to_save on Llama-3-8B (V x h = 128256 x 4096 = 525,336,576),
 * LoRA r 16 on all linears over a bf16 base, HF Trainer, AdamW: the frozen
 * originals stay and a bf16 copy of each of embed_tokens and lm_head trains:
 *   loaded weights   + 2 x Vh x 2 bytes
 *   AdamW m and v    + 2 x 2 x Vh x 2 (zeros_like of bf16 parameters)
 *   gradients        + Vh x 2 for the head's copy from its backward on, and
 *                    the embedding copy's dense Vh x 2 at its backward
 *   trainable        + 2 Vh elements. */
START_TEST(test_modules_to_save) {
    est_run run = test_run_of("llama3-8b", "h100");
    run.framework = EST_FW_HF;
    run.lora.rank = 16;
    run.lora.targets = EST_LORA_ALL_LINEAR;
    run.seq_len = 1024;
    const int64_t Vh = INT64_C(525336576);
    est_estimate a, b;
    test_estimate(&run, &a);
    run.modules_to_save = EST_SAVE_EMBED | EST_SAVE_HEAD;
    ck_assert_int_eq(est_save_params(&run), 2 * Vh);
    test_estimate(&run, &b);
    ck_assert_int_eq(at(&b, "model loaded", EST_CAT_PARAMS) - at(&a, "model loaded", EST_CAT_PARAMS), 2 * Vh * 2);
    ck_assert_int_eq(at(&b, "forward layer 5", EST_CAT_OPTIMIZER) - at(&a, "forward layer 5", EST_CAT_OPTIMIZER),
                     2 * 2 * Vh * 2);
    ck_assert_int_eq(at(&b, "backward layer 5", EST_CAT_GRADS) - at(&a, "backward layer 5", EST_CAT_GRADS), Vh * 2);
    ck_assert_int_ge(own(&b, "backward embedding", EST_CAT_GRADS) - own(&a, "backward embedding", EST_CAT_GRADS),
                     2 * Vh * 2);
    est_estimate_free(&a);
    est_estimate_free(&b);
    /* Without an adapter there is nothing to save beside. */
    char err[200];
    run.lora.rank = 0;
    ck_assert_int_eq(est_run_validate(&run, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "lora"));
}
END_TEST

/* Qwen2.5-0.5B (h 896, 24 blocks of 14,912,384, V 151936, tied: N =
 * 494,032,768), a full fine-tune in pure bf16 on the HF Trainer, flash
 * attention, b 2 pairs, s 1024, DPO (TRL 0.15.2):
 *  - reference model: a frozen copy loaded beside the policy, N x 2 bytes;
 *  - paired batch: chosen and rejected concatenated, the policy runs 4 rows:
 *    a block saves what an SFT block of micro-batch 4 saves;
 *  - log-probs in bf16 (no autocast, selective_log_softmax's row loop):
 *    each row's log_softmax output is kept, 4 x 1024 x V x 2 bytes, until the
 *    loss backward;
 *  - the reference's forward under no_grad runs after the policy's: a moment
 *    of its own, holding the policy's saved tensors.
 * And axolotl's qwen2/dpo.yaml as SFT (rl removed) estimates less memory. */
START_TEST(test_dpo_full) {
    est_run run = test_run_of("qwen2.5-0.5b", "h100");
    run.framework = EST_FW_HF;
    run.precision = EST_PREC_BF16;
    run.attention = EST_ATTN_FLASH;
    run.micro_batch = 2;
    run.seq_len = 1024;
    const int64_t N = INT64_C(494032768), V = 151936;
    est_run sft4 = run;
    sft4.micro_batch = 4;
    run.rl = EST_RL_DPO;
    ck_assert_int_eq(est_policy_rows(&run), 4);
    est_estimate d, s4;
    test_estimate(&run, &d);
    test_estimate(&sft4, &s4);
    ck_assert_int_eq(at(&d, "reference model loaded", EST_CAT_PARAMS) - at(&d, "model loaded", EST_CAT_PARAMS),
                     N * 2);
    ck_assert_int_eq(own(&d, "forward layer 5", EST_CAT_ACTIVATIONS), own(&s4, "forward layer 5", EST_CAT_ACTIVATIONS));
    ck_assert_int_ge(at(&d, "reference forward (no_grad)", EST_CAT_LOGITS), 4 * 1024 * V * 2);
    ck_assert_int_ge(at(&d, "reference forward (no_grad)", EST_CAT_ACTIVATIONS),
                     at(&d, "loss", EST_CAT_ACTIVATIONS));
    est_estimate_free(&d);
    est_estimate_free(&s4);
}
END_TEST

static bool has_row(const est_estimate *e, const char *label) {
    for (size_t i = 0; i < e->tl.count; i++)
        if (strcmp(e->tl.phases[i].label, label) == 0) return true;
    return false;
}

/* LoRA r 16 on q, v of Qwen2.5-0.5B, bf16-mixed (autocast), b 2, s 512,
 * V 151936: R s V = 4 x 512 x V = 311,164,928 logits per pass.
 *  - DPO's reference is the policy with its adapters disabled: no weights
 *    beyond SFT's;
 *  - accelerate's convert_outputs_to_fp32 hands the logits over in fp32,
 *    which logsumexp keeps: R s V x 4 through the reference pass, where the
 *    reference's own bf16 logits (x 2) and their fp32 copy (x 4) join them
 *    at its cast: R s V x 10 of logits at once, beside the policy's loss
 *    (one fp32);
 *  - in the loss backward the unbind's buffered row gradients and their
 *    stack (R s V x 4 each) beside the kept logits;
 *  - ORPO has no reference pass, KTO runs b rows, its KL pass first and the
 *    reference twice (its own KL pass), holding the policy's indexed copies
 *    of every row's logits (b s V x 4) through them. */
START_TEST(test_preference_lora) {
    est_run run = test_run_of("qwen2.5-0.5b", "h100");
    run.framework = EST_FW_HF;
    run.lora.rank = 16;
    run.micro_batch = 2;
    run.seq_len = 512;
    const int64_t RsV = INT64_C(4) * 512 * 151936;
    est_estimate sft, d, o, k;
    test_estimate(&run, &sft);
    run.rl = EST_RL_DPO;
    test_estimate(&run, &d);
    ck_assert_int_eq(at(&d, "loss", EST_CAT_PARAMS), at(&sft, "loss", EST_CAT_PARAMS));
    ck_assert_int_eq(own(&d, "reference forward (no_grad)", EST_CAT_LOGITS), RsV * 10 + 4);
    ck_assert_int_ge(own(&d, "loss backward", EST_CAT_LOGITS) + own(&d, "loss backward", EST_CAT_WORKSPACE),
                     RsV * 4 * 3);
    ck_assert(!has_row(&d, "KL forward (no_grad)"));
    run.rl = EST_RL_ORPO;
    test_estimate(&run, &o);
    ck_assert(!has_row(&o, "reference forward (no_grad)"));
    run.rl = EST_RL_KTO;
    ck_assert_int_eq(est_policy_rows(&run), 2);
    test_estimate(&run, &k);
    ck_assert(has_row(&k, "KL forward (no_grad)"));
    ck_assert_int_eq(own(&k, "reference forward (no_grad)", EST_CAT_LOGITS), RsV / 2 * (4 + 4 + 2 + 4) + 4);
    est_estimate_free(&sft);
    est_estimate_free(&d);
    est_estimate_free(&o);
    est_estimate_free(&k);
    /* precompute_ref_log_probs: no reference in the step. */
    run.rl = EST_RL_DPO;
    run.rl_precomputed_ref = true;
    test_estimate(&run, &d);
    ck_assert(!has_row(&d, "reference forward (no_grad)"));
    est_estimate_free(&d);
}
END_TEST

/* The run axolotl's YAML text describes (base models from the fixture cache). */
static est_run from_yaml(const char *text) {
    setenv("HF_HUB_CACHE", test_repo_path("tests/fixtures/hf_cache"), 1);
    char path[] = "/tmp/ftest-objectives-XXXXXX", err[300];
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "w");
    fputs(text, f);
    fclose(f);
    char *argv[] = {"ftest", "--axolotl", path, NULL};
    est_run run;
    int rc = test_cli_build(3, argv, &run, err, sizeof err);
    unlink(path);
    ck_assert_msg(rc == 0, "%s", err);
    return run;
}

/* axolotl's examples/qwen2/dpo.yaml (the keys that matter) against the same
 * recipe as SFT: DPO adds the reference model (N x 2 bytes: a full fine-tune
 * in bf16) and doubles the rows (2 x 2 x 2048), so at its peak it holds at
 * least those more than SFT at its own: the reference weights, plus what
 * the paired rows add to the activations kept at the end of the forward. */
START_TEST(test_dpo_recipe_over_sft) {
    static const char *const RECIPE =
        "base_model: Qwen/Qwen2.5-0.5B\nsequence_len: 2048\nsample_packing: false\n"
        "gradient_accumulation_steps: 4\nmicro_batch_size: 2\noptimizer: adamw_bnb_8bit\nbf16: auto\n"
        "tf32: false\ngradient_checkpointing: true\nattn_implementation: flash_attention_2\n";
    char dpo_text[600];
    snprintf(dpo_text, sizeof dpo_text, "rl: dpo\n%s", RECIPE);
    est_run dpo = from_yaml(dpo_text), sft = from_yaml(RECIPE);
    ck_assert_int_eq(dpo.rl, EST_RL_DPO);
    ck_assert(dpo.ckpt_non_reentrant && !sft.ckpt_non_reentrant); /* axolotl's rule without kwargs */
    sft.ckpt_non_reentrant = true; /* the same checkpoint either way, for the comparison */
    est_estimate d, s;
    test_estimate(&dpo, &d);
    test_estimate(&sft, &s);
    const int64_t N = INT64_C(494032768);
    const int64_t paired = own(&d, "forward layer 23", EST_CAT_ACTIVATIONS) -
                           own(&s, "forward layer 23", EST_CAT_ACTIVATIONS);
    ck_assert_int_gt(paired, 0);
    ck_assert_int_ge(d.peak_allocated_bytes - s.peak_allocated_bytes, N * 2 + paired);
    est_estimate_free(&d);
    est_estimate_free(&s);
}
END_TEST

Suite *suite_objectives(void);
Suite *suite_objectives(void) {
    Suite *s = suite_create("objectives");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_non_reentrant);
    tcase_add_test(tc, test_packing);
    tcase_add_test(tc, test_modules_to_save);
    tcase_add_test(tc, test_dpo_full);
    tcase_add_test(tc, test_preference_lora);
    tcase_add_test(tc, test_dpo_recipe_over_sft);
    suite_add_tcase(s, tc);
    return s;
}
