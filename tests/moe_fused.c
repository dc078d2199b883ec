/* transformers 5.x's fused experts in the block description
 * (estimator/model/block_moe.c, stack.h moe_experts_fused), against hand
 * derivations from Mixtral-8x7B's config (models/mixtral-8x7b.json: h 4096,
 * 32 query and 8 KV heads of 128, 8 experts of I 14336, top-2, 32 layers,
 * vocabulary 32000, untied head) and transformers 5.23.0's
 * modeling_mixtral.py (MixtralExperts: gate_up_proj nn.Parameter(E, 2 I, h),
 * down_proj (E, h, I); MixtralTopKRouter.weight (E, h)) and
 * integrations/moe.py grouped_mm_experts_forward. Stack 2026-11 pins
 * transformers 5.23.0; stack 2025-02 is 4.x (one nn.Linear per expert). */
#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "block.h"
#include "stack.h"
#include "trainable.h"
#include "test_util.h"

#define H INT64_C(4096)
#define I INT64_C(14336)
#define E INT64_C(8)

static est_run mixtral(const char *stack) {
    est_run run = test_run_of("mixtral-8x7b", "h100");
    run.stack = est_stack_find(stack);
    ck_assert_ptr_nonnull(run.stack);
    run.micro_batch = 1;
    run.seq_len = 64;
    return run;
}

static est_module build(const est_run *run, const est_regime *g) {
    est_module m;
    char err[256];
    ck_assert_msg(est_module_block(run, g, false, &m, err, sizeof err) == 0, "%s", err);
    return m;
}

static int param_named(const est_module *m, const char *name) {
    for (int p = 0; p < m->n_params; p++)
        if (!strcmp(m->params[p].name, name)) return p;
    return -1;
}

static const est_mtensor *tensor_named(const est_module *m, const char *name) {
    for (int t = 0; t < m->n_tensors; t++)
        if (!strcmp(m->tensors[t].name, name)) return &m->tensors[t];
    return NULL;
}

/* Bytes saved for backward by the MoE MLP's tensors (those made after the
 * MLP's norm; the norm's output, the router's and gather's input, is the
 * norm's). The attention differs between the stacks (5.x's KV cache copies,
 * SDPA's grouped keys): left out. */
static int64_t moe_saved_bytes(const est_module *m) {
    int64_t sum = 0;
    bool after = false;
    for (int t = 0; t < m->n_tensors; t++) {
        if (after && m->tensors[t].saved_until != EST_NONE) sum += est_mtensor_bytes(&m->tensors[t]);
        after |= !strcmp(m->tensors[t].name, "mlp norm");
    }
    return sum;
}

/* fp32 throughout (DeepSpeed ZeRO-1/2 at fp32, the cpu-trace records). */
static const est_regime FP32 = {.act = 4, .resid = 4, .autocast = false, .weight = 4, .train_base = true,
                                .adapter = 4};

/* Parameters in named_parameters() order inside model.layers.i: self_attn's
 * q, k, v, o, then mlp.gate.weight (8 x 4096 = 32,768), then
 * mlp.experts.gate_up_proj, ONE tensor of 8 x 2 x 14336 x 4096 =
 * 939,524,096 elements (3,758,096,384 bytes in fp32), then
 * mlp.experts.down_proj, one tensor of 8 x 4096 x 14336 = 469,762,048, then
 * the two norms. The block's total is 4.x's: attention 41,943,040, norms
 * 8,192, router 32,768, experts 1,409,286,144 -> 1,451,270,144, and
 * 32 blocks with the embedding, head and final norm (262,148,096) make the
 * published 46,702,792,704. */
START_TEST(test_fused_parameters) {
    const est_run run = mixtral("2026-11");
    est_module m = build(&run, &FP32);
    const int router = param_named(&m, "router"), gu = param_named(&m, "experts.gate_up_proj"),
              down = param_named(&m, "experts.down_proj");
    ck_assert_int_eq(router, 4);
    ck_assert_int_eq(gu, 5);
    ck_assert_int_eq(down, 6);
    ck_assert_int_eq(param_named(&m, "gate_proj.weight"), -1); /* no per-expert Linear */
    const est_mparam *g = &m.params[gu], *d = &m.params[down];
    ck_assert_int_eq(g->copies, 1);
    ck_assert_int_eq(g->rows * g->cols, E * 2 * I * H);
    ck_assert_int_eq(g->rows * g->cols * g->elem_bytes, INT64_C(3758096384));
    ck_assert_int_eq(d->copies, 1);
    ck_assert_int_eq(d->rows * d->cols, INT64_C(469762048));
    const int64_t block = 2 * H * H + 2 * H * 1024 + 2 * H + E * H + 3 * E * H * I;
    ck_assert_int_eq(block, INT64_C(1451270144));
    ck_assert_int_eq(est_module_param_elems(&m), block);
    ck_assert_int_eq(32 * block + INT64_C(262148096), INT64_C(46702792704));
}
END_TEST

/* Saved activations, T = 64 tokens, k T = 128 routed rows, fp32. The fused
 * gate_up output is one k T x 2 I tensor (3,670,016 elements), saved (the
 * act on its gate half and the product with its up half keep it). Against
 * 4.x, whose per-expert gate and up outputs are two k T x I tensors (the
 * same bytes), 5.x keeps one more k T int64 index: grouped_mm's path keeps
 * perm // k (x's gather), perm (the routing weights' gather) and inv_perm
 * (the return to token order), where 4.x keeps where()'s two row indices
 * (2 k T); the routing weights saved are k T fp32 either way (4.x: the
 * product's operand; 5.x: the sorted copy). So 5.x saves k T x 8 = 1,024
 * bytes more per block. In all, 5.x's MoE MLP saves: the router's softmax
 * T E 4, top-k values k T 4 and indices k T 8, the sums T 4; three k T int64
 * indices; x sorted k T h 4; the sorted weights k T 4; gate_up k T 2 I 4;
 * act(gate) and the product k T I 4 each; down's output k T h 4 (for the
 * weights' gradient): 33,561,856 bytes. */
START_TEST(test_fused_saved_activations) {
    const est_run r5 = mixtral("2026-11"), r4 = mixtral("2025-02");
    est_module m5 = build(&r5, &FP32), m4 = build(&r4, &FP32);
    const int64_t kT = 2 * 64;
    const est_mtensor *gu = tensor_named(&m5, "experts gate_up");
    ck_assert_ptr_nonnull(gu);
    ck_assert_int_eq(gu->elems, kT * 2 * I);
    ck_assert_int_eq(gu->elem_bytes, 4);
    ck_assert_int_ne(gu->saved_until, EST_NONE);
    ck_assert_ptr_null(tensor_named(&m4, "experts gate_up"));
    const int64_t T = 64, router = T * E * 4 + kT * 4 + kT * 8 + T * 4; /* softmax, top-k, indices, sums */
    const int64_t fused = router + 3 * kT * 8 + kT * H * 4 + kT * 4 + kT * 2 * I * 4 + 2 * kT * I * 4 + kT * H * 4;
    ck_assert_int_eq(fused, INT64_C(33561856));
    ck_assert_int_eq(moe_saved_bytes(&m5), fused);
    ck_assert_int_eq(moe_saved_bytes(&m5) - moe_saved_bytes(&m4), kT * 8);
}
END_TEST

/* Under autocast (bf16-mixed, fp32 weights) grouped_mm is not autocast-
 * enabled: transformers casts its input to the weight's dtype, so the experts
 * run in fp32 and autocast makes no bf16 copy of the fused weights; 4.x's
 * F.linear per expert gets autocast's cached bf16 cast of each projection
 * (8 x 14336 x 4096 elements for the gates). */
START_TEST(test_fused_under_autocast) {
    const est_regime mixed = {.act = 2, .resid = 4, .autocast = true, .weight = 4, .train_base = true,
                              .adapter = 4};
    const est_run r5 = mixtral("2026-11"), r4 = mixtral("2025-02");
    est_module m5 = build(&r5, &mixed), m4 = build(&r4, &mixed);
    const est_mtensor *gu = tensor_named(&m5, "experts gate_up");
    ck_assert_ptr_nonnull(gu);
    ck_assert_int_eq(gu->elem_bytes, 4);
    int64_t casts5 = 0, casts4 = 0;
    for (int t = 0; t < m5.n_tensors; t++)
        if (m5.tensors[t].role == EST_ROLE_WEIGHT && m5.tensors[t].elems >= E * I * H) casts5++;
    for (int t = 0; t < m4.n_tensors; t++)
        if (m4.tensors[t].role == EST_ROLE_WEIGHT && m4.tensors[t].elems == E * I * H) casts4++;
    ck_assert_int_eq(casts5, 0);
    ck_assert_int_eq(casts4, 3); /* w1, w3, w2 */
}
END_TEST

/* named_parameters() in 5.23 (--trainable matches these): the router is
 * model.layers.i.mlp.gate.weight (MixtralTopKRouter.weight), the experts the
 * bare 3-D parameters mlp.experts.gate_up_proj and mlp.experts.down_proj
 * (no ".weight": they are nn.Parameters of MixtralExperts, not Linears). */
START_TEST(test_fused_names) {
    const est_run run = mixtral("2026-11");
    est_module m = build(&run, &FP32);
    char name[192];
    ck_assert_int_eq(est_param_hf_name(&run, &m, 4, 3, 0, name, sizeof name), 0);
    ck_assert_str_eq(name, "model.layers.3.mlp.gate.weight");
    ck_assert_int_eq(est_param_hf_name(&run, &m, 5, 3, 0, name, sizeof name), 0);
    ck_assert_str_eq(name, "model.layers.3.mlp.experts.gate_up_proj");
    ck_assert_int_eq(est_param_hf_name(&run, &m, 6, 3, 0, name, sizeof name), 0);
    ck_assert_str_eq(name, "model.layers.3.mlp.experts.down_proj");
}
END_TEST

/* FSDP2 chunks every parameter on dim 0 (torch _fsdp_param.py
 * _init_sharded_param: torch.chunk, each rank's shard padded to chunk 0's
 * size). 5.x's fused expert tensors have E = 8 there, so on 16 ranks chunk 0
 * is one whole expert: 1 x 28672 x 4096 = 117,440,512 of gate_up_proj and
 * 1 x 4096 x 14336 = 58,720,256 of down_proj per rank (twice an even
 * sixteenth). Per rank and layer, with q, o ceil(4096/16) = 256 rows x 4096 =
 * 1,048,576 each, k, v 64 x 4096 = 262,144 each, the router ceil(8/16) = 1
 * row x 4096 and the norms 256 each: 178,786,816; the root: embedding and
 * head 2000 x 4096 each and the final norm 256 = 16,384,256. Sharded fp32
 * parameters (bf16-mixed) per rank: 4 x (32 x 178,786,816 + 16,384,256) =
 * 22,950,249,472 bytes. */
START_TEST(test_fsdp2_shards_experts_on_e) {
    est_run run = mixtral("2026-11");
    run.framework = EST_FW_FSDP;
    run.fsdp_version = EST_FSDP2;
    run.zero_stage = 3;
    run.gpus_per_node = 8;
    run.nodes = 2;
    run.seq_len = 2048;
    const int64_t layer = 2 * 256 * H + 2 * 64 * H + H + 2 * I * H + H * I + 2 * 256;
    ck_assert_int_eq(layer, INT64_C(178786816));
    est_estimate e;
    test_estimate(&run, &e);
    ck_assert_int_eq(test_row(&e, "loss")->bytes[EST_CAT_MASTER], 4 * (32 * layer + INT64_C(16384256)));
    est_estimate_free(&e);
}
END_TEST

Suite *suite_moe_fused(void);
Suite *suite_moe_fused(void) {
    Suite *s = suite_create("moe_fused");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_fused_parameters);
    tcase_add_test(tc, test_fused_saved_activations);
    tcase_add_test(tc, test_fused_under_autocast);
    tcase_add_test(tc, test_fused_names);
    tcase_add_test(tc, test_fsdp2_shards_experts_on_e);
    suite_add_tcase(s, tc);
    return s;
}
