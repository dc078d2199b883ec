#include "zero.h"

static int64_t cd(const tr_rank *r) { return r->s.cd; }

/* A collective's status goes into the rank's backend context, which the
 * driver checks after every phase: never dropped. */
static void checked(tr_rank *r, int rc, const char *what, int64_t u) {
    if (rc) tr_backend_fail(&r->bctx, "rank %d: %s of unit %lld failed in the %s communicator", r->rank, what,
                            (long long)u, r->comm->ops->name);
}

void tr_zero_gather(tr_rank *r, int64_t u) {
    tr_buf *g = &r->gather[tr_unit_kind(&r->s, u)];
    const int64_t S = tr_unit_of(&r->s, u)->shard;
    tr_arena_acquire(&r->dev, g);
    char *chunk = (char *)g->ptr + (int64_t)r->rank * S * cd(r);
    size_t bytes = (size_t)(S * cd(r));
    int64_t so = tr_unit_shard_off(&r->s, u) * cd(r);
    if (r->cfg->offload == FT_OFFLOAD_OPTIMIZER_PARAMS)
        r->be->to_device(&r->bctx, chunk, (char *)r->h_params.ptr + so, bytes);
    else
        r->be->copy(&r->bctx, chunk, (char *)r->params.ptr + so, bytes);
    if (r->comm->size > 1) checked(r, r->comm->ops->all_gather(r->comm, chunk, g->ptr, S, r->dt), "all-gather", u);
}

void tr_zero_release_gather(tr_rank *r, int64_t u) {
    tr_arena_release(&r->dev, &r->gather[tr_unit_kind(&r->s, u)]);
}

void tr_zero_open_bucket(tr_rank *r, int64_t u) {
    tr_buf *b = &r->bucket[tr_unit_kind(&r->s, u)];
    tr_arena_acquire(&r->dev, b);
    r->be->zero(&r->bctx, b->ptr, (size_t)b->bytes);
}

void tr_zero_reduce_bucket(tr_rank *r, int64_t u) {
    tr_buf *b = &r->bucket[tr_unit_kind(&r->s, u)];
    const int64_t S = tr_unit_of(&r->s, u)->shard;
    char *chunk = (char *)b->ptr + (int64_t)r->rank * S * cd(r);
    if (r->comm->size > 1)
        checked(r, r->comm->ops->reduce_scatter(r->comm, b->ptr, chunk, S, r->dt), "reduce-scatter", u);
    r->be->add(&r->bctx, (char *)r->grads.ptr + tr_unit_shard_off(&r->s, u) * cd(r), chunk, S, r->dt);
    tr_arena_release(&r->dev, b);
}

void tr_zero_reduce_grads(tr_rank *r) {
    if (r->comm->size == 1) return;
    if (r->cfg->zero_stage == 0) {
        checked(r, r->comm->ops->all_reduce(r->comm, r->grads.ptr, r->s.full_numel, r->dt), "all-reduce", -1);
    } else if (r->cfg->zero_stage == 1) {
        for (int64_t u = 0; u < r->s.n_units; u++) {
            const int64_t S = tr_unit_of(&r->s, u)->shard;
            char *unit = (char *)r->grads.ptr + tr_unit_full_off(&r->s, u) * cd(r);
            checked(r, r->comm->ops->reduce_scatter(r->comm, unit, unit + (int64_t)r->rank * S * cd(r), S, r->dt),
                    "reduce-scatter", u);
        }
    }
}

void tr_zero_publish_params(tr_rank *r) {
    if (r->comm->size == 1 || (r->cfg->zero_stage != 1 && r->cfg->zero_stage != 2)) return;
    for (int64_t u = 0; u < r->s.n_units; u++) {
        const int64_t S = tr_unit_of(&r->s, u)->shard;
        char *unit = (char *)r->params.ptr + tr_unit_full_off(&r->s, u) * cd(r);
        checked(r, r->comm->ops->all_gather(r->comm, unit + (int64_t)r->rank * S * cd(r), unit, S, r->dt),
                "all-gather", u);
    }
}

void tr_zero_for_partition(const tr_sizes *s, int rank, tr_segment_fn fn, void *ctx) {
    const int sharded = s->zero >= 1;
    for (int64_t u = 0; u < s->n_units; u++) {
        const tr_unit *U = tr_unit_of(s, u);
        int64_t lo = sharded ? (int64_t)rank * U->shard : 0;
        int64_t hi = sharded ? lo + U->shard : U->padded;
        if (hi > U->numel) hi = U->numel; /* padding is never updated */
        for (int t = 0; t < TR_T_COUNT; t++) {
            if (U->off[t] < 0) continue;
            int64_t a = U->off[t] > lo ? U->off[t] : lo;
            int64_t b = U->off[t] + U->len[t] < hi ? U->off[t] + U->len[t] : hi;
            if (a >= b) continue;
            tr_segment seg;
            seg.u = u;
            seg.t = (tr_tensor_id)t;
            seg.idx = a;
            seg.n = b - a;
            seg.full = tr_unit_full_off(s, u) + a;
            seg.shard = sharded ? tr_unit_shard_off(s, u) + (a - lo) : -1;
            seg.opt = sharded ? seg.shard : seg.full;
            fn(&seg, ctx);
        }
    }
}
