/* The fused kernels of --kernels as ops of the decoder block.
 *
 * Each custom autograd Function is built from the ops it runs (their GEMM
 * shapes are the modeling code's), then est_module_function makes them one
 * backward node: nothing is saved but what its forward passes to
 * ctx.save_for_backward, which lives until the whole backward of the node is
 * over. The walker frees the gradient of each op's output after that op's
 * backward; a node holds them to its end (the engine's grad_outputs, its own
 * locals), so those freed before a later op of the node runs backward are
 * added to that op's backward transient: the peak inside the node's backward
 * is the kernel's.
 *
 * Sources: axolotl 0.18.0 src/axolotl/kernels/lora.py (LoRA_QKV, LoRA_O,
 * LoRA_MLP, matmul_lora), kernels/swiglu.py and geglu.py (the activation's
 * backward in place); xformers csrc/swiglu/swiglu_packedw.cpp
 * (SwiGLUPackedWeights). docs/method.md, "Fused kernels", walks through each. */
#include "block_kernels.h"

#include "kernels.h"
#include "quant.h"

static int64_t bytes_of(const est_bld *b, int t) { return t >= 0 ? est_mtensor_bytes(&b->m->tensors[t]) : 0; }

/* lora.py matmul_lora: dtype = X.dtype; under autocast the matmul runs in
 * autocast's dtype (torch_amp_custom_fwd keeps the region). */
static int compute_bytes(const est_bld *b, int x) {
    return b->g->autocast ? b->g->act : b->m->tensors[x].elem_bytes;
}

/* The op just added runs outside autograd (inside the Function's forward):
 * no backward, no gradient. */
static void outside_autograd(est_bld *b) {
    est_mop *o = &b->m->ops[b->m->n_ops - 1];
    o->backward = o->saves_out = o->saves_out2 = false;
    for (int i = 0; i < o->n_in; i++) o->grad_in[i] = o->saves[i] = false;
    if (o->out >= 0) b->m->tensors[o->out].requires_grad = false;
}

/* Dropout is applied before the Function, once for all its projections
 * (apply_lora_qkv, apply_lora_mlp_swiglu, apply_lora_o: _apply_dropout). */
static int lora_input(est_bld *b, int x) {
    if (!(b->run->lora.dropout > 0)) return x;
    const est_mtensor *xt = &b->m->tensors[x];
    int xd = est_op1(b, EST_OP_DROPOUT, "lora dropout", xt->elems, xt->elem_bytes, x);
    est_module_op_out2(b->m, "lora dropout mask", xt->elems, 1);
    return xd;
}

/* matmul_lora(X, W, b, W_quant, A, B, s): W = dequantize(W.t(), W_quant) (a
 * whole dequantized copy of bitsandbytes' 4-bit base, deleted after the
 * matmul; a base in another dtype is cast by autocast for the matmul alone),
 * out = X @ W, out.addmm_(X_lora @ A, B) (X_lora @ A: a T x r tensor, built
 * as an op outside autograd). The backward dequantizes W again for grad_X;
 * its T x r products (grad @ B) are left out (r / d_out of a gradient). The
 * adapters are the op's operands, so their gradients are the op's. */
static int lora_proj(est_bld *b, est_lora_target t, const char *name, int x, int xl) {
    int64_t din, dout;
    est_linear_shape(&b->run->model, t, &din, &dout);
    const int c = compute_bytes(b, x);
    const int64_t r = b->run->lora.rank, T = b->T;
    const est_mparam *w = &b->m->params[EST_PARAM_INDEX(b->base_param[t])];
    int64_t whole = 0;
    if (b->run->quant != EST_QUANT_NONE) whole = din * dout * est_quant_compute_bytes(b->run);
    else if (w->elem_bytes != c) whole = din * dout * c;
    int xa = est_op2(b, EST_OP_LINEAR, "X_lora @ A", T * r, c, xl, b->lora_a[t]);
    est_module_op_gemm(b->m, (double)T, (double)din, (double)r, 1);
    outside_autograd(b);
    /* the whole weight lives until the matmul's output exists (del W after it) */
    int wd = (int)b->base_param[t];
    if (whole > 0) {
        wd = est_op1(b, b->run->quant != EST_QUANT_NONE ? EST_OP_DEQUANT : EST_OP_CAST, "dequantized weight",
                     din * dout, (int)(whole / (din * dout)), wd);
        outside_autograd(b);
        est_module_tensor_role(b->m, wd, EST_ROLE_WEIGHT, false);
    }
    int16_t in[5] = {(int16_t)x, (int16_t)wd, (int16_t)b->lora_a[t], (int16_t)b->lora_b[t], (int16_t)xa};
    int y = est_module_op(b->m, EST_OP_LINEAR, name, T * dout, c, 5, in);
    est_module_op_gemm(b->m, (double)T, (double)din, (double)dout, 1);
    est_mop *o = &b->m->ops[b->m->n_ops - 1];
    o->backward_transient_bytes = whole;
    if (xl != x) o->grad_in[4] = false; /* X_drop's gradient: from the projection op itself */
    return y;
}

/* save_for_backward's A.to(dtype), B.to(dtype): the adapters themselves when
 * they are held in the compute dtype, else new tensors. */
static int adapter_casts(est_bld *b, est_lora_target t, int c, int *saved, int n) {
    if (b->g->adapter == c) return n;
    const int ps[2] = {b->lora_a[t], b->lora_b[t]};
    for (int i = 0; i < 2; i++) {
        const est_mparam *p = &b->m->params[EST_PARAM_INDEX(ps[i])];
        int cast = est_op1(b, EST_OP_CAST, "adapter .to(dtype) (saved)", p->rows * p->cols * p->copies, c, ps[i]);
        outside_autograd(b);
        est_module_tensor_role(b->m, cast, EST_ROLE_WEIGHT, false);
        saved[n++] = cast;
    }
    return n;
}

/* LoRA_QKV.forward: Q, K, V = matmul_lora(X, q/k/v ...), then
 * save_for_backward(X, X_drop or X, qA, qB, kA, kB, vA, vB (.to(dtype)),
 * biases). Its backward holds the gradients of Q, K and V to its end. */
void est_kernel_lora_qkv(est_bld *b, int x, int *q, int *k, int *v) {
    const int xl = lora_input(b, x);
    const int first = b->m->n_ops;
    *q = lora_proj(b, EST_LORA_Q, "q_proj (LoRA_QKV)", x, xl);
    *k = lora_proj(b, EST_LORA_K, "k_proj (LoRA_QKV)", x, xl);
    *v = lora_proj(b, EST_LORA_V, "v_proj (LoRA_QKV)", x, xl);
    int saved[8], n = 0;
    saved[n++] = x;
    if (xl != x) saved[n++] = xl;
    const int c = b->m->tensors[*q].elem_bytes;
    for (int t = EST_LORA_Q; t <= EST_LORA_V; t++) n = adapter_casts(b, (est_lora_target)t, c, saved, n);
    est_module_function(b->m, first, saved, n);
}

/* LoRA_O.forward: matmul_lora(X, o ...), save_for_backward(A, B
 * (.to(dtype)), X, X_drop or X, bias). X is the attention's output, which
 * the attention saves as well. */
int est_kernel_lora_o(est_bld *b, int x) {
    const int xl = lora_input(b, x);
    const int first = b->m->n_ops;
    int y = lora_proj(b, EST_LORA_O, "o_proj (LoRA_O)", x, xl);
    int saved[4], n = 0;
    saved[n++] = x;
    if (xl != x) saved[n++] = xl;
    n = adapter_casts(b, EST_LORA_O, b->m->tensors[y].elem_bytes, saved, n);
    est_module_function(b->m, first, saved, n);
    return y;
}

/* LoRA_MLP.forward: gate = matmul_lora(X, gate ...), up = matmul_lora(X,
 * up ...), hidden = activation_fn(gate, up) (one Triton kernel), output =
 * matmul_lora(hidden, down ...); save_for_backward(X, X_drop or X, gate, up,
 * the six adapters .to(dtype), biases): hidden is not kept. Its backward
 * forms grad_down (T x i), then activation_fn_backward writes h, grad_gate
 * and grad_up into grad_down's, gate's and up's storage (swiglu.py
 * swiglu_backward: "op mutates in place"), so the activation makes no new
 * gradient; grad_output and grad_down stay to the end, beside grad_X and
 * each projection's dequantized weight. */
int est_kernel_lora_mlp(est_bld *b, int x) {
    const int64_t n_hidden = b->T * b->run->model.intermediate_size;
    const int xl = lora_input(b, x);
    const int first = b->m->n_ops;
    int gate = lora_proj(b, EST_LORA_GATE, "gate_proj (LoRA_MLP)", x, xl);
    int up = lora_proj(b, EST_LORA_UP, "up_proj (LoRA_MLP)", x, xl);
    const int c = b->m->tensors[gate].elem_bytes;
    int h = est_op2(b, EST_OP_MUL, "act(gate) * up (LoRA_MLP)", n_hidden, c, gate, up);
    const int act = b->m->n_ops - 1;
    int y = lora_proj(b, EST_LORA_DOWN, "down_proj (LoRA_MLP)", h, h);
    int saved[10], n = 0;
    saved[n++] = x;
    if (xl != x) saved[n++] = xl;
    saved[n++] = gate;
    saved[n++] = up;
    for (int t = EST_LORA_GATE; t <= EST_LORA_DOWN; t++) n = adapter_casts(b, (est_lora_target)t, c, saved, n);
    est_module_function(b->m, first, saved, n);
    b->m->ops[act].grad_in[0] = b->m->ops[act].grad_in[1] = false;
    return y;
}

/* A weight as the fused op reads it: swiglu_packedw_autocast's
 * at::autocast::cached_cast of a weight in another dtype (cached until the
 * autocast region exits), else the parameter. */
static int weight_read(est_bld *b, est_lora_target t) {
    const int w = (int)b->base_param[t];
    const est_mparam *p = &b->m->params[EST_PARAM_INDEX(w)];
    if (!b->g->autocast || p->elem_bytes == b->g->act) return w;
    int cast = est_op1(b, EST_OP_CAST, "autocast weight (fused MLP)", p->rows * p->cols * p->copies, b->g->act, w);
    est_module_tensor_role(b->m, cast, EST_ROLE_WEIGHT, false);
    if (cast >= 0 && p->trainable) b->m->tensors[cast].autocast_cached = true;
    return cast;
}

static int linear(est_bld *b, const char *name, int x, int w, int64_t din, int64_t dout) {
    int y = est_op2(b, EST_OP_LINEAR, name, b->T * dout, b->m->tensors[x].elem_bytes, x, w);
    est_module_op_gemm(b->m, (double)b->T, (double)din, (double)dout, 1);
    return y;
}

/* SwiGLUPackedWeights::forward: x1, x2, x4 = dual_gemm_silu_identity_mul(x,
 * w1, w2) (x4 = silu(x1) * x2), x5 = linear(x4, w3);
 * save_for_backward({x, w1w2, w3, x1, x2}): x4 is not kept. Backward: dx4 =
 * dx5 @ w3; dx1dx2, x4 = silu_bw_fused(x1, x2, dx4) (x4 made again); dw3;
 * dx = dx1dx2 @ w1w2; dw1dw2. dx5 is alive through silu_bw_fused, dx1dx2 to
 * the end. */
int est_kernel_fused_mlp(est_bld *b, int x) {
    const ft_model *md = &b->run->model;
    const int64_t i = md->intermediate_size, h = md->hidden_size;
    int xc = b->g->autocast ? est_cast(b, "autocast x (fused MLP)", x, b->g->act) : x;
    const int w1 = weight_read(b, EST_LORA_GATE), w2 = weight_read(b, EST_LORA_UP);
    const int w3 = weight_read(b, EST_LORA_DOWN);
    const int first = b->m->n_ops;
    int x1 = linear(b, "x1 = x w1^T (fused MLP)", xc, w1, h, i);
    int x2 = linear(b, "x2 = x w2^T (fused MLP)", xc, w2, h, i);
    const int c = b->m->tensors[x1].elem_bytes;
    int x4 = est_op2(b, EST_OP_MUL, "x4 = silu(x1) * x2 (fused MLP)", b->T * i, c, x1, x2);
    const int act = b->m->n_ops - 1;
    int x5 = linear(b, "x5 = x4 w3^T (fused MLP)", x4, w3, i, h);
    int saved[6] = {xc, x1, x2}, n = 3;
    const int ws[3] = {w1, w2, w3};
    for (int k = 0; k < 3; k++)
        if (ws[k] >= 0) saved[n++] = ws[k]; /* autocast's casts (parameters need no room) */
    est_module_function(b->m, first, saved, n);
    b->m->ops[act].backward_transient_bytes = bytes_of(b, x4); /* x4 made again */
    b->m->ops[act].grad_held_until = EST_NONE;                  /* dx4.reset() */
    b->m->ops[act + 1].grad_held_until = (int16_t)act;          /* dx5.reset() after dw3 */
    return x5;
}

/* Cut Cross-Entropy (axolotl's CutCrossEntropyPlugin; cut_cross_entropy
 * cce.py LinearCrossEntropyFunction, axolotl-ai-cloud/ml-cross-entropy):
 * forward: lse = cce_lse_forward_kernel(e, c), T fp32, the logits made and
 * dropped block by block in the kernel; with filter_eps "auto" (the default)
 * and a gradient to make, logit_avg (V fp32) too;
 * save_for_backward(e, c, bias, lse, targets, valids, logit_avg).
 * Backward: de (T x h, e's dtype: accum_e_fp32 is False) and dc (V x h) when
 * the head trains, from the logits made again block by block. No T x V
 * tensor exists. The op is named lm_head: the head's backward unit starts
 * there (autograd.c). */
int est_kernel_cce_loss(est_bld *b, int x, int w) {
    const ft_model *md = &b->run->model;
    const int64_t T = b->T, h = md->hidden_size, V = md->vocab_size;
    const int first = b->m->n_ops;
    int loss = est_op2(b, EST_OP_LINEAR, "lm_head", 1, 4, x, w);
    est_module_op_gemm(b->m, (double)T, (double)h, (double)V, 1);
    int lse = est_module_op_out2(b->m, "cce lse", T, 4);
    int saved[3] = {x, lse}, n = 2;
    const bool grad = b->m->ops[b->m->n_ops - 1].backward;
    if (grad) {
        int avg = est_op1(b, EST_OP_REDUCE, "cce logit_avg", V, 4, x);
        outside_autograd(b);
        est_module_tensor_role(b->m, avg, EST_ROLE_LOGITS, false);
        saved[n++] = avg;
    }
    est_module_tensor_role(b->m, loss, EST_ROLE_LOGITS, false);
    est_module_tensor_role(b->m, lse, EST_ROLE_LOGITS, false);
    est_module_function(b->m, first, saved, n);
    return loss;
}
