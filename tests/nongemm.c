/* The device bytes of everything in a decoder block that is not a GEMM, one
 * block of Llama-3.2-1B forward and backward under the HF Trainer's autocast
 * (bf16 over fp32 weights: an fp32 residual stream), derived here kernel by
 * kernel from the eager ops transformers 5.17 and torch 2.11 run (the list a
 * TorchDispatchMode printed for one LlamaDecoderLayer on CPU; the CUDA
 * softmax's passes from SoftMax.cu), against the time ledger's booked bytes.
 * The loss is checked for both sides of transformers 4.46's label shift,
 * and LoRA's adapter input on an fp32 stream. */
#include <check.h>
#include <math.h>

#include "lora.h"
#include "stack.h"
#include "step_build.h"
#include "test_util.h"
#include "timing.h"

/* Llama-3.2-1B: h 2048, MLP 8192, 32 heads and 8 KV heads of 64, vocabulary
 * 128,256; one sequence of 1,024 tokens. */
static const double T = 1024, H = 2048, F = 8192, Q = 2048, KV = 512, V = 128256;

static est_time_detail detail_of_ga(const char *stack, int64_t batch, int64_t grad_accum) {
    est_run run = test_run_of("llama3.2-1b", "h200-141gb");
    run.framework = EST_FW_HF;
    run.precision = EST_PREC_BF16_MIXED;
    run.attention = EST_ATTN_FLASH; /* no mask, no repeat_kv copies */
    run.micro_batch = batch;
    run.grad_accum = grad_accum;
    run.seq_len = (int64_t)(T / (double)batch);
    run.stack = est_stack_find(stack);
    ck_assert(run.stack != NULL);
    est_constants k;
    est_constants_defaults(&k);
    est_time_detail d;
    est_time_model(&run, &k, &d);
    ck_assert_msg(d.modelled, "%s", d.why);
    return d;
}

static est_time_detail detail_of(const char *stack, int64_t batch) { return detail_of_ga(stack, batch, 1); }

/* Bytes read + written per element, fp32 stream (4), bf16 compute (2):
 *  RMSNorm forward: pow 4+4, mean 4, * rsqrt 4+4, weight * 4+4 = 28;
 *    backward: grad*weight 8, grad*y 12, its sum 4, grad*h 12, its sum 4,
 *    grad*rsqrt 8, mean's expand/h 4, pow(1) 8, * 2 8, grad * 12, the
 *    two gradients of h added 12 = 92.
 *  autocast's casts of q, k, v, gate and up's fp32 input: 5 x (4+2) = 30;
 *    backward 5 x (2+4) and three fp32 adds of their gradients (12 each) = 66.
 *  RoPE on q and k (cos/sin fp32: the hidden states' dtype): q*cos 2+4,
 *    -x2 2 (half the elements, read and written), cat 2+2, *sin 2+4, add
 *    4+4+4, autocast's cast to bf16 for attention 4+2 = 36; backward: that
 *    cast's 2+4, grad*sin 4+4, to bf16 4+2, -grad 2, two SliceBackward
 *    (zeros 2, half copied 1+1) 8, their add 6, grad*cos 8, to bf16 6, the
 *    add of q's two gradients 6 = 56.
 *  residual adds: fp32 + bf16 into fp32, 4+2+4 each, two = 20; backward
 *    each fork's gradients added, 12 each = 24.
 *  SwiGLU over T x F: silu 2+2, * up 2+2+2 = 10; backward grad*up and
 *    grad*silu 6 each, silu_backward 6 = 18.
 *  each weight cast to bf16 once a forward (4+2) and its gradient back
 *    (ToCopyBackward 2+4), which AccumulateGrad takes as it is into a .grad
 *    set to None: 6 and 6 per weight; with two micro-batches a step the
 *    second adds in place (4+4+4), 6 more per weight and micro-batch.
 *  transformers 5.x DynamicCache: k and v appended (cat), 2 x (2+2) over
 *    T x KV, forward only. */
START_TEST(test_block_bytes_by_kernel) {
    const est_time_detail d = detail_of("2026-11-gpu", 1);
    const double th = T * H, rope = T * (Q + KV), w = H * Q + 2 * H * KV + Q * H + 3 * H * F;
    const double fwd = 2 * 28 * th + 30 * th + 36 * rope + 20 * th + 10 * T * F + 6 * w + 4 * T * KV * 2;
    const double bwd = 2 * 92 * th + 66 * th + 56 * rope + 24 * th + 18 * T * F + 6 * w;
    ck_assert_msg(fabs(d.block_fwd.hbm_bytes - fwd) < 1, "forward %.0f vs %.0f", d.block_fwd.hbm_bytes, fwd);
    ck_assert_msg(fabs(d.block_bwd.hbm_bytes - bwd) < 1, "backward %.0f vs %.0f", d.block_bwd.hbm_bytes, bwd);
    const est_time_detail two = detail_of_ga("2026-11-gpu", 1, 2);
    ck_assert_msg(fabs(two.block_bwd.hbm_bytes - bwd - 6 * w) < 1, "accumulating %.0f vs %.0f",
                  two.block_bwd.hbm_bytes, bwd + 6 * w);
}
END_TEST

/* The loss over T x V fp32 logits: logits.float() 2+4; log_softmax over a
 * 128,256-wide row takes cunn_SoftMaxForward (3 reads + 1 write: 16);
 * backward nll_loss_backward's zeros 4, log_softmax's 3 + 1 (16) and the
 * cast's 4+2. transformers 4.40 (stack 2024-04) shifts the logits: the
 * slice's backward (zeros 4, the slice copied in 4+4) and, for b > 1, the
 * shifted .contiguous() copy (4+4) forward. */
START_TEST(test_loss_bytes_by_version) {
    const double tv = T * V;
    const est_time_detail now = detail_of("2026-11-gpu", 2), old = detail_of("2024-04", 2);
    ck_assert_msg(fabs(now.loss_bwd.hbm_bytes - tv * (4 + 16 + 6)) < 1, "%.0f", now.loss_bwd.hbm_bytes);
    ck_assert_msg(fabs(old.loss_bwd.hbm_bytes - tv * (4 + 16 + 12 + 6)) < 1, "%.0f", old.loss_bwd.hbm_bytes);
    /* the head's forward also holds the final norm (28 T h) and the
     * autocast casts of its input and weight (6 T h + 6 V h) */
    const double rest = 28 * T * H + 6 * T * H + 6 * V * H;
    ck_assert_msg(fabs(now.head_fwd.hbm_bytes - rest - tv * (6 + 16)) < 1, "%.0f", now.head_fwd.hbm_bytes);
    ck_assert_msg(fabs(old.head_fwd.hbm_bytes - rest - tv * (6 + 8 + 16)) < 1, "%.0f", old.head_fwd.hbm_bytes);
}
END_TEST

/* LoRA's adapter input on an fp32 stream (QLoRA: prepare_model_for_kbit_
 * training keeps the norms' fp32 output), backward: autocast's cast of x for
 * lora_A comes back as ToCopyBackward (2 + 4 per element of T x d_in) and
 * the adapter's input gradient is added into the base's in fp32 (4 + 4 + 4),
 * beside grad * scaling over T x d_out in bf16 (2 + 2) (peft 0.21.2 under
 * torch 2.11 autocast: the dispatch log shows two casts of x forward, two
 * ToCopyBackward and one fp32 add). The base's result is fp32 there
 * (bitsandbytes 0.50.2 Linear4bit's `.to(inp_dtype)`), so the add of the
 * bf16 adapter output into it hands that output an fp32 gradient, which
 * autograd casts to bf16 first (4 + 2 over T x d_out; a TorchDispatchMode
 * log of r32 + o16 * s under torch 2.11). Adapting k_proj as well as q_proj
 * on Llama-3.2-1B NF4 at T = 1024 (k: 2048 -> 512) adds to one block's
 * backward 1024 x 2048 x (6 + 12) + 1024 x 512 x (4 + 6) = 42,991,616 bytes. */
START_TEST(test_lora_fp32_input_backward) {
    est_run run = test_run_of("llama3.2-1b", "h200-141gb");
    run.framework = EST_FW_HF;
    run.quant = EST_QUANT_NF4;
    run.lora.rank = 16;
    run.seq_len = 1024;
    run.stack = est_stack_find("2026-11-gpu");
    est_constants k;
    est_constants_defaults(&k);
    double bytes[2];
    for (int with_k = 0; with_k < 2; with_k++) {
        run.lora.targets = EST_LORA_BIT(EST_LORA_Q) | (with_k ? EST_LORA_BIT(EST_LORA_K) : 0);
        est_time_detail d;
        est_time_model(&run, &k, &d);
        ck_assert(d.modelled);
        bytes[with_k] = d.block_bwd.hbm_bytes;
    }
    const double want = 1024.0 * 2048 * (6 + 12) + 1024.0 * 512 * (4 + 6);
    ck_assert_msg(fabs(bytes[1] - bytes[0] - want) < 1, "%.0f vs %.0f", bytes[1] - bytes[0], want);
}
END_TEST

Suite *suite_nongemm(void);
Suite *suite_nongemm(void) {
    Suite *s = suite_create("nongemm");
    TCase *tc = tcase_create("nongemm");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_block_bytes_by_kernel);
    tcase_add_test(tc, test_loss_bytes_by_version);
    tcase_add_test(tc, test_lora_fp32_input_backward);
    suite_add_tcase(s, tc);
    return s;
}
