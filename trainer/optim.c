#include "optim.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "ops.h"
#include "parallel.h"
#include "zero.h"

typedef struct opt_loop {
    float *w, *m, *v;
    void *wout;
    const void *g;
    tr_dtype wout_dt, g_dt;
    float c1, c2;
    const tr_opt_args *a;
} opt_loop;

/* One AdamW update of elements [i0, i1); inlined with literal dtypes below so
 * the common fp32 case (fp32 gradients, no compute copy) vectorizes. */
TR_INLINE void adamw_body(const opt_loop *o, int64_t i0, int64_t i1, tr_dtype g_dt, bool has_wout) {
    const tr_opt_args *a = o->a;
    const float b1 = TR_ADAM_BETA1, b2 = TR_ADAM_BETA2, lr = a->lr, wd = a->weight_decay, gs = a->grad_scale;
    const float c1 = o->c1, c2 = o->c2;
    float *w = o->w, *m = o->m, *v = o->v;
    TR_SIMD
    for (int64_t i = i0; i < i1; i++) {
        float gi = tr_ld(o->g, i, g_dt) * gs;
        m[i] = b1 * m[i] + (1.0f - b1) * gi;
        v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
        float mh = m[i] / c1, vh = v[i] / c2;
        w[i] -= lr * (mh / (sqrtf(vh) + TR_ADAM_EPS) + wd * w[i]);
        if (has_wout) tr_st(o->wout, i, w[i], o->wout_dt);
    }
}

static void adamw_range(void *p, int64_t i0, int64_t i1) {
    const opt_loop *o = p;
    if (o->g_dt == TR_F32 && !o->wout) adamw_body(o, i0, i1, TR_F32, false);
    else adamw_body(o, i0, i1, o->g_dt, o->wout != NULL);
}

void tr_cpu_adamw(float *w, void *wout, tr_dtype wout_dt, const void *g, tr_dtype g_dt, float *m, float *v,
                  int64_t n, const tr_opt_args *a) {
    const float b1 = TR_ADAM_BETA1, b2 = TR_ADAM_BETA2;
    opt_loop o = {w, m, v, wout, g, wout_dt, g_dt, 1.0f - powf(b1, (float)a->t), 1.0f - powf(b2, (float)a->t), a};
    tr_par_for(n, n, adamw_range, &o);
}

static void sgd_range(void *p, int64_t i0, int64_t i1) {
    const opt_loop *o = p;
    const tr_opt_args *a = o->a;
    for (int64_t i = i0; i < i1; i++) {
        float gi = tr_ld(o->g, i, o->g_dt) * a->grad_scale;
        o->w[i] -= a->lr * (gi + a->weight_decay * o->w[i]);
        if (o->wout) tr_st(o->wout, i, o->w[i], o->wout_dt);
    }
}

void tr_cpu_sgd(float *w, void *wout, tr_dtype wout_dt, const void *g, tr_dtype g_dt, int64_t n,
                const tr_opt_args *a) {
    opt_loop o = {.w = w, .wout = wout, .g = g, .wout_dt = wout_dt, .g_dt = g_dt, .a = a};
    tr_par_for(n, n, sgd_range, &o);
}

double tr_lr_at(const tr_config *cfg, int64_t step) {
    if (step < cfg->warmup) return cfg->lr * (double)(step + 1) / (double)cfg->warmup;
    double lr_min = TR_MIN_LR_FRAC * cfg->lr;
    int64_t decay = cfg->steps - cfg->warmup;
    if (decay <= 0) return cfg->lr;
    double p = (double)(step - cfg->warmup) / (double)decay;
    if (p > 1) p = 1;
    return lr_min + 0.5 * (cfg->lr - lr_min) * (1.0 + cos(M_PI * p));
}

/* Sum of squares of this rank's part of the reduced gradients. */
static double partition_sumsq(tr_rank *r) {
    const tr_sizes *s = &r->s;
    switch (r->cfg->zero_stage) {
    case 0: return r->be->sumsq(&r->bctx, r->grads.ptr, s->full_numel, r->dt);
    case 1: {
        double sum = 0;
        for (int64_t u = 0; u < s->n_units; u++) {
            const int64_t S = tr_unit_of(s, u)->shard;
            sum += r->be->sumsq(&r->bctx, (char *)r->grads.ptr + (tr_unit_full_off(s, u) + r->rank * S) * s->cd, S, r->dt);
        }
        return sum;
    }
    default: return r->be->sumsq(&r->bctx, r->grads.ptr, s->shard_numel, r->dt);
    }
}

typedef struct update_ctx {
    tr_rank *r;
    tr_opt_args args;
} update_ctx;

static void update_segment(const tr_segment *seg, void *vctx) {
    update_ctx *c = vctx;
    tr_rank *r = c->r;
    const tr_sizes *s = &r->s;
    const int stage = r->cfg->zero_stage;
    const bool adam = r->cfg->optimizer == FT_OPT_ADAMW;
    const bool mixed = r->cfg->precision == FT_PREC_BF16_MIXED;
    tr_opt_args a = c->args;
    if (!tr_tensor_decays(seg->t)) a.weight_decay = 0;
    /* Where the gradient, the fp32 weight and the compute copy of this segment live. */
    const int64_t gi = stage >= 2 ? seg->shard : seg->full;
    const int64_t pi = stage == 3 ? seg->shard : seg->full;
    const void *g = (const char *)r->grads.ptr + gi * s->cd;
    char *params = (char *)r->params.ptr + pi * s->cd;

    switch (r->cfg->offload) {
    case FT_OFFLOAD_NONE: {
        float *w = mixed ? (float *)r->master.ptr + seg->opt : (float *)(void *)params;
        void *wout = mixed ? params : NULL;
        if (adam)
            r->be->adamw(&r->bctx, w, wout, r->dt, g, r->dt, (float *)r->opt_m.ptr + seg->opt,
                         (float *)r->opt_v.ptr + seg->opt, seg->n, &a);
        else
            r->be->sgd(&r->bctx, w, wout, r->dt, g, r->dt, seg->n, &a);
        break;
    }
    case FT_OFFLOAD_OPTIMIZER:
    case FT_OFFLOAD_OPTIMIZER_PARAMS: {
        /* Gradients go down to the host in fp32, the host updates its fp32
         * weights, and the compute copy goes back (or stays, for params offload). */
        bool off_par = r->cfg->offload == FT_OFFLOAD_OPTIMIZER_PARAMS;
        float *hg = (float *)r->h_grads.ptr + seg->opt;
        r->be->download_f32(&r->bctx, hg, g, r->dt, seg->n);
        float *w = (off_par && !mixed) ? (float *)r->h_params.ptr + seg->opt : (float *)r->h_master.ptr + seg->opt;
        void *wout = (off_par && mixed) ? (char *)r->h_params.ptr + seg->opt * s->cd : NULL;
        if (adam)
            tr_cpu_adamw(w, wout, r->dt, hg, TR_F32, (float *)r->h_m.ptr + seg->opt,
                         (float *)r->h_v.ptr + seg->opt, seg->n, &a);
        else
            tr_cpu_sgd(w, wout, r->dt, hg, TR_F32, seg->n, &a);
        if (!off_par) r->be->upload_f32(&r->bctx, params, r->dt, w, seg->n);
        break;
    }
    }
}

double tr_optimizer_step(tr_rank *r, int64_t step) {
    double sumsq = partition_sumsq(r);
    if (r->cfg->zero_stage >= 1 && r->comm->size > 1) {
        /* Through the context's device buffer: a communicator such as NCCL
         * reduces device memory only. */
        r->be->to_device(&r->bctx, r->bctx.scalars, &sumsq, sizeof sumsq);
        if (r->comm->ops->all_reduce(r->comm, r->bctx.scalars, 1, TR_F64))
            tr_backend_fail(&r->bctx, "rank %d: all-reduce of the gradient norm failed in the %s communicator",
                            r->rank, r->comm->ops->name);
        r->be->to_host(&r->bctx, &sumsq, r->bctx.scalars, sizeof sumsq);
    }
    double norm = sqrt(sumsq);
    update_ctx c;
    memset(&c, 0, sizeof c);
    c.r = r;
    c.args.lr = (float)tr_lr_at(r->cfg, step);
    c.args.weight_decay = (float)r->cfg->weight_decay;
    c.args.grad_scale = (r->cfg->clip > 0 && norm > r->cfg->clip) ? (float)(r->cfg->clip / norm) : 1.0f;
    c.args.t = step + 1;
    tr_zero_for_partition(&r->s, r->rank, update_segment, &c);
    r->be->zero(&r->bctx, r->grads.ptr, (size_t)r->grads.bytes);
    tr_zero_publish_params(r);
    return norm;
}
