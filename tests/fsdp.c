/* The FSDP profile (estimator/frameworks/profile_fsdp.c) term by term against hand
 * derivations written here from torch's FSDP source as docs/method.md ("fsdp")
 * walks it. Every expected figure is arithmetic on the model's shapes.
 *
 * Qwen1.5-0.5B (models/qwen1.5-0.5b.json): h 1024, I 2816, 24 blocks, 16 heads
 * of 64 (no GQA), q/k/v biases, vocabulary 151936, tied embedding.
 *   block: q, k, v, o 1024 x 1024 = 4 x 1,048,576; biases 3 x 1024;
 *          gate, up 2816 x 1024, down 1024 x 2816 = 3 x 2,883,584;
 *          two norms 2 x 1024                         -> U_b = 12,850,176
 *   root:  embedding 151936 x 1024 = 155,582,464 + final norm 1024
 *                                                      -> U_r = 155,583,488
 *   P = 24 x 12,850,176 + 155,583,488 = 463,987,712 (the published total).
 * On 8 ranks both divide evenly: shards 1,606,272 and 19,447,936;
 * S = 24 x 1,606,272 + 19,447,936 = 57,998,464 elements per rank. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_run.h"
#include "estimate.h"
#include "options.h"
#include "record.h"
#include "test_util.h"

#define QWEN_UB INT64_C(12850176)
#define QWEN_UR INT64_C(155583488)
#define QWEN_EMB INT64_C(155582464)
#define QWEN_P INT64_C(463987712)
#define QWEN_SB8 INT64_C(1606272)
#define QWEN_SR8 INT64_C(19447936)
#define QWEN_S8 INT64_C(57998464)
#define CUBLAS_WS INT64_C(8519680) /* docs/method.md: 4096 KiB x 2 + 16 KiB x 8 */

static est_run base_run(const char *model, int64_t gpus, int zero) {
    est_run run = test_run_of(model, "h100");
    run.framework = EST_FW_FSDP;
    run.gpus_per_node = gpus;
    run.zero_stage = zero;
    run.seq_len = 2048;
    return run;
}

static void estimate(const est_run *run, est_estimate *e) {
    char err[256];
    est_estimate_init(e);
    ck_assert_msg(est_estimate_run(run, e, err, sizeof err) == 0, "%s", err);
}

static const est_phase *moment(const est_estimate *e, const char *label) {
    for (size_t i = 0; i < e->tl.count; i++)
        if (strcmp(e->tl.phases[i].label, label) == 0) return &e->tl.phases[i];
    ck_abort_msg("no moment \"%s\"", label);
    return NULL;
}

static int64_t at(const est_estimate *e, const char *label, est_category c) {
    return moment(e, label)->bytes[c];
}

/* The done-when: Llama-3-8B on 8 GPUs, seq 2048, bf16-mixed.
 * A block holds q, o 4096 x 4096, k, v 4096 x 1024 (8 KV heads of 128), gate,
 * up, down 4096 x 14336 and two norms of 4096:
 *   2 x 16,777,216 + 2 x 4,194,304 + 3 x 58,720,256 + 8192 = 218,112,000
 * (a multiple of 8, so no padding). Both strategies peak at the loss backward
 * (the log-softmax gradient of 2047 x 128256 fp32 logits beside every block's
 * saved activations). There FULL_SHARD holds no block gathered (each was freed
 * after its forward; FSDP1 under the HF Trainer has no backward prefetch),
 * SHARD_GRAD_OP all 32, unsharded in bf16 since their forward:
 *   32 x 218,112,000 x 2 = 13,959,168,000 bytes (13.0 GiB) more. */
START_TEST(test_shard_grad_op_above_full_shard_llama3_8b) {
    est_run fs = base_run("llama3-8b", 8, 3);
    est_run sgo = base_run("llama3-8b", 8, 2);
    est_estimate a, b;
    estimate(&fs, &a);
    estimate(&sgo, &b);
    ck_assert_str_eq(a.tl.phases[a.peak_index].label, "loss backward");
    ck_assert_str_eq(b.tl.phases[b.peak_index].label, "loss backward");
    ck_assert_int_eq(b.peak_allocated_bytes - a.peak_allocated_bytes, INT64_C(13959168000));
    est_estimate_free(&a);
    est_estimate_free(&b);
    /* FSDP2: FULL_SHARD has block 31 prefetched at the loss backward, so the
     * difference is 31 blocks: 31 x 218,112,000 x 2 = 13,522,944,000. */
    fs.fsdp_version = sgo.fsdp_version = EST_FSDP2;
    estimate(&fs, &a);
    estimate(&sgo, &b);
    ck_assert_str_eq(a.tl.phases[a.peak_index].label, "loss backward");
    ck_assert_str_eq(b.tl.phases[b.peak_index].label, "loss backward");
    ck_assert_int_eq(b.peak_allocated_bytes - a.peak_allocated_bytes, INT64_C(13522944000));
    est_estimate_free(&a);
    est_estimate_free(&b);
}
END_TEST

/* Resident sharded states, FULL_SHARD on 8 ranks, bf16-mixed, weights loaded
 * in fp32: fp32 shards 4S (the master), Adam m and v 8S; at forward layer 0
 * the root unit and block 0 unsharded in bf16: 2 x (U_r + U_b). */
START_TEST(test_full_shard_resident) {
    est_run run = base_run("qwen1.5-0.5b", 8, 3);
    est_estimate e;
    estimate(&run, &e);
    ck_assert_int_eq(at(&e, "forward layer 0", EST_CAT_MASTER), 4 * QWEN_S8);
    ck_assert_int_eq(at(&e, "forward layer 0", EST_CAT_OPTIMIZER), 8 * QWEN_S8);
    ck_assert_int_eq(at(&e, "forward layer 0", EST_CAT_COMM), 2 * (QWEN_UR + QWEN_UB));
    /* The root stays gathered through the loss and the last block's backward. */
    ck_assert_int_eq(at(&e, "loss", EST_CAT_COMM), 2 * QWEN_UR);
    ck_assert_int_eq(at(&e, "backward layer 23", EST_CAT_COMM), 2 * (QWEN_UR + QWEN_UB));
    ck_assert_int_eq(at(&e, "forward embedding", EST_CAT_COMM), 2 * QWEN_UR);
    est_estimate_free(&e);
}
END_TEST

/* SHARD_GRAD_OP: block i stays gathered from its forward to its backward, so
 * i + 1 blocks at forward layer i and backward layer i, all 24 at the loss. */
START_TEST(test_shard_grad_op_kept) {
    est_run run = base_run("qwen1.5-0.5b", 8, 2);
    est_estimate e;
    estimate(&run, &e);
    ck_assert_int_eq(at(&e, "forward layer 5", EST_CAT_COMM), 2 * QWEN_UR + 6 * 2 * QWEN_UB);
    ck_assert_int_eq(at(&e, "loss", EST_CAT_COMM), 2 * QWEN_UR + 24 * 2 * QWEN_UB);
    ck_assert_int_eq(at(&e, "backward LM head", EST_CAT_COMM), 2 * QWEN_UR + 24 * 2 * QWEN_UB);
    ck_assert_int_eq(at(&e, "backward layer 10", EST_CAT_COMM), 2 * QWEN_UR + 11 * 2 * QWEN_UB);
    ck_assert_int_eq(at(&e, "forward embedding", EST_CAT_COMM), 2 * QWEN_UR);
    /* Shards as FULL_SHARD's. */
    ck_assert_int_eq(at(&e, "loss", EST_CAT_MASTER), 4 * QWEN_S8);
    est_estimate_free(&e);
}
END_TEST

/* NO_SHARD (--zero 0) keeps every fp32 parameter (4P), Adam 8P, and a unit's
 * bf16 copy only while it computes (_flat_param.py post_reshard frees _mp_shard):
 * no padding. In fp32 there is no copy at all. */
START_TEST(test_no_shard) {
    est_run run = base_run("qwen1.5-0.5b", 8, 0);
    est_estimate e;
    estimate(&run, &e);
    ck_assert_int_eq(at(&e, "forward layer 3", EST_CAT_MASTER), 4 * QWEN_P);
    ck_assert_int_eq(at(&e, "forward layer 3", EST_CAT_OPTIMIZER), 8 * QWEN_P);
    ck_assert_int_eq(at(&e, "forward layer 3", EST_CAT_COMM), 2 * (QWEN_UR + QWEN_UB));
    /* Backward layer 20: root grad (the tied head's, 2 x emb), 4 blocks' fp32
     * gradients 4 x 4 U_b, block 20's bf16 gradient 2 U_b (all-reduced in place). */
    ck_assert_int_eq(at(&e, "backward layer 20", EST_CAT_GRADS),
                     2 * QWEN_EMB + 4 * 4 * QWEN_UB + 2 * QWEN_UB);
    est_estimate_free(&e);
    run.precision = EST_PREC_FP32;
    estimate(&run, &e);
    ck_assert_int_eq(at(&e, "forward layer 3", EST_CAT_COMM), 0);
    ck_assert_int_eq(at(&e, "forward layer 3", EST_CAT_PARAMS), 4 * QWEN_P);
    /* fp32 in one dtype: the all-reduced gradient is the result, 4 U_b per
     * block; the LM head's (tied) gradient 4 x emb waits for the embedding's. */
    ck_assert_int_eq(at(&e, "backward layer 20", EST_CAT_GRADS), 4 * QWEN_EMB + 4 * 4 * QWEN_UB);
    est_estimate_free(&e);
    /* Pure bf16 reduced in fp32: the bf16 gradient 2 U_b is cast to fp32
     * 4 U_b for the all-reduce, then back into the bf16 result 2 U_b per
     * block; the head's bf16 gradient 2 x emb waits. */
    run.precision = EST_PREC_BF16;
    run.fsdp_reduce = EST_REDUCE_FP32;
    estimate(&run, &e);
    ck_assert_int_eq(at(&e, "backward layer 20", EST_CAT_GRADS),
                     2 * QWEN_EMB + 4 * 2 * QWEN_UB + 2 * QWEN_UB + 4 * QWEN_UB);
    est_estimate_free(&e);
}
END_TEST

/* Gradients, FULL_SHARD, 8 ranks, bf16-mixed (reduce_dtype = bf16):
 * at backward layer 20: the LM head's bf16 gradient 2 x emb (waiting for the
 * embedding's), blocks 23..20's fp32 shards 4 x 4 x 1,606,272, block 20's bf16
 * unsharded gradient 2 U_b and its reduce-scatter output in bf16 2 x 1,606,272
 * before the cast. */
START_TEST(test_full_shard_grads) {
    est_run run = base_run("qwen1.5-0.5b", 8, 3);
    est_estimate e;
    estimate(&run, &e);
    ck_assert_int_eq(at(&e, "backward layer 20", EST_CAT_GRADS),
                     2 * QWEN_EMB + 4 * 4 * QWEN_SB8 + 2 * QWEN_UB + 2 * QWEN_SB8);
    /* Loss backward: no parameter gradient yet. */
    ck_assert_int_eq(at(&e, "loss backward", EST_CAT_GRADS), 0);
    /* LM head backward: its gradient alone. */
    ck_assert_int_eq(at(&e, "backward LM head", EST_CAT_GRADS), 2 * QWEN_EMB);
    /* Embedding backward: head gradient 2 emb; 24 fp32 block shards; the
     * embedding's own gradient and the final norm's 2 (emb + 1024); the flat
     * root gradient assembled 2 U_r; its reduce-scatter output 2 x 19,447,936
     * and the fp32 result 4 x 19,447,936. */
    ck_assert_int_eq(at(&e, "backward embedding", EST_CAT_GRADS),
                     2 * QWEN_EMB + 24 * 4 * QWEN_SB8 + 2 * (QWEN_EMB + 1024) + 2 * QWEN_UR +
                         2 * QWEN_SR8 + 4 * QWEN_SR8);
    /* After backward: fp32 gradient shards 4S, nothing gathered; the step adds
     * the foreach sqrt temporary 4S beside the cuBLAS workspace. */
    ck_assert_int_eq(at(&e, "gradients reduce-scattered", EST_CAT_GRADS), 4 * QWEN_S8);
    ck_assert_int_eq(at(&e, "gradients reduce-scattered", EST_CAT_COMM), 0);
    ck_assert_int_eq(at(&e, "optimizer step (foreach AdamW)", EST_CAT_WORKSPACE),
                     CUBLAS_WS + 4 * QWEN_S8);
    ck_assert_int_eq(at(&e, "optimizer step (foreach AdamW)", EST_CAT_OPTIMIZER), 8 * QWEN_S8);
    est_estimate_free(&e);
}
END_TEST

/* reduce_dtype fp32: FSDP1 casts the bf16 gradient to fp32 before the
 * reduce-scatter (both alive: 2 U_b + 4 U_b); the fp32 output is the result,
 * no cast. Backward layer 23: head 2 emb + one fp32 shard 4 x 1,606,272 + 6 U_b. */
START_TEST(test_reduce_fp32) {
    est_run run = base_run("qwen1.5-0.5b", 8, 3);
    run.fsdp_reduce = EST_REDUCE_FP32;
    est_estimate e;
    estimate(&run, &e);
    ck_assert_int_eq(at(&e, "backward layer 23", EST_CAT_GRADS),
                     2 * QWEN_EMB + 4 * QWEN_SB8 + 6 * QWEN_UB);
    est_estimate_free(&e);
}
END_TEST

/* Init: blocks are wrapped first (their fp32 shards, 24 x 4 x 1,606,272), the
 * root last: its parameters and their flattened copy 2 x 4 U_r. */
START_TEST(test_init_flatten) {
    est_run run = base_run("qwen1.5-0.5b", 8, 3);
    est_estimate e;
    estimate(&run, &e);
    ck_assert_int_eq(at(&e, "model sharded (root unit flattened)", EST_CAT_MASTER),
                     24 * 4 * QWEN_SB8 + 2 * 4 * QWEN_UR);
    /* Every rank loads the fp32 model on the host; bf16 when loaded so. */
    ck_assert_int_eq(e.cpu_load_bytes, 4 * QWEN_P);
    est_estimate_free(&e);
    run.load_dtype = EST_LOAD_BF16;
    estimate(&run, &e);
    ck_assert_int_eq(e.cpu_load_bytes, 2 * QWEN_P);
    est_estimate_free(&e);
}
END_TEST

/* FSDP1 pads a unit's FlatParameter to a multiple of W. On 7 ranks:
 * 12,850,176 / 7 -> 1,835,740 per rank, 12,850,180 gathered;
 * 155,583,488 / 7 -> 22,226,213 per rank, 155,583,491 gathered. The padded
 * gradient (F.pad) is a copy: 2 x 12,850,180 more in flight. */
START_TEST(test_fsdp1_padding) {
    est_run run = base_run("qwen1.5-0.5b", 7, 3);
    est_estimate e;
    estimate(&run, &e);
    ck_assert_int_eq(at(&e, "forward layer 0", EST_CAT_COMM), 2 * INT64_C(155583491) + 2 * INT64_C(12850180));
    ck_assert_int_eq(at(&e, "forward layer 0", EST_CAT_MASTER),
                     4 * (24 * INT64_C(1835740) + INT64_C(22226213)));
    ck_assert_int_eq(at(&e, "backward layer 23", EST_CAT_GRADS),
                     2 * QWEN_EMB + 4 * INT64_C(1835740) + 2 * QWEN_UB + 2 * INT64_C(12850180) +
                         2 * INT64_C(1835740));
    est_estimate_free(&e);
}
END_TEST

/* FSDP2 shards each parameter on dim 0, rows padded to a multiple of W. On 7:
 *   q, k, v, o: ceil(1024/7) = 147 rows x 1024 = 150,528 each
 *   q, k, v biases: 147 each; norms: 147 each
 *   gate, up: ceil(2816/7) = 403 rows x 1024 = 412,672 each
 *   down: 147 rows x 2816 = 413,952
 *   block shard 4 x 150,528 + 5 x 147 + 2 x 412,672 + 413,952 = 1,842,143
 *   (gathered 12,895,001); root: ceil(151936/7) = 21,706 rows x 1024 =
 *   22,226,944 + 147 = 22,227,091 (gathered 155,589,637). */
START_TEST(test_fsdp2_padding_and_prefetch) {
    est_run run = base_run("qwen1.5-0.5b", 7, 3);
    run.fsdp_version = EST_FSDP2;
    est_estimate e;
    estimate(&run, &e);
    const int64_t sb = 1842143, pb = 12895001, sr = 22227091, pr = 155589637;
    ck_assert_int_eq(at(&e, "forward layer 0", EST_CAT_MASTER), 4 * (24 * sb + sr));
    ck_assert_int_eq(at(&e, "forward layer 0", EST_CAT_COMM), 2 * pr + 2 * pb);
    /* Backward prefetch of one block: blocks i and i-1 gathered at backward
     * layer i >= 1 (and block 23 already at the loss backward); none ahead of 0. */
    ck_assert_int_eq(at(&e, "backward layer 5", EST_CAT_COMM), 2 * pr + 2 * 2 * pb);
    ck_assert_int_eq(at(&e, "loss backward", EST_CAT_COMM), 2 * pr + 2 * pb);
    ck_assert_int_eq(at(&e, "backward layer 0", EST_CAT_COMM), 2 * pr + 2 * pb);
    /* Gradients at backward layer 23: head 2 emb, one fp32 shard 4 sb, the
     * per-parameter bf16 gradients 2 U_b, the reduce-scatter input 2 pb and
     * its bf16 output 2 sb. No FSDP1 F.pad copy. */
    ck_assert_int_eq(at(&e, "backward layer 23", EST_CAT_GRADS),
                     2 * QWEN_EMB + 4 * sb + 2 * QWEN_UB + 2 * pb + 2 * sb);
    /* Init: every block's shard, then the root's parameters on the GPU beside
     * their padded shards (no flat copy), all fp32. */
    ck_assert_int_eq(at(&e, "model sharded (root unit flattened)", EST_CAT_MASTER),
                     4 * (24 * sb + QWEN_UR + sr));
    est_estimate_free(&e);
}
END_TEST

/* FSDP2's gather goes through one flat all-gather output copied out into
 * per-parameter tensors: for a moment the unit exists twice. With a short
 * sequence (16 tokens) that instant is above the block's compute, so forward
 * layer 0 holds the root, the block twice, the residual stream 16 x 1024 x 2
 * and nothing else that is not a state. */
START_TEST(test_fsdp2_staging) {
    est_run run = base_run("qwen1.5-0.5b", 8, 3);
    run.fsdp_version = EST_FSDP2;
    run.seq_len = 16;
    est_estimate e;
    estimate(&run, &e);
    const est_phase *f = moment(&e, "forward layer 0");
    ck_assert_int_eq(f->bytes[EST_CAT_COMM] + f->bytes[EST_CAT_ACTIVATIONS],
                     2 * QWEN_UR + 2 * 2 * QWEN_UB + 16 * 1024 * 2);
    f = moment(&e, "forward embedding");
    ck_assert_int_eq(f->bytes[EST_CAT_COMM] + f->bytes[EST_CAT_ACTIVATIONS], 2 * 2 * QWEN_UR);
    est_estimate_free(&e);
}
END_TEST

/* Weights loaded in bf16 under bf16-mixed: accelerate 0.29 (stack 2024-04)
 * keeps bf16 shards and bf16 Adam state (2S, 4S); 0.30+ (2025-02) upcasts
 * FSDP1's FlatParameters to fp32 (4S master, 8S Adam); accelerate's FSDP2 path
 * does not (2S, 4S again). */
START_TEST(test_load_bf16_upcast_by_stack) {
    est_run run = base_run("qwen1.5-0.5b", 8, 3);
    run.load_dtype = EST_LOAD_BF16;
    run.stack = est_stack_find("2024-04");
    ck_assert_ptr_nonnull(run.stack);
    est_estimate e;
    estimate(&run, &e);
    ck_assert_int_eq(at(&e, "loss", EST_CAT_MASTER), 0);
    ck_assert_int_eq(at(&e, "loss", EST_CAT_OPTIMIZER), 4 * QWEN_S8);
    /* The 4.40 per-layer rotary caches (24 x 2 x 32768 x 64 x 2) beside the shards. */
    ck_assert_int_eq(at(&e, "loss", EST_CAT_PARAMS), 2 * QWEN_S8 + 24 * 2 * 32768 * 64 * 2);
    est_estimate_free(&e);
    run.stack = est_stack_find("2025-02");
    estimate(&run, &e);
    ck_assert_int_eq(at(&e, "loss", EST_CAT_MASTER), 4 * QWEN_S8);
    ck_assert_int_eq(at(&e, "loss", EST_CAT_OPTIMIZER), 8 * QWEN_S8);
    est_estimate_free(&e);
    run.fsdp_version = EST_FSDP2;
    estimate(&run, &e);
    ck_assert_int_eq(at(&e, "loss", EST_CAT_PARAMS), 2 * QWEN_S8);
    ck_assert_int_eq(at(&e, "loss", EST_CAT_OPTIMIZER), 4 * QWEN_S8);
    est_estimate_free(&e);
}
END_TEST

/* FSDP1 on one rank switches to NO_SHARD: every fp32 parameter resident and a
 * block's bf16 copy while it computes, not a shard. */
START_TEST(test_one_rank_is_no_shard) {
    est_run run = base_run("qwen1.5-0.5b", 1, 3);
    est_estimate e;
    estimate(&run, &e);
    ck_assert_int_eq(at(&e, "forward layer 0", EST_CAT_MASTER), 4 * QWEN_P);
    ck_assert_int_eq(at(&e, "forward layer 0", EST_CAT_COMM), 2 * (QWEN_UR + QWEN_UB));
    /* The gradient is all-reduced in place (a no-op on one rank) and cast to
     * fp32: head 2 emb, block 23's fp32 4 U_b and its bf16 2 U_b; no
     * reduce-scatter output. */
    ck_assert_int_eq(at(&e, "backward layer 23", EST_CAT_GRADS), 2 * QWEN_EMB + 4 * QWEN_UB + 2 * QWEN_UB);
    est_estimate_free(&e);
}
END_TEST

/* Accumulation (no_sync between micro-batches): every unit's unsharded bf16
 * gradient, 2P, is carried into the forward; SHARD_GRAD_OP also keeps every
 * block gathered from one micro-batch to the next. */
START_TEST(test_accumulation) {
    est_run run = base_run("qwen1.5-0.5b", 8, 3);
    run.grad_accum = 4;
    est_estimate e;
    estimate(&run, &e);
    ck_assert_int_eq(at(&e, "forward layer 0", EST_CAT_GRADS), 2 * QWEN_P);
    est_estimate_free(&e);
    run.zero_stage = 2;
    estimate(&run, &e);
    ck_assert_int_eq(at(&e, "forward embedding", EST_CAT_COMM), 2 * QWEN_UR + 24 * 2 * QWEN_UB);
    est_estimate_free(&e);
}
END_TEST

/* CPU offload: shards, gradients and AdamW on the host (4S x (1 + 1 + 2));
 * the GPU keeps only what is gathered and in flight. */
START_TEST(test_offload) {
    est_run run = base_run("qwen1.5-0.5b", 8, 3);
    run.offload = EST_OFFLOAD_OPTIMIZER_PARAMS;
    est_estimate e;
    estimate(&run, &e);
    ck_assert_int_eq(e.cpu_bytes, 4 * QWEN_S8 * 4);
    ck_assert_int_eq(at(&e, "forward layer 0", EST_CAT_MASTER), 0);
    ck_assert_int_eq(at(&e, "forward layer 0", EST_CAT_OPTIMIZER), 0);
    ck_assert_int_eq(at(&e, "forward layer 0", EST_CAT_COMM), 2 * (QWEN_UR + QWEN_UB));
    ck_assert_int_eq(at(&e, "gradients reduce-scattered", EST_CAT_GRADS), 0);
    est_estimate_free(&e);
}
END_TEST

/* What cannot be run is refused with a message, not estimated. */
START_TEST(test_refused) {
    char err[256];
    est_estimate e;
    est_estimate_init(&e);
    est_run run = base_run("qwen1.5-0.5b", 8, 3);
    run.fsdp_version = EST_FSDP2;
    run.stack = est_stack_find("2024-04"); /* torch 2.2: no fully_shard */
    ck_assert_int_eq(est_estimate_run(&run, &e, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "torch >= 2.4"));
    run = base_run("qwen1.5-0.5b", 8, 0);
    run.fsdp_version = EST_FSDP2; /* FSDP2 has no NO_SHARD */
    ck_assert_int_eq(est_estimate_run(&run, &e, err, sizeof err), -1);
    run = base_run("qwen1.5-0.5b", 8, 3);
    run.load_dtype = EST_LOAD_BF16;
    run.precision = EST_PREC_FP32;
    ck_assert_int_eq(est_estimate_run(&run, &e, err, sizeof err), -1);
    est_estimate_free(&e);
}
END_TEST

/* The command line reaches the run: the three FSDP options, and the refusals
 * of options that mean nothing for the chosen framework. */
static int build(int argc, char *const argv[], est_run *run, char *err, size_t errlen) {
    static est_cli cli; /* large: files[] */
    memset(&cli, 0, sizeof cli);
    if (est_cli_parse(argc, argv, &cli, err, errlen) < 0) return -1;
    est_gpu_catalog cat;
    ck_assert_msg(est_gpu_catalog_load(NULL, &cat, err, errlen) == 0, "%s", err);
    int rc = est_cli_build_run(&cli, &cat, run, err, errlen);
    est_gpu_catalog_free(&cat);
    return rc;
}

START_TEST(test_cli_options) {
    char err[256];
    est_run run;
    char *const ok[] = {"ftest", "--model", "qwen1.5-0.5b", "--framework", "fsdp", "--zero", "2",
                        "--fsdp-version", "2", "--load-dtype", "bf16", "--fsdp-reduce-dtype", "fp32"};
    ck_assert_msg(build(13, ok, &run, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(run.fsdp_version, EST_FSDP2);
    ck_assert_int_eq(run.load_dtype, EST_LOAD_BF16);
    ck_assert_int_eq(run.fsdp_reduce, EST_REDUCE_FP32);
    char *const defaults[] = {"ftest", "--model", "qwen1.5-0.5b", "--framework", "fsdp"};
    ck_assert_msg(build(5, defaults, &run, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(run.fsdp_version, EST_FSDP1);
    ck_assert_int_eq(run.load_dtype, EST_LOAD_FP32);
    ck_assert_int_eq(run.fsdp_reduce, EST_REDUCE_PARAM);
    char *const not_fsdp[] = {"ftest", "--model", "qwen1.5-0.5b", "--framework", "deepspeed",
                              "--fsdp-version", "2"};
    ck_assert_int_eq(build(7, not_fsdp, &run, err, sizeof err), -1);
    char *const hf_bf16[] = {"ftest", "--model", "qwen1.5-0.5b", "--framework", "hf",
                             "--load-dtype", "bf16"};
    ck_assert_int_eq(build(7, hf_bf16, &run, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "--precision bf16"));
    char *const bad[] = {"ftest", "--model", "qwen1.5-0.5b", "--framework", "fsdp",
                         "--fsdp-version", "3"};
    ck_assert_int_eq(build(7, bad, &run, err, sizeof err), -1);
}
END_TEST

/* A record's config carries the same settings; absent, the defaults. */
START_TEST(test_record_fields) {
    char err[256];
    est_gpu_catalog cat;
    ck_assert_msg(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0, "%s", err);
    char *json = test_slurp(test_repo_path("tests/fuzz/corpus/record/fsdp"), NULL);
    est_record rec;
    ck_assert_msg(est_record_parse(json, strlen(json), &cat, &rec, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(rec.run.fsdp_version, EST_FSDP2);
    ck_assert_int_eq(rec.run.load_dtype, EST_LOAD_BF16);
    ck_assert_int_eq(rec.run.fsdp_reduce, EST_REDUCE_FP32);
    est_record_free(&rec);
    const char *bad = "\"fsdp_version\":2";
    char *v3 = strstr(json, bad);
    ck_assert_ptr_nonnull(v3);
    v3[strlen(bad) - 1] = '3';
    ck_assert_int_eq(est_record_parse(json, strlen(json), &cat, &rec, err, sizeof err), -1);
    free(json);
    est_gpu_catalog_free(&cat);
}
END_TEST

Suite *suite_fsdp(void);
Suite *suite_fsdp(void) {
    Suite *s = suite_create("fsdp");
    TCase *tc = tcase_create("terms");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_shard_grad_op_above_full_shard_llama3_8b);
    tcase_add_test(tc, test_full_shard_resident);
    tcase_add_test(tc, test_shard_grad_op_kept);
    tcase_add_test(tc, test_no_shard);
    tcase_add_test(tc, test_full_shard_grads);
    tcase_add_test(tc, test_reduce_fp32);
    tcase_add_test(tc, test_init_flatten);
    tcase_add_test(tc, test_fsdp1_padding);
    tcase_add_test(tc, test_fsdp2_padding_and_prefetch);
    tcase_add_test(tc, test_fsdp2_staging);
    tcase_add_test(tc, test_load_bf16_upcast_by_stack);
    tcase_add_test(tc, test_one_rank_is_no_shard);
    tcase_add_test(tc, test_accumulation);
    tcase_add_test(tc, test_offload);
    tcase_add_test(tc, test_refused);
    tcase_add_test(tc, test_cli_options);
    tcase_add_test(tc, test_record_fields);
    suite_add_tcase(s, tc);
    return s;
}
