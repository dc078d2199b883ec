/* The sparse MoE MLP (transformers 4.40 MixtralSparseMoeBlock,
 * Qwen2MoeSparseMoeBlock):
 *   router_logits = gate(x); w = softmax(router_logits, dtype=fp32)
 *   w, sel = topk(w, k)                 topk's backward keeps the indices
 *   [Mixtral] w /= w.sum(-1)            the division keeps w and the sums
 *   w = w.to(x.dtype)
 *   for each expert e: idx, top_x = where(mask[e])      2 int64 row indices
 *     xe = x[top_x]                     a gathered copy
 *     ye = w2(act(w1(xe)) * w3(xe)) * w[top_x, idx]
 *     out.index_add_(0, top_x, ye)
 *   [Qwen2-MoE] + sigmoid(shared_gate(x)) * shared_expert(x)
 * Dropless: the experts see k*T rows in all whatever the balance, so the
 * experts are one op each over k*T rows here (their GEMM FLOPs are the sum
 * over experts; they run one expert at a time, which only the transients of
 * a checkpointed no-grad forward would notice). The router logits feed no
 * auxiliary loss unless output_router_logits is set. */
#include "block_build.h"

static int moe_param(est_bld *b, const char *name, int64_t rows, int64_t cols) {
    return est_module_param(b->m, name, rows, cols, EST_PK_LINEAR_WEIGHT, -1, b->g->train_base,
                            b->g->weight);
}

void est_moe_params(est_bld *b) {
    const ft_model *md = &b->run->model;
    b->moe_router = moe_param(b, "router", md->num_experts, md->hidden_size);
    b->moe_shared[0] = EST_NONE;
    const int64_t fs = md->shared_expert_intermediate_size, h = md->hidden_size;
    if (fs <= 0) return;
    b->moe_shared[0] = moe_param(b, "shared_expert.gate_proj", fs, h);
    b->moe_shared[1] = moe_param(b, "shared_expert.up_proj", fs, h);
    b->moe_shared[2] = moe_param(b, "shared_expert.down_proj", h, fs);
    b->moe_shared[3] = moe_param(b, "shared_expert_gate", 1, h);
}

/* Qwen2-MoE's shared expert on all T rows, gated by a sigmoid. */
static int shared_expert(est_bld *b, int x) {
    const ft_model *md = &b->run->model;
    const int64_t T = b->T, h = md->hidden_size, fs = md->shared_expert_intermediate_size;
    int g = est_linear_rows(b, "shared gate_proj", x, b->moe_shared[0], T, h, fs);
    int u = est_linear_rows(b, "shared up_proj", x, b->moe_shared[1], T, h, fs);
    const int c = b->m->tensors[g].elem_bytes;
    int a = est_op1(b, EST_OP_ACT, "shared act(gate)", T * fs, c, g);
    int p = est_op2(b, EST_OP_MUL, "shared act * up", T * fs, c, a, u);
    int d = est_linear_rows(b, "shared down_proj", p, b->moe_shared[2], T, fs, h);
    int sg = est_linear_rows(b, "shared_expert_gate", x, b->moe_shared[3], T, h, 1);
    sg = est_op1(b, EST_OP_TANH, "sigmoid(shared gate)", T, c, sg); /* saves its output */
    return est_op2(b, EST_OP_MUL, "shared expert output", T * h, c, sg, d);
}

/* Routing: softmax, top-k (and Mixtral's renormalisation); returns the
 * per-row weights in x's dtype. */
static int route(est_bld *b, int x, int64_t kT) {
    const ft_model *md = &b->run->model;
    const int64_t T = b->T, E = md->num_experts;
    int logits = est_linear_rows(b, "router", x, b->moe_router, T, md->hidden_size, E);
    int w = est_op1(b, EST_OP_SOFTMAX, "router softmax fp32", T * E, 4, logits);
    int top = est_op1(b, EST_OP_COPY, "top-k weights", kT, 4, w);
    est_module_op_out2(b->m, "router top-k indices", kT, 8);
    b->m->ops[b->m->n_ops - 1].saves_out2 = b->m->tensors[w].requires_grad;
    if (md->norm_topk_prob) {
        int sums = est_op1(b, EST_OP_REDUCE, "top-k sums", T, 4, top);
        top = est_op2(b, EST_OP_MUL, "top-k weights / sums", kT, 4, top, sums);
    }
    return est_cast(b, "routing weights", top, b->m->tensors[x].elem_bytes);
}

int est_moe_mlp(est_bld *b, int x) {
    const ft_model *md = &b->run->model;
    const int64_t T = b->T, h = md->hidden_size, fe = md->moe_intermediate_size;
    const int64_t kT = md->experts_per_token * T;
    int w = route(b, x, kT);
    int idx = est_op1(b, EST_OP_COPY, "routed row indices", 2 * kT, 8, EST_NONE);
    int xe = est_op2(b, EST_OP_COPY, "routed inputs (gathered)", kT * h, b->m->tensors[x].elem_bytes, x,
                     idx);
    /* index's backward keeps the indices. */
    b->m->ops[b->m->n_ops - 1].saves[1] = b->m->tensors[x].requires_grad;
    int g = est_linear_rows(b, "experts gate", xe, (int)b->base_param[EST_LORA_GATE], kT, h, fe);
    int u = est_linear_rows(b, "experts up", xe, (int)b->base_param[EST_LORA_UP], kT, h, fe);
    const int c = b->m->tensors[g].elem_bytes;
    int a = est_op1(b, EST_OP_ACT, "experts act(gate)", kT * fe, c, g);
    int p = est_op2(b, EST_OP_MUL, "experts act * up", kT * fe, c, a, u);
    int d = est_linear_rows(b, "experts down", p, (int)b->base_param[EST_LORA_DOWN], kT, fe, h);
    int y = est_op2(b, EST_OP_MUL, "experts output * weight", kT * h, c, d, w);
    int out = est_op2(b, EST_OP_COPY, "index_add_", T * h, c, y, idx);
    if (b->moe_shared[0] != EST_NONE)
        out = est_op2(b, EST_OP_ADD, "routed + shared", T * h, c, out, shared_expert(b, x));
    return out;
}
