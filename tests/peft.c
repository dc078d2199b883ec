/* PEFT's methods, the plain training loop and sequences of many lengths
 * (estimator/model/peft.c, block_linear.c, block_ends.c, block_kv.c,
 * frameworks/seam_hf.c, seq_lengths.c) against figures derived here by hand
 * from PEFT 0.19 (d787f51: tuners/lora/dora.py, tuners/ia3/layer.py,
 * peft_model.py), transformers 5.13 and torch 2.13, and against the trainable
 * parameter counts PEFT itself printed for the method comparison
 * (shared/data/peft-metamathqa-l40s, num_trainable_params). */
#include <check.h>
#include <stdlib.h>
#include <unistd.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "block.h"
#include "estimate.h"
#include "lora.h"
#include "peft.h"
#include "seq_lengths.h"
#include "test_util.h"

/* Llama-3.2-3B (h 3072, 24 heads, 8 KV heads x 128 = 1024, f 8192, 28 layers,
 * V 128256, tied) on one L40S as PEFT's method comparison ran it. */
static est_run l40s_run(void) {
    est_run r = test_peft_l40s_run(EST_PEFT_LORA);
    r.empty_cache_steps = 10;
    return r;
}

static est_run lora32(est_lora_variant v) {
    est_run r = l40s_run();
    r.lora.rank = 32;
    r.lora.targets = EST_LORA_BIT(EST_LORA_Q) | EST_LORA_BIT(EST_LORA_V);
    r.lora.variant = v;
    return r;
}

/* The pure-bf16 regime of seam_hf.c: bf16 base, fp32 adapters, no autocast. */
static const est_regime BF16 = {.act = 2, .resid = 2, .weight = 2, .adapter = 4};

static est_module *block_of(const est_run *r) {
    est_module *m = malloc(sizeof *m);
    char err[256];
    ck_assert_msg(est_module_block(r, &BF16, false, m, err, sizeof err) == 0, "%s", err);
    return m;
}

/* PEFT's printed counts (the data's num_trainable_params):
 *   LoRA r32 q,v: 28 x 32 x (3072 + 3072 + 3072 + 1024)         = 9,175,040
 *   DoRA: + 28 x (3072 + 1024) magnitudes                       = 9,289,728
 *   LoRA-FA: B only, 28 x 32 x (3072 + 1024)                    = 3,670,016
 *   IA3 k, v, down (feed-forward): 28 x (1024 + 1024 + 8192)    =   286,720
 *   IA3 on all seven, gate/up/down feed-forward: 28 x (3072 + 1024 + 1024 +
 *     3072 + 3072 + 3072 + 8192)                                =   630,784
 *   prompt tuning, 200 virtual tokens: 200 x 3072               =   614,400
 * and the same from the block description (its trainable elements x 28). */
START_TEST(test_trainable_counts_published) {
    est_run r = lora32(EST_LORA_PLAIN);
    ck_assert_int_eq(est_peft_trainable_params(&r), 9175040);
    est_module *m = block_of(&r);
    ck_assert_int_eq(28 * est_module_trainable_elems(m), 9175040);
    r.lora.variant = EST_LORA_DORA;
    ck_assert_int_eq(est_peft_trainable_params(&r), 9289728);
    ck_assert_int_eq(est_module_block(&r, &BF16, false, m, NULL, 0), 0);
    ck_assert_int_eq(28 * est_module_trainable_elems(m), 9289728);
    r.lora.variant = EST_LORA_FA;
    ck_assert_int_eq(est_peft_trainable_params(&r), 3670016);
    ck_assert_int_eq(est_peft_params(&r), 9175040); /* A is still a parameter */
    ck_assert_int_eq(est_module_block(&r, &BF16, false, m, NULL, 0), 0);
    ck_assert_int_eq(28 * est_module_trainable_elems(m), 3670016);
    est_run ia3 = l40s_run();
    ia3.peft = EST_PEFT_IA3; /* est_run_defaults: PEFT's Llama defaults k, v, down; down feed-forward */
    ck_assert_int_eq(est_peft_trainable_params(&ia3), 286720);
    ck_assert_int_eq(est_module_block(&ia3, &BF16, false, m, NULL, 0), 0);
    ck_assert_int_eq(28 * est_module_trainable_elems(m), 286720);
    ia3.ia3_targets = EST_LORA_ALL_LINEAR;
    ia3.ia3_feedforward = EST_LORA_BIT(EST_LORA_GATE) | EST_LORA_BIT(EST_LORA_UP) | EST_LORA_BIT(EST_LORA_DOWN);
    ck_assert_int_eq(est_peft_trainable_params(&ia3), 630784);
    est_run pt = l40s_run();
    pt.peft = EST_PEFT_PROMPT_TUNING;
    pt.virtual_tokens = 200;
    ck_assert_int_eq(est_peft_trainable_params(&pt), 614400);
    ck_assert_int_eq(est_module_embedding(&pt, &BF16, m, NULL, 0), 0);
    ck_assert_int_eq(est_module_trainable_elems(m), 614400);
    free(m);
}
END_TEST

/* DoRA over plain LoRA, per adapted Linear (d_out wide, T = 4 x 768 tokens),
 * what autograd keeps (dora.py forward): (m - 1) * y saves y (bf16, T d_out 2)
 * and m - 1 (d_out 4); m * lora saves the adapter output (fp32, T d_out 4) and
 * m (d_out 4); magnitude / weight_norm saves the norm (d_out 4). The
 * weight-norm branch (eye, lora_weight, W in fp32) saves nothing: its graph
 * is dropped with lora_weight. q and v: d_out 3072 + 1024. */
START_TEST(test_dora_saved) {
    est_run r = lora32(EST_LORA_PLAIN);
    est_module *plain = block_of(&r);
    r.lora.variant = EST_LORA_DORA;
    est_module *dora = block_of(&r);
    const int64_t T = 3072, dout = 3072 + 1024;
    ck_assert_int_eq(est_module_saved_bytes(dora) - est_module_saved_bytes(plain), T * dout * 6 + 3 * dout * 4);
    /* LoRA-FA: A frozen, so A's fp32 copy of x (T x 3072 x 4, one per adapter)
     * is not saved; B still saves A's output. */
    r.lora.variant = EST_LORA_FA;
    est_module *fa = block_of(&r);
    ck_assert_int_eq(est_module_saved_bytes(plain) - est_module_saved_bytes(fa), 2 * T * 3072 * 4);
    free(plain);
    free(dora);
    free(fa);
}
END_TEST

/* IA3 (ia3/layer.py): on v (not feed-forward) the product result * scaling
 * saves the base output (bf16, T x 1024 x 2) and the vector (1024 x 4); on
 * down (feed-forward) x.to(fp32) * scaling saves the fp32 input (T x 8192 x 4)
 * and the vector (8192 x 4). Against IA3 on k alone. */
START_TEST(test_ia3_saved) {
    est_run r = l40s_run();
    r.peft = EST_PEFT_IA3;
    r.ia3_targets = EST_LORA_BIT(EST_LORA_K);
    r.ia3_feedforward = 0;
    est_module *k = block_of(&r);
    r.ia3_targets |= EST_LORA_BIT(EST_LORA_V) | EST_LORA_BIT(EST_LORA_DOWN);
    r.ia3_feedforward = EST_LORA_BIT(EST_LORA_DOWN);
    est_module *kvd = block_of(&r);
    const int64_t T = 3072;
    ck_assert_int_eq(est_module_saved_bytes(kvd) - est_module_saved_bytes(k),
                     T * 1024 * 2 + 1024 * 4 + T * 8192 * 4 + 8192 * 4);
    free(k);
    free(kvd);
}
END_TEST

/* Prompt tuning lengthens every sequence by N: the block's hidden states and
 * the head's log-softmax span b (s + N) rows; the embedding makes the word
 * embeddings of b s tokens and cats the prompts in front. */
START_TEST(test_prompt_tuning_positions) {
    est_run r = l40s_run();
    r.peft = EST_PEFT_PROMPT_TUNING;
    r.virtual_tokens = 200;
    ck_assert_int_eq(est_model_positions(&r), 968);
    est_module *m = malloc(sizeof *m);
    char err[256];
    ck_assert_int_eq(est_module_head(&r, &BF16, m, err, sizeof err), 0);
    bool found = false;
    for (int t = 0; t < m->n_tensors; t++)
        if (!strcmp(m->tensors[t].name, "log-softmax fp32")) {
            ck_assert_int_eq(m->tensors[t].elems, INT64_C(4) * 968 * 128256);
            found = true;
        }
    ck_assert(found);
    ck_assert_int_eq(est_module_embedding(&r, &BF16, m, err, sizeof err), 0);
    ck_assert_int_eq(m->tensors[m->output].elems, INT64_C(4) * 968 * 3072);
    ck_assert_int_eq(m->tensors[0].elems, INT64_C(4) * 768 * 3072); /* the word embeddings */
    free(m);
}
END_TEST

static int count_named(const est_module *m, const char *name, bool *held) {
    int n = 0;
    for (int t = 0; t < m->n_tensors; t++)
        if (!strcmp(m->tensors[t].name, name)) {
            n++;
            if (held) *held = m->tensors[t].model_output;
        }
    return n;
}

/* transformers 5.x caches a cat copy of k and v (T x 1024 bf16 each), held
 * in the outputs, and SDPA without a mask takes the grouped heads itself (no
 * repeat_kv); with a padding mask it repeats them. 4.49 caches the tensors
 * themselves and repeats always; gradient checkpointing turns the cache off. */
START_TEST(test_kv_cache_and_repeat) {
    est_run r = lora32(EST_LORA_PLAIN);
    est_module *m = block_of(&r);
    bool held = false;
    ck_assert_int_eq(count_named(m, "KV cache keys (cat)", &held), 1);
    ck_assert(held);
    ck_assert_int_eq(count_named(m, "repeat_kv(k)", NULL), 0);
    r.padding_mask = true;
    ck_assert_int_eq(est_module_block(&r, &BF16, false, m, NULL, 0), 0);
    ck_assert_int_eq(count_named(m, "repeat_kv(k)", NULL), 1);
    char err[256];
    ck_assert_int_eq(est_stack_parse("2025-02", &r.stack, err, sizeof err), 0);
    r.padding_mask = false;
    ck_assert_int_eq(est_module_block(&r, &BF16, false, m, NULL, 0), 0);
    ck_assert_int_eq(count_named(m, "KV cache keys (cat)", NULL), 0);
    ck_assert_int_eq(count_named(m, "repeat_kv(k)", NULL), 1);
    ck_assert_int_eq(count_named(m, "rotary embedded", &held), 2); /* q and k; k's is the cache's */
    ck_assert(held);
    r.checkpointing = EST_CKPT_FULL;
    ck_assert_int_eq(est_module_block(&r, &BF16, false, m, NULL, 0), 0);
    held = false;
    count_named(m, "rotary embedded", &held);
    ck_assert(!held);
    free(m);
}
END_TEST

/* What stays allocated after the optimizer step of PEFT's loop (its
 * memory_allocated() reading), LoRA r32 q,v, batches of mean length 208.9:
 * the bf16 weights 3,212,749,824 x 2; the adapters' fp32 weights, gradients
 * (zero_grad comes at the next step's start) and Adam moments 9,175,040 x 16;
 * two cuBLAS workspaces of 8,519,680 (the forward's handle's and the
 * autograd device thread's); the step's outputs at f = 208.9 / 768 of
 * the longest batch's: bf16 logits 4 x 768 x 128256 f x 2, and the cache's
 * k and v, 28 x 2 x (4 x 768 x 1024 f) x 2. */
START_TEST(test_after_step_hand) {
    est_run r = lora32(EST_LORA_PLAIN);
    r.seq_mean = 208.9;
    est_estimate e;
    est_estimate_init(&e);
    char err[256];
    ck_assert_msg(est_estimate_run(&r, &e, err, sizeof err) == 0, "%s", err);
    const double f = 208.9 / 768;
    const int64_t logits = llround(4.0 * 768 * 128256 * f) * 2, kv = 28 * 2 * llround(4.0 * 768 * 1024 * f) * 2;
    ck_assert_int_eq(e.after_step_bytes, INT64_C(3212749824) * 2 + INT64_C(9175040) * 16 + 2 * 8519680 + logits + kv);
    /* The Trainer's loop has no such row: it drops the outputs and gradients. */
    r.train_loop = EST_LOOP_TRAINER;
    r.empty_cache_steps = 0;
    ck_assert_msg(est_estimate_run(&r, &e, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(e.after_step_bytes, -1);
    est_estimate_free(&e);
}
END_TEST

/* Dynamic padding: the time is that of a step of the mean padded length, the
 * memory peak that of the longest batch. */
START_TEST(test_mean_length_time) {
    est_run r = lora32(EST_LORA_PLAIN);
    est_estimate e, mean;
    est_estimate_init(&e);
    est_estimate_init(&mean);
    char err[256];
    r.seq_mean = 209;
    ck_assert_msg(est_estimate_run(&r, &e, err, sizeof err) == 0, "%s", err);
    est_run m = r;
    m.seq_len = 209;
    m.seq_mean = 0;
    ck_assert_msg(est_estimate_run(&m, &mean, err, sizeof err) == 0, "%s", err);
    ck_assert_double_eq_tol(e.step_time_s, mean.step_time_s, 1e-12);
    ck_assert_int_gt(e.peak_allocated_bytes, mean.peak_allocated_bytes);
    est_estimate_free(&e);
    est_estimate_free(&mean);
}
END_TEST

/* A plain loop zeroes the gradients when its next step begins: the
 * adapters' fp32 gradients (9,175,040 x 4) are alive as the forward starts,
 * and gone by the first block; LoRA-FA's optimizer keeps B's moments only
 * (3,670,016 x 8) and allocates no foreach temporary. */
START_TEST(test_plain_loop_grads_and_lorafa_state) {
    est_run r = lora32(EST_LORA_PLAIN);
    est_estimate e;
    est_estimate_init(&e);
    char err[256];
    ck_assert_msg(est_estimate_run(&r, &e, err, sizeof err) == 0, "%s", err);
    size_t emb = 0, l0 = 0;
    for (size_t i = 0; i < e.tl.count; i++) {
        if (!strcmp(e.tl.phases[i].label, "forward embedding")) emb = i;
        if (!strcmp(e.tl.phases[i].label, "forward layer 0")) l0 = i;
    }
    ck_assert_int_eq(e.tl.phases[emb].bytes[EST_CAT_GRADS], INT64_C(9175040) * 4);
    ck_assert_int_eq(e.tl.phases[l0].bytes[EST_CAT_GRADS], 0);
    r.lora.variant = EST_LORA_FA;
    ck_assert_msg(est_estimate_run(&r, &e, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(e.category_peak[EST_CAT_OPTIMIZER], INT64_C(3670016) * 8);
    est_estimate_free(&e);
}
END_TEST

/* LoRA-FA with A's requires_grad turned back on (PeftModel.disable_adapter()
 * after create_lorafa_optimizer, as PEFT's method comparison runs): autograd
 * saves A's fp32 input again, T x 3072 x 4 per adapter on q and v (plain
 * LoRA's saved bytes exactly), every A and B (9,175,040 elements, fp32) gets a
 * gradient, alive as the next forward starts, and LoraFAOptimizer still keeps
 * B's moments only: 3,670,016 x 8. */
START_TEST(test_lorafa_a_requires_grad) {
    est_run r = lora32(EST_LORA_PLAIN);
    est_module *plain = block_of(&r);
    r.lora.variant = EST_LORA_FA;
    r.lora.fa_a_grad = true;
    est_module *fa = block_of(&r);
    ck_assert_int_eq(est_module_saved_bytes(fa), est_module_saved_bytes(plain));
    ck_assert_int_eq(28 * est_module_trainable_elems(fa), 9175040);
    free(plain);
    free(fa);
    est_estimate e;
    est_estimate_init(&e);
    char err[256];
    ck_assert_msg(est_estimate_run(&r, &e, err, sizeof err) == 0, "%s", err);
    size_t emb = 0;
    for (size_t i = 0; i < e.tl.count; i++)
        if (!strcmp(e.tl.phases[i].label, "forward embedding")) emb = i;
    ck_assert_int_eq(e.tl.phases[emb].bytes[EST_CAT_GRADS], INT64_C(9175040) * 4);
    ck_assert_int_eq(e.category_peak[EST_CAT_OPTIMIZER], INT64_C(3670016) * 8);
    est_estimate_free(&e);
}
END_TEST

/* --seq-lengths: E[max of b] for random batches, sorted batches' mean of
 * their longest, truncation, and the reader's refusals. */
START_TEST(test_seq_lengths) {
    est_seq_hist h;
    char err[256];
    const char *text = "# lengths\n100\n200 1\n\n";
    ck_assert_int_eq(est_seq_lengths_parse(text, strlen(text), &h, err, sizeof err), 0);
    ck_assert_int_eq(h.samples, 2);
    ck_assert_int_eq(est_seq_longest(&h, 0), 200);
    ck_assert_int_eq(est_seq_longest(&h, 150), 150);
    /* two draws: both 100 with probability 1/4, else the batch is 200 long */
    ck_assert_double_eq_tol(est_seq_padded_mean(&h, 2, EST_BATCHING_RANDOM, 0), 175, 1e-9);
    ck_assert_double_eq_tol(est_seq_padded_mean(&h, 2, EST_BATCHING_RANDOM, 150), 137.5, 1e-9);
    ck_assert_double_eq_tol(est_seq_padded_mean(&h, 2, EST_BATCHING_SORTED, 0), 200, 1e-9);
    est_seq_hist_free(&h);
    /* sorted: (300 300) (200 100) (100): 300, 200, 100 */
    const char *five = "100 2\n300 2\n200\n";
    ck_assert_int_eq(est_seq_lengths_parse(five, strlen(five), &h, err, sizeof err), 0);
    ck_assert_double_eq_tol(est_seq_padded_mean(&h, 2, EST_BATCHING_SORTED, 0), 200, 1e-9);
    ck_assert_double_eq_tol(est_seq_padded_mean(&h, 1, EST_BATCHING_RANDOM, 0), 200, 1e-9);
    est_seq_hist_free(&h);
    const char *bad[] = {"", "# none\n", "0\n", "12 x\n", "abc\n", "-3\n", "5 -1\n", "99999999999999999999\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        ck_assert_msg(est_seq_lengths_parse(bad[i], strlen(bad[i]), &h, err, sizeof err) < 0, "%s", bad[i]);
        ck_assert_ptr_nonnull(strstr(err, "--seq-lengths"));
    }
    const char nul[] = {'1', '0', '\0', '\n'};
    ck_assert_int_lt(est_seq_lengths_parse(nul, sizeof nul, &h, err, sizeof err), 0);
}
END_TEST

/* The flags, and what they refuse (one line, exit 2 from the binary). */
START_TEST(test_cli) {
    est_run r;
    char err[256];
    char *ok[] = {"ftest", "--model", "llama3.2-3b", "--peft", "ia3", "--ia3-targets", "k,v,down",
                  "--ia3-feedforward", "down", "--train-loop", "plain", "--seq-mean", "209", "--seq", "768"};
    ck_assert_msg(test_cli_build(15, ok, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(r.framework, EST_FW_HF);
    ck_assert_int_eq(r.peft, EST_PEFT_IA3);
    ck_assert_double_eq_tol(r.seq_mean, 209, 1e-12);
    char *no_vt[] = {"ftest", "--model", "llama3.2-3b", "--peft", "prompt-tuning"};
    ck_assert_int_lt(test_cli_build(5, no_vt, &r, err, sizeof err), 0);
    ck_assert_ptr_nonnull(strstr(err, "--virtual-tokens"));
    char *ia3_alone[] = {"ftest", "--model", "llama3.2-3b", "--ia3-targets", "k"};
    ck_assert_int_lt(test_cli_build(5, ia3_alone, &r, err, sizeof err), 0);
    char *variant_alone[] = {"ftest", "--model", "llama3.2-3b", "--framework", "hf", "--lora-variant", "dora"};
    ck_assert_int_lt(test_cli_build(7, variant_alone, &r, err, sizeof err), 0);
    ck_assert_ptr_nonnull(strstr(err, "--lora-rank"));
    char *cache[] = {"ftest", "--model", "llama3.2-3b", "--framework", "hf", "--empty-cache-steps", "10"};
    ck_assert_int_lt(test_cli_build(7, cache, &r, err, sizeof err), 0);
    char *ds[] = {"ftest", "--model", "llama3.2-3b", "--lora-rank", "8", "--lora-variant", "dora",
                  "--framework", "deepspeed"};
    ck_assert_int_lt(test_cli_build(9, ds, &r, err, sizeof err), 0);
    test_cmd_result *x = test_ftest("--model llama3.2-3b --seq-lengths /nonexistent/lengths.txt");
    ck_assert_int_eq(x->status, 2);
    ck_assert_int_eq(x->err_lines, 1);
    x = test_ftest("--model llama3.2-3b --gpu l40s-48gb --lora-rank 32 --lora-variant dora --train-loop plain "
                   "--stack 2026-07 --precision bf16 --batch 4 --seq 768 --seq-mean 208.9");
    ck_assert_int_eq(x->status, 0);
}
END_TEST

/* Random batches over 2 ranks: lengths 100 and 200, one sample each, b = 1.
 * One rank's batch: E[max of 1] = (100 + 200) / 2 = 150 tokens; the step waits
 * for the longer of the two ranks' samples: E[max of 2] = 100 x 1/4 + 200 x
 * 3/4 = 175. The time is priced at 175, the tokens counted at 150 each; one
 * rank, or sorted batches, leave a single mean. */
START_TEST(test_seq_lengths_ranks) {
    char path[] = "/tmp/ftest-lengths-XXXXXX";
    const int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "100\n200\n", 8), 8);
    close(fd);
    est_run r;
    char err[256];
    char *two[] = {"ftest", "--model", "qwen1.5-0.5b", "--framework", "hf", "--gpus", "2", "--seq-lengths", path};
    ck_assert_msg(test_cli_build(9, two, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_double_eq_tol(r.seq_mean, 175, 1e-9);
    ck_assert_double_eq_tol(r.seq_tokens_mean, 150, 1e-9);
    est_estimate e, one_mean;
    est_estimate_init(&e);
    est_estimate_init(&one_mean);
    ck_assert_msg(est_estimate_run(&r, &e, err, sizeof err) == 0, "%s", err);
    est_run m = r;
    m.seq_tokens_mean = 0;
    ck_assert_msg(est_estimate_run(&m, &one_mean, err, sizeof err) == 0, "%s", err);
    ck_assert_double_eq_tol(e.step_time_s, one_mean.step_time_s, 1e-12);
    ck_assert_double_eq_tol(e.tokens_per_s, one_mean.tokens_per_s * 150 / 175, 1e-6 * e.tokens_per_s);
    est_estimate_free(&e);
    est_estimate_free(&one_mean);
    char *one[] = {"ftest", "--model", "qwen1.5-0.5b", "--framework", "hf", "--seq-lengths", path};
    ck_assert_msg(test_cli_build(7, one, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_double_eq_tol(r.seq_mean, 150, 1e-9);
    ck_assert(r.seq_tokens_mean == 0);
    char *sorted[] = {"ftest", "--model", "qwen1.5-0.5b", "--framework", "hf", "--gpus", "2",
                      "--seq-lengths", path, "--batching", "sorted"};
    ck_assert_msg(test_cli_build(11, sorted, &r, err, sizeof err) == 0, "%s", err);
    ck_assert(r.seq_tokens_mean == 0);
    unlink(path);
}
END_TEST

Suite *suite_peft(void);
Suite *suite_peft(void) {
    Suite *s = suite_create("peft");
    TCase *tc = tcase_create("peft");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_trainable_counts_published);
    tcase_add_test(tc, test_dora_saved);
    tcase_add_test(tc, test_ia3_saved);
    tcase_add_test(tc, test_prompt_tuning_positions);
    tcase_add_test(tc, test_kv_cache_and_repeat);
    tcase_add_test(tc, test_after_step_hand);
    tcase_add_test(tc, test_mean_length_time);
    tcase_add_test(tc, test_plain_loop_grads_and_lorafa_state);
    tcase_add_test(tc, test_lorafa_a_requires_grad);
    tcase_add_test(tc, test_seq_lengths);
    tcase_add_test(tc, test_seq_lengths_ranks);
    tcase_add_test(tc, test_cli);
    suite_add_tcase(s, tc);
    return s;
}
