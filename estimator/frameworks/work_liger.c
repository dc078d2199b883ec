/* Liger-Kernel v0.8.2's kernels as bytes moved (work_liger.h). Per element
 * of the tensors each kernel touches, read from the kernels in
 * src/liger_kernel/ops/ at v0.8.2. */
#include "work_liger.h"

#include "liger.h"
#include "stack.h"

/* rms_norm.py _rms_norm_forward_kernel: read X (rb) and W, write Y (rb) and
 * one fp32 rstd per row: 2 rb per element, one launch.
 * _rms_norm_backward_kernel: read dY, X (rb each) and rstd, write dX (rb)
 * and each SM's fp32 row of partial dW; then _dW.sum(0).to(W.dtype): two
 * launches after the kernel. The per-SM partials (sms x width x 4, written
 * and read back) are under 0.1% of the rows' bytes at T >= 1024 and are
 * left out. */
bool est_work_liger_rmsnorm(est_step *st, const est_run *run, double tokens, double width, double rb,
                            bool backward) {
    if (!(run->liger & EST_LIGER_RMS_NORM)) return false;
    if (!backward) est_step_memory_op(st, tokens * (width * 2 * rb + 4), 1);
    else est_step_memory_op(st, tokens * (width * 3 * rb + 4), 3);
    return true;
}

/* rope.py _triton_rope: one program per token reads its cos and sin rows
 * (d each, in c) and reads and writes its q and k heads in place: 2 c per
 * element of q and k plus 2 d c per token, one launch, the same in the
 * backward (BACKWARD_PASS swaps the sign). The forward also runs
 * LlamaRotaryEmbedding's eager ops (inv_freq @ positions, cat, cos, sin,
 * casts: five launches over s x d, priced with the kernel's launches). */
bool est_work_liger_rope(est_step *st, const est_run *run, double T, double q, double kv, double d, double c,
                         bool backward) {
    if (!(run->liger & EST_LIGER_ROPE)) return false;
    est_step_memory_op(st, T * (2 * (q + kv) * c + 2 * d * c), backward ? 1 : 6);
    return true;
}

/* swiglu.py _swiglu_forward_kernel (geglu.py likewise): read a and b, write
 * c: 3 c per element of T x f, one launch. _swiglu_backward_kernel: read dc,
 * a and b, recompute silu(a) (gelu(a)), write da and db into a and b: 5 c,
 * one launch. Phi-3 (LigerPhi3SwiGLUMLP) first copies the two chunks of
 * gate_up_proj's output (@ensure_contiguous: read and write 2 c each, two
 * launches), and in the backward their gradients go back into the halves of
 * gate_up_proj's output gradient (the same traffic). */
bool est_work_liger_glu(est_step *st, const est_run *run, double T, double f, double c, bool backward) {
    if (!(run->liger & (EST_LIGER_SWIGLU | EST_LIGER_GEGLU))) return false;
    est_step_memory_op(st, T * f * (backward ? 5 : 3) * c, 1);
    if (run->model.fused_gate_up) est_step_memory_op(st, T * f * 4 * c, 2);
    return true;
}

/* cross_entropy.py liger_cross_entropy_kernel over fp32 logits: an online
 * softmax pass reads the row, a second reads it again and writes the
 * gradient in place: 12 bytes per logit, one launch (and the sum of the
 * per-row losses). Backward: cross_entropy_backward skips the work when
 * grad_output is exactly 1 (a mean loss, no accumulation: transformers
 * before 4.46 with grad-accum 1) and otherwise scales the stored gradient
 * in place (element_mul_kernel: read and write, 8 bytes per logit). */
bool est_work_liger_cross_entropy(est_step *st, const est_run *run, double rows, double V, bool backward) {
    if (!(run->liger & EST_LIGER_CROSS_ENTROPY)) return false;
    if (!backward) {
        est_step_memory_op(st, rows * V * 12, 2);
        return true;
    }
    const bool unit_grad = run->grad_accum == 1 && !(run->stack && run->stack->loss_shifts_labels);
    if (!unit_grad) est_step_memory_op(st, rows * V * 8, 1);
    return true;
}
