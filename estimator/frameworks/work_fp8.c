/* Work of Float8Linear (work_fp8.h), from torchao 0.19.0 torchao/float8/:
 * float8_linear.py (matmul_with_hp_or_float8_args), float8_utils.py
 * (tensor_to_amax, amax_to_scale, _round_scale_down_to_power_of_2,
 * to_fp8_saturated), float8_training_tensor.py (_ToFloat8ConstrFunc) and
 * float8_ops.py (preprocess_addmm, addmm_float8_unwrapped). Eager mode: each
 * torch op is one kernel that reads and writes its tensors in full. */
#include "work_fp8.h"

/* hp_tensor_to_float8_dynamic on n elements of hb bytes:
 *   tensor_to_amax: torch.abs(x) (read hb, write hb), max / amax over it
 *     (read hb);
 *   amax_to_scale: amax.to(float64), clamp, finfo.max / amax, .to(float32)
 *     (4 launches on a scalar or a row of scales); rowwise recipes round the
 *     scale down to a power of two (exp2(floor(log2(s))): 3 more);
 *   _ToFloat8ConstrFunc: x.to(float32) (read hb, write 4; no copy when x is
 *     fp32 already), * scale (read 4, write 4), to_fp8_saturated's clamp
 *     (read 4, write 4) and .to(float8) (read 4, write 1).
 * Per element: 3 hb + (hb + 4 unless fp32) + 8 + 8 + 5 bytes. */
double est_fp8_cast_bytes(double n, double hb, bool rowwise, double *kernels) {
    const bool upcast = hb != 4;
    if (kernels) *kernels = 2 + 4 + (rowwise ? 3 : 0) + (upcast ? 1 : 0) + 3;
    return n * (3 * hb + (upcast ? hb + 4 : 0) + 8 + 8 + 5);
}

double est_fp8_cast_bytes_fused(double n, double hb, double *kernels) {
    if (kernels) *kernels = 2;
    return n * (2 * hb + 1);
}

static void cast(est_step *st, const est_run *run, double n, double hb, bool rowwise) {
    double k;
    const double bytes = run->compiled ? est_fp8_cast_bytes_fused(n, hb, &k) : est_fp8_cast_bytes(n, hb, rowwise, &k);
    est_step_memory_op(st, bytes, k);
}

/* preprocess_addmm's layout copy of an fp8 operand (.contiguous()): read and
 * write n bytes; compiled, the cast kernel that made the operand writes this
 * second layout too (one more write, no launch of its own). */
static void layout_copy(est_step *st, const est_run *run, double n) {
    if (run->compiled) est_step_memory_op(st, n, 0);
    else est_step_memory_op(st, 2 * n, 1);
}

/* addmm_float8_unwrapped, rowwise scales without fast accumulation: the
 * tensorwise kernel, then output *= a_inv_scale * b_inv_scale, an fp32 M x N
 * outer product (write 4) multiplied into the c-byte output in place (read
 * c + 4, write c); compiled, one fused kernel reads and writes the output. */
static void rescale(est_step *st, const est_run *run, double M, double N, double c) {
    if (run->compiled) est_step_memory_op(st, M * N * 2 * c, 1);
    else est_step_memory_op(st, M * N * (4 + c + 4 + c), 2);
}

/* --fsdp-float8-all-gather (fsdp_utils.py fsdp_pre_all_gather with the scale
 * precompute_float8_dynamic_scale_for_fsdp left after the optimizer step, as
 * accelerate registers it): each gather casts this rank's shard (1/W of the
 * weight) with that scale: _ToFloat8ConstrFunc on the fp32 shard, no amax:
 * mul (read 4, write 4), clamp (read 4, write 4), .to(fp8) (read 4, write 1),
 * 21 bytes per element in 3 launches. The Linear then reads the gathered fp8
 * weight as it is: no cast of its own. The precompute itself (a foreach
 * amax over the shards and one all-reduce per step) is not priced. */
static void gathered_cast(est_step *st, const est_run *run, double n) {
    const double W = (double)est_run_world(run);
    const double shard = n / (W > 1 ? W : 1);
    if (run->compiled) est_step_memory_op(st, shard * 5, 1); /* fused: read 4, write 1 */
    else est_step_memory_op(st, shard * 21, 3);
}

/* Forward, every recipe: cast the input and the weight (the input rowwise
 * unless tensorwise, the weight likewise), one fp8 GEMM (T, din, dout) with
 * fast accumulation (no rescale). */
static void forward(est_step *st, const est_run *run, double T, double din, double dout, double c, double wb) {
    const bool row = run->fp8 != EST_FP8_TENSORWISE;
    cast(st, run, T * din, c, row);
    if (run->fp8_all_gather) gathered_cast(st, run, din * dout);
    else cast(st, run, din * dout, wb, row);
    est_step_gemm(st, T, din, dout, 1, 1, 1);
}

/* Backward. tensorwise / rowwise: grad_output cast twice (for grad_input and
 * for grad_weight: the same config, two calls), the weight and the input cast
 * again, the weight^T copied for grad_input, grad_output^T and the input
 * copied for grad_weight, two fp8 GEMMs; rowwise rescales both outputs.
 * rowwise_with_gw_hp: grad_output cast once (rowwise), the weight once
 * (tensorwise), its copy, the fp8 grad_input GEMM and its rescale, and
 * grad_weight as a c-byte GEMM of the saved input and the incoming gradient. */
static void backward(est_step *st, const est_run *run, double T, double din, double dout, double c, double wb) {
    if (run->fp8 == EST_FP8_ROWWISE_GW_HP) {
        cast(st, run, T * dout, c, true);
        cast(st, run, din * dout, wb, false);
        layout_copy(st, run, din * dout);
        est_step_gemm(st, T, dout, din, 1, 1, 1);
        rescale(st, run, T, din, c);
        est_step_gemm(st, dout, T, din, c, 1, 1);
        return;
    }
    const bool row = run->fp8 == EST_FP8_ROWWISE;
    cast(st, run, T * dout, c, row);
    if (run->fp8_all_gather) gathered_cast(st, run, din * dout); /* the backward's own gather */
    else cast(st, run, din * dout, wb, row);
    layout_copy(st, run, din * dout);
    est_step_gemm(st, T, dout, din, 1, 1, 1);
    cast(st, run, T * dout, c, row);
    cast(st, run, T * din, c, row);
    layout_copy(st, run, T * dout);
    layout_copy(st, run, T * din);
    est_step_gemm(st, dout, T, din, 1, 1, 1);
    if (row) {
        rescale(st, run, T, din, c);
        rescale(st, run, dout, din, c);
    }
}

void est_work_fp8_linear(est_step *st, const est_run *run, double T, double din, double dout, double c,
                         double wb, bool backward_pass) {
    if (backward_pass) backward(st, run, T, din, dout, c, wb);
    else forward(st, run, T, din, dout, c, wb);
}
