#include "seam_util.h"

#include <stdlib.h>

#include "constants.h"
#include "hf_modeling.h"
#include "quant.h"

/* Slots: embedding params first, then L blocks x the block's params, then the head's. */
int est_sim_slot(const est_sim *s, int inst, int p) {
    if (inst == EST_INST_EMBED) return p;
    if (inst <= s->L) return s->embed.n_params + (inst - 1) * s->block.n_params + p;
    if (s->head.params[p].tied) return -1;
    return s->embed.n_params + (int)s->L * s->block.n_params + p;
}

int est_sim_slots(const est_sim *s) {
    return s->embed.n_params + (int)s->L * s->block.n_params + s->head.n_params;
}

int est_sim_grad_slot(const est_sim *s, int inst, int p) {
    int slot = est_sim_slot(s, inst, p);
    return slot >= 0 ? slot : 0; /* the tied head's gradient is the embedding's */
}

int est_sim_params(const est_sim *s, bool reversed, est_param_ref *out) {
    int n = 0;
    const int last = (int)s->L + 1;
    for (int inst = 0; inst <= last; inst++) {
        const est_module *m = est_sim_module(s, inst);
        for (int p = 0; p < m->n_params; p++) {
            int slot = est_sim_slot(s, inst, p);
            if (slot < 0) continue;
            out[n++] = (est_param_ref){.inst = inst, .p = p, .slot = slot};
        }
    }
    if (reversed)
        for (int i = 0; i < n / 2; i++) {
            est_param_ref t = out[i];
            out[i] = out[n - 1 - i];
            out[n - 1 - i] = t;
        }
    return n;
}

const est_mparam *est_sim_param(const est_sim *s, int inst, int p) {
    return &est_sim_module(s, inst)->params[p];
}

int64_t est_sim_param_elems(const est_sim *s, int inst, int p) {
    const est_mparam *pp = est_sim_param(s, inst, p);
    return pp->rows * pp->cols * pp->copies;
}

int64_t est_sim_param_storage(const est_sim *s, int inst, int p) {
    const est_mparam *pp = est_sim_param(s, inst, p);
    const int64_t n = est_sim_param_elems(s, inst, p);
    if (s->run->quant != EST_QUANT_NONE && !pp->trainable && pp->kind == EST_PK_LINEAR_WEIGHT &&
        inst != EST_INST_EMBED && inst <= s->L)
        return est_quant_matrix_bytes(s->run, pp->rows * pp->cols, pp->rows) * pp->copies;
    return n * pp->elem_bytes;
}

void est_sim_modeling_buffers(est_sim *s, int elem_bytes) {
    const int64_t rope = est_rope_cache_bytes(s->run); /* in the compute dtype, all layers */
    if (rope <= 0 || s->L <= 0) return;
    const int64_t per = rope / s->L / 2 / est_dtypes_of(s->run).act * elem_bytes;
    for (int64_t i = 0; i < 2 * s->L; i++) est_sim_alloc(s, EST_CAT_PARAMS, per, "rotary cache", 0);
}

bool est_held_push(est_sim *s, est_held_outputs *h, int32_t id) {
    if (h->n == h->cap) {
        const int cap = h->cap ? h->cap * 2 : 64;
        int32_t *ids = realloc(h->ids, (size_t)cap * sizeof *ids);
        if (!ids) {
            s->st->oom = true;
            return false;
        }
        h->ids = ids;
        h->cap = cap;
    }
    h->ids[h->n++] = id;
    return true;
}

void est_hold_outputs(est_sim *s, est_held_outputs *h, int inst, int op, bool backward) {
    if (backward || s->recompute) return;
    const est_module *m = est_sim_module(s, inst);
    const int outs[2] = {m->ops[op].out, m->ops[op].out2};
    for (int k = 0; k < 2; k++) {
        if (outs[k] < 0 || !m->tensors[outs[k]].model_output) continue;
        const int32_t id = s->ids[(size_t)inst * EST_MOD_MAX_TENSORS + outs[k]];
        if (id < 0 || id >= s->refs_capacity || s->refs[id] <= 0) continue;
        est_sim_ref(s, id);
        if (!est_held_push(s, h, id)) {
            est_sim_release(s, id);
            return;
        }
    }
}

void est_release_outputs(est_sim *s, est_held_outputs *h) {
    for (int i = 0; i < h->n; i++) est_sim_release(s, h->ids[i]);
    h->n = 0;
}

void est_held_free(est_held_outputs *h) {
    free(h->ids);
    *h = (est_held_outputs){0};
}
