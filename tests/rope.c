/* RoPE's cos and sin as autograd keeps them, per stack (stack.h
 * rope_once_per_forward), against hand derivations from the modeling code:
 *
 *  - transformers 4.40.0 (stack 2024-04): every LlamaAttention calls
 *    self.rotary_emb(value_states, position_ids) and rotates q and k with the
 *    pair it gets: each layer makes (1, s, d) cos and sin in value_states'
 *    dtype, and its two muls save them until that layer's backward;
 *  - transformers 4.44-4.49 and 5.x (2025-02 and later): LlamaModel.forward
 *    calls self.rotary_emb(hidden_states, position_ids) once, fp32 cast to
 *    the hidden states' dtype, and passes the pair to every layer: all the
 *    layers' muls save the same two storages, alive from the model's
 *    forward to block 0's backward.
 *
 * Llama-3.2-1B: 16 layers, head_dim 64. At s = 1024 one pair is
 * 2 x 1024 x 64 elements: 262,144 bytes in bf16, 524,288 in fp32. */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "block.h"
#include "estimate.h"
#include "seam_regime.h"
#include "test_util.h"

#define PAIR_BF16 (INT64_C(2) * 1024 * 64 * 2)

static est_run rope_run(est_stack *stack, bool shared) {
    est_run run = test_run_of("llama3.2-1b", "h100");
    run.framework = EST_FW_HF;
    run.gpus_per_node = 1;
    run.seq_len = 1024;
    run.micro_batch = 1;
    run.precision = EST_PREC_BF16; /* pure bf16: every tensor in bf16 */
    *stack = *est_stack_find("2025-02");
    stack->rope_once_per_forward = shared;
    run.stack = stack;
    return run;
}

static int64_t activations_at(const est_run *run, const char *label) {
    est_estimate e;
    test_estimate(run, &e);
    const int64_t bytes = test_row(&e, label)->bytes[EST_CAT_ACTIVATIONS];
    est_estimate_free(&e);
    return bytes;
}

/* At the end of the forward (layer 15) the per-layer build holds 16 pairs
 * (one saved by each block), the shared one 1: 15 x 262,144 = 3,932,160
 * bytes apart, everything else equal. */
START_TEST(test_saved_once_per_step) {
    est_stack a, b;
    est_run per_layer = rope_run(&a, false), shared = rope_run(&b, true);
    const int64_t own = activations_at(&per_layer, "forward layer 15");
    const int64_t one = activations_at(&shared, "forward layer 15");
    ck_assert_int_eq(own - one, 15 * PAIR_BF16);
    ck_assert_int_eq(15 * PAIR_BF16, INT64_C(3932160));
}
END_TEST

/* Full checkpointing: a block's first forward runs under no_grad, so the
 * per-layer pairs go with it and none is left at the end of the forward,
 * while the model's pair lives on (the checkpoints keep their arguments):
 * one pair more. In backward each recompute makes its own pair per layer and
 * re-reads the model's shared pair: at block 0's backward one pair each. */
START_TEST(test_checkpointed_recompute_rereads) {
    est_stack a, b;
    est_run per_layer = rope_run(&a, false), shared = rope_run(&b, true);
    per_layer.checkpointing = shared.checkpointing = EST_CKPT_FULL;
    ck_assert_int_eq(activations_at(&shared, "forward layer 15") - activations_at(&per_layer, "forward layer 15"),
                     PAIR_BF16);
    ck_assert_int_eq(activations_at(&shared, "backward layer 0") - activations_at(&per_layer, "backward layer 0"), 0);
}
END_TEST

static const est_mtensor *named(const est_module *m, const char *name) {
    for (int t = 0; t < m->n_tensors; t++)
        if (!strcmp(m->tensors[t].name, name)) return &m->tensors[t];
    return NULL;
}

/* The HF Trainer's bf16 autocast over fp32 weights: the model's cos/sin
 * follow the fp32 hidden states (1024 x 64 x 4 bytes each, made by the
 * embedding module, inputs of the block, saved there), and q * cos promotes
 * the bf16 q to fp32 (T x 2048 x 4). On 4.40 the block makes its own pair in
 * value_states' bf16. */
START_TEST(test_dtypes_under_autocast) {
    est_stack st;
    est_run run = rope_run(&st, true);
    run.precision = EST_PREC_BF16_MIXED;
    est_regime g, ends;
    est_hf_regime(&run, &g, &ends);
    static est_module emb, blk;
    char err[200];
    ck_assert_int_eq(est_module_embedding(&run, &ends, &emb, err, sizeof err), 0);
    ck_assert_int_eq(est_module_block(&run, &g, false, &blk, err, sizeof err), 0);
    const int c = emb.shared[EST_SHARED_COS], s = blk.shared[EST_SHARED_SIN];
    ck_assert_int_ge(c, 0);
    ck_assert_int_eq(est_mtensor_bytes(&emb.tensors[c]), 1024 * 64 * 4);
    ck_assert_int_eq(blk.tensors[s].producer, EST_NONE);
    ck_assert_int_ge(blk.tensors[s].saved_until, 0);
    ck_assert_int_eq(est_mtensor_bytes(named(&blk, "rotary embedded")), 1024 * 2048 * 4);
    st.rope_once_per_forward = false;
    ck_assert_int_eq(est_module_embedding(&run, &ends, &emb, err, sizeof err), 0);
    ck_assert_int_eq(est_module_block(&run, &g, false, &blk, err, sizeof err), 0);
    ck_assert_int_eq(emb.shared[EST_SHARED_COS], EST_NONE);
    ck_assert_int_eq(blk.shared[EST_SHARED_COS], EST_NONE);
    const est_mtensor *cos = named(&blk, "rope cos");
    ck_assert_ptr_nonnull(cos);
    ck_assert_int_ge(cos->producer, 0);
    ck_assert_int_eq(est_mtensor_bytes(cos), 1024 * 64 * 2);
    ck_assert_int_eq(est_mtensor_bytes(named(&blk, "rotary embedded")), 1024 * 2048 * 2);
}
END_TEST

/* 5.x's KV cache under the same autocast: DynamicLayer.lazy_initialization
 * makes the empty keys and values in key_states' dtype (fp32, rotated by the
 * fp32 cos/sin) and torch.cat promotes the bf16 values to it: both cached
 * copies T x 8 heads x 64 x 4 bytes. */
START_TEST(test_kv_cache_values_promoted) {
    est_stack st;
    est_run run = rope_run(&st, true);
    st = *est_stack_find("2026-11");
    run.precision = EST_PREC_BF16_MIXED;
    run.attention = EST_ATTN_SDPA;
    est_regime g, ends;
    est_hf_regime(&run, &g, &ends);
    static est_module blk;
    char err[200];
    ck_assert_int_eq(est_module_block(&run, &g, false, &blk, err, sizeof err), 0);
    ck_assert_int_eq(est_mtensor_bytes(named(&blk, "KV cache keys (cat)")), 1024 * 512 * 4);
    ck_assert_int_eq(est_mtensor_bytes(named(&blk, "KV cache values (cat)")), 1024 * 512 * 4);
    ck_assert_int_eq(est_mtensor_bytes(named(&blk, "v_proj")), 1024 * 512 * 2);
}
END_TEST

/* The stacks as read: 4.40 per layer, 4.49 and 5.x once per forward. */
START_TEST(test_stack_switch) {
    ck_assert(!est_stack_find("2024-04")->rope_once_per_forward);
    const char *shared[] = {"2025-02", "2026-07", "2026-11", "2026-11-gpu"};
    for (size_t i = 0; i < sizeof shared / sizeof shared[0]; i++)
        ck_assert_msg(est_stack_find(shared[i])->rope_once_per_forward, "%s", shared[i]);
}
END_TEST

Suite *suite_rope(void);
Suite *suite_rope(void) {
    Suite *s = suite_create("rope");
    TCase *tc = tcase_create("cos_sin");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_saved_once_per_step);
    tcase_add_test(tc, test_checkpointed_recompute_rereads);
    tcase_add_test(tc, test_dtypes_under_autocast);
    tcase_add_test(tc, test_kv_cache_values_promoted);
    tcase_add_test(tc, test_stack_switch);
    suite_add_tcase(s, tc);
    return s;
}
