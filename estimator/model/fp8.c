/* FP8 linears (fp8.h; docs/method.md, "FP8 linears"). */
#include "fp8.h"

#include <string.h>

#include "fw_registry.h"
#include "lora.h"
#include "peft.h"
#include "str_util.h"

static const char *const NAMES[] = {"none", "tensorwise", "rowwise", "rowwise-gw-hp"};

const char *est_fp8_name(est_fp8 f) {
    return (unsigned)f < sizeof NAMES / sizeof NAMES[0] ? NAMES[f] : "?";
}

int est_fp8_parse(const char *s, est_fp8 *out, char *err, size_t errlen) {
    for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++)
        if (s && !strcmp(s, NAMES[i])) {
            *out = (est_fp8)i;
            return 0;
        }
    if (s && !strcmp(s, "rowwise_with_gw_hp")) { /* torchao's own spelling */
        *out = EST_FP8_ROWWISE_GW_HP;
        return 0;
    }
    return ft_errorf(err, errlen, "--fp8 must be none, tensorwise, rowwise or rowwise-gw-hp (got \"%s\")",
                     s ? s : "");
}

bool est_fp8_converts(const est_run *run, int64_t din, int64_t dout) {
    return run->fp8 != EST_FP8_NONE && din % 16 == 0 && dout % 16 == 0;
}

static int validate_all_gather(const est_run *run, char *err, size_t errlen);

int est_fp8_validate(const est_run *run, char *err, size_t errlen) {
    if (run->fp8 == EST_FP8_NONE) {
        if (run->fp8_all_gather) return ft_errorf(err, errlen, "--fsdp-float8-all-gather needs --fp8 tensorwise");
        return 0;
    }
    if (validate_all_gather(run, err, errlen) < 0) return -1;
    if (!(run->gpu.fp8_tflops > 0))
        return ft_errorf(err, errlen, "--fp8: %s has no FP8 tensor cores (Ada, Hopper and Blackwell do)",
                         run->gpu.name);
    if (est_fw_models(run, EST_FEAT_FP8, NULL, err, errlen) < 0) return -1;
    if (run->precision != EST_PREC_BF16_MIXED && run->precision != EST_PREC_BF16)
        return ft_errorf(err, errlen, "--fp8 is modelled over bf16 compute (--precision bf16-mixed or bf16)");
    if (est_lora_on(run) || est_peft_on(run) || run->quant != EST_QUANT_NONE)
        return ft_errorf(err, errlen, "--fp8 with LoRA or PEFT (Float8Linear on a frozen base) is not modelled");
    if (run->model.num_experts > 0)
        return ft_errorf(err, errlen, "--fp8 on a mixture-of-experts model is not modelled");
    return 0;
}

/* --fsdp-float8-all-gather: Float8LinearConfig.__post_init__ allows it with a
 * tensorwise weight cast only; fsdp_utils.py WeightWithDynamicFloat8CastTensor
 * implements FSDP2's fsdp_pre_all_gather / fsdp_post_all_gather. */
static int validate_all_gather(const est_run *run, char *err, size_t errlen) {
    if (!run->fp8_all_gather) return 0;
    if (run->fp8 != EST_FP8_TENSORWISE)
        return ft_errorf(err, errlen, "--fsdp-float8-all-gather needs --fp8 tensorwise (torchao gathers "
                                      "tensorwise-scaled weights only)");
    if (est_fw_models(run, EST_FEAT_FP8_ALL_GATHER, NULL, err, errlen) < 0) return -1;
    if (run->fsdp_version != EST_FSDP2 || run->zero_stage < 2)
        return ft_errorf(err, errlen, "--fsdp-float8-all-gather is FSDP2's (--fsdp-version 2, sharded: --zero 2 or 3)");
    return 0;
}

bool est_fp8_gathers_weight(const est_run *run, int64_t rows, int64_t cols) {
    return run->fp8_all_gather && est_fp8_converts(run, cols, rows);
}

int64_t est_fp8_block_weight_elems(const est_run *run) {
    int64_t n = 0;
    for (int t = 0; t < EST_LORA_TARGET_COUNT; t++) {
        int64_t din, dout;
        est_linear_shape(&run->model, (est_lora_target)t, &din, &dout);
        if (din > 0 && dout > 0 && est_fp8_converts(run, din, dout)) n += din * dout;
    }
    return n;
}

static int64_t max2(int64_t a, int64_t b) { return a > b ? a : b; }

/* One fp8 operand of n elements and its scale: one fp32 for a tensorwise
 * cast, one per row (or column) for an axiswise one. */
static int64_t fp8_operand(int64_t n, int64_t scales) { return n + 4 * scales; }

/* Forward (matmul_with_hp_or_float8_args.forward, every recipe): the input's
 * cast (peak 9 bytes per element), then the weight's with the input's fp8
 * copy alive, then torch._scaled_mm on both (the row-major input and the
 * column-major weight^T need no layout copy; the output GEMM runs with fast
 * accumulation, so a rowwise recipe's output needs no fp32 rescale). */
int64_t est_fp8_forward_transient_bytes(est_fp8 f, int64_t T, int64_t din, int64_t dout) {
    if (f == EST_FP8_NONE) return 0;
    const bool row = f != EST_FP8_TENSORWISE;
    const int64_t x8 = fp8_operand(T * din, row ? T : 1);
    const int64_t w8 = fp8_operand(din * dout, row ? dout : 1);
    int64_t peak = EST_FP8_CAST_PEAK_BYTES_PER_ELEM * T * din;
    peak = max2(peak, x8 + EST_FP8_CAST_PEAK_BYTES_PER_ELEM * din * dout);
    return max2(peak, x8 + w8);
}

/* Backward, tensorwise and rowwise: grad_output cast for grad_input (go0),
 * the weight cast again (w), grad_input = go0 @ w^T (preprocess_addmm copies
 * the row-major w^T to column-major: din x dout; a rowwise GEMM without fast
 * accumulation runs tensorwise and rescales by an fp32 T x din outer product
 * of the scales), grad_output cast again for grad_weight (go1), the input cast
 * again (x), grad_weight = go1^T @ x (go1^T and x copied to the layouts
 * _scaled_mm takes; rowwise: the fp32 d_out x d_in rescale). The casts stay
 * referenced by the backward's locals until it returns. */
static int64_t backward_fp8_gw(bool row, int64_t T, int64_t din, int64_t dout) {
    const int64_t k = EST_FP8_CAST_PEAK_BYTES_PER_ELEM;
    const int64_t go0 = fp8_operand(T * dout, row ? T : 1), w = fp8_operand(din * dout, row ? din : 1);
    const int64_t go1 = fp8_operand(T * dout, row ? dout : 1), x = fp8_operand(T * din, row ? din : 1);
    int64_t peak = k * T * dout;
    peak = max2(peak, go0 + k * din * dout);
    peak = max2(peak, go0 + w + din * dout + (row ? 4 * T * din : 0));
    peak = max2(peak, go0 + w + k * T * dout);
    peak = max2(peak, go0 + w + go1 + k * T * din);
    return max2(peak, go0 + w + go1 + x + T * dout + T * din + (row ? 4 * dout * din : 0));
}

/* rowwise_with_gw_hp: grad_output cast rowwise (go0), the weight cast
 * tensorwise, grad_input rowwise x tensorwise (the tensorwise scale repeated,
 * then the fp32 T x din rescale), grad_weight in high precision from the
 * saved input and the incoming gradient (no cast, no copy). */
static int64_t backward_gw_hp(int64_t T, int64_t din, int64_t dout) {
    const int64_t k = EST_FP8_CAST_PEAK_BYTES_PER_ELEM;
    const int64_t go0 = fp8_operand(T * dout, T), w = fp8_operand(din * dout, 1);
    int64_t peak = k * T * dout;
    peak = max2(peak, go0 + k * din * dout);
    return max2(peak, go0 + w + din * dout + 4 * T * din);
}

/* Forward with the weight gathered in fp8: the input's cast, then the GEMM
 * beside the input's fp8 copy. */
int64_t est_fp8_gathered_forward_transient_bytes(int64_t T, int64_t din, int64_t dout) {
    (void)dout;
    return max2(EST_FP8_CAST_PEAK_BYTES_PER_ELEM * T * din, fp8_operand(T * din, 1));
}

/* Backward with the weight gathered in fp8 (tensorwise): as
 * backward_fp8_gw without the weight's cast and with the weight FSDP's; the
 * layout copy of W^T for grad_input stays. */
int64_t est_fp8_gathered_backward_transient_bytes(int64_t T, int64_t din, int64_t dout) {
    const int64_t k = EST_FP8_CAST_PEAK_BYTES_PER_ELEM;
    const int64_t go0 = fp8_operand(T * dout, 1), go1 = go0, x = fp8_operand(T * din, 1);
    int64_t peak = k * T * dout;
    peak = max2(peak, go0 + din * dout);
    peak = max2(peak, go0 + k * T * dout);
    peak = max2(peak, go0 + go1 + k * T * din);
    return max2(peak, go0 + go1 + x + T * dout + T * din);
}

int64_t est_fp8_backward_transient_bytes(est_fp8 f, int64_t T, int64_t din, int64_t dout) {
    switch (f) {
    case EST_FP8_NONE: return 0;
    case EST_FP8_TENSORWISE: return backward_fp8_gw(false, T, din, dout);
    case EST_FP8_ROWWISE: return backward_fp8_gw(true, T, din, dout);
    case EST_FP8_ROWWISE_GW_HP: return backward_gw_hp(T, din, dout);
    }
    return 0;
}
