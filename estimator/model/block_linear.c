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
 * Adapter (peft 0.12-0.19 tuners/lora/layer.py Linear.forward):
 *   result = base(x); x = x.to(lora_A.weight.dtype)
 *   result = result + lora_B(lora_A(dropout(x))) * scaling
 *   result = result.to(result's dtype before the adapter)
 * and PEFT's other adapters on a Linear (peft.h): DoRA, LoRA-FA's frozen A,
 * IA3's scaling vector. */
#include <stdio.h>

#include "block_build.h"
#include "block_peft_vec.h"
#include "fp8.h"
#include "peft_delta.h"
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

/* PEFT's A (r, d_in; frozen under LoRA-FA unless re-enabled, est_lora_a_grad)
 * and B (d_out, r), `copies` of each (experts). */
static void lora_pair(est_bld *b, const char *stem, int64_t din, int64_t dout, int64_t copies, int t, int *la,
                      int *lb) {
    char name[EST_MOD_NAME];
    const int64_t r = b->run->lora.rank;
    snprintf(name, sizeof name, "%s.lora_A", stem);
    *la = est_module_param(b->m, name, r, din, EST_PK_ADAPTER, t, est_lora_a_grad(b->run),
                           b->g->adapter);
    b->m->params[EST_PARAM_INDEX(*la)].copies = copies;
    snprintf(name, sizeof name, "%s.lora_B", stem);
    *lb = est_module_param(b->m, name, dout, r, EST_PK_ADAPTER, t, true, b->g->adapter);
    b->m->params[EST_PARAM_INDEX(*lb)].copies = copies;
}

/* The adapters of Linear t (`stem`, input din, output dout): LoRA's A and B,
 * DoRA's magnitude vector, IA3's scaling vector (d_out, 1), or (1, d_in) on a
 * feed-forward module. */
static void adapter_params(est_bld *b, int t, const char *stem, int64_t din, int64_t dout, int64_t copies) {
    const est_run *run = b->run;
    const int ab = b->g->adapter;
    char name[EST_MOD_NAME];
    est_vec_params(b, t, stem, din, dout); /* AdaLoRA, VeRA, MiSS (block_peft_vec.c) */
    if (est_pdelta_on(run) && (run->pdelta.targets & EST_LORA_BIT(t)))
        est_pdelta_params(b, t, stem, din, dout); /* block_pdelta.c */
    if (run->peft == EST_PEFT_IA3 && (run->ia3_targets & EST_LORA_BIT(t))) {
        const bool ff = run->ia3_feedforward & EST_LORA_BIT(t);
        snprintf(name, sizeof name, "%s.ia3_l", stem);
        b->ia3[t] = est_module_param(b->m, name, ff ? 1 : dout, ff ? din : 1, EST_PK_ADAPTER, t, true, ab);
        b->m->params[EST_PARAM_INDEX(b->ia3[t])].copies = copies;
    }
    if (!est_lora_on(run) || !(run->lora.targets & EST_LORA_BIT(t))) return;
    lora_pair(b, stem, din, dout, copies, t, &b->lora_a[t], &b->lora_b[t]);
    if (run->lora.variant == EST_LORA_DORA) {
        snprintf(name, sizeof name, "%s.lora_magnitude", stem);
        b->dora_m[t] = est_module_param(b->m, name, dout, 1, EST_PK_ADAPTER, t, true, ab);
        b->m->params[EST_PARAM_INDEX(b->dora_m[t])].copies = copies;
    }
}

void est_block_linear_params(est_bld *b) {
    const ft_model *md = &b->run->model;
    const bool bias[EST_LORA_TARGET_COUNT] = {md->qkv_bias, md->qkv_bias, md->qkv_bias, md->o_bias,
                                              md->mlp_bias, md->mlp_bias, md->mlp_bias};
    for (int t = 0; t < EST_LORA_TARGET_COUNT; t++) {
        int64_t din, dout, E;
        b->base_param[t] = b->base_bias[t] = EST_NONE;
        b->lora_a[t] = b->lora_b[t] = b->dora_m[t] = b->ia3[t] = EST_NONE;
        b->vec[t][0] = b->vec[t][1] = b->vec[t][2] = b->vec[t][3] = EST_NONE;
        for (int k = 0; k < 4; k++) b->pdelta[t][k] = EST_NONE;
        if (!base_dims(md, (est_lora_target)t, &din, &dout, &E)) continue;
        if (t >= EST_LORA_GATE && est_moe_fused(b->run)) continue; /* block_moe.c */
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
        adapter_params(b, t, stem, din, dout, E);
    }
}

void est_adapter_params(est_bld *b, const char *stem, int64_t din, int64_t dout, int *la, int *lb) {
    lora_pair(b, stem, din, dout, 1, -1, la, lb);
}

/* bitsandbytes' quantized base: a dequantized weight per matmul. */
static int quant_linear(est_bld *b, const char *name, int x, int w, int64_t rows, int64_t din,
                        int64_t dout) {
    const int in_bytes = b->m->tensors[x].elem_bytes;
    if (b->run->quant == EST_QUANT_INT8) {
        /* MatMul8bitLt: saves its input; A.to(fp16), CA (int8), out32 (int32)
         * exist inside the forward; backward makes CB.to(dtype_A) for grad_x,
         * in the input's dtype (bitsandbytes 0.50.2 autograd/_functions.py:
         * CB = state.CB.to(ctx.dtype_A, copy=True).mul_(...)), fp32 on the
         * fp32 residual stream. */
        int y = est_op2(b, EST_OP_LINEAR, name, rows * dout, in_bytes, x, w);
        est_mop *o = &b->m->ops[b->m->n_ops - 1];
        o->saves[0] = b->m->tensors[x].requires_grad;
        o->forward_transient_bytes = rows * din * 3 + rows * dout * 4;
        o->backward_transient_bytes = din * dout * in_bytes;
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

/* The op just added is detached: its graph is dropped when the forward
 * drops its output, so it saves nothing and runs no backward (DoRA's
 * lora_weight, used only through .detach()). */
static void detach_last(est_bld *b) {
    est_mop *o = &b->m->ops[b->m->n_ops - 1];
    o->backward = o->saves_out = o->saves_out2 = false;
    for (int i = 0; i < o->n_in; i++) o->saves[i] = o->grad_in[i] = false;
    if (o->out >= 0) b->m->tensors[o->out].requires_grad = false;
}

/* DoRA (peft tuners/lora/dora.py DoraLinearLayer.forward, 0.14-0.19), on the
 * fp32 input xa and the base output y:
 *   lora_weight = lora_B(lora_A(eye(d_in))).T            (its graph unused: detached)
 *   weight_norm = ||W.to(fp32) + scaling * lora_weight||  per output row (detached)
 *   m = magnitude / weight_norm                           (dout)
 *   dora = (m - 1) * y + m * lora_B(lora_A(xa)) * scaling
 *   result = y + dora
 * The eye, lora_weight and W's fp32 copy live until the DoRA module returns;
 * the two products save y, the adapter output and m for the magnitude's
 * gradient, whose backward first forms a T x d_out product, then sums it. */
static int dora(est_bld *b, est_lora_target t, int xa, int y, int64_t din, int64_t dout) {
    const int64_t r = b->run->lora.rank, T = b->T;
    const int f = b->g->adapter;
    int eye = est_op1(b, EST_OP_COPY, "dora eye(d_in)", din * din, f, EST_NONE);
    int ae = est_linear_op(b, "dora lora_A(eye)", eye, b->lora_a[t], EST_NONE, din, din, r);
    detach_last(b);
    int lw = est_linear_op(b, "dora lora_weight", ae, b->lora_b[t], EST_NONE, din, r, dout);
    detach_last(b);
    int w32 = est_op1(b, EST_OP_CAST, "dora weight.to(fp32)", din * dout, f, (int)b->base_param[t]);
    int sw = est_op1(b, EST_OP_SCALAR, "dora scaling * lora_weight", din * dout, f, lw);
    int ws = est_op2(b, EST_OP_ADD, "dora W + scaling BA", din * dout, f, w32, sw);
    int norm = est_op1(b, EST_OP_REDUCE, "dora weight norm", dout, f, ws);
    int m = est_op2(b, EST_OP_MUL, "magnitude / weight_norm", dout, f, b->dora_m[t], norm);
    int a = est_linear_op(b, "lora_A", xa, b->lora_a[t], EST_NONE, T, din, r);
    int l = est_linear_op(b, "lora_B", a, b->lora_b[t], EST_NONE, T, r, dout);
    int m1 = est_op1(b, EST_OP_SCALAR, "m - 1", dout, f, m);
    int t1 = est_op2(b, EST_OP_MUL, "(m - 1) * base", T * dout, f, m1, y);
    b->m->ops[b->m->n_ops - 1].backward_transient_bytes = T * dout * f;
    int t2 = est_op2(b, EST_OP_MUL, "m * lora", T * dout, f, m, l);
    b->m->ops[b->m->n_ops - 1].backward_transient_bytes = T * dout * f;
    int t3 = est_op1(b, EST_OP_SCALAR, "* scaling", T * dout, f, t2);
    /* result + dora; the weight-norm branch's tensors are read here, so they
     * live as long as the DoRA module's locals do. */
    int16_t in[5] = {(int16_t)y, 0, (int16_t)eye, (int16_t)lw, (int16_t)w32};
    in[1] = (int16_t)est_op2(b, EST_OP_ADD, "dora", T * dout, f, t1, t3);
    return est_module_op(b->m, EST_OP_ADD, "base + dora", T * dout, f, 5, in);
}

/* PEFT's adapter (A la, B lb) on the base output `y` (input x, `rows` token
 * rows): plain LoRA (rsLoRA only changes the scaling; LoRA-FA's frozen A
 * saves nothing) or, on block Linear t, DoRA. */
static int adapter(est_bld *b, int t, int la, int lb, int x, int y, int64_t rows, int64_t din, int64_t dout) {
    const int64_t r = b->run->lora.rank;
    const int out_bytes = b->m->tensors[y].elem_bytes;
    /* PEFT's bitsandbytes layers (tuners/lora/bnb.py Linear4bit.forward and
     * Linear8bitLt.forward, peft 0.21.2) cast x to A's dtype only when
     * `requires_conversion = not torch.is_autocast_enabled()`: under autocast
     * x reaches lora_A as it is, so a compute-dtype x (o_proj's input, the
     * attention output) is read, and saved, by lora_A itself, and no fp32
     * copy is made. The plain Linear (layer.py) always casts. */
    const bool bnb_under_autocast = b->run->quant != EST_QUANT_NONE && r > 0 && b->g->autocast;
    int xa = bnb_under_autocast ? x : est_cast(b, "x.to(lora_A dtype)", x, b->g->adapter);
    if (b->run->lora.dropout > 0) {
        xa = est_op1(b, EST_OP_DROPOUT, "lora dropout", rows * din, b->m->tensors[xa].elem_bytes, xa);
        est_module_op_out2(b->m, "lora dropout mask", rows * din, 1);
    }
    int sum;
    if (t >= 0 && b->dora_m[t] != EST_NONE) {
        sum = dora(b, (est_lora_target)t, xa, y, din, dout);
    } else {
        int a = est_linear_op(b, "lora_A", xa, la, EST_NONE, rows, din, r);
        int bb = est_linear_op(b, "lora_B", a, lb, EST_NONE, rows, r, dout);
        const int ab = b->m->tensors[bb].elem_bytes;
        int sc = est_op1(b, EST_OP_SCALAR, "* scaling", rows * dout, ab, bb);
        /* result + adapter: type promotion to the wider of the two. */
        sum = est_op2(b, EST_OP_ADD, "base + adapter", rows * dout, ab > out_bytes ? ab : out_bytes, y, sc);
    }
    return est_cast(b, "result.to(dtype)", sum, out_bytes);
}

/* IA3 (peft tuners/ia3/layer.py Linear.forward, 0.14-0.19): ia3_scaling =
 * 1 * ia3_l.flatten() (fp32), then on a feed-forward module
 *   base((x.to(fp32) * ia3_scaling).to(x.dtype))
 * and on any other (base(x) * ia3_scaling).to(result dtype). The product
 * saves its tensor operand (the fp32 input, or the base output) for the
 * vector's gradient, whose backward forms that product before summing it. */
static int ia3_scale(est_bld *b, est_lora_target t, int x, int64_t width, bool feedforward) {
    const int f = b->g->adapter;
    const int xb = b->m->tensors[x].elem_bytes;
    int sc = est_op1(b, EST_OP_SCALAR, "ia3_scaling", width, f, b->ia3[t]);
    int x32 = feedforward ? est_cast(b, "ia3 x.to(fp32)", x, f) : x;
    int p = est_op2(b, EST_OP_MUL, feedforward ? "ia3 x * scaling" : "ia3 result * scaling", b->T * width,
                    f > xb ? f : xb, x32, sc);
    b->m->ops[b->m->n_ops - 1].backward_transient_bytes = b->T * width * f;
    return est_cast(b, "ia3 .to(dtype)", p, xb);
}

/* torchao's Float8Linear (fp8.h): under autocast its forward casts the input
 * to the autocast dtype itself (input.to(autocast_dtype): a new tensor, the
 * one saved) and reads the weight as it is held (no autocast cache: the
 * Function's fp8 casts replace it). matmul_with_hp_or_float8_args saves the
 * high-precision input and the weight whatever needs a gradient; its fp8
 * casts, scales, layout copies and rescales are the op's transients. The
 * bias is added after the GEMM (output + bias.to(output.dtype)), taken here
 * as addmm's fused add. */
static int fp8_linear(est_bld *b, const char *name, int x, int w, int bias, int64_t rows, int64_t din,
                      int64_t dout) {
    if (b->g->autocast) x = est_cast(b, "autocast input", x, b->g->act);
    int16_t in[3] = {(int16_t)x, (int16_t)w, (int16_t)bias};
    int y = est_module_op(b->m, EST_OP_LINEAR, name, rows * dout, b->m->tensors[x].elem_bytes,
                          bias != EST_NONE ? 3 : 2, in);
    est_module_op_gemm(b->m, (double)rows, (double)din, (double)dout, 1);
    est_mop *o = &b->m->ops[b->m->n_ops - 1];
    if (est_fp8_gathers_weight(b->run, dout, din)) { /* FSDP2 handed it over in fp8 */
        o->forward_transient_bytes = est_fp8_gathered_forward_transient_bytes(rows, din, dout);
        o->backward_transient_bytes = est_fp8_gathered_backward_transient_bytes(rows, din, dout);
        return y;
    }
    o->forward_transient_bytes = est_fp8_forward_transient_bytes(b->run->fp8, rows, din, dout);
    o->backward_transient_bytes = est_fp8_backward_transient_bytes(b->run->fp8, rows, din, dout);
    return y;
}

/* The frozen or trained base Linear: bitsandbytes quantizes every frozen
 * Linear of a LoRA base; --fp8 runs it as Float8Linear. */
static int base_linear(est_bld *b, const char *name, int x, int w, int bias, int64_t rows, int64_t din,
                       int64_t dout) {
    if (est_fp8_converts(b->run, din, dout)) return fp8_linear(b, name, x, w, bias, rows, din, dout);
    return b->run->quant != EST_QUANT_NONE && b->run->lora.rank > 0 ? quant_linear(b, name, x, w, rows, din, dout)
                                                                    : est_linear_op(b, name, x, w, bias, rows, din, dout);
}

int est_linear_adapted(est_bld *b, const char *name, int x, int w, int bias, int la, int lb, int64_t rows,
                       int64_t din, int64_t dout) {
    int y = base_linear(b, name, x, w, bias, rows, din, dout);
    if (la != EST_NONE) y = adapter(b, -1, la, lb, x, y, rows, din, dout);
    return y;
}

int est_block_linear(est_bld *b, est_lora_target t, const char *name, int x) {
    int64_t din, dout, copies;
    base_dims(&b->run->model, t, &din, &dout, &copies);
    const int w = (int)b->base_param[t], bias = (int)b->base_bias[t];
    const bool ia3 = b->ia3[t] != EST_NONE, ff = ia3 && (b->run->ia3_feedforward & EST_LORA_BIT(t));
    if (ff) x = ia3_scale(b, t, x, din, true);
    if (est_vec_replaces_base(b, t)) return est_vec_bat_linear(b, t, x, din, dout); /* MiSS "bat" */
    const int x_in = x;
    x = est_pdelta_input(b, t, x, din); /* OFT's rotation */
    int y = base_linear(b, name, x, w, bias, b->T, din, dout);
    y = est_pdelta_output(b, t, x_in, y, din, dout); /* LoHa, LoKr, FourierFT */
    y = est_vec_adapter(b, t, x_in, y, din, dout);  /* AdaLoRA, VeRA, MiSS */
    if (ia3 && !ff) {
        /* the scaling vector is made before the base runs; its order does not
         * change what is alive at any peak (a d_out vector) */
        y = ia3_scale(b, t, y, dout, false);
    }
    if (b->lora_a[t] != EST_NONE) y = adapter(b, t, b->lora_a[t], b->lora_b[t], x, y, b->T, din, dout);
    return y;
}
