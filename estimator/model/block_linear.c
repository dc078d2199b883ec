/* A decoder block's Linears: the base layer as the regime runs it, and PEFT's
 * LoRA adapter around it.
 *
 * Base layer:
 *  - module cast / fp32: F.linear(x, W, b) on the resident weight;
 *  - autocast: autocast casts x (a new tensor per call, saved by the matmul
 *    for the weight gradient) and the weight (cached for the forward, saved
 *    for the input gradient) to the compute dtype;
 *  - bitsandbytes NF4 (Linear4bit, bnb 0.44-0.45): x.to(compute_dtype), then
 *    MatMul4Bit: linear(x, dequantize_4bit(W).to(x.dtype).t()); it saves
 *    only the quantized weight (ctx.tensors = (None, B)); the output goes back
 *    to the input's dtype; its backward dequantizes again for grad_x;
 *  - LLM.int8 (Linear8bitLt, MatMul8bitLt): saves its input whenever that
 *    input needs a gradient; its forward holds the input's fp16 copy, its int8
 *    codes and the int32 product (docs/method.md, "QLoRA").
 * Adapter (peft 0.12-0.14 tuners/lora/layer.py Linear.forward):
 *   result = base(x); x = x.to(lora_A.weight.dtype)
 *   result = result + lora_B(lora_A(dropout(x))) * scaling
 *   result = result.to(result's dtype before the adapter) */
#include <stdio.h>

#include "block_build.h"
#include "quant.h"

static const char *const LINEAR_NAMES[EST_LORA_TARGET_COUNT] = {
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};

/* The weight of target t as the model holds it: its own shape, Phi-3's
 * fused qkv_proj in the q slot and gate_up_proj in the gate slot (nothing in
 * the k, v and up slots), or one routed expert's (est_adapter_shape). */
static bool base_dims(const ft_model *md, est_lora_target t, int64_t *din, int64_t *dout, int64_t *copies) {
    est_adapter_shape(md, t, din, dout, copies);
    return *din > 0;
}

/* PEFT's A (r, d_in) and B (d_out, r), `copies` of each (experts). */
static void adapter_params(est_bld *b, const char *stem, int64_t din, int64_t dout, int64_t copies, int t,
                           int *la, int *lb) {
    char name[EST_MOD_NAME];
    const int64_t r = b->run->lora.rank;
    snprintf(name, sizeof name, "%s.lora_A", stem);
    *la = est_module_param(b->m, name, r, din, EST_PK_ADAPTER, t, true, b->g->adapter);
    b->m->params[EST_PARAM_INDEX(*la)].copies = copies;
    snprintf(name, sizeof name, "%s.lora_B", stem);
    *lb = est_module_param(b->m, name, dout, r, EST_PK_ADAPTER, t, true, b->g->adapter);
    b->m->params[EST_PARAM_INDEX(*lb)].copies = copies;
}

void est_block_linear_params(est_bld *b) {
    const ft_model *md = &b->run->model;
    const bool bias[EST_LORA_TARGET_COUNT] = {md->qkv_bias, md->qkv_bias, md->qkv_bias, md->o_bias,
                                              md->mlp_bias, md->mlp_bias, md->mlp_bias};
    const bool lora = b->run->lora.rank > 0;
    for (int t = 0; t < EST_LORA_TARGET_COUNT; t++) {
        int64_t din, dout, E;
        b->base_param[t] = b->base_bias[t] = EST_NONE;
        b->lora_a[t] = b->lora_b[t] = EST_NONE;
        if (!base_dims(md, (est_lora_target)t, &din, &dout, &E)) continue;
        const char *stem = md->fused_qkv && t == EST_LORA_Q ? "qkv_proj"
                           : md->fused_gate_up && t == EST_LORA_GATE ? "gate_up_proj"
                                                                    : LINEAR_NAMES[t];
        char name[EST_MOD_NAME];
        snprintf(name, sizeof name, "%s.weight", stem);
        b->base_param[t] = est_module_param(b->m, name, dout, din, EST_PK_LINEAR_WEIGHT, t,
                                            b->g->train_base, b->g->weight);
        b->m->params[EST_PARAM_INDEX(b->base_param[t])].copies = E;
        if (bias[t]) {
            snprintf(name, sizeof name, "%s.bias", stem);
            b->base_bias[t] = est_module_param(b->m, name, dout, 1, EST_PK_LINEAR_BIAS, t,
                                               b->g->train_base, b->g->weight);
            b->m->params[EST_PARAM_INDEX(b->base_bias[t])].copies = E;
        }
        if (lora && (b->run->lora.targets & EST_LORA_BIT(t)))
            adapter_params(b, stem, din, dout, E, t, &b->lora_a[t], &b->lora_b[t]);
    }
}

void est_adapter_params(est_bld *b, const char *stem, int64_t din, int64_t dout, int *la, int *lb) {
    adapter_params(b, stem, din, dout, 1, -1, la, lb);
}

/* A weight operand as the matmul reads it: autocast's cached cast. */
static int weight_as_read(est_bld *b, int w, const char *name) {
    if (w == EST_NONE || !b->g->autocast) return w;
    const est_mparam *p = &b->m->params[EST_PARAM_INDEX(w)];
    if (p->elem_bytes == b->g->act) return w;
    int t = est_op1(b, EST_OP_CAST, name, p->rows * p->cols * p->copies, b->g->act, w);
    est_module_tensor_role(b->m, t, EST_ROLE_WEIGHT, false);
    /* autocast's cached_cast keeps casts of leaf weights that require grad,
     * grad mode or not (aten/src/ATen/autocast_mode.cpp). */
    if (t >= 0 && p->trainable) b->m->tensors[t].autocast_cached = true;
    return t;
}

/* F.linear(x, W, bias) under the regime, on `rows` token rows. */
static int plain_linear(est_bld *b, const char *name, int x, int w, int bias, int64_t rows,
                        int64_t din, int64_t dout) {
    const int c = b->g->act;
    if (b->g->autocast) x = est_cast(b, "autocast input", x, c);
    char wn[EST_MOD_NAME];
    snprintf(wn, sizeof wn, "%s (cast)", name);
    int16_t in[3] = {(int16_t)x, (int16_t)weight_as_read(b, w, wn), (int16_t)EST_NONE};
    int n = 2;
    if (bias != EST_NONE) in[n++] = (int16_t)weight_as_read(b, bias, wn);
    const int out_bytes = b->g->autocast ? c : b->m->tensors[x].elem_bytes;
    int y = est_module_op(b->m, EST_OP_LINEAR, name, rows * dout, out_bytes, n, in);
    est_module_op_gemm(b->m, (double)rows, (double)din, (double)dout, 1);
    return y;
}

/* bitsandbytes' quantized base: a dequantized weight per matmul. */
static int quant_linear(est_bld *b, const char *name, int x, int w, int64_t rows, int64_t din,
                        int64_t dout) {
    const int in_bytes = b->m->tensors[x].elem_bytes;
    if (b->run->quant == EST_QUANT_INT8) {
        /* MatMul8bitLt: saves its input; A.to(fp16), CA (int8), out32 (int32)
         * exist inside the forward; backward makes CB.to(dtype_A) for grad_x. */
        int y = est_op2(b, EST_OP_LINEAR, name, rows * dout, in_bytes, x, w);
        est_mop *o = &b->m->ops[b->m->n_ops - 1];
        o->saves[0] = b->m->tensors[x].requires_grad;
        o->forward_transient_bytes = rows * din * 3 + rows * dout * 4;
        o->backward_transient_bytes = din * dout * est_compute_dtype_bytes(b->run->precision);
        est_module_op_gemm(b->m, (double)rows, (double)din, (double)dout, 1);
        return y;
    }
    const int cd = (int)est_quant_compute_bytes(b->run);
    int xc = est_cast(b, "x.to(compute_dtype)", x, cd);
    int wd = est_op1(b, EST_OP_DEQUANT, "dequantized weight", din * dout, cd, w);
    est_module_tensor_role(b->m, wd, EST_ROLE_WEIGHT, false);
    int y = est_op2(b, EST_OP_LINEAR, name, rows * dout, cd, xc, wd);
    est_module_op_gemm(b->m, (double)rows, (double)din, (double)dout, 1);
    /* MatMul4Bit saves no activation; its backward dequantizes again. */
    est_mop *o = &b->m->ops[b->m->n_ops - 1];
    o->saves[0] = o->saves[1] = false;
    o->backward_transient_bytes = din * dout * cd;
    return est_cast(b, "out.to(input dtype)", y, in_bytes);
}

int est_linear_rows(est_bld *b, const char *name, int x, int w, int64_t rows, int64_t din,
                    int64_t dout) {
    return plain_linear(b, name, x, w, EST_NONE, rows, din, dout);
}

/* PEFT's adapter on the base output `y` (input x, `rows` token rows). */
static int adapter(est_bld *b, int la, int lb, int x, int y, int64_t rows, int64_t din, int64_t dout) {
    const int64_t r = b->run->lora.rank;
    const int out_bytes = b->m->tensors[y].elem_bytes;
    int xa = est_cast(b, "x.to(lora_A dtype)", x, b->g->adapter);
    if (b->run->lora.dropout > 0) {
        xa = est_op1(b, EST_OP_DROPOUT, "lora dropout", rows * din, b->m->tensors[xa].elem_bytes, xa);
        est_module_op_out2(b->m, "lora dropout mask", rows * din, 1);
    }
    int a = plain_linear(b, "lora_A", xa, la, EST_NONE, rows, din, r);
    int bb = plain_linear(b, "lora_B", a, lb, EST_NONE, rows, r, dout);
    const int ab = b->m->tensors[bb].elem_bytes;
    int sc = est_op1(b, EST_OP_SCALAR, "* scaling", rows * dout, ab, bb);
    /* result + adapter: type promotion to the wider of the two. */
    int sum = est_op2(b, EST_OP_ADD, "base + adapter", rows * dout, ab > out_bytes ? ab : out_bytes, y, sc);
    return est_cast(b, "result.to(dtype)", sum, out_bytes);
}

int est_linear_adapted(est_bld *b, const char *name, int x, int w, int bias, int la, int lb, int64_t rows,
                       int64_t din, int64_t dout) {
    /* bitsandbytes quantizes every frozen Linear of a LoRA base */
    int y = b->run->quant != EST_QUANT_NONE && b->run->lora.rank > 0
                ? quant_linear(b, name, x, w, rows, din, dout)
                : plain_linear(b, name, x, w, bias, rows, din, dout);
    if (la != EST_NONE) y = adapter(b, la, lb, x, y, rows, din, dout);
    return y;
}

int est_block_linear(est_bld *b, est_lora_target t, const char *name, int x) {
    int64_t din, dout, copies;
    base_dims(&b->run->model, t, &din, &dout, &copies);
    return est_linear_adapted(b, name, x, (int)b->base_param[t], (int)b->base_bias[t], b->lora_a[t], b->lora_b[t],
                              b->T, din, dout);
}
