/* ftrain's memory accounting: the arena against hand derivations written
 * here, against the estimator's ftrain profile (estimator/frameworks/profile_ftrain.c,
 * which shares no code with the trainer) for a few hundred configurations,
 * and the committed and regenerated ftrain CPU records through `ftest check`. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cJSON.h>

#include "json_util.h"
#include "memory_ledger.h"
#include "profile_ftrain.h"
#include "test_util.h"
#include "trainer_util.h"
#include "model.h"
#include "backend.h"
#include "init.h"
#include "train.h"
#include "zero.h"

static tr_config make_cfg(const char *model) {
    tr_config c = test_tr_config(model);
    c.steps = 1;
    return c;
}

static tr_result run(const tr_config *c) {
    tr_result res;
    char err[256];
    ck_assert_msg(tr_train(c, &res, err, sizeof err) == 0, "%s", err);
    return res;
}

static void expect(const tr_rank_stats *st, const int64_t at[8], const int64_t peak[8], int64_t total,
                   const char *phase) {
    for (int c = 0; c < TR_CAT_COUNT; c++) {
        ck_assert_msg(st->at_peak[c] == at[c], "%s at peak: %lld, hand %lld", tr_category_names[c],
                      (long long)st->at_peak[c], (long long)at[c]);
        ck_assert_msg(st->peak[c] == peak[c], "%s peak: %lld, hand %lld", tr_category_names[c],
                      (long long)st->peak[c], (long long)peak[c]);
    }
    ck_assert_int_eq(st->peak_total, total);
    ck_assert_str_eq(st->peak_phase, phase);
}

/* tiny-llama (V 64, h 32, I 64, 2 blocks, 4 heads, 2 kv heads, head dim 8),
 * one rank, fp32, flash, no recompute, batch 2 x 32 tokens (BT = 64).
 *   parameters 22688 (its config's hand count): params = grads = 90752 B,
 *   Adam m and v = 181504 B.
 *   One block's saved set, bytes: ln1 64*32*4 = 8192, rstd1 256,
 *   qkv 64*(32+2*16)*4 = 16384, lse 2*4*32*4 = 1024, atty 8192, resmid 8192,
 *   ln2 8192, rstd2 256, gate|up 64*128*4 = 32768, hact 64*64*4 = 16384,
 *   resout 8192: 108032.
 *   Backward of block 1: both blocks' sets 216064 + batch 2*64*4 = 512 +
 *   encoded 8192 + dres, dln 16384 + dqkv 16384, datty 8192, dgu 32768,
 *   dhact 16384 = 314880 activations; nothing else. Logits peak in the loss:
 *   losses 256 + logits 64*64*4 = 16384 -> 16640, less than a block's set. */
START_TEST(test_hand_fp32_one_rank) {
    tr_config c = make_cfg("tiny-llama");
    tr_result r = run(&c);
    const int64_t at[8] = {90752, 0, 90752, 181504, 314880, 0, 0, 0};
    const int64_t peak[8] = {90752, 0, 90752, 181504, 314880, 16640, 0, 0};
    expect(&r.rank[0], at, peak, 90752 * 2 + 181504 + 314880, "backward layer 1");
    ck_assert_int_eq(r.rank[0].host_peak_total, 0);
    tr_result_free(&r);
}
END_TEST

/* tiny-qwen2 (V 61, h 32, I 48, 2 blocks, 4 heads, 1 kv head, tied, q/k/v
 * bias), 3 ranks, ZeRO 3, bf16-mixed, flash, batch 1 x 8 tokens.
 *   Units: embedding 61*32 = 1952 -> padded to 1953, shard 651; block
 *   32 + 48*32 + 48 + 32*32 + 32 + 96*32 + 32*48 = 7280 -> 7281, shard 2427;
 *   head (final norm only, tied) 32 -> 33, shard 11. Shard 651 + 2*2427 + 11 = 5516.
 *   params 5516*2 = 11032, master 5516*4 = 22064, grads 11032, Adam 44128.
 *   Gathers and buckets (bf16): embedding 3906, block 14562, head 66.
 *   One block's set (bf16, BT = 8): ln1 512 + rstd1 32 + qkv 8*48*2 = 768 +
 *   lse 4*8*4 = 128 + atty 512 + resmid 512 + ln2 512 + rstd2 32 + gate|up 1536
 *   + hact 768 = 5312, + resout 512 = 5824.
 *   Backward of block 1 (the peak): comm = block gather 14562 + block bucket
 *   14562 + the tied embedding's bucket, open since the loss, 3906 = 33030;
 *   activations = batch 64 + encoded 512 + two sets 11648 + dres, dln 1024 +
 *   dqkv 768, datty 512, dgu 1536, dhact 768 = 16832.
 *   Loss: comm = head and embedding gathers and buckets 66+3906+66+3906 = 7944;
 *   logits = losses 32 + logits 8*61*2 = 976 -> 1008. */
START_TEST(test_hand_zero3_padding) {
    tr_config c = make_cfg("tiny-qwen2");
    c.ranks = 3;
    c.zero_stage = 3;
    c.precision = FT_PREC_BF16_MIXED;
    c.micro_batch = 1;
    c.seq_len = 8;
    tr_result r = run(&c);
    const int64_t at[8] = {11032, 22064, 11032, 44128, 16832, 0, 33030, 0};
    const int64_t peak[8] = {11032, 22064, 11032, 44128, 16832, 1008, 33030, 0};
    for (int k = 0; k < 3; k++)
        expect(&r.rank[k], at, peak, 11032 + 22064 + 11032 + 44128 + 16832 + 33030, "backward layer 1");
    tr_result_free(&r);
    /* Offloading optimizer and parameters moves them to the host: master
     * 22064 + host fp32 grads 22064 + Adam 44128 + bf16 parameter shard 11032. */
    c.offload = FT_OFFLOAD_OPTIMIZER_PARAMS;
    r = run(&c);
    ck_assert_int_eq(r.rank[0].host_peak_total, 22064 + 22064 + 44128 + 11032);
    ck_assert_int_eq(r.rank[0].peak[TR_CAT_PARAMS], 0);
    ck_assert_int_eq(r.rank[0].peak[TR_CAT_MASTER] + r.rank[0].peak[TR_CAT_OPTIMIZER], 0);
    tr_result_free(&r);
}
END_TEST

/* ---- the estimator's profile, configuration by configuration ---- */

/* A fixed generator over the local x: the same mixtures on every run. */
#define PICK(n) ((int)((x = x * 6364136223846793005ull + 1442695040888963407ull) >> 33) % (n))
static est_run to_run(const tr_config *c) {
    est_run r;
    memset(&r, 0, sizeof r);
    r.model = c->model;
    r.layers_used = c->layers;
    r.gpus_per_node = c->ranks;
    r.nodes = 1;
    r.micro_batch = c->micro_batch;
    r.grad_accum = c->grad_accum;
    r.seq_len = c->seq_len;
    /* One vocabulary (common/run_vocab.h): the trainer's values are the estimator's. */
    r.precision = c->precision;
    r.zero_stage = c->zero_stage;
    r.offload = c->offload;
    r.checkpointing = c->checkpointing;
    r.attention = c->attention;
    r.loss = c->loss;
    r.optimizer = c->optimizer;
    r.framework = EST_FW_FTRAIN;
    return r;
}

/* The ftrain profile's step through the memory ledger: its moments. */
static int ftrain_timeline(const est_run *run, est_timeline *tl, char *err, size_t errlen) {
    est_constants k;
    est_constants_defaults(&k);
    est_step st;
    est_step_init(&st);
    int rc = est_step_ftrain(run, &k, &st, err, errlen);
    if (rc == 0) rc = est_memory_ledger(&st, tl, err, errlen);
    est_step_free(&st);
    return rc;
}

typedef struct measured {
    int64_t peak[8], at_peak[8], total, host;
    char phase[48];
} measured;

/* Compares one rank's measurement with the profile's prediction; returns a
 * message on the first difference, "" when equal. */
static const char *compare(const est_run *run, const measured *m) {
    static char why[256];
    est_timeline tl;
    char err[256];
    est_timeline_init(&tl);
    if (ftrain_timeline(run, &tl, err, sizeof err)) {
        snprintf(why, sizeof why, "profile refused: %s", err);
        est_timeline_free(&tl);
        return why;
    }
    int64_t cp[EST_CAT_COUNT];
    est_timeline_category_peaks(&tl, cp);
    const est_phase *pk = &tl.phases[est_timeline_peak(&tl)];
    why[0] = '\0';
    for (int c = 0; c < 8 && !why[0]; c++) {
        if (cp[c] != m->peak[c])
            snprintf(why, sizeof why, "%s peak: trainer %lld, profile %lld", est_category_names[c],
                     (long long)m->peak[c], (long long)cp[c]);
        else if (pk->bytes[c] != m->at_peak[c])
            snprintf(why, sizeof why, "%s at peak: trainer %lld, profile %lld", est_category_names[c],
                     (long long)m->at_peak[c], (long long)pk->bytes[c]);
    }
    if (!why[0] && est_phase_allocated(pk) != m->total)
        snprintf(why, sizeof why, "total: trainer %lld, profile %lld", (long long)m->total,
                 (long long)est_phase_allocated(pk));
    if (!why[0] && strcmp(pk->label, m->phase))
        snprintf(why, sizeof why, "peak phase: trainer \"%s\", profile \"%s\"", m->phase, pk->label);
    if (!why[0] && tl.cpu_bytes != m->host)
        snprintf(why, sizeof why, "host: trainer %lld, profile %lld", (long long)m->host,
                 (long long)tl.cpu_bytes);
    est_timeline_free(&tl);
    return why;
}

static void check_config(const tr_config *c) {
    tr_result res = run(c);
    est_run er = to_run(c);
    for (int k = 0; k < c->ranks; k++) {
        measured m;
        memcpy(m.peak, res.rank[k].peak, sizeof m.peak);
        memcpy(m.at_peak, res.rank[k].at_peak, sizeof m.at_peak);
        m.total = res.rank[k].peak_total;
        m.host = res.rank[k].host_peak_total;
        snprintf(m.phase, sizeof m.phase, "%s", res.rank[k].peak_phase);
        const char *why = compare(&er, &m);
        ck_assert_msg(!why[0], "%s ranks %d zero %d offload %s ckpt %s attn %s loss %s prec %s opt %s "
                      "B %lld T %lld A %lld L %lld, rank %d: %s", c->model.name, c->ranks, c->zero_stage,
                      ft_offload_name(c->offload), ft_checkpointing_name(c->checkpointing),
                      ft_attention_name(c->attention), ft_loss_name(c->loss),
                      ft_precision_name(c->precision), ft_optimizer_name(c->optimizer),
                      (long long)c->micro_batch, (long long)c->seq_len, (long long)c->grad_accum,
                      (long long)c->layers, k, why);
    }
    tr_result_free(&res);
}

/* Every value of every knob, and a few hundred mixtures drawn from a fixed
 * generator (the same set on every run). */
START_TEST(test_arena_matches_profile) {
    const char *models[] = {"tiny-llama", "tiny-llama-tied", "tiny-qwen2", "tiny-llama-bias"};
    uint64_t x = 12345;
    int checked = 0;
    for (int i = 0; i < 240; i++) {
        tr_config c = make_cfg(models[i % 4]);
        c.ranks = 1 + PICK(4);
        c.zero_stage = PICK(4);
        c.offload = (ft_offload)PICK(3);
        if (c.offload == FT_OFFLOAD_OPTIMIZER && c.zero_stage == 0) c.zero_stage = 1 + PICK(3);
        if (c.offload == FT_OFFLOAD_OPTIMIZER_PARAMS) c.zero_stage = 3;
        c.checkpointing = (ft_checkpointing)PICK(3);
        c.attention = PICK(2) ? FT_ATTN_FLASH : FT_ATTN_EAGER; /* ftrain has these two */
        c.loss = (ft_loss)PICK(2);
        c.precision = (ft_precision)PICK(2);
        c.optimizer = (ft_optimizer)PICK(2);
        c.micro_batch = 1 + PICK(3);
        c.seq_len = 1 + PICK(40);
        c.grad_accum = 1 + PICK(2);
        c.layers = 1 + PICK((int)c.model.num_layers);
        check_config(&c);
        checked++;
    }
    ck_assert_int_eq(checked, 240);
}
END_TEST

/* ---- real model shapes, accounting only ----
 * A backend whose ops do nothing and whose slabs are never touched lets the
 * trainer's own code (model.c, step.c, zero.c) walk a micro-batch of a real
 * model (llama3-8b at seq 8192, 64 ranks) in microseconds: every acquire and
 * release happens exactly as in a run, only the arithmetic is skipped. Ranks
 * all have the same sizes, so rank 0 runs alone over a communicator that only
 * reports its size. */
static char null_slab[64];
static void *null_alloc(size_t bytes) { (void)bytes; return null_slab; }
static void null_free(void *p) { (void)p; }
static void n_zero(tr_backend_ctx *cx, void *p, size_t b) { (void)cx; (void)p; (void)b; }
static void n_copy(tr_backend_ctx *cx, void *d, const void *s, size_t b) { (void)cx; (void)d; (void)s; (void)b; }
static void n_convert(tr_backend_ctx *cx, void *d, tr_dtype a, const void *s, tr_dtype b, int64_t n) { (void)cx; (void)d; (void)a; (void)s; (void)b; (void)n; }
static void n_down(tr_backend_ctx *cx, float *d, const void *s, tr_dtype t, int64_t n) { (void)cx; (void)d; (void)s; (void)t; (void)n; }
static void n_up(tr_backend_ctx *cx, void *d, tr_dtype t, const float *s, int64_t n) { (void)cx; (void)d; (void)s; (void)t; (void)n; }
static double n_sumsq(tr_backend_ctx *cx, const void *p, int64_t n, tr_dtype t) { (void)cx; (void)p; (void)n; (void)t; return 0; }
static void n_add(tr_backend_ctx *cx, void *y, const void *x, int64_t n, tr_dtype t) { (void)cx; (void)y; (void)x; (void)n; (void)t; }
static void n_emb_f(tr_backend_ctx *cx, void *o, const int32_t *k, const void *w, int64_t n, int64_t h, tr_dtype t) { (void)cx; (void)o; (void)k; (void)w; (void)n; (void)h; (void)t; }
static void n_emb_b(tr_backend_ctx *cx, void *d, const void *o, const int32_t *k, int64_t n, int64_t h, tr_dtype t) { (void)cx; (void)d; (void)o; (void)k; (void)n; (void)h; (void)t; }
static void n_rms_f(tr_backend_ctx *cx, void *o, float *r, const void *x, const void *w, int64_t n, int64_t h, double e, tr_dtype t) { (void)cx; (void)o; (void)r; (void)x; (void)w; (void)n; (void)h; (void)e; (void)t; }
static void n_rms_b(tr_backend_ctx *cx, void *dx, void *dw, const void *dy, const void *x, const void *w, const float *r, int64_t n, int64_t h, tr_dtype t) { (void)cx; (void)dx; (void)dw; (void)dy; (void)x; (void)w; (void)r; (void)n; (void)h; (void)t; }
static void n_mm_f(tr_backend_ctx *cx, void *o, const void *x, const void *w, const void *b, int64_t n, int64_t c, int64_t oc, tr_dtype t) { (void)cx; (void)o; (void)x; (void)w; (void)b; (void)n; (void)c; (void)oc; (void)t; }
static void n_mm_b(tr_backend_ctx *cx, void *dx, void *dw, void *db, const void *dy, const void *x, const void *w, int64_t n, int64_t c, int64_t oc, tr_dtype t) { (void)cx; (void)dx; (void)dw; (void)db; (void)dy; (void)x; (void)w; (void)n; (void)c; (void)oc; (void)t; }
static void n_rope(tr_backend_ctx *cx, void *q, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd, double th, tr_dtype t) { (void)cx; (void)q; (void)B; (void)T; (void)nh; (void)nkv; (void)hd; (void)th; (void)t; }
static void n_ae_f(tr_backend_ctx *cx, void *o, void *p, const void *q, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd, tr_dtype t) { (void)cx; (void)o; (void)p; (void)q; (void)B; (void)T; (void)nh; (void)nkv; (void)hd; (void)t; }
static void n_ae_b(tr_backend_ctx *cx, void *dq, void *dp, const void *dy, const void *q, const void *p, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd, tr_dtype t) { (void)cx; (void)dq; (void)dp; (void)dy; (void)q; (void)p; (void)B; (void)T; (void)nh; (void)nkv; (void)hd; (void)t; }
static void n_af_f(tr_backend_ctx *cx, void *o, float *l, const void *q, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd, tr_dtype t) { (void)cx; (void)o; (void)l; (void)q; (void)B; (void)T; (void)nh; (void)nkv; (void)hd; (void)t; }
static void n_af_b(tr_backend_ctx *cx, void *dq, const void *dy, const void *q, const void *o, const float *l, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd, tr_dtype t) { (void)cx; (void)dq; (void)dy; (void)q; (void)o; (void)l; (void)B; (void)T; (void)nh; (void)nkv; (void)hd; (void)t; }
static void n_sw_f(tr_backend_ctx *cx, void *h, const void *g, int64_t n, int64_t I, tr_dtype t) { (void)cx; (void)h; (void)g; (void)n; (void)I; (void)t; }
static void n_sw_b(tr_backend_ctx *cx, void *d, const void *dh, const void *g, int64_t n, int64_t I, tr_dtype t) { (void)cx; (void)d; (void)dh; (void)g; (void)n; (void)I; (void)t; }
static void n_ce_f(tr_backend_ctx *cx, float *l, const void *z, const int32_t *k, int64_t n, int64_t V, tr_dtype t) { (void)cx; (void)l; (void)z; (void)k; (void)n; (void)V; (void)t; }
static void n_ce_b(tr_backend_ctx *cx, void *z, const int32_t *k, int64_t n, int64_t V, float s, tr_dtype t) { (void)cx; (void)z; (void)k; (void)n; (void)V; (void)s; (void)t; }

static char null_scalars[TR_SCALARS_BYTES];
static int n_open(tr_backend_ctx *cx, int d, char *e, size_t el) { (void)e; (void)el; memset(cx, 0, sizeof *cx); cx->device = d; cx->scalars = null_scalars; return 0; }
static void n_close(tr_backend_ctx *cx) { (void)cx; }
static int n_sync(tr_backend_ctx *cx) { return cx->status; }

static const tr_backend null_backend = {
    .name = "null", .open = n_open, .close = n_close, .sync = n_sync, .mem = {null_alloc, null_free}, .host_mem = {null_alloc, null_free},
    .zero = n_zero, .copy = n_copy, .to_host = n_copy, .to_device = n_copy, .convert = n_convert,
    .download_f32 = n_down, .upload_f32 = n_up, .sumsq = n_sumsq, .add = n_add,
    .embedding_fwd = n_emb_f, .embedding_bwd = n_emb_b, .rmsnorm_fwd = n_rms_f, .rmsnorm_bwd = n_rms_b,
    .matmul_fwd = n_mm_f, .matmul_bwd = n_mm_b, .rope_fwd = n_rope, .rope_bwd = n_rope,
    .attn_eager_fwd = n_ae_f, .attn_eager_bwd = n_ae_b, .attn_flash_fwd = n_af_f, .attn_flash_bwd = n_af_b,
    .swiglu_fwd = n_sw_f, .swiglu_bwd = n_sw_b, .ce_fwd = n_ce_f, .ce_bwd = n_ce_b,
};

static int nc_all_reduce(tr_comm *c, void *b, int64_t n, tr_dtype t) { (void)c; (void)b; (void)n; (void)t; return 0; }
static int nc_rs(tr_comm *c, const void *s, void *r, int64_t n, tr_dtype t) { (void)c; (void)s; (void)r; (void)n; (void)t; return 0; }
static int nc_bc(tr_comm *c, void *b, int64_t n, tr_dtype t, int root) { (void)c; (void)b; (void)n; (void)t; (void)root; return 0; }
static int nc_barrier(tr_comm *c) { (void)c; return 0; }
static const tr_comm_ops null_comm_ops = {"null", nc_all_reduce, nc_rs, nc_rs, nc_bc, nc_barrier};

/* A communicator that fails: its status must reach the rank's backend
 * context, and the context's sync must report it (backend.h). */
static int fail_all_reduce(tr_comm *c, void *b, int64_t n, tr_dtype t) { (void)c; (void)b; (void)n; (void)t; return -1; }
static const tr_comm_ops failing_comm_ops = {"failing", fail_all_reduce, nc_rs, nc_rs, nc_bc, nc_barrier};

START_TEST(test_collective_failure_reaches_status) {
    tr_config c = make_cfg("tiny-llama");
    c.ranks = 2;
    tr_comm comm = {&failing_comm_ops, 0, 2, NULL};
    tr_rank r;
    bool oom;
    char err[256];
    ck_assert_msg(tr_rank_create(&r, &c, &null_backend, &comm, 0, INT64_MAX, &oom, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(r.be->sync(&r.bctx), 0);
    tr_zero_reduce_grads(&r);  /* ZeRO-0, two ranks: one all-reduce */
    ck_assert_int_ne(r.be->sync(&r.bctx), 0);
    ck_assert_ptr_nonnull(strstr(r.bctx.msg, "all-reduce"));
    ck_assert_ptr_nonnull(strstr(r.bctx.msg, "failing"));
    tr_rank_destroy(&r);
}
END_TEST

START_TEST(test_real_models_accounting) {
    const char *models[] = {"llama3-8b", "qwen1.5-0.5b", "mistral-7b", "llama3.2-1b", "qwen2.5-7b", "llama3-70b"};
    uint64_t x = 777;
    for (int i = 0; i < 300; i++) {
        tr_config c = make_cfg(models[i % 6]);
        c.ranks = 1 << PICK(7);
        c.zero_stage = PICK(4);
        c.offload = (ft_offload)PICK(3);
        if (c.offload == FT_OFFLOAD_OPTIMIZER && c.zero_stage == 0) c.zero_stage = 1 + PICK(3);
        if (c.offload == FT_OFFLOAD_OPTIMIZER_PARAMS) c.zero_stage = 3;
        c.checkpointing = (ft_checkpointing)PICK(3);
        c.attention = PICK(2) ? FT_ATTN_FLASH : FT_ATTN_EAGER; /* ftrain has these two */
        c.loss = (ft_loss)PICK(2);
        c.precision = (ft_precision)PICK(2);
        c.optimizer = (ft_optimizer)PICK(2);
        c.micro_batch = 1 + PICK(8);
        c.seq_len = 1 + PICK((int)(c.model.max_position < 8192 ? c.model.max_position : 8192));
        c.layers = 1 + PICK((int)c.model.num_layers);
        tr_comm comm = {&null_comm_ops, 0, c.ranks, NULL};
        tr_rank r;
        bool oom;
        char err[256];
        ck_assert_msg(tr_rank_create(&r, &c, &null_backend, &comm, 0, INT64_MAX, &oom, err, sizeof err) == 0, "%s", err);
        tr_rank_micro_batch(&r, 1.0f);
        tr_arena_phase(&r.dev, "reduce");
        tr_zero_reduce_grads(&r);
        measured m;
        memcpy(m.peak, r.dev.peak, sizeof m.peak);
        memcpy(m.at_peak, r.dev.at_peak, sizeof m.at_peak);
        m.total = r.dev.peak_total;
        m.host = r.host.peak_total;
        snprintf(m.phase, sizeof m.phase, "%s", r.dev.peak_phase);
        /* Everything acquired in the micro-batch was released. */
        for (int k = TR_CAT_ACTIVATIONS; k < TR_CAT_COUNT; k++) ck_assert_int_eq(r.dev.live[k], 0);
        est_run er = to_run(&c);
        const char *why = compare(&er, &m);
        ck_assert_msg(!why[0], "%s ranks %d zero %d offload %s ckpt %s attn %s loss %s prec %s B %lld T %lld L %lld: %s",
                      c.model.name, c.ranks, c.zero_stage, ft_offload_name(c.offload),
                      ft_checkpointing_name(c.checkpointing), ft_attention_name(c.attention), ft_loss_name(c.loss),
                      ft_precision_name(c.precision), (long long)c.micro_batch, (long long)c.seq_len,
                      (long long)c.layers, why);
        tr_rank_destroy(&r);
    }
}
END_TEST

/* The profile refuses what ftrain cannot run. */
START_TEST(test_profile_refuses) {
    tr_config c = make_cfg("tiny-llama");
    est_run r = to_run(&c);
    est_timeline tl;
    char err[256];
    est_timeline_init(&tl);
    r.attention = EST_ATTN_SDPA;
    ck_assert(ftrain_timeline(&r, &tl, err, sizeof err) != 0);
    ck_assert_ptr_nonnull(strstr(err, "sdpa"));
    r = to_run(&c);
    r.precision = EST_PREC_FP16_MIXED;
    ck_assert(ftrain_timeline(&r, &tl, err, sizeof err) != 0);
    r.precision = EST_PREC_BF16;
    ck_assert(ftrain_timeline(&r, &tl, err, sizeof err) != 0);
    r = to_run(&c);
    r.offload = EST_OFFLOAD_OPTIMIZER_PARAMS;
    r.zero_stage = 2;
    ck_assert(ftrain_timeline(&r, &tl, err, sizeof err) != 0);
    r = to_run(&c);
    ck_assert(ftrain_timeline(&r, &tl, err, sizeof err) == 0);
    ck_assert_int_gt((long long)tl.count, 5);
    est_timeline_free(&tl);
}
END_TEST

/* ---- records ---- */
static int enum_index(const char *s, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (s && !strcmp(s, names[i])) return i;
    return -1;
}

static const char *str(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}
static int64_t num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    ck_assert_msg(cJSON_IsNumber(v), "record lacks %s", k);
    return (int64_t)v->valuedouble;
}

typedef struct coverage {
    int ranks[5], zero[4], offload[3], ckpt[3], attn[2], loss[2], prec[2], opt[2];
    int accum, truncated, batch_gt1, seq_var;
} coverage;

/* Verifies every record of a JSON Lines file in process against the profile;
 * returns how many there were. */
static int verify_records(const char *path, coverage *cov) {
    size_t len;
    char err[256];
    char *text = ft_read_file(path, (size_t)64 << 20, &len, err, sizeof err);
    ck_assert_msg(text != NULL, "%s", err);
    int n = 0;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        if (!*line) continue;
        cJSON *rec = cJSON_Parse(line);
        ck_assert_msg(rec != NULL, "%s: record %d is not JSON", path, n + 1);
        ck_assert_str_eq(str(rec, "schema"), "ftest.record/1");
        ck_assert_str_eq(str(rec, "framework"), "ftrain");
        const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(rec, "config");
        const cJSON *hw = cJSON_GetObjectItemCaseSensitive(rec, "hardware");
        const cJSON *meas = cJSON_GetObjectItemCaseSensitive(rec, "measured");
        const cJSON *tol = cJSON_GetObjectItemCaseSensitive(rec, "tolerance");
        ck_assert_str_eq(str(hw, "gpu"), "cpu");
        ck_assert_int_eq(num(tol, "category_abs_bytes"), 0);
        tr_config c = make_cfg(str(cfg, "model"));
        static const char *const prec[] = {"fp32", "bf16-mixed"}, *const off[] = {"none", "optimizer", "optimizer+params"},
                                 *const ck[] = {"none", "selective", "full"}, *const at[] = {"eager", "flash"},
                                 *const lo[] = {"standard", "chunked"}, *const op[] = {"adamw", "sgd"};
        int ip = enum_index(str(cfg, "precision"), prec, 2), io = enum_index(str(cfg, "offload"), off, 3);
        int ic = enum_index(str(cfg, "checkpointing"), ck, 3), ia = enum_index(str(cfg, "attention"), at, 2);
        int il = enum_index(str(cfg, "loss"), lo, 2), iop = enum_index(str(cfg, "optimizer"), op, 2);
        ck_assert(ip >= 0 && io >= 0 && ic >= 0 && ia >= 0 && il >= 0 && iop >= 0);
        c.precision = (ft_precision)ip;
        c.offload = (ft_offload)io;
        c.checkpointing = (ft_checkpointing)ic;
        c.attention = ia ? FT_ATTN_FLASH : FT_ATTN_EAGER; /* at[] lists ftrain's two */
        c.loss = (ft_loss)il;
        c.optimizer = (ft_optimizer)iop;
        c.layers = num(cfg, "layers");
        c.micro_batch = num(cfg, "micro_batch");
        c.grad_accum = num(cfg, "grad_accum");
        c.seq_len = num(cfg, "seq_len");
        c.zero_stage = (int)num(cfg, "zero");
        c.ranks = (int)(num(hw, "gpus_per_node") * num(hw, "nodes"));
        est_run er = to_run(&c);
        const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(meas, "ranks");
        ck_assert_int_eq(cJSON_GetArraySize(ranks), c.ranks);
        for (int k = 0; k < c.ranks; k++) {
            const cJSON *rk = cJSON_GetArrayItem(ranks, k);
            const cJSON *ap = cJSON_GetObjectItemCaseSensitive(rk, "at_peak_bytes");
            const cJSON *cp = cJSON_GetObjectItemCaseSensitive(rk, "category_peak_bytes");
            measured m;
            for (int cat = 0; cat < 8; cat++) {
                m.at_peak[cat] = num(ap, est_category_names[cat]);
                m.peak[cat] = num(cp, est_category_names[cat]);
            }
            m.total = num(rk, "peak_allocated_bytes");
            m.host = num(rk, "host_peak_bytes");
            snprintf(m.phase, sizeof m.phase, "%s", str(rk, "peak_phase"));
            const char *why = compare(&er, &m);
            ck_assert_msg(!why[0], "%s record %d rank %d: %s", path, n + 1, k, why);
        }
        ck_assert_int_eq(num(meas, "cpu_peak_bytes"), num(cJSON_GetArrayItem(ranks, 0), "host_peak_bytes"));
        if (c.ranks <= 4) cov->ranks[c.ranks]++;
        cov->zero[c.zero_stage]++;
        cov->offload[io]++;
        cov->ckpt[ic]++;
        cov->attn[ia]++;
        cov->loss[il]++;
        cov->prec[ip]++;
        cov->opt[iop]++;
        cov->accum += c.grad_accum > 1;
        cov->truncated += c.layers < c.model.num_layers;
        cov->batch_gt1 += c.micro_batch > 1;
        cov->seq_var += c.seq_len != 32;
        cJSON_Delete(rec);
        n++;
    }
    free(text);
    return n;
}

static void assert_covers(const coverage *c) {
    ck_assert(c->ranks[1] && c->ranks[2] && c->ranks[4]);
    for (int i = 0; i < 4; i++) ck_assert_msg(c->zero[i], "no record at zero %d", i);
    for (int i = 0; i < 3; i++) ck_assert(c->offload[i] && c->ckpt[i]);
    for (int i = 0; i < 2; i++) ck_assert(c->attn[i] && c->loss[i] && c->prec[i] && c->opt[i]);
    ck_assert(c->accum && c->truncated && c->batch_gt1 && c->seq_var);
}

/* The committed records still describe the trainer's layout. */
START_TEST(test_committed_records) {
    coverage cov;
    memset(&cov, 0, sizeof cov);
    int n = verify_records(test_repo_path("calibrate/records/ftrain-cpu.jsonl"), &cov);
    ck_assert_int_ge(n, 50);
    assert_covers(&cov);
}
END_TEST

/* Regenerates the records with the built ftrain, verifies them in process and
 * with `ftest check` (exit 0: every record within its zero-byte tolerance). */
START_TEST(test_regenerated_records) {
    char out[] = "/tmp/ftrain_records_XXXXXX";
    int fd = mkstemp(out);
    ck_assert_int_ge(fd, 0);
    close(fd);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "FTRAIN=%s/ftrain %s %s 2>/dev/null", test_build_dir(),
             test_repo_path("tests/gen_ftrain_records.sh"), out);
    int st = system(cmd);
    ck_assert_msg(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s failed", cmd);
    coverage cov;
    memset(&cov, 0, sizeof cov);
    int n = verify_records(out, &cov);
    ck_assert_int_ge(n, 50);
    assert_covers(&cov);
    char ftest[512];
    snprintf(ftest, sizeof ftest, "%s/ftest", test_build_dir());
    ck_assert_msg(access(ftest, X_OK) == 0, "%s is not built (make test builds it)", ftest);
    snprintf(cmd, sizeof cmd, "%s check %s > /dev/null 2>&1", ftest, out);
    st = system(cmd);
    ck_assert_msg(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "`%s` did not pass (status %d)", cmd,
                  WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    unlink(out);
}
END_TEST

/* The seeded init draws each weight once and uploads it in few copies: under
 * bf16-mixed without sharding the compute copy is the fp32 master converted on
 * the device (the same bits as a second draw), and a unit of tiny-llama (under
 * 1 Mi elements) is one upload. Before (the GPU day of 2026-11-26: 27 s before
 * Llama-3.2-1B's first step) every element was drawn twice, for the bf16 copy
 * and for the master, and uploaded in 4,096-element tiles. The values are
 * checked against the initializer's draw element by element. */
static const tr_backend *cpu_be;
static int64_t uploads, uploaded;
static void counting_up(tr_backend_ctx *cx, void *d, tr_dtype t, const float *s, int64_t n) {
    uploads++;
    uploaded += n;
    cpu_be->upload_f32(cx, d, t, s, n);
}

START_TEST(test_init_draws_each_weight_once) {
    cpu_be = tr_backend_cpu();
    tr_backend counting = *cpu_be;
    counting.upload_f32 = counting_up;
    tr_config c = make_cfg("tiny-llama");
    c.precision = FT_PREC_BF16_MIXED;
    tr_comm comm = {&null_comm_ops, 0, 1, NULL};
    tr_rank r;
    bool oom;
    char err[256];
    ck_assert_msg(tr_rank_create(&r, &c, &counting, &comm, 0, INT64_MAX, &oom, err, sizeof err) == 0, "%s", err);
    tr_init in;
    ck_assert_int_eq(tr_init_open(&in, "", &c, &r.s, err, sizeof err), 0);
    uploads = uploaded = 0;
    tr_rank_init_weights(&r, &in);
    int64_t total = 0, big = 0;
    for (int64_t u = 0; u < r.s.n_units; u++) {
        total += tr_unit_of(&r.s, u)->padded;
        big += tr_unit_of(&r.s, u)->padded > 4096;
    }
    ck_assert_msg(big > 0, "tiny-llama has no unit over 4,096 elements: the test shows nothing");
    ck_assert_int_eq(uploaded, total);          /* one draw per element: the master's */
    ck_assert_int_eq(uploads, r.s.n_units);     /* one upload per unit */
    for (int64_t u = 0; u < r.s.n_units; u++) {
        const tr_unit *U = tr_unit_of(&r.s, u);
        float *want = malloc((size_t)U->padded * sizeof *want);
        ck_assert_ptr_nonnull(want);
        tr_init_fill(&in, u, 0, U->padded, want);
        const float *m = (const float *)r.master.ptr + tr_unit_full_off(&r.s, u);
        const char *p = (const char *)r.params.ptr + tr_unit_full_off(&r.s, u) * r.s.cd;
        for (int64_t i = 0; i < U->padded; i++) {
            ck_assert_msg(!memcmp(&m[i], &want[i], 4), "unit %lld element %lld: master", (long long)u, (long long)i);
            char b[2];
            tr_st(b, 0, want[i], TR_BF16);
            ck_assert_msg(!memcmp(p + 2 * i, b, 2), "unit %lld element %lld: bf16 copy", (long long)u, (long long)i);
        }
        free(want);
    }
    tr_init_close(&in);
    tr_rank_destroy(&r);
}
END_TEST

Suite *suite_trainer_memory(void); /* registered by the Makefile */
Suite *suite_trainer_memory(void) {
    Suite *s = suite_create("trainer_memory");
    TCase *tc = tcase_create("memory");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_hand_fp32_one_rank);
    tcase_add_test(tc, test_hand_zero3_padding);
    tcase_add_test(tc, test_arena_matches_profile);
    tcase_add_test(tc, test_real_models_accounting);
    tcase_add_test(tc, test_profile_refuses);
    tcase_add_test(tc, test_collective_failure_reaches_status);
    tcase_add_test(tc, test_init_draws_each_weight_once);
    tcase_add_test(tc, test_committed_records);
    tcase_add_test(tc, test_regenerated_records);
    suite_add_tcase(s, tc);
    return s;
}
