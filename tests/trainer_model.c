/* ftrain as a whole: gradients of a full tiny model against finite
 * differences, learning on the synthetic task, determinism, recompute giving
 * bitwise the same run, N ranks at every ZeRO stage matching one rank, offload
 * matching no offload, gradient accumulation, the data file and the schedule. */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm.h"
#include "data.h"
#include "init.h"
#include "model.h"
#include "optim.h"
#include "test_util.h"
#include "trainer_util.h"
#include "train.h"

static tr_config make_cfg(const char *model) {
    tr_config c = test_tr_config(model);
    c.steps = 4;
    c.lr = 1e-2;
    return c;
}

/* Trains and returns the per-step losses (caller frees). */
static double *train(const tr_config *c) {
    tr_result res;
    char err[256];
    int rc = tr_train(c, &res, err, sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
    double *loss = res.loss;
    res.loss = NULL;
    tr_result_free(&res);
    return loss;
}

static void assert_bitwise(const double *a, const double *b, int64_t n, const char *what) {
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(!memcmp(&a[i], &b[i], sizeof(double)), "%s: step %lld loss %.17g vs %.17g", what,
                      (long long)i, a[i], b[i]);
}

static void assert_close_runs(const double *a, const double *b, int64_t n, double rel, const char *what) {
    for (int64_t i = 0; i < n; i++)
        ck_assert_msg(isfinite(a[i]) && fabs(a[i] - b[i]) <= rel * fabs(b[i]),
                      "%s: step %lld loss %.9g vs %.9g", what, (long long)i, a[i], b[i]);
}

/* ---- the whole model against finite differences ----
 * One rank, fp32, weights drawn uniformly in [-0.5, 0.5] so the network is far
 * from linear. The loss is the mean over the micro-batch's tokens (loss scale
 * 1/BT), summed in double from fp32 per-token losses (error ~1e-7); step 1e-2,
 * tolerance 2e-4 absolute + 3e-2 relative. Parameters are sampled evenly from
 * every tensor of every unit. */
static uint64_t xs = 0x2545f4914f6cdd1dull;
static float urand(void) {
    xs ^= xs << 13;
    xs ^= xs >> 7;
    xs ^= xs << 17;
    return (float)((double)(xs >> 11) / 9007199254740992.0 - 0.5);
}

static void model_fd(const char *model, ft_attention attn, ft_loss loss, int64_t B, int64_t T) {
    tr_config c = make_cfg(model);
    c.attention = attn;
    c.loss = loss;
    c.micro_batch = B;
    c.seq_len = T;
    char err[256];
    tr_comm comm;
    ck_assert(tr_comm_threads_create(1, &comm, err, sizeof err) == 0);
    tr_rank r;
    bool oom;
    ck_assert_msg(tr_rank_create(&r, &c, tr_backend_cpu(), &comm, 0, INT64_MAX, &oom, err, sizeof err) == 0, "%s", err);
    float *p = r.params.ptr, *g = r.grads.ptr;
    const int64_t n = r.s.full_numel;
    for (int64_t i = 0; i < n; i++) p[i] = urand();
    tr_data data;
    ck_assert(tr_data_open(&data, "", r.s.V, T, -1, 7, err, sizeof err) == 0);
    for (int64_t b = 0; b < B; b++)
        ck_assert(tr_data_sample(&data, b, T, r.host_batch + b * T, r.host_batch + B * T + b * T, err, sizeof err) == 0);
    const float scale = 1.0f / (float)(B * T);
    tr_rank_micro_batch(&r, scale);
    float *grad = malloc((size_t)n * sizeof *grad);
    memcpy(grad, g, (size_t)n * sizeof *grad);
    int checked = 0;
    for (int64_t u = 0; u < r.s.n_units; u++) {
        const tr_unit *U = tr_unit_of(&r.s, u);
        for (int t = 0; t < TR_T_COUNT; t++) {
            if (U->off[t] < 0) continue;
            for (int k = 0; k < 5; k++) {
                int64_t i = tr_unit_full_off(&r.s, u) + U->off[t] + (U->len[t] - 1) * k / 4;
                const float e = 1e-2f, v = p[i];
                p[i] = v + e;
                double lp = tr_rank_micro_batch(&r, scale);
                p[i] = v - e;
                double lm = tr_rank_micro_batch(&r, scale);
                p[i] = v;
                double num = (lp - lm) / (2.0 * e);
                ck_assert_msg(fabs(grad[i] - num) <= 2e-4 + 3e-2 * fabs(num),
                              "%s unit %lld %s[%lld]: analytic %.6g, finite difference %.6g", model,
                              (long long)u, tr_tensor_name((tr_tensor_id)t), (long long)(i - tr_unit_full_off(&r.s, u) - U->off[t]),
                              grad[i], num);
                checked++;
            }
        }
    }
    ck_assert_int_ge(checked, 40);
    free(grad);
    tr_data_close(&data);
    tr_rank_destroy(&r);
    tr_comm_threads_destroy(&comm, 1);
}

START_TEST(test_model_fd_flash_biases) {
    /* Llama with every bias, GQA, explicit head_dim, untied head, 3 blocks. */
    model_fd("tiny-llama-bias", FT_ATTN_FLASH, FT_LOSS_STANDARD, 2, 6);
}
END_TEST

START_TEST(test_model_fd_eager_chunked_tied) {
    /* Qwen2: q/k/v biases, one kv head, tied head; 40 tokens = two loss chunks. */
    model_fd("tiny-qwen2", FT_ATTN_EAGER, FT_LOSS_CHUNKED, 2, 20);
}
END_TEST

/* ---- learning ---- */
START_TEST(test_loss_falls) {
    /* The synthetic rule is a fixed permutation of the vocabulary: a 2-block
     * model learns it almost perfectly in 50 steps. */
    tr_config c = make_cfg("tiny-llama");
    c.steps = 50;
    c.warmup = 2;
    c.lr = 2e-2;
    double *l = train(&c);
    /* At initialization the predictions are near uniform: loss ~ ln V. */
    ck_assert_close(l[0], log(64.0), 0.1, 0);
    ck_assert_msg(l[49] < 0.1, "loss after 50 steps %.4f (started %.4f)", l[49], l[0]);
    /* bf16-mixed learns too, and starts where fp32 starts (bf16 keeps 8 bits). */
    c.precision = FT_PREC_BF16_MIXED;
    double *b = train(&c);
    ck_assert_close(b[0], l[0], 0, 1e-2);
    ck_assert_msg(b[49] < 0.1, "bf16 loss after 50 steps %.4f", b[49]);
    free(l);
    free(b);
    c = make_cfg("tiny-llama");
    c.optimizer = FT_OPT_SGD;
    c.lr = 1.0;
    c.steps = 30;
    l = train(&c);
    ck_assert_msg(l[29] < l[0] - 1.0, "SGD: loss %.4f -> %.4f", l[0], l[29]);
    free(l);
}
END_TEST

/* ---- determinism ---- */
START_TEST(test_same_seed_bitwise) {
    tr_config c = make_cfg("tiny-qwen2");
    c.ranks = 2;
    c.zero_stage = 2;
    c.precision = FT_PREC_BF16_MIXED;
    double *a = train(&c), *b = train(&c);
    assert_bitwise(a, b, c.steps, "same seed");
    c.threads = 1; /* the thread count does not change a bit */
    double *t1 = train(&c);
    c.threads = 3;
    double *t3 = train(&c);
    assert_bitwise(t1, t3, c.steps, "threads 1 vs 3");
    assert_bitwise(a, t1, c.steps, "default threads vs 1");
    c.seed = 99;
    double *d = train(&c);
    ck_assert_msg(d[0] != a[0], "a different seed gives a different run");
    free(a); free(b); free(t1); free(t3); free(d);
}
END_TEST

/* Recompute reproduces the saved tensors bit for bit, so gradients and every
 * later loss are bitwise the same as without recompute. */
START_TEST(test_recompute_bitwise) {
    for (int attn = 0; attn < 2; attn++)
        for (int prec = 0; prec < 2; prec++) {
            tr_config c = make_cfg("tiny-llama-bias");
            c.attention = attn ? FT_ATTN_FLASH : FT_ATTN_EAGER;
            c.precision = prec ? FT_PREC_BF16_MIXED : FT_PREC_FP32;
            c.steps = 3;
            double *none = train(&c);
            c.checkpointing = FT_CKPT_SELECTIVE;
            double *sel = train(&c);
            c.checkpointing = FT_CKPT_FULL;
            double *full = train(&c);
            c.ranks = 2;
            c.micro_batch = 1;
            c.zero_stage = 3;
            double *z3 = train(&c);
            c.checkpointing = FT_CKPT_NONE;
            double *z3none = train(&c);
            char what[64];
            snprintf(what, sizeof what, "%s %s selective", ft_attention_name(c.attention), ft_precision_name(c.precision));
            assert_bitwise(sel, none, 3, what);
            snprintf(what, sizeof what, "%s %s full", ft_attention_name(c.attention), ft_precision_name(c.precision));
            assert_bitwise(full, none, 3, what);
            assert_bitwise(z3, z3none, 3, "zero 3 full");
            free(none); free(sel); free(full); free(z3); free(z3none);
        }
}
END_TEST

/* ---- ranks and ZeRO ----
 * N ranks with batch B/N see exactly the sequences of one rank with batch B,
 * so the losses agree up to fp32 summation order (rel 1e-5 over 4 steps). */
START_TEST(test_ranks_match_one_rank) {
    const char *models[] = {"tiny-qwen2", "tiny-llama-bias"};
    for (int mi = 0; mi < 2; mi++) {
        tr_config c = make_cfg(models[mi]);
        c.micro_batch = 4;
        double *one = train(&c);
        for (int n = 2; n <= 4; n += 2)
            for (int z = 0; z <= 3; z++) {
                tr_config d = c;
                d.ranks = n;
                d.micro_batch = 4 / n;
                d.zero_stage = z;
                double *l = train(&d);
                char what[64];
                snprintf(what, sizeof what, "%s ranks %d zero %d", models[mi], n, z);
                assert_close_runs(l, one, c.steps, 1e-5, what);
                free(l);
            }
        /* Gradient accumulation sees the same sequences too. */
        tr_config a = c;
        a.micro_batch = 1;
        a.grad_accum = 4;
        double *acc = train(&a);
        assert_close_runs(acc, one, c.steps, 1e-5, "grad accum 4");
        a.ranks = 2;
        a.grad_accum = 2;
        a.zero_stage = 2;
        double *acc2 = train(&a);
        assert_close_runs(acc2, one, c.steps, 1e-5, "ranks 2 x accum 2, zero 2");
        free(acc);
        free(acc2);
        free(one);
    }
}
END_TEST

/* bf16 rounds in different places across rank counts: looser, 1e-2. */
START_TEST(test_ranks_bf16) {
    tr_config c = make_cfg("tiny-llama");
    c.precision = FT_PREC_BF16_MIXED;
    c.micro_batch = 4;
    double *one = train(&c);
    c.ranks = 4;
    c.micro_batch = 1;
    c.zero_stage = 3;
    double *four = train(&c);
    assert_close_runs(four, one, c.steps, 1e-2, "bf16 ranks 4 zero 3");
    free(one);
    free(four);
}
END_TEST

/* The offloaded optimizer does the same arithmetic on the host. */
START_TEST(test_offload_bitwise) {
    for (int prec = 0; prec < 2; prec++) {
        tr_config c = make_cfg("tiny-llama-tied");
        c.precision = prec ? FT_PREC_BF16_MIXED : FT_PREC_FP32;
        c.ranks = 2;
        c.micro_batch = 1;
        c.zero_stage = 1;
        double *a = train(&c);
        c.offload = FT_OFFLOAD_OPTIMIZER;
        double *b = train(&c);
        assert_bitwise(b, a, c.steps, "offload optimizer, zero 1");
        c.zero_stage = 3;
        c.offload = FT_OFFLOAD_NONE;
        double *z = train(&c);
        c.offload = FT_OFFLOAD_OPTIMIZER_PARAMS;
        double *zo = train(&c);
        assert_bitwise(zo, z, c.steps, "offload optimizer+params, zero 3");
        c.optimizer = FT_OPT_SGD;
        double *s1 = train(&c);
        c.offload = FT_OFFLOAD_NONE;
        double *s0 = train(&c);
        assert_bitwise(s1, s0, c.steps, "SGD offload");
        free(a); free(b); free(z); free(zo); free(s1); free(s0);
    }
}
END_TEST

/* The chunked loss computes the same logits 32 rows at a time: the first
 * loss is the standard one to fp32 rounding (the BLAS may order a 32-row
 * product's sums differently from a 96-row one; each logit is one dot
 * product of 32 terms, so 1e-6 relative is about ten fp32 ulps), later ones
 * differ also by the order in which the head's gradient is summed. */
START_TEST(test_chunked_loss) {
    tr_config c = make_cfg("tiny-llama");
    c.micro_batch = 3; /* 96 tokens: three chunks of 32 */
    double *s = train(&c);
    c.loss = FT_LOSS_CHUNKED;
    double *k = train(&c);
    assert_close_runs(k, s, 1, 1e-6, "chunked vs standard, first step");
    assert_close_runs(k, s, c.steps, 1e-5, "chunked vs standard");
    free(s);
    free(k);
}
END_TEST

/* ---- data ---- */
START_TEST(test_token_file) {
    char path[] = "/tmp/ftrain_tokens_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    /* 0 1 2 ... 9 0 1 2 ...: next token = (x + 1) mod 10, learnable. */
    int32_t tok[400];
    for (int i = 0; i < 400; i++) tok[i] = i % 10;
    char err[256];
    ck_assert(tr_data_write(path, tok, 400, 2, err, sizeof err) == 0);
    tr_data d;
    ck_assert_msg(tr_data_open(&d, path, 64, 8, -1, 0, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(d.count, 400);
    int32_t in[8], tg[8];
    /* Sample 3 starts at 3*8 = 24: tokens 4 5 6 ..., targets shifted by one. */
    ck_assert(tr_data_sample(&d, 3, 8, in, tg, err, sizeof err) == 0);
    for (int t = 0; t < 8; t++) {
        ck_assert_int_eq(in[t], (24 + t) % 10);
        ck_assert_int_eq(tg[t], (25 + t) % 10);
    }
    /* Sample 49 wraps: 49*8 = 392 mod (400 - 8) = 0. */
    ck_assert(tr_data_sample(&d, 49, 8, in, tg, err, sizeof err) == 0);
    ck_assert_int_eq(in[0], 0);
    tr_data_close(&d);
    /* Too short for the sequence, token beyond the vocabulary, bad header. */
    ck_assert(tr_data_open(&d, path, 64, 400, -1, 0, err, sizeof err) != 0);
    ck_assert_ptr_nonnull(strstr(err, "at least"));
    ck_assert(tr_data_open(&d, path, 9, 8, -1, 0, err, sizeof err) != 0);
    ck_assert_ptr_nonnull(strstr(err, "vocabulary"));
    FILE *f = fopen(path, "r+b");
    fputs("NOTATOKF", f);
    fclose(f);
    ck_assert(tr_data_open(&d, path, 64, 8, -1, 0, err, sizeof err) != 0);
    ck_assert(tr_data_open(&d, "/nonexistent/tokens.bin", 64, 8, -1, 0, err, sizeof err) != 0);
    /* Training on the file learns the rule. */
    ck_assert(tr_data_write(path, tok, 400, 4, err, sizeof err) == 0);
    tr_config c = make_cfg("tiny-llama");
    snprintf(c.data_path, sizeof c.data_path, "%s", path);
    c.steps = 30;
    double *l = train(&c);
    ck_assert_msg(l[29] < 1.0, "token file: loss %.4f -> %.4f", l[0], l[29]);
    free(l);
    unlink(path);
}
END_TEST

/* Warmup to the peak, then cosine to lr/10 (values worked by hand). */
START_TEST(test_lr_schedule) {
    tr_config c = make_cfg("tiny-llama");
    c.lr = 1e-3;
    c.warmup = 2;
    c.steps = 10;
    ck_assert_close(tr_lr_at(&c, 0), 5e-4, 1e-12, 0);
    ck_assert_close(tr_lr_at(&c, 1), 1e-3, 1e-12, 0);
    ck_assert_close(tr_lr_at(&c, 2), 1e-3, 1e-12, 0);             /* cos(0) */
    ck_assert_close(tr_lr_at(&c, 6), 1e-4 + 0.5 * 9e-4, 1e-12, 0); /* halfway: cos(pi/2) = 0 */
    ck_assert_close(tr_lr_at(&c, 9), 1e-4 + 0.45e-3 * (1 + cos(M_PI * 7 / 8)), 1e-12, 0);
}
END_TEST

/* ---- communicator ---- */
typedef struct { tr_comm *c; int ok; } comm_arg;

static void *comm_rank(void *p) {
    comm_arg *a = p;
    tr_comm *c = a->c;
    const int r = c->rank, n = c->size;
    int ok = 1;
    /* all_reduce of rank-dependent integers (exact in fp32): sum_k (k*10 + i). */
    float buf[7];
    for (int i = 0; i < 7; i++) buf[i] = (float)(r * 10 + i);
    c->ops->all_reduce(c, buf, 7, TR_F32);
    for (int i = 0; i < 7; i++) ok &= buf[i] == (float)(10 * n * (n - 1) / 2 + n * i);
    /* reduce_scatter in place: chunk r of the sums lands at recv. */
    float rs[6];
    for (int i = 0; i < 2 * n; i++) rs[i] = (float)(r + i);
    c->ops->reduce_scatter(c, rs, rs + r * 2, 2, TR_F32);
    for (int i = 0; i < 2; i++) ok &= rs[r * 2 + i] == (float)(n * (n - 1) / 2 + n * (r * 2 + i));
    /* all_gather in place. */
    float ag[6];
    for (int i = 0; i < 2; i++) ag[r * 2 + i] = (float)(100 * r + i);
    c->ops->all_gather(c, ag + r * 2, ag, 2, TR_F32);
    for (int k = 0; k < n; k++)
        for (int i = 0; i < 2; i++) ok &= ag[k * 2 + i] == (float)(100 * k + i);
    /* broadcast from the last rank, bf16. */
    uint16_t bb[3] = {(uint16_t)r, (uint16_t)r, (uint16_t)r};
    c->ops->broadcast(c, bb, 3, TR_BF16, n - 1);
    for (int i = 0; i < 3; i++) ok &= bb[i] == (uint16_t)(n - 1);
    /* bf16 all_reduce: 1.5 from each rank sums to 1.5 n, exact in bf16 (rounded once when stored). */
    uint16_t hb = tr_f32_to_bf16(1.5f);
    c->ops->all_reduce(c, &hb, 1, TR_BF16);
    ok &= tr_bf16_to_f32(hb) == 1.5f * (float)n;
    double dsum = r + 0.25;
    c->ops->all_reduce(c, &dsum, 1, TR_F64);
    ok &= dsum == n * (n - 1) / 2.0 + 0.25 * n;
    a->ok = ok;
    return NULL;
}

START_TEST(test_comm_threads) {
    tr_comm comms[3];
    char err[128];
    ck_assert(tr_comm_threads_create(3, comms, err, sizeof err) == 0);
    pthread_t t[3];
    comm_arg a[3];
    for (int r = 0; r < 3; r++) {
        a[r] = (comm_arg){&comms[r], 0};
        pthread_create(&t[r], NULL, comm_rank, &a[r]);
    }
    for (int r = 0; r < 3; r++) pthread_join(t[r], NULL);
    for (int r = 0; r < 3; r++) ck_assert_msg(a[r].ok, "rank %d saw a wrong collective result", r);
    tr_comm_threads_destroy(comms, 3);
}
END_TEST

/* Parameter counts equal the hand counts in each tiny config's "ftest" object,
 * and --layers keeps exact block shapes. */
START_TEST(test_param_counts) {
    const char *models[] = {"tiny-llama", "tiny-llama-tied", "tiny-qwen2", "tiny-llama-bias"};
    for (int i = 0; i < 4; i++) {
        tr_config c = make_cfg(models[i]);
        tr_sizes s;
        char err[128];
        ck_assert(tr_sizes_compute(&c, &s, err, sizeof err) == 0);
        ck_assert_int_eq(s.params_numel, c.model.params_official);
    }
    tr_config c = make_cfg("tiny-llama-bias");
    c.layers = 1;
    tr_sizes s;
    char err[128];
    ck_assert(tr_sizes_compute(&c, &s, err, sizeof err) == 0);
    ck_assert_int_eq(s.params_numel, 1200 + 5424 + 1224); /* emb + one block + norm and head */
    /* Three ranks at ZeRO 1 pad each unit to a multiple of 3. */
    c.layers = 3;
    c.ranks = 3;
    c.zero_stage = 1;
    ck_assert(tr_sizes_compute(&c, &s, err, sizeof err) == 0);
    ck_assert_int_eq(s.unit[TR_UNIT_EMB].padded, 1200);
    ck_assert_int_eq(s.unit[TR_UNIT_LAYER].padded, 5424);
    ck_assert_int_eq(s.unit[TR_UNIT_HEAD].padded, 1224);
    c.ranks = 5;
    ck_assert(tr_sizes_compute(&c, &s, err, sizeof err) == 0);
    ck_assert_int_eq(s.unit[TR_UNIT_LAYER].padded, 5425);
    ck_assert_int_eq(s.unit[TR_UNIT_LAYER].shard, 1085);
    ck_assert_int_eq(s.unit[TR_UNIT_HEAD].padded, 1225);
    ck_assert_int_eq(s.shard_numel, 240 + 3 * 1085 + 245);
}
END_TEST

Suite *suite_trainer_model(void); /* registered by the Makefile */
Suite *suite_trainer_model(void) {
    Suite *s = suite_create("trainer_model");
    TCase *tc = tcase_create("model");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_model_fd_flash_biases);
    tcase_add_test(tc, test_model_fd_eager_chunked_tied);
    tcase_add_test(tc, test_loss_falls);
    tcase_add_test(tc, test_same_seed_bitwise);
    tcase_add_test(tc, test_recompute_bitwise);
    tcase_add_test(tc, test_ranks_match_one_rank);
    tcase_add_test(tc, test_ranks_bf16);
    tcase_add_test(tc, test_offload_bitwise);
    tcase_add_test(tc, test_chunked_loss);
    tcase_add_test(tc, test_token_file);
    tcase_add_test(tc, test_lr_schedule);
    tcase_add_test(tc, test_comm_threads);
    tcase_add_test(tc, test_param_counts);
    suite_add_tcase(s, tc);
    return s;
}
