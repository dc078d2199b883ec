#include "sizes.h"

#include <string.h>

#include "json_util.h"

/* Planning limit: 1 PiB. Far above any machine, far below INT64_MAX, so sums
 * of a few dozen such sizes cannot overflow. */
#define TR_PLAN_LIMIT ((int64_t)1 << 50)

typedef struct {
    int overflow;
} ck;

static int64_t mul(ck *c, int64_t a, int64_t b) {
    int64_t r;
    if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r) || r > TR_PLAN_LIMIT) {
        c->overflow = 1;
        return 0;
    }
    return r;
}
static int64_t mul3(ck *c, int64_t a, int64_t b, int64_t d) { return mul(c, mul(c, a, b), d); }
static int64_t add(ck *c, int64_t a, int64_t b) {
    int64_t r = a + b; /* both <= 2^50 */
    if (r > TR_PLAN_LIMIT) c->overflow = 1;
    return r;
}

static int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

/* Lays out the tensors of a unit in tr_tensor_id order. */
static void unit_add(ck *c, tr_unit *u, tr_tensor_id t, int64_t len) {
    if (len <= 0) return;
    u->off[t] = u->numel;
    u->len[t] = len;
    u->numel = add(c, u->numel, len);
}

static void unit_init(tr_unit *u) {
    memset(u, 0, sizeof *u);
    for (int t = 0; t < TR_T_COUNT; t++) u->off[t] = -1;
}

static void unit_pad(tr_unit *u, int64_t pad, int64_t ranks, int sharded) {
    u->padded = round_up(u->numel, pad);
    u->shard = sharded ? u->padded / ranks : u->padded;
}

/* The dimensions from the model and the run. */
static void layout_dims(ck *c, const tr_config *cfg, tr_sizes *s) {
    const ft_model *m = &cfg->model;
    s->V = m->vocab_size;
    s->h = m->hidden_size;
    s->I = m->intermediate_size;
    s->L = cfg->layers;
    s->nh = m->num_heads;
    s->nkv = m->num_kv_heads;
    s->hd = m->head_dim;
    s->qd = mul(c, s->nh, s->hd);
    s->kvd = mul(c, s->nkv, s->hd);
    s->qkvd = add(c, s->qd, mul(c, 2, s->kvd));
    s->B = cfg->micro_batch;
    s->T = cfg->seq_len;
    s->BT = mul(c, s->B, s->T);
    s->ranks = cfg->ranks;
    s->zero = cfg->zero_stage;
    s->cd = tr_compute_bytes(cfg->precision);
}

/* Parameter units (embedding, one decoder layer, head), padded to the rank
 * count when sharded, and their totals. */
static void layout_params(ck *c, const tr_config *cfg, tr_sizes *s) {
    const ft_model *m = &cfg->model;
    const int64_t h = s->h, V = s->V, I = s->I;
    int sharded = cfg->zero_stage >= 1;
    s->pad = sharded ? cfg->ranks : 1;
    tr_unit *ue = &s->unit[TR_UNIT_EMB], *ul = &s->unit[TR_UNIT_LAYER], *uh = &s->unit[TR_UNIT_HEAD];
    unit_init(ue);
    unit_init(ul);
    unit_init(uh);
    unit_add(c, ue, TR_T_EMBED, mul(c, V, h));
    unit_add(c, ul, TR_T_LN1, h);
    unit_add(c, ul, TR_T_QKV_W, mul(c, s->qkvd, h));
    unit_add(c, ul, TR_T_QKV_B, m->qkv_bias ? s->qkvd : 0);
    unit_add(c, ul, TR_T_O_W, mul(c, h, s->qd));
    unit_add(c, ul, TR_T_O_B, m->o_bias ? h : 0);
    unit_add(c, ul, TR_T_LN2, h);
    unit_add(c, ul, TR_T_GU_W, mul3(c, 2, I, h));
    unit_add(c, ul, TR_T_GU_B, m->mlp_bias ? 2 * I : 0);
    unit_add(c, ul, TR_T_DOWN_W, mul(c, h, I));
    unit_add(c, ul, TR_T_DOWN_B, m->mlp_bias ? h : 0);
    unit_add(c, uh, TR_T_NORM_F, h);
    unit_add(c, uh, TR_T_LM_HEAD, m->tied_embeddings ? 0 : mul(c, V, h));
    for (int k = 0; k < TR_UNIT_KINDS; k++) unit_pad(&s->unit[k], s->pad, cfg->ranks, sharded);
    s->n_units = s->L + 2;
    s->params_numel = add(c, add(c, ue->numel, mul(c, s->L, ul->numel)), uh->numel);
    s->full_numel = add(c, add(c, ue->padded, mul(c, s->L, ul->padded)), uh->padded);
    s->shard_numel = add(c, add(c, ue->shard, mul(c, s->L, ul->shard)), uh->shard);
    s->opt_numel = sharded ? s->shard_numel : s->full_numel;
}

/* Persistent device and host state: weights, master weights, gradients,
 * optimizer moments, and the gather/reduce buffers of each unit. */
static void layout_state(ck *c, const tr_config *cfg, tr_sizes *s) {
    const int64_t cd = s->cd;
    int off_opt = cfg->offload != FT_OFFLOAD_NONE, off_par = cfg->offload == FT_OFFLOAD_OPTIMIZER_PARAMS;
    int mixed = cfg->precision == FT_PREC_BF16_MIXED, adam = cfg->optimizer == FT_OPT_ADAMW;
    s->params_bytes = off_par ? 0 : mul(c, cfg->zero_stage == 3 ? s->shard_numel : s->full_numel, cd);
    s->master_bytes = (mixed && !off_opt) ? mul(c, s->opt_numel, 4) : 0;
    s->grads_bytes = mul(c, cfg->zero_stage >= 2 ? s->shard_numel : s->full_numel, cd);
    s->opt_bytes = (adam && !off_opt) ? mul3(c, 2, s->opt_numel, 4) : 0;
    /* Host state: with the optimizer offloaded, the fp32 weights it updates live
     * on the host (the parameter shard itself when it is fp32 and offloaded). */
    s->host_params_bytes = off_par ? mul(c, s->shard_numel, cd) : 0;
    s->host_master_bytes = (off_opt && (mixed || !off_par)) ? mul(c, s->opt_numel, 4) : 0;
    s->host_grads_bytes = off_opt ? mul(c, s->opt_numel, 4) : 0;
    s->host_opt_bytes = (off_opt && adam) ? mul3(c, 2, s->opt_numel, 4) : 0;
    for (int k = 0; k < TR_UNIT_KINDS; k++) {
        s->gather_bytes[k] = cfg->zero_stage == 3 ? mul(c, s->unit[k].padded, cd) : 0;
        s->bucket_bytes[k] = cfg->zero_stage >= 2 ? mul(c, s->unit[k].padded, cd) : 0;
    }
}

/* Activations: each saved tensor, one layer's slot, attention workspaces, loss and logits. */
static void layout_activations(ck *c, const tr_config *cfg, tr_sizes *s) {
    const int64_t h = s->h, V = s->V, I = s->I, cd = s->cd, BT = s->BT;
    s->ln_bytes = mul3(c, BT, h, cd);
    s->rstd_bytes = mul(c, BT, 4);
    s->qkv_bytes = mul3(c, BT, s->qkvd, cd);
    s->probs_bytes = mul(c, mul3(c, s->B, s->nh, s->T), mul(c, s->T, cd));
    s->lse_bytes = mul(c, mul3(c, s->B, s->nh, s->T), 4);
    s->att_bytes = cfg->attention == FT_ATTN_EAGER ? s->probs_bytes : s->lse_bytes;
    s->atty_bytes = mul3(c, BT, s->qd, cd);
    s->gu_bytes = mul(c, mul3(c, BT, 2, I), cd);
    s->hact_bytes = mul3(c, BT, I, cd);
    /* ln1 rstd1 qkv [att] atty resmid ln2 rstd2 gu hact; resout is counted apart. */
    int64_t slot = 0;
    slot = add(c, slot, s->ln_bytes);
    slot = add(c, slot, s->rstd_bytes);
    slot = add(c, slot, s->qkv_bytes);
    if (cfg->checkpointing != FT_CKPT_SELECTIVE) slot = add(c, slot, s->att_bytes);
    slot = add(c, slot, s->atty_bytes);
    slot = add(c, slot, s->ln_bytes);
    slot = add(c, slot, s->ln_bytes);
    slot = add(c, slot, s->rstd_bytes);
    slot = add(c, slot, s->gu_bytes);
    slot = add(c, slot, s->hact_bytes);
    s->slot_bytes = slot;
    s->datt_ws_bytes = cfg->attention == FT_ATTN_EAGER ? s->probs_bytes : 0;
    s->att_ws_bytes = cfg->checkpointing == FT_CKPT_SELECTIVE ? s->att_bytes : 0;

    s->losses_bytes = mul(c, BT, 4);
    s->logits_rows = cfg->loss == FT_LOSS_CHUNKED && BT > TR_CHUNKED_LOSS_ROWS ? TR_CHUNKED_LOSS_ROWS : BT;
    s->logits_bytes = mul3(c, s->logits_rows, V, cd);
}

/* Everything a rank can hold at once stays under the limit, so the arena's
 * running sums cannot overflow either: the sum only sets c->overflow. */
static void check_rank_total(ck *c, const tr_sizes *s) {
    int64_t all = add(c, add(c, s->params_bytes, s->grads_bytes), add(c, s->master_bytes, s->opt_bytes));
    all = add(c, all, mul(c, s->L, add(c, s->slot_bytes, s->ln_bytes)));
    all = add(c, all, add(c, s->logits_bytes, mul(c, 2, s->probs_bytes)));
    all = add(c, all, mul(c, 8, add(c, s->ln_bytes, add(c, s->qkv_bytes, s->gu_bytes))));
}

int tr_sizes_compute(const tr_config *cfg, tr_sizes *s, char *err, size_t errlen) {
    ck c = {0};
    memset(s, 0, sizeof *s);
    layout_dims(&c, cfg, s);
    layout_params(&c, cfg, s);
    layout_state(&c, cfg, s);
    layout_activations(&c, cfg, s);
    check_rank_total(&c, s);
    if (c.overflow)
        return ft_errorf(err, errlen, "the run is too large to plan (a buffer exceeds 2^50 bytes)");
    return 0;
}

int tr_unit_kind(const tr_sizes *s, int64_t u) {
    return u == 0 ? TR_UNIT_EMB : u == s->L + 1 ? TR_UNIT_HEAD : TR_UNIT_LAYER;
}

const tr_unit *tr_unit_of(const tr_sizes *s, int64_t u) { return &s->unit[tr_unit_kind(s, u)]; }

int64_t tr_unit_full_off(const tr_sizes *s, int64_t u) {
    if (u == 0) return 0;
    return s->unit[TR_UNIT_EMB].padded + (u - 1) * s->unit[TR_UNIT_LAYER].padded;
}

int64_t tr_unit_shard_off(const tr_sizes *s, int64_t u) {
    if (u == 0) return 0;
    return s->unit[TR_UNIT_EMB].shard + (u - 1) * s->unit[TR_UNIT_LAYER].shard;
}

void tr_tensor_shape(const tr_sizes *s, tr_tensor_id t, int64_t *rows, int64_t *cols) {
    int64_t r = 1, c = 1;
    switch (t) {
    case TR_T_EMBED: case TR_T_LM_HEAD: r = s->V; c = s->h; break;
    case TR_T_LN1: case TR_T_LN2: case TR_T_NORM_F: case TR_T_O_B: case TR_T_DOWN_B: r = s->h; break;
    case TR_T_QKV_W: r = s->qkvd; c = s->h; break;
    case TR_T_QKV_B: r = s->qkvd; break;
    case TR_T_O_W: r = s->h; c = s->qd; break;
    case TR_T_GU_W: r = 2 * s->I; c = s->h; break;
    case TR_T_GU_B: r = 2 * s->I; break;
    case TR_T_DOWN_W: r = s->h; c = s->I; break;
    case TR_T_COUNT: break;
    }
    *rows = r;
    *cols = c;
}

int tr_tensor_decays(tr_tensor_id t) {
    return t == TR_T_EMBED || t == TR_T_QKV_W || t == TR_T_O_W || t == TR_T_GU_W ||
           t == TR_T_DOWN_W || t == TR_T_LM_HEAD;
}

const char *tr_tensor_name(tr_tensor_id t) {
    static const char *const names[TR_T_COUNT] = {
        "embed", "ln1", "qkv_w", "qkv_b", "o_w", "o_b", "ln2",
        "gu_w", "gu_b", "down_w", "down_b", "norm_f", "lm_head"};
    return (unsigned)t < TR_T_COUNT ? names[t] : "?";
}
