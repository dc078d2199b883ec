/* Liger-Kernel v0.8.2's kernels as bytes moved (work_liger.h). Per element
 * of the tensors each kernel touches, read from the kernels in
 * src/liger_kernel/ops/ at v0.8.2. */
#include "work_liger.h"

#include <math.h>

#include "fw_registry.h"
#include "liger.h"
#include "peft.h"
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

/* fused_linear_cross_entropy.py v0.8.5 (fused_linear_cross_entropy_forward):
 * inc_factor = cdiv(V, chunk_mem_const * H) with chunk_mem_const 1,
 * chunk_size = next_power_of_2(cdiv(BT, inc_factor)), min(chunk_size, BT). */
double est_liger_flce_chunk_rows(double T, double h, double V) {
    if (!(T >= 1) || !(h >= 1) || !(V >= 1)) return 1;
    const double rows = ceil(T / ceil(V / h));
    double chunk = 1;
    while (chunk < rows) chunk *= 2;
    return fmin(chunk, T);
}

/* The host waits for the device (timing.c, est_pipeline_unit_s). */
static void host_sync(est_step *st, double extra_ops) {
    est_event *e = est_step_add(st, EST_EV_HOST);
    if (e) {
        e->u.host.waits = true;
        e->u.host.extra_ops = extra_ops;
    }
}

/* True when the head's weight gradient is made: full fine-tuning, or a
 * trained copy of the head beside a frozen base (PEFT modules_to_save). */
static bool head_trains(const est_run *run) {
    return !est_peft_on(run) || (run->modules_to_save & EST_SAVE_HEAD);
}

/* One chunk of `rows` rows, v0.8.5's loop body, under the head weight's
 * bytes wb (fp32 under autocast over fp32 weights, else the compute dtype c)
 * and the hidden states' rb:
 *  - logits_chunk = _input_chunk @ weight.t(): under autocast matmul casts
 *    both operands; weight.t() is a view, which autocast's cast cache skips
 *    (aten/src/ATen/autocast_mode.cpp cached_cast: is_leaf && !is_view), so
 *    the whole V x h weight is cast again in every chunk (wb + c per
 *    element), and the input chunk (rb + c). Without autocast (or with
 *    matching dtypes, _can_use_mm_out) torch.mm writes into one reused buffer.
 *  - liger_cross_entropy_kernel in place on the rows x V logits in c: an
 *    online-softmax pass reading the row, a second reading it again and
 *    writing the gradient: 3 c per logit, one launch;
 *  - loss_1d[start:end] = slice: a copy of rows fp32 values;
 *  - grad_input[start:end] = grad_logits_chunk @ weight (autocast's cached
 *    cast of the leaf weight, made once per step below): the product in c,
 *    copied into the rb gradient (torch.mm(out=) without a copy when
 *    _can_use_mm_out);
 *  - torch.addmm(grad_weight, grad_logits.t(), input_chunk, out=grad_weight)
 *    (out_dtype=torch.float32 for an fp32 accumulator, torch >= 2.8): the
 *    V x h accumulator is read and written in wb, where the GEMM event counts
 *    one write in c; the input chunk is cast to c again first (autocast).
 * The extra accumulator traffic is priced as a memory op beside the GEMM
 * (serially: an upper bound when the GEMM is compute-bound, exact when it is
 * memory-bound, as every chunk of a small model is). Host: ~11 ATen ops per
 * chunk that launch nothing (slices, .t(), .contiguous() x2, setitem's
 * views), beside the kernels that stand for their own ops. */
static void flce_chunks(est_step *st, const est_run *run, double rows, double n, double h, double V, double c,
                        double rb, double wb) {
    const bool cast = wb > c; /* autocast over wider weights */
    const bool mm_out = !cast && rb == c;
    if (cast) est_step_memory_op(st, n * (V * h * (wb + c) + rows * h * (rb + c)), 2 * n);
    est_step_gemm(st, rows, h, V, c, n, n);
    est_step_memory_op(st, n * rows * V * 3 * c, n);
    est_step_memory_op(st, n * rows * 8, n);
    est_step_gemm(st, rows, V, h, c, n, n);
    if (!mm_out) est_step_memory_op(st, n * rows * h * (c + rb), n);
    if (head_trains(run)) {
        est_step_gemm(st, V, rows, h, c, n, n);
        est_step_memory_op(st, n * V * h * (2 * wb - c), 0);
        if (cast) est_step_memory_op(st, n * rows * h * (rb + c), n);
    }
    est_event *e = est_step_add(st, EST_EV_HOST);
    if (e) e->u.host.extra_ops = 11 * n;
}

/* fused_linear_cross_entropy_forward, v0.8.5, once per step around the
 * chunks: zeros_like for grad_input (T x h, rb) and grad_weight (V x h, wb,
 * accum_dtype None), loss_1d (T fp32); target != ignore_index and its sum;
 * then `.item()` (the host waits for the device to finish the forward so
 * far); under autocast the cached bf16 copy of the leaf weight for
 * grad_input's matmul (wb + c per element); after the chunks torch.sum of
 * loss_1d. Priced with the chunks: the last chunk's rows may be fewer. */
bool est_work_liger_flce_forward(est_step *st, const est_run *run, double T, double h, double V, double c,
                                 double rb) {
    if (run->loss != EST_LOSS_CHUNKED || !est_fw_of(run)->torch_stack) return false;
    const double wb = rb > c ? rb : c; /* the head's weight: fp32 where the stream is (est_dtypes_of) */
    const double chunk = est_liger_flce_chunk_rows(T, h, V);
    const double full = floor(T / chunk), last = T - full * chunk;
    est_step_memory_op(st, T * h * rb + (head_trains(run) ? V * h * wb : 0) + T * 4, 3);
    est_step_memory_op(st, T * (8 + 1) + T, 2);
    host_sync(st, 0);
    if (wb > c) est_step_memory_op(st, V * h * (wb + c), 1);
    if (full > 0) flce_chunks(st, run, chunk, full, h, V, c, rb, wb);
    if (last > 0) flce_chunks(st, run, last, 1, h, V, c, rb, wb);
    est_step_memory_op(st, T * 4, 1);
    return true;
}

/* fused_linear_cross_entropy_backward, v0.8.5: torch.equal(grad_output,
 * torch.tensor(1.0, device=...)) copies the scalar to the device and reads
 * the answer back (a host sync, two launches); unless it is exactly 1,
 * element_mul_kernel scales grad_input and grad_weight in place (read and
 * write each, one launch each). It is 1 only for a mean loss without
 * accumulation on a stack before transformers 4.46; from 4.46 the loss is a
 * sum over num_items_in_batch (the same rule as the cross-entropy above). */
bool est_work_liger_flce_backward(est_step *st, const est_run *run, double T, double h, double V, double rb) {
    if (run->loss != EST_LOSS_CHUNKED || !est_fw_of(run)->torch_stack) return false;
    const double c = est_compute_dtype_bytes(run->precision);
    const double wb = rb > c ? rb : c;
    est_step_memory_op(st, 8, 2);
    host_sync(st, 0);
    const bool unit_grad = run->grad_accum == 1 && !(run->stack && run->stack->loss_shifts_labels);
    if (!unit_grad)
        est_step_memory_op(st, 2 * T * h * rb + (head_trains(run) ? 2 * V * h * wb : 0), head_trains(run) ? 2 : 1);
    return true;
}
