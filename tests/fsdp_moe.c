/* Mixture of experts under FSDP (estimator/frameworks/seam_fsdp.c,
 * fsdp_policy.c) against hand derivations from Mixtral-8x7B's shapes
 * (models/mixtral-8x7b.json; transformers 4.40-4.49 modeling_mixtral.py):
 * h 4096, 32 query heads and 8 KV heads of 128, 8 experts of I 14336, top-2,
 * 32 layers, vocabulary 32000, untied head.
 *   attention: q, o 4096 x 4096 = 2 x 16,777,216; k, v 1024 x 4096 =
 *              2 x 4,194,304                                  -> 41,943,040
 *   two norms: 2 x 4096                                       ->      8,192
 *   sparse MoE block: router (gate) 8 x 4096 = 32,768; experts 8 x 3 x
 *              14336 x 4096 = 1,409,286,144                   -> U_m = 1,409,318,912
 *   block = 1,451,270,144; embedding and head 2 x 32000 x 4096 =
 *   262,144,000, final norm 4096: P = 32 x 1,451,270,144 + 262,148,096 =
 *   46,702,792,704 (the published total).
 * Wrapping the decoder layers (the default), the root unit holds the ends:
 *   U_r = 262,148,096. Wrapping MixtralSparseMoeBlock, a block's unit is its
 *   MoE block (U_m) and the root also takes every layer's attention and norms:
 *   U_r' = 262,148,096 + 32 x 41,951,232 = 1,604,587,520.
 * All divide by 8 ranks, so FSDP1 pads nothing. Defaults: FSDP1, FULL_SHARD,
 * bf16-mixed (c = 2), seq 2048, micro-batch 1. */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "estimate.h"
#include "fsdp_policy.h"
#include "lora.h"
#include "test_util.h"

#define MIX_P INT64_C(46702792704)
#define MIX_UR INT64_C(262148096)
#define MIX_UR_MOE INT64_C(1604587520)
#define MIX_UM INT64_C(1409318912)

static est_run mixtral(est_fsdp_wrap wrap) {
    est_run run = test_run_of("mixtral-8x7b", "h100");
    run.framework = EST_FW_FSDP;
    run.gpus_per_node = 8;
    run.zero_stage = 3;
    run.seq_len = 2048;
    run.fsdp_wrap = wrap;
    return run;
}

/* FSDP1 never reshards the root after forward (_runtime_utils.py
 * _post_forward_reshard: `not state._is_root`), so at the loss, after every
 * block unit was freed, the gathered bf16 root is all that is unsharded:
 * 2 x U_r with the decoder layers wrapped, 2 x U_r' = 3,209,175,040 bytes with
 * the MoE blocks wrapped. The sharded fp32 parameters are the same either way:
 * 4 x P / 8 = 23,351,396,352 bytes. */
START_TEST(test_moe_block_units_root_keeps_attention) {
    est_run dec = mixtral(EST_FSDP_WRAP_DECODER_LAYER), moe = mixtral(EST_FSDP_WRAP_MOE_BLOCK);
    est_estimate a, b;
    test_estimate(&dec, &a);
    test_estimate(&moe, &b);
    ck_assert_int_eq(test_row(&a, "loss")->bytes[EST_CAT_COMM], 2 * MIX_UR);
    ck_assert_int_eq(test_row(&b, "loss")->bytes[EST_CAT_COMM], 2 * MIX_UR_MOE);
    ck_assert_int_eq(test_row(&a, "loss")->bytes[EST_CAT_MASTER], 4 * MIX_P / 8);
    ck_assert_int_eq(test_row(&b, "loss")->bytes[EST_CAT_MASTER], 4 * MIX_P / 8);
    /* In the last block's backward the root and that block's unit are
     * gathered: the MoE block alone (U_m) rather than the whole layer. */
    ck_assert_int_eq(test_row(&b, "backward layer 31")->bytes[EST_CAT_COMM], 2 * (MIX_UR_MOE + MIX_UM));
    est_estimate_free(&a);
    est_estimate_free(&b);
}
END_TEST

/* LoRA r 32 on all-linear (axolotl lora_target_linear): PEFT wraps every
 * nn.Linear but the head, in transformers 4.x each expert's w1, w3 (4096 ->
 * 14336) and w2 (14336 -> 4096) and the router (4096 -> 8). Per layer, A
 * (r x d_in) plus B (d_out x r):
 *   q, o 32 x (4096 + 4096) = 2 x 262,144; k, v 32 x (4096 + 1024) = 2 x 163,840
 *   experts 8 x 3 x 32 x (4096 + 14336) = 14,155,776; router 32 x (4096 + 8)
 *   = 131,328                                              -> 15,139,072
 * x 32 layers = 484,450,304 adapter elements. Each adapter is an FSDP unit of
 * its own (PEFT fsdp_auto_wrap_policy); every one (256 for the router's B
 * the smallest) divides by 8, so on 8 ranks AdamW's fp32 m and v take
 * 8 x 484,450,304 / 8 = 484,450,304 bytes, made at the warm-up step. */
START_TEST(test_lora_on_experts) {
    est_run run = mixtral(EST_FSDP_WRAP_DECODER_LAYER);
    run.lora.rank = 32;
    run.lora.alpha = 16;
    run.lora.targets = EST_LORA_ALL_LINEAR;
    ck_assert_int_eq(est_lora_params(&run), INT64_C(484450304));
    est_estimate e;
    test_estimate(&run, &e);
    ck_assert_int_eq(test_row(&e, "loss")->bytes[EST_CAT_OPTIMIZER], INT64_C(484450304));
    est_estimate_free(&e);
}
END_TEST

/* transformers 5.x fuses the experts into 3D parameters: refused there,
 * under every framework; Phi-3's fused projections stay refused under FSDP. */
START_TEST(test_refusals) {
    char err[256];
    est_run run = mixtral(EST_FSDP_WRAP_DECODER_LAYER);
    run.lora.rank = 16;
    ck_assert_int_eq(est_lora_validate(&run, err, sizeof err), 0);
    run.stack = est_stack_find("2026-11");
    ck_assert_int_eq(est_lora_validate(&run, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "fused 3D parameters"));
    run.framework = EST_FW_HF;
    ck_assert_int_eq(est_lora_validate(&run, err, sizeof err), -1);
    est_run phi = test_run_of("phi3-mini", "h100");
    phi.framework = EST_FW_FSDP;
    phi.zero_stage = 3;
    phi.lora.rank = 16;
    ck_assert_int_eq(est_lora_validate(&phi, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "fused projections"));
}
END_TEST

/* transformer_layer_cls_to_wrap as PEFT's policy looks it up. */
START_TEST(test_wrap_classes) {
    char err[256];
    est_fsdp_wrap w = EST_FSDP_WRAP_MOE_BLOCK;
    const est_run mix = test_run_of("mixtral-8x7b", "h100"), ll = test_run_of("llama3-8b", "h100");
    ft_model m = mix.model, llama = ll.model;
    ck_assert_int_eq(est_fsdp_wrap_parse(&m, "MixtralDecoderLayer", &w, err, sizeof err), 0);
    ck_assert_int_eq(w, EST_FSDP_WRAP_DECODER_LAYER);
    ck_assert_int_eq(est_fsdp_wrap_parse(&m, "MixtralSparseMoeBlock", &w, err, sizeof err), 0);
    ck_assert_int_eq(w, EST_FSDP_WRAP_MOE_BLOCK);
    /* axolotl's examples/mistral/mistral-qlora-fsdp.yml: Mistral's class on Mixtral */
    ck_assert_int_eq(est_fsdp_wrap_parse(&m, "MistralDecoderLayer", &w, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "Could not find the transformer layer class"));
    ck_assert_int_eq(est_fsdp_wrap_parse(&llama, "MixtralSparseMoeBlock", &w, err, sizeof err), -1);
    ck_assert_int_eq(est_fsdp_wrap_parse(&m, "MixtralAttention", &w, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "not modelled"));
    ck_assert_int_eq(est_fsdp_wrap_parse(&m, "MixtralDecoderLayer,MixtralSparseMoeBlock", &w, err, sizeof err), -1);
}
END_TEST

Suite *suite_fsdp_moe(void);
Suite *suite_fsdp_moe(void) {
    Suite *s = suite_create("fsdp_moe");
    TCase *tc = tcase_create("terms");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_moe_block_units_root_keeps_attention);
    tcase_add_test(tc, test_lora_on_experts);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_wrap_classes);
    suite_add_tcase(s, tc);
    return s;
}
