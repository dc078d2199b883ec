/* Forward and backward of the pieces of a Llama decoder (HF LlamaForCausalLM):
 *   x0 = embed(tokens)
 *   per block:  a = x + o_proj(attn(rope(qkv(rmsnorm1(x)))))
 *               y = a + down(silu(gate(rmsnorm2(a))) * up(rmsnorm2(a)))
 *   logits = lm_head(rmsnorm_f(x_L)),  loss = mean cross-entropy
 * Residual gradients flow through dres: each norm's backward adds into it. */
#include "step.h"

#include "zero.h"

#define W(base, t) ((base) && r->s.unit[TR_UNIT_LAYER].off[t] >= 0 \
                        ? (void *)((char *)(base) + r->s.unit[TR_UNIT_LAYER].off[t] * r->s.cd) : NULL)

static const int32_t *tokens(tr_rank *r) { return r->batch.ptr; }
static const int32_t *targets(tr_rank *r) { return (const int32_t *)r->batch.ptr + r->s.BT; }

void tr_step_embedding_fwd(tr_rank *r) {
    const tr_sizes *s = &r->s;
    r->be->embedding_fwd(&r->bctx, r->encoded.ptr, tokens(r), tr_rank_unit_params(r, 0), s->BT, s->h, r->dt);
}

void tr_step_embedding_bwd(tr_rank *r) {
    const tr_sizes *s = &r->s;
    r->be->embedding_bwd(&r->bctx, tr_rank_unit_grads(r, 0), r->dres.ptr, tokens(r), s->BT, s->h, r->dt);
}

static void attention_core(tr_rank *r, tr_layer_acts *v, void *att, void *out) {
    const tr_sizes *s = &r->s;
    if (r->cfg->attention == FT_ATTN_EAGER)
        r->be->attn_eager_fwd(&r->bctx, out, att, v->qkv.ptr, s->B, s->T, s->nh, s->nkv, s->hd, r->dt);
    else
        r->be->attn_flash_fwd(&r->bctx, out, att, v->qkv.ptr, s->B, s->T, s->nh, s->nkv, s->hd, r->dt);
}

void tr_step_block_fwd(tr_rank *r, int64_t l, tr_layer_acts *v, const void *x, bool recompute) {
    const tr_sizes *s = &r->s;
    const tr_backend *be = r->be;
    const ft_model *m = &r->cfg->model;
    const tr_dtype dt = r->dt;
    const int64_t BT = s->BT, h = s->h, I = s->I;
    void *w = tr_rank_unit_params(r, l + 1);

    be->rmsnorm_fwd(&r->bctx, v->ln1.ptr, v->rstd1.ptr, x, W(w, TR_T_LN1), BT, h, m->rms_norm_eps, dt);
    be->matmul_fwd(&r->bctx, v->qkv.ptr, v->ln1.ptr, W(w, TR_T_QKV_W), W(w, TR_T_QKV_B), BT, h, s->qkvd, dt);
    be->rope_fwd(&r->bctx, v->qkv.ptr, s->B, s->T, s->nh, s->nkv, s->hd, m->rope_theta, dt);
    if (r->cfg->checkpointing == FT_CKPT_SELECTIVE) {
        tr_arena_acquire(&r->dev, &r->att_ws);
        attention_core(r, v, r->att_ws.ptr, v->atty.ptr);
        tr_arena_release(&r->dev, &r->att_ws);
    } else {
        attention_core(r, v, v->att.ptr, v->atty.ptr);
    }
    be->matmul_fwd(&r->bctx, v->resmid.ptr, v->atty.ptr, W(w, TR_T_O_W), W(w, TR_T_O_B), BT, s->qd, h, dt);
    be->add(&r->bctx, v->resmid.ptr, x, BT * h, dt);
    be->rmsnorm_fwd(&r->bctx, v->ln2.ptr, v->rstd2.ptr, v->resmid.ptr, W(w, TR_T_LN2), BT, h, m->rms_norm_eps, dt);
    be->matmul_fwd(&r->bctx, v->gu.ptr, v->ln2.ptr, W(w, TR_T_GU_W), W(w, TR_T_GU_B), BT, h, 2 * I, dt);
    be->swiglu_fwd(&r->bctx, v->hact.ptr, v->gu.ptr, BT, I, dt);
    if (recompute) return;
    be->matmul_fwd(&r->bctx, v->resout.ptr, v->hact.ptr, W(w, TR_T_DOWN_W), W(w, TR_T_DOWN_B), BT, I, h, dt);
    be->add(&r->bctx, v->resout.ptr, v->resmid.ptr, BT * h, dt);
}

void tr_step_attention_recompute(tr_rank *r, tr_layer_acts *v) {
    attention_core(r, v, r->att_ws.ptr, NULL);
}

void tr_step_block_bwd(tr_rank *r, int64_t l, tr_layer_acts *v, const void *x) {
    const tr_sizes *s = &r->s;
    const tr_backend *be = r->be;
    const tr_dtype dt = r->dt;
    const int64_t BT = s->BT, h = s->h, I = s->I;
    void *w = tr_rank_unit_params(r, l + 1), *g = tr_rank_unit_grads(r, l + 1);
    void *dres = r->dres.ptr, *dln = r->dln.ptr;

    /* MLP: y = a + down(hact) */
    be->matmul_bwd(&r->bctx, r->dhact.ptr, W(g, TR_T_DOWN_W), W(g, TR_T_DOWN_B), dres, v->hact.ptr,
                   W(w, TR_T_DOWN_W), BT, I, h, dt);
    be->swiglu_bwd(&r->bctx, r->dgu.ptr, r->dhact.ptr, v->gu.ptr, BT, I, dt);
    be->matmul_bwd(&r->bctx, dln, W(g, TR_T_GU_W), W(g, TR_T_GU_B), r->dgu.ptr, v->ln2.ptr, W(w, TR_T_GU_W),
                   BT, h, 2 * I, dt);
    be->rmsnorm_bwd(&r->bctx, dres, W(g, TR_T_LN2), dln, v->resmid.ptr, W(w, TR_T_LN2), v->rstd2.ptr, BT, h, dt);
    /* Attention: a = x + o_proj(atty) */
    be->matmul_bwd(&r->bctx, r->datty.ptr, W(g, TR_T_O_W), W(g, TR_T_O_B), dres, v->atty.ptr, W(w, TR_T_O_W),
                   BT, s->qd, h, dt);
    bool sel = r->cfg->checkpointing == FT_CKPT_SELECTIVE;
    if (r->cfg->attention == FT_ATTN_EAGER) {
        tr_arena_acquire(&r->dev, &r->datt_ws);
        be->attn_eager_bwd(&r->bctx, r->dqkv.ptr, r->datt_ws.ptr, r->datty.ptr, v->qkv.ptr,
                           sel ? r->att_ws.ptr : v->att.ptr, s->B, s->T, s->nh, s->nkv, s->hd, dt);
        tr_arena_release(&r->dev, &r->datt_ws);
    } else {
        be->attn_flash_bwd(&r->bctx, r->dqkv.ptr, r->datty.ptr, v->qkv.ptr, v->atty.ptr,
                           sel ? r->att_ws.ptr : v->att.ptr, s->B, s->T, s->nh, s->nkv, s->hd, dt);
    }
    be->rope_bwd(&r->bctx, r->dqkv.ptr, s->B, s->T, s->nh, s->nkv, s->hd, r->cfg->model.rope_theta, dt);
    be->matmul_bwd(&r->bctx, dln, W(g, TR_T_QKV_W), W(g, TR_T_QKV_B), r->dqkv.ptr, v->ln1.ptr, W(w, TR_T_QKV_W),
                   BT, h, s->qkvd, dt);
    be->rmsnorm_bwd(&r->bctx, dres, W(g, TR_T_LN1), dln, x, W(w, TR_T_LN1), v->rstd1.ptr, BT, h, dt);
}

#define UT(base, kind, t) ((void *)((char *)(base) + r->s.unit[kind].off[t] * r->s.cd))

double tr_step_loss(tr_rank *r, float loss_scale) {
    const tr_sizes *s = &r->s;
    const tr_backend *be = r->be;
    const tr_dtype dt = r->dt;
    tr_arena *d = &r->dev;
    const int zero = r->cfg->zero_stage;
    const bool tied = r->cfg->model.tied_embeddings;
    const int64_t BT = s->BT, h = s->h, V = s->V, head = s->L + 1;

    if (zero == 3) {
        tr_zero_gather(r, head);
        if (tied) tr_zero_gather(r, 0);
    }
    tr_buf *fin[] = {&r->lnf, &r->rstdf};
    tr_arena_acquire_n(d, fin, 2);
    void *wh = tr_rank_unit_params(r, head);
    const void *xL = r->acts[s->L - 1].resout.ptr;
    be->rmsnorm_fwd(&r->bctx, r->lnf.ptr, r->rstdf.ptr, xL, UT(wh, TR_UNIT_HEAD, TR_T_NORM_F), BT, h,
                    r->cfg->model.rms_norm_eps, dt);
    tr_arena_acquire(d, &r->losses);
    if (zero >= 2) {
        tr_zero_open_bucket(r, head);
        if (tied) tr_zero_open_bucket(r, 0);
    }
    tr_buf *dg[] = {&r->dres, &r->dln};
    tr_arena_acquire_n(d, dg, 2);
    be->zero(&r->bctx, r->dres.ptr, (size_t)r->dres.bytes);
    tr_arena_acquire(d, &r->logits);

    void *gh = tr_rank_unit_grads(r, head);
    void *wlm = tied ? UT(tr_rank_unit_params(r, 0), TR_UNIT_EMB, TR_T_EMBED) : UT(wh, TR_UNIT_HEAD, TR_T_LM_HEAD);
    void *glm = tied ? UT(tr_rank_unit_grads(r, 0), TR_UNIT_EMB, TR_T_EMBED) : UT(gh, TR_UNIT_HEAD, TR_T_LM_HEAD);
    /* Standard: one chunk of all BT rows. Chunked: logits_rows rows at a time,
     * each chunk's logits turned into their gradient and consumed at once. */
    for (int64_t c0 = 0; c0 < BT; c0 += s->logits_rows) {
        int64_t n = BT - c0 < s->logits_rows ? BT - c0 : s->logits_rows;
        const void *x = (const char *)r->lnf.ptr + c0 * h * s->cd;
        be->matmul_fwd(&r->bctx, r->logits.ptr, x, wlm, NULL, n, h, V, dt);
        be->ce_fwd(&r->bctx, (float *)r->losses.ptr + c0, r->logits.ptr, targets(r) + c0, n, V, dt);
        be->ce_bwd(&r->bctx, r->logits.ptr, targets(r) + c0, n, V, loss_scale, dt);
        be->matmul_bwd(&r->bctx, (char *)r->dln.ptr + c0 * h * s->cd, glm, NULL, r->logits.ptr, x, wlm, n, h, V, dt);
    }
    tr_arena_release(d, &r->logits);
    be->rmsnorm_bwd(&r->bctx, r->dres.ptr, UT(gh, TR_UNIT_HEAD, TR_T_NORM_F), r->dln.ptr, xL,
                    UT(wh, TR_UNIT_HEAD, TR_T_NORM_F), r->rstdf.ptr, BT, h, dt);

    /* The mean loss, summed in token order on the host. */
    be->to_host(&r->bctx, r->host_losses, r->losses.ptr, (size_t)BT * sizeof(float));
    double sum = 0;
    for (int64_t i = 0; i < BT; i++) sum += r->host_losses[i];
    tr_arena_release_n(d, fin, 2);
    tr_arena_release(d, &r->losses);
    if (zero >= 2) tr_zero_reduce_bucket(r, head);
    if (zero == 3) {
        tr_zero_release_gather(r, head);
        if (tied) tr_zero_release_gather(r, 0);
    }
    return sum / (double)BT;
}
