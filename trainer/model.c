/* Planning one rank's buffers (sizes first, then one slab per category) and
 * running a micro-batch through the event list of docs/trainer.md. */
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_util.h"
#include "zero.h"
#include "step.h"

void tr_phase_label(char *buf, size_t n, const char *what, int64_t layer) {
    if (layer >= 0) snprintf(buf, n, "%s layer %lld", what, (long long)layer);
    else snprintf(buf, n, "%s", what);
}

/* Plans the ten saved tensors of a block (resout apart); att is absent when
 * the attention core is recomputed (selective). */
static int plan_slot(tr_arena *a, tr_layer_acts *x, const tr_sizes *s, bool with_att) {
    int rc = 0;
    rc |= tr_arena_plan(a, &x->ln1, TR_CAT_ACTIVATIONS, s->ln_bytes, "ln1");
    rc |= tr_arena_plan(a, &x->rstd1, TR_CAT_ACTIVATIONS, s->rstd_bytes, "rstd1");
    rc |= tr_arena_plan(a, &x->qkv, TR_CAT_ACTIVATIONS, s->qkv_bytes, "qkv");
    rc |= tr_arena_plan(a, &x->att, TR_CAT_ACTIVATIONS, with_att ? s->att_bytes : 0, "att");
    rc |= tr_arena_plan(a, &x->atty, TR_CAT_ACTIVATIONS, s->atty_bytes, "atty");
    rc |= tr_arena_plan(a, &x->resmid, TR_CAT_ACTIVATIONS, s->ln_bytes, "resmid");
    rc |= tr_arena_plan(a, &x->ln2, TR_CAT_ACTIVATIONS, s->ln_bytes, "ln2");
    rc |= tr_arena_plan(a, &x->rstd2, TR_CAT_ACTIVATIONS, s->rstd_bytes, "rstd2");
    rc |= tr_arena_plan(a, &x->gu, TR_CAT_ACTIVATIONS, s->gu_bytes, "gu");
    rc |= tr_arena_plan(a, &x->hact, TR_CAT_ACTIVATIONS, s->hact_bytes, "hact");
    return rc;
}

static int plan(tr_rank *r) {
    const tr_sizes *s = &r->s;
    tr_arena *d = &r->dev, *h = &r->host;
    int rc = 0;
    rc |= tr_arena_plan(d, &r->params, TR_CAT_PARAMS, s->params_bytes, "params");
    rc |= tr_arena_plan(d, &r->master, TR_CAT_MASTER, s->master_bytes, "master");
    rc |= tr_arena_plan(d, &r->grads, TR_CAT_GRADS, s->grads_bytes, "grads");
    rc |= tr_arena_plan(d, &r->opt_m, TR_CAT_OPTIMIZER, s->opt_bytes / 2, "adam_m");
    rc |= tr_arena_plan(d, &r->opt_v, TR_CAT_OPTIMIZER, s->opt_bytes / 2, "adam_v");
    rc |= tr_arena_plan(h, &r->h_params, TR_CAT_PARAMS, s->host_params_bytes, "host_params");
    rc |= tr_arena_plan(h, &r->h_master, TR_CAT_MASTER, s->host_master_bytes, "host_master");
    rc |= tr_arena_plan(h, &r->h_grads, TR_CAT_GRADS, s->host_grads_bytes, "host_grads");
    rc |= tr_arena_plan(h, &r->h_m, TR_CAT_OPTIMIZER, s->host_opt_bytes / 2, "host_adam_m");
    rc |= tr_arena_plan(h, &r->h_v, TR_CAT_OPTIMIZER, s->host_opt_bytes / 2, "host_adam_v");
    static const char *const gnames[] = {"gather_emb", "gather_block", "gather_head"};
    static const char *const bnames[] = {"bucket_emb", "bucket_block", "bucket_head"};
    for (int k = 0; k < TR_UNIT_KINDS; k++) {
        rc |= tr_arena_plan(d, &r->gather[k], TR_CAT_COMM, s->gather_bytes[k], gnames[k]);
        rc |= tr_arena_plan(d, &r->bucket[k], TR_CAT_COMM, s->bucket_bytes[k], bnames[k]);
    }

    rc |= tr_arena_plan(d, &r->batch, TR_CAT_ACTIVATIONS, 2 * s->BT * 4, "batch");
    rc |= tr_arena_plan(d, &r->encoded, TR_CAT_ACTIVATIONS, s->ln_bytes, "encoded");
    bool full = r->cfg->checkpointing == FT_CKPT_FULL, sel = r->cfg->checkpointing == FT_CKPT_SELECTIVE;
    for (int64_t l = 0; l < s->L; l++) {
        tr_layer_acts *a = &r->acts[l];
        if (!full) rc |= plan_slot(d, a, s, !sel);
        else memset(a, 0, sizeof *a);
        rc |= tr_arena_plan(d, &a->resout, TR_CAT_ACTIVATIONS, s->ln_bytes, "resout");
    }
    memset(&r->rc, 0, sizeof r->rc);
    if (full) rc |= plan_slot(d, &r->rc, s, true);
    rc |= tr_arena_plan(d, &r->lnf, TR_CAT_ACTIVATIONS, s->ln_bytes, "lnf");
    rc |= tr_arena_plan(d, &r->rstdf, TR_CAT_ACTIVATIONS, s->rstd_bytes, "rstdf");
    rc |= tr_arena_plan(d, &r->dres, TR_CAT_ACTIVATIONS, s->ln_bytes, "dres");
    rc |= tr_arena_plan(d, &r->dln, TR_CAT_ACTIVATIONS, s->ln_bytes, "dln");
    rc |= tr_arena_plan(d, &r->dqkv, TR_CAT_ACTIVATIONS, s->qkv_bytes, "dqkv");
    rc |= tr_arena_plan(d, &r->datty, TR_CAT_ACTIVATIONS, s->atty_bytes, "datty");
    rc |= tr_arena_plan(d, &r->dgu, TR_CAT_ACTIVATIONS, s->gu_bytes, "dgu");
    rc |= tr_arena_plan(d, &r->dhact, TR_CAT_ACTIVATIONS, s->hact_bytes, "dhact");
    rc |= tr_arena_plan(d, &r->att_ws, TR_CAT_WORKSPACE, s->att_ws_bytes, "att_ws");
    rc |= tr_arena_plan(d, &r->datt_ws, TR_CAT_WORKSPACE, s->datt_ws_bytes, "datt_ws");
    rc |= tr_arena_plan(d, &r->losses, TR_CAT_LOGITS, s->losses_bytes, "losses");
    rc |= tr_arena_plan(d, &r->logits, TR_CAT_LOGITS, s->logits_bytes, "logits");
    return rc;
}

int tr_rank_create(tr_rank *r, const tr_config *cfg, const tr_backend *be, tr_comm *comm, int rank,
                   int64_t budget_bytes, bool *oom, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    *oom = false;
    r->cfg = cfg;
    r->be = be;
    r->comm = comm;
    r->rank = rank;
    r->dt = cfg->precision == FT_PREC_BF16_MIXED ? TR_BF16 : TR_F32;
    if (tr_sizes_compute(cfg, &r->s, err, errlen)) return -1;
    /* In-process ranks on a GPU backend take one device each. */
    if (be->open(&r->bctx, rank, err, errlen)) return -1;
    r->bctx_open = true;
    tr_arena_init(&r->dev, "device", &be->mem);
    tr_arena_init(&r->host, "host", &be->host_mem);
    r->acts = calloc((size_t)r->s.L, sizeof *r->acts);
    r->host_batch = calloc((size_t)(2 * r->s.BT), sizeof *r->host_batch);
    r->host_losses = calloc((size_t)r->s.BT, sizeof *r->host_losses);
    if (!r->acts || !r->host_batch || !r->host_losses || plan(r)) {
        *oom = true;
        tr_rank_destroy(r);
        return ft_errorf(err, errlen, "out of host memory planning rank %d", rank);
    }
    int64_t need = tr_arena_reserved(&r->dev) + tr_arena_reserved(&r->host);
    if (need > budget_bytes) {
        *oom = true;
        tr_rank_destroy(r);
        return ft_errorf(err, errlen, "out of memory: rank %d needs %lld bytes, it may use %lld", rank,
                         (long long)need, (long long)budget_bytes);
    }
    if (tr_arena_commit(&r->dev, err, errlen) || tr_arena_commit(&r->host, err, errlen)) {
        *oom = true;
        tr_rank_destroy(r);
        return -1;
    }
    tr_arena_phase(&r->dev, "init");
    tr_arena_phase(&r->host, "init");
    tr_buf *dev[] = {&r->params, &r->master, &r->grads, &r->opt_m, &r->opt_v};
    tr_buf *host[] = {&r->h_params, &r->h_master, &r->h_grads, &r->h_m, &r->h_v};
    tr_arena_acquire_n(&r->dev, dev, 5);
    tr_arena_acquire_n(&r->host, host, 5);
    return 0;
}

void tr_rank_destroy(tr_rank *r) {
    tr_arena_free(&r->dev);
    tr_arena_free(&r->host);
    if (r->bctx_open) r->be->close(&r->bctx);
    r->bctx_open = false;
    free(r->acts);
    free(r->host_batch);
    free(r->host_losses);
    r->acts = NULL;
    r->host_batch = NULL;
    r->host_losses = NULL;
}

/* The slot tensors of a block, then resout, as an acquire/release list;
 * returns how many to take (resout last, so TR_SLOT_BUFS leaves it out). */
static int block_list(tr_layer_acts *a, tr_buf **list, bool with_resout) {
    tr_buf *all[TR_SLOT_BUFS + 1] = {&a->ln1, &a->rstd1, &a->qkv, &a->att, &a->atty, &a->resmid,
                                     &a->ln2, &a->rstd2, &a->gu,  &a->hact, &a->resout};
    memcpy(list, all, sizeof all);
    return with_resout ? TR_SLOT_BUFS + 1 : TR_SLOT_BUFS;
}

/* A block's tensors as the block functions see them: in full checkpointing
 * the recompute slot plus the block's own saved output. */
static tr_layer_acts block_view(tr_rank *r, int64_t l) {
    if (r->cfg->checkpointing != FT_CKPT_FULL) return r->acts[l];
    tr_layer_acts v = r->rc;
    v.resout = r->acts[l].resout;
    return v;
}

static const void *block_input(tr_rank *r, int64_t l) {
    return l == 0 ? r->encoded.ptr : r->acts[l - 1].resout.ptr;
}

double tr_rank_micro_batch(tr_rank *r, float loss_scale) {
    const tr_sizes *s = &r->s;
    const tr_backend *be = r->be;
    tr_arena *d = &r->dev;
    const bool full = r->cfg->checkpointing == FT_CKPT_FULL;
    const bool sel = r->cfg->checkpointing == FT_CKPT_SELECTIVE;
    const int zero = r->cfg->zero_stage;
    char label[TR_LABEL_MAX];
    tr_buf *list[TR_SLOT_BUFS + 1];

    /* Embedding. */
    tr_arena_phase(d, "forward embedding");
    tr_arena_acquire(d, &r->batch);
    be->to_device(&r->bctx, r->batch.ptr, r->host_batch, (size_t)(2 * s->BT) * sizeof(int32_t));
    if (zero == 3) tr_zero_gather(r, 0);
    tr_arena_acquire(d, &r->encoded);
    tr_step_embedding_fwd(r);
    if (zero == 3) tr_zero_release_gather(r, 0);

    /* Blocks. */
    for (int64_t l = 0; l < s->L; l++) {
        tr_phase_label(label, sizeof label, "forward", l);
        tr_arena_phase(d, label);
        if (zero == 3) tr_zero_gather(r, l + 1);
        if (!full) {
            tr_arena_acquire_n(d, list, block_list(&r->acts[l], list, true));
        } else {
            tr_arena_acquire(d, &r->acts[l].resout);
            tr_arena_acquire_n(d, list, block_list(&r->rc, list, false));
        }
        tr_layer_acts v = block_view(r, l);
        tr_step_block_fwd(r, l, &v, block_input(r, l), false);
        if (full) tr_arena_release_n(d, list, block_list(&r->rc, list, false));
        if (zero == 3) tr_zero_release_gather(r, l + 1);
    }

    /* LM head, loss and the head's backward. */
    tr_arena_phase(d, "loss");
    double loss = tr_step_loss(r, loss_scale);

    /* Blocks, backward. */
    for (int64_t l = s->L - 1; l >= 0; l--) {
        tr_phase_label(label, sizeof label, "backward", l);
        tr_arena_phase(d, label);
        if (zero == 3) tr_zero_gather(r, l + 1);
        if (zero >= 2) tr_zero_open_bucket(r, l + 1);
        tr_layer_acts v = block_view(r, l);
        if (full) {
            tr_arena_acquire_n(d, list, block_list(&r->rc, list, false));
            tr_step_block_fwd(r, l, &v, block_input(r, l), true);
        }
        if (sel) {
            tr_arena_acquire(d, &r->att_ws);
            tr_step_attention_recompute(r, &v);
        }
        tr_buf *grads[] = {&r->dqkv, &r->datty, &r->dgu, &r->dhact};
        tr_arena_acquire_n(d, grads, 4);
        tr_step_block_bwd(r, l, &v, block_input(r, l));
        tr_arena_release_n(d, grads, 4);
        if (sel) tr_arena_release(d, &r->att_ws);
        if (!full) {
            tr_arena_release_n(d, list, block_list(&r->acts[l], list, true));
        } else {
            tr_arena_release_n(d, list, block_list(&r->rc, list, false));
            tr_arena_release(d, &r->acts[l].resout);
        }
        if (zero >= 2) tr_zero_reduce_bucket(r, l + 1);
        if (zero == 3) tr_zero_release_gather(r, l + 1);
    }

    /* Embedding, backward. */
    tr_arena_phase(d, "backward embedding");
    bool tied = r->cfg->model.tied_embeddings;
    if (zero >= 2 && !tied) tr_zero_open_bucket(r, 0);
    tr_step_embedding_bwd(r);
    if (zero >= 2) tr_zero_reduce_bucket(r, 0);
    tr_buf *tail[] = {&r->dres, &r->dln, &r->encoded, &r->batch};
    tr_arena_release_n(d, tail, 4);
    return loss;
}

/* Elements drawn per host tile: one upload per 1 Mi elements (4 MiB of fp32)
 * where 4,096-element tiles made Llama-3.2-1B's two blocks and 262 M-element
 * embedding about 190,000 small copies and conversions on the GPU. */
#define INIT_TILE ((int64_t)1 << 20)

typedef struct init_tile {
    float *f;
    int64_t n;
} init_tile;

/* Fills n elements of unit u from idx into dst (dtype dt) through an fp32 tile. */
static void fill(tr_rank *r, const tr_init *in, const init_tile *tl, int64_t u, int64_t idx, int64_t n,
                 void *dst, tr_dtype dt, bool device) {
    for (int64_t i = 0; i < n; i += tl->n) {
        int64_t k = n - i < tl->n ? n - i : tl->n;
        tr_init_fill(in, u, idx + i, k, tl->f);
        void *out = (char *)dst + i * tr_dtype_bytes(dt);
        if (device) {
            r->be->upload_f32(&r->bctx, out, dt, tl->f, k);
        } else {
            for (int64_t j = 0; j < k; j++) tr_st(out, j, tl->f[j], dt);
        }
    }
}

static void init_unit(tr_rank *r, const tr_init *in, const init_tile *tl, int64_t u) {
    const tr_sizes *s = &r->s;
    const int stage = r->cfg->zero_stage;
    const tr_unit *U = tr_unit_of(s, u);
    const int64_t lo = stage >= 1 ? (int64_t)r->rank * U->shard : 0;
    const int64_t n = stage >= 1 ? U->shard : U->padded;
    /* The fp32 weights the optimizer updates: this rank's partition. */
    const int64_t opt = stage >= 1 ? tr_unit_shard_off(s, u) : tr_unit_full_off(s, u);
    float *master = r->master.bytes ? (float *)r->master.ptr + opt : NULL;
    if (master) fill(r, in, tl, u, lo, n, master, TR_F32, true);
    /* The compute copy: whole units, or this rank's shard at ZeRO-3. Where it
     * holds the master's elements (no sharding, or ZeRO-3's shard) it is the
     * master converted on the device, the bits upload_f32 gives the same draw,
     * without drawing every element twice. */
    if (r->params.bytes) {
        void *dst = (char *)r->params.ptr + (stage == 3 ? tr_unit_shard_off(s, u) : tr_unit_full_off(s, u)) * s->cd;
        if (master && (stage == 0 || stage == 3))
            r->be->convert(&r->bctx, dst, r->dt, master, TR_F32, n);
        else if (stage == 3)
            fill(r, in, tl, u, lo, U->shard, dst, r->dt, true);
        else
            fill(r, in, tl, u, 0, U->padded, dst, r->dt, true);
    }
    if (r->h_params.bytes)
        fill(r, in, tl, u, lo, U->shard, (char *)r->h_params.ptr + tr_unit_shard_off(s, u) * s->cd, r->dt, false);
    if (r->h_master.bytes) fill(r, in, tl, u, lo, n, (float *)r->h_master.ptr + opt, TR_F32, false);
}

void tr_rank_init_weights(tr_rank *r, const tr_init *in) {
    float small[4096];
    init_tile tl = {malloc((size_t)INIT_TILE * sizeof(float)), INIT_TILE};
    if (!tl.f) tl = (init_tile){small, 4096}; /* slower, same values */
    for (int64_t u = 0; u < r->s.n_units; u++) init_unit(r, in, &tl, u);
    if (tl.f != small) free(tl.f);
}
