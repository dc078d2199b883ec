/* The memory model's terms against hand derivations written here from the
 * sources named in docs/method.md, and its invariants. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deepspeed_estimator.h"
#include "estimate.h"
#include "hf_modeling.h"
#include "test_util.h"

static ft_model load_model(const char *name) {
    ft_model m;
    char err[256];
    ck_assert_msg(ft_model_load(name, &m, err, sizeof err) == 0, "%s", err);
    return m;
}

/* Qwen1.5-0.5B under DeepSpeed fp16 (module cast to fp16), SDPA, one sequence
 * of 2048 tokens, no padding mask. Per token and layer, from the 4.40 forward:
 *   each RMSNorm: fp32 input 4h + rsqrt 4 + fp16 normalized 2h   = 6h + 4
 *   attention norm output (saved once by q/k/v)                  = 2h
 *   SDPA saves q, k, v (MHA: h each), its output h, all fp16     = 8h
 *   MLP norm output                                              = 2h
 *   SwiGLU: gate, silu(gate), up, product, fp16                  = 8I
 * = 2*(6h+4) + 2h + 8h + 2h + 8I = 24h + 8I + 8 bytes per token,
 * plus per layer: log-sum-exp fp32 heads x 2048 rows, and RoPE cos and sin
 * gathered for 2048 positions x head_dim 64 in fp16. */
START_TEST(test_block_saved_qwen_sdpa) {
    est_run run;
    ft_model m = load_model("qwen1.5-0.5b");
    est_run_defaults(&run, &m, NULL);
    run.precision = EST_PREC_FP16_MIXED;
    run.seq_len = 2048;
    const int64_t h = 1024, I = 2816, T = 2048;
    int64_t want = T * (24 * h + 8 * I + 8) + 16 * 2048 * 4 + 2 * 2048 * 64 * 2;
    est_terms t;
    est_block_saved(&run, &t);
    ck_assert_int_eq(t.total, want);
    /* Full checkpointing keeps only the block input, fp16 (2h per token). */
    run.checkpointing = EST_CKPT_FULL;
    ck_assert_int_eq(est_block_kept_bytes(&run), T * 2 * h);
}
END_TEST

/* Llama-3-8B (GQA 32/8) in SDPA: repeat_kv materializes K and V for all 32
 * heads, so k and v are saved at q's width (4096), not 1024. */
START_TEST(test_block_saved_gqa_repeat) {
    est_run run;
    ft_model m = load_model("llama3-8b");
    est_run_defaults(&run, &m, NULL);
    run.precision = EST_PREC_BF16;
    run.seq_len = 1024;
    est_terms sdpa, flash;
    est_block_saved(&run, &sdpa);
    run.attention = EST_ATTN_FLASH;
    est_block_saved(&run, &flash);
    /* Flash keeps K and V at 8 heads x 128: 2 * 1024 (tokens) * 2 (bytes) *
     * (4096 - 1024) fewer bytes; flash's log-sum-exp is not padded to 32 rows
     * (1024 is a multiple of 32, so equal). */
    ck_assert_int_eq(sdpa.total - flash.total, 2 * 1024 * 2 * (4096 - 1024));
}
END_TEST

/* Eager attention saves the softmax probabilities in fp32 and their bf16
 * cast: 6 bytes x heads x s x s per sequence. Its output's contiguous copy
 * takes the place of the SDPA output (same size), and it has no log-sum-exp. */
START_TEST(test_eager_quadratic) {
    est_run run;
    ft_model m = load_model("qwen1.5-0.5b");
    est_run_defaults(&run, &m, NULL);
    run.precision = EST_PREC_BF16_MIXED;
    run.framework = EST_FW_DEEPSPEED;
    est_terms a, b;
    run.seq_len = 512;
    run.attention = EST_ATTN_EAGER;
    est_block_saved(&run, &a);
    run.attention = EST_ATTN_SDPA;
    est_block_saved(&run, &b);
    int64_t probs = 16LL * 512 * 512 * 6, lse = 16LL * 512 * 4;
    ck_assert_int_eq(a.total - b.total, probs - lse);
}
END_TEST

/* Logits (transformers 4.40): backward holds log-softmax output, NLL gradient
 * and log-softmax gradient, fp32, over b*(s-1) rows: 12 V bytes per row. The
 * forward at batch 1 has no shifted copy (a view), so 4Vs + 4V(s-1). */
START_TEST(test_logits) {
    est_run run;
    ft_model m = load_model("qwen1.5-0.5b");
    est_run_defaults(&run, &m, NULL);
    run.precision = EST_PREC_FP16_MIXED;
    run.seq_len = 2048;
    const int64_t V = 151936;
    est_terms t;
    est_logits_backward(&run, &t);
    ck_assert_int_eq(t.total, 12 * V * 2047);
    est_logits_forward(&run, &t);
    ck_assert_int_eq(t.total, 4 * V * 2048 + 4 * V * 2047);
    run.micro_batch = 2;
    est_logits_forward(&run, &t);
    ck_assert_int_eq(t.total, 4 * V * 4096 + 8 * V * 4094);
}
END_TEST

/* ZeRO-3 on one GPU after the first step, between steps (DeepSpeed stage3.py):
 * fp16 weights 2P, fp16 gradient partition 2P, fp32 master 4P, Adam 8P, the
 * 5e8-element fp16 bucket and Qwen2's RoPE caches (24 layers x cos+sin x 32768
 * positions x 64 x fp16; transformers 4.40, the 2024-04 stack). The init
 * moment has everything but Adam's state and the cuBLAS workspaces (they come
 * with the first GEMMs, in the first step). */
START_TEST(test_zero3_resident) {
    est_run run;
    ft_model m = load_model("qwen1.5-0.5b");
    est_run_defaults(&run, &m, NULL);
    run.stack = est_stack_find("2024-04");
    run.gpu = test_gpu("rtx3090");
    run.precision = EST_PREC_FP16_MIXED;
    run.zero_stage = 3;
    est_estimate e;
    est_estimate_init(&e);
    char err[256];
    ck_assert_msg(est_estimate_run(&run, &e, err, sizeof err) == 0, "%s", err);
    const int64_t P = 463987712;
    int64_t want = 2 * P + 2 * P + 4 * P + 1000000000 + 24LL * 2 * 32768 * 64 * 2;
    size_t init = 0;
    while (init < e.tl.count && strcmp(e.tl.phases[init].label, "engine initialized")) init++;
    ck_assert_uint_lt(init, e.tl.count);
    ck_assert_int_eq(est_phase_allocated(&e.tl.phases[init]), want);
    /* The step: + Adam 8P + flattened fp16 copy 2P + its fp32 cast 4P. */
    ck_assert_int_eq(e.category_peak[EST_CAT_GRADS], 2 * P + 6 * P);
    est_estimate_free(&e);
}
END_TEST

/* DeepSpeed's estimators, by their formulas (stage3.py / stage_1_and_2.py):
 * Qwen1.5-0.5B, 1 GPU: largest layer = embedding 151936*1024 = 155,582,464.
 *   zero3 no offload: 4*155,582,464 + int(18*463,987,712/1) = 8,974,108,672
 *   zero2 offload:    gpu 2*P = 927,975,424; cpu P*max(4,16)*1.5 = 11,135,705,088
 * Llama-3-8B on 8 GPUs, zero3 no offload:
 *   4*525,336,576 + int(18*8,030,261,248/8) = 20,169,434,112 */
START_TEST(test_deepspeed_estimators) {
    ft_model q = load_model("qwen1.5-0.5b"), l = load_model("llama3-8b");
    est_ds_counts c;
    est_ds_count(&q, &c);
    ck_assert_int_eq(c.total_params, 463987712);
    ck_assert_int_eq(c.largest_layer_params, 155582464);
    ck_assert_int_eq(est_ds_zero3(c.total_params, c.largest_layer_params, 1, 1, false, false, true).gpu_bytes,
                     8974108672LL);
    est_ds_mem z2 = est_ds_zero2(c.total_params, 1, 1, true);
    ck_assert_int_eq(z2.gpu_bytes, 927975424LL);
    ck_assert_int_eq(z2.cpu_bytes, 11135705088LL);
    est_ds_count(&l, &c);
    ck_assert_int_eq(c.largest_layer_params, 525336576);
    ck_assert_int_eq(est_ds_zero3(c.total_params, c.largest_layer_params, 8, 1, false, false, true).gpu_bytes,
                     20169434112LL);
}
END_TEST

START_TEST(test_deepspeed_table_layout) {
    ft_model q = load_model("qwen1.5-0.5b");
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    est_ds_print_tables(f, &q, 1, 1);
    fclose(f);
    /* Rows as DeepSpeed prints them: f" {cpu/2**30:7.2f}GB | {gpu/2**30:6.2f}GB | {options}". */
    ck_assert_ptr_nonnull(strstr(buf, "SW: Model with 463M total params, 155M largest layer params."));
    ck_assert_ptr_nonnull(strstr(buf, "  per CPU  |  per GPU |   Options\n"));
    ck_assert_ptr_nonnull(strstr(buf, "   10.37GB |   0.86GB | offload_optimizer=cpu \n"));
    ck_assert_ptr_nonnull(strstr(buf, "    0.87GB |   8.36GB | offload_param=none, offload_optimizer=none, zero_init=1\n"));
    ck_assert_ptr_nonnull(strstr(buf, "HW: Setup with 1 node, 1 GPU per node."));
    free(buf);
}
END_TEST

static int64_t peak(est_run *run) {
    est_estimate e;
    est_estimate_init(&e);
    char err[256];
    ck_assert_msg(est_estimate_run(run, &e, err, sizeof err) == 0, "%s", err);
    int64_t p = e.peak_allocated_bytes;
    est_estimate_free(&e);
    return p;
}

/* What every option must do to the peak, whatever the constants. */
START_TEST(test_monotone_in_every_knob) {
    const est_framework fws[] = {EST_FW_HF, EST_FW_DEEPSPEED, EST_FW_FSDP};
    ft_model m = load_model("llama3.2-1b");
    for (size_t f = 0; f < 3; f++) {
        est_run run;
        est_run_defaults(&run, &m, NULL);
        run.gpu = test_gpu("h100");
        run.framework = fws[f];
        run.gpus_per_node = 8;
        /* Never less with a longer sequence; more once activations dominate. */
        int64_t prev = 0, first = 0;
        for (int64_t s = 256; s <= 8192; s *= 2) {
            run.seq_len = s;
            int64_t p = peak(&run);
            ck_assert_int_ge(p, prev);
            if (!first) first = p;
            prev = p;
        }
        ck_assert_int_gt(prev, first);
        run.seq_len = 4096;
        int64_t none = peak(&run);
        run.checkpointing = EST_CKPT_FULL;
        ck_assert_int_lt(peak(&run), none);
        run.checkpointing = EST_CKPT_NONE;
        run.loss = EST_LOSS_CHUNKED;
        ck_assert_int_lt(peak(&run), none);
    }
    /* Deeper sharding never needs more per GPU on 8 GPUs once the model
     * states dominate. (For a 1B model with a 128K vocabulary it can: ZeRO-3's
     * reduce bucket, gathered head and pending frees outweigh sharding the
     * 1.2B parameters; docs/method.md, "Stream-ordered frees".) */
    m = load_model("llama3-8b");
    est_run run;
    est_run_defaults(&run, &m, NULL);
    run.gpu = test_gpu("h100");
    run.gpus_per_node = 8;
    int64_t prev = INT64_MAX;
    for (int z = 1; z <= 3; z++) {
        run.zero_stage = z;
        int64_t p = peak(&run);
        ck_assert_int_le(p, prev);
        prev = p;
    }
    run.offload = EST_OFFLOAD_OPTIMIZER;
    ck_assert_int_lt(peak(&run), prev);
}
END_TEST

/* 405B parameters and a million tokens per GPU step stay in range. */
START_TEST(test_no_overflow_405b_1m_tokens) {
    ft_model m = load_model("llama3.1-405b");
    est_run run;
    est_run_defaults(&run, &m, NULL);
    run.gpu = test_gpu("h100");
    run.seq_len = 131072;
    run.micro_batch = 8;
    run.gpus_per_node = 8;
    run.nodes = 64;
    run.zero_stage = 3;
    run.checkpointing = EST_CKPT_FULL;
    int64_t got = peak(&run);
    /* At least the kept block inputs: 126 layers x 1,048,576 tokens x 16384 x 2 bytes. */
    ck_assert_int_gt(got, 126LL * 1048576 * 16384 * 2);
    ck_assert_int_lt(got, INT64_C(1) << 60);
    run.checkpointing = EST_CKPT_NONE;
    run.attention = EST_ATTN_EAGER;
    ck_assert_int_gt(peak(&run), got);
}
END_TEST

Suite *suite_estimator(void);
Suite *suite_estimator(void) {
    Suite *s = suite_create("estimator");
    TCase *tc = tcase_create("terms");
    tcase_add_test(tc, test_block_saved_qwen_sdpa);
    tcase_add_test(tc, test_block_saved_gqa_repeat);
    tcase_add_test(tc, test_eager_quadratic);
    tcase_add_test(tc, test_logits);
    tcase_add_test(tc, test_zero3_resident);
    tcase_add_test(tc, test_deepspeed_estimators);
    tcase_add_test(tc, test_deepspeed_table_layout);
    suite_add_tcase(s, tc);
    TCase *inv = tcase_create("invariants");
    tcase_add_test(inv, test_monotone_in_every_knob);
    tcase_add_test(inv, test_no_overflow_405b_1m_tokens);
    suite_add_tcase(s, inv);
    return s;
}
