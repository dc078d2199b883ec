/* torchtitan's op-level checkpoint policy on the block description (sac.h). */
#include "sac.h"

#include "block.h"

/* A MoE router's gate: a Linear from the hidden size to the experts
 * (torchtitan forces its mm to recompute by weight shape). */
static bool router_gate(const est_mop *o, const est_run *run) {
    return run->model.num_experts > 0 && (int64_t)o->K == run->model.hidden_size &&
           (int64_t)o->N == run->model.num_experts;
}

void est_sac_mark(est_module *m, const est_run *run) {
    int64_t mm = 0; /* torchtitan's forward_mm_count */
    for (int j = 0; j < m->n_ops; j++) {
        est_mop *o = &m->ops[j];
        o->sac_save = false;
        if (o->kind == EST_OP_LINEAR) {
            /* F.linear with a bias over 3-D input is addmm: not on the list */
            const bool bias = o->n_in > 2 && o->in[2] != EST_NONE;
            /* LLM.int8's base is bitsandbytes' own int8 matmul, not aten.mm */
            const bool int8 = run->quant == EST_QUANT_INT8 && EST_IS_PARAM(o->in[1]) &&
                              m->params[EST_PARAM_INDEX(o->in[1])].kind == EST_PK_LINEAR_WEIGHT;
            if (bias || int8 || router_gate(o, run)) continue;
            mm++;
            o->sac_save = mm % 2 == 1;
        } else if (o->kind == EST_OP_ATTENTION) {
            o->sac_save = run->attention == EST_ATTN_SDPA;
        }
    }
}

int64_t est_sac_kept_bytes(const est_module *m) {
    int64_t sum = 0;
    for (int j = 0; j < m->n_ops; j++) {
        const est_mop *o = &m->ops[j];
        if (!o->sac_save) continue;
        if (o->out >= 0) sum += est_mtensor_bytes(&m->tensors[o->out]);
        if (o->out2 >= 0) sum += est_mtensor_bytes(&m->tensors[o->out2]);
    }
    return sum;
}

int est_sac_block(const est_run *run, const est_regime *g, est_module *m, char *err, size_t errlen) {
    if (est_module_block(run, g, false, m, err, errlen) < 0) return -1;
    est_sac_mark(m, run);
    return 0;
}
