#include "rank.h"

void *tr_rank_unit_params(tr_rank *r, int64_t u) {
    if (r->cfg->zero_stage == 3) {
        tr_buf *g = &r->gather[tr_unit_kind(&r->s, u)];
        TR_ASSERT(g->live);
        return g->ptr;
    }
    return (char *)r->params.ptr + tr_unit_full_off(&r->s, u) * r->s.cd;
}

void *tr_rank_unit_grads(tr_rank *r, int64_t u) {
    if (r->cfg->zero_stage >= 2) {
        tr_buf *b = &r->bucket[tr_unit_kind(&r->s, u)];
        TR_ASSERT(b->live);
        return b->ptr;
    }
    return (char *)r->grads.ptr + tr_unit_full_off(&r->s, u) * r->s.cd;
}
