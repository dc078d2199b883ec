/* The ftrain profile: the reference trainer's memory, by the estimator's own
 * equations, written from docs/trainer.md ("Memory layout" and "Memory
 * timeline") and never from trainer code. For CPU records the result must
 * equal the trainer's arena to the byte in every category, at the peak, and in
 * host memory; tests/trainer_memory.c checks that for many runs.
 *
 * The trainer's arena counts bytes when a buffer is acquired and released; its
 * peaks can only rise at an acquire. So this profile replays the documented
 * event list and pushes one moment after every acquire: each category's
 * maximum and the first moment of the largest total are then exactly the
 * arena's category peaks and total peak (with its phase label). */
#include "profile_ftrain.h"

#include <stdio.h>
#include <string.h>

#include "json_util.h"
#include "cpu_device.h"
#include "work.h"
#include "work_ftrain.h"

/* Units (docs/trainer.md "Parameters"): embedding, one block, head. */
enum { U_EMB, U_BLOCK, U_HEAD, U_KINDS };

typedef struct lay {
    /* shapes */
    int64_t V, h, I, L, nh, nkv, hd, qd, kvd, qkvd, B, T, BT, N, cd;
    int zero;
    bool mixed, adam, eager, sel, full, chunked, tied;
    est_offload offload;
    /* parameters */
    int64_t numel[U_KINDS], padded[U_KINDS], shard[U_KINDS];
    int64_t full_numel, shard_numel, opt_numel;
    /* bytes */
    int64_t params, master, grads, opt;
    int64_t host_params, host_master, host_grads, host_opt;
    int64_t gather[U_KINDS], bucket[U_KINDS];
    int64_t batch, ln, rstd, qkv, probs, lse, att, atty, gu, hact;
    int64_t slot, att_ws, datt_ws, dlayer, losses, logits;
    bool overflow;
} lay;

#define LIMIT ((int64_t)1 << 50)

static int64_t mul(lay *y, int64_t a, int64_t b) {
    int64_t r;
    if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r) || r > LIMIT) {
        y->overflow = true;
        return 0;
    }
    return r;
}

static int64_t sum(lay *y, int64_t a, int64_t b) {
    if (a + b > LIMIT) y->overflow = true;
    return a + b;
}

/* Shapes and flags of the run. */
static void layout_shapes(const est_run *run, lay *y) {
    const ft_model *m = &run->model;
    memset(y, 0, sizeof *y);
    y->V = m->vocab_size;
    y->h = m->hidden_size;
    y->I = m->intermediate_size;
    y->L = run->layers_used;
    y->nh = m->num_heads;
    y->nkv = m->num_kv_heads;
    y->hd = m->head_dim;
    y->qd = mul(y, y->nh, y->hd);
    y->kvd = mul(y, y->nkv, y->hd);
    y->qkvd = sum(y, y->qd, mul(y, 2, y->kvd));
    y->B = run->micro_batch;
    y->T = run->seq_len;
    y->BT = mul(y, y->B, y->T);
    y->N = est_run_world(run);
    y->zero = run->zero_stage;
    y->mixed = run->precision == EST_PREC_BF16_MIXED;
    y->cd = y->mixed ? 2 : 4;
    y->adam = run->optimizer == EST_OPT_ADAMW;
    y->eager = run->attention == EST_ATTN_EAGER;
    y->sel = run->checkpointing == EST_CKPT_SELECTIVE;
    y->full = run->checkpointing == EST_CKPT_FULL;
    y->chunked = run->loss == EST_LOSS_CHUNKED;
    y->tied = m->tied_embeddings;
    y->offload = run->offload;
}

/* Parameter counts per unit, as HF counts them (a tied head adds nothing),
 * padded and sharded. */
static void layout_params(const ft_model *m, lay *y) {
    const int64_t h = y->h;
    y->numel[U_EMB] = mul(y, y->V, h);
    int64_t blk = 2 * h;                                   /* two RMSNorm weights */
    blk = sum(y, blk, mul(y, y->qkvd, h));                 /* q, k, v projections */
    if (m->qkv_bias) blk = sum(y, blk, y->qkvd);
    blk = sum(y, blk, mul(y, h, y->qd));                   /* o projection */
    if (m->o_bias) blk = sum(y, blk, h);
    blk = sum(y, blk, mul(y, 3 * h, y->I));                /* gate, up, down */
    if (m->mlp_bias) blk = sum(y, blk, 2 * y->I + h);
    y->numel[U_BLOCK] = blk;
    y->numel[U_HEAD] = sum(y, h, y->tied ? 0 : mul(y, y->V, h));
    /* Sharded units are padded to a multiple of the rank count (stage >= 1). */
    const int64_t pad = y->zero >= 1 ? y->N : 1;
    for (int k = 0; k < U_KINDS; k++) {
        y->padded[k] = (y->numel[k] + pad - 1) / pad * pad;
        y->shard[k] = y->zero >= 1 ? y->padded[k] / y->N : y->padded[k];
    }
    y->full_numel = sum(y, sum(y, y->padded[U_EMB], mul(y, y->L, y->padded[U_BLOCK])), y->padded[U_HEAD]);
    y->shard_numel = sum(y, sum(y, y->shard[U_EMB], mul(y, y->L, y->shard[U_BLOCK])), y->shard[U_HEAD]);
    y->opt_numel = y->zero >= 1 ? y->shard_numel : y->full_numel;
}

/* Model states: device, then host (offload). */
static void layout_states(lay *y) {
    const int64_t cd = y->cd;
    const bool off = y->offload != EST_OFFLOAD_NONE, off_par = y->offload == EST_OFFLOAD_OPTIMIZER_PARAMS;
    y->params = off_par ? 0 : mul(y, y->zero == 3 ? y->shard_numel : y->full_numel, cd);
    y->master = (y->mixed && !off) ? mul(y, y->opt_numel, 4) : 0;
    y->grads = mul(y, y->zero >= 2 ? y->shard_numel : y->full_numel, cd);
    y->opt = (y->adam && !off) ? mul(y, y->opt_numel, 8) : 0;
    y->host_params = off_par ? mul(y, y->shard_numel, cd) : 0;
    y->host_master = (off && (y->mixed || !off_par)) ? mul(y, y->opt_numel, 4) : 0;
    y->host_grads = off ? mul(y, y->opt_numel, 4) : 0;
    y->host_opt = (off && y->adam) ? mul(y, y->opt_numel, 8) : 0;
    for (int k = 0; k < U_KINDS; k++) {
        y->gather[k] = y->zero == 3 ? mul(y, y->padded[k], cd) : 0;
        y->bucket[k] = y->zero >= 2 ? mul(y, y->padded[k], cd) : 0;
    }
}

/* Activations of one micro-batch. */
static void layout_activations(lay *y) {
    const int64_t BT = y->BT, h = y->h, cd = y->cd;
    y->batch = mul(y, BT, 8);                              /* int32 tokens + targets */
    y->ln = mul(y, mul(y, BT, h), cd);
    y->rstd = mul(y, BT, 4);
    y->qkv = mul(y, mul(y, BT, y->qkvd), cd);
    y->probs = mul(y, mul(y, mul(y, y->B, y->nh), mul(y, y->T, y->T)), cd);
    y->lse = mul(y, mul(y, mul(y, y->B, y->nh), y->T), 4);
    y->att = y->eager ? y->probs : y->lse;
    y->atty = mul(y, mul(y, BT, y->qd), cd);
    y->gu = mul(y, mul(y, BT, 2 * y->I), cd);
    y->hact = mul(y, mul(y, BT, y->I), cd);
    /* The saved set of a block without its output: ln1 rstd1 qkv [att] atty
     * resmid ln2 rstd2 gu hact. */
    int64_t slot = sum(y, sum(y, y->ln, y->rstd), y->qkv);
    if (!y->sel) slot = sum(y, slot, y->att);
    slot = sum(y, slot, sum(y, y->atty, mul(y, 2, y->ln)));
    slot = sum(y, slot, sum(y, y->rstd, sum(y, y->gu, y->hact)));
    y->slot = slot;
    y->att_ws = y->sel ? y->att : 0;
    y->datt_ws = y->eager ? y->probs : 0;
    y->dlayer = sum(y, sum(y, y->qkv, y->atty), sum(y, y->gu, y->hact));
    y->losses = mul(y, BT, 4);
    const int64_t rows = (y->chunked && BT > 32) ? 32 : BT; /* TR_CHUNKED_LOSS_ROWS in docs/trainer.md */
    y->logits = mul(y, mul(y, rows, y->V), cd);
}

static void layout(const est_run *run, lay *y) {
    layout_shapes(run, y);
    layout_params(&run->model, y);
    layout_states(y);
    layout_activations(y);
}

/* The replay: each acquire and release is a memory event of the step, and a
 * moment follows every acquire. A phase names the moments that follow and the
 * units of work that start at the first of them (work.h). */
typedef struct sim {
    est_step *st;
    const est_run *run;
    const est_constants *k;
    est_phase_kind kind;
    int32_t layer;
    char label[48];
    unsigned units; /* units starting at the next moment */
    size_t moments;
    const est_ftrain_shape *cpu; /* ftrain's kernels (work_ftrain.h) */
} sim;

/* The work of the pending units: ftrain's kernels, on the CPU device or on a
 * GPU (work_ftrain.h). */
static void emit_units(sim *s) {
    for (int u = 0; u < EST_UNIT_COUNT; u++)
        if (s->units & EST_UNIT_BIT(u)) est_work_ftrain(s->st, s->run, s->k, s->cpu, (est_unit)u, s->layer);
}

static void push(sim *s) {
    est_step_moment(s->st, s->kind, s->layer, s->label, s->st->live);
    s->moments++;
    emit_units(s);
    s->units = 0;
}

/* The work of a phase that acquired nothing (a tied embedding's backward) is
 * booked on the latest moment when the next phase begins. */
static void phase(sim *s, est_phase_kind kind, int64_t layer, const char *what, unsigned units) {
    emit_units(s);
    s->kind = kind;
    s->layer = (int32_t)layer;
    s->units = units;
    if (layer >= 0) snprintf(s->label, sizeof s->label, "%s layer %lld", what, (long long)layer);
    else snprintf(s->label, sizeof s->label, "%s", what);
}

static void acq(sim *s, est_category c, int64_t bytes) {
    if (!bytes) return;
    est_step_alloc(s->st, c, bytes);
    push(s);
}

static void rel(sim *s, est_category c, int64_t bytes) { est_step_free_bytes(s->st, c, bytes); }

#define ACT EST_CAT_ACTIVATIONS

static void forward(sim *s, const lay *y) {
    phase(s, EST_PHASE_FORWARD, -1, "forward embedding", EST_UNIT_BIT(EST_UNIT_EMBED_FWD));
    acq(s, ACT, y->batch);
    acq(s, EST_CAT_COMM, y->gather[U_EMB]);
    acq(s, ACT, y->ln);                                    /* encoded */
    rel(s, EST_CAT_COMM, y->gather[U_EMB]);
    for (int64_t l = 0; l < y->L; l++) {
        phase(s, EST_PHASE_FORWARD, l, "forward", EST_UNIT_BIT(EST_UNIT_BLOCK_FWD));
        acq(s, EST_CAT_COMM, y->gather[U_BLOCK]);
        if (!y->full) {
            acq(s, ACT, y->slot + y->ln);                  /* saved set + resout */
            acq(s, EST_CAT_WORKSPACE, y->att_ws);          /* selective: the attention core */
            rel(s, EST_CAT_WORKSPACE, y->att_ws);
        } else {
            acq(s, ACT, y->ln);                            /* resout, kept */
            acq(s, ACT, y->slot);                          /* recompute slot, dropped */
            rel(s, ACT, y->slot);
        }
        rel(s, EST_CAT_COMM, y->gather[U_BLOCK]);
    }
}

static void loss(sim *s, const lay *y) {
    /* The LM head's and the loss's backward run inside ftrain's loss phase. */
    phase(s, EST_PHASE_LOSS, -1, "loss",
          EST_UNIT_BIT(EST_UNIT_HEAD_FWD) | EST_UNIT_BIT(EST_UNIT_LOSS_BWD) |
              EST_UNIT_BIT(EST_UNIT_HEAD_BWD));
    acq(s, EST_CAT_COMM, y->gather[U_HEAD]);
    if (y->tied) acq(s, EST_CAT_COMM, y->gather[U_EMB]);
    acq(s, ACT, y->ln + y->rstd);                          /* lnf, rstdf */
    acq(s, EST_CAT_LOGITS, y->losses);
    acq(s, EST_CAT_COMM, y->bucket[U_HEAD]);
    if (y->tied) acq(s, EST_CAT_COMM, y->bucket[U_EMB]);
    acq(s, ACT, 2 * y->ln);                                /* dres, dln */
    acq(s, EST_CAT_LOGITS, y->logits);
    rel(s, EST_CAT_LOGITS, y->logits);
    rel(s, ACT, y->ln + y->rstd);
    rel(s, EST_CAT_LOGITS, y->losses);
    rel(s, EST_CAT_COMM, y->bucket[U_HEAD]);
    rel(s, EST_CAT_COMM, y->gather[U_HEAD]);
    if (y->tied) rel(s, EST_CAT_COMM, y->gather[U_EMB]);
}

static void backward(sim *s, const lay *y) {
    for (int64_t l = y->L - 1; l >= 0; l--) {
        phase(s, EST_PHASE_BACKWARD, l, "backward", EST_UNIT_BIT(EST_UNIT_BLOCK_BWD));
        acq(s, EST_CAT_COMM, y->gather[U_BLOCK]);
        acq(s, EST_CAT_COMM, y->bucket[U_BLOCK]);
        if (y->full) acq(s, ACT, y->slot);                 /* recompute the block */
        acq(s, EST_CAT_WORKSPACE, y->att_ws);              /* selective: recompute the core */
        acq(s, ACT, y->dlayer);                            /* dqkv datty dgu dhact */
        acq(s, EST_CAT_WORKSPACE, y->datt_ws);             /* eager: dP */
        rel(s, EST_CAT_WORKSPACE, y->datt_ws);
        rel(s, ACT, y->dlayer);
        rel(s, EST_CAT_WORKSPACE, y->att_ws);
        rel(s, ACT, y->slot + y->ln);                      /* the block's saved set and resout */
        rel(s, EST_CAT_COMM, y->bucket[U_BLOCK]);
        rel(s, EST_CAT_COMM, y->gather[U_BLOCK]);
    }
    phase(s, EST_PHASE_BACKWARD, -1, "backward embedding", EST_UNIT_BIT(EST_UNIT_EMBED_BWD));
    if (!y->tied) acq(s, EST_CAT_COMM, y->bucket[U_EMB]);
    rel(s, EST_CAT_COMM, y->bucket[U_EMB]);
    rel(s, ACT, 2 * y->ln + y->ln + y->batch);             /* dres, dln, encoded, batch */
}

/* The shapes ftrain's kernels run at (work_ftrain.h). */
static void cpu_shape(const est_run *run, const lay *y, est_ftrain_shape *x) {
    const bool off = y->offload != EST_OFFLOAD_NONE;
    *x = (est_ftrain_shape){
        .V = (double)y->V, .h = (double)y->h, .I = (double)y->I, .nh = (double)y->nh, .nkv = (double)y->nkv,
        .hd = (double)y->hd, .qd = (double)y->qd, .kvd = (double)y->kvd, .qkvd = (double)y->qkvd,
        .B = (double)y->B, .T = (double)y->T, .BT = (double)y->BT, .cd = (double)y->cd,
        /* ftrain's chunked loss: 32 rows at a time (TR_CHUNKED_LOSS_ROWS, trainer/sizes.c) */
        .logits_rows = y->chunked && y->BT > 32 ? 32 : (double)y->BT,
        .opt_numel = (double)y->opt_numel,
        /* optim.c partition_sumsq: stage 0 all the gradients, else the rank's shards */
        .sumsq_numel = (double)(y->zero == 0 ? y->full_numel : y->shard_numel),
        .grads_bytes = (double)y->grads,
        .adam = y->adam, .eager = y->eager, .sel = y->sel, .full = y->full, .offload = off,
        .off_par = y->offload == EST_OFFLOAD_OPTIMIZER_PARAMS,
        .cuda = !est_cpu_device_run(run),
    };
}

int est_step_ftrain(const est_run *run, const est_constants *k, est_step *st, char *err,
                    size_t errlen) {
    if (run->attention == EST_ATTN_SDPA)
        return ft_errorf(err, errlen, "ftrain implements eager and flash attention (no sdpa)");
    if (run->precision != EST_PREC_FP32 && run->precision != EST_PREC_BF16_MIXED)
        return ft_errorf(err, errlen, "ftrain trains in fp32 or bf16-mixed (not %s)",
                         est_precision_name(run->precision));
    if (run->offload == EST_OFFLOAD_OPTIMIZER_PARAMS && run->zero_stage != 3)
        return ft_errorf(err, errlen, "ftrain offloads parameters only as ZeRO-3 shards");
    if (run->padding_mask)
        return ft_errorf(err, errlen, "ftrain batches are never padded (no attention mask)");
    if (run->layers_used < 1 || run->layers_used > run->model.num_layers || run->micro_batch < 1 ||
        run->seq_len < 1 || run->gpus_per_node < 1 || run->nodes < 1 || run->zero_stage < 0 ||
        run->zero_stage > 3)
        return ft_errorf(err, errlen, "ftrain profile: invalid run shape");
    lay y;
    layout(run, &y);
    if (y.overflow) return ft_errorf(err, errlen, "ftrain profile: a buffer exceeds 2^50 bytes");

    est_ftrain_shape cpu;
    cpu_shape(run, &y, &cpu);
    sim s = {.st = st, .run = run, .k = k, .cpu = &cpu};
    est_step_clear(st);
    phase(&s, EST_PHASE_INIT, -1, "init", 0);
    acq(&s, EST_CAT_PARAMS, y.params);
    acq(&s, EST_CAT_MASTER, y.master);
    acq(&s, EST_CAT_GRADS, y.grads);
    acq(&s, EST_CAT_OPTIMIZER, y.opt);
    if (s.moments == 0) push(&s);
    /* One micro-batch: every micro-batch of a step repeats the same events. */
    forward(&s, &y);
    loss(&s, &y);
    backward(&s, &y);
    phase(&s, EST_PHASE_REDUCE, -1, "reduce", EST_UNIT_BIT(EST_UNIT_REDUCE));
    push(&s);
    phase(&s, EST_PHASE_OPTIMIZER, -1, "optimizer", EST_UNIT_BIT(EST_UNIT_OPTIMIZER));
    push(&s);
    st->cpu_bytes = y.host_params + y.host_master + y.host_grads + y.host_opt;
    if (st->oom) return ft_errorf(err, errlen, "out of memory building the ftrain step");
    return 0;
}
