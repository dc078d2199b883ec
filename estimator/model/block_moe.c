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
 * expert may carry adapters (lora.c est_adapter_shape).
 *
 * transformers 5.x (read in 5.23.0, the cpu-trace stack; stack.h
 * moe_experts_fused) stores the routed experts fused: MixtralExperts (and
 * Qwen2/3-MoE's) hold gate_up_proj (E, 2 I, h) and down_proj (E, h, I) as two
 * nn.Parameters, the router (MixtralTopKRouter) one (E, h) Parameter read by
 * F.linear. Registration order (named_parameters): Mixtral and Qwen2-MoE
 * mlp.gate, mlp.experts.gate_up_proj, mlp.experts.down_proj (Qwen2-MoE then
 * its shared expert and shared_expert_gate); Qwen3-MoE declares experts
 * before the gate. Their forward is integrations/moe.py
 * grouped_mm_experts_forward, the default experts_implementation
 * (modeling_utils.py get_correct_experts_implementation: "grouped_mm" when
 * none is asked for):
 *   ids_g, perm = sort(top_k_index.reshape(-1))
 *   x_g = x[perm // k]                  index saves perm // k
 *   w_g = top_k_weights.reshape(-1)[perm]   index saves perm
 *   offs = cumsum(histc(ids_g))         E int32
 *   gu = grouped_mm(x_g.to(W.dtype), gate_up_proj^T, offs)  kT x 2 I, saves x_g
 *   p = act(gate) * up                  gate, up: chunks (views) of gu
 *   d = grouped_mm(p.to(W.dtype), down_proj^T, offs)         kT x h
 *   y = d * w_g[:, None]                fp32 (w_g is fp32 for Mixtral)
 *   y = y[inv_perm]                     index saves inv_perm
 *   out = y.view(T, k, h).sum(1).to(x.dtype)
 * grouped_mm is not autocast-enabled: it runs in the weights' dtype (fp32
 * masters under autocast) and the input is cast to it. Mixtral's router keeps
 * its routing weights fp32 (router_top_value is not cast back); Qwen2/3-MoE
 * cast them to the logits' dtype. Qwen2-MoE runs its shared expert before the
 * router and gates it after the routed experts. */
#include "block_build.h"

#include "stack.h"

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

/* transformers 5.x's fused experts: gate_up_proj as (E 2I, h) and down_proj
 * as (E h, I), one tensor each (copies 1: a ZeRO partition, a bucket and a
 * gradient see one tensor of all experts), E their leading dimension. */
static void fused_expert_params(est_bld *b) {
    const ft_model *md = &b->run->model;
    const int64_t h = md->hidden_size, E = md->num_experts, fe = md->moe_intermediate_size;
    b->base_param[EST_LORA_GATE] = est_module_param(b->m, "experts.gate_up_proj", E * 2 * fe, h,
                                                    EST_PK_LINEAR_WEIGHT, EST_LORA_GATE, b->g->train_base,
                                                    b->g->weight);
    b->base_param[EST_LORA_DOWN] = est_module_param(b->m, "experts.down_proj", E * h, fe, EST_PK_LINEAR_WEIGHT,
                                                    EST_LORA_DOWN, b->g->train_base, b->g->weight);
    /* 3-D (E, ., .): FSDP2 chunks them on E (seam_fsdp.c param_shard) */
    b->m->params[EST_PARAM_INDEX(b->base_param[EST_LORA_GATE])].lead = E;
    b->m->params[EST_PARAM_INDEX(b->base_param[EST_LORA_DOWN])].lead = E;
}

void est_moe_params(est_bld *b) {
    const ft_model *md = &b->run->model;
    const int64_t fs = md->shared_expert_intermediate_size, h = md->hidden_size, E = md->num_experts;
    const bool fused = est_moe_fused(b->run);
    if (fused && md->arch == FT_ARCH_QWEN3_MOE) fused_expert_params(b); /* experts before the gate */
    b->moe_router = moe_param(b, "router", E, h);
    if (fused && md->arch != FT_ARCH_QWEN3_MOE) fused_expert_params(b);
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

/* Qwen2-MoE's shared expert on all T rows: act(gate_proj) * up_proj, then
 * down_proj. */
static int shared_body(est_bld *b, int x) {
    const ft_model *md = &b->run->model;
    const int64_t T = b->T, h = md->hidden_size, fs = md->shared_expert_intermediate_size;
    int g = shared_linear(b, 0, "shared gate_proj", x, h, fs);
    int u = shared_linear(b, 1, "shared up_proj", x, h, fs);
    const int c = b->m->tensors[g].elem_bytes;
    int a = est_op1(b, EST_OP_ACT, "shared act(gate)", T * fs, c, g);
    int p = est_op2(b, EST_OP_MUL, "shared act * up", T * fs, c, a, u);
    return shared_linear(b, 2, "shared down_proj", p, fs, h);
}

/* The shared expert's output d gated by sigmoid(shared_expert_gate(x)). */
static int shared_gated(est_bld *b, int x, int d) {
    const int64_t T = b->T, h = b->run->model.hidden_size;
    const int c = b->m->tensors[d].elem_bytes;
    int sg = shared_linear(b, 3, "shared_expert_gate", x, h, 1);
    sg = est_op1(b, EST_OP_TANH, "sigmoid(shared gate)", T, c, sg); /* saves its output */
    return est_op2(b, EST_OP_MUL, "shared expert output", T * h, c, sg, d);
}

/* Routing: softmax, top-k (and the renormalisation); returns the per-row
 * weights in x's dtype (4.x), or as transformers 5.x leaves them: fp32 for
 * Mixtral (softmax(router_logits.float())), the logits' dtype for the Qwen
 * MoEs (router_top_value.to(router_logits.dtype)). */
static int route(est_bld *b, int x, int64_t kT) {
    const ft_model *md = &b->run->model;
    const int64_t T = b->T, E = md->num_experts;
    const bool fused = est_moe_fused(b->run), mixtral = md->arch == FT_ARCH_MIXTRAL;
    int logits = est_linear_adapted(b, "router", x, b->moe_router, EST_NONE, b->moe_router_la, b->moe_router_lb, T,
                                    md->hidden_size, E);
    const int logit_bytes = b->m->tensors[logits].elem_bytes;
    int probs_in = fused && mixtral ? est_cast(b, "router logits .float()", logits, 4) : logits;
    int w = est_op1(b, EST_OP_SOFTMAX, "router softmax fp32", T * E, 4, probs_in);
    int top = est_op1(b, EST_OP_COPY, "top-k weights", kT, 4, w);
    est_module_op_out2(b->m, "router top-k indices", kT, 8);
    b->m->ops[b->m->n_ops - 1].saves_out2 = b->m->tensors[w].requires_grad;
    if (md->norm_topk_prob) {
        int sums = est_op1(b, EST_OP_REDUCE, "top-k sums", T, 4, top);
        top = est_op2(b, EST_OP_MUL, "top-k weights / sums", kT, 4, top, sums);
    }
    if (fused) return mixtral ? top : est_cast(b, "routing weights", top, logit_bytes);
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

/* transformers 4.x: the loop over experts, summed by index_add_. */
static int experts_loop(est_bld *b, int x, int w, int64_t kT) {
    const ft_model *md = &b->run->model;
    const int64_t T = b->T, h = md->hidden_size, fe = md->moe_intermediate_size;
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
    return est_op2(b, EST_OP_COPY, "index_add_", T * h, c, y, idx);
}

/* grouped_mm(x.to(W.dtype), W^T, offs) over the kT sorted rows: saves its
 * input and the weight (derivatives.yaml _grouped_mm: each operand's gradient
 * needs the other); the weight's gradient is one tensor of all experts. The
 * E int32 offsets it also keeps are left out (one 512-byte block). */
static int grouped_mm(est_bld *b, const char *name, int x, int t, int64_t rows, int64_t din, int64_t dout) {
    const int w = (int)b->base_param[t];
    const int wb = b->m->params[EST_PARAM_INDEX(w)].elem_bytes;
    x = est_cast(b, "input.to(weight dtype)", x, wb);
    int y = est_op2(b, EST_OP_LINEAR, name, rows * dout, wb, x, w);
    est_module_op_gemm(b->m, (double)rows, (double)din, (double)dout, 1);
    return y;
}

/* An index x[i] whose backward keeps the indices i (when x needs a gradient). */
static int gather(est_bld *b, const char *name, int64_t elems, int bytes, int x, int i) {
    int y = est_op2(b, EST_OP_COPY, name, elems, bytes, x, i);
    b->m->ops[b->m->n_ops - 1].saves[1] = b->m->tensors[x].requires_grad;
    return y;
}

/* transformers 5.x: grouped_mm_experts_forward (see the top of this file). */
static int experts_grouped(est_bld *b, int x, int w, int64_t kT) {
    const ft_model *md = &b->run->model;
    const int64_t T = b->T, h = md->hidden_size, fe = md->moe_intermediate_size;
    const int xb = b->m->tensors[x].elem_bytes, wb = b->m->tensors[w].elem_bytes;
    int ids = est_op1(b, EST_OP_COPY, "sorted expert ids", kT, 8, EST_NONE);
    int perm = est_op1(b, EST_OP_COPY, "sort permutation", kT, 8, ids);
    int rows = est_op1(b, EST_OP_COPY, "perm // top_k", kT, 8, perm);
    int xg = gather(b, "routed inputs (sorted)", kT * h, xb, x, rows);
    int wg = gather(b, "routing weights (sorted)", kT, wb, w, perm);
    int gu = grouped_mm(b, "experts gate_up", xg, EST_LORA_GATE, kT, h, 2 * fe);
    const int c = b->m->tensors[gu].elem_bytes;
    int a = est_op1(b, EST_OP_ACT, "experts act(gate)", kT * fe, c, gu);
    int p = est_op2(b, EST_OP_MUL, "experts act * up", kT * fe, c, a, gu);
    int d = grouped_mm(b, "experts down", p, EST_LORA_DOWN, kT, fe, h);
    const int yb = c > wb ? c : wb; /* type promotion */
    int y = est_op2(b, EST_OP_MUL, "experts output * weight", kT * h, yb, d, wg);
    int inv = est_op1(b, EST_OP_COPY, "inverse permutation", kT, 8, perm);
    y = gather(b, "outputs (token order)", kT * h, yb, y, inv);
    int sum = est_op1(b, EST_OP_REDUCE, "sum over top-k", T * h, yb, y);
    return est_cast(b, "experts output .to(dtype)", sum, xb);
}

int est_moe_mlp(est_bld *b, int x) {
    const ft_model *md = &b->run->model;
    const int64_t T = b->T, h = md->hidden_size;
    const int64_t kT = md->experts_per_token * T;
    const bool shared = b->moe_shared[0] != EST_NONE;
    if (est_moe_fused(b->run)) { /* 5.x: the shared expert first, gated after the routed */
        int sd = shared ? shared_body(b, x) : EST_NONE;
        int out = experts_grouped(b, x, route(b, x, kT), kT);
        if (!shared) return out;
        int sg = shared_gated(b, x, sd);
        return est_op2(b, EST_OP_ADD, "routed + shared", T * h, b->m->tensors[out].elem_bytes, out, sg);
    }
    int out = experts_loop(b, x, route(b, x, kT), kT);
    if (shared) {
        const int c = b->m->tensors[out].elem_bytes;
        out = est_op2(b, EST_OP_ADD, "routed + shared", T * h, c, out, shared_gated(b, x, shared_body(b, x)));
    }
    return out;
}
