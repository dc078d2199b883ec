/* The FSDP seam (estimator/frameworks/seam_fsdp*.c) tensor by tensor against
 * hand derivations written here from torch's FSDP source as docs/method.md
 * ("fsdp") walks it. Every expected figure is arithmetic on the model's shapes.
 * A timeline row is a span: at() reads it at its highest point, own() each
 * category's own highest point in it; each assertion says which instant that
 * is. Defaults (base_run): FSDP1, bf16-mixed (c = 2 bytes), weights loaded in
 * fp32 (w = 4), reduction in the compute dtype (r = 2), no prefetch (the HF
 * Trainer's fsdp_config default), seq 2048, micro-batch 1.
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

#include "caching_allocator.h"
#include "check_records.h"
#include "cli_run.h"
#include "estimate.h"
#include "fsdp_policy.h"
#include "lora.h"
#include "options.h"
#include "record.h"
#include "test_util.h"
#include "step_build.h"
#include "timing.h"

#define QWEN_UB INT64_C(12850176)
#define QWEN_UR INT64_C(155583488)
#define QWEN_EMB INT64_C(155582464)
#define QWEN_P INT64_C(463987712)
#define QWEN_SB8 INT64_C(1606272)
#define QWEN_SR8 INT64_C(19447936)
#define QWEN_S8 INT64_C(57998464)
#define QWEN_UR2 (2 * QWEN_UR) /* the root's gradients waiting in c: the tied head's V x h and
                                  the final norm's 1024, 2 bytes each */
/* The cuBLAS workspaces on the H100/H200 these runs name: 4096 KiB x 8 per
 * handle on compute capability 9.0 (CublasHandlePool.cpp
 * getChosenWorkspaceSize; 4096 KiB x 2 + 16 KiB x 8 = 8,519,680 elsewhere);
 * a step's moments hold two, the forward's handle's and the autograd device
 * thread's: docs/method.md ("cuBLAS workspace"). */
#define CUBLAS_WS (2 * INT64_C(33554432))

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
    e->step.keep_names = true; /* test_streams finds tensors by name */
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

static int64_t own(const est_estimate *e, const char *label, est_category c) {
    return moment(e, label)->own_max[c];
}

/* The done-when: Llama-3-8B on 8 GPUs, seq 2048, bf16-mixed.
 * A block holds q, o 4096 x 4096, k, v 4096 x 1024 (8 KV heads of 128), gate,
 * up, down 4096 x 14336 and two norms of 4096:
 *   2 x 16,777,216 + 2 x 4,194,304 + 3 x 58,720,256 + 8192 = 218,112,000
 * (a multiple of 8, so no padding). Under FSDP1 both strategies peak at the loss backward
 * (the log-softmax gradient of 2047 x 128256 fp32 logits beside every block's
 * saved activations). At that span's highest point FULL_SHARD holds no block
 * gathered (each was freed after its forward; FSDP1 under the HF Trainer has
 * no backward prefetch), SHARD_GRAD_OP all 32, unsharded in bf16 since their
 * forward; everything else is the same:
 *   32 x 218,112,000 x 2 = 13,959,168,000 bytes (13.0 GiB) more. */
/* Bytes each rank sends in the step's collectives (the time ledger's). */
static double step_comm_bytes(const est_run *run) {
    est_estimate e;
    estimate(run, &e);
    double bytes = 0;
    for (size_t i = 0; i < e.step.work_count; i++)
        if (e.step.work[i].kind == EST_EV_STEP_COMM) bytes += e.step.work[i].u.comm.bytes;
    est_estimate_free(&e);
    return bytes;
}

/* FULL_SHARD gathers every block for its forward and again for its backward,
 * but the root unit (embedding, final norm, untied head) once: the root is
 * not resharded after its forward (FSDP1 _runtime_utils.py `not
 * state._is_root`). Llama-3-8B over 8 ranks in bf16: P = 8,030,261,248
 * parameters, root = 2 x 128,256 x 4,096 + 4,096 = 1,050,677,248; each rank
 * sends 7/8 of (2 (P - root) + root) x 2 bytes gathered and P x 2 reduced. */
START_TEST(test_full_shard_root_gathered_once) {
    est_run run = base_run("llama3-8b", 8, 3);
    run.micro_batch = 1;
    const double P = 8030261248.0, root = 1050677248.0;
    const double want = 7.0 / 8.0 * ((2 * (P - root) + root) * 2 + P * 2);
    ck_assert_double_eq_tol(step_comm_bytes(&run), want, want * 1e-9);
}
END_TEST

/* The collectives no compute hides: each micro-batch's forward waits for the
 * root unit's all-gather and the first block's (FSDP1 _pre_forward_unshard
 * waits for the unshard stream before it prefetches the next unit), and the
 * step's backward ends with the first block's and the root's reduce-scatters,
 * which the final callback makes the compute stream wait for
 * (_post_backward_final_callback). Llama-3-8B on 8 ranks in bf16: root =
 * 1,050,677,248 parameters (as above), a block 4096 x (4096 + 1024 + 1024 +
 * 4096) + 3 x 4096 x 14,336 + 2 x 4096 = 218,112,000; each end sends 7/8 of
 * (root + block) x 2 bytes: 2 x 7/8 x 1,268,789,248 x 2 = 4,440,762,368. With
 * four micro-batches the gathers repeat four times, the reduce once (no_sync).
 * The total is unchanged (test_full_shard_root_gathered_once). */
static double exposed_comm_bytes(const est_run *run) {
    est_estimate e;
    estimate(run, &e);
    double bytes = 0;
    for (size_t i = 0; i < e.step.work_count; i++)
        if (e.step.work[i].kind == EST_EV_STEP_COMM && e.step.work[i].u.comm.overlap == EST_OVERLAP_NONE)
            bytes += e.step.work[i].u.comm.bytes;
    est_estimate_free(&e);
    return bytes;
}

START_TEST(test_full_shard_exposed_ends) {
    est_run run = base_run("llama3-8b", 8, 3);
    run.micro_batch = 1;
    const double ends = 1050677248.0 + 218112000.0;
    double want = 2 * 7.0 / 8.0 * ends * 2;
    ck_assert_double_eq_tol(exposed_comm_bytes(&run), want, want * 1e-9);
    run.grad_accum = 4;
    want = 7.0 / 8.0 * (4 * ends + ends) * 2;
    ck_assert_double_eq_tol(exposed_comm_bytes(&run), want, want * 1e-9);
    run.grad_accum = 1;
    run.gpus_per_node = 1; /* one rank: no collective at all */
    ck_assert_double_eq_tol(exposed_comm_bytes(&run), 0, 1e-9);
}
END_TEST

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
    /* FSDP2: the root's pre-backward prefetches block 31 (its flat all-gather
     * output, 218,112,000 x 2), so at the loss backward FULL_SHARD holds one
     * block's worth and the difference there is 31: 31 x 218,112,000 x 2 =
     * 13,522,944,000. SHARD_GRAD_OP peaks earlier, at the loss, which the
     * forward computes before it returns: there it also holds block 31's flat
     * all-gather output (218,112,000 x 2, kept for the next copy-out until
     * the root's post-forward), the KV cache its output holds (transformers
     * 4.49 keeps each block's k and v after RoPE, which SDPA's repeat_kv copies
     * leave to the cache alone: 32 x 2 x 2048 x 1024 x 2 = 268,435,456) and
     * logits 10 T V (bf16 2 T V held by the output, .float() and log_softmax
     * 4 T V each) against the loss backward's 12 T V + 4 (the saved
     * log_softmax, its gradient and the logits' gradient in fp32, and the
     * loss's): 13,522,944,000 + 436,224,000 + 268,435,456 - 2 x 262,668,288
     * - 4 = 13,702,266,876. */
    fs.fsdp_version = sgo.fsdp_version = EST_FSDP2;
    estimate(&fs, &a);
    estimate(&sgo, &b);
    ck_assert_str_eq(a.tl.phases[a.peak_index].label, "loss backward");
    ck_assert_str_eq(b.tl.phases[b.peak_index].label, "loss");
    ck_assert_int_eq(b.peak_allocated_bytes - a.peak_allocated_bytes, INT64_C(13702266876));
    est_estimate_free(&a);
    est_estimate_free(&b);
}
END_TEST

/* Resident sharded states, FULL_SHARD on 8 ranks, bf16-mixed, weights loaded
 * in fp32: fp32 shards 4S (the master), Adam m and v 8S (made at the warm-up
 * step's first step). Block 0's forward peaks in its compute (its activations
 * outgrow its 2 x 1,606,272-byte low-precision shard, already freed): there
 * the root unit and block 0 are unsharded in bf16, 2 x (U_r + U_b). */
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
    /* The embedding's highest point is the root's all-gather: _mp_shard (the
     * shard cast to bf16, 2 x S_r, pre-unshard stream) beside the gathered unit
     * (2 x U_r) until post_unshard frees it; the embedding's output that follows
     * (2048 x 1024 x 2 = 4 MiB) is smaller than that shard. */
    ck_assert_int_eq(at(&e, "forward embedding", EST_CAT_COMM), 2 * QWEN_UR + 2 * QWEN_SR8);
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
    /* the root's all-gather with its _mp_shard, as under FULL_SHARD */
    ck_assert_int_eq(at(&e, "forward embedding", EST_CAT_COMM), 2 * QWEN_UR + 2 * QWEN_SR8);
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
    /* Gradients in backward layer 20: the root's wait in bf16 (2 U_r: the
     * tied head's and the final norm's) and blocks 23..21 left fp32 results
     * (3 x 4 U_b). Block 20's views' bf16 gradients (2 U_b) meet in torch.cat
     * (2 U_b more), then go; the flat gradient is all-reduced in place and cast
     * to fp32 (4 U_b) before it is freed: 2 U_r + 12 U_b + 2 U_b + 4 U_b is
     * the most. */
    ck_assert_int_eq(own(&e, "backward layer 20", EST_CAT_GRADS), QWEN_UR2 + 18 * QWEN_UB);
    est_estimate_free(&e);
    run.precision = EST_PREC_FP32;
    estimate(&run, &e);
    ck_assert_int_eq(at(&e, "forward layer 3", EST_CAT_COMM), 0);
    ck_assert_int_eq(at(&e, "forward layer 3", EST_CAT_PARAMS), 4 * QWEN_P);
    /* fp32 in one dtype: the flat gradient is the result, 4 U_b per block;
     * the root's wait in fp32 (4 U_r). At the cat the views' gradients (4 U_b)
     * and the flat one (4 U_b) exist together: 4 U_r + 12 U_b + 8 U_b. */
    ck_assert_int_eq(own(&e, "backward layer 20", EST_CAT_GRADS), 4 * QWEN_UR + 20 * QWEN_UB);
    est_estimate_free(&e);
    /* Pure bf16 reduced in fp32: blocks 23..21's bf16 results (3 x 2 U_b),
     * block 20's flat bf16 gradient (2 U_b, its views' already freed), its
     * fp32 cast for the all-reduce (4 U_b) and the bf16 result cast back
     * (2 U_b) together; the root's 2 U_r wait. */
    run.precision = EST_PREC_BF16;
    run.fsdp_reduce = EST_REDUCE_FP32;
    estimate(&run, &e);
    ck_assert_int_eq(own(&e, "backward layer 20", EST_CAT_GRADS), QWEN_UR2 + 14 * QWEN_UB);
    est_estimate_free(&e);
}
END_TEST

/* Gradients, FULL_SHARD, 8 ranks, bf16-mixed (reduce_dtype = bf16). In
 * backward layer 20 the root's 2 U_r and blocks 23..21's fp32 shards
 * (3 x 4 x 1,606,272) wait; block 20's views' bf16 gradients (2 U_b) meet in
 * torch.cat (2 U_b more): 4 U_b = 32 shards, more than what the reduce-scatter
 * holds after the views' go (the flat gradient 2 U_b, the bf16 output and its
 * fp32 cast, 2 + 4 shards: 22 shards). */
START_TEST(test_full_shard_grads) {
    est_run run = base_run("qwen1.5-0.5b", 8, 3);
    est_estimate e;
    estimate(&run, &e);
    ck_assert_int_eq(own(&e, "backward layer 20", EST_CAT_GRADS),
                     QWEN_UR2 + 3 * 4 * QWEN_SB8 + 4 * QWEN_UB);
    /* Loss backward: no parameter gradient yet. */
    ck_assert_int_eq(own(&e, "loss backward", EST_CAT_GRADS), 0);
    /* LM head backward: the tied head's gradient and then the final norm's,
     * both waiting for the embedding's. */
    ck_assert_int_eq(own(&e, "backward LM head", EST_CAT_GRADS), QWEN_UR2);
    /* Embedding backward: the 24 fp32 block shards wait; the root's views'
     * gradients (the head's, into which the embedding's own is added, and the
     * norm's: 2 U_r) meet in torch.cat (2 U_r), more than the reduce-scatter's
     * 2 U_r + 6 x 19,447,936 after they go. */
    ck_assert_int_eq(own(&e, "backward embedding", EST_CAT_GRADS), 24 * 4 * QWEN_SB8 + 4 * QWEN_UR);
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

/* reduce_dtype fp32: FSDP1 casts the flat bf16 gradient to fp32 before the
 * reduce-scatter (both alive: 2 U_b + 4 U_b) and reduce-scatters into an fp32
 * output that is the result (4 x 1,606,272), no cast: backward layer 23 at
 * most holds the root's 2 U_r, 6 U_b and one fp32 shard (the cat's 4 U_b is
 * less). */
START_TEST(test_reduce_fp32) {
    est_run run = base_run("qwen1.5-0.5b", 8, 3);
    run.fsdp_reduce = EST_REDUCE_FP32;
    est_estimate e;
    estimate(&run, &e);
    ck_assert_int_eq(own(&e, "backward layer 23", EST_CAT_GRADS), QWEN_UR2 + 6 * QWEN_UB + 4 * QWEN_SB8);
    est_estimate_free(&e);
}
END_TEST

/* Init: blocks are wrapped first (their fp32 shards, 24 x 4 x 1,606,272), the
 * root last: its parameters moved to the device (4 U_r), their concatenation
 * (4 U_r) and this rank's shard cloned from it (4 S_r) before the concatenation
 * and, with the wrapping's end, the originals go. */
START_TEST(test_init_flatten) {
    est_run run = base_run("qwen1.5-0.5b", 8, 3);
    est_estimate e;
    estimate(&run, &e);
    ck_assert_int_eq(own(&e, "model sharded", EST_CAT_MASTER),
                     24 * 4 * QWEN_SB8 + 2 * 4 * QWEN_UR + 4 * QWEN_SR8);
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
 * gradient (F.pad) is a copy: in backward layer 23 the reduce-scatter holds
 * the flat bf16 gradient (2 U_b), its padded copy (2 x 12,850,180), the bf16
 * output (2 x 1,835,740) and its fp32 cast (4 x 1,835,740) beside the root's
 * 2 U_r, more than the cat's 4 U_b. */
START_TEST(test_fsdp1_padding) {
    est_run run = base_run("qwen1.5-0.5b", 7, 3);
    est_estimate e;
    estimate(&run, &e);
    ck_assert_int_eq(at(&e, "forward layer 0", EST_CAT_COMM), 2 * INT64_C(155583491) + 2 * INT64_C(12850180));
    ck_assert_int_eq(at(&e, "forward layer 0", EST_CAT_MASTER),
                     4 * (24 * INT64_C(1835740) + INT64_C(22226213)));
    ck_assert_int_eq(own(&e, "backward layer 23", EST_CAT_GRADS),
                     QWEN_UR2 + 2 * QWEN_UB + 2 * INT64_C(12850180) + 6 * INT64_C(1835740));
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
    /* Block 0's all-gather is the highest point of its span: the root is
     * there twice, as its parameters (2 pr) and as its flat all-gather output
     * (2 pr), which FSDP2 keeps until the next group's copy-out
     * (_fsdp_param_group.py wait_for_unshard: comm_ctx.all_gather_state),
     * beside block 0's flat input (its shards cast to bf16, 2 sb) and output
     * (2 pb). */
    ck_assert_int_eq(at(&e, "forward layer 0", EST_CAT_COMM), 4 * pr + 2 * sb + 2 * pb);
    /* Backward prefetch of one group (pre_backward -> _backward_prefetch):
     * while block i >= 1 computes, its parameters (2 pb) and block i-1's flat
     * all-gather output (2 pb) exist beside the root's (2 pr; the root is not
     * resharded after forward: _lazy_init, post_forward_mesh_info = None);
     * block 23's output already at the loss backward; none ahead of block 0. */
    ck_assert_int_eq(at(&e, "backward layer 5", EST_CAT_COMM), 2 * pr + 2 * 2 * pb);
    ck_assert_int_eq(at(&e, "loss backward", EST_CAT_COMM), 2 * pr + 2 * pb);
    ck_assert_int_eq(at(&e, "backward layer 0", EST_CAT_COMM), 2 * pr + 2 * pb);
    /* Gradients in backward layer 23: the root's 2 U_r wait; block 23's
     * per-parameter bf16 gradients (2 U_b) are copied into the reduce-scatter
     * input (2 pb) before they go (foreach_reduce); its bf16 output and fp32
     * cast (2 + 4 sb) come after them. No FSDP1 F.pad copy. */
    ck_assert_int_eq(own(&e, "backward layer 23", EST_CAT_GRADS), QWEN_UR2 + 2 * QWEN_UB + 2 * pb);
    /* Block 22: block 23's fp32 shard (4 sb) and its reduce-scatter input
     * (2 pb), which FSDP2 keeps until the next reduce-scatter
     * (comm_ctx.reduce_scatter_state), wait beside block 22's gradients; the
     * input goes before block 22's own is made. */
    ck_assert_int_eq(own(&e, "backward layer 22", EST_CAT_GRADS), QWEN_UR2 + 4 * sb + 2 * pb + 2 * QWEN_UB);
    /* Block 0's input waits through the embedding's backward: the embedding's
     * gradient (2 x emb, added into the tied head's and then freed) arrives
     * beside it, the root's 2 U_r and the 24 fp32 block shards: more than the
     * root's own reduce-scatter input (2 pr) after both are gone. */
    ck_assert_int_eq(own(&e, "backward embedding", EST_CAT_GRADS),
                     QWEN_UR2 + 24 * 4 * sb + 2 * QWEN_EMB + 2 * pb);
    /* Init: every block's shard, then the root's parameters on the GPU beside
     * their padded shards (no flat copy), all fp32. */
    ck_assert_int_eq(own(&e, "model sharded", EST_CAT_MASTER), 4 * (24 * sb + QWEN_UR + sr));
    est_estimate_free(&e);
}
END_TEST

/* FSDP2's gather goes through one flat all-gather output copied out into
 * per-parameter tensors, and in forward the flat output stays until the next
 * group's copy-out. With a short sequence (16 tokens) the gathers are the
 * highest points: at the embedding the root twice (per parameter and flat)
 * beside the embedding's output (16 x 1024 x 2); at block 0's all-gather the
 * root twice, block 0's bf16 flat input (2 x 1,606,272) and output (2 U_b),
 * the residual stream, and the model's RoPE cos and sin (made once after the
 * embedding, transformers 4.49 Qwen2Model.rotary_emb: 16 x 64 bf16 each).
 * The root's gathers are still there when the rotary module returns, with
 * its locals freqs (16 x 32 x 4), emb and the fp32 cos and sin (16 x 64 x 4
 * each) beside the bf16 casts: 18,432 more at the embedding. */
START_TEST(test_fsdp2_staging) {
    est_run run = base_run("qwen1.5-0.5b", 8, 3);
    run.fsdp_version = EST_FSDP2;
    run.seq_len = 16;
    est_estimate e;
    estimate(&run, &e);
    const est_phase *f = moment(&e, "forward layer 0");
    ck_assert_int_eq(f->bytes[EST_CAT_COMM] + f->bytes[EST_CAT_ACTIVATIONS],
                     4 * QWEN_UR + 2 * QWEN_SB8 + 2 * QWEN_UB + 16 * 1024 * 2 + 2 * 16 * 64 * 2);
    f = moment(&e, "forward embedding");
    ck_assert_int_eq(f->bytes[EST_CAT_COMM] + f->bytes[EST_CAT_ACTIVATIONS],
                     4 * QWEN_UR + 16 * 1024 * 2 + 16 * 32 * 4 + 3 * 16 * 64 * 4 + 2 * 16 * 64 * 2);
    est_estimate_free(&e);
}
END_TEST

/* FSDP2 on one rank (torch 2.15 _fsdp_param_group.py, "world_size == 1" in
 * unshard and wait_for_unshard; stack 2026-11): no all-gather, no flat input or output;
 * each parameter's unsharded tensor is filled from its all-gather input
 * (_fsdp_param.py all_gather_inputs), and nothing is kept for a next
 * copy-out. Shards are whole (ceil(rows / 1) = rows), so shard = U.
 *  fp32 (no MixedPrecision policy): the input is the shard itself. At block
 *   0's forward: the root (4 U_r; the root stays gathered after forward)
 *   and block 0 (4 U_b), nothing flat beside them (W > 1 would add the root's
 *   flat output, 4 U_r, and block 0's, 4 U_b). In backward, block 5's
 *   pre-backward prefetches block 4, which on one rank allocates nothing
 *   until block 4's own wait: 4 U_r + 4 U_b again.
 *  bf16-mixed: the input is the shard cast to bf16, one parameter at a time,
 *   alive until the next parameter's input exists. The root's embedding
 *   (155,582,464 elements) is its largest: at its copy its cast (2 emb) and
 *   its unsharded tensor (2 emb) exist beside the final norm's tensors
 *   (2 x 1024, unsharded or cast, in whichever order the group lists them):
 *   2 U_r + 2 emb.
 * Torch 2.6 (stack 2025-02) has no such path: in fp32 block 0's flat
 * all-gather output (4 U_b) is allocated while the root's (4 U_r) is still
 * kept for the copy-out overlap, beside the root's parameters (4 U_r). */
START_TEST(test_fsdp2_one_rank) {
    est_run run = base_run("qwen1.5-0.5b", 1, 3);
    run.fsdp_version = EST_FSDP2;
    run.seq_len = 16;
    run.precision = EST_PREC_FP32;
    est_estimate e;
    estimate(&run, &e);
    ck_assert_int_eq(at(&e, "forward layer 0", EST_CAT_COMM), 4 * (2 * QWEN_UR + QWEN_UB));
    est_estimate_free(&e);
    run.stack = est_stack_find("2026-11");
    estimate(&run, &e);
    ck_assert_int_eq(at(&e, "forward layer 0", EST_CAT_COMM), 4 * (QWEN_UR + QWEN_UB));
    ck_assert_int_eq(at(&e, "backward layer 5", EST_CAT_COMM), 4 * (QWEN_UR + QWEN_UB));
    est_estimate_free(&e);
    run.precision = EST_PREC_BF16_MIXED;
    estimate(&run, &e);
    ck_assert_int_eq(at(&e, "forward embedding", EST_CAT_COMM), 2 * QWEN_UR + 2 * QWEN_EMB);
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

/* The GPU day's FSDP1 probe (calibrate/records/probe-h200-2026-11-26.jsonl,
 * probe/fsdp-w1/fsdp/...; calibrate/probes/probe_run.py run_fsdp): the script
 * builds the model in bf16 and calls FullyShardedDataParallel on it itself,
 * MixedPrecision(bf16, bf16, bf16), one rank (so NO_SHARD), no accelerate.
 * FSDP1 flattens each unit's bf16 parameters into a bf16 FlatParameter
 * (_flat_param.py flatten_tensors: torch.cat; _orig_param_dtype =
 * params[0].dtype, torch 2.11), and param_dtype equal to it is no mixed
 * precision (_uses_param_mixed_precision: _fwd_bwd_param_dtype !=
 * _orig_param_dtype): no _mp_shard, the modules compute on the FlatParameter.
 * Llama-3.2-1B with the probe's untied head
 * (calibrate/records/models/llama3.2-1b-untied.json: h 2048, I 8192, 16
 * blocks, 32 heads of 64, 8 KV heads, vocabulary 128256):
 *   block: q, o 2048 x 2048 = 2 x 4,194,304; k, v 512 x 2048 = 2 x 1,048,576;
 *          gate, up, down 3 x 8192 x 2048 = 3 x 16,777,216; norms 2 x 2048
 *                                                     -> U_b = 60,821,504
 *   root:  embedding and head 2 x 128,256 x 2048 + final norm 2048
 *                                                     -> U_r = 525,338,624
 *   P = 16 U_b + U_r = 1,498,482,688 (the model's 1.498 B).
 * At the optimizer step: the FlatParameters (2P), their gradients (2P: the
 * flat gradient in bf16, all-reduced in place, no cast as reduce_dtype =
 * param_dtype = the FlatParameter's), AdamW's exp_avg and exp_avg_sq
 * (zeros_like(param): 4P) and foreach's sqrt temporaries (one per
 * FlatParameter, 2P): 10P, and the cuBLAS workspace. Through accelerate
 * (the HF Trainer's path, stack 2025-02: accelerate 1.4 upcasts the
 * FlatParameters to fp32) the same run holds 4P + 4P + 8P + 4P = 20P. */
#define L32_UB INT64_C(60821504)
#define L32_UR INT64_C(525338624)
#define L32_P (16 * L32_UB + L32_UR)
START_TEST(test_script_wrapped_bf16_one_rank) {
    ck_assert_int_eq(L32_P, INT64_C(1498482688));
    est_run run = test_run_of(test_repo_path("calibrate/records/models/llama3.2-1b-untied.json"), "h200");
    run.framework = EST_FW_FSDP;
    run.zero_stage = 3;
    run.seq_len = 1024;
    run.load_dtype = EST_LOAD_BF16;
    run.fsdp_backward_prefetch = EST_FSDP_PREFETCH_PRE;
    run.fsdp_wrapper = EST_FSDP_BY_SCRIPT;
    est_estimate e;
    estimate(&run, &e);
    const char *step = e.tl.phases[e.peak_index].label;
    ck_assert_ptr_nonnull(strstr(step, "optimizer step"));
    ck_assert_int_eq(e.peak_allocated_bytes, 10 * L32_P + CUBLAS_WS);
    ck_assert_int_eq(at(&e, step, EST_CAT_PARAMS), 2 * L32_P);
    ck_assert_int_eq(at(&e, step, EST_CAT_MASTER), 0);
    ck_assert_int_eq(at(&e, step, EST_CAT_GRADS), 2 * L32_P);
    ck_assert_int_eq(at(&e, step, EST_CAT_OPTIMIZER), 4 * L32_P);
    /* no low-precision copy of a unit while it computes */
    ck_assert_int_eq(at(&e, "forward layer 3", EST_CAT_COMM), 0);
    est_estimate_free(&e);
    run.fsdp_wrapper = EST_FSDP_BY_ACCELERATE;
    estimate(&run, &e);
    ck_assert_int_eq(e.peak_allocated_bytes, 20 * L32_P + CUBLAS_WS);
    ck_assert_int_eq(at(&e, e.tl.phases[e.peak_index].label, EST_CAT_MASTER), 4 * L32_P);
    est_estimate_free(&e);
    /* FSDP2 keeps the loaded dtype either way (accelerate's fsdp2_prepare_model
     * rebinds a local name): its sharded parameters are 2P whoever wraps. */
    run.fsdp_version = EST_FSDP2;
    run.fsdp_backward_prefetch = EST_FSDP_PREFETCH_NONE;
    for (int w = 0; w < 2; w++) {
        run.fsdp_wrapper = w ? EST_FSDP_BY_SCRIPT : EST_FSDP_BY_ACCELERATE;
        estimate(&run, &e);
        ck_assert_int_eq(at(&e, "forward layer 3", EST_CAT_PARAMS), 2 * L32_P);
        ck_assert_int_eq(at(&e, "forward layer 3", EST_CAT_OPTIMIZER), 4 * L32_P);
        est_estimate_free(&e);
    }
}
END_TEST

/* The bytes reserved just after the step's first empty_cache() (-1: none). */
static int64_t reserved_after_first_empty_cache(const est_step *st) {
    int64_t peak;
    return test_reserved_after_empty_cache(st, 1, &peak);
}

/* The probe's FSDP runner empties the cache once the model is wrapped, before
 * training (probe_run.py run_fsdp -> reset_peaks: torch.cuda.empty_cache());
 * a record of its modes says so (record.c probe_setup). What stays reserved is
 * every segment that holds a live tensor. FSDP1 NO_SHARD (one rank) keeps each
 * unit's flat tensor as its FlatParameter (_flat_param.py shard(), torch 2.11:
 * no _get_shard when not uses_sharded_strategy), so with the model of
 * test_script_wrapped_bf16_one_rank in bf16:
 *  - a block's unit: 2 U_b = 121,643,008 bytes, over 10 MiB, so a segment of
 *    its own rounded up to 2 MiB (CUDACachingAllocator.cpp get_allocation_size,
 *    kRoundLarge): 59 x 2 MiB = 123,731,968 (58 x 2 MiB is 121,634,816, short);
 *  - the root: 2 U_r = 1,050,677,248 -> 502 x 2 MiB = 1,052,770,304;
 *  - no cuBLAS workspace: it comes with the first GEMM, in training, after
 *    the call (docs/method.md "cuBLAS workspace").
 * Reserved after the call: 16 x 123,731,968 + 1,052,770,304 = 3,032,481,792.
 * The freed originals' segments (the embedding's and the untied head's
 * 526,385,152 each, the 20 MiB one of the last block's q, k, v and o, the
 * 32 MiB ones of its gate, up and down) go back to the device. */
START_TEST(test_probe_empties_cache_after_wrapping) {
    est_run run = test_run_of(test_repo_path("calibrate/records/models/llama3.2-1b-untied.json"), "h200");
    run.framework = EST_FW_FSDP;
    run.zero_stage = 3;
    run.seq_len = 1024;
    run.load_dtype = EST_LOAD_BF16;
    run.fsdp_wrapper = EST_FSDP_BY_SCRIPT;
    est_estimate e;
    estimate(&run, &e);
    ck_assert_int_eq(reserved_after_first_empty_cache(&e.step), -1); /* no call without the field */
    est_estimate_free(&e);
    run.empty_cache_at_start = true;
    estimate(&run, &e);
    ck_assert_int_eq(reserved_after_first_empty_cache(&e.step),
                     16 * INT64_C(123731968) + INT64_C(1052770304));
    est_estimate_free(&e);
    /* the GPU day's records: modes fsdp and hf set the model up before the
     * call; deepspeed places it inside trainer.train(), after it */
    char err[256];
    est_gpu_catalog cat;
    ck_assert_msg(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0, "%s", err);
    char *all = test_slurp(test_repo_path("calibrate/records/probe-h200-2026-11-26.jsonl"), NULL);
    const char *modes[] = {"\"probe_mode\":\"fsdp\"", "\"probe_mode\":\"hf\"", "\"probe_mode\":\"deepspeed\""};
    for (int m = 0; m < 3; m++) {
        const char *hit = strstr(all, modes[m]);
        ck_assert_ptr_nonnull(hit);
        const char *start = hit;
        while (start > all && start[-1] != '\n') start--;
        const char *end = strchr(hit, '\n');
        est_record rec;
        ck_assert_msg(est_record_parse_at(start, (size_t)(end - start), &cat,
                                          test_repo_path("calibrate/records"), &rec, err, sizeof err) == 0,
                      "%s", err);
        ck_assert_int_eq(rec.run.empty_cache_at_start, m < 2);
        est_record_free(&rec);
    }
    free(all);
    est_gpu_catalog_free(&cat);
}
END_TEST

/* torch's AdamW makes every tensor's state before it updates any (2.11
 * optim/adam.py: _init_group loops over the whole group, zeros_like for
 * exp_avg and exp_avg_sq; then _multi_tensor_adam's _foreach_sqrt makes all
 * the temporaries at once): in the warm-up step all 2 x 17 states of the
 * 17 FlatParameters (16 blocks and the root) come before the first
 * temporary, and the 17 temporaries follow. */
START_TEST(test_optimizer_state_before_temporaries) {
    est_run run = test_run_of(test_repo_path("calibrate/records/models/llama3.2-1b-untied.json"), "h200");
    run.framework = EST_FW_FSDP;
    run.zero_stage = 3;
    run.seq_len = 1024;
    run.load_dtype = EST_LOAD_BF16;
    run.fsdp_wrapper = EST_FSDP_BY_SCRIPT;
    est_estimate e;
    estimate(&run, &e);
    int states = 0, temps = 0, states_before_first_temp = -1;
    for (size_t i = 0; i < e.step.count; i++) {
        const est_event *ev = &e.step.events[i];
        if (ev->kind != EST_EV_ALLOC) continue;
        if (!strcmp(ev->u.mem.name, "optimizer state")) states++;
        if (!strcmp(ev->u.mem.name, "foreach temporary")) {
            if (temps++ == 0) states_before_first_temp = states;
        }
    }
    ck_assert_int_eq(states, 2 * 17);
    ck_assert_int_eq(states_before_first_temp, 2 * 17);
    ck_assert_int_eq(temps, 2 * 17); /* 17 in the warm-up step, 17 in the step */
    est_estimate_free(&e);
}
END_TEST

/* ftest check's line for a record with a reserved peak names the reserved
 * error beside the allocated one: the GPU day's FSDP1 row at seq 2048 measured
 * peak_reserved_bytes 21,170,749,440 = 20,190.0 MiB (the record's own figure). */
START_TEST(test_check_line_names_reserved) {
    char err[256];
    est_gpu_catalog cat;
    ck_assert_msg(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0, "%s", err);
    char *out = NULL;
    size_t len = 0;
    FILE *o = open_memstream(&out, &len);
    est_check_options opt = {0};
    est_check_totals tot = {0};
    ck_assert_msg(est_check_file(test_repo_path("calibrate/records/probe-h200-2026-11-26.jsonl"), &cat, &opt, o,
                                 &tot, err, sizeof err) == 0,
                  "%s", err);
    fclose(o);
    const char *line = strstr(out, "llama3.2-1b-untied h200-141gb x1 z3 off=none ckpt=none b=1 s=2048  reserved ");
    ck_assert_msg(line != NULL, "%s", out);
    const char *end = strchr(line, '\n');
    const char *fig = strstr(line, "% (20190 vs ");
    ck_assert(end != NULL && fig != NULL && fig < end);
    free(out);
    est_gpu_catalog_free(&cat);
}
END_TEST

/* The optimizer step's time follows the shards' dtype too: torch's foreach
 * AdamW after the gradient clipping makes 24 passes over w-byte tensors
 * (work_parallel.c optimizer_bytes_per_param), in the same launches whatever
 * w is. Llama-3.2-1B (tied: P = 16 x 60,821,504 + 128,256 x 2048 + 2048 =
 * 1,235,814,400) on one A100 (2039 GB/s, hbm_efficiency of it), bf16-loaded,
 * FSDP1: accelerate's fp32 upcast (w = 4) against the script's bf16 (w = 2)
 * is 24 x 2 x P bytes more, and both steps are bound by the device. */
START_TEST(test_script_wrapped_optimizer_time) {
    const double P = 1235814400.0;
    est_run r = test_run_of("llama3.2-1b", "a100-80gb");
    r.framework = EST_FW_FSDP;
    r.zero_stage = 3;
    r.load_dtype = EST_LOAD_BF16;
    est_constants k;
    est_constants_defaults(&k);
    est_time_detail acc, script;
    est_time_model(&r, &k, &acc);
    r.fsdp_wrapper = EST_FSDP_BY_SCRIPT;
    est_time_model(&r, &k, &script);
    ck_assert(acc.modelled && script.modelled);
    const double bw = 2039e9 * k.value[EST_K_HBM_EFF];
    ck_assert_double_eq_tol(acc.optimizer_s - script.optimizer_s, 24 * 2 * P / bw, 1e-9);
    ck_assert(script.optimizer_s > 24 * 2 * P / bw); /* the device's side, not the host's */
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
    /* The flat gradient is all-reduced in place (a no-op on one rank) and
     * cast to fp32 while it exists: the root's 2 U_r, block 23's bf16 2 U_b
     * and fp32 4 U_b (the cat, 4 U_b, is less); no reduce-scatter output. */
    ck_assert_int_eq(own(&e, "backward layer 23", EST_CAT_GRADS), QWEN_UR2 + 6 * QWEN_UB);
    est_estimate_free(&e);
}
END_TEST

/* Accumulation (no_sync between micro-batches): every unit's unsharded bf16
 * gradient, 2P, is carried into the last micro-batch's forward; under
 * SHARD_GRAD_OP no unit is freed in a backward that does not sync
 * (_should_free_in_backward), so the root and every block are still gathered
 * when it starts: no all-gather, no low-precision shard. */
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
    /* FSDP2 keeps what the earlier micro-batches left in the reduce dtype
     * (_fsdp_param.py to_accumulated_grad_if_needed): fp32, 4P. */
    run.zero_stage = 3;
    run.fsdp_version = EST_FSDP2;
    run.fsdp_reduce = EST_REDUCE_FP32;
    estimate(&run, &e);
    ck_assert_int_eq(at(&e, "forward layer 0", EST_CAT_GRADS), 4 * QWEN_P);
    est_estimate_free(&e);
}
END_TEST

/* CPU offload: shards, gradients and AdamW on the host; the GPU keeps only
 * what is gathered and in flight. FSDP1's lazy init pins each unit's fp32
 * shard and a gradient buffer of its size (_flat_param.py
 * init_flat_param_attributes), each rounded up to a power of two by the
 * pinned allocator: the root's 4 x 19,447,936 = 77,791,744 bytes take 2^27,
 * a block's 4 x 1,606,272 = 6,425,088 take 2^23. AdamW's moments (8S,
 * unpinned) outgrow the unpinned shards the constructor left (4S). */
START_TEST(test_offload) {
    est_run run = base_run("qwen1.5-0.5b", 8, 3);
    run.offload = EST_OFFLOAD_OPTIMIZER_PARAMS;
    est_estimate e;
    estimate(&run, &e);
    ck_assert_int_eq(e.cpu_bytes, 2 * (INT64_C(134217728) + 24 * INT64_C(8388608)) + 8 * QWEN_S8);
    ck_assert_int_eq(at(&e, "forward layer 0", EST_CAT_MASTER), 0);
    ck_assert_int_eq(at(&e, "forward layer 0", EST_CAT_OPTIMIZER), 0);
    ck_assert_int_eq(at(&e, "forward layer 0", EST_CAT_COMM), 2 * (QWEN_UR + QWEN_UB));
    ck_assert_int_eq(at(&e, "gradients reduce-scattered", EST_CAT_GRADS), 0);
    est_estimate_free(&e);
}
END_TEST

/* LoRA under CPU offload (the FSDP + QLoRA recipes' fsdp_offload_params):
 * every shard lives on the host, the frozen base's too. Llama-3.2-1B
 * (1,235,814,400 parameters as published, tied embedding) in bf16 under LoRA
 * r 16 on q and v: 16 x (16 x (2048 + 2048) + 16 x (2048 + 512)) = 1,703,936
 * adapter elements (PEFT prints 851,968 at r 8). On 2 ranks each holds half of
 * each unit (every unit's length is even: no padding). FSDP1's lazy init pins
 * every FlatParameter's shard and a gradient buffer of its size, frozen or
 * not, each rounded up to a power of two (torch 2.11 _flat_param.py
 * init_flat_param_attributes; CachingHostAllocator.h PowerOf2Ceil):
 *  - a block's base: 4 x 2048^2 + 2 x 2048 x 512 (q, o, k, v) + 3 x 2048 x
 *    8192 (MLP) + 2 x 2048 (norms) = 60,821,504 elements, a shard of
 *    30,410,752 in bf16 = 60,821,504 bytes -> 2^26 = 67,108,864;
 *  - the root: 128,256 x 2048 + 2048 = 262,670,336 elements, a shard of
 *    262,670,336 bytes -> 2^28 = 268,435,456;
 *  - a layer's four adapters in fp32: shards of 16,384, 16,384, 16,384 and
 *    4,096 elements = 65,536 x 3 + 16,384 bytes, powers of two already.
 * Pinned: 2 x (16 x 67,108,864 + 268,435,456 + 16 x 212,992) = 2,691,170,304.
 * Beside them at the lazy init the unpinned shards the constructor left:
 * 1,235,814,400 + 16 x 212,992 = 1,239,222,272 bytes, more than AdamW's two
 * fp32 moments later (851,968 x 8 = 6,815,744). */
START_TEST(test_lora_offload_host) {
    est_run run = base_run("llama3.2-1b", 2, 3);
    run.offload = EST_OFFLOAD_OPTIMIZER_PARAMS;
    run.lora.rank = 16;
    run.lora.alpha = 32;
    run.lora.targets = EST_LORA_BIT(EST_LORA_Q) | EST_LORA_BIT(EST_LORA_V);
    est_estimate e;
    estimate(&run, &e);
    ck_assert_int_eq(e.cpu_bytes, INT64_C(2691170304) + INT64_C(1239222272));
    /* the device keeps no shard: nothing of the base or the adapters' state
     * between the units' gathers */
    ck_assert_int_eq(at(&e, "forward layer 0", EST_CAT_OPTIMIZER), 0);
    est_estimate_free(&e);
}
END_TEST

/* Host RAM while loading (accelerate's cpu_ram_efficient_loading): every
 * rank's process reads the whole checkpoint, or rank 0 alone and the others
 * start on the meta device. Llama-3.2-1B (1,235,814,400 parameters as
 * published) loaded in bf16 on 8 ranks: 2,471,628,800 bytes per rank, or
 * that once per node (spread: 308,953,600 per rank). A full fine-tune
 * defaults to every rank (accelerate's default). */
START_TEST(test_loading_every_rank_or_rank0) {
    est_run run = base_run("llama3.2-1b", 8, 3);
    run.load_dtype = EST_LOAD_BF16;
    est_estimate e;
    estimate(&run, &e);
    ck_assert_int_eq(e.cpu_load_bytes, INT64_C(2471628800));
    est_estimate_free(&e);
    run.fsdp_loading = EST_FSDP_LOAD_RANK0;
    estimate(&run, &e);
    ck_assert_int_eq(e.cpu_load_bytes, INT64_C(308953600));
    est_estimate_free(&e);
    run.fsdp_loading = EST_FSDP_LOAD_EVERY_RANK;
    estimate(&run, &e);
    ck_assert_int_eq(e.cpu_load_bytes, INT64_C(2471628800));
    est_estimate_free(&e);
}
END_TEST

/* backward_prefetch (FSDP1, 8 ranks, FULL_SHARD): none (the HF Trainer's
 * default) gathers each block at its own pre-backward; BACKWARD_PRE gathers
 * the block before it at that pre-backward (_pre_backward_hook ->
 * _prefetch_handle), the root's pre-backward block 23; BACKWARD_POST at its
 * post-backward, after freeing its own (_post_backward_reshard), and only a
 * block whose pre-backward is still to come (_needs_pre_backward_unshard), so
 * the root's, last, prefetches nothing. Each gather holds the shard cast to
 * bf16 (2 S_b) beside the gathered block (2 U_b) for a moment. The root (2 U_r)
 * stays gathered throughout. */
START_TEST(test_backward_prefetch) {
    const int64_t R = 2 * QWEN_UR, B = 2 * QWEN_UB, mp = 2 * QWEN_SB8;
    est_run run = base_run("qwen1.5-0.5b", 8, 3);
    est_estimate none, pre, post;
    estimate(&run, &none);
    run.fsdp_backward_prefetch = EST_FSDP_PREFETCH_PRE;
    estimate(&run, &pre);
    run.fsdp_backward_prefetch = EST_FSDP_PREFETCH_POST;
    estimate(&run, &post);
    /* loss backward: only BACKWARD_PRE has block 23 gathering */
    ck_assert_int_eq(own(&none, "loss backward", EST_CAT_COMM), R);
    ck_assert_int_eq(own(&pre, "loss backward", EST_CAT_COMM), R + B + mp);
    ck_assert_int_eq(own(&post, "loss backward", EST_CAT_COMM), R);
    /* block 12: BACKWARD_PRE gathers block 11 while block 12 is there; the
     * others gather one block at a time (BACKWARD_POST block 11 after freeing 12) */
    ck_assert_int_eq(own(&none, "backward layer 12", EST_CAT_COMM), R + B + mp);
    ck_assert_int_eq(own(&pre, "backward layer 12", EST_CAT_COMM), R + 2 * B + mp);
    ck_assert_int_eq(own(&post, "backward layer 12", EST_CAT_COMM), R + B + mp);
    /* block 0: prefetched by both, gathered at its own pre-backward by none */
    ck_assert_int_eq(own(&none, "backward layer 0", EST_CAT_COMM), R + B + mp);
    ck_assert_int_eq(own(&pre, "backward layer 0", EST_CAT_COMM), R + B);
    ck_assert_int_eq(own(&post, "backward layer 0", EST_CAT_COMM), R + B);
    est_estimate_free(&none);
    est_estimate_free(&pre);
    est_estimate_free(&post);
}
END_TEST

/* forward_prefetch (FSDP1): from the second iteration each block's
 * pre-forward gathers the next one (_pre_forward_unshard -> _prefetch_handle),
 * so in forward layer 5 blocks 5 and 6 are gathered, block 6 with its bf16
 * shard for a moment. The prefetch makes block i+1's views (its split's
 * autograd node) before block i's ops, so in backward block i+1's cat and
 * post-backward hook run only after block i's backward (the engine runs the
 * newer node first): in backward layer 10 block 11 is still gathered when
 * block 10 gathers, and its views' gradients (2 U_b) wait beside block 10's
 * (2 U_b) until its cat (2 U_b more); blocks 23..12 left 12 fp32 shards. */
START_TEST(test_forward_prefetch) {
    const int64_t R = 2 * QWEN_UR, B = 2 * QWEN_UB, mp = 2 * QWEN_SB8;
    est_run run = base_run("qwen1.5-0.5b", 8, 3);
    run.fsdp_forward_prefetch = true;
    est_estimate e;
    estimate(&run, &e);
    ck_assert_int_eq(own(&e, "forward layer 5", EST_CAT_COMM), R + 2 * B + mp);
    ck_assert_int_eq(own(&e, "backward layer 10", EST_CAT_COMM), R + 2 * B + mp);
    ck_assert_int_eq(own(&e, "backward layer 10", EST_CAT_GRADS), QWEN_UR2 + 12 * 4 * QWEN_SB8 + 3 * B);
    est_estimate_free(&e);
}
END_TEST

/* The side streams (seam_fsdp.h): FSDP1's unsharded FlatParameter is made on
 * the unshard stream and freed through record_stream
 * (_free_unsharded_flat_param: _no_dispatch_record_stream), so the allocator
 * keeps its block until the compute stream passes; FSDP2's flat all-gather
 * output, made on the copy-in stream, is freed outright (the streams wait on
 * an event instead). */
static int frees_named(const est_estimate *e, const char *name, int stream, bool pending) {
    const est_step *st = &e->step;
    char *is = calloc((size_t)st->tensor_count + 1, 1);
    ck_assert_ptr_nonnull(is);
    int n = 0;
    for (size_t i = 0; i < st->count; i++) {
        const est_event *ev = &st->events[i];
        if (ev->kind == EST_EV_ALLOC && ev->u.mem.id >= 0) is[ev->u.mem.id] = !strcmp(ev->u.mem.name, name);
        if (ev->kind == EST_EV_FREE && ev->u.mem.id >= 0 && is[ev->u.mem.id])
            n += ev->u.mem.stream == stream && ev->u.mem.pending == pending;
    }
    free(is);
    return n;
}

START_TEST(test_streams) {
    est_run run = base_run("qwen1.5-0.5b", 8, 3);
    est_estimate e;
    estimate(&run, &e);
    /* each block after its forward and after its backward, the root after its
     * backward only, in the warm-up step and in the step shown: 4 x 24 + 2 */
    ck_assert_int_eq(frees_named(&e, "unsharded FlatParameter", 1, true), 4 * 24 + 2);
    ck_assert_int_eq(frees_named(&e, "unsharded FlatParameter", 1, false), 0);
    est_estimate_free(&e);
    run.fsdp_version = EST_FSDP2;
    estimate(&run, &e);
    ck_assert_int_gt(frees_named(&e, "all-gather output", 1, false), 0);
    ck_assert_int_eq(frees_named(&e, "all-gather output", 1, true), 0);
    est_estimate_free(&e);
}
END_TEST

/* FSDP1's rate limiter (limit_all_gathers, the default; _limiter_utils.py
 * _FreeEventQueue, _runtime_utils.py _unshard / _reshard, torch 2.11): each
 * reshard that frees an unsharded FlatParameter queues a free event, and each
 * _unshard (whether or not it allocates) makes the host wait for the oldest
 * once two are queued. With the host as far ahead as that allows, a freed
 * block is reusable once the host waited for its event or a later one
 * (seam_fsdp1.c limiter_wait). By hand, 24 blocks under FULL_SHARD without
 * prefetch, with F frees, H waits, D frees the device is known to have passed:
 *  - warm-up forward: root (F 0, nothing outstanding), b0 (F 0: 0), reshard
 *    b0 (F 1), b1 (F - H = 1 < 2, no wait: b0's block outstanding, 1), then
 *    each b_i (i >= 2) waits for b_{i-2}'s event (H = i - 1): b_{i-1}'s alone
 *    outstanding, 1;
 *  - backward: the root's pre-backward runs _unshard on the gathered root and
 *    waits (H 23); b23 (F - H = 1: no wait, its own forward free outstanding,
 *    1); each later block waits for the event before the last: 1 each;
 *  - the step ends with the device caught up (D = F = 49); the next forward:
 *    root's wait (H 47), b0's (H 48) pass nothing new: 0 outstanding for the
 *    root and b0, then 1 for every other block as above.
 * So of the 2 x 49 allocations, 4 (root and b0 in each forward) find nothing
 * outstanding and 94 find exactly one; none finds two. The module's end syncs
 * the real streams only: before the limiter all 98 found nothing.
 * That is the device-bound case (seq 16384 on the H100: every block's device
 * time exceeds its host time in the time ledger, asserted below). With the
 * host slower than the device in every block (seq 1024) one thing changes
 * (seam_fsdp1.c, "The host and the device"): b23's forward free is recorded
 * as the device finishes b23's forward, one kernel after the host issued it;
 * before the host reaches b23's backward unshard it has issued the head's
 * forward, the loss's backward and the head's backward, which take it longer
 * than that kernel, so b23 finds nothing outstanding in each step: 6 and 92. */
/* At each allocation of the tensor named `name` (of the first such tensor's
 * size only when first_size_only: the root's is larger), how many earlier
 * ones freed onto a virtual stream are still outstanding (0, 1, 2 or more). */
static void count_outstanding(const est_estimate *e, const char *name, bool first_size_only, int counts[3]) {
    const est_step *st = &e->step;
    char *named = calloc((size_t)st->tensor_count + 1, 1);
    int8_t *on = calloc((size_t)st->tensor_count + 1, 1); /* its virtual stream, 0: none */
    ck_assert(named && on);
    counts[0] = counts[1] = counts[2] = 0;
    int64_t first_bytes = 0;
    for (size_t i = 0; i < st->count; i++) {
        const est_event *ev = &st->events[i];
        if (ev->kind == EST_EV_ALLOC && ev->u.mem.id >= 0) {
            named[ev->u.mem.id] = !strcmp(ev->u.mem.name, name);
            if (!named[ev->u.mem.id]) continue;
            if (!first_bytes) first_bytes = ev->u.mem.bytes;
            if (first_size_only && ev->u.mem.bytes != first_bytes) continue;
            int n = 0;
            for (int32_t t = 0; t < st->tensor_count; t++) n += on[t] != 0;
            counts[n < 2 ? n : 2]++;
        } else if (ev->kind == EST_EV_FREE && ev->u.mem.id >= 0 && named[ev->u.mem.id] &&
                   ev->u.mem.use_stream >= EST_STREAM_VIRTUAL) {
            on[ev->u.mem.id] = ev->u.mem.use_stream;
        } else if (ev->kind == EST_EV_SYNC && ev->u.mem.stream >= EST_STREAM_VIRTUAL) {
            for (int32_t t = 0; t < st->tensor_count; t++)
                if (on[t] == ev->u.mem.stream) on[t] = 0;
        }
    }
    free(named);
    free(on);
}

static void outstanding_at_unshards(const est_estimate *e, int counts[3]) {
    count_outstanding(e, "unsharded FlatParameter", false, counts);
}

static void check_outstanding(int64_t seq, bool device_bound, int none, int one) {
    est_run run = base_run("qwen1.5-0.5b", 8, 3);
    run.seq_len = seq;
    est_estimate e;
    estimate(&run, &e);
    const est_time_part *f = &e.time.block_fwd, *b = &e.time.block_bwd;
    ck_assert_msg((f->gpu_s > f->host_s && b->gpu_s > b->host_s) == device_bound &&
                      (f->gpu_s < f->host_s && b->gpu_s < b->host_s) == !device_bound,
                  "seq %lld: block forward %g/%g s, backward %g/%g s (device/host)", (long long)seq,
                  f->gpu_s, f->host_s, b->gpu_s, b->host_s);
    int counts[3];
    outstanding_at_unshards(&e, counts);
    ck_assert_int_eq(counts[0], none);
    ck_assert_int_eq(counts[1], one);
    ck_assert_int_eq(counts[2], 0);
    est_estimate_free(&e);
}

START_TEST(test_rate_limiter_holds_freed_blocks) {
    check_outstanding(16384, true, 4, 94);
    check_outstanding(1024, false, 6, 92);
}
END_TEST

/* FSDP1's post-backward hook frees autograd's flat gradient through
 * record_stream on the post-backward stream (_runtime_utils.py
 * _post_backward_hook: _no_dispatch_record_stream(autograd_computed_grad,
 * state._post_backward_stream), torch 2.2-2.11): its block is reusable once the
 * device has run that block's backward. At each block's flat gradient (the
 * root's is larger and not counted), how many earlier flat gradients are still
 * outstanding. By hand, 24 blocks, limiter as in the test above:
 *  - device-bound (seq 16384): b23's finds none (the step began with the device
 *    caught up); b22's finds b23's: its unshard waited only for b23's forward
 *    free, and the device is still running b23's backward when the host has
 *    issued b22's; every b_i below waited at its unshard for b_{i+2}'s
 *    post-backward free, the moment b_{i+2}'s gradient was freed too, and finds
 *    b_{i+1}'s alone: 23 x 1 and 1 x 0 per step, two steps;
 *  - host-bound (seq 256): the device has run b_{i+1}'s backward one kernel
 *    after the host issued it, long before the host has issued b_i's: 0 each
 *    (the device's lag after the head, whose device time exceeds its host
 *    time, is asserted gone before b23's backward ends). */
static void flat_grads_outstanding(const est_estimate *e, int counts[3]) {
    count_outstanding(e, "unsharded flat gradient", true, counts); /* b23's size, the first */
}

START_TEST(test_flat_gradient_waits_for_the_device) {
    est_run run = base_run("qwen1.5-0.5b", 8, 3);
    run.seq_len = 16384;
    est_estimate e;
    estimate(&run, &e);
    ck_assert(e.time.block_bwd.gpu_s > e.time.block_bwd.host_s);
    int counts[3];
    flat_grads_outstanding(&e, counts);
    ck_assert_int_eq(counts[0], 2);
    ck_assert_int_eq(counts[1], 46);
    ck_assert_int_eq(counts[2], 0);
    est_estimate_free(&e);
    run.seq_len = 256;
    estimate(&run, &e);
    const est_time_detail *t = &e.time;
    const double head_lag_s = t->head_fwd.gpu_s + t->loss_bwd.gpu_s + t->head_bwd.gpu_s -
                              (t->head_fwd.host_s + t->loss_bwd.host_s + t->head_bwd.host_s);
    ck_assert(head_lag_s < t->block_bwd.host_s - t->block_bwd.gpu_s);
    flat_grads_outstanding(&e, counts);
    ck_assert_int_eq(counts[0], 48);
    ck_assert_int_eq(counts[1], 0);
    est_estimate_free(&e);
}
END_TEST

/* FSDP1 makes each unit's views of its FlatParameter (torch.split) inside
 * _unshard's `with stream(unshard_stream)` (torch 2.11 _runtime_utils.py
 * _unshard; _flat_param.py _use_unsharded_views under @torch.enable_grad()),
 * and autograd runs a node's backward on the stream of its forward, so the
 * split's backward, the cat that makes the flat gradient, allocates from the
 * unshard stream's pool. Modelled for NO_SHARD (one rank): qwen1.5-0.5b's 24
 * blocks and its root are 25 units, in the warm-up step and in the step shown:
 * 50 flat gradients, all on stream 1. The sharded strategies keep it on the
 * compute stream (seam_fsdp1.c flat_grad says why). */
static int allocs_named(const est_estimate *e, const char *name, int stream) {
    int n = 0;
    for (size_t i = 0; i < e->step.count; i++) {
        const est_event *ev = &e->step.events[i];
        n += ev->kind == EST_EV_ALLOC && ev->u.mem.stream == stream && !strcmp(ev->u.mem.name, name);
    }
    return n;
}

START_TEST(test_no_shard_flat_gradient_on_unshard_stream) {
    est_run run = base_run("qwen1.5-0.5b", 1, 3);
    est_estimate e;
    estimate(&run, &e);
    ck_assert_int_eq(allocs_named(&e, "unsharded flat gradient", 1), 2 * 25);
    ck_assert_int_eq(allocs_named(&e, "unsharded flat gradient", 0), 0);
    est_estimate_free(&e);
    run = base_run("qwen1.5-0.5b", 8, 3);
    estimate(&run, &e);
    ck_assert_int_eq(allocs_named(&e, "unsharded flat gradient", 1), 0);
    ck_assert_int_eq(allocs_named(&e, "unsharded flat gradient", 0), 2 * 25);
    est_estimate_free(&e);
}
END_TEST

/* Why the stream matters, by hand, at the sizes of the H200 probe's
 * Llama-3.2-1B (untied) at seq 2048: the loss's fp32 logits are
 * 2048 x 128256 x 4 = 1,050,673,152 bytes (1002 MiB, a 2 MiB multiple: a
 * segment of exactly that size, CUDACachingAllocator get_allocation_size); a
 * block's flat gradient, and each of its AdamW states, is
 * 60,821,504 x 2 = 121,643,008 bytes (116.008 MiB; a new segment rounds it up
 * to 2 MiB: 118 MiB). Freed logits on the compute stream, then the flat
 * gradient, then a state on the compute stream:
 *  - flat gradient on the compute stream: it splits the cached 1002 MiB block
 *    (the rest, 885.99 MiB, is over 1 MiB: split), the state splits the rest:
 *    reserved stays 1002 MiB;
 *  - flat gradient on the unshard stream: blocks serve only their own stream,
 *    so it takes a new 118 MiB segment and the state the cached block:
 *    1002 + 118 = 1120 MiB. */
/* A fresh simulated allocator with torch 2.11's policy (the H200 probe's). */
static est_alloc *alloc_torch_211(void) {
    est_alloc_config cfg;
    est_alloc_config_default(&cfg);
    cfg.torch_version = 211;
    char err[128];
    est_alloc *a = est_alloc_new(&cfg, err, sizeof err);
    ck_assert_ptr_nonnull(a);
    return a;
}

static int64_t reserved_after(int32_t grad_stream) {
    const int64_t MiB = INT64_C(1) << 20;
    est_alloc *a = alloc_torch_211();
    est_alloc_handle logits = EST_ALLOC_NULL, grad = EST_ALLOC_NULL, state = EST_ALLOC_NULL;
    ck_assert_int_eq(est_alloc_malloc(a, 1002 * MiB, 0, &logits), EST_ALLOC_OK);
    ck_assert_int_eq(est_alloc_release(a, logits), EST_ALLOC_OK);
    ck_assert_int_eq(est_alloc_malloc(a, 121643008, grad_stream, &grad), EST_ALLOC_OK);
    ck_assert_int_eq(est_alloc_malloc(a, 121643008, 0, &state), EST_ALLOC_OK);
    const int64_t reserved = est_alloc_reserved_now(a);
    est_alloc_free(a);
    return reserved;
}

START_TEST(test_flat_gradient_pool_by_hand) {
    const int64_t MiB = INT64_C(1) << 20;
    ck_assert_int_eq(reserved_after(0), 1002 * MiB);
    ck_assert_int_eq(reserved_after(1), 1120 * MiB);
}
END_TEST

/* The weight gradients handed from the compute stream to the views' backward
 * on the unshard stream, by hand (torch 2.11 autograd InputBuffer::add, first
 * producer, case A: the consumer's stream differs from the producer's, so
 * record_stream_any_impl(var, consumer stream); input_buffer.h's
 * opt_accum_streams / ready_events are those of the 2.11 wheel). Sizes of the
 * H200 probe's Llama-3.2-1B: an MLP weight's gradient is 8192 x 2048 x 2 =
 * 33,554,432 bytes (32 MiB: over 10 MiB, a segment of its size rounded to
 * 2 MiB, itself), a block's flat gradient 121,643,008 bytes (a 118 MiB
 * segment). Weight gradient on the compute stream, the flat gradient (the
 * cat) on the unshard stream, the weight gradient freed, the next block's
 * weight gradient on the compute stream:
 *  - without the record: the freed 32 MiB block serves it: 32 + 118 = 150 MiB;
 *  - with it: the block waits for the unshard stream's event, so the next one
 *    takes a segment of its own: 32 + 118 + 32 = 182 MiB; once the unshard
 *    stream has passed the cat, a third reuses a cached block: still 182 MiB. */
static int64_t reserved_with_weight_grad_record(bool recorded, int64_t *after_sync) {
    const int64_t weight_grad = 8192 * 2048 * 2, flat_bytes = 121643008;
    est_alloc *a = alloc_torch_211();
    est_alloc_handle g1 = EST_ALLOC_NULL, g2 = EST_ALLOC_NULL, g3 = EST_ALLOC_NULL, flat = EST_ALLOC_NULL;
    ck_assert_int_eq(est_alloc_malloc(a, weight_grad, 0, &g1), EST_ALLOC_OK);
    if (recorded) ck_assert_int_eq(est_alloc_record_stream(a, g1, 1), EST_ALLOC_OK);
    ck_assert_int_eq(est_alloc_malloc(a, flat_bytes, 1, &flat), EST_ALLOC_OK);
    ck_assert_int_eq(est_alloc_release(a, g1), EST_ALLOC_OK);
    ck_assert_int_eq(est_alloc_malloc(a, weight_grad, 0, &g2), EST_ALLOC_OK);
    const int64_t reserved = est_alloc_reserved_now(a);
    ck_assert_int_eq(est_alloc_sync_stream(a, 1), EST_ALLOC_OK);
    ck_assert_int_eq(est_alloc_release(a, g2), EST_ALLOC_OK);
    ck_assert_int_eq(est_alloc_malloc(a, weight_grad, 0, &g3), EST_ALLOC_OK);
    *after_sync = est_alloc_reserved_now(a);
    est_alloc_free(a);
    return reserved;
}

START_TEST(test_weight_gradient_recorded_on_unshard_stream_by_hand) {
    const int64_t MiB = INT64_C(1) << 20;
    int64_t after_sync = 0;
    ck_assert_int_eq(reserved_with_weight_grad_record(false, &after_sync), 150 * MiB);
    ck_assert_int_eq(after_sync, 150 * MiB);
    ck_assert_int_eq(reserved_with_weight_grad_record(true, &after_sync), 182 * MiB);
    ck_assert_int_eq(after_sync, 182 * MiB);
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
START_TEST(test_cli_options) {
    char err[256];
    est_run run;
    char *const ok[] = {"ftest", "--model", "qwen1.5-0.5b", "--framework", "fsdp", "--zero", "2",
                        "--fsdp-version", "2", "--load-dtype", "bf16", "--fsdp-reduce-dtype", "fp32"};
    ck_assert_msg(test_cli_try(13, ok, &run, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(run.fsdp_version, EST_FSDP2);
    ck_assert_int_eq(run.load_dtype, EST_LOAD_BF16);
    ck_assert_int_eq(run.fsdp_reduce, EST_REDUCE_FP32);
    char *const defaults[] = {"ftest", "--model", "qwen1.5-0.5b", "--framework", "fsdp"};
    ck_assert_msg(test_cli_try(5, defaults, &run, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(run.fsdp_version, EST_FSDP1);
    ck_assert_int_eq(run.load_dtype, EST_LOAD_FP32);
    ck_assert_int_eq(run.fsdp_reduce, EST_REDUCE_PARAM);
    char *const not_fsdp[] = {"ftest", "--model", "qwen1.5-0.5b", "--framework", "deepspeed",
                              "--fsdp-version", "2"};
    ck_assert_int_eq(test_cli_try(7, not_fsdp, &run, err, sizeof err), -1);
    char *const hf_bf16[] = {"ftest", "--model", "qwen1.5-0.5b", "--framework", "hf",
                             "--load-dtype", "bf16"};
    ck_assert_int_eq(test_cli_try(7, hf_bf16, &run, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "--precision bf16"));
    char *const bad[] = {"ftest", "--model", "qwen1.5-0.5b", "--framework", "fsdp",
                         "--fsdp-version", "3"};
    ck_assert_int_eq(test_cli_try(7, bad, &run, err, sizeof err), -1);
    /* prefetch: the names FSDP and accelerate use too; FSDP1's alone */
    char *const pre[] = {"ftest", "--model", "qwen1.5-0.5b", "--framework", "fsdp",
                         "--fsdp-backward-prefetch", "BACKWARD_POST", "--fsdp-forward-prefetch"};
    ck_assert_msg(test_cli_try(8, pre, &run, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(run.fsdp_backward_prefetch, EST_FSDP_PREFETCH_POST);
    ck_assert(run.fsdp_forward_prefetch);
    char *const none[] = {"ftest", "--model", "qwen1.5-0.5b", "--framework", "fsdp",
                          "--fsdp-backward-prefetch", "NO_PREFETCH"};
    ck_assert_msg(test_cli_try(7, none, &run, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(run.fsdp_backward_prefetch, EST_FSDP_PREFETCH_NONE);
    ck_assert(!run.fsdp_forward_prefetch);
    char *const v2[] = {"ftest", "--model", "qwen1.5-0.5b", "--framework", "fsdp", "--fsdp-version", "2",
                        "--fsdp-backward-prefetch", "pre"};
    ck_assert_int_eq(test_cli_try(9, v2, &run, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "FSDP1"));
    char *const ds[] = {"ftest", "--model", "qwen1.5-0.5b", "--framework", "deepspeed",
                        "--fsdp-forward-prefetch"};
    ck_assert_int_eq(test_cli_try(6, ds, &run, err, sizeof err), -1);
    char *const typo[] = {"ftest", "--model", "qwen1.5-0.5b", "--framework", "fsdp",
                          "--fsdp-backward-prefetch", "before"};
    ck_assert_int_eq(test_cli_try(7, typo, &run, err, sizeof err), -1);
    /* who wraps the model: accelerate by default, the script with torch */
    ck_assert_msg(test_cli_try(5, defaults, &run, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(run.fsdp_wrapper, EST_FSDP_BY_ACCELERATE);
    char *const script[] = {"ftest", "--model", "qwen1.5-0.5b", "--framework", "fsdp", "--fsdp-wrapper", "torch"};
    ck_assert_msg(test_cli_try(7, script, &run, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(run.fsdp_wrapper, EST_FSDP_BY_SCRIPT);
    char *const wrap_hf[] = {"ftest", "--model", "qwen1.5-0.5b", "--framework", "hf", "--fsdp-wrapper", "torch"};
    ck_assert_int_eq(test_cli_try(7, wrap_hf, &run, err, sizeof err), -1);
    char *const wrap_bad[] = {"ftest", "--model", "qwen1.5-0.5b", "--framework", "fsdp", "--fsdp-wrapper", "trainer"};
    ck_assert_int_eq(test_cli_try(7, wrap_bad, &run, err, sizeof err), -1);
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
    /* FSDP1's prefetch: the probe's config keys, or a cpu-trace record's
     * settings with FullyShardedDataParallel's names (null: none). */
    json = test_slurp(test_repo_path("tests/fuzz/corpus/record/fsdp_prefetch"), NULL);
    ck_assert_msg(est_record_parse(json, strlen(json), &cat, &rec, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(rec.run.fsdp_backward_prefetch, EST_FSDP_PREFETCH_PRE);
    ck_assert(rec.run.fsdp_forward_prefetch);
    est_record_free(&rec);
    char *pre = strstr(json, "\"BACKWARD_PRE\"");
    ck_assert_ptr_nonnull(pre);
    memcpy(pre, "null          ", 14);
    ck_assert_msg(est_record_parse(json, strlen(json), &cat, &rec, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(rec.run.fsdp_backward_prefetch, EST_FSDP_PREFETCH_NONE);
    est_record_free(&rec);
    memcpy(pre, "\"AFTERWARDS\"", 12);
    ck_assert_int_eq(est_record_parse(json, strlen(json), &cat, &rec, err, sizeof err), -1);
    free(json);
    const char *probe = "{\"schema\":\"ftest.record/1\",\"framework\":\"fsdp\",\"hardware\":{\"gpu\":\"h100\","
                        "\"gpus_per_node\":8,\"nodes\":1},\"config\":{\"model\":\"qwen1.5-0.5b\",\"micro_batch\":1,"
                        "\"seq_len\":512,\"zero\":3,\"fsdp_backward_prefetch\":\"post\"},"
                        "\"measured\":{\"ranks\":[{\"rank\":0,\"peak_allocated_bytes\":1}]}}";
    ck_assert_msg(est_record_parse(probe, strlen(probe), &cat, &rec, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(rec.run.fsdp_backward_prefetch, EST_FSDP_PREFETCH_POST);
    ck_assert(!rec.run.fsdp_forward_prefetch);
    est_record_free(&rec);
    ck_assert_int_eq(rec.run.fsdp_wrapper, EST_FSDP_BY_ACCELERATE); /* no probe_mode, no fsdp_wrapper */
    /* The probe's own FSDP loops (probe_mode "fsdp", "fsdp2") wrap the model
     * themselves; config.fsdp_wrapper says so for any record, and wins. */
    const char *const wrapped[][2] = {
        {"\"probe_mode\":\"fsdp\"", "torch"},
        {"\"probe_mode\":\"fsdp2\"", "torch"},
        {"\"probe_mode\":\"cpu-trace fsdp1\"", "torch"},
        {"\"probe_mode\":\"hf\"", "accelerate"},
        {"\"fsdp_wrapper\":\"torch\"", "torch"},
        {"\"probe_mode\":\"fsdp\",\"fsdp_wrapper\":\"accelerate\"", "accelerate"},
    };
    for (size_t i = 0; i < sizeof wrapped / sizeof wrapped[0]; i++) {
        char line[1024];
        snprintf(line, sizeof line,
                 "{\"schema\":\"ftest.record/1\",\"framework\":\"fsdp\",\"hardware\":{\"gpu\":\"h100\","
                 "\"gpus_per_node\":1,\"nodes\":1},\"config\":{\"model\":\"qwen1.5-0.5b\",\"micro_batch\":1,"
                 "\"seq_len\":512,\"zero\":3,%s},\"measured\":{\"ranks\":[{\"rank\":0,"
                 "\"peak_allocated_bytes\":1}]}}",
                 wrapped[i][0]);
        ck_assert_msg(est_record_parse(line, strlen(line), &cat, &rec, err, sizeof err) == 0, "%s", err);
        ck_assert_str_eq(est_fsdp_wrapper_name(rec.run.fsdp_wrapper), wrapped[i][1]);
        est_record_free(&rec);
    }
    const char *bad_wrapper = "{\"schema\":\"ftest.record/1\",\"framework\":\"fsdp\",\"hardware\":{\"gpu\":"
                              "\"h100\",\"gpus_per_node\":1,\"nodes\":1},\"config\":{\"model\":\"qwen1.5-0.5b\","
                              "\"micro_batch\":1,\"seq_len\":512,\"zero\":3,\"fsdp_wrapper\":\"trainer\"},"
                              "\"measured\":{\"ranks\":[{\"rank\":0,\"peak_allocated_bytes\":1}]}}";
    ck_assert_int_eq(est_record_parse(bad_wrapper, strlen(bad_wrapper), &cat, &rec, err, sizeof err), -1);
    est_gpu_catalog_free(&cat);
}
END_TEST

/* The model's outputs live until the forward returns (seam_fsdp.c
 * fsdp_op_post): LlamaForCausalLM.forward computes the loss inside itself and
 * returns the logits and the KV cache in its CausalLMOutputWithPast, which the
 * caller drops after taking .loss (transformers 5.23 modeling_llama.py,
 * cache_utils.py DynamicLayer.update). Llama-3-8B on 8 ranks, seq 2048
 * (T = 2048 tokens, V = 128,256), bf16-mixed, eager attention (repeat_kv
 * copies keys and values for the 32 query heads), transformers 5.x (stack
 * 2026-11: the cache's torch.cat copies).
 *  - Logits at the loss's highest point (log_softmax): the bf16 logits the
 *    output holds (2 T V), logits.float() (4 T V, alive until the loss
 *    returns) and the saved log-softmax (4 T V): 10 T V = 2,626,682,880
 *    (without the held output the bf16 logits die after the cast: 8 T V).
 *  - KV cache: each block's k and v after RoPE copied by torch.cat into the
 *    cache (T x 8 KV heads x 128 x 2 bytes each) are referenced by the output
 *    alone (the attention saves the repeat_kv copies), so at the loss the
 *    run with use_cache holds 32 x 2 x 2048 x 1024 x 2 = 268,435,456 bytes of
 *    activations more than the run without; at the loss backward (the
 *    forward has returned) the two are equal. Both FSDP versions. */
START_TEST(test_outputs_held_through_the_loss) {
    const int64_t T = 2048, V = 128256;
    for (int v = 0; v < 2; v++) {
        est_run run = base_run("llama3-8b", 8, 2);
        run.fsdp_version = v ? EST_FSDP2 : EST_FSDP1;
        run.stack = est_stack_find("2026-11");
        run.attention = EST_ATTN_EAGER;
        est_estimate on, off;
        estimate(&run, &on);
        run.kv_cache_off = true;
        estimate(&run, &off);
        ck_assert_int_eq(at(&on, "loss", EST_CAT_LOGITS), 10 * T * V);
        ck_assert_int_eq(at(&on, "loss", EST_CAT_ACTIVATIONS) - at(&off, "loss", EST_CAT_ACTIVATIONS),
                         INT64_C(32) * 2 * T * 1024 * 2);
        ck_assert_int_eq(at(&on, "loss backward", EST_CAT_ACTIVATIONS),
                         at(&off, "loss backward", EST_CAT_ACTIVATIONS));
        est_estimate_free(&on);
        est_estimate_free(&off);
    }
}
END_TEST

Suite *suite_fsdp(void);
Suite *suite_fsdp(void) {
    Suite *s = suite_create("fsdp");
    TCase *tc = tcase_create("terms");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_shard_grad_op_above_full_shard_llama3_8b);
    tcase_add_test(tc, test_full_shard_root_gathered_once);
    tcase_add_test(tc, test_full_shard_exposed_ends);
    tcase_add_test(tc, test_full_shard_resident);
    tcase_add_test(tc, test_shard_grad_op_kept);
    tcase_add_test(tc, test_no_shard);
    tcase_add_test(tc, test_full_shard_grads);
    tcase_add_test(tc, test_reduce_fp32);
    tcase_add_test(tc, test_init_flatten);
    tcase_add_test(tc, test_fsdp1_padding);
    tcase_add_test(tc, test_fsdp2_padding_and_prefetch);
    tcase_add_test(tc, test_fsdp2_staging);
    tcase_add_test(tc, test_fsdp2_one_rank);
    tcase_add_test(tc, test_load_bf16_upcast_by_stack);
    tcase_add_test(tc, test_script_wrapped_bf16_one_rank);
    tcase_add_test(tc, test_script_wrapped_optimizer_time);
    tcase_add_test(tc, test_probe_empties_cache_after_wrapping);
    tcase_add_test(tc, test_optimizer_state_before_temporaries);
    tcase_add_test(tc, test_check_line_names_reserved);
    tcase_add_test(tc, test_one_rank_is_no_shard);
    tcase_add_test(tc, test_accumulation);
    tcase_add_test(tc, test_offload);
    tcase_add_test(tc, test_lora_offload_host);
    tcase_add_test(tc, test_loading_every_rank_or_rank0);
    tcase_add_test(tc, test_backward_prefetch);
    tcase_add_test(tc, test_forward_prefetch);
    tcase_add_test(tc, test_streams);
    tcase_add_test(tc, test_rate_limiter_holds_freed_blocks);
    tcase_add_test(tc, test_flat_gradient_waits_for_the_device);
    tcase_add_test(tc, test_no_shard_flat_gradient_on_unshard_stream);
    tcase_add_test(tc, test_flat_gradient_pool_by_hand);
    tcase_add_test(tc, test_weight_gradient_recorded_on_unshard_stream_by_hand);
    tcase_add_test(tc, test_refused);
    tcase_add_test(tc, test_cli_options);
    tcase_add_test(tc, test_record_fields);
    tcase_add_test(tc, test_outputs_held_through_the_loss);
    suite_add_tcase(s, tc);
    return s;
}
