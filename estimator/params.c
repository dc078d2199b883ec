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
    l->gate = h * ff + (m->mlp_bias ? ff : 0);
    l->up = h * ff + (m->mlp_bias ? ff : 0);
    l->down = ff * h + (m->mlp_bias ? h : 0);
    l->norms = 2 * h;
    l->total = l->q + l->k + l->v + l->o + l->gate + l->up + l->down + l->norms;
    l->largest = max64(max64(l->q, l->o), max64(l->gate, l->down));

    out->layers = layers;
    out->embedding = m->vocab_size * h;
    out->final_norm = h;
    out->lm_head = m->tied_embeddings ? 0 : m->vocab_size * h;
    out->total = out->embedding + layers * l->total + out->final_norm + out->lm_head;
    out->largest_tensor = max64(out->embedding, l->largest);
}
