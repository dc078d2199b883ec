/* DeepSpeed's step as the seam emits it (estimator/frameworks/seam_deepspeed*.c),
 * moment by moment, against hand derivations from DeepSpeed 0.14.2's source
 * (the lines are cited in the seam) and the published Qwen1.5-0.5B shapes:
 * 463,987,712 parameters, vocabulary 151,936 x hidden 1024 (tied head),
 * 24 layers, head_dim 64, max_position_embeddings 32768. Stack 2024-04
 * (transformers 4.40: each layer's rotary module keeps cos and sin caches of
 * 32768 x 64, cast to the compute dtype with the module). One GPU, no
 * zero.Init (the shared runs' order), 16 tokens, no padding mask. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "caching_allocator.h"
#include "estimate.h"
#include "gpu.h"
#include "record.h"
#include "stack.h"
#include "test_util.h"

static const int64_t P = 463987712;
static const int64_t VH = 151936LL * 1024; /* the embedding, also the tied head */
static const int64_t ROPE = 24LL * 2 * 32768 * 64 * 2; /* fp16 */
static const int64_t BUCKET = 500000000;                /* reduce_bucket_size, elements */

static est_run qwen(est_precision prec) {
    est_run run = test_run_of("qwen1.5-0.5b", "rtx3090-24gb");
    run.stack = est_stack_find("2024-04");
    run.precision = prec;
    run.zero_stage = 3;
    run.zero_init = false;
    run.seq_len = 16;
    run.padding_mask = false;
    return run;
}

static const est_phase *moment(const est_estimate *e, const char *label) {
    for (size_t i = 0; i < e->tl.count; i++)
        if (!strcmp(e->tl.phases[i].label, label)) return &e->tl.phases[i];
    ck_abort_msg("no moment \"%s\"", label);
    return NULL;
}

/* The cuBLAS workspaces live in a step's moments: the forward's and, from the
 * warm-up's backward on, the backward thread's (autograd.c). */
static int64_t cublas(const est_estimate *e) { return 2 * (int64_t)e->k.value[EST_K_CUBLAS_WORKSPACE_BYTES]; }

/* deepspeed.initialize, stage 3 without zero.Init:
 *  - module.to(device): the fp16 model (2P) and the rotary caches; then each
 *    parameter's partition (one rank: all of it) beside its full tensor, the
 *    embedding first: 2P + ROPE + 2VH at the top;
 *  - defragment leaves the flat partition (2P) beside the caches;
 *    _create_fp32_partitions clones it (2P, counted with the master it
 *    becomes) and casts the clone to fp32 (4P): master 6P at the top;
 *    initialize_optimizer_states' zero fp32 gradient (4P) is the larger of
 *    the gradients there (the gradient partition is 2P);
 *  - the hooks gather each parameter once: the embedding's flat buffer (its
 *    numel padded to one rank: VH) beside the reduce bucket, its replicated
 *    tensor beside the flat weights. */
START_TEST(test_initialize_tensor_by_tensor) {
    est_run run = qwen(EST_PREC_FP16_MIXED);
    est_estimate e;
    test_estimate(&run, &e);
    ck_assert_int_eq(est_phase_allocated(moment(&e, "model moved to the device whole")), 2 * P + ROPE + 2 * VH);
    const est_phase *opt = moment(&e, "optimizer set-up (flat weights, fp32 master)");
    ck_assert_int_eq(opt->own_max[EST_CAT_PARAMS], 2 * P + ROPE);
    ck_assert_int_eq(opt->own_max[EST_CAT_MASTER], 2 * P + 4 * P);
    ck_assert_int_eq(opt->own_max[EST_CAT_GRADS], 4 * P);
    const est_phase *hooks = moment(&e, "gradient hooks (each parameter gathered once)");
    ck_assert_int_eq(hooks->own_max[EST_CAT_COMM], 2 * BUCKET + 2 * VH);
    ck_assert_int_eq(hooks->own_max[EST_CAT_PARAMS], 2 * P + ROPE + 2 * VH);
    est_estimate_free(&e);
}
END_TEST

/* The tied head: the LM head's weight gradient (VH, fp16) waits in autograd's
 * input buffer through every block's backward (there beside the gradient
 * partition 2P and, at the block's highest point, one MLP weight's gradient,
 * 1024 x 2816, until its hook copies it into the bucket); at the embedding
 * the two are added out of place, three VH tensors at once; DeepSpeed's hook
 * then sees one gradient. */
START_TEST(test_tied_head_gradient) {
    est_run run = qwen(EST_PREC_FP16_MIXED);
    est_estimate e;
    test_estimate(&run, &e);
    ck_assert_int_eq(moment(&e, "backward layer 12")->bytes[EST_CAT_GRADS], 2 * P + 2 * VH + 2 * 1024 * 2816);
    ck_assert_int_eq(moment(&e, "backward embedding")->own_max[EST_CAT_GRADS], 2 * P + 3 * 2 * VH);
    est_estimate_free(&e);
}
END_TEST

/* Stage 3's step after the first: torch.isinf is abs(x) == inf, so the fp16
 * |x| (2P) lives beside its bool (P) on the reduce stream; the norm upcasts
 * one parameter's gradient at a time to fp64, the embedding's the largest
 * (8 VH); then the flattened fp16 gradients (2P) and their fp32 cast (4P)
 * beside the gradient partition (2P). */
START_TEST(test_step_in_order) {
    est_run run = qwen(EST_PREC_FP16_MIXED);
    est_estimate e;
    test_estimate(&run, &e);
    ck_assert_int_eq(moment(&e, "optimizer: fp16 overflow check")->own_max[EST_CAT_WORKSPACE], cublas(&e) + 3 * P);
    ck_assert_int_eq(moment(&e, "optimizer: gradient norm (fp64)")->own_max[EST_CAT_WORKSPACE],
                     cublas(&e) + 8 * VH);
    ck_assert_int_eq(moment(&e, "optimizer: flatten + fp32 gradients")->own_max[EST_CAT_GRADS], 8 * P);
    est_estimate_free(&e);
}
END_TEST

/* In fp32 the master is the clone itself and the flattened gradient needs no
 * cast (.float() / .to(float32) of an fp32 tensor returns it): the step holds
 * the gradient partition (4P) and one flattened copy (4P). */
START_TEST(test_fp32_needs_no_cast) {
    est_run run = qwen(EST_PREC_FP32);
    est_estimate e;
    test_estimate(&run, &e);
    ck_assert_int_eq(moment(&e, "optimizer: flatten + fp32 gradients")->own_max[EST_CAT_GRADS], 8 * P);
    ck_assert_int_eq(moment(&e, "optimizer set-up (flat weights, fp32 master)")->own_max[EST_CAT_MASTER], 4 * P);
    est_estimate_free(&e);
}
END_TEST

/* A DeepSpeed config without "optimizer": the HF Trainer's torch AdamW runs
 * (foreach on CUDA), whose _foreach_sqrt(exp_avg_sqs) makes one fp32
 * temporary of the group, the whole fp32 partition (4P) at one rank. FusedAdam
 * (a config with "optimizer") allocates nothing in its step. bf16: no
 * overflow check. */
START_TEST(test_client_optimizer) {
    est_run run = qwen(EST_PREC_BF16_MIXED);
    est_estimate e;
    test_estimate(&run, &e);
    ck_assert_int_eq(moment(&e, "optimizer: flatten + fp32 gradients")->own_max[EST_CAT_WORKSPACE], cublas(&e));
    est_estimate_free(&e);
    run.ds.client_optimizer = true;
    test_estimate(&run, &e);
    ck_assert_int_eq(moment(&e, "optimizer: flatten + fp32 gradients")->own_max[EST_CAT_WORKSPACE],
                     cublas(&e) + 4 * P);
    est_estimate_free(&e);
}
END_TEST

/* A record of the probe's DeepSpeed mode names no DeepSpeed config: the probe
 * built one without an "optimizer" section (calibrate/probes/probe_run.py
 * ds_config), so the HF Trainer's torch AdamW stepped the partition and its
 * foreach _foreach_sqrt(exp_avg_sqs) made one fp32 temporary of the group:
 * at one rank, ZeRO-3's one sub-group (sub_group_size 1e9 > P) is all of P,
 * 4P beside the cuBLAS workspace. With optimizer offload the record says
 * which optimizer stepped the host: "torch AdamW ..." kept by
 * zero_force_ds_cpu_optimizer false, else DeepSpeedCPUAdam from an
 * "optimizer" section. */
static void probe_record(const char *extra, est_record *rec) {
    char line[1024];
    snprintf(line, sizeof line,
             "{\"schema\":\"ftest.record/1\",\"source\":\"t\",\"date\":\"d\",\"framework\":\"deepspeed\","
             "\"hardware\":{\"gpu\":\"rtx3090-24gb\",\"gpus_per_node\":1,\"nodes\":1},"
             "\"config\":{\"model\":\"qwen1.5-0.5b\",\"micro_batch\":1,\"grad_accum\":1,\"seq_len\":16,"
             "\"precision\":\"bf16-mixed\",\"zero\":3,\"optimizer\":\"adamw\",\"zero_init\":false,"
             "\"stack\":\"2024-04\",\"probe_mode\":\"deepspeed\"%s},\"measured\":{\"oom\":true}}",
             extra);
    est_gpu_catalog cat;
    char err[256];
    ck_assert_msg(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(est_record_parse(line, strlen(line), &cat, rec, err, sizeof err) == 0, "%s", err);
    est_gpu_catalog_free(&cat);
}

START_TEST(test_probe_record_client_optimizer) {
    est_record rec;
    probe_record("", &rec);
    ck_assert(rec.run.ds.client_optimizer);
    rec.run.padding_mask = false;
    est_estimate e;
    test_estimate(&rec.run, &e);
    ck_assert_int_eq(moment(&e, "optimizer: flatten + fp32 gradients")->own_max[EST_CAT_WORKSPACE],
                     cublas(&e) + 4 * P);
    est_estimate_free(&e);
    est_record_free(&rec);
    probe_record(",\"offload\":\"optimizer\",\"optimizer_impl\":\"torch AdamW on the host partition\"", &rec);
    ck_assert(rec.run.ds.client_optimizer && rec.run.ds.keep_client_optimizer);
    est_record_free(&rec);
    probe_record(",\"offload\":\"optimizer\"", &rec);
    ck_assert(!rec.run.ds.client_optimizer && !rec.run.ds.keep_client_optimizer);
    est_record_free(&rec);
}
END_TEST

/* ZeRO-2 at one rank, bf16 (partition n = P: P is even, the alignment 2 x 1).
 * The HF Trainer's optimizer has two parameter groups (weight decay, and the
 * biases and norms without), DeepSpeed one grads_in_partition (2P) for both:
 * the second group's views keep it through the first group's step, so at the
 * foreach temporary (4P) the gradients are that buffer and the fp32
 * partition (2P + 4P), where one group (DeepSpeed's optimizer, or a script's
 * single list) has dropped it: the highest point is then the flatten (2P +
 * 2P + 4P) or the temporary beside the fp32 gradients (4P + 4P), 8P either
 * way. Qwen1.5-0.5B has biases (q, k, v) and RMSNorm weights. */
START_TEST(test_hf_groups_hold_grads_in_partition) {
    est_run run = qwen(EST_PREC_BF16_MIXED);
    run.zero_stage = 2;
    run.ds.client_optimizer = true;
    est_estimate e;
    test_estimate(&run, &e);
    const est_phase *m = moment(&e, "optimizer: flatten + fp32 gradients");
    ck_assert_int_eq(m->bytes[EST_CAT_GRADS], 2 * P + 4 * P);
    ck_assert_int_eq(m->bytes[EST_CAT_WORKSPACE], cublas(&e) + 4 * P);
    est_estimate_free(&e);
    run.ds.client_one_group = true;
    test_estimate(&run, &e);
    m = moment(&e, "optimizer: flatten + fp32 gradients");
    ck_assert_int_eq(m->bytes[EST_CAT_GRADS] + m->bytes[EST_CAT_WORKSPACE], cublas(&e) + 8 * P);
    est_estimate_free(&e);
}
END_TEST

/* ZeRO-2 over 4 ranks on tiny-llama (22,688 parameters, every dimension a
 * multiple of 8: the flat buffer needs no padding; partition n = 5672). Its
 * largest tensors are 64 x 32 = 2048 elements (embedding, gate, up, down, LM
 * head); the last registered, the LM head, is the first gradient backward
 * meets, and the rank that holds its end, rank 3 ([17016, 22688)), is
 * followed. Block 1 spans [11328, 20608): its up [16448, 18496), down, two
 * norms, the final norm and the head meet rank 3's range, so
 * grads_in_partition holds 3 x 2048 + 3 x 32 = 6240 bf16 elements, allocated
 * at the first copy (the epilogue: the default bucket holds the whole model).
 * The step flattens the partition (2n) and casts it (4n) beside it. */
START_TEST(test_zero2_partition_of_the_followed_rank) {
    est_run run = test_run_of("tiny-llama", "a100-80gb");
    run.precision = EST_PREC_BF16_MIXED;
    run.zero_stage = 2;
    run.gpus_per_node = 4;
    run.seq_len = 64;
    est_estimate e;
    test_estimate(&run, &e);
    const int64_t gip = 2 * 6240, n = 5672;
    ck_assert_int_eq(moment(&e, "gradient reduction")->own_max[EST_CAT_GRADS], gip);
    ck_assert_int_eq(moment(&e, "optimizer: flatten + fp32 gradients")->own_max[EST_CAT_GRADS], gip + 2 * n + 4 * n);
    est_estimate_free(&e);
}
END_TEST

/* ZeRO-3 without zero.Init: DeepSpeed 0.14.2 and 0.16.4 leave torch's
 * linear in place, which saves weight.t(), a view of the gathered weight, so
 * each Linear's gathered weight lives from its forward to its backward;
 * 0.19.8 converts the model with Init(module=model) at initialize, which
 * installs zero3_linear_wrap as zero.Init does (PR #8189), and the two paths
 * keep the same tensors through the step (the cpu-trace records traced them
 * equal at N = 2, 4, 8). A record listing torch 2.15.0, transformers 5.23.0
 * and deepspeed 0.19.8 gets that stack. */
START_TEST(test_linear_wrap_without_init) {
    const char *listed = "{\"torch\":\"2.15.0+cpu\",\"transformers\":\"5.23.0\",\"deepspeed\":\"0.19.8\"}";
    cJSON *j = cJSON_Parse(listed);
    const est_stack *st = est_stack_of_versions(j);
    ck_assert_ptr_nonnull(st);
    ck_assert_str_eq(st->name, "2026-11");
    cJSON_DeleteItemFromObject(j, "deepspeed");
    ck_assert_ptr_null(est_stack_of_versions(j));
    cJSON_Delete(j);
    int64_t row[2][2]; /* [stack][zero_init]: the reserved peak (the kept weights
                          fragment the cache: the allocated peak is the step's) */
    const char *stacks[2] = {"2025-02", "2026-11"};
    for (int k = 0; k < 2; k++)
        for (int init = 0; init < 2; init++) {
            est_run run = qwen(EST_PREC_BF16_MIXED);
            run.stack = est_stack_find(stacks[k]);
            run.gpus_per_node = 2;
            run.zero_init = init;
            est_estimate e;
            test_estimate(&run, &e);
            row[k][init] = e.peak_reserved_bytes;
            est_estimate_free(&e);
        }
    ck_assert_int_gt(row[0][0], row[0][1]);
    ck_assert_int_eq(row[1][0], row[1][1]);
}
END_TEST

/* ZeRO-1 without overlap_comm (stage_1_and_2.py reduce_gradients: each
 * .grad after backward, registration order) leaves a gradient larger than
 * the reduce bucket as its parameter's .grad; outside this rank's partition
 * nothing copies it into grads_in_partition (reduce_ipg_grads, "zero stage 1
 * - partition only optimizer state"), and the epilogue drops it with every
 * other .grad: self.zero_grad(set_to_none=True) in 0.14.2 (line 795), 0.16.4
 * (line 807) and 0.18.1 (line 879), _clear_param_grad_only() in 0.19.8
 * (line 1067). step()'s free_grad_in_param_list(params_not_in_partition)
 * then finds nothing. tiny-llama (HF order: embedding 2048; per layer q
 * 1024, k 512, v 512, o 1024, gate, up, down 2048 each, two norms of 32 =
 * 9280; final norm 32; head 2048; P = 22688), two ranks, bf16,
 * reduce_bucket_size 1500: rank 1 owns [11344, 22688). Outside it wholly:
 * the embedding and layer 0 ([2048, 11328)), whose extra-large gradients are
 * the embedding, gate, up and down: 4 x 2048 elements, live through the
 * reduction (gradient reduction's own maximum holds them beside the rest) and
 * gone at the step. grads_in_partition: layer 1 (its q straddles 11344), the
 * final norm and the head: 9280 + 32 + 2048 = 11360 elements, so while the
 * step takes the norm the gradients hold 2 x 11360 bytes under every stack. */
START_TEST(test_zero1_keeps_large_gradients_outside_the_partition) {
    const char *stacks[4] = {"2024-04", "2025-02", "2025-10", "2026-11"};
    const int64_t gip = 2 * 11360, kept = 2 * 4 * 2048;
    for (int k = 0; k < 4; k++) {
        est_run run = test_run_of("tiny-llama", "a100-80gb");
        run.stack = est_stack_find(stacks[k]);
        ck_assert_ptr_nonnull(run.stack);
        run.precision = EST_PREC_BF16_MIXED;
        run.zero_stage = 1;
        run.gpus_per_node = 2;
        run.rank = 1;
        run.seq_len = 64;
        run.ds.reduce_bucket_elems = 1500;
        est_estimate e;
        test_estimate(&run, &e);
        ck_assert_int_ge(moment(&e, "gradient reduction")->own_max[EST_CAT_GRADS], gip + kept);
        ck_assert_int_eq(moment(&e, "optimizer: gradient norm (fp64)")->own_max[EST_CAT_GRADS], gip);
        est_estimate_free(&e);
    }
}
END_TEST

/* Accumulating over micro-batches, what the earlier micro-batches leave at
 * the boundary micro-batch's start (stage_1_and_2.py, the lines cited in
 * seam_deepspeed_zero12.c ds12_accumulated), under every DeepSpeed stack:
 *  - ZeRO-1 (tiny-llama, two ranks, bf16, reduce_bucket_size 1500): the
 *    last backward's reduce bucket, 2 x 1500 = 3000 bytes, already there in
 *    the forward (the engine runs the epilogue that frees it only at the
 *    boundary), and still one bucket at the loss's backward (0.14.2/0.16.4
 *    drop it and make another there, 0.18.1/0.19.8 keep it); none in the
 *    forward without accumulation;
 *  - ZeRO-2 (tiny-llama over 4 ranks, rank 3: grads_in_partition 6240 bf16
 *    elements, test_zero2_partition_of_the_followed_rank): the earlier
 *    micro-batches' grads_in_partition, 2 x 6240 bytes, through the forward;
 *    beside it the boundary micro-batch's own from its first copy (the
 *    epilogue: the default bucket holds the whole model) to the epilogue,
 *    2 x 2 x 6240 at the reduction; then one, as without accumulation: the
 *    step's flatten holds 2 x 6240 + 2n + 4n, n = 5672. */
START_TEST(test_zero12_accumulation_leftovers) {
    const char *stacks[4] = {"2024-04", "2025-02", "2025-10", "2026-11"};
    const int64_t gip = 2 * 6240, n = 5672;
    for (int k = 0; k < 4; k++)
        for (int ga = 1; ga <= 2; ga++) {
            est_run run = test_run_of("tiny-llama", "a100-80gb");
            run.stack = est_stack_find(stacks[k]);
            ck_assert_ptr_nonnull(run.stack);
            run.precision = EST_PREC_BF16_MIXED;
            run.zero_stage = 1;
            run.gpus_per_node = 2;
            run.seq_len = 64;
            run.grad_accum = ga;
            run.ds.reduce_bucket_elems = 1500;
            est_estimate e;
            test_estimate(&run, &e);
            ck_assert_int_eq(moment(&e, "forward embedding")->own_max[EST_CAT_COMM], ga == 2 ? 3000 : 0);
            if (ga == 2) ck_assert_int_eq(moment(&e, "loss backward")->own_max[EST_CAT_COMM], 3000);
            est_estimate_free(&e);
            run.zero_stage = 2;
            run.gpus_per_node = 4;
            run.ds.reduce_bucket_elems = BUCKET; /* the default */
            test_estimate(&run, &e);
            const int64_t held = ga == 2 ? gip : 0;
            ck_assert_int_eq(moment(&e, "forward embedding")->own_max[EST_CAT_GRADS], held);
            ck_assert_int_eq(moment(&e, "gradient reduction")->own_max[EST_CAT_GRADS], held + gip);
            ck_assert_int_eq(moment(&e, "optimizer: flatten + fp32 gradients")->own_max[EST_CAT_GRADS],
                             gip + 2 * n + 4 * n);
            est_estimate_free(&e);
        }
}
END_TEST

/* Where ZeRO-1/2's reduce bucket appears: 0.14.2 and 0.16.4 allocate it in
 * backward() before autograd runs (stage_1_and_2.py backward: ipg_buffer =
 * [torch.empty(reduce_bucket_size)]), so it sits beside the loss's gradients;
 * 0.19.8 allocates it in setup_buckets from the first gradient hook
 * (process_gradients), after the LM head's backward. tiny-llama, two ranks,
 * bf16, ZeRO-2, reduce_bucket_size 1500: a bucket of 2 x 1500 = 3000 bytes,
 * the only communication tensor of backward. */
START_TEST(test_zero2_bucket_at_the_first_gradient) {
    const char *stacks[2] = {"2025-02", "2026-11"};
    for (int k = 0; k < 2; k++) {
        est_run run = test_run_of("tiny-llama", "a100-80gb");
        run.stack = est_stack_find(stacks[k]);
        run.precision = EST_PREC_BF16_MIXED;
        run.zero_stage = 2;
        run.gpus_per_node = 2;
        run.seq_len = 64;
        run.ds.reduce_bucket_elems = 1500;
        est_estimate e;
        test_estimate(&run, &e);
        ck_assert_int_eq(moment(&e, "loss backward")->own_max[EST_CAT_COMM], k == 0 ? 3000 : 0);
        ck_assert_int_eq(moment(&e, "backward layer 1")->own_max[EST_CAT_COMM], 3000);
        est_estimate_free(&e);
    }
}
END_TEST

/* DeepSpeed 0.19.8 flattens each ZeRO-1/2 bit16 group on the device when it
 * fits (stage_1_and_2.py __init__ flatten_on_accelerator) and makes the
 * group's fp32 master inside the same loop (lines 560-561: the partition
 * .detach().clone().to(device, fp32)), before the next group's empty_cache().
 * Llama-3.2-1B untied (hidden 2048, kv 512, intermediate 8192, 16 layers,
 * vocabulary 128,256), bf16, one H200, the HF Trainer's two groups.
 * module.to(device) in _apply's order, torch's allocator by hand: each block's
 * q (8 MiB) opens a 20 MiB segment that k, v (2 MiB each) and o (8 MiB) fill;
 * gate, up, down take 32 MiB segments of their own: 116 MiB a block; the
 * embedding and the head 525,336,576 bytes each, segments of 251 x 2 MiB =
 * 526,385,152; the 33 norms (4 KiB each) one 2 MiB small-pool segment:
 * 3,001,024,512 bytes. Group 0 (every matrix: 16 x 60,817,408 +
 * 2 x 262,668,288 = 1,498,415,104 elements, even) makes its flat buffer of
 * B = 2,996,830,208 bytes = 1,429 x 2 MiB beside them (5,997,854,720
 * reserved); its parameters' tensors are then freed and cached (none holds
 * B), so its bf16 clone takes a segment of B of its own and the fp32 master
 * one of 2B: 3,001,024,512 + 4B = 14,988,345,344 at the top of the set-up.
 * Group 1's empty_cache() returns the parameters' segments and the clone's,
 * and leaves the flat buffer, the master and the norms' small segment (which
 * group 1's flat buffer, clone, master and zero gradient, 67,584 elements,
 * fit in): 3B + 2 MiB = 8,992,587,776. initialize_optimizer_states' zero fp32
 * gradient of group 0 (2B) is then freed and cached: the engine starts its
 * first step with 5B + 2 MiB = 14,986,248,192 reserved, where a clone made
 * after the loop would leave its segment cached too (6B + 2 MiB). Before
 * 0.19.8 (stack 2025-02) the parameters go to the host first
 * (test_zero12_clones_in_the_loop_before_0_19_8): the top is the model's
 * 3,001,024,512, and group 0's empty_cache() leaves the placeholders' small
 * segment, 2 MiB. */
START_TEST(test_zero12_flattens_on_the_device) {
    est_run run = test_run_of(test_repo_path("calibrate/records/models/llama3.2-1b-untied.json"), "h200-141gb");
    run.stack = est_stack_find("2026-11-gpu");
    run.precision = EST_PREC_BF16_MIXED;
    run.zero_stage = 1;
    run.seq_len = 64;
    run.ds.client_optimizer = true;
    est_estimate e;
    test_estimate(&run, &e);
    const int64_t B = INT64_C(2996830208), small = INT64_C(2097152);
    int64_t peak = 0;
    ck_assert_int_eq(test_reserved_after_empty_cache(&e.step, 2, &peak), 3 * B + small);
    ck_assert_int_eq(peak, INT64_C(3001024512) + 4 * B);
    ck_assert_int_eq(test_reserved_at(&e.step, "engine initialized"), 5 * B + small);
    est_estimate_free(&e);
}
END_TEST

/* DeepSpeed 0.14.2 and 0.16.4 (stack 2025-02: 0.16.4) go through ZeRO-1/2's
 * groups the same way but always by the host (stage_1_and_2.py __init__,
 * 0.16.4 lines 304-425): the group's parameters to the host with a
 * one-element device placeholder each (line 328), empty_cache() (line 330),
 * the flat buffer moved back in one allocation (line 364), the placeholders
 * freed (_update_model_bit16_weights, line 373), then the group's master
 * (line 401: partition.to(self.device).clone().float(), the clone freed at
 * once) before the next group starts. The same model, bf16, one H200, the
 * Trainer's two groups, torch's allocator by hand:
 *  - group 0: the model on the device, 3,001,024,512 reserved (the 2 MiB
 *    small segment of the norms holds the placeholders too); its matrices go
 *    to the host, and empty_cache() leaves the small segment: 2 MiB; then the
 *    flat buffer B (1,429 x 2 MiB, a segment of its own), the bf16 clone B
 *    and the fp32 master 2B, a new segment each (nothing cached holds them):
 *    4B + 2 MiB = 11,989,417,984 at the top of the set-up;
 *  - group 1 (the 33 norms, 67,584 elements): their placeholders in the
 *    small segment, and its empty_cache() returns the clone's segment:
 *    3B + 2 MiB = 8,992,587,776; group 1's flat buffer, clone and master and
 *    its zero gradient fit in the small segment;
 *  - initialize_optimizer_states: group 0's zero fp32 gradient (2B, a new
 *    segment) is freed and cached: 5B + 2 MiB = 14,986,248,192 when the
 *    engine starts its first step.
 * One clone after the loop (ftest before dsclone) gives one empty_cache()
 * only and 2 MiB + 2 x 1,430 x 2 MiB + 2 x 2,859 x 2 MiB = 17,991,467,008 at
 * "engine initialized" (one flat buffer of every parameter, 2,996,965,376
 * bytes; the clone's segment cached; master and zero gradient 5,993,930,752
 * each). */
START_TEST(test_zero12_clones_in_the_loop_before_0_19_8) {
    est_run run = test_run_of(test_repo_path("calibrate/records/models/llama3.2-1b-untied.json"), "h200-141gb");
    run.stack = est_stack_find("2025-02");
    run.precision = EST_PREC_BF16_MIXED;
    run.zero_stage = 1;
    run.seq_len = 64;
    run.ds.client_optimizer = true;
    est_estimate e;
    test_estimate(&run, &e);
    const int64_t B = INT64_C(2996830208), small = INT64_C(2097152);
    int64_t peak = 0;
    ck_assert_int_eq(test_reserved_after_empty_cache(&e.step, 1, &peak), small);
    ck_assert_int_eq(peak, INT64_C(3001024512));
    ck_assert_int_eq(test_reserved_after_empty_cache(&e.step, 2, &peak), 3 * B + small);
    ck_assert_int_eq(peak, 4 * B + small);
    ck_assert_int_eq(test_reserved_at(&e.step, "engine initialized"), 5 * B + small);
    est_estimate_free(&e);
}
END_TEST

/* The GPU day's rank 0 of 8 on a fake process group (probe ds-w8-r0,
 * Llama-3-8B at 4 blocks, ZeRO-3, seq 1024): its measured active peak is its
 * allocated peak, so no free waited on another rank, and the step holds no
 * free past its module (seam_deepspeed_lag.c: a fake group's collectives
 * return at once). As a real 8-rank job, the frees DeepSpeed makes through
 * record_stream stay in the step while the host may be ahead of their
 * stream, and that is all that changes: the allocated peak rises by at most
 * what is so held (e.rank_spread_bytes), never falls, and the reserved peak
 * does not fall either. */
START_TEST(test_fake_group_holds_no_pending_frees) {
    char err[256];
    est_gpu_catalog cat;
    ck_assert_msg(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0, "%s", err);
    char *all = test_slurp(test_repo_path("calibrate/records/probe-h200-2026-11-26.jsonl"), NULL);
    const char *hit = strstr(all, "\"point\":\"probe/ds-w8-r0/deepspeed/llama3-8b-L4/s1024/b1/zero=3\"");
    ck_assert_ptr_nonnull(hit);
    const char *start = hit;
    while (start > all && start[-1] != '\n') start--;
    const char *end = strchr(hit, '\n');
    est_record rec;
    ck_assert_msg(est_record_parse_at(start, (size_t)(end - start), &cat, test_repo_path("calibrate/records"), &rec,
                                      err, sizeof err) == 0,
                  "%s", err);
    ck_assert(rec.rank_emulated && rec.run.ds.fake_group);
    est_estimate e;
    test_estimate(&rec.run, &e);
    ck_assert_int_eq(e.rank_spread_bytes, 0);
    const int64_t fake_alloc = e.peak_allocated_bytes, fake_res = e.peak_reserved_bytes;
    est_estimate_free(&e);
    rec.run.ds.fake_group = false;
    test_estimate(&rec.run, &e);
    ck_assert_int_gt(e.rank_spread_bytes, 0);
    ck_assert_int_ge(e.peak_allocated_bytes, fake_alloc);
    ck_assert_int_le(e.peak_allocated_bytes - fake_alloc, e.rank_spread_bytes);
    ck_assert_int_ge(e.peak_reserved_bytes, fake_res);
    est_estimate_free(&e);
    est_record_free(&rec);
    est_gpu_catalog_free(&cat);
    free(all);
}
END_TEST


/* DeepSpeed 0.19.8 gathers each parameter for its hook through
 * _allgather_params_sequential (partition_parameters.py _all_gather: a list of
 * one): one flat tensor of the numel padded to the ranks, the parameter a view
 * of it. 0.16.5's _allgather_params also copied a replicated tensor out of the
 * flat one. One rank, the embedding the largest parameter: the flat buffer
 * (2VH bytes, fp16) sits beside the reduce bucket (2 x BUCKET bytes) on both
 * versions; the replicated tensor (2VH bytes) only without the view. The same
 * stack both ways, the flag alone flipped. */
START_TEST(test_hook_gather_is_a_view_in_0_19_8) {
    int64_t params[2];
    for (int view = 0; view < 2; view++) {
        est_stack st = *est_stack_find("2026-11-gpu");
        st.ds_hook_gather_view = view;
        est_run run = qwen(EST_PREC_FP16_MIXED);
        run.stack = &st;
        est_estimate e;
        test_estimate(&run, &e);
        const est_phase *hooks = moment(&e, "gradient hooks (each parameter gathered once)");
        ck_assert_int_eq(hooks->own_max[EST_CAT_COMM], 2 * BUCKET + 2 * VH);
        params[view] = hooks->own_max[EST_CAT_PARAMS];
        est_estimate_free(&e);
    }
    ck_assert_int_eq(params[0] - params[1], 2 * VH);
}
END_TEST

/* One Llama-3-8B block under ZeRO-3 on 8 ranks (DeepSpeed 0.14.2's stack,
 * fp16, built before DeepSpeed, a bucket of 4096^2 elements), its step
 * estimated with the tensors' names kept. */
static void z3_block_step(est_estimate *e) {
    est_run run = test_run_of("llama3-8b", "a100-80gb");
    run.stack = est_stack_find("2024-04");
    run.precision = EST_PREC_FP16_MIXED;
    run.zero_stage = 3;
    run.zero_init = false;
    run.gpus_per_node = 8;
    run.seq_len = 16;
    run.layers_used = 1;
    run.ds.reduce_bucket_elems = 4096LL * 4096;
    est_estimate_init(e);
    e->step.keep_names = true;
    char err[256];
    ck_assert_msg(est_estimate_run(&run, e, err, sizeof err) == 0, "%s", err);
}

/* Stage 3's epilogue (independent_gradient_partition_epilogue, stage3.py
 * 0.14.2 line 1088, 0.19.8 line 1414) flushes the last bucket and then calls
 * reduce_and_partition_stream.synchronize(): whatever that flush freed through
 * record_stream is reusable before the optimizer's first allocation. The
 * flush frees the embedding's gradient, the last one backward makes: V x h
 * fp16 elements (128,256 x 4,096 x 2 = 1,050,673,152 bytes), larger than the
 * bucket, so it stayed autograd's tensor until then (__add_grad_to_ipg_bucket
 * copies only what fits). Replayed through the allocator, the first moment of
 * the optimizer holds as pending only what the step itself has just released
 * through record_stream on the compute stream (_partition_all_parameters: the
 * persistent parameters, here the block's two RMSNorm weights and the final
 * norm, 3 x 4,096 fp16 = 24,576 bytes, each a multiple of 512), not the
 * embedding's gradient. */
START_TEST(test_epilogue_synchronizes_the_reduce_stream) {
    est_estimate e;
    z3_block_step(&e);
    const int64_t vh2 = 128256LL * 4096 * 2;
    char err[256];
    est_alloc_config cfg;
    est_alloc_config_default(&cfg);
    est_alloc *a = est_alloc_new(&cfg, err, sizeof err);
    ck_assert_ptr_nonnull(a);
    est_alloc_handle *h = calloc((size_t)e.step.tensor_count + 1, sizeof *h);
    bool reducing = false, freed_head = false;
    int checked = 0;
    for (size_t i = 0; i < e.step.count; i++) {
        const est_event *ev = &e.step.events[i];
        if (ev->kind == EST_EV_MOMENT) {
            const bool optimizer = !strncmp(ev->u.moment.label, "optimizer", 9);
            if (reducing && optimizer) {
                est_alloc_stats st;
                est_alloc_stats_get(a, &st);
                ck_assert(freed_head);
                ck_assert_int_eq(st.active_bytes[EST_ALLOC_ALL].current - st.allocated_bytes[EST_ALLOC_ALL].current,
                                 3 * 4096 * 2);
                checked++;
            }
            reducing = !strcmp(ev->u.moment.label, "gradient reduction");
            if (reducing) freed_head = false;
        } else if (ev->kind == EST_EV_SYNC) {
            ck_assert_int_eq(est_alloc_sync(a), EST_ALLOC_OK);
        } else if (ev->kind == EST_EV_ALLOC && ev->u.mem.id >= 0) {
            ck_assert_int_eq(est_alloc_malloc(a, ev->u.mem.bytes, ev->u.mem.stream, &h[ev->u.mem.id]), EST_ALLOC_OK);
        } else if (ev->kind == EST_EV_FREE && ev->u.mem.id >= 0 && h[ev->u.mem.id]) {
            if (reducing && ev->u.mem.bytes == vh2) freed_head = true;
            if (ev->u.mem.pending) {
                ck_assert_int_eq(est_alloc_release_pending(a, h[ev->u.mem.id], ev->u.mem.stream == 0 ? 1 : 0),
                                 EST_ALLOC_OK);
            } else {
                ck_assert_int_eq(est_alloc_release(a, h[ev->u.mem.id]), EST_ALLOC_OK);
            }
            h[ev->u.mem.id] = EST_ALLOC_NULL;
        }
    }
    ck_assert_int_ge(checked, 1);
    free(h);
    est_alloc_free(a);
    est_estimate_free(&e);
}
END_TEST

/* Stage 3's two side streams (stage3.py 0.14.2 lines 227-228: with
 * overlap_comm, config.py's default at stage 3, reduce_and_partition_stream
 * is a stream of its own; the coordinator's all-gathers run on
 * __allgather_stream): the bucket's concatenated reduce-scatter input and
 * fp16's isinf/isnan test are allocated on the reduce stream, the gathered
 * parameters and flat buffers on the all-gather stream, and PyTorch's
 * allocator keeps a pool per stream, so neither reuses the other's blocks. */
START_TEST(test_zero3_side_streams) {
    est_estimate e;
    z3_block_step(&e);
    int reduce = 0, overflow = 0, gathered = 0;
    for (size_t i = 0; i < e.step.count; i++) {
        const est_event *ev = &e.step.events[i];
        if (ev->kind != EST_EV_ALLOC) continue;
        const char *n = ev->u.mem.name;
        const int want = !strcmp(n, "reduce-scatter input") || !strncmp(n, "isinf", 5) || !strcmp(n, "isnan") ? 2
                         : !strcmp(n, "gathered parameter") || !strcmp(n, "all-gather flat buffer")       ? 1
                                                                                                           : -1;
        if (want >= 0) ck_assert_int_eq(ev->u.mem.stream, want);
        reduce += !strcmp(n, "reduce-scatter input");
        overflow += !strncmp(n, "isinf", 5);
        gathered += want == 1;
    }
    ck_assert_int_gt(reduce, 0);
    ck_assert_int_gt(overflow, 0);
    ck_assert_int_gt(gathered, 0);
    est_estimate_free(&e);
}
END_TEST

/* The largest bytes of communication buffers live at any moment of the step. */
static int64_t comm_top(const est_estimate *e) {
    int64_t top = 0;
    for (size_t i = 0; i < e->tl.count; i++)
        if (e->tl.phases[i].own_max[EST_CAT_COMM] > top) top = e->tl.phases[i].own_max[EST_CAT_COMM];
    return top;
}

static est_run tiny_two_ranks(int stage, int comm_bytes) {
    est_run run = test_run_of("tiny-llama", "a100-80gb");
    run.stack = est_stack_find("2025-02");
    run.precision = EST_PREC_BF16_MIXED;
    run.zero_stage = stage;
    run.gpus_per_node = 2;
    run.seq_len = 64;
    run.ds.reduce_bucket_elems = 30000; /* every gradient of the model in one bucket */
    run.ds.comm_bytes = comm_bytes;
    return run;
}

/* communication_data_type fp32 under bf16, ZeRO-2 (stage_1_and_2.py
 * allreduce_bucket, 0.16.4 lines 1502-1515): the bucket stays bf16, each
 * destination's flattened slices are copied .to(fp32), reduced, copied back.
 * tiny-llama has P = 22,688 parameters (models/tiny-llama.json, every tensor
 * of even size); over 2 ranks the flat buffer (a multiple of 2 x 2) splits
 * into partitions of 11,344 elements. A 30,000-element bucket takes every
 * gradient, so the only flush is the epilogue's, one group per destination:
 * the fp32 copy of 11,344 x 4 = 45,376 bytes lives beside the bucket and the
 * bf16 flatten, and the communication buffers' top rises by that. On the
 * wire each rank sends (W-1)/W of P gradients once per micro-batch: 1/2 x
 * 22,688 x (4 - 2) = 22,688 bytes more; the all-gather of the updated bf16
 * weights is unchanged. */
START_TEST(test_zero2_communication_data_type) {
    est_run a = tiny_two_ranks(2, 0), b = tiny_two_ranks(2, 4);
    est_estimate ea, eb;
    test_estimate(&a, &ea);
    test_estimate(&b, &eb);
    ck_assert_int_eq(comm_top(&eb) - comm_top(&ea), 11344 * 4);
    ck_assert_double_eq_tol(eb.time.comm_bytes - ea.time.comm_bytes, 0.5 * 22688 * 2, 1e-6);
    est_estimate_free(&ea);
    est_estimate_free(&eb);
    /* bf16 named explicitly is the gradient dtype: nothing moves */
    est_run c = tiny_two_ranks(2, 2);
    est_estimate ec;
    test_estimate(&c, &ec);
    test_estimate(&a, &ea);
    ck_assert_int_eq(ec.peak_allocated_bytes, ea.peak_allocated_bytes);
    ck_assert_double_eq(ec.time.comm_bytes, ea.time.comm_bytes);
    est_estimate_free(&ea);
    est_estimate_free(&ec);
}
END_TEST

/* The same at ZeRO-3 (stage3.py __avg_scatter_grads, 0.16.4 lines 1376-1391):
 * every gradient of the bucket is cast .to(fp32), all alive through
 * reduce_scatter_coalesced, whose concatenated input (each gradient padded
 * to a multiple of 2 ranks: none needs padding) is then fp32 as well. One
 * flush of all 22,688 gradients: the cast copies, 22,688 x 4 bytes, are new,
 * and the reduce-scatter input grows from 2 to 4 bytes an element:
 * 22,688 x (4 + 2) = 136,128 bytes more at the top. */
START_TEST(test_zero3_communication_data_type) {
    est_run a = tiny_two_ranks(3, 0), b = tiny_two_ranks(3, 4);
    est_estimate ea, eb;
    test_estimate(&a, &ea);
    test_estimate(&b, &eb);
    ck_assert_int_eq(comm_top(&eb) - comm_top(&ea), 22688 * (4 + 2));
    est_estimate_free(&ea);
    est_estimate_free(&eb);
}
END_TEST

/* contiguous_gradients false at ZeRO-3 (stage3.py 0.16.4: the
 * __ipg_bucket_flat_buffer is made only with contiguous_gradients, line 537;
 * __add_grad_to_ipg_bucket copies a gradient into it only then, line 1279):
 * the reduce bucket's 30,000 x 2 = 60,000 bytes leave the communication
 * buffers, and each gradient stays its own tensor until the bucket's flush.
 * tiny-llama (P = 22,688) fits one bucket, so at the epilogue's flush all of
 * its bf16 gradients, 22,688 x 2 bytes, live beside the gradient partition
 * (11,344 x 2): 68,064 bytes of gradients at the reduction. (With the
 * bucket ftest holds the copied gradients' frees to the same flush, the
 * reduce stream's: seam_deepspeed_lag.c; so only the bucket differs.) */
START_TEST(test_zero3_loose_gradients) {
    est_run a = tiny_two_ranks(3, 0), b = tiny_two_ranks(3, 0);
    b.ds.loose_grads = true;
    est_estimate ea, eb;
    test_estimate(&a, &ea);
    test_estimate(&b, &eb);
    ck_assert_int_eq(comm_top(&ea) - comm_top(&eb), 30000 * 2);
    ck_assert_int_eq(moment(&eb, "gradient reduction")->own_max[EST_CAT_GRADS], 22688 * 2 + 11344 * 2);
    est_estimate_free(&ea);
    est_estimate_free(&eb);
}
END_TEST

Suite *suite_deepspeed_seam(void);
Suite *suite_deepspeed_seam(void) {
    Suite *s = suite_create("deepspeed_seam");
    TCase *tc = tcase_create("deepspeed_seam");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_initialize_tensor_by_tensor);
    tcase_add_test(tc, test_tied_head_gradient);
    tcase_add_test(tc, test_step_in_order);
    tcase_add_test(tc, test_fp32_needs_no_cast);
    tcase_add_test(tc, test_client_optimizer);
    tcase_add_test(tc, test_probe_record_client_optimizer);
    tcase_add_test(tc, test_hf_groups_hold_grads_in_partition);
    tcase_add_test(tc, test_zero2_partition_of_the_followed_rank);
    tcase_add_test(tc, test_linear_wrap_without_init);
    tcase_add_test(tc, test_zero1_keeps_large_gradients_outside_the_partition);
    tcase_add_test(tc, test_zero2_bucket_at_the_first_gradient);
    tcase_add_test(tc, test_zero12_accumulation_leftovers);
    tcase_add_test(tc, test_zero12_flattens_on_the_device);
    tcase_add_test(tc, test_zero12_clones_in_the_loop_before_0_19_8);
    tcase_add_test(tc, test_fake_group_holds_no_pending_frees);
    tcase_add_test(tc, test_epilogue_synchronizes_the_reduce_stream);
    tcase_add_test(tc, test_zero3_side_streams);
    tcase_add_test(tc, test_hook_gather_is_a_view_in_0_19_8);
    tcase_add_test(tc, test_zero2_communication_data_type);
    tcase_add_test(tc, test_zero3_communication_data_type);
    tcase_add_test(tc, test_zero3_loose_gradients);
    suite_add_tcase(s, tc);
    return s;
}
