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
 * auxiliary loss unless output_router_logits is set. Qwen3-MoE
 * (modeling_qwen3_moe.py, transformers 4.51) is Qwen2-MoE's block without the
 * shared expert. Under PEFT every expert Linear, the router and the shared
 * expert may carry adapters (lora.c est_adapter_shape). */
#include "block_build.h"

static int moe_param(est_bld *b, const char *name, int64_t rows, int64_t cols) {
    return est_module_param(b->m, name, rows, cols, EST_PK_LINEAR_WEIGHT, -1, b->g->train_base,
                            b->g->weight);
}

/* PEFT's adapters beyond the routed experts (lora.c, est_lora_block_params):
 * the shared expert's Linears by their names' target bits, the router and
 * the shared expert's gate under all-linear only. */
static bool targeted(const est_bld *b, int t) {
    return b->run->lora.rank > 0 && (t < 0 ? b->run->lora.targets == EST_LORA_ALL_LINEAR
                                           : (b->run->lora.targets & EST_LORA_BIT(t)) != 0);
}

void est_moe_params(est_bld *b) {
    const ft_model *md = &b->run->model;
    const int64_t fs = md->shared_expert_intermediate_size, h = md->hidden_size, E = md->num_experts;
    b->moe_router = moe_param(b, "router", E, h);
    b->moe_router_la = b->moe_router_lb = EST_NONE;
    if (targeted(b, -1)) est_adapter_params(b, "router", h, E, &b->moe_router_la, &b->moe_router_lb);
    for (int i = 0; i < 4; i++) b->moe_shared[i] = b->moe_shared_la[i] = b->moe_shared_lb[i] = EST_NONE;
    if (fs <= 0) return;
    static const char *const NAMES[4] = {"shared_expert.gate_proj", "shared_expert.up_proj",
                                         "shared_expert.down_proj", "shared_expert_gate"};
    const int64_t din[4] = {h, h, fs, h}, dout[4] = {fs, fs, h, 1};
    const int target[4] = {EST_LORA_GATE, EST_LORA_UP, EST_LORA_DOWN, -1};
    for (int i = 0; i < 4; i++) {
        b->moe_shared[i] = moe_param(b, NAMES[i], dout[i], din[i]);
        if (targeted(b, target[i]))
            est_adapter_params(b, NAMES[i], din[i], dout[i], &b->moe_shared_la[i], &b->moe_shared_lb[i]);
    }
}

/* Shared expert Linear i on all T rows. */
static int shared_linear(est_bld *b, int i, const char *name, int x, int64_t din, int64_t dout) {
    return est_linear_adapted(b, name, x, b->moe_shared[i], EST_NONE, b->moe_shared_la[i], b->moe_shared_lb[i],
                              b->T, din, dout);
}

/* Qwen2-MoE's shared expert on all T rows, gated by a sigmoid. */
static int shared_expert(est_bld *b, int x) {
    const ft_model *md = &b->run->model;
    const int64_t T = b->T, h = md->hidden_size, fs = md->shared_expert_intermediate_size;
    int g = shared_linear(b, 0, "shared gate_proj", x, h, fs);
    int u = shared_linear(b, 1, "shared up_proj", x, h, fs);
    const int c = b->m->tensors[g].elem_bytes;
    int a = est_op1(b, EST_OP_ACT, "shared act(gate)", T * fs, c, g);
    int p = est_op2(b, EST_OP_MUL, "shared act * up", T * fs, c, a, u);
    int d = shared_linear(b, 2, "shared down_proj", p, fs, h);
    int sg = shared_linear(b, 3, "shared_expert_gate", x, h, 1);
    sg = est_op1(b, EST_OP_TANH, "sigmoid(shared gate)", T, c, sg); /* saves its output */
    return est_op2(b, EST_OP_MUL, "shared expert output", T * h, c, sg, d);
}

/* Routing: softmax, top-k (and Mixtral's renormalisation); returns the
 * per-row weights in x's dtype. */
static int route(est_bld *b, int x, int64_t kT) {
    const ft_model *md = &b->run->model;
    const int64_t T = b->T, E = md->num_experts;
    int logits = est_linear_adapted(b, "router", x, b->moe_router, EST_NONE, b->moe_router_la, b->moe_router_lb, T,
                                    md->hidden_size, E);
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

/* The routed experts' Linear of target t over their kT rows in all: one
 * expert at a time in HF's loop, each quantized weight dequantized for its
 * own matmul and each expert's adapter (Mixtral's w1/w3/w2, the Qwen MoEs'
 * gate/up/down_proj) on its own rows. */
static int expert_linear(est_bld *b, int t, const char *name, int x, int64_t rows, int64_t din, int64_t dout) {
    return est_linear_adapted(b, name, x, (int)b->base_param[t], EST_NONE, b->lora_a[t], b->lora_b[t], rows, din,
                              dout);
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
    int g = expert_linear(b, EST_LORA_GATE, "experts gate", xe, kT, h, fe);
    int u = expert_linear(b, EST_LORA_UP, "experts up", xe, kT, h, fe);
    const int c = b->m->tensors[g].elem_bytes;
    int a = est_op1(b, EST_OP_ACT, "experts act(gate)", kT * fe, c, g);
    int p = est_op2(b, EST_OP_MUL, "experts act * up", kT * fe, c, a, u);
    int d = expert_linear(b, EST_LORA_DOWN, "experts down", p, kT, fe, h);
    int y = est_op2(b, EST_OP_MUL, "experts output * weight", kT * h, c, d, w);
    int out = est_op2(b, EST_OP_COPY, "index_add_", T * h, c, y, idx);
    if (b->moe_shared[0] != EST_NONE)
        out = est_op2(b, EST_OP_ADD, "routed + shared", T * h, c, out, shared_expert(b, x));
    return out;
}
