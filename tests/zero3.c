/* DeepSpeed ZeRO-3 at N ranks: what changes when the model is built before
 * DeepSpeed is configured (--no-zero-init), the stream-ordered frees of the
 * largest rank, and records compared on their largest rank. Expected values
 * are derived here by hand from Llama-3-8B's published shapes (hidden 4096,
 * intermediate 14336, 32 heads, 8 KV heads of 128, vocabulary 128256, 32
 * layers, untied head; 8,030,261,248 parameters) and DeepSpeed 0.14.2's
 * source as cited in estimator/frameworks/profile_deepspeed.c. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_records.h"
#include "estimate.h"
#include "record.h"
#include "stack.h"
#include "test_util.h"

/* One decoder block's Linears: q 4096x4096, k and v 1024x4096, o 4096x4096,
 * gate, up and down 14336x4096. */
static const int64_t BLOCK_LINEARS = 2LL * 4096 * 4096 + 2LL * 1024 * 4096 + 3LL * 14336 * 4096;
static const int64_t HEAD = 128256LL * 4096; /* lm_head, the largest tensor */
static const int64_t MLP3 = 3 * 14336LL * 4096; /* a block's gate, up and down */
static const int64_t P = 8030261248LL;
/* RMSNorm weights are under stage3_param_persistence_threshold (1e5): two per
 * block and the final norm stay whole on every rank. */
static const int64_t NORMS = (2 * 32 + 1) * 4096LL;

static void llama8b_zero3(est_run *run, bool zero_init) {
    *run = test_run_of("llama3-8b", "a100-80gb");
    run->gpus_per_node = 8;
    run->precision = EST_PREC_FP16_MIXED;
    run->zero_stage = 3;
    run->seq_len = 1024;
    run->padding_mask = true;
    run->zero_init = zero_init;
}

static const est_phase *moment(const est_estimate *e, const char *label) {
    for (size_t i = 0; i < e->tl.count; i++)
        if (!strcmp(e->tl.phases[i].label, label)) return &e->tl.phases[i];
    ck_abort_msg("no moment \"%s\"", label);
    return NULL;
}

/* Estimates into e (initialized once by the caller, reused, freed at the end). */
static void estimate(const est_run *run, est_estimate *e) {
    char err[256];
    ck_assert_msg(est_estimate_run(run, e, err, sizeof err) == 0, "%s", err);
}

START_TEST(test_block_linear_count) {
    ck_assert_int_eq(BLOCK_LINEARS, 218103808);
}
END_TEST

/* The largest Linear of a block: gate, up or down, 14336 x 4096. */
static const int64_t LARGEST_LINEAR = 14336LL * 4096;

/* Without zero.Init torch's linear keeps a view of every gathered weight until
 * its backward: at the loss, every block's Linears and the head (gathered for
 * its forward and kept for its backward, which comes within
 * stage3_max_reuse_distance) are live in fp16 beside the weight partition
 * 2*ceil(P/8) and the persistent norms. Prefetching is switched off
 * (stage3_prefetch_bucket_size 0) so that nothing else is gathered. */
START_TEST(test_kept_weights_at_loss) {
    est_run run;
    llama8b_zero3(&run, false);
    run.ds.prefetch_bucket_elems = 0;
    est_estimate e;
    est_estimate_init(&e);
    estimate(&run, &e);
    const int64_t n = (P + 7) / 8, base = 2 * n + 2 * NORMS;
    ck_assert_int_eq(moment(&e, "loss")->bytes[EST_CAT_PARAMS], base + 2 * 32 * BLOCK_LINEARS + 2 * HEAD);
    /* With zero.Init (LinearFunctionForZeroStage3) each Linear's weight is
     * released after its forward: only the head is gathered at the loss,
     * beside the frees the host has made since its wait three parameters
     * back (seam_deepspeed_lag.c, 8 real ranks): the head's wait passed the
     * o_proj's, so block 31's gate, up and down (released after their
     * forwards) are still held. */
    est_estimate z;
    est_estimate_init(&z);
    llama8b_zero3(&run, true);
    run.ds.prefetch_bucket_elems = 0;
    estimate(&run, &z);
    ck_assert_int_eq(moment(&z, "loss")->bytes[EST_CAT_PARAMS], base + 2 * HEAD + 2 * MLP3);
    /* While block 10 computes: without zero.Init blocks 0..9 are kept and
     * block 10's Linears join them one by one; with it, one Linear at a time. */
    const int64_t nf = moment(&e, "forward layer 10")->bytes[EST_CAT_PARAMS];
    ck_assert_int_ge(nf, base + 2 * 10 * BLOCK_LINEARS);
    ck_assert_int_le(nf, base + 2 * 11 * BLOCK_LINEARS);
    ck_assert_int_le(moment(&z, "forward layer 10")->bytes[EST_CAT_PARAMS], base + 2 * LARGEST_LINEAR + 2 * MLP3);
    est_estimate_free(&e);
    est_estimate_free(&z);
}
END_TEST

/* stage3_max_reuse_distance: under zero.Init the head, whose backward
 * follows its forward at once, stays gathered through the loss's backward
 * with the default distance (1e9 elements); with 0 nothing is within the
 * distance (__params_to_release), so it is released after its forward and
 * gathered again for its backward: the loss's backward holds only the
 * partition and the persistent norms. */
START_TEST(test_reuse_distance_zero) {
    est_run run;
    llama8b_zero3(&run, true);
    run.ds.prefetch_bucket_elems = 0;
    est_estimate e;
    est_estimate_init(&e);
    estimate(&run, &e);
    const int64_t n = (P + 7) / 8, base = 2 * n + 2 * NORMS;
    ck_assert_int_eq(moment(&e, "loss backward")->bytes[EST_CAT_PARAMS], base + 2 * HEAD + 2 * MLP3);
    run.ds.max_reuse_distance_elems = 0;
    estimate(&run, &e);
    /* released, the head joins block 31's gate, up and down among the frees
     * not yet passed (no wait since its own) */
    ck_assert_int_eq(moment(&e, "loss backward")->bytes[EST_CAT_PARAMS], base + 2 * HEAD + 2 * MLP3);
    run.ds.fake_group = true; /* collectives return at once: every free completes in its module */
    estimate(&run, &e);
    ck_assert_int_eq(moment(&e, "loss backward")->bytes[EST_CAT_PARAMS], base);
    est_estimate_free(&e);
}
END_TEST

/* With full checkpointing (HF's reentrant torch.utils.checkpoint) the blocks'
 * forward runs without grad: torch's linear saves nothing and each gathered
 * weight goes at release. Only the head (not checkpointed) is kept at the
 * loss; in backward the block being recomputed keeps its own Linears, and
 * its backward gathers each of them once more. */
START_TEST(test_kept_weights_with_checkpointing) {
    const int64_t n = (P + 7) / 8, base = 2 * n + 2 * NORMS;
    est_run run;
    llama8b_zero3(&run, false);
    run.checkpointing = EST_CKPT_FULL;
    run.ds.prefetch_bucket_elems = 0;
    est_estimate e;
    est_estimate_init(&e);
    estimate(&run, &e);
    /* block 31's gate, up and down are still held (test_kept_weights_at_loss) */
    ck_assert_int_eq(moment(&e, "loss")->bytes[EST_CAT_PARAMS], base + 2 * HEAD + 2 * MLP3);
    ck_assert_int_le(moment(&e, "forward layer 20")->bytes[EST_CAT_PARAMS], base + 2 * LARGEST_LINEAR + 2 * MLP3);
    const int64_t b5 = moment(&e, "backward layer 5")->bytes[EST_CAT_PARAMS];
    ck_assert_int_gt(b5, base + 2 * LARGEST_LINEAR);
    /* plus the frees of at most four waited parameters not yet passed, each
     * at most two gathered copies of a Linear (test_pending_frees) */
    ck_assert_int_le(b5, base + 2 * BLOCK_LINEARS + 2 * LARGEST_LINEAR + 4 * 2 * 2 * LARGEST_LINEAR);
    est_estimate_free(&e);
}
END_TEST

/* engine.py _configure_distributed_model: the finished module is cast and moved
 * whole; the first partition (of the largest tensor) is allocated beside it.
 * On the host every process holds the fp32 model while loading. */
START_TEST(test_whole_model_at_init) {
    est_run run;
    llama8b_zero3(&run, false);
    est_estimate e;
    est_estimate_init(&e);
    estimate(&run, &e);
    ck_assert_str_eq(e.tl.phases[0].label, "model moved to the device whole");
    ck_assert_int_eq(est_phase_allocated(&e.tl.phases[0]), 2 * P + 2 * ((HEAD + 7) / 8));
    ck_assert_int_eq(e.tl.cpu_load_bytes, 4 * P + 2 * HEAD);
    est_estimate_free(&e);
}
END_TEST

/* With one rank the gathered weight is a view of the resident partition: not
 * building under zero.Init costs nothing after initialization. */
START_TEST(test_one_rank_keeps_nothing_extra) {
    est_run run;
    llama8b_zero3(&run, false);
    run.gpus_per_node = 1;
    est_estimate a, b;
    est_estimate_init(&a);
    est_estimate_init(&b);
    estimate(&run, &a);
    run.zero_init = true;
    estimate(&run, &b);
    ck_assert_int_eq(moment(&a, "loss backward")->bytes[EST_CAT_PARAMS],
                     moment(&b, "loss backward")->bytes[EST_CAT_PARAMS]);
    est_estimate_free(&a);
    est_estimate_free(&b);
}
END_TEST

/* ZeRO-3's frees through record_stream stay in the step while DeepSpeed's
 * host may be ahead of their stream (seam_deepspeed_lag.c): at eight ranks
 * the engine's set-up holds only the two 5e8-element fp16 buckets in comm
 * (no resident term: nothing is fitted), and the rank spread is the most
 * the step so held, which the throttles bound: at flush k the host has
 * waited for flush k-3, so the frees of at most four flush windows are held
 * on the reduce side (each window at most a 5e8-element bucket of fp16
 * gradients plus the one gradient larger than the bucket, the LM head's
 * 128256 x 4096), and likewise the frees of at most four waited parameters
 * on the compute side (each at most two LM head-sized fp16 tensors: the
 * weight autograd kept and the one backward gathered); with one rank, or on
 * a fake process group, nothing waits and the spread is 0. */
START_TEST(test_pending_frees) {
    est_run run;
    llama8b_zero3(&run, false);
    est_estimate e;
    est_estimate_init(&e);
    estimate(&run, &e);
    ck_assert_int_eq(moment(&e, "engine initialized")->bytes[EST_CAT_COMM], 2 * 500000000LL);
    const int64_t reduce_side = 4 * (500000000LL + HEAD) * 2, compute_side = 4 * 2 * HEAD * 2;
    ck_assert_int_gt(e.rank_spread_bytes, 0);
    ck_assert_int_le(e.rank_spread_bytes, reduce_side + compute_side);
    run.ds.fake_group = true;
    estimate(&run, &e);
    ck_assert_int_eq(e.rank_spread_bytes, 0);
    run.ds.fake_group = false;
    run.gpus_per_node = 1;
    estimate(&run, &e);
    ck_assert_int_eq(moment(&e, "engine initialized")->bytes[EST_CAT_COMM], 2 * 500000000LL);
    ck_assert_int_eq(e.rank_spread_bytes, 0);
    est_estimate_free(&e);
}
END_TEST

/* The fp16 loss scaler's overflow check (DeepSpeed 0.14.2): stage 3
 * tests the gradient partition with isinf, then isnan, one byte per element;
 * torch's isinf is `self.abs() == inf` (ATen/native/TensorCompare.cpp), so
 * the fp16 |x| (2 bytes per element) lives beside its bool: 3n at the top;
 * stages 1-2 run _has_inf_or_nan on each gradient piece, holding x.float() (4),
 * isnan (1), isinf (1), their or (1) and its .float() (4) = 11 bytes per
 * element of the largest piece, here the LM head (it fits in the partition).
 * With optimizer offload, stages 1-2 check every whole gradient in backward,
 * in any dtype. Two cuBLAS workspaces (8,519,680 B each: the forward's handle
 * and the backward thread's, autograd.c) are resident in the step. */
START_TEST(test_overflow_check) {
    const int64_t cublas = 2 * 8519680, n = (P + 7) / 8;
    est_run run;
    llama8b_zero3(&run, false);
    est_estimate e;
    est_estimate_init(&e);
    estimate(&run, &e);
    ck_assert_int_eq(moment(&e, "optimizer: fp16 overflow check")->bytes[EST_CAT_WORKSPACE], cublas + 3 * n);
    run.zero_stage = 2;
    estimate(&run, &e);
    ck_assert_int_eq(moment(&e, "optimizer: fp16 overflow check")->bytes[EST_CAT_WORKSPACE],
                     cublas + 11 * HEAD);
    run.precision = EST_PREC_BF16_MIXED; /* no loss scaler, no check */
    estimate(&run, &e);
    for (size_t i = 0; i < e.tl.count; i++)
        ck_assert_str_ne(e.tl.phases[i].label, "optimizer: fp16 overflow check");
    /* With optimizer offload each gradient of the partition is checked whole
     * at its bucket's reduction (copy_grads_in_partition): the head, first in
     * backward and the last rank's, beside temp_grad_buffer_for_gpu_offload
     * (the head in bf16). The step copies the host's fp32 partition back
     * through the device (fp32_partition.to(device), DeepSpeed PR #5301):
     * 4 bytes per element of the rank's partition, n = ceil(P/8) rounded to
     * the alignment of 2 x 8 elements (P is a multiple of 16: n = P/8). */
    run.offload = EST_OFFLOAD_OPTIMIZER;
    estimate(&run, &e);
    ck_assert_int_eq(moment(&e, "optimizer step on CPU")->own_max[EST_CAT_WORKSPACE], cublas + 2 * HEAD + 4 * n);
    ck_assert_int_eq(moment(&e, "backward LM head")->own_max[EST_CAT_WORKSPACE], cublas + 2 * HEAD + 11 * HEAD);
    est_estimate_free(&e);
}
END_TEST

/* DeepSpeed 0.19.8 (stack 2026-11) tests a gradient for inf/nan by reducing
 * it first (runtime/utils.py has_inf_or_nan: isfinite(x.amax()) and
 * isfinite(x.amin()), two scalars), where 0.14.2-0.16.5 hold 11 bytes per
 * element of it (test_overflow_check). Stage 2 in fp16: nothing beside the
 * cuBLAS workspace at the step's check. With optimizer offload the head's
 * gradient at its reduction keeps only its fp64 norm upcast (8 bytes per
 * element; then its fp32 cast, 4) beside temp_grad_buffer_for_gpu_offload
 * (the head in fp16, 2): 2 + 8 = 10 bytes per head element. Two cuBLAS
 * workspaces (8,519,680 B each, this card not Hopper: the forward's handle's
 * and the backward thread's, booked at the LM head's GEMM) are resident. */
START_TEST(test_overflow_check_reduces) {
    const int64_t cublas = 2 * 8519680;
    est_run run;
    llama8b_zero3(&run, false);
    run.stack = est_stack_find("2026-11");
    run.zero_stage = 2;
    est_estimate e;
    est_estimate_init(&e);
    estimate(&run, &e);
    ck_assert_int_eq(moment(&e, "optimizer: fp16 overflow check")->own_max[EST_CAT_WORKSPACE], cublas);
    run.offload = EST_OFFLOAD_OPTIMIZER;
    estimate(&run, &e);
    ck_assert_int_eq(moment(&e, "backward LM head")->own_max[EST_CAT_WORKSPACE], cublas + 2 * HEAD + 8 * HEAD);
    est_estimate_free(&e);
}
END_TEST

/* The coordinator keeps a parameter whose later use its prefetch has already
 * passed (DeepSpeed 0.16.5-0.19.8 partitioned_param_coordinator.py
 * __params_to_release: the queue skips what is available and notes the use,
 * __most_recent_step_id_param_fetched_for). Llama-3-8B at 4 blocks, 8
 * ranks, bf16, zero.Init, seq 256, DeepSpeed's defaults (live 1e9, prefetch
 * 5e7 elements, persistence 1e5). A block is 218,103,808 elements (q, o
 * 16,777,216; k, v 4,194,304; gate, up, down 58,720,256), the head and the
 * embedding 525,336,576 each. Blocks 2 and 3 and the head are met again
 * within 1e9 elements and stay gathered: 961,544,192 available, so the
 * budget min(1e9 - 961,544,192, 5e7) lets one more weight in flight, block
 * 3's down_proj for its backward, and the prefetch then has passed the
 * backward uses of everything gathered. At the loss: the flat bf16 partition
 * (each tensor's numel / 8; the 9 norms of 4096, persistent, 512 each) and
 * the 9 norms whole, blocks 2 and 3, the head and that weight: no coalesced
 * flat buffer in flight, comm is the reduce bucket (5e8 x 2 B) and the
 * pending frees. Measured the same way on the CPU (HF Trainer, DeepSpeed
 * 0.19.8, rank 0 of 8: 961,544,192 available before that weight). */
START_TEST(test_prefetch_passed_uses_stay) {
    est_run run = test_run_of("llama3-8b", "h200-141gb");
    run.stack = est_stack_find("2026-11");
    run.gpus_per_node = 8;
    run.layers_used = 4;
    run.precision = EST_PREC_BF16_MIXED;
    run.zero_stage = 3;
    run.zero_init = true;
    run.seq_len = 256;
    run.padding_mask = false;
    est_estimate e;
    est_estimate_init(&e);
    estimate(&run, &e);
    const int64_t block = 2 * 16777216LL + 2 * 4194304LL + 3 * 58720256LL;
    const int64_t partition = (2 * HEAD + 4 * block) / 8 + 9 * 512;
    const est_phase *loss = moment(&e, "loss");
    ck_assert_int_eq(loss->bytes[EST_CAT_PARAMS], 2 * partition + 2 * 9 * 4096 + 2 * (2 * block + HEAD + 58720256LL));
    ck_assert_int_eq(loss->bytes[EST_CAT_COMM], 2 * 500000000LL);
    est_estimate_free(&e);
}
END_TEST

/* Host memory per rank with the optimizer offloaded (DeepSpeed 0.14.2 source,
 * estimator/frameworks/profile_deepspeed.c): fp32 master 4n, fp32 gradient 4n, Adam m and
 * v 8n; stage 3 adds its pinned fp16 gradient partition 2n, stages 1-2 the
 * staging buffer of the largest parameter (2 x head) and, with accumulation,
 * a pinned fp16 buffer per parameter (2n); DeepSpeedCPUAdam of 0.14.2 pins two
 * tiles of 128 Mi floats (1 GiB), gone in 0.14.3. */
START_TEST(test_offload_host_bytes) {
    const int64_t n = (P + 7) / 8, tiles = 2LL * 128 * 1024 * 1024 * 4;
    est_run run;
    llama8b_zero3(&run, false);
    run.offload = EST_OFFLOAD_OPTIMIZER;
    run.stack = est_stack_find("2024-04");
    est_estimate e;
    est_estimate_init(&e);
    estimate(&run, &e);
    ck_assert_int_eq(e.cpu_bytes, 16 * n + 2 * n + tiles);
    run.stack = est_stack_find("2025-02");
    estimate(&run, &e);
    ck_assert_int_eq(e.cpu_bytes, 16 * n + 2 * n);
    run.zero_stage = 2;
    run.grad_accum = 2;
    estimate(&run, &e);
    ck_assert_int_eq(e.cpu_bytes, 16 * n + 2 * HEAD + 2 * n);
    est_estimate_free(&e);
}
END_TEST

/* A record is compared on its largest rank (the one that decides the fit). */
START_TEST(test_check_uses_largest_rank) {
    char path[] = "/tmp/ftest-zero3-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "w");
    fputs("{\"schema\":\"ftest.record/1\",\"source\":\"t\",\"framework\":\"deepspeed\","
          "\"hardware\":{\"gpu\":\"a100-80gb\",\"gpus_per_node\":8,\"nodes\":1},"
          "\"config\":{\"model\":\"llama3-8b\",\"micro_batch\":1,\"seq_len\":1024,"
          "\"precision\":\"fp16-mixed\",\"zero\":3,\"padding_mask\":true,\"zero_init\":false},"
          "\"measured\":{\"oom\":false,\"ranks\":[{\"rank\":0,\"peak_active_bytes\":1048576},"
          "{\"rank\":5,\"peak_active_bytes\":3145728},{\"rank\":7,\"peak_active_bytes\":2097152}]}}\n",
          f);
    fclose(f);
    est_gpu_catalog cat;
    char err[256];
    ck_assert_msg(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0, "%s", err);
    char *out = NULL;
    size_t len = 0;
    FILE *o = open_memstream(&out, &len);
    est_check_options opt = {.markdown = true};
    est_check_totals tot = {0};
    ck_assert_msg(est_check_file(path, &cat, &opt, o, &tot, err, sizeof err) == 0, "%s", err);
    fclose(o);
    /* 3 MiB measured on the largest rank, a spread of 2 MiB. */
    ck_assert_msg(strstr(out, "| 1024 | 1 | none | none | no | 3 |"), "%s", out);
    ck_assert_msg(strstr(out, "% | 2 |"), "%s", out);
    free(out);
    unlink(path);
    est_gpu_catalog_free(&cat);
}
END_TEST

/* ZeRO-3's pending frees (the frees through record_stream the step holds
 * while DeepSpeed's host may be ahead of their stream, at most
 * e.rank_spread_bytes) are blocks freed and waiting on a recorded stream:
 * PyTorch lowers allocated_bytes at the free and active_bytes only when the
 * events complete (CUDACachingAllocator.cpp DeviceCachingAllocator::free). A
 * record of the allocated peak is compared with the estimate less that
 * spread; one of the active peak with the active estimate. Llama-3-8B, 8
 * ranks, fp16. */
START_TEST(test_check_allocated_without_pending_frees) {
    static const char fmt[] =
        "{\"schema\":\"ftest.record/1\",\"source\":\"t\",\"framework\":\"deepspeed\","
        "\"hardware\":{\"gpu\":\"a100-80gb\",\"gpus_per_node\":8,\"nodes\":1},"
        "\"config\":{\"model\":\"llama3-8b\",\"micro_batch\":1,\"seq_len\":1024,"
        "\"precision\":\"fp16-mixed\",\"zero\":3,\"padding_mask\":true,\"zero_init\":false},"
        "\"measured\":{\"oom\":false,\"ranks\":[{\"rank\":0,\"%s\":1048576}]}}\n";
    est_gpu_catalog cat;
    char err[256], line[1024];
    ck_assert_msg(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0, "%s", err);
    snprintf(line, sizeof line, fmt, "peak_allocated_bytes");
    est_record rec;
    ck_assert_msg(est_record_parse(line, strlen(line), &cat, &rec, err, sizeof err) == 0, "%s", err);
    est_estimate e;
    est_estimate_init(&e);
    estimate(&rec.run, &e);
    const int64_t pending = e.rank_spread_bytes;
    ck_assert(pending > 0);
    char want_alloc[64], want_active[64];
    snprintf(want_alloc, sizeof want_alloc, "estimated %10.1f MiB", (double)(e.peak_allocated_bytes - pending) / 1048576.0);
    snprintf(want_active, sizeof want_active, "estimated %10.1f MiB", (double)e.peak_active_bytes / 1048576.0);
    est_estimate_free(&e);
    est_record_free(&rec);
    for (int active = 0; active < 2; active++) {
        char path[] = "/tmp/ftest-zero3-XXXXXX";
        int fd = mkstemp(path);
        ck_assert_int_ge(fd, 0);
        FILE *f = fdopen(fd, "w");
        fprintf(f, fmt, active ? "peak_active_bytes" : "peak_allocated_bytes");
        fclose(f);
        char *out = NULL;
        size_t len = 0;
        FILE *o = open_memstream(&out, &len);
        est_check_options opt = {0};
        est_check_totals tot = {0};
        ck_assert_msg(est_check_file(path, &cat, &opt, o, &tot, err, sizeof err) == 0, "%s", err);
        fclose(o);
        ck_assert_msg(strstr(out, active ? want_active : want_alloc), "%s\nwant %s", out,
                      active ? want_active : want_alloc);
        free(out);
        unlink(path);
    }
    est_gpu_catalog_free(&cat);
}
END_TEST

/* The reduce side of the throttle by hand (seam_deepspeed_lag.c): Llama-3-8B
 * at one block, 8 ranks, zero.Init, 16 tokens, a reduce bucket of one
 * element, so that every gradient is larger than the bucket, stays
 * autograd's until the next gradient's hook flushes it (partition_grads:
 * record_stream, then param.grad = None) and flush k frees the gradient of
 * hook k-1. Backward's hooks: the LM head, the final norm (flush 1 frees the
 * LM head's gradient), then block 0's down (flush 2 frees the final norm's),
 * up (flush 3), gate (flush 4), ... At flush k the host waits for flush k-3,
 * so what flush j freed passes at flush j + 3: the LM head's gradient at
 * flush 4 (gate's hook), the final norm's at flush 5. Block 0's backward row
 * holds its highest point (a span's) before gate's hook, where the 1,002 MiB
 * LM head gradient is still held, and so is the final norm's; on a fake group
 * both completed within the head's backward. The rows' gradients differ by
 * exactly those two in fp16: (128256 x 4096 + 4096) x 2 bytes. The
 * embedding's backward row peaks when its own gradient exists, before its
 * hook runs flush 11: flushes 1-10 ran (the tenth at the input norm's hook,
 * completing what flushes 1-7 freed, the LM head's .. o's gradients), so v,
 * k and q (freed by flushes 8, 9, 10) are held: (4096 x 1024 x 2 + 4096 x
 * 4096) x 2 bytes more than on the fake group (with the host one flush
 * nearer, k and q only). */
START_TEST(test_reduce_throttle_by_hand) {
    est_run run;
    llama8b_zero3(&run, true);
    run.layers_used = 1;
    run.seq_len = 16;
    run.ds.reduce_bucket_elems = 1;
    run.ds.prefetch_bucket_elems = 0;
    est_estimate e;
    est_estimate_init(&e);
    estimate(&run, &e);
    const int64_t lagged = moment(&e, "backward layer 0")->bytes[EST_CAT_GRADS];
    const int64_t lagged_embed = moment(&e, "backward embedding")->bytes[EST_CAT_GRADS];
    run.ds.fake_group = true;
    estimate(&run, &e);
    ck_assert_int_eq(lagged - moment(&e, "backward layer 0")->bytes[EST_CAT_GRADS], (HEAD + 4096) * 2);
    ck_assert_int_eq(lagged_embed - moment(&e, "backward embedding")->bytes[EST_CAT_GRADS],
                     (4096LL * 1024 * 2 + 4096LL * 4096) * 2);
    est_estimate_free(&e);
}
END_TEST

Suite *suite_zero3(void);
Suite *suite_zero3(void) {
    Suite *s = suite_create("zero3");
    TCase *tc = tcase_create("zero3");
    tcase_add_test(tc, test_block_linear_count);
    tcase_add_test(tc, test_kept_weights_at_loss);
    tcase_add_test(tc, test_kept_weights_with_checkpointing);
    tcase_add_test(tc, test_reuse_distance_zero);
    tcase_add_test(tc, test_whole_model_at_init);
    tcase_add_test(tc, test_one_rank_keeps_nothing_extra);
    tcase_add_test(tc, test_pending_frees);
    tcase_add_test(tc, test_reduce_throttle_by_hand);
    tcase_add_test(tc, test_overflow_check);
    tcase_add_test(tc, test_offload_host_bytes);
    tcase_add_test(tc, test_overflow_check_reduces);
    tcase_add_test(tc, test_prefetch_passed_uses_stay);
    tcase_add_test(tc, test_check_uses_largest_rank);
    tcase_add_test(tc, test_check_allocated_without_pending_frees);
    suite_add_tcase(s, tc);
    return s;
}
