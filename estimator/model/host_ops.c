/* The host's ATen ops of one block's forward and backward (host_ops.h). The
 * counts per op are torch 2.11's: what the Python call dispatches in forward,
 * what the backward node's formula in tools/autograd/derivatives.yaml (and
 * torch/csrc/autograd/FunctionsManual.cpp) dispatches in backward. They were
 * checked against a count of every op TorchDispatchMode sees on the CPU
 * (calibrate/host/count_host_ops.py; docs/method.md, "The host's work per
 * step"). */
#include "host_ops.h"

#include <string.h>

/* ATen ops of an op's forward. nn.Linear on a (b, s, in) input: linear ->
 * weight.t(), then matmul folds the batch: view, mm, _unsafe_view (aten/src/
 * ATen/native/Linear.cpp linear, LinearAlgebra.cpp _matmul_impl); a batched
 * matmul likewise. bitsandbytes' dequantize_4bit allocates its output, runs
 * its op and MatMul4Bit transposes the result (bitsandbytes 0.50
 * functional.py, autograd/_functions.py): 3. Any other op is one call. */
static double forward_ops(const est_mop *o) {
    switch (o->kind) {
    case EST_OP_LINEAR:
    case EST_OP_BMM: return 4;
    case EST_OP_DEQUANT: return 3;
    default: return 1;
    }
}

/* Whether op o's backward makes a gradient for its operand k: a tensor
 * that needs one (grad_in), or a parameter that trains (the description
 * keeps those apart: a weight's gradient is its own event). */
static bool takes_grad(const est_module *m, const est_mop *o, int k) {
    if (!o->backward) return false;
    if (o->grad_in[k]) return true;
    const int x = o->in[k];
    return EST_IS_PARAM(x) && m->params[EST_PARAM_INDEX(x)].trainable;
}

/* Operands of op o that get a gradient. */
static int grads_in(const est_module *m, const est_mop *o) {
    int n = 0;
    for (int k = 0; k < o->n_in; k++) n += takes_grad(m, o, k);
    return n;
}

/* Elements of operand x of module m (a tensor or a parameter). */
static double operand_elems(const est_module *m, int x) {
    if (EST_IS_PARAM(x)) {
        const est_mparam *p = &m->params[EST_PARAM_INDEX(x)];
        return (double)p->rows * (double)p->cols;
    }
    return x >= 0 ? (double)m->tensors[x].elems : 0;
}

/* Inputs of op o that get a gradient and are smaller than its output:
 * broadcast, so their gradient is summed down to their shape. */
static int broadcast_grads(const est_module *m, const est_mop *o) {
    int n = 0;
    const double out = o->out >= 0 ? (double)m->tensors[o->out].elems : 0;
    for (int k = 0; k < o->n_in; k++) n += takes_grad(m, o, k) && operand_elems(m, o->in[k]) < out;
    return n;
}

/* ATen ops of an op's backward node (derivatives.yaml, torch 2.11):
 *  - Linear: UnsafeViewBackward's view; MmBackward's input gradient
 *    grad.mm(mat2.t()) (t, mm) and weight gradient of mat2 = weight.t(),
 *    (mat1.t().mm(grad)).t() (t, mm, t) (FunctionsManual.cpp
 *    mm_mat1_backward, mm_mat2_backward); ViewBackward's view of the input
 *    gradient; TBackward's t of the weight gradient: 8 with both, 4 or 5
 *    with one alone (a frozen base; a Linear whose input needs no gradient);
 *  - x.pow(2): grad * 2 * x.pow(1): pow, mul, mul; rsqrt: -0.5 * grad *
 *    result.pow(3): pow, mul, mul; mean: expand, div;
 *  - a * b: one mul per input that needs a gradient, and a sum for an
 *    input broadcast against the output (sum_to_size: an RMSNorm's weight,
 *    its per-token rsqrt); x * scalar: one mul;
 *    x + scalar and a + b: none (the gradient passes on);
 *  - casts: _to_copy back; neg: neg; cat: a slice per input; the others
 *    (activations, softmax, dropout, attention, kernels, loss): one op;
 *  - bitsandbytes' MatMul4Bit.backward dequantizes the weight again:
 *    dequantize_4bit, .to(dtype), .t() (autograd/_functions.py). */
static double backward_ops(const est_module *m, const est_mop *o) {
    if (o->kind == EST_OP_DEQUANT) return 3;
    if (!o->backward) return 0;
    const int g = grads_in(m, o);
    switch (o->kind) {
    case EST_OP_LINEAR:
    case EST_OP_BMM: {
        const bool in = takes_grad(m, o, 0), w = o->n_in > 1 && takes_grad(m, o, 1);
        return (in ? 3 : 0) + (w ? 4 : 0) + 1;
    }
    case EST_OP_POW:
    case EST_OP_RSQRT: return 3;
    case EST_OP_REDUCE: return 2;
    case EST_OP_MUL: return g + broadcast_grads(m, o);
    case EST_OP_SCALAR: return (o->name[0] == '+' || o->name[0] == '-') ? 0 : 1;
    case EST_OP_ADD: return 0;
    case EST_OP_COPY: return strncmp(o->name, "cat", 3) == 0 ? 2 : 1;
    default: return g > 0 ? 1 : 0;
    }
}

/* The gradient sums of the backward: a tensor (or parameter) read by k ops
 * whose backward makes a gradient for it gets k - 1 adds (the engine's
 * InputBuffer::accumulate, torch/csrc/autograd/input_buffer.cpp); and each
 * trainable parameter's AccumulateGrad detaches the gradient it keeps
 * (torch/csrc/autograd/functions/accumulate_grad.h). */
static double gradient_sums(const est_module *m) {
    double adds = 0;
    for (int t = 0; t < m->n_tensors; t++) {
        int readers = 0;
        for (int j = 0; j < m->n_ops; j++)
            for (int k = 0; k < m->ops[j].n_in; k++)
                readers += m->ops[j].in[k] == t && takes_grad(m, &m->ops[j], k);
        if (readers > 1) adds += readers - 1;
    }
    for (int i = 0; i < m->n_params; i++) adds += m->params[i].trainable;
    return adds;
}

/* The attention module's views, which the description passes on as the
 * same tensor (transformers 5.17 modeling_llama.py LlamaAttention.forward
 * and apply_rotary_pos_emb, integrations/sdpa_attention.py): q, k, v
 * .view(hidden_shape).transpose(1, 2) (6), cos and sin .unsqueeze (2),
 * rotate_half's two slices, for q and k (4), the output's transpose(1, 2)
 * and reshape (2): 14 in forward; in backward each but the unsqueezes of
 * cos and sin (no gradient): 12. */
enum { ATTENTION_VIEWS_FWD = 14, ATTENTION_VIEWS_BWD = 12 };

/* nn.Module calls of a block's forward (transformers 5.17 modeling_llama.py):
 * the decoder layer, its attention, its MLP and the MLP's act_fn (4), one
 * per norm and per Linear; PEFT replaces each adapted Linear with a LoRA
 * Linear that calls base_layer, lora_dropout[name], lora_A[name] and
 * lora_B[name] (peft 0.21 tuners/lora/layer.py Linear.forward): 4 more. */
static double module_calls(const est_module *m) {
    double n = 4;
    for (int i = 0; i < m->n_params; i++) {
        const est_mparam *p = &m->params[i];
        if (p->kind == EST_PK_LINEAR_WEIGHT || p->kind == EST_PK_NORM) n += 1;
        if (p->kind == EST_PK_ADAPTER && strstr(p->name, "lora_A")) n += 4;
    }
    return n;
}

est_host_ops est_module_host_ops(const est_module *m) {
    est_host_ops h = {0};
    bool attention = false;
    for (int j = 0; j < m->n_ops; j++) {
        const est_mop *o = &m->ops[j];
        h.forward += forward_ops(o);
        h.backward += backward_ops(m, o);
        attention |= o->kind == EST_OP_ATTENTION || o->kind == EST_OP_BMM;
    }
    if (attention) {
        h.forward += ATTENTION_VIEWS_FWD;
        h.backward += ATTENTION_VIEWS_BWD;
    }
    h.backward += gradient_sums(m);
    h.module_calls = module_calls(m);
    return h;
}
