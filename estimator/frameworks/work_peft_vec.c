/* The work of AdaLoRA, VeRA, MiSS and LN tuning in a block (work_peft_vec.h),
 * each line naming the ops of block_peft_vec.c it prices: bytes read and
 * written (c for the activations' dtype, 4 for the fp32 adapters) and one
 * kernel launch per op. */
#include "work_peft_vec.h"

#include "lora.h"
#include "peft.h"
#include "peft_vec.h"

/* AdaLoRA over T tokens: forward x.to(fp32) (c + 4 per x), A * E (12 per
 * element of A), * scaling and / ranknum (8 each), result += (read c and 4,
 * write c); backward the two scalars' gradients (8 each), x's gradient added
 * into the base's (3c) and cast (4 + c), A * E's two gradients (12 r d_in
 * each, E's then summed). */
static void adalora(est_step *st, double T, double r, double din, double dout, double c, bool backward) {
    if (!backward) {
        est_step_memory_op(st, T * din * (c + 4) + r * din * 12 + T * dout * (16 + 2 * c + 4), 5);
        return;
    }
    est_step_memory_op(st, T * dout * 16 + T * din * (3 * c + 4 + c) + r * din * 24, 6);
}

/* VeRA: forward x.to(fp32) (c + 4), lambda_d * u (8 T r), lambda_b * v (8),
 * result + that (c + 8), .to(dtype) (4 + c) over T d_out; backward the
 * products' input gradients and the vectors' (grad times operand, then a
 * sum: 8 + 12 + 4 per element), the add's gradient cast (4 + c), x's
 * gradient added and cast (3c + 4 + c over T d_in). */
static void vera(est_step *st, double T, double r, double din, double dout, double c, bool backward) {
    if (!backward) {
        est_step_memory_op(st, T * din * (c + 4) + T * r * 8 + T * dout * (8 + c + 8 + 4 + c), 5);
        return;
    }
    est_step_memory_op(st, T * (r + dout) * 24 + T * dout * (4 + c) + T * din * (4 * c + 4), 7);
}

/* PVeRA: VeRA's passes (vera) with lambda_d's product over 2r, plus over
 * T r: 0.5 * logvar (8), exp (8), randn_like (4), eps * std (12), mu +
 * that (12); backward the add's and product's gradients (8 + 12), exp's
 * (12) and the scalar's (8), the two halves joined into the (T, 2r)
 * gradient (8 per element of 2r). */
static void pvera(est_step *st, double T, double r, double din, double dout, double c, bool backward) {
    vera(st, T, 2 * r, din, dout, c, backward);
    est_step_memory_op(st, T * r * (backward ? 40 + 16 : 44), backward ? 6 : 5);
}

/* TinyLoRA: forward the einsum's P.to(v's dtype) (a no-op copy in fp32: not
 * counted), x.to(fp32) (c + 4 over T d_in), result + delta (c + 8) and the
 * cast back (4 + c) over T d_out; backward the cast's and add's gradients
 * (4 + c, the delta's gradient passed on), x's gradient cast and added into
 * the base's (4 + 4c over T d_in). */
static void tinylora(est_step *st, double T, double din, double dout, double c, bool backward) {
    if (!backward) {
        est_step_memory_op(st, T * din * (c + 4) + T * dout * (c + 8 + 4 + c), 3);
        return;
    }
    est_step_memory_op(st, T * dout * (4 + c) + T * din * (4 + 4 * c), 3);
}

/* MiSS default / mini: forward x.to(fp32) (c + 4), the slice sum (read 4 T
 * d_in, write 4 T r), result + (c + 8), .to(dtype) (4 + c); mini's repeat
 * (8 r d_out); backward the cast back (4 + c) over T d_out, the sum's
 * gradient expanded over T d_in (4 + 4), cast and added to x's (4 + 4c). */
static void miss(est_step *st, const est_run *run, double T, double r, double din, double dout, double c,
                 bool backward) {
    const double mini = run->vec.miss == EST_MISS_MINI ? 1 : 0;
    if (!backward) {
        est_step_memory_op(st, T * din * (c + 8) + T * r * 4 + T * dout * (c + 8 + 4 + c) + mini * r * dout * 8,
                           4 + mini);
        return;
    }
    est_step_memory_op(st, T * dout * (4 + c) + T * din * (8 + 4 + 4 * c) + mini * r * dout * 8, 4 + mini);
}

/* MiSS "bat" on a (d_out, d_in) weight, n = d_in d_out elements: forward
 * W.clone() (2c), .to(fp32) (c + 4), the batched product's output (a GEMM
 * of d_in d_out / r^2 r x r blocks: est_step_gemm), + miss_B (12), the
 * permute copy (8), orig_weight + delta (c + 8), x.to(fp32) (c + 4 over T
 * d_in), the fp32 GEMM (block description), .to(dtype) (4 + c over T
 * d_out); backward the output cast (c + 4), the merged weight's gradient
 * (the GEMM) through the permute copy (8 n) and the broadcast add's sum
 * into miss_B's gradient (4 n), the batched product's gradient for miss_B
 * (a GEMM, then the sum over d_in / r: 4 n), x's gradient cast (4 + c). */
static void bat(est_step *st, double T, double r, double din, double dout, double c, bool backward) {
    const double n = din * dout, blocks = n / (r * r);
    est_step_gemm(st, r, r, r, 4, blocks, 1);
    if (!backward) {
        est_step_memory_op(st, n * (2 * c + c + 4 + 12 + 8 + c + 8) + T * din * (c + 4) + T * dout * (4 + c), 7);
        return;
    }
    est_step_memory_op(st, T * dout * (c + 4) + n * (8 + 4 + 4) + T * din * (4 + c), 5);
}

/* LN tuning: the trained copy's weight gradient (weight * normalized: the
 * product's gradient for the weight, grad times the saved normalized
 * tensor, then a sum over the tokens: read 2c, write 4, read 4) per norm,
 * two a block. */
static void ln_tuning(est_step *st, const est_run *run, double T, double c) {
    const double h = (double)run->model.hidden_size;
    est_step_memory_op(st, 2 * T * h * (2 * c + 8), 4);
}

void est_work_peft_vec_block(est_step *st, const est_run *run, double T, double c, bool backward) {
    if (!est_peft_vec_on(run)) return;
    if (run->peft == EST_PEFT_LN_TUNING) {
        if (backward) ln_tuning(st, run, T, c);
        return;
    }
    const double r = (double)run->vec.rank;
    for (int t = 0; t < EST_LORA_TARGET_COUNT; t++) {
        if (!est_peft_vec_targets_linear(run, t)) continue;
        int64_t din, dout;
        est_linear_shape(&run->model, (est_lora_target)t, &din, &dout);
        const double i = (double)din, o = (double)dout;
        if (run->peft == EST_PEFT_ADALORA) adalora(st, T, r, i, o, c, backward);
        else if (run->peft == EST_PEFT_VERA) vera(st, T, r, i, o, c, backward);
        else if (run->peft == EST_PEFT_PVERA) pvera(st, T, r, i, o, c, backward);
        else if (run->peft == EST_PEFT_TINYLORA) tinylora(st, T, i, o, c, backward);
        else if (run->vec.miss == EST_MISS_BAT) bat(st, T, r, i, o, c, backward);
        else miss(st, run, T, r, i, o, c, backward);
    }
}

/* AdaLoRA once a step, over the 3 tensors (A, E, B) of each of P targets:
 *  - orthogonal regularization (adalora/model.py forward 239-256), per A
 *    and B: p @ p.T or p.T @ p (an r x r GEMM over d_in or d_out), then
 *    torch.eye into empty_like, the difference, the Frobenius norm and the
 *    running sum (4 kernels); backward the norm's gradient (2), the GEMM's
 *    two products (GEMMs) and their sum, the add into p's gradient (2);
 *  - update_ipt (adalora/layer.py 409-430), per trained tensor: p * grad,
 *    abs, beta1 * exp_avg_ipt, (1 - beta1) * ipt, their sum, ipt -
 *    exp_avg_ipt, abs, beta2 * exp_avg_unc, (1 - beta2) * that, the sum: 10
 *    kernels and 96 bytes per element (each reads 4 or 8 and writes 4);
 *  - mask_to_budget (432-490), every step between tinit and total_step -
 *    tfinal with deltaT = 1: per A and B the element score (12) and its
 *    mean (4) per element; per E its score, the triplet's cat, sum and add,
 *    then the comparison, masked_fill_, the comparison again and its
 *    negation (8 kernels); kthvalue over every triplet. Its .item() and the
 *    per-E .tolist() wait for the device (57 synchronisations; not priced). */
void est_work_peft_vec_step(est_step *st, const est_run *run) {
    if (run->peft != EST_PEFT_ADALORA) return;
    const double L = (double)run->layers_used, r = (double)run->vec.rank;
    const double elems = L * (double)est_peft_vec_block_params(run, true);
    double targets = 0;
    for (int t = 0; t < EST_LORA_TARGET_COUNT; t++) {
        if (!est_peft_vec_targets_linear(run, t)) continue;
        int64_t din, dout;
        est_linear_shape(&run->model, (est_lora_target)t, &din, &dout);
        targets += L;
        est_step_gemm(st, r, (double)din, r, 4, L, L);     /* A A^T */
        est_step_gemm(st, r, (double)dout, r, 4, L, L);    /* B^T B */
        est_step_gemm(st, r, r, (double)din, 4, 2 * L, 2 * L);  /* its two gradients */
        est_step_gemm(st, r, r, (double)dout, 4, 2 * L, 2 * L);
    }
    est_step_memory_op(st, elems * 4 * 3 + 2 * targets * r * r * 4 * 6, 2 * targets * 8);
    est_step_memory_op(st, elems * 96, 3 * targets * 10);
    est_step_memory_op(st, elems * 16, 2 * targets * 2 + targets * 8 + 3);
}

/* Trainable tokens (trainable_tokens/layer.py get_merged_weights): each
 * forward of the embedding, and of a tied head, delta.to(W) (N h: 4 + c)
 * and W.index_copy (a clone of the V x h weight, read and write c, then the
 * rows copied in: 2 kernels); the tied head's backward makes the merged
 * weight's gradient (a (V, T, h) GEMM, which a frozen head skips) and
 * index_selects its N rows, cast to fp32 (2 kernels). The embedding's dense
 * backward is work.c's embed_backward. */
void est_work_peft_vec_unit(est_step *st, const est_run *run, est_unit unit, double T, double h, double V,
                            double c) {
    if (run->peft != EST_PEFT_TRAINABLE_TOKENS) return;
    const double N = (double)run->vec.tokens;
    const bool tied = run->model.tied_embeddings;
    if (unit == EST_UNIT_EMBED_FWD || (unit == EST_UNIT_HEAD_FWD && tied))
        est_step_memory_op(st, N * h * (4 + c) + 2 * V * h * c + N * h * 2 * c, 3);
    if (unit == EST_UNIT_HEAD_BWD && tied) {
        est_step_gemm(st, V, T, h, c, 1, 1);
        est_step_memory_op(st, N * h * (2 * c + c + 4), 2);
    }
}
