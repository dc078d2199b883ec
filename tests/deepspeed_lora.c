/* LoRA under DeepSpeed ZeRO-1/2 and ZeRO-3 (estimator/frameworks/seam_deepspeed*.c)
 * against hand derivations from DeepSpeed 0.16.4's source:
 *  - engine.py _configure_distributed_model: module.bfloat16() casts every
 *    floating-point tensor, the adapters too (c = 2 bytes);
 *  - stage_1_and_2.py DeepSpeedZeroOptimizer.__init__: only the parameters
 *    that require grad join bit16_groups; their flat buffer holds all of
 *    them on every rank, padded to a multiple of 2 x W elements; each rank
 *    keeps an fp32 partition of n = P_a / W elements and AdamW's m and v;
 *  - the frozen base is no optimizer parameter: it stays whole on every rank.
 * Llama-3-8B (models/llama3-8b.json, 8,030,261,248 parameters as published):
 * h 4096, 8 KV heads of 128, 32 layers. LoRA r 16 on q and v:
 *   q 16 x (4096 + 4096) = 131,072; v 16 x (4096 + 1024) = 81,920
 *   per layer 212,992; P_a = 32 x 212,992 = 6,815,744 = 16 x 425,984 (no
 *   padding on 8 ranks); n = 851,968. */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "block.h"
#include "estimate.h"
#include "lora.h"
#include "test_util.h"

#define L3_BASE INT64_C(8030261248)
#define L3_ADAPTERS INT64_C(6815744)
#define L3_N (L3_ADAPTERS / 8)

static est_run llama_lora(int zero) {
    est_run run = test_run_of("llama3-8b", "h100");
    run.framework = EST_FW_DEEPSPEED;
    run.gpus_per_node = 8;
    run.zero_stage = zero;
    run.seq_len = 2048;
    run.lora.rank = 16;
    run.lora.alpha = 32;
    run.lora.targets = EST_LORA_BIT(EST_LORA_Q) | EST_LORA_BIT(EST_LORA_V);
    return run;
}

/* At the loss of the measured step, ZeRO-2 without offload: the bf16 base
 * and the bf16 flat adapters, 2 x (8,030,261,248 + 6,815,744) =
 * 16,074,153,984 bytes; the fp32 master partition 4n = 3,407,872; AdamW's
 * state 8n = 6,815,744 (made at the warm-up step's first step). A full
 * fine-tune would hold 4 x P / 8 of master alone (4,015,130,624). */
START_TEST(test_zero2_lora_states) {
    est_run run = llama_lora(2);
    ck_assert_int_eq(est_lora_params(&run), L3_ADAPTERS);
    est_estimate e;
    test_estimate(&run, &e);
    ck_assert_int_eq(test_row(&e, "loss")->bytes[EST_CAT_PARAMS], 2 * (L3_BASE + L3_ADAPTERS));
    ck_assert_int_eq(test_row(&e, "loss")->bytes[EST_CAT_MASTER], 4 * L3_N);
    ck_assert_int_eq(test_row(&e, "loss")->bytes[EST_CAT_OPTIMIZER], 8 * L3_N);
    est_estimate_free(&e);
}
END_TEST

/* With the optimizer offloaded the master, AdamW's state and the fp32
 * gradient partition live on the host (pinned): 4n x (2 + 2) =
 * 13,631,488 bytes, and the pinned gradient buffer of the largest adapter
 * (q's B, 4096 x 16 = 65,536 elements, 2 bytes each: 131,072); the device
 * keeps no master or state. */
START_TEST(test_zero2_lora_offload) {
    est_run run = llama_lora(2);
    run.offload = EST_OFFLOAD_OPTIMIZER;
    est_estimate e;
    test_estimate(&run, &e);
    ck_assert_int_eq(e.cpu_bytes, 4 * L3_N * 4 + 65536 * 2);
    ck_assert_int_eq(test_row(&e, "loss")->bytes[EST_CAT_MASTER], 0);
    ck_assert_int_eq(test_row(&e, "loss")->bytes[EST_CAT_OPTIMIZER], 0);
    est_estimate_free(&e);
}
END_TEST

/* ZeRO-3 (DeepSpeed 0.14.2 to 0.19.8; the same lines in each):
 *  - every parameter is partitioned, the frozen base as much as the
 *    adapters (zero.Init, or DeepSpeedZeRoOffload's conversion): ceil(numel / 8)
 *    each; every count here divides by 8, so the partitions hold
 *    2 x (8,030,261,248 + 6,815,744) / 8 = 2,009,269,248 bytes;
 *  - the optimizer's groups hold the parameters that require grad
 *    (stage3.py _get_trainable_parameter_groups; the HF Trainer's optimizer
 *    has no others): the flat bf16 partition, the fp32 master (4n), AdamW's
 *    state (8n) and the gradient partition (2n) are the adapters' alone,
 *    n = 851,968; the base has no gradient;
 *  - stage3_param_persistence_threshold (runtime/zero/config.py default
 *    1e5 elements; parameter_offload.py mark_persistent_parameters) keeps
 *    every parameter of at most that many elements whole on every rank,
 *    frozen or not: the 65 norms (4096 each) and here every adapter (q's A
 *    and B 65,536, v's A 65,536 and B 16,384): 2 x (266,240 + 6,815,744) =
 *    14,163,968 bytes beside the partitions.
 * The step releases every parameter it holds whole, persistent ones too
 * (_partition_all_parameters: release_and_reset_all), so through the norm
 * the parameters are the partitions alone; _post_step gathers the
 * persistent ones again, the highest point of the flatten moment's own
 * parameters. Its gradients: the partition and the step's bf16 flat copy
 * (2n) with its fp32 cast (4n). */
#define L3_PART (2 * (L3_BASE + L3_ADAPTERS) / 8)
#define L3_NORMS INT64_C(266240)

START_TEST(test_zero3_lora_states) {
    est_run run = llama_lora(3);
    est_estimate e;
    test_estimate(&run, &e);
    ck_assert_int_eq(test_row(&e, "model partitioned (zero.Init)")->bytes[EST_CAT_PARAMS], L3_PART);
    ck_assert_int_eq(test_row(&e, "optimizer: gradient norm (fp64)")->bytes[EST_CAT_PARAMS], L3_PART);
    const est_phase *f = test_row(&e, "optimizer: flatten + fp32 gradients");
    ck_assert_int_eq(f->own_max[EST_CAT_PARAMS], L3_PART + 2 * (L3_NORMS + L3_ADAPTERS));
    ck_assert_int_eq(f->bytes[EST_CAT_MASTER], 4 * L3_N);
    ck_assert_int_eq(f->bytes[EST_CAT_OPTIMIZER], 8 * L3_N);
    ck_assert_int_eq(f->own_max[EST_CAT_GRADS], (2 + 2 + 4) * L3_N);
    ck_assert_int_eq(test_row(&e, "loss")->bytes[EST_CAT_GRADS], 2 * L3_N);
    est_estimate_free(&e);
}
END_TEST

/* With stage3_param_persistence_threshold 20,000 only the norms and v's B
 * (1024 x 16 = 16,384 elements, 32 of them) stay whole; q's A and B and v's
 * A (65,536 each) are partitioned and gathered like the base:
 * 2 x (266,240 + 32 x 16,384) = 1,581,056 bytes beside the partitions. */
START_TEST(test_zero3_lora_persistence) {
    est_run run = llama_lora(3);
    run.ds.persistence_elems = 20000;
    est_estimate e;
    test_estimate(&run, &e);
    ck_assert_int_eq(test_row(&e, "optimizer: flatten + fp32 gradients")->own_max[EST_CAT_PARAMS],
                     L3_PART + 2 * (L3_NORMS + 32 * 16384));
    est_estimate_free(&e);
}
END_TEST

/* ZeRO-3's collectives per module (work_parallel.c est_work_zero3_lanes):
 * forward and backward gather every block's non-persistent parameters, the
 * seven projection weights G_b = 2 x 4096^2 + 2 x 4096 x 1024 + 3 x 4096 x
 * 14336 = 218,103,808 (the norms and, at the default threshold, every
 * adapter stay whole); the embedding is gathered for forward and backward
 * and the untied head for forward, 128256 x 4096 = 525,336,576 each; only
 * the adapters' gradients are reduce-scattered, A_b = 212,992 per block, none
 * of the embedding's or the head's. Over the step:
 *   32 x (2 G_b + A_b) + 3 x 525,336,576 = 15,541,469,184 elements. */
START_TEST(test_zero3_lora_collectives) {
    est_run run = llama_lora(3);
    est_estimate e;
    test_estimate(&run, &e);
    double elems = 0; /* every unit of the step */
    for (size_t u = 0; u < e.step.unit_count; u++) {
        const est_unit_ref *r = &e.step.units[u];
        for (size_t i = r->body; i < r->body + r->body_len; i++)
            if (e.step.work[i].kind == EST_EV_LANE_COMM) elems += e.step.work[i].u.lane.elems;
    }
    ck_assert_double_eq(elems, 15541469184.0);
    est_estimate_free(&e);
}
END_TEST

/* ZeRO-3's F.linear (DeepSpeed runtime/zero/linear.py, LinearFunctionForZeroStage3:
 * setup_context saves input, weight and bias whenever autograd records the
 * node) keeps a frozen Linear's input, where torch's linear keeps it only for
 * a weight that trains. Llama-3-8B, LoRA r 16 on q and v, T = 2048 tokens,
 * bf16 (DeepSpeed casts the module), SDPA: per block
 *  - k reads the attention norm's output, which q's A keeps already: 0;
 *  - o reads SDPA's output, which SDPA keeps for its own backward (the CUDA
 *    kernels write it as (b, s, heads, d), so transformers' transpose(1, 2)
 *    .contiguous() copies nothing): 0;
 *  - gate and up read the MLP norm's output, T x 4096 (once: one tensor);
 *  - down reads act(gate) * up, T x 14336;
 * 2048 x (4096 + 14336) x 2 = 75,497,472 bytes more per block. */
START_TEST(test_zero3_linear_keeps_frozen_inputs) {
    est_run run = llama_lora(3);
    run.attention = EST_ATTN_SDPA;
    est_regime reg = {.act = 2, .resid = 2, .autocast = false, .weight = 2, .train_base = false, .adapter = 2};
    est_module torch_linear, zero3_linear;
    char err[200];
    ck_assert_int_eq(est_module_block(&run, &reg, false, &torch_linear, err, sizeof err), 0);
    reg.linear_saves_input = true;
    ck_assert_int_eq(est_module_block(&run, &reg, false, &zero3_linear, err, sizeof err), 0);
    ck_assert_int_eq(est_module_saved_bytes(&zero3_linear) - est_module_saved_bytes(&torch_linear),
                     INT64_C(2048) * (4096 + 14336) * 2);
    /* all-linear: every base Linear's input is its A's input already */
    run.lora.targets = EST_LORA_ALL_LINEAR;
    reg.linear_saves_input = false;
    ck_assert_int_eq(est_module_block(&run, &reg, false, &torch_linear, err, sizeof err), 0);
    reg.linear_saves_input = true;
    ck_assert_int_eq(est_module_block(&run, &reg, false, &zero3_linear, err, sizeof err), 0);
    ck_assert_int_eq(est_module_saved_bytes(&zero3_linear), est_module_saved_bytes(&torch_linear));
}
END_TEST

/* ZeRO-0 and 8-bit QLoRA or a parameter offload under ZeRO-3 are refused;
 * NF4 QLoRA under ZeRO-3 (PEFT's recipe) is modelled. */
START_TEST(test_zero3_qlora_refused) {
    char err[256];
    est_run run = llama_lora(3);
    ck_assert_int_eq(est_lora_validate(&run, err, sizeof err), 0);
    run.quant = EST_QUANT_NF4;
    ck_assert_int_eq(est_lora_validate(&run, err, sizeof err), 0);
    run.quant = EST_QUANT_INT8;
    ck_assert_int_eq(est_lora_validate(&run, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "ZeRO-3"));
    run = llama_lora(0);
    ck_assert_int_eq(est_lora_validate(&run, err, sizeof err), -1);
    run = llama_lora(1);
    ck_assert_int_eq(est_lora_validate(&run, err, sizeof err), 0);
}
END_TEST

/* QLoRA under ZeRO-3 on 8 ranks (PEFT docs/source/accelerate/deepspeed.md,
 * bnb_4bit_quant_storage = bf16; bitsandbytes 0.50.2 quantize_4bit packs two
 * codes per byte into a bf16 tensor of n/4 elements, which DeepSpeed
 * partitions like any parameter; the QuantState is an attribute, whole on
 * every rank). Llama-3-8B, r 16 on q and v, NF4 with double quantization.
 * Per block the seven weights hold n_b = 218,103,808 elements:
 *   packed codes n_b / 2 bytes = n_b / 4 bf16 elements = 54,525,952;
 *   partition per rank n_b / 4 / 8 x 2 bytes = 13,631,488; x 32 = 436,207,616.
 * Constants per weight of n: n/64 uint8 absmax, one fp32 per 256 of those
 * and one fp32 offset:
 *   q, o (16,777,216): 262,144 + 4,096 + 4 = 266,244;
 *   k, v (4,194,304): 65,536 + 1,024 + 4 = 66,564;
 *   gate, up, down (58,720,256): 917,504 + 14,336 + 4 = 931,844;
 *   per block 3,461,148; x 32 = 110,756,736 whole on every rank.
 * The rest is partitioned in bf16: embedding and head 2 x 525,336,576, the
 * norms 266,240 and the adapters 6,815,744: 1,057,755,136 x 2 / 8 =
 * 264,438,784. At the gradient norm (persistent parameters released) the
 * parameters hold 436,207,616 + 110,756,736 + 264,438,784 = 811,403,136
 * bytes; the adapters' master, Adam state and gradient partition are those
 * of test_zero3_lora_states (n = 851,968). Before partitioning each rank held
 * the quantized model whole: 4 x 436,207,616 + 110,756,736 + 2 x
 * 1,057,755,136 = 3,970,097,536 bytes. */
#define Q3_CODES_PART INT64_C(436207616)
#define Q3_CONSTANTS INT64_C(110756736)
#define Q3_REST_PART INT64_C(264438784)

START_TEST(test_zero3_qlora_states) {
    est_run run = llama_lora(3);
    run.quant = EST_QUANT_NF4;
    est_estimate e;
    test_estimate(&run, &e);
    ck_assert_int_eq(test_row(&e, "optimizer: gradient norm (fp64)")->bytes[EST_CAT_PARAMS],
                     Q3_CODES_PART + Q3_CONSTANTS + Q3_REST_PART);
    ck_assert_int_eq(test_row(&e, "model moved to the device whole")->own_max[EST_CAT_PARAMS] >=
                         4 * Q3_CODES_PART + Q3_CONSTANTS + INT64_C(2115510272),
                     1);
    const est_phase *f = test_row(&e, "optimizer: flatten + fp32 gradients");
    ck_assert_int_eq(f->bytes[EST_CAT_MASTER], 4 * L3_N);
    ck_assert_int_eq(f->bytes[EST_CAT_OPTIMIZER], 8 * L3_N);
    est_estimate_free(&e);
}
END_TEST

/* The gathered unit: forward and backward gather each block's packed codes,
 * n_b / 4 = 54,525,952 bf16 elements (0.5 byte per weight), a quarter of
 * test_zero3_lora_collectives' G_b; the adapters' gradients A_b = 212,992
 * reduced; the embedding twice and the head once, 525,336,576 each:
 *   32 x (2 x 54,525,952 + 212,992) + 3 x 525,336,576 = 5,072,486,400. */
START_TEST(test_zero3_qlora_collectives) {
    est_run run = llama_lora(3);
    run.quant = EST_QUANT_NF4;
    est_estimate e;
    test_estimate(&run, &e);
    double elems = 0;
    for (size_t u = 0; u < e.step.unit_count; u++) {
        const est_unit_ref *r = &e.step.units[u];
        for (size_t i = r->body; i < r->body + r->body_len; i++)
            if (e.step.work[i].kind == EST_EV_LANE_COMM) elems += e.step.work[i].u.lane.elems;
    }
    ck_assert_double_eq(elems, 5072486400.0);
    est_estimate_free(&e);
}
END_TEST

/* Without a stage asked for, LoRA under DeepSpeed starts at ZeRO-1, the
 * first stage fw_registry.c models it at, so that the estimate and plan search
 * from there (it was refused at DeepSpeed's default ZeRO-0); a stage asked for
 * is kept, and ZeRO-0 is still refused. */
START_TEST(test_cli_first_lora_stage) {
    char err[256];
    est_run run;
    char *const plain[] = {"ftest", "--model", "llama3-8b", "--framework", "deepspeed", "--lora-rank", "16"};
    ck_assert_msg(test_cli_try(7, plain, &run, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(run.zero_stage, 1);
    char *const z3[] = {"ftest", "--model", "llama3-8b", "--framework", "deepspeed", "--lora-rank", "16", "--zero", "3"};
    ck_assert_msg(test_cli_try(9, z3, &run, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(run.zero_stage, 3);
    char *const z0[] = {"ftest", "--model", "llama3-8b", "--framework", "deepspeed", "--lora-rank", "16", "--zero", "0"};
    ck_assert_int_eq(test_cli_try(9, z0, &run, err, sizeof err), -1);
}
END_TEST

Suite *suite_deepspeed_lora(void);
Suite *suite_deepspeed_lora(void) {
    Suite *s = suite_create("deepspeed_lora");
    TCase *tc = tcase_create("terms");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_zero2_lora_states);
    tcase_add_test(tc, test_zero2_lora_offload);
    tcase_add_test(tc, test_zero3_lora_states);
    tcase_add_test(tc, test_zero3_lora_persistence);
    tcase_add_test(tc, test_zero3_lora_collectives);
    tcase_add_test(tc, test_zero3_linear_keeps_frozen_inputs);
    tcase_add_test(tc, test_zero3_qlora_refused);
    tcase_add_test(tc, test_zero3_qlora_states);
    tcase_add_test(tc, test_zero3_qlora_collectives);
    tcase_add_test(tc, test_cli_first_lora_stage);
    suite_add_tcase(s, tc);
    return s;
}
