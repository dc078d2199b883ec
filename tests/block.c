/* One block description feeds everything (issue 18 item 1): the same module
 * table (estimator/model/block.c) gives a block's parameter count, the bytes
 * autograd saves and the GEMM FLOPs, the time ledger's among them. Every expected figure is derived
 * here by hand from the published shapes and the modeling code
 * (transformers 4.40-4.49 modeling_gemma2.py / modeling_llama.py, PEFT's
 * tuners/lora/layer.py), never read back from the program. */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "block.h"
#include "constants.h"
#include "events.h"
#include "stack.h"
#include "fw_registry.h"
#include "work.h"
#include "lora.h"
#include "run.h"
#include "test_util.h"

static est_module build(const est_run *run, const est_regime *g) {
    est_module m;
    char err[256];
    ck_assert_msg(est_module_block(run, g, false, &m, err, sizeof err) == 0, "%s", err);
    return m;
}

/* Gemma-2-9B: h 3584, MLP 14336, 16 query heads and 8 KV heads of 256,
 * vocabulary 256000, 42 blocks, four RMSNorms per block (the sandwich norms),
 * attention soft-cap 50, eager attention. Module cast to bf16 (DeepSpeed's
 * regime): weights, Linear outputs and the residual stream 2 bytes. */
START_TEST(test_gemma2_block) {
    est_run run = test_run_of("gemma2-9b", "h100");
    run.attention = EST_ATTN_EAGER;
    run.micro_batch = 1;
    run.seq_len = 64;
    const est_regime g = {.act = 2, .resid = 2, .autocast = false, .weight = 2, .train_base = true,
                          .adapter = 2};
    est_module m = build(&run, &g);
    const int64_t h = 3584, f = 14336, q = 16 * 256, kv = 8 * 256, T = 64, s = 64, H = 16;
    /* Parameters: q 3584x4096, k and v 3584x2048, o 4096x3584, gate, up and
     * down 3584x14336, four norms of 3584: 198,195,200, and 42 of them with the
     * embedding 256000 x 3584 and the final norm make the published
     * 9,241,705,984. */
    const int64_t linears = 2 * h * q + 2 * h * kv + 3 * h * f;
    ck_assert_int_eq(est_module_param_elems(&m), linears + 4 * h);
    ck_assert_int_eq(42 * (linears + 4 * h) + 256000 * h + h, INT64_C(9241705984));
    /* Saved for backward, T = 64 tokens:
     *   each GemmaRMSNorm (four): x.float() (saved by pow and by the mul with
     *     rsqrt) T h 4, rsqrt T 4, the normalized fp32 value (saved by the mul
     *     with 1 + weight, which trains) T h 4, and 1 + weight.float() h 4;
     *   q/k/v_proj's input (the norm's bf16 output) T h 2, once; gate/up's the same;
     *   RoPE: cos and sin, 64 positions x 256 x 2 bytes each;
     *   eager attention: q after RoPE T q 2 and K repeated to 16 heads T q 2
     *     (q k^T), the soft-cap's tanh output (b H s s 2), softmax's fp32
     *     output (b H s s 4), its bf16 cast and V repeated (probs @ v), the
     *     output's contiguous copy T q 2 (o_proj's input);
     *   the MLP: gate, act(gate), up (the product's inputs) and the product
     *     (down_proj's input), T f 2 each. */
    const int64_t norms = 4 * (T * h * 4 + T * 4 + T * h * 4 + h * 4);
    const int64_t attn = T * q * 2 + T * q * 2 + H * s * s * 2 + H * s * s * 4 + H * s * s * 2 +
                         T * q * 2 + T * q * 2;
    const int64_t saved = norms + 2 * (T * h * 2) + 2 * (s * 256 * 2) + attn + 4 * (T * f * 2);
    ck_assert_int_eq(est_module_saved_bytes(&m), saved);
    /* Forward GEMMs: 2 T x every Linear weight, and the two batched products
     * per head, q k^T (s x 256 x s) and probs @ v (s x s x 256). */
    const double flops = 2.0 * T * (double)linears + 2 * (2.0 * H * s * 256 * s);
    ck_assert_double_eq_tol(est_module_gemm_flops(&m), flops, 0.5);
}
END_TEST

/* Llama-3-8B with LoRA r = 16 on q and v (PEFT's default targets), the base
 * frozen in bf16, fp32 adapters, bf16 autocast (the HF Trainer's regime), SDPA
 * without a mask, one sequence of 64 tokens. */
START_TEST(test_lora_llama_block) {
    est_run run = test_run_of("llama3-8b", "h100");
    run.micro_batch = 1;
    run.seq_len = 64;
    run.lora.rank = 16;
    run.lora.targets = EST_LORA_DEFAULT_TARGETS;
    const est_regime g = {.act = 2, .resid = 2, .autocast = true, .weight = 2, .train_base = false,
                          .adapter = 4};
    est_module m = build(&run, &g);
    const int64_t h = 4096, f = 14336, q = 4096, kv = 1024, T = 64, s = 64, r = 16;
    /* Parameters: the frozen block (q, o 4096x4096; k, v 1024x4096; gate, up,
     * down 14336x4096; two norms) and, training, A (r x d_in) and B (d_out x r)
     * for q (4096 -> 4096) and v (4096 -> 1024). */
    const int64_t base = 2 * h * q + 2 * h * kv + 3 * h * f + 2 * h, adapters = r * (h + q) + r * (h + kv);
    ck_assert_int_eq(est_module_param_elems(&m), base + adapters);
    ck_assert_int_eq(est_module_trainable_elems(&m), 212992);
    /* Saved: the frozen norms keep x.to(fp32) and rsqrt only (weight * y saves
     * y for the weight's gradient, which is not computed): 2 x (T h 4 + T 4);
     * frozen Linears keep no input; each adapter's A keeps autocast's bf16 cast
     * of x.to(fp32) (T h 2), B keeps A's output (T r 2), and the cached casts of
     * the adapter weights (A 16 x 4096, B d_out x 16, 2 bytes) are kept for
     * the input gradient; RoPE cos and sin 64 x 128 x 2 each; SDPA keeps q, k
     * and v repeated to 32 heads, its output (T q 2 each) and the fp32
     * log-sum-exp of 32 heads x 64 rows; the MLP keeps gate, act(gate) and up
     * (T f 2 each; the frozen down_proj does not keep the product). */
    const int64_t saved = 2 * (T * h * 4 + T * 4) + 2 * (T * h * 2) + 2 * (T * r * 2) +
                          (r * h + q * r + r * h + kv * r) * 2 + 2 * (s * 128 * 2) + 4 * (T * q * 2) +
                          32 * 64 * 4 + 3 * (T * f * 2);
    ck_assert_int_eq(est_module_saved_bytes(&m), saved);
    /* Forward GEMMs: the frozen base and both adapters' A and B, 2 T each. */
    const double flops = 2.0 * T * (double)(base - 2 * h) + 2.0 * T * (double)adapters;
    ck_assert_double_eq_tol(est_module_gemm_flops(&m), flops, 0.5);
}
END_TEST

/* What the time ledger books on one unit of block 0: its GEMMs' FLOPs and
 * the bytes its memory-bound ops move. */
typedef struct unit_work {
    double flops, bytes;
} unit_work;

static unit_work work_of(const est_run *run, est_unit unit) {
    est_step st;
    est_step_init(&st);
    est_constants k;
    est_constants_defaults(&k);
    est_work_emit(&st, run, &k, unit, 0);
    ck_assert(!st.oom);
    unit_work w = {0, 0};
    for (size_t i = 0; i < st.work_count; i++) {
        const est_event *e = &st.work[i];
        if (e->kind == EST_EV_GEMM) w.flops += 2 * e->u.gemm.M * e->u.gemm.K * e->u.gemm.N * e->u.gemm.count;
        if (e->kind == EST_EV_MEMORY_OP) w.bytes += e->u.op.bytes;
    }
    est_step_free(&st);
    return w;
}

static double unit_gemm_flops(const est_run *run, est_unit unit) { return work_of(run, unit).flops; }

/* The time ledger prices the same table (frameworks/work.c block_gemms): a
 * LoRA'd Llama-3-8B block on the HF Trainer (PEFT's q, v at r = 16, SDPA,
 * one sequence of 64, no checkpointing). Forward: 2 T x every Linear weight,
 * the adapters' included, as above. Backward: the frozen Linears' input
 * gradients only (2 T d_in d_out each); each adapter's A and B both their
 * input and their weight gradients, twice their forward FLOPs. */
START_TEST(test_lora_llama_block_time) {
    est_run run = test_run_of("llama3-8b", "h100");
    run.framework = est_fw_trainer();
    run.precision = EST_PREC_BF16_MIXED;
    run.attention = EST_ATTN_SDPA;
    run.checkpointing = EST_CKPT_NONE;
    run.micro_batch = 1;
    run.seq_len = 64;
    run.lora.rank = 16;
    run.lora.targets = EST_LORA_DEFAULT_TARGETS;
    const double h = 4096, f = 14336, q = 4096, kv = 1024, T = 64, r = 16;
    const double base = 2 * h * q + 2 * h * kv + 3 * h * f, adapters = r * (h + q) + r * (h + kv);
    ck_assert_double_eq_tol(unit_gemm_flops(&run, EST_UNIT_BLOCK_FWD), 2 * T * (base + adapters), 1);
    ck_assert_double_eq_tol(unit_gemm_flops(&run, EST_UNIT_BLOCK_BWD), 2 * T * base + 4 * T * adapters, 1);
}
END_TEST

/* And Gemma-2-9B's block (as test_gemma2_block: eager attention, 64 tokens,
 * full fine-tuning) through the time ledger: forward, every Linear's 2 T d_in
 * d_out and the two batched products per head (2 x 2 H s^2 256); backward,
 * each Linear's input and weight gradients and the four batched products of
 * eager attention's backward: twice the forward. */
START_TEST(test_gemma2_block_time) {
    est_run run = test_run_of("gemma2-9b", "h100");
    run.attention = EST_ATTN_EAGER;
    run.checkpointing = EST_CKPT_NONE;
    run.micro_batch = 1;
    run.seq_len = 64;
    const double h = 3584, f = 14336, q = 16 * 256, kv = 8 * 256, T = 64, s = 64, H = 16;
    const double fwd = 2 * T * (2 * h * q + 2 * h * kv + 3 * h * f) + 2 * (2 * H * s * 256 * s);
    ck_assert_double_eq_tol(unit_gemm_flops(&run, EST_UNIT_BLOCK_FWD), fwd, 1);
    ck_assert_double_eq_tol(unit_gemm_flops(&run, EST_UNIT_BLOCK_BWD), 2 * fwd, 1);
}
END_TEST

/* Gemma-2's sandwich norms are two more RMSNorms over the hidden width per
 * block than Llama's pair, priced like them (work.c rmsnorm): under
 * DeepSpeed's bf16 module cast (residual 2 bytes), x.to(fp32) 2 + 4, pow 8,
 * mean 4, the product with rsqrt 8, .to(bf16) 4 + 2, weight * y 2 x 2: 36
 * bytes per element, so 2 x 64 x 3584 x 36 more in the forward. */
START_TEST(test_gemma2_sandwich_norms_time) {
    est_run run = test_run_of("gemma2-9b", "h100");
    run.precision = EST_PREC_BF16_MIXED;
    run.attention = EST_ATTN_EAGER;
    run.checkpointing = EST_CKPT_NONE;
    run.micro_batch = 1;
    run.seq_len = 64;
    ck_assert(run.model.sandwich_norms);
    const double with = work_of(&run, EST_UNIT_BLOCK_FWD).bytes;
    run.model.sandwich_norms = false;
    const double without = work_of(&run, EST_UNIT_BLOCK_FWD).bytes;
    ck_assert_double_eq_tol(with - without, 2.0 * 64 * 3584 * 36, 1);
}
END_TEST

/* The one model output of the head, by name and bytes. */
static const est_mtensor *head_output(const est_run *run, const est_regime *g) {
    static est_module m;
    char err[256];
    ck_assert_msg(est_module_head(run, g, &m, err, sizeof err) == 0, "%s", err);
    const est_mtensor *out = NULL;
    for (int t = 0; t < m.n_tensors; t++)
        if (m.tensors[t].model_output) {
            ck_assert_msg(!out, "two model outputs in the head");
            out = &m.tensors[t];
        }
    ck_assert_ptr_nonnull(out);
    return out;
}

/* What the model's outputs hold of the logits (T = 64 tokens): up to
 * transformers 4.45 the forward rebinds logits = logits.float(), so the fp32
 * copy (T V 4 bytes); from 4.46 the loss function upcasts inside, so the
 * compute-dtype logits (T V 2); Gemma-2 rebinds them to the soft-capped ones
 * (the tanh's output times the cap, a tensor of its own). */
START_TEST(test_head_outputs_by_stack) {
    est_run run = test_run_of("llama3-8b", "h100");
    run.micro_batch = 1;
    run.seq_len = 64;
    const est_regime g = {.act = 2, .resid = 2, .autocast = false, .weight = 2, .train_base = true, .adapter = 2};
    run.stack = est_stack_find("2024-04");
    ck_assert(!run.stack->loss_shifts_labels);
    const est_mtensor *o = head_output(&run, &g);
    ck_assert_int_eq(o->elems * o->elem_bytes, 64 * 128256 * 4);
    run.stack = est_stack_find("2025-02");
    ck_assert(run.stack->loss_shifts_labels);
    o = head_output(&run, &g);
    ck_assert_int_eq(o->elems * o->elem_bytes, 64 * 128256 * 2);
    est_run gemma = test_run_of("gemma2-9b", "h100");
    gemma.micro_batch = 1;
    gemma.seq_len = 64;
    gemma.stack = est_stack_find("2025-02");
    o = head_output(&gemma, &g);
    ck_assert_int_eq(o->elems * o->elem_bytes, 64 * 256000 * 2);
    ck_assert_ptr_nonnull(strstr(o->name, "softcap"));
}
END_TEST

Suite *suite_block(void);
Suite *suite_block(void) {
    Suite *s = suite_create("block");
    TCase *tc = tcase_create("one description");
    tcase_add_test(tc, test_gemma2_block);
    tcase_add_test(tc, test_lora_llama_block);
    tcase_add_test(tc, test_lora_llama_block_time);
    tcase_add_test(tc, test_gemma2_block_time);
    tcase_add_test(tc, test_head_outputs_by_stack);
    tcase_add_test(tc, test_gemma2_sandwich_norms_time);
    suite_add_tcase(s, tc);
    return s;
}
