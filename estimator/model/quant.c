#include "quant.h"

#include "fw_registry.h"
#include "json_util.h"
#include "lora.h"

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t est_quant_matrix_bytes(const est_run *run, int64_t n, int64_t d_out) {
    switch (run->quant) {
    case EST_QUANT_NF4: {
        /* Two 4-bit codes per byte, then the block constants. */
        int64_t blocks = ceil_div(n, EST_NF4_BLOCK);
        int64_t constants = run->double_quant
                                ? blocks + ceil_div(blocks, EST_NF4_DQ_BLOCK) * 4 + 4
                                : blocks * 4;
        return ceil_div(n, 2) + constants;
    }
    case EST_QUANT_INT8:
        /* Int8Params: int8 codes CB plus one fp32 scale per output row (SCB). */
        return n + d_out * 4;
    case EST_QUANT_NONE: break;
    }
    return n * est_compute_dtype_bytes(run->precision);
}

/* prepare_model_for_kbit_training (peft 0.13 utils/other.py) casts the
 * parameters left unquantized to fp32 (so the residual stream is fp32 too,
 * hf_modeling.c est_dtypes_of); sharded QLoRA skips it. */
static int64_t unquantized_bytes(const est_run *run) {
    if (run->quant != EST_QUANT_NONE && est_fw_of(run)->kbit_prepare_fp32) return 4;
    return est_compute_dtype_bytes(run->precision);
}

int64_t est_frozen_base_bytes(const est_run *run, const est_params *p) {
    const int64_t c = unquantized_bytes(run);
    int64_t linear_elems = 0, linear_bytes = 0;
    for (int t = 0; t < EST_LORA_TARGET_COUNT; t++) {
        int64_t din, dout, copies; /* a mixture of experts: E routed experts' Linears */
        est_adapter_shape(&run->model, (est_lora_target)t, &din, &dout, &copies);
        if (run->model.fused_qkv || run->model.fused_gate_up) { /* the same weights, split by target */
            est_linear_shape(&run->model, (est_lora_target)t, &din, &dout);
            copies = 1;
        }
        linear_elems += din * dout * copies;
        linear_bytes += est_quant_matrix_bytes(run, din * dout, dout) * copies;
    }
    /* The router and Qwen2-MoE's shared expert are bitsandbytes Linears too
     * (block_moe.c): h -> E, and h -> f_s, h -> f_s, f_s -> h, h -> 1. */
    const ft_model *m = &run->model;
    const int64_t h = m->hidden_size, fs = m->shared_expert_intermediate_size;
    const int64_t extra[5][2] = {{h, m->num_experts}, {h, fs}, {h, fs}, {fs, h}, {h, fs > 0 ? 1 : 0}};
    for (int i = 0; m->num_experts > 0 && i < 5; i++) {
        if (extra[i][0] <= 0 || extra[i][1] <= 0) continue;
        linear_elems += extra[i][0] * extra[i][1];
        linear_bytes += est_quant_matrix_bytes(run, extra[i][0] * extra[i][1], extra[i][1]);
    }
    const int64_t rest = p->total - p->layers * linear_elems; /* embedding, head, norms, biases */
    return rest * c + p->layers * linear_bytes;
}

int64_t est_quant_block_constants_bytes(const est_run *run) {
    if (run->quant == EST_QUANT_NONE) return 0;
    int64_t sum = 0;
    for (int t = 0; t < EST_LORA_TARGET_COUNT; t++) {
        int64_t din, dout;
        est_linear_shape(&run->model, (est_lora_target)t, &din, &dout);
        const int64_t n = din * dout;
        /* Everything but the codes: n/2 (nf4) or n (int8) bytes. */
        sum += est_quant_matrix_bytes(run, n, dout) - (run->quant == EST_QUANT_NF4 ? ceil_div(n, 2) : n);
    }
    return sum;
}

int64_t est_quant_compute_bytes(const est_run *run) {
    switch (run->quant_compute) {
    case EST_CDT_BF16:
    case EST_CDT_FP16: return 2;
    case EST_CDT_FP32: return 4;
    case EST_CDT_AUTO: break;
    }
    return est_compute_dtype_bytes(run->precision);
}

/* Largest d_in * d_out and largest activation footprint among the block's linears. */
static void largest_linear(const est_run *run, int64_t *weight, int64_t *int8_fwd) {
    const int64_t T = est_tokens(run);
    *weight = *int8_fwd = 0;
    for (int t = 0; t < EST_LORA_TARGET_COUNT; t++) {
        int64_t din, dout;
        est_linear_shape(&run->model, (est_lora_target)t, &din, &dout);
        if (din * dout > *weight) *weight = din * dout;
        /* MatMul8bitLt.forward: A.to(fp16) (2), its int8 codes CA (1), the
         * int32 product out32 (4) before int8_mm_dequant. */
        int64_t fwd = T * din * 3 + T * dout * 4;
        if (fwd > *int8_fwd) *int8_fwd = fwd;
    }
}

int64_t est_quant_forward_transient(const est_run *run) {
    int64_t w, int8_fwd;
    largest_linear(run, &w, &int8_fwd);
    switch (run->quant) {
    /* MatMul4Bit.forward: linear(A, dequantize_4bit(B).to(A.dtype).t()). */
    case EST_QUANT_NF4: return w * est_quant_compute_bytes(run);
    case EST_QUANT_INT8: return int8_fwd;
    case EST_QUANT_NONE: break;
    }
    return 0;
}

int64_t est_quant_backward_transient(const est_run *run) {
    int64_t w, int8_fwd;
    largest_linear(run, &w, &int8_fwd);
    switch (run->quant) {
    /* MatMul4Bit.backward: grad_A = grad_output @ dequantize_4bit(B).t();
     * MatMul8bitLt.backward: CB.to(dtype_A) * SCB / 127, then the matmul, in
     * the input's dtype (bitsandbytes 0.50.2): the residual stream's for the
     * largest (an MLP Linear, fed by the norm or the SwiGLU product). */
    case EST_QUANT_NF4: return w * est_quant_compute_bytes(run);
    case EST_QUANT_INT8: return w * unquantized_bytes(run);
    case EST_QUANT_NONE: break;
    }
    return 0;
}

int est_quant_validate(const est_run *run, char *err, size_t errlen) {
    if (run->quant == EST_QUANT_NONE) {
        if (run->quant_compute != EST_CDT_AUTO)
            return ft_errorf(err, errlen, "--compute-dtype applies to a quantized base (--quant)");
        return 0;
    }
    /* Pure bf16 QLoRA is what AnswerDotAI/fsdp_qlora's train.py runs by default
     * (--precision bf16; git 50efa1e, 2024-03-26, lines 521-524: torch_dtype and
     * compute_dtype bf16 with mp_policy None; 777: autocast is a nullcontext; 589:
     * Linear4bit(quant_type='nf4', quant_storage=torch_dtype)), and PEFT 0.10's
     * lora/layer.py update_layer puts the adapters in the base weight's bf16.
     * Modelled where nothing casts the unquantized parameters to fp32 (no
     * prepare_model_for_kbit_training: kbit_prepare_fp32) and the adapters are
     * bf16 (--lora-dtype bf16). */
    const bool pure_bf16 = run->precision == EST_PREC_BF16 && run->lora.base_dtype &&
                           !est_fw_of(run)->kbit_prepare_fp32;
    if (!est_has_master(run->precision) && !pure_bf16)
        return ft_errorf(err, errlen, "--quant %s is modelled under autocast (--precision bf16-mixed or "
                                      "fp16-mixed), or in pure bf16 with --lora-dtype bf16 under FSDP",
                         est_quant_name(run->quant));
    return 0;
}
