#include "params.h"

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

void est_count_params(const ft_model *m, int64_t layers, est_params *out) {
    const int64_t h = m->hidden_size, q_out = m->num_heads * m->head_dim,
                  kv_out = m->num_kv_heads * m->head_dim, ff = m->intermediate_size;
    est_layer_params *l = &out->layer;
    /* nn.Linear(in, out, bias): in*out weights plus out biases. */
    l->q = h * q_out + (m->qkv_bias ? q_out : 0);
    l->k = h * kv_out + (m->qkv_bias ? kv_out : 0);
    l->v = h * kv_out + (m->qkv_bias ? kv_out : 0);
    l->o = q_out * h + (m->o_bias ? h : 0);
    /* Mixture of experts: E routed experts of width fe, each a SwiGLU of three
     * bias-free Linears (MixtralBlockSparseTop2MLP w1/w3/w2, Qwen2MoeMLP), all
     * resident; a bias-free router Linear(h, E); Qwen2-MoE adds a shared
     * expert of width fs and its Linear(h, 1) gate. */
    const int64_t E = m->num_experts > 0 ? m->num_experts : 1;
    const int64_t fe = m->num_experts > 0 ? m->moe_intermediate_size : ff;
    const int64_t fs = m->shared_expert_intermediate_size;
    const int64_t expert = 3 * h * fe + (m->mlp_bias ? 2 * fe + h : 0);
    l->gate = E * (h * fe + (m->mlp_bias ? fe : 0));
    l->up = E * (h * fe + (m->mlp_bias ? fe : 0));
    l->down = E * (fe * h + (m->mlp_bias ? h : 0));
    l->norms = (m->sandwich_norms ? 4 : 2) * h; /* Gemma-2: four RMSNorms per block */
    if (m->qk_norm) l->norms += 2 * m->head_dim; /* Qwen3, Gemma 3: q_norm and k_norm */
    l->router = m->num_experts > 0 ? h * m->num_experts : 0;
    l->shared_expert = fs > 0 ? 3 * h * fs + h : 0;
    l->total = l->q + l->k + l->v + l->o + l->gate + l->up + l->down + l->norms + l->router +
               l->shared_expert;
    const int64_t k_active = m->num_experts > 0 ? m->experts_per_token : 1;
    l->active = l->q + l->k + l->v + l->o + k_active * expert + l->norms + l->router +
                l->shared_expert;
    /* Largest single tensor: one expert's matrix, not the sum of them; Phi-3's
     * fused projections are one tensor each. */
    l->largest = max64(max64(l->q, l->o), max64(max64(l->gate / E, l->down / E), h * fs));
    if (m->fused_qkv) l->largest = max64(l->largest, l->q + l->k + l->v);
    if (m->fused_gate_up) l->largest = max64(l->largest, 2 * h * fe);

    out->layers = layers;
    out->embedding = m->vocab_size * h;
    out->final_norm = h;
    out->lm_head = m->tied_embeddings ? 0 : m->vocab_size * h;
    out->total = out->embedding + layers * l->total + out->final_norm + out->lm_head;
    out->largest_tensor = max64(out->embedding, l->largest);
    out->active = out->embedding + layers * l->active + out->final_norm + out->lm_head;
}
