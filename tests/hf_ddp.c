/* The HF Trainer + PyTorch DDP profile (estimator/frameworks/profile_hf.c) term by term
 * against hand derivations written here from torch's DDP and autocast source
 * as docs/method.md ("hf") walks it.
 *
 * Qwen1.5-0.5B: h 1024, I 2816, 24 blocks, q/k/v biases, tied embedding.
 *   block U_b = 12,850,176 (tests/fsdp.c), of which two RMSNorm weights 2048
 *   and Linear weights and biases 12,848,128; the largest Linear weight is
 *   gate (or up, down) 2816 x 1024 = 2,883,584;
 *   embedding (= LM head) 151936 x 1024 = 155,582,464; P = 463,987,712. */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "estimate.h"
#include "test_util.h"

#define Q_P INT64_C(463987712)
#define Q_UB INT64_C(12850176)
#define Q_LIN INT64_C(12848128)
#define Q_GATE INT64_C(2883584)
#define Q_EMB INT64_C(155582464)
/* The cuBLAS workspaces on the H100/H200 these runs name: 4096 KiB x 8 per
 * handle on compute capability 9.0 (CublasHandlePool.cpp
 * getChosenWorkspaceSize; 4096 KiB x 2 + 16 KiB x 8 = 8,519,680 elsewhere);
 * a step's moments hold two, the forward's handle's and the autograd device
 * thread's: docs/method.md ("cuBLAS workspace"). */
#define CUBLAS_WS (2 * INT64_C(33554432))

static est_run hf_run(const char *model, int64_t gpus) {
    est_run run = test_run_of(model, "h100");
    run.framework = EST_FW_HF;
    run.gpus_per_node = gpus;
    run.seq_len = 2048;
    return run;
}

/* What category c holds at the moment's highest point. */
static int64_t at(const est_estimate *e, const char *label, est_category c) {
    return test_row(e, label)->bytes[c];
}

/* Category c's own highest point within the moment. */
static int64_t own(const est_estimate *e, const char *label, est_category c) {
    return test_row(e, label)->own_max[c];
}

/* bf16-mixed on 8 ranks: fp32 weights 4P; DDP's buckets 4P (allocated at
 * construction, gradient_as_bucket_view=False); Adam m, v 8P; no gradients in
 * the first micro-batch's forward; autocast's bf16 copies of blocks 0..5's
 * Linear weights and biases at forward layer 5. */
START_TEST(test_resident_and_casts) {
    est_run run = hf_run("qwen1.5-0.5b", 8);
    est_estimate e;
    test_estimate(&run, &e);
    ck_assert_int_eq(at(&e, "model loaded", EST_CAT_PARAMS), 4 * Q_P);
    ck_assert_int_eq(at(&e, "model loaded", EST_CAT_COMM), 0);
    ck_assert_int_eq(at(&e, "forward layer 5", EST_CAT_PARAMS), 4 * Q_P + 6 * 2 * Q_LIN);
    ck_assert_int_eq(at(&e, "forward layer 5", EST_CAT_COMM), 4 * Q_P);
    ck_assert_int_eq(at(&e, "forward layer 5", EST_CAT_OPTIMIZER), 8 * Q_P);
    ck_assert_int_eq(at(&e, "forward layer 5", EST_CAT_GRADS), 0);
    ck_assert_int_eq(at(&e, "forward layer 5", EST_CAT_WORKSPACE), CUBLAS_WS);
    /* At the loss every block's casts and the LM head's (the tied embedding
     * cast for the head matmul, 2 x emb). */
    ck_assert_int_eq(at(&e, "loss", EST_CAT_PARAMS), 4 * Q_P + 24 * 2 * Q_LIN + 2 * Q_EMB);
    /* Each of block 20's weight casts is released with its Linear's saved
     * tensors after that Linear's backward: in backward layer 20 blocks
     * 0..19's are all there and block 20's, at most. The q/k/v bias casts
     * (3 x 1024 per block) are not: addmm saves its two matrices, not its
     * bias, and autocast's cache lets them go when the forward ends. */
    ck_assert_int_eq(own(&e, "backward layer 20", EST_CAT_PARAMS), 4 * Q_P + 21 * 2 * (Q_LIN - 3072));
    ck_assert_int_ge(at(&e, "backward layer 20", EST_CAT_PARAMS), 4 * Q_P + 20 * 2 * Q_LIN);
    ck_assert_int_eq(e.cpu_load_bytes, 4 * Q_P);
    est_estimate_free(&e);
}
END_TEST

/* Gradients: fp32 (the weights' dtype), appearing as backward reaches them.
 * LM head: its fp32 gradient 4 emb and, for a moment, its bf16 gradient before
 * the cast backward 2 emb. Backward layer 20: head 4 emb and blocks 23..21's
 * 3 x 4 U_b before it; by its end block 20's 4 U_b too; the most in flight at
 * once is one bf16 weight gradient beside its fp32 one, the gate's at most
 * (2 x 2,883,584). Embedding: the embedding's own new fp32 gradient 4 emb
 * (added in place into the tied head's) and the final norm's 4 x 1024. */
START_TEST(test_gradients) {
    est_run run = hf_run("qwen1.5-0.5b", 8);
    est_estimate e;
    test_estimate(&run, &e);
    ck_assert_int_eq(at(&e, "loss backward", EST_CAT_GRADS), 0);
    ck_assert_int_eq(own(&e, "backward LM head", EST_CAT_GRADS), 4 * Q_EMB + 2 * Q_EMB);
    const int64_t b20 = own(&e, "backward layer 20", EST_CAT_GRADS);
    ck_assert_int_ge(b20, 4 * Q_EMB + 4 * 4 * Q_UB);
    ck_assert_int_le(b20, 4 * Q_EMB + 4 * 4 * Q_UB + 2 * Q_GATE);
    ck_assert_int_eq(own(&e, "backward embedding", EST_CAT_GRADS),
                     4 * Q_EMB + 24 * 4 * Q_UB + 4 * (Q_EMB + 1024));
    /* All-reduce: every gradient 4P in param.grad and 4P in the buckets. */
    ck_assert_int_eq(at(&e, "gradient all-reduce", EST_CAT_GRADS), 4 * Q_P);
    ck_assert_int_eq(at(&e, "gradient all-reduce", EST_CAT_COMM), 4 * Q_P);
    /* AdamW foreach: exp_avg_sq_sqrt, a 4P temporary. */
    ck_assert_int_eq(at(&e, "optimizer step (foreach AdamW)", EST_CAT_WORKSPACE), CUBLAS_WS + 4 * Q_P);
    est_estimate_free(&e);
}
END_TEST

/* Llama-3-8B (untied): the LM head's weight 128256 x 4096 = 525,336,576 is its
 * own; the embedding's gradient (same size) stays beside it. A block is
 * 218,112,000 (tests/fsdp.c). */
START_TEST(test_untied_head) {
    est_run run = hf_run("llama3-8b", 8);
    est_estimate e;
    test_estimate(&run, &e);
    const int64_t V_h = INT64_C(525336576), ub = INT64_C(218112000);
    ck_assert_int_eq(own(&e, "backward LM head", EST_CAT_GRADS), 4 * V_h + 2 * V_h);
    ck_assert_int_eq(own(&e, "backward embedding", EST_CAT_GRADS), 4 * V_h + 32 * 4 * ub + 4 * (V_h + 4096));
    ck_assert_int_eq(at(&e, "loss", EST_CAT_PARAMS) - at(&e, "model loaded", EST_CAT_PARAMS),
                     32 * 2 * (ub - 2 * 4096) + 2 * V_h);
    est_estimate_free(&e);
}
END_TEST

/* One GPU: the Trainer does not wrap the model in DDP, so no buckets. */
START_TEST(test_one_gpu_no_buckets) {
    est_run run = hf_run("qwen1.5-0.5b", 1);
    est_estimate e;
    test_estimate(&run, &e);
    ck_assert_int_eq(at(&e, "forward layer 0", EST_CAT_COMM), 0);
    ck_assert_int_eq(at(&e, "gradient all-reduce", EST_CAT_COMM), 0);
    est_estimate_free(&e);
}
END_TEST

/* Accumulation: no_sync keeps param.grad from earlier micro-batches, 4P through
 * the forward; backward adds only what is in flight (the bf16 gate gradient
 * and its fp32 cast, added into .grad). */
START_TEST(test_accumulation) {
    est_run run = hf_run("qwen1.5-0.5b", 8);
    run.grad_accum = 2;
    est_estimate e;
    test_estimate(&run, &e);
    ck_assert_int_eq(at(&e, "forward layer 0", EST_CAT_GRADS), 4 * Q_P);
    /* and AccumulateGrad's new fp32 gradient before it is added in place */
    ck_assert_int_le(own(&e, "backward layer 20", EST_CAT_GRADS), 4 * Q_P + (2 + 4) * Q_GATE);
    ck_assert_int_ge(own(&e, "backward layer 20", EST_CAT_GRADS), 4 * Q_P);
    est_estimate_free(&e);
}
END_TEST

/* Pure bf16: weights, gradients, buckets and Adam in bf16 (2P, 2P, 4P); no
 * autocast, so no weight copies and no cast-backward transients. fp32: 4-byte
 * everything, no copies either. */
START_TEST(test_pure_bf16_and_fp32) {
    est_run run = hf_run("qwen1.5-0.5b", 8);
    run.precision = EST_PREC_BF16;
    est_estimate e;
    test_estimate(&run, &e);
    ck_assert_int_eq(at(&e, "forward layer 5", EST_CAT_PARAMS), 2 * Q_P);
    ck_assert_int_eq(at(&e, "forward layer 5", EST_CAT_COMM), 2 * Q_P);
    ck_assert_int_eq(at(&e, "forward layer 5", EST_CAT_OPTIMIZER), 4 * Q_P);
    /* the tied head's, the final norm's (1024) and blocks 23..20's */
    ck_assert_int_eq(own(&e, "backward layer 20", EST_CAT_GRADS), 2 * Q_EMB + 2 * 1024 + 4 * 2 * Q_UB);
    ck_assert_int_eq(own(&e, "backward LM head", EST_CAT_GRADS), 2 * Q_EMB + 2 * 1024);
    ck_assert_int_eq(e.cpu_load_bytes, 2 * Q_P); /* loaded in bf16 on the host */
    est_estimate_free(&e);
    run.precision = EST_PREC_FP32;
    test_estimate(&run, &e);
    ck_assert_int_eq(at(&e, "loss", EST_CAT_PARAMS), 4 * Q_P);
    ck_assert_int_eq(own(&e, "backward layer 20", EST_CAT_GRADS), 4 * Q_EMB + 4 * 1024 + 4 * 4 * Q_UB);
    est_estimate_free(&e);
}
END_TEST

/* SGD without momentum keeps no state and builds no temporary. */
START_TEST(test_sgd) {
    est_run run = hf_run("qwen1.5-0.5b", 8);
    run.optimizer = EST_OPT_SGD;
    est_estimate e;
    test_estimate(&run, &e);
    ck_assert_int_eq(at(&e, "forward layer 0", EST_CAT_OPTIMIZER), 0);
    ck_assert_int_eq(at(&e, "optimizer step (SGD)", EST_CAT_WORKSPACE), CUBLAS_WS);
    est_estimate_free(&e);
}
END_TEST

/* transformers 4.40 (stack 2024-04): every Qwen2 decoder layer's rotary module
 * caches cos and sin for 32768 positions x 64, built in the default dtype
 * (fp32, the weights') and left alone by autocast: 24 x 2 x 32768 x 64 x 4. */
START_TEST(test_rope_caches_fp32) {
    est_run run = hf_run("qwen1.5-0.5b", 8);
    run.stack = est_stack_find("2024-04");
    ck_assert_ptr_nonnull(run.stack);
    est_estimate e;
    test_estimate(&run, &e);
    const int64_t rope = INT64_C(24) * 2 * 32768 * 64 * 4;
    ck_assert_int_eq(at(&e, "model loaded", EST_CAT_PARAMS), 4 * Q_P + rope);
    ck_assert_int_eq(at(&e, "forward layer 0", EST_CAT_PARAMS), 4 * Q_P + rope + 2 * Q_LIN);
    est_estimate_free(&e);
    /* Pure bf16: the model, and so the caches, in bf16. */
    run.precision = EST_PREC_BF16;
    test_estimate(&run, &e);
    ck_assert_int_eq(at(&e, "model loaded", EST_CAT_PARAMS), 2 * Q_P + rope / 2);
    est_estimate_free(&e);
}
END_TEST

Suite *suite_hf_ddp(void);
Suite *suite_hf_ddp(void) {
    Suite *s = suite_create("hf_ddp");
    TCase *tc = tcase_create("terms");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_resident_and_casts);
    tcase_add_test(tc, test_gradients);
    tcase_add_test(tc, test_untied_head);
    tcase_add_test(tc, test_one_gpu_no_buckets);
    tcase_add_test(tc, test_accumulation);
    tcase_add_test(tc, test_pure_bf16_and_fp32);
    tcase_add_test(tc, test_sgd);
    tcase_add_test(tc, test_rope_caches_fp32);
    suite_add_tcase(s, tc);
    return s;
}
