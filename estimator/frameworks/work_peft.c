/* The work of PEFT's methods (work_peft.h). Bytes per element: c for the
 * activations' dtype, 4 for the fp32 adapters and their products (PEFT's
 * autocast_adapter_dtype); each line names the ops of block_linear.c it
 * prices (docs/method.md, "PEFT methods"). */
#include "work_peft.h"

#include "lora.h"
#include "peft.h"
#include "peft_vec.h"
#include "peft_delta.h"
#include "work_peft_delta.h"

/* DoRA, per adapted Linear (tuners/lora/dora.py DoraLinearLayer.forward):
 * forward (beside lora_A(eye(d_in)) and lora_B of it, the block
 * description's GEMMs: work.c block_gemms) the eye written; W.to(fp32) (read c, write 4), scaling * BA (8),
 * W + that (12), the row norms (read 4): d_in d_out (c + 28) bytes; over the
 * tokens, beyond plain LoRA's scaling, add and cast (work.c lora_adapter):
 * (m - 1) * y (read c, write 4), m * lora (8) and their sum (12): T d_out
 * (c + 24). Backward: the two products' input gradients (8 each, y's cast
 * back to its dtype 6) and the magnitude's (the product with the other
 * operand, 10 and 12, then its sum, 4 each): T d_out 52 bytes. The
 * weight-norm branch has no backward (detached). */
static void dora(est_step *st, double T, double din, double dout, double c, bool backward) {
    if (backward) {
        est_step_memory_op(st, T * dout * 52, 7);
        return;
    }
    est_step_memory_op(st, din * din * 4 + din * dout * (c + 28), 5);
    est_step_memory_op(st, T * dout * (c + 24), 3);
}

/* IA3 (tuners/ia3/layer.py Linear.forward) on w = d_in (feed-forward: the
 * input's x.to(fp32) (c + 4), x * scaling (8), .to(dtype) (4 + c)) or d_out
 * (the output: y * scaling (c + 4 + ... promoted to fp32: c + 8), .to(dtype)
 * (4 + c)): T w (2c + 16) either way. Backward: the cast's (c + 4), the
 * product's input gradient (8) and the vector's (grad times the operand, 4 +
 * 4 + 4, then a sum), the cast back (4 + c): T w (2c + 28). */
static void ia3(est_step *st, double T, double w, double c, bool backward) {
    est_step_memory_op(st, T * w * (2 * c + (backward ? 28 : 16)), backward ? 4 : 3);
}

void est_work_peft_linear(est_step *st, const est_run *run, int t, double T, double din, double dout,
                          double c, bool backward) {
    if (run->peft == EST_PEFT_IA3 && (run->ia3_targets & EST_LORA_BIT(t)))
        ia3(st, T, (run->ia3_feedforward & EST_LORA_BIT(t)) ? din : dout, c, backward);
    if (est_lora_on(run) && run->lora.variant == EST_LORA_DORA && (run->lora.targets & EST_LORA_BIT(t)))
        dora(st, T, din, dout, c, backward);
    est_work_pdelta_linear(st, run, t, T, din, dout, c, backward); /* LoHa, LoKr, OFT, FourierFT */
}

/* Per (A, B) pair, in order (lorafa.py step): A @ A.T, torch.eye(r) made on
 * the host and copied over, delta * eye, + ; torch.linalg.pinv (an SVD, the
 * cutoff max, mul, comparison, where of the reciprocals, the product: 6); the
 * two autocast casts, the matmul, * 1/scaling^2, .to(fp32); exp_avg mul_ and
 * add_, exp_avg_sq mul_ and addcmul_, sqrt and add_ eps, B.addcdiv_, the
 * weight decay add_: 25 ops, each a kernel and a host-side dispatch. Bytes:
 * B's gradient read twice and written in bf16 and fp32 (4 + 2 + 2 + 4), the
 * moments' update (24), sqrt and add (16), addcdiv and decay (20): 72 per
 * element of B. pinv's device-to-host synchronisation and cuSOLVER's own time
 * are not modelled (docs/validation.md). */
void est_work_lorafa_step(est_step *st, const est_run *run) {
    double b_elems = 0;
    for (int t = 0; t < EST_LORA_TARGET_COUNT; t++) {
        if (!(run->lora.targets & EST_LORA_BIT(t))) continue;
        int64_t din, dout;
        est_linear_shape(&run->model, (est_lora_target)t, &din, &dout);
        b_elems += (double)(dout * run->lora.rank);
    }
    const double pairs = (double)est_lora_target_count(run) * (double)run->layers_used;
    est_step_memory_op(st, (double)run->layers_used * b_elems * 72, 25 * pairs);
}

double est_peft_step_params(const est_run *run) { return (double)est_peft_trainable_params(run); }

double est_peft_step_tensors(const est_run *run) {
    double per_target = 0, extra = 0;
    if (est_peft_vec_on(run)) /* peft_vec.h; LN tuning's final norm too */
        return (double)est_peft_vec_tensors(run);
    if (run->peft == EST_PEFT_IA3) {
        for (int t = 0; t < EST_LORA_TARGET_COUNT; t++) per_target += (run->ia3_targets >> t) & 1u;
    } else if (run->peft == EST_PEFT_PROMPT_TUNING || run->peft == EST_PEFT_PREFIX_TUNING) {
        extra = 1; /* the embedding */
    } else if (run->peft == EST_PEFT_ADAPTION_PROMPT) {
        per_target = 2; /* adaption_prompt and adaption_gate per layer */
    } else if (run->peft == EST_PEFT_P_TUNING) {
        extra = 7; /* the embedding, three Linears' weights and biases */
    } else if (est_pdelta_on(run)) {
        per_target = est_pdelta_block_tensors(run); /* every target's tensors, summed */
    } else {
        const double each = (run->lora.variant == EST_LORA_FA ? 1 : 2) + (run->lora.variant == EST_LORA_DORA);
        per_target = each * (double)est_lora_target_count(run);
    }
    return per_target * (double)run->layers_used + extra;
}
