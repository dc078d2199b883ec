#include "module_graph.h"

#include <string.h>

#include "json_util.h"

const char *const est_op_kind_names[EST_OP_KIND_COUNT] = {
    "cast", "copy", "pow", "reduce", "scalar", "rsqrt", "mul", "add", "linear", "bmm",
    "activation", "tanh", "softmax", "attention", "dropout", "embedding", "loss", "dequantize", "fused linear cross-entropy",
    "kernel",
};

void est_module_begin(est_module *m, est_module_kind kind) {
    memset(m, 0, sizeof *m);
    m->kind = kind;
    m->input = m->output = EST_NONE;
    for (int k = 0; k < EST_SHARED_COUNT; k++) m->shared[k] = EST_NONE;
}

int est_module_param(est_module *m, const char *name, int64_t rows, int64_t cols,
                     est_param_kind kind, int lora_target, bool trainable, int elem_bytes) {
    if (m->n_params == EST_MOD_MAX_PARAMS) {
        m->overflow = true;
        return 0;
    }
    est_mparam *p = &m->params[m->n_params];
    memset(p, 0, sizeof *p);
    ft_strlcpy(p->name, name, sizeof p->name);
    p->rows = rows;
    p->cols = cols;
    p->kind = kind;
    p->lora_target = (int8_t)lora_target;
    /* partial training decides for every parameter, adapters included */
    p->trainable = m->train_masked ? ((m->train_mask >> m->n_params) & 1) != 0 : trainable;
    p->copies = 1;
    p->elem_bytes = (int8_t)elem_bytes;
    return EST_PARAM(m->n_params++);
}

static int new_tensor(est_module *m, const char *name, int64_t elems, int elem_bytes,
                      int producer) {
    if (m->n_tensors == EST_MOD_MAX_TENSORS) {
        m->overflow = true;
        return EST_NONE;
    }
    est_mtensor *t = &m->tensors[m->n_tensors];
    memset(t, 0, sizeof *t);
    ft_strlcpy(t->name, name, sizeof t->name);
    t->elems = elems;
    t->elem_bytes = (int8_t)elem_bytes;
    t->producer = (int16_t)producer;
    t->last_read = t->saved_until = EST_NONE;
    return m->n_tensors++;
}

int est_module_input(est_module *m, const char *name, int64_t elems, int elem_bytes,
                     bool requires_grad) {
    int t = new_tensor(m, name, elems, elem_bytes, EST_NONE);
    if (t >= 0) m->tensors[t].requires_grad = requires_grad && !m->no_grad;
    if (m->input == EST_NONE) m->input = (int16_t)t;
    return t;
}

/* Does operand x carry a gradient (a tensor that requires grad, or a
 * parameter that trains)? */
static bool operand_grad(const est_module *m, int x) {
    if (x == EST_NONE || m->no_grad) return false;
    if (EST_IS_PARAM(x)) return m->params[EST_PARAM_INDEX(x)].trainable;
    return m->tensors[x].requires_grad;
}

/* derivatives.yaml: which inputs each op keeps for the gradients it will
 * compute (only those gradients that are needed). */
static void save_rules(const est_module *m, est_mop *o) {
    const bool g0 = operand_grad(m, o->in[0]), g1 = o->n_in > 1 && operand_grad(m, o->in[1]);
    switch (o->kind) {
    case EST_OP_POW:
    case EST_OP_ACT: o->saves[0] = g0; break;
    case EST_OP_RSQRT:
    case EST_OP_TANH:
    case EST_OP_SOFTMAX: o->saves_out = g0; break;
    case EST_OP_MUL:
    case EST_OP_BMM:
        /* grad_a = grad * b needs b; grad_b = grad * a needs a. */
        o->saves[1] = g0;
        o->saves[0] = g1;
        break;
    case EST_OP_LINEAR:
        /* addmm/mm: grad_x = grad @ W needs W; grad_W = grad^T @ x needs x. */
        o->saves[0] = g1 || (m->linear_saves_input && (g0 || (o->n_in > 2 && operand_grad(m, o->in[2]))));
        o->saves[1] = g0;
        break;
    case EST_OP_ATTENTION: {
        bool any = false;
        for (int i = 0; i < o->n_in; i++) any |= operand_grad(m, o->in[i]);
        for (int i = 0; i < o->n_in; i++) o->saves[i] = any;
        o->saves_out = o->saves_out2 = any;
        break;
    }
    case EST_OP_DROPOUT: o->saves_out2 = g0; break;
    case EST_OP_FUSED_LOSS: o->saves_out = o->saves_out2 = g0 || g1; break;
    default: break; /* cast, copy, reduce, scalar, add, embedding, loss, dequant */
    }
}

int est_module_op(est_module *m, est_op_kind kind, const char *name, int64_t elems,
                  int elem_bytes, int n_in, const int16_t *in) {
    if (m->n_ops == EST_MOD_MAX_OPS || n_in > EST_MOD_MAX_IN) {
        m->overflow = true;
        return EST_NONE;
    }
    const int index = m->n_ops;
    est_mop *o = &m->ops[index];
    memset(o, 0, sizeof *o);
    o->kind = kind;
    ft_strlcpy(o->name, name, sizeof o->name);
    o->n_in = (int8_t)n_in;
    for (int i = 0; i < n_in; i++) o->in[i] = in[i];
    o->out = o->out2 = EST_NONE;
    o->grad_held_until = EST_NONE;
    bool rg = false;
    for (int i = 0; i < n_in; i++) rg |= operand_grad(m, in[i]);
    if (kind == EST_OP_DEQUANT) rg = false; /* a frozen quantized weight */
    if (elems > 0) {
        int t = new_tensor(m, name, elems, elem_bytes, index);
        if (t == EST_NONE) return EST_NONE;
        m->tensors[t].requires_grad = rg;
        o->out = (int16_t)t;
    }
    o->backward = rg;
    for (int i = 0; i < n_in; i++) o->grad_in[i] = rg && !EST_IS_PARAM(in[i]) && in[i] >= 0 &&
                                                  m->tensors[in[i]].requires_grad;
    save_rules(m, o);
    m->n_ops++;
    return o->out;
}

int est_module_op_out2(est_module *m, const char *name, int64_t elems, int elem_bytes) {
    if (m->n_ops == 0) return EST_NONE;
    est_mop *o = &m->ops[m->n_ops - 1];
    int t = new_tensor(m, name, elems, elem_bytes, m->n_ops - 1);
    if (t == EST_NONE) return EST_NONE;
    o->out2 = (int16_t)t;
    return t;
}

void est_module_tensor_role(est_module *m, int t, est_tensor_role role, bool held) {
    if (t < 0 || t >= m->n_tensors) return;
    m->tensors[t].role = role;
    m->tensors[t].held = held;
}

void est_module_kernel_saves(est_module *m, unsigned inputs, unsigned outs) {
    if (m->n_ops == 0) return;
    est_mop *o = &m->ops[m->n_ops - 1];
    for (int k = 0; k < o->n_in; k++) o->saves[k] = o->backward && (inputs & (1u << k));
    o->saves_out = o->backward && (outs & 1u);
    o->saves_out2 = o->backward && (outs & 2u);
}

void est_module_op_gemm(est_module *m, double M, double K, double N, double count) {
    if (m->n_ops == 0) return;
    est_mop *o = &m->ops[m->n_ops - 1];
    o->M = M;
    o->K = K;
    o->N = N;
    o->count = count;
}

static void mark_saved(est_module *m, int t, int op) {
    if (t < 0) return;
    est_mtensor *x = &m->tensors[t];
    if (x->saved_until == EST_NONE || op < x->saved_until) x->saved_until = (int16_t)op;
}

void est_module_function(est_module *m, int first_op, const int *saved, int n) {
    if (first_op < 0 || first_op >= m->n_ops) return;
    /* the node's backward ends with the first of its ops that runs backward */
    int end = first_op;
    while (end < m->n_ops && !m->ops[end].backward) end++;
    for (int j = first_op; j < m->n_ops; j++) {
        est_mop *o = &m->ops[j];
        for (int k = 0; k < o->n_in; k++) o->saves[k] = false;
        o->saves_out = o->saves_out2 = false;
        if (j > end) o->grad_held_until = (int16_t)end;
    }
    if (end == m->n_ops) return; /* under no_grad: nothing is kept */
    first_op = end;
    for (int i = 0; i < n; i++)
        if (saved[i] >= 0 && !m->no_grad) mark_saved(m, saved[i], first_op);
    m->ops[m->n_ops - 1].packs = !m->no_grad;
}

void est_module_finish(est_module *m, int output) {
    for (int i = 0; i < m->n_ops; i++) {
        const est_mop *o = &m->ops[i];
        for (int j = 0; j < o->n_in; j++) {
            int t = o->in[j];
            if (t < 0) continue;
            if (m->tensors[t].last_read < i) m->tensors[t].last_read = (int16_t)i;
            if (o->saves[j]) mark_saved(m, t, i);
        }
        if (o->saves_out) mark_saved(m, o->out, i);
        if (o->saves_out2) mark_saved(m, o->out2, i);
    }
    m->output = (int16_t)output;
    if (output >= 0) m->tensors[output].is_output = true;
}

int64_t est_mtensor_bytes(const est_mtensor *t) { return t->elems * t->elem_bytes; }

int64_t est_module_param_elems(const est_module *m) {
    int64_t n = 0;
    for (int i = 0; i < m->n_params; i++)
        if (!m->params[i].tied) n += m->params[i].rows * m->params[i].cols * m->params[i].copies;
    return n;
}

int64_t est_module_trainable_elems(const est_module *m) {
    int64_t n = 0;
    for (int i = 0; i < m->n_params; i++)
        if (m->params[i].trainable && !m->params[i].tied)
            n += m->params[i].rows * m->params[i].cols * m->params[i].copies;
    return n;
}

int64_t est_module_largest_param(const est_module *m) {
    int64_t big = 0;
    for (int i = 0; i < m->n_params; i++) {
        int64_t n = m->params[i].rows * m->params[i].cols;
        if (n > big) big = n;
    }
    return big;
}

int64_t est_module_saved_bytes(const est_module *m) {
    int64_t sum = 0;
    for (int t = 0; t < m->n_tensors; t++)
        if (m->tensors[t].saved_until != EST_NONE) sum += est_mtensor_bytes(&m->tensors[t]);
    return sum;
}

double est_module_gemm_flops(const est_module *m) {
    double f = 0;
    for (int i = 0; i < m->n_ops; i++) {
        const est_mop *o = &m->ops[i];
        if (o->kind == EST_OP_LINEAR || o->kind == EST_OP_BMM) f += 2 * o->M * o->K * o->N * o->count;
    }
    return f;
}
