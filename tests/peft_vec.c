/* AdaLoRA, VeRA, LN tuning, MiSS and trainable tokens (estimator/model/
 * peft_vec.c, block_peft_vec.c, frameworks/work_peft_vec.c, seam_hf.c's
 * RankAllocator state) against figures derived here by hand from PEFT's
 * source at d787f51 (tuners/adalora, vera, ln_tuning, miss,
 * trainable_tokens: layer.py and model.py), against the trainable counts PEFT
 * printed for its method comparison (shared/data/peft-metamathqa-l40s,
 * num_trainable_params), and against that comparison's measured rows. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block.h"
#include "estimate.h"
#include "gpu.h"
#include "lora.h"
#include "peft.h"
#include "peft_vec.h"
#include "record.h"
#include "test_util.h"

/* Llama-3.2-3B (h 3072; q 3072 x 3072, v 1024 x 3072; 28 layers, V 128256,
 * tied) on one L40S, pure bf16, as PEFT's method comparison ran it. */
static est_run l40s_run(est_peft method) {
    est_run r = test_peft_l40s_run(method);
    r.empty_cache_steps = 10;
    return r;
}

static est_run vec_run(est_peft method, int64_t rank) {
    est_run r = l40s_run(method);
    r.vec.rank = rank;
    r.vec.targets = EST_LORA_BIT(EST_LORA_Q) | EST_LORA_BIT(EST_LORA_V);
    return r;
}

/* The pure-bf16 regime of seam_hf.c: bf16 base, fp32 adapters, no autocast. */
static const est_regime BF16 = {.act = 2, .resid = 2, .weight = 2, .adapter = 4};

static int64_t block_trainable(const est_run *r) {
    est_module *m = malloc(sizeof *m);
    char err[256];
    ck_assert_msg(est_module_block(r, &BF16, false, m, err, sizeof err) == 0, "%s", err);
    const int64_t n = est_module_trainable_elems(m);
    free(m);
    return n;
}

static int64_t block_saved(const est_run *r) {
    est_module *m = malloc(sizeof *m);
    char err[256];
    ck_assert_msg(est_module_block(r, &BF16, false, m, err, sizeof err) == 0, "%s", err);
    const int64_t n = est_module_saved_bytes(m);
    free(m);
    return n;
}

/* PEFT's printed counts (num_trainable_params), by hand:
 *   AdaLoRA init_r 64 on q, v: 28 x [(64 x 3072 + 64 + 3072 x 64) + (64 x
 *     3072 + 64 + 1024 x 64)] = 28 x (393,280 + 262,208)     = 18,353,664
 *   VeRA r 256: 28 x [(256 + 3072) + (256 + 1024)]           =    129,024
 *   LN tuning: (28 x 2 + 1) x 3072                           =    175,104
 *   MiSS r 64: 28 x 64 x (3072 + 1024)                       =  7,340,032
 *     bat: 28 x (3072 / 64 + 1024 / 64) x 64 x 64            =  7,340,032
 *     mini, mini_r 64: 28 x 2 x 64 x 64                      =    229,376
 *   trainable tokens, 2 indices: 2 x 3072                    =      6,144
 *   PVeRA r 256: 28 x [(512 + 3072) + (512 + 1024)]          =    143,360
 *     r 64: 28 x [(128 + 3072) + (128 + 1024)]               =    121,856
 *   TinyLoRA u 64, weight_tying 0: 56 targets x 64           =      3,584
 *     weight_tying 1: one vector of 64                       =         64
 * and the same from the block description (a block's trainable elements x
 * 28, plus what the ends hold). */
START_TEST(test_trainable_counts_published) {
    est_run r = vec_run(EST_PEFT_ADALORA, 64);
    ck_assert_int_eq(est_peft_trainable_params(&r), 18353664);
    ck_assert_int_eq(28 * block_trainable(&r), 18353664);
    r = vec_run(EST_PEFT_VERA, 256);
    ck_assert_int_eq(est_peft_trainable_params(&r), 129024);
    ck_assert_int_eq(28 * block_trainable(&r), 129024);
    r = vec_run(EST_PEFT_MISS, 64);
    ck_assert_int_eq(est_peft_trainable_params(&r), 7340032);
    ck_assert_int_eq(28 * block_trainable(&r), 7340032);
    r.vec.miss = EST_MISS_BAT;
    ck_assert_int_eq(est_peft_trainable_params(&r), 7340032);
    ck_assert_int_eq(28 * block_trainable(&r), 7340032);
    r.vec.miss = EST_MISS_MINI;
    r.vec.mini_r = 64;
    ck_assert_int_eq(est_peft_trainable_params(&r), 229376);
    ck_assert_int_eq(28 * block_trainable(&r), 229376);
    r = vec_run(EST_PEFT_PVERA, 256);
    ck_assert_int_eq(est_peft_trainable_params(&r), 143360);
    ck_assert_int_eq(28 * block_trainable(&r), 143360);
    r.vec.rank = 64;
    ck_assert_int_eq(est_peft_trainable_params(&r), 121856);
    ck_assert_int_eq(28 * block_trainable(&r), 121856);
    r = vec_run(EST_PEFT_TINYLORA, 2);
    r.vec.u = 64;
    ck_assert_int_eq(est_peft_trainable_params(&r), 3584);
    ck_assert_int_eq(28 * block_trainable(&r), 3584);
    r.vec.tying = 1;
    ck_assert_int_eq(est_peft_trainable_params(&r), 64); /* the block holds a v per target (peft_vec.c) */
    est_module *m = malloc(sizeof *m);
    r = l40s_run(EST_PEFT_LN_TUNING);
    ck_assert_int_eq(est_peft_trainable_params(&r), 175104);
    ck_assert_int_eq(est_module_head(&r, &BF16, m, NULL, 0), 0);
    ck_assert_int_eq(28 * block_trainable(&r) + est_module_trainable_elems(m), 175104);
    r = l40s_run(EST_PEFT_TRAINABLE_TOKENS);
    r.vec.tokens = 2;
    ck_assert_int_eq(est_peft_trainable_params(&r), 6144);
    ck_assert_int_eq(block_trainable(&r), 0);
    ck_assert_int_eq(est_module_embedding(&r, &BF16, m, NULL, 0), 0);
    const int64_t embed = est_module_trainable_elems(m);
    ck_assert_int_eq(est_module_head(&r, &BF16, m, NULL, 0), 0);
    ck_assert_int_eq(embed + est_module_trainable_elems(m), 6144); /* the head's delta is the embedding's */
    free(m);
}
END_TEST

/* What each method's block saves beyond a frozen block that adapts nothing
 * (trainable tokens' block: every input needs a gradient, nothing trains),
 * on T = 64 tokens (b 1, s 64), per adapted Linear (d_in 3072; d_out 3072
 * for q, 1024 for v), by the source's save rules:
 *  - VeRA r 16 (layer.py forward): lambda_d * u saves u (T r 4), lambda_b *
 *    v saves v (T d_out 4); F.linear with a frozen slice saves no x, but
 *    saves the slice (x needs a gradient): vera_A[:, :d_in] (r d_in 4) and
 *    vera_B[:d_out] (d_out r 4), views of the shared buffers the embedding
 *    holds (counted as saved, allocated by no block);
 *  - MiSS r 64: the slice sum (T r 4), saved by the matmul with miss;
 *  - MiSS bat r 64: the batched matmul saves W's fp32 copy (d_in d_out 4),
 *    F.linear saves x's fp32 copy (T d_in 4) and the merged weight (d_in
 *    d_out 4);
 *  - AdaLoRA init_r 16: x's fp32 copy (T d_in 4), A * E (r d_in 4) and the
 *    (T, r) product (T r 4);
 *  - LN tuning: weight * normalized saves the normalized bf16 tensor (T h
 *    2), both norms;
 *  - PVeRA r 16 (pvera/layer.py forward): VeRA's, with lambda_d's operand
 *    (T 2r 4) and pvera_A's slice (2r d_in 4), plus exp's output and eps
 *    (T r 4 each) saved by eps * std;
 *  - TinyLoRA r 2, u 64 (tinylora/layer.py forward): F.linear(h, R) saves h
 *    (T r 4) and R (r r 4); the frozen A's and B's F.linears save A and B,
 *    the layer's own buffers (held whatever autograd does: no bytes). */
START_TEST(test_saved_by_hand) {
    const int64_t T = 64, din = 3072, q = 3072, v = 1024, h = 3072;
    est_run ref = l40s_run(EST_PEFT_TRAINABLE_TOKENS);
    ref.vec.tokens = 2;
    ref.micro_batch = 1;
    ref.seq_len = 64;
    const int64_t base = block_saved(&ref);
    est_run r = vec_run(EST_PEFT_VERA, 16);
    r.micro_batch = 1;
    r.seq_len = 64;
    ck_assert_int_eq(block_saved(&r) - base, 2 * T * 16 * 4 + T * (q + v) * 4 + 2 * 16 * din * 4 + (q + v) * 16 * 4);
    r.peft = EST_PEFT_MISS;
    r.vec.rank = 64;
    ck_assert_int_eq(block_saved(&r) - base, 2 * T * 64 * 4);
    r.vec.miss = EST_MISS_BAT;
    ck_assert_int_eq(block_saved(&r) - base, 2 * din * (q + v) * 4 + 2 * T * din * 4);
    r.vec.miss = EST_MISS_DEFAULT;
    r.peft = EST_PEFT_ADALORA;
    r.vec.rank = 16;
    ck_assert_int_eq(block_saved(&r) - base, 2 * (T * din * 4 + 16 * din * 4 + T * 16 * 4));
    r.peft = EST_PEFT_PVERA;
    r.vec.rank = 16;
    ck_assert_int_eq(block_saved(&r) - base, 2 * T * 32 * 4 + T * (q + v) * 4 + 2 * 32 * din * 4 + (q + v) * 16 * 4 +
                                                 2 * 2 * T * 16 * 4);
    r.peft = EST_PEFT_TINYLORA;
    r.vec.rank = 2;
    r.vec.u = 64;
    ck_assert_int_eq(block_saved(&r) - base, 2 * (T * 2 * 4 + 2 * 2 * 4));
    est_run ln = ref;
    ln.peft = EST_PEFT_LN_TUNING;
    ln.vec.tokens = 0;
    ck_assert_int_eq(block_saved(&ln) - base, 2 * T * h * 2);
}
END_TEST

/* Trainable tokens on the tied head (layer.py forward_adapters): F.linear(x,
 * W.index_copy(...)) saves the merged (V, h) bf16 weight and, since that
 * weight needs a gradient, its input x (the final norm's output, T h bf16,
 * T = 4 x 768), which a frozen head (VeRA's) does not: 128256 x 3072 x 2 +
 * 3072 x 3072 x 2 more. */
START_TEST(test_tokens_head_saves_weight) {
    est_run tt = l40s_run(EST_PEFT_TRAINABLE_TOKENS);
    tt.vec.tokens = 2;
    est_run ve = vec_run(EST_PEFT_VERA, 256);
    est_module *a = malloc(sizeof *a), *b = malloc(sizeof *b);
    ck_assert_int_eq(est_module_head(&tt, &BF16, a, NULL, 0), 0);
    ck_assert_int_eq(est_module_head(&ve, &BF16, b, NULL, 0), 0);
    ck_assert_int_eq(est_module_saved_bytes(a) - est_module_saved_bytes(b), INT64_C(128256) * 3072 * 2 + 3072 * 3072 * 2);
    free(a);
    free(b);
}
END_TEST

/* What stays allocated after AdaLoRA's step (the loop's memory_allocated()),
 * batches of mean length 208.9: the bf16 base 3,212,749,824 x 2; the
 * adapters' fp32 weights, gradients and Adam moments 18,353,664 x 16; the
 * RankAllocator's ipt, exp_avg_ipt and exp_avg_unc 18,353,664 x 12 (layer.py
 * update_ipt: zeros_like per tensor, fp32); two cuBLAS workspaces of
 * 8,519,680; the step's outputs at f = 208.9 / 768: bf16 logits 4 x 768 x
 * 128256 f x 2 and the cache's k and v 28 x 2 x (4 x 768 x 1024 f) x 2.
 * VeRA keeps its shared fp32 vera_A (256 x 3072) and vera_B (3072 x 256)
 * beside 129,024 x 16. */
START_TEST(test_after_step_hand) {
    est_run r = vec_run(EST_PEFT_ADALORA, 64);
    r.seq_mean = 208.9;
    est_estimate e;
    test_estimate(&r, &e);
    const double f = 208.9 / 768;
    const int64_t logits = llround(4.0 * 768 * 128256 * f) * 2, kv = 28 * 2 * llround(4.0 * 768 * 1024 * f) * 2;
    const int64_t held = 2 * 8519680 + logits + kv;
    ck_assert_int_eq(e.after_step_bytes, INT64_C(3212749824) * 2 + INT64_C(18353664) * 28 + held);
    est_estimate_free(&e);
    r = vec_run(EST_PEFT_VERA, 256);
    r.seq_mean = 208.9;
    test_estimate(&r, &e);
    ck_assert_int_eq(e.after_step_bytes, INT64_C(3212749824) * 2 + INT64_C(129024) * 16 + 2 * 256 * 3072 * 4 + held);
    est_estimate_free(&e);
}
END_TEST

/* The measured rows of PEFT's method comparison these methods express, each
 * within the tolerance its record carries (reserved 6%, after the step 1%,
 * it/s 25%: calibrate/import/peft_metamathqa_l40s.py). */
START_TEST(test_records_within_tolerance) {
    est_gpu_catalog cat;
    char err[256];
    ck_assert(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0);
    FILE *f = fopen(test_repo_path("calibrate/records/peft-metamathqa-l40s.jsonl"), "r");
    ck_assert_ptr_nonnull(f);
    static char line[1 << 16];
    int seen = 0;
    while (fgets(line, sizeof line, f)) {
        const char *methods[] = {"\"adalora\"", "\"vera\"",  "\"ln_tuning\"", "\"miss\"",
                                 "\"trainable_tokens\"", "\"pvera\"", "\"tinylora\""};
        bool ours = false;
        for (int i = 0; i < 7; i++) ours |= strstr(line, "\"peft_method\":") && strstr(line, methods[i]);
        if (!ours || !strstr(line, "\"stack\":\"2026-07\"")) continue;
        est_record rec;
        ck_assert_msg(est_record_parse(line, strlen(line), &cat, &rec, err, sizeof err) == 0, "%s", err);
        ck_assert_msg(rec.not_expressible[0] == '\0', "%s", rec.not_expressible);
        ck_assert(est_peft_vec_on(&rec.run));
        test_record_within_tolerance(&rec);
        est_record_free(&rec);
        seen++;
    }
    fclose(f);
    ck_assert_int_eq(seen, 11); /* adalora, vera, ln_tuning, miss x 3, trainable_tokens, pvera x 2, tinylora x 2 */
    est_gpu_catalog_free(&cat);
}
END_TEST

/* The flags, and what they refuse (one line, exit 2 from the binary). */
START_TEST(test_cli) {
    est_run r;
    char err[256];
    char *ok[] = {"ftest", "--model", "llama3.2-3b", "--peft", "miss", "--peft-rank", "64",
                  "--miss-init", "mini", "--miss-mini-r", "64", "--peft-targets", "q,v"};
    ck_assert_msg(test_cli_build(13, ok, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(r.framework, EST_FW_HF);
    ck_assert_int_eq(r.peft, EST_PEFT_MISS);
    ck_assert_int_eq(r.vec.miss, EST_MISS_MINI);
    ck_assert_int_eq(r.vec.mini_r, 64);
    char *tt[] = {"ftest", "--model", "llama3.2-3b", "--peft", "trainable-tokens", "--trainable-tokens", "2"};
    ck_assert_msg(test_cli_build(7, tt, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(r.vec.tokens, 2);
    char *no_rank[] = {"ftest", "--model", "llama3.2-3b", "--peft", "vera"};
    ck_assert_int_lt(test_cli_build(5, no_rank, &r, err, sizeof err), 0);
    ck_assert_ptr_nonnull(strstr(err, "--peft-rank"));
    char *rank_alone[] = {"ftest", "--model", "llama3.2-3b", "--peft-rank", "8"};
    ck_assert_int_lt(test_cli_build(5, rank_alone, &r, err, sizeof err), 0);
    char *miss_alone[] = {"ftest", "--model", "llama3.2-3b", "--peft", "vera", "--peft-rank", "8", "--miss-init", "bat"};
    ck_assert_int_lt(test_cli_build(9, miss_alone, &r, err, sizeof err), 0);
    char *odd[] = {"ftest", "--model", "llama3.2-3b", "--peft", "miss", "--peft-rank", "100"};
    ck_assert_int_lt(test_cli_build(7, odd, &r, err, sizeof err), 0); /* 100 divides neither 3072 */
    char *tl[] = {"ftest", "--model", "llama3.2-3b", "--peft", "tinylora", "--peft-rank", "2", "--tinylora-weight-tying", "1"};
    ck_assert_msg(test_cli_build(9, tl, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(est_peft_trainable_params(&r), 64);
    char *lnr[] = {"ftest", "--model", "llama3.2-3b", "--peft", "ln-tuning", "--peft-rank", "8"};
    ck_assert_int_lt(test_cli_build(7, lnr, &r, err, sizeof err), 0);
    const char *bad[] = {"--model llama3.2-3b --peft vera --peft-rank 0",
                         "--model llama3.2-3b --peft vera",
                         "--model llama3.2-3b --miss-init bat",
                         "--model llama3.2-3b --trainable-tokens 2",
                         "--model llama3.2-3b --peft trainable-tokens",
                         "--model llama3.2-3b --peft adalora --peft-rank 8 --lora-rank 8",
                         "--model llama3.2-3b --tinylora-u 8",
                         "--model llama3.2-3b --peft tinylora --peft-rank 2 --tinylora-weight-tying 2"};
    for (int i = 0; i < 8; i++) {
        test_cmd_result *x = test_ftest(bad[i]);
        ck_assert_msg(x->status == 2, "%s: exit %d", bad[i], x->status);
        ck_assert_msg(x->err_lines == 1, "%s: %d lines", bad[i], x->err_lines);
    }
    test_cmd_result *x = test_ftest("--model llama3.2-3b --gpu l40s-48gb --peft adalora --peft-rank 64 --train-loop plain "
                                    "--stack 2026-07 --precision bf16 --batch 4 --seq 768 --seq-mean 208.9");
    ck_assert_int_eq(x->status, 0);
}
END_TEST

Suite *suite_peft_vec(void);
Suite *suite_peft_vec(void) {
    Suite *s = suite_create("peft_vec");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_trainable_counts_published);
    tcase_add_test(tc, test_saved_by_hand);
    tcase_add_test(tc, test_tokens_head_saves_weight);
    tcase_add_test(tc, test_after_step_hand);
    tcase_add_test(tc, test_records_within_tolerance);
    tcase_add_test(tc, test_cli);
    suite_add_tcase(s, tc);
    return s;
}
