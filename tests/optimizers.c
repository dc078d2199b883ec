/* Optimizer state (estimator/model/optimizers.c) against hand derivations from
 * bitsandbytes 0.44-0.45 optim/optimizer.py and transformers 4.40
 * optimization.py (docs/method.md, "Optimizers"). */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "estimate.h"
#include "lora.h"
#include "optimizers.h"
#include "test_util.h"

static est_run hf_run(const char *model, est_optimizer opt) {
    est_run run;
    ft_model m;
    char err[256];
    ck_assert_msg(ft_model_load(model, &m, err, sizeof err) == 0, "%s", err);
    est_run_defaults(&run, &m, NULL);
    run.framework = EST_FW_HF;
    run.optimizer = opt;
    return run;
}

static const int64_t N8B = INT64_C(8030261248); /* Llama-3-8B, published */

/* The tensor list covers the model exactly: its elements sum to the total. */
START_TEST(test_tensors_cover_model) {
    est_run run = hf_run("llama3-8b", EST_OPT_ADAMW);
    est_tensor_group g[EST_MAX_TENSOR_GROUPS];
    int n = est_trainable_tensors(&run, g);
    int64_t sum = 0;
    for (int i = 0; i < n; i++) sum += g[i].count * g[i].rows * (g[i].cols ? g[i].cols : 1);
    ck_assert_int_eq(sum, N8B);
    run = hf_run("qwen2.5-0.5b", EST_OPT_ADAMW); /* q/k/v biases, tied embedding: 494,032,768 */
    n = est_trainable_tensors(&run, g);
    sum = 0;
    for (int i = 0; i < n; i++) sum += g[i].count * g[i].rows * (g[i].cols ? g[i].cols : 1);
    ck_assert_int_eq(sum, 494032768);
}
END_TEST

/* 8-bit AdamW on Llama-3-8B with fp32 parameters: every tensor has at least
 * 4096 elements (the norms exactly 4096, not below min_8bit_size), and every
 * size is a multiple of 256, so the state is two uint8 codes plus two fp32
 * absmax per 256 elements: 2 + 8/256 bytes per parameter against AdamW's
 * 2 x 4. Saved: 8 - 2.03125 = 5.96875 bytes per parameter ("about 6"), and
 * the foreach step temporary (4 per parameter) is gone too. */
START_TEST(test_adamw_8bit_saves_6_bytes) {
    est_run run = hf_run("llama3-8b", EST_OPT_ADAMW);
    est_optimizer_bytes a, b;
    est_optimizer_bytes_of(&run, 4, &a);
    ck_assert_int_eq(a.state_bytes, 8 * N8B);
    ck_assert_int_eq(a.step_bytes, 4 * N8B);
    run.optimizer = EST_OPT_ADAMW_8BIT;
    est_optimizer_bytes_of(&run, 4, &b);
    ck_assert_int_eq(b.state_bytes, 2 * N8B + N8B / 32);
    ck_assert_int_eq(b.step_bytes, 0);
    ck_assert_int_eq((a.state_bytes - b.state_bytes) * 32, 191 * N8B); /* 5.96875 = 191/32 */
    /* The same through the whole estimate: the optimizer category. */
    est_estimate e;
    est_estimate_init(&e);
    char err[256];
    run.seq_len = 256;
    run.gpu.memory_bytes = INT64_C(1) << 40;
    ck_assert_msg(est_estimate_run(&run, &e, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(e.category_peak[EST_CAT_OPTIMIZER], 2 * N8B + N8B / 32);
    est_estimate_free(&e);
}
END_TEST

/* tiny-llama (h 32, V 64): every tensor is under 4096 elements, so 8-bit
 * AdamW keeps all state in fp32: 8 bytes x 22,688. */
START_TEST(test_min_8bit_size) {
    est_run run = hf_run("tiny-llama", EST_OPT_ADAMW_8BIT);
    est_optimizer_bytes b;
    est_optimizer_bytes_of(&run, 4, &b);
    ck_assert_int_eq(b.state_bytes, 8 * 22688);
}
END_TEST

/* Paged 8-bit AdamW, Llama-3-8B full fine-tune: codes of tensors with at least
 * 1e5 elements are paged (all but the 65 norms of 4096); absmax stays on the
 * GPU. LoRA r=16 q,v: A is 16 x 4096 = 65,536 < 1e5, so nothing is paged;
 * r=64: A 262,144 and B (q) 262,144 are paged, B (v) 1024 x 64 = 65,536 not. */
START_TEST(test_paged) {
    est_run run = hf_run("llama3-8b", EST_OPT_PAGED_ADAMW_8BIT);
    est_optimizer_bytes b;
    est_optimizer_bytes_of(&run, 4, &b);
    const int64_t norms = 65 * 4096;
    ck_assert_int_eq(b.paged_bytes, 2 * (N8B - norms));
    ck_assert_int_eq(b.state_bytes, N8B / 32 + 2 * norms);
    ck_assert_int_eq(b.largest_paged_bytes, INT64_C(2) * 128256 * 4096); /* embedding or head */
    run.lora.rank = 16;
    est_optimizer_bytes_of(&run, 4, &b);
    ck_assert_int_eq(b.paged_bytes, 0);
    run.lora.rank = 64;
    est_optimizer_bytes_of(&run, 4, &b);
    ck_assert_int_eq(b.paged_bytes, 32 * 2 * (3 * 262144));
}
END_TEST

/* Adafactor (beta1=None), Llama-3-8B: per block the row + column sums of the
 * seven matrices, 8192 + 5120 + 5120 + 8192 + 3 x 18432 = 81,920, x32; the 65
 * norm vectors whole (4096 each); embedding and head 128256 + 4096 each; all
 * fp32. Lion: one fp32 moment. SGD with momentum: one buffer in the
 * parameters' dtype; without, nothing. */
START_TEST(test_adafactor_lion_sgd) {
    est_run run = hf_run("llama3-8b", EST_OPT_ADAFACTOR);
    est_optimizer_bytes b;
    est_optimizer_bytes_of(&run, 4, &b);
    ck_assert_int_eq(b.state_bytes, 4 * (32 * 81920 + 65 * 4096 + 2 * (128256 + 4096)));
    ck_assert_int_eq(b.step_bytes, INT64_C(2) * 128256 * 4096 * 4); /* the largest tensor, twice */
    run.optimizer = EST_OPT_ADAFACTOR_BETA1; /* plus exp_avg, fp32, every parameter */
    est_optimizer_bytes_of(&run, 4, &b);
    ck_assert_int_eq(b.state_bytes, 4 * (32 * 81920 + 65 * 4096 + 2 * (128256 + 4096)) + 4 * N8B);
    run.optimizer = EST_OPT_PAGED_ADAMW_32BIT; /* 8 bytes, paged from 1e5 elements */
    est_optimizer_bytes_of(&run, 4, &b);
    ck_assert_int_eq(b.paged_bytes, 8 * (N8B - 65 * 4096));
    ck_assert_int_eq(b.state_bytes, 8 * 65 * 4096);
    run.optimizer = EST_OPT_LION;
    est_optimizer_bytes_of(&run, 2, &b);
    ck_assert_int_eq(b.state_bytes, 4 * N8B);
    run.optimizer = EST_OPT_SGD_MOMENTUM;
    est_optimizer_bytes_of(&run, 2, &b);
    ck_assert_int_eq(b.state_bytes, 2 * N8B);
    run.optimizer = EST_OPT_SGD;
    est_optimizer_bytes_of(&run, 2, &b);
    ck_assert_int_eq(b.state_bytes + b.step_bytes, 0);
}
END_TEST

START_TEST(test_optimizer_bad_input) {
    est_run run = hf_run("llama3-8b", EST_OPT_ADAMW_8BIT);
    char err[256];
    ck_assert_int_eq(est_run_validate(&run, err, sizeof err), 0);
    run.framework = EST_FW_DEEPSPEED;
    run.optimizer = EST_OPT_LION; /* DeepSpeed takes adamw-8bit as a client optimizer (seam_deepspeed.c) */
    ck_assert_int_eq(est_run_validate(&run, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "--framework hf"));
    est_optimizer o;
    ck_assert_int_eq(est_optimizer_parse("adamw-8bit", &o, err, sizeof err), 0);
    ck_assert_int_eq(o, EST_OPT_ADAMW_8BIT);
    ck_assert_int_eq(est_optimizer_parse("adam8", &o, err, sizeof err), -1);
}
END_TEST

/* --optimizer-in-backward, Llama-3-8B in pure bf16 (w = 2) on one GPU: no
 * gradient buffer and no optimizer moment; the largest gradient alive is one
 * 128256 x 4096 matrix (head or embedding), stepped in its hook with AdamW's
 * two single-tensor temporaries of its size (2 x 128256 x 4096 x 2 bytes
 * beside the cuBLAS workspace of 8,519,680). The state is unchanged (2 x N x
 * 2). --activation-offload (save_on_cpu around the forward) with full
 * checkpointing puts on the host each block's input kept by its checkpoint
 * (2048 x 4096 x 2, 32 of them) and what the head saves: the final norm's
 * fp32 input (2048 x 4096 x 4), rsqrt (2048 x 4) and normalized bf16 value
 * (2048 x 4096 x 2), the LM head's bf16 input (2048 x 4096 x 2) and the
 * log-softmax of the fp32 logits over every row (the default stack's
 * transformers 4.49 shifts the labels, not the logits: 2048 x 128256 x 4);
 * the recompute in backward runs outside the hooks. */
START_TEST(test_in_backward_and_offload) {
    est_run run = hf_run("llama3-8b", EST_OPT_ADAMW);
    est_gpu g = {.name = "x", .memory_bytes = INT64_C(1) << 40};
    run.gpu = g;
    run.precision = EST_PREC_BF16;
    run.seq_len = 2048;
    run.checkpointing = EST_CKPT_FULL;
    run.optimizer_in_backward = true;
    est_estimate e;
    est_estimate_init(&e);
    char err[256];
    ck_assert_msg(est_estimate_run(&run, &e, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(e.category_peak[EST_CAT_GRADS], INT64_C(128256) * 4096 * 2);
    /* two cuBLAS workspaces (8,519,680 each off compute capability 9.0): the
     * forward's handle's and the autograd device thread's */
    ck_assert_int_eq(e.category_peak[EST_CAT_WORKSPACE], INT64_C(2) * 128256 * 4096 * 2 + 2 * 8519680);
    ck_assert_int_eq(e.category_peak[EST_CAT_OPTIMIZER], 4 * N8B);
    ck_assert_int_ne(e.tl.phases[e.tl.count - 1].kind, EST_PHASE_OPTIMIZER);
    ck_assert_int_eq(e.cpu_bytes, 0);
    const int64_t act_on_gpu = e.category_peak[EST_CAT_ACTIVATIONS];
    run.activation_offload = true;
    ck_assert_msg(est_estimate_run(&run, &e, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(e.cpu_bytes, INT64_C(32) * 2048 * 4096 * 2 + INT64_C(2048) * 4096 * 4 + 2048 * 4 +
                                      INT64_C(2) * 2048 * 4096 * 2 + INT64_C(2048) * 128256 * 4);
    ck_assert_int_lt(e.category_peak[EST_CAT_ACTIVATIONS], act_on_gpu);
    est_estimate_free(&e);
    run.gpus_per_node = 2;
    ck_assert_int_eq(est_run_validate(&run, err, sizeof err), -1);
    run.gpus_per_node = 1;
    run.framework = EST_FW_FSDP;
    ck_assert_int_eq(est_run_validate(&run, err, sizeof err), -1);
}
END_TEST

Suite *suite_optimizers(void);
Suite *suite_optimizers(void) {
    Suite *s = suite_create("optimizers");
    TCase *tc = tcase_create("optimizers");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_tensors_cover_model);
    tcase_add_test(tc, test_adamw_8bit_saves_6_bytes);
    tcase_add_test(tc, test_min_8bit_size);
    tcase_add_test(tc, test_paged);
    tcase_add_test(tc, test_adafactor_lion_sgd);
    tcase_add_test(tc, test_optimizer_bad_input);
    tcase_add_test(tc, test_in_backward_and_offload);
    suite_add_tcase(s, tc);
    return s;
}
