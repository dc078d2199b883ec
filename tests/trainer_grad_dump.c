/* ftrain --dump-grads: what the file holds, checked without trusting it.
 *
 * - Names and shapes: the list below is written out from Hugging Face's
 *   LlamaForCausalLM naming (modeling_llama.py: model.embed_tokens,
 *   model.layers.{i}.self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj, the two
 *   norms, model.norm, lm_head), not taken from the trainer; the dump must hold
 *   exactly those tensors, in fp32, with those shapes.
 * - Values: every dumped number is a derivative of the first step's loss. Each
 *   is compared with a central finite difference of that loss, measured through
 *   the same public path as the gradient (an --init file written here, one
 *   training step, res.loss[0]), for three elements of every tensor.
 * - Ranks: N ranks at every ZeRO stage dump what one rank with N times the
 *   batch does (each rank writes only its partition, so a missing or misplaced
 *   partition shows as zeros or swapped values).
 * - A path that cannot be written fails the run (exit 2 from ftrain). */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "safetensors.h"
#include "test_util.h"
#include "trainer_util.h"
#include "train.h"

/* ---- the HF tensors of a config, from HF's naming ---- */
typedef struct hf_tensor {
    char name[96];
    int ndim;
    int64_t shape[2];
    float *w;                   /* initial weights, numel values */
} hf_tensor;

#define MAX_TENSORS 128

static int64_t numel(const hf_tensor *t) { return t->shape[0] * (t->ndim == 2 ? t->shape[1] : 1); }

static void add(hf_tensor *t, int *n, const char *name, int64_t rows, int64_t cols) {
    ck_assert_int_lt(*n, MAX_TENSORS);
    hf_tensor *x = &t[(*n)++];
    snprintf(x->name, sizeof x->name, "%s", name);
    x->ndim = cols ? 2 : 1;
    x->shape[0] = rows;
    x->shape[1] = cols ? cols : 1;
    x->w = NULL;
}

static int hf_tensors(const ft_model *m, hf_tensor *t) {
    const int64_t V = m->vocab_size, h = m->hidden_size, I = m->intermediate_size;
    const int64_t qd = m->num_heads * m->head_dim, kvd = m->num_kv_heads * m->head_dim;
    int n = 0;
    char nm[96];
    add(t, &n, "model.embed_tokens.weight", V, h);
    for (int64_t l = 0; l < m->num_layers; l++) {
        const struct { const char *sub; int64_t rows, cols; bool on; } parts[] = {
            {"input_layernorm.weight", h, 0, true},
            {"self_attn.q_proj.weight", qd, h, true},   {"self_attn.q_proj.bias", qd, 0, m->qkv_bias},
            {"self_attn.k_proj.weight", kvd, h, true},  {"self_attn.k_proj.bias", kvd, 0, m->qkv_bias},
            {"self_attn.v_proj.weight", kvd, h, true},  {"self_attn.v_proj.bias", kvd, 0, m->qkv_bias},
            {"self_attn.o_proj.weight", h, qd, true},   {"self_attn.o_proj.bias", h, 0, m->o_bias},
            {"post_attention_layernorm.weight", h, 0, true},
            {"mlp.gate_proj.weight", I, h, true},       {"mlp.gate_proj.bias", I, 0, m->mlp_bias},
            {"mlp.up_proj.weight", I, h, true},         {"mlp.up_proj.bias", I, 0, m->mlp_bias},
            {"mlp.down_proj.weight", h, I, true},       {"mlp.down_proj.bias", h, 0, m->mlp_bias},
        };
        for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++) {
            if (!parts[k].on) continue;
            snprintf(nm, sizeof nm, "model.layers.%lld.%s", (long long)l, parts[k].sub);
            add(t, &n, nm, parts[k].rows, parts[k].cols);
        }
    }
    add(t, &n, "model.norm.weight", h, 0);
    if (!m->tied_embeddings) add(t, &n, "lm_head.weight", V, h);
    return n;
}

/* ---- an independent writer of the --init file (F32) ---- */
static void write_init(const char *path, const hf_tensor *t, int n) {
    char *hdr = malloc(1 << 16);
    size_t h = (size_t)sprintf(hdr, "{");
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        int64_t bytes = 4 * numel(&t[i]);
        h += (size_t)sprintf(hdr + h, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld", i ? "," : "", t[i].name,
                             (long long)t[i].shape[0]);
        if (t[i].ndim == 2) h += (size_t)sprintf(hdr + h, ",%lld", (long long)t[i].shape[1]);
        h += (size_t)sprintf(hdr + h, "],\"data_offsets\":[%lld,%lld]}", (long long)off, (long long)(off + bytes));
        off += bytes;
    }
    hdr[h++] = '}';
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    for (int b = 0; b < 8; b++) fputc((int)(((uint64_t)h >> (8 * b)) & 0xff), f);
    fwrite(hdr, 1, h, f);
    for (int i = 0; i < n; i++)
        for (int64_t k = 0; k < numel(&t[i]); k++) {
            uint32_t u;
            memcpy(&u, &t[i].w[k], 4);
            for (int b = 0; b < 4; b++) fputc((int)((u >> (8 * b)) & 0xff), f);
        }
    ck_assert_int_eq(fclose(f), 0);
    free(hdr);
}

/* Weights uniform in [-0.5, 0.5] (norms and biases too), so that no tensor's
 * gradient is trivially zero and the network is far from linear. */
static uint64_t xs = 0x9e3779b97f4a7c15ull;
static float urand(void) {
    xs ^= xs << 13;
    xs ^= xs >> 7;
    xs ^= xs << 17;
    return (float)((double)(xs >> 11) / 9007199254740992.0 - 0.5);
}

static void fill_random(hf_tensor *t, int n) {
    for (int i = 0; i < n; i++) {
        t[i].w = malloc((size_t)numel(&t[i]) * sizeof(float));
        for (int64_t k = 0; k < numel(&t[i]); k++) t[i].w[k] = urand();
    }
}

static void free_weights(hf_tensor *t, int n) {
    for (int i = 0; i < n; i++) free(t[i].w);
}

/* ---- one training step through the public driver ---- */
static char dir[64];

static const char *tmp_path(const char *leaf) {
    static char p[4][128];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, leaf);
    return p[k];
}

static void setup(void) {
    snprintf(dir, sizeof dir, "/tmp/ftest-graddump-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void) {
    const char *leaves[] = {"init.st", "a.st", "b.st"};
    for (size_t i = 0; i < sizeof leaves / sizeof leaves[0]; i++) unlink(tmp_path(leaves[i]));
    rmdir(dir);
}

static tr_config make_cfg(const char *model) {
    tr_config c = test_tr_config(model);
    c.layers = c.model.num_layers;
    c.steps = 1;
    c.micro_batch = 2;
    c.seq_len = 6;
    c.grad_accum = 2; /* the dump is the gradient of the mean over micro-batches */
    return c;
}

/* Trains one step; returns its loss (the loss at the initial weights). */
static double step_loss(const tr_config *c) {
    tr_result res;
    char err[512];
    int rc = tr_train(c, &res, err, sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
    double loss = res.loss[0];
    tr_result_free(&res);
    return loss;
}

/* A dump read back with the strict reader (trainer/safetensors.h). */
typedef struct dump {
    uint8_t *buf;
    size_t len;
    tr_st_header h;
} dump;

static void read_dump(dump *d, const char *path) {
    d->buf = (uint8_t *)test_slurp(path, &d->len);
    char err[256];
    ck_assert_msg(tr_st_parse(d->buf, d->len, &d->h, err, sizeof err) == 0, "%s: %s", path, err);
}

static void free_dump(dump *d) {
    tr_st_free(&d->h);
    free(d->buf);
}

static float dump_value(const dump *d, const tr_st_tensor *t, int64_t i) {
    return tr_st_value(d->buf + d->h.data_start, t, i);
}

/* The dump holds exactly the HF tensors, fp32, with their shapes. */
static void assert_tensor_set(const dump *d, const hf_tensor *t, int n) {
    ck_assert_int_eq(d->h.count, n);
    for (int i = 0; i < n; i++) {
        const tr_st_tensor *x = tr_st_find(&d->h, t[i].name);
        ck_assert_msg(x != NULL, "dump lacks %s", t[i].name);
        ck_assert_msg(x->dtype == TR_ST_F32 && x->ndim == t[i].ndim && x->shape[0] == t[i].shape[0] &&
                          (t[i].ndim == 1 || x->shape[1] == t[i].shape[1]),
                      "%s: %s with %d dims [%lld, ...]", t[i].name, tr_st_dtype_name(x->dtype), x->ndim,
                      (long long)x->shape[0]);
    }
}

/* Central differences of the step-1 loss (mean over BT tokens and A
 * micro-batches, summed in double from fp32 per-token losses: error ~1e-7)
 * with step 1e-2: truncation error O(e^2 f''') and rounding ~1e-7/e = 1e-5,
 * hence 2e-4 absolute + 3e-2 relative, the tolerance of tests/trainer_model.c's
 * whole-model check. */
static void assert_fd(const char *model, ft_precision prec) {
    tr_config c = make_cfg(model);
    c.precision = prec;
    hf_tensor t[MAX_TENSORS];
    int n = hf_tensors(&c.model, t);
    fill_random(t, n);
    snprintf(c.init_path, sizeof c.init_path, "%s", tmp_path("init.st"));
    write_init(c.init_path, t, n);
    snprintf(c.dump_grads_path, sizeof c.dump_grads_path, "%s", tmp_path("a.st"));
    step_loss(&c);
    dump d;
    read_dump(&d, c.dump_grads_path);
    assert_tensor_set(&d, t, n);
    c.dump_grads_path[0] = '\0';
    int checked = 0;
    for (int i = 0; i < n; i++) {
        const tr_st_tensor *x = tr_st_find(&d.h, t[i].name);
        for (int k = 0; k < 3; k++) {
            const int64_t e = (numel(&t[i]) - 1) * k / 2;
            const float h = 1e-2f, w = t[i].w[e];
            t[i].w[e] = w + h;
            write_init(c.init_path, t, n);
            double lp = step_loss(&c);
            t[i].w[e] = w - h;
            write_init(c.init_path, t, n);
            double lm = step_loss(&c);
            t[i].w[e] = w;
            double num = (lp - lm) / (2.0 * h), got = dump_value(&d, x, e);
            ck_assert_msg(fabs(got - num) <= 2e-4 + 3e-2 * fabs(num), "%s %s[%lld]: dumped %.6g, finite difference %.6g",
                          model, t[i].name, (long long)e, got, num);
            checked++;
        }
    }
    ck_assert_int_eq(checked, 3 * n);
    free_dump(&d);
    free_weights(t, n);
}

START_TEST(test_dump_fd_gqa_biases_untied) {
    /* GQA (4 query heads, 2 kv heads), explicit head_dim, every bias, untied head. */
    assert_fd("tiny-llama-bias", FT_PREC_FP32);
}
END_TEST

START_TEST(test_dump_fd_tied) {
    /* Tied head: no lm_head.weight; the embedding's gradient holds both uses. */
    assert_fd("tiny-llama-tied", FT_PREC_FP32);
}
END_TEST

/* N ranks with batch B each against one rank with batch N*B (the same
 * sequences: docs/trainer.md, "Which sample goes where"): the same gradient
 * up to the order of the sums, element by element. */
static void assert_ranks_match(int ranks, int zero, ft_precision prec) {
    tr_config one = make_cfg("tiny-llama"), many = one;
    one.precision = many.precision = prec;
    one.micro_batch = ranks;
    many.micro_batch = 1;
    many.ranks = ranks;
    many.zero_stage = zero;
    snprintf(one.dump_grads_path, sizeof one.dump_grads_path, "%s", tmp_path("a.st"));
    snprintf(many.dump_grads_path, sizeof many.dump_grads_path, "%s", tmp_path("b.st"));
    step_loss(&one);
    step_loss(&many);
    dump a, b;
    read_dump(&a, one.dump_grads_path);
    read_dump(&b, many.dump_grads_path);
    ck_assert_int_eq(a.h.count, b.h.count);
    /* fp32: sums reordered, ~1e-6 relative; bf16 gradients: one bf16 rounding (2^-8) of each partial sum. */
    const double rel = prec == FT_PREC_FP32 ? 1e-5 : 2e-2;
    for (int64_t i = 0; i < a.h.count; i++) {
        const tr_st_tensor *x = &a.h.tensors[i], *y = tr_st_find(&b.h, x->name);
        ck_assert_msg(y && y->numel == x->numel, "%s missing or resized at %d ranks", x->name, ranks);
        double scale = 0;
        for (int64_t e = 0; e < x->numel; e++) scale = fmax(scale, fabs(dump_value(&a, x, e)));
        ck_assert_msg(scale > 0, "%s: all zero", x->name);
        for (int64_t e = 0; e < x->numel; e++) {
            float u = dump_value(&a, x, e), v = dump_value(&b, y, e);
            ck_assert_msg(fabs(u - v) <= rel * scale, "%s[%lld]: 1 rank %.8g, %d ranks ZeRO-%d %.8g", x->name,
                          (long long)e, u, ranks, zero, v);
        }
    }
    free_dump(&a);
    free_dump(&b);
}

START_TEST(test_dump_ranks_every_stage) {
    for (int z = 0; z <= 3; z++) assert_ranks_match(2, z, FT_PREC_FP32);
    assert_ranks_match(3, 3, FT_PREC_FP32); /* units that do not divide by 3: padded shards */
    assert_ranks_match(3, 1, FT_PREC_FP32);
    assert_ranks_match(2, 2, FT_PREC_BF16_MIXED);
}
END_TEST

START_TEST(test_dump_unwritable) {
    /* The driver: a directory is not a file it may replace. */
    tr_config c = make_cfg("tiny-llama");
    snprintf(c.dump_grads_path, sizeof c.dump_grads_path, "%s", dir);
    tr_result res;
    char err[512] = "";
    ck_assert_int_ne(tr_train(&c, &res, err, sizeof err), 0);
    ck_assert_msg(strstr(err, dir) && strstr(err, "cannot write"), "message: %s", err);
    tr_result_free(&res);
    /* The program: exit 2, one line naming the path; an empty path is bad input. */
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s/ftrain --steps 1 --quiet --dump-grads %s", test_build_dir(), dir);
    test_cmd_result *r = test_shell(cmd);
    ck_assert_int_eq(r->status, 2);
    ck_assert_msg(strstr(r->err, "cannot write") && r->err_lines == 1, "stderr: %s", r->err);
    snprintf(cmd, sizeof cmd, "%s/ftrain --steps 1 --quiet --dump-grads=", test_build_dir());
    r = test_shell(cmd);
    ck_assert_int_eq(r->status, 2);
    ck_assert_msg(strstr(r->err, "--dump-grads expects a path"), "stderr: %s", r->err);
}
END_TEST

Suite *suite_trainer_grad_dump(void); /* registered by the Makefile */
Suite *suite_trainer_grad_dump(void) {
    Suite *s = suite_create("trainer_grad_dump");
    TCase *tc = tcase_create("dump");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_dump_fd_gqa_biases_untied);
    tcase_add_test(tc, test_dump_fd_tied);
    tcase_add_test(tc, test_dump_ranks_every_stage);
    tcase_add_test(tc, test_dump_unwritable);
    suite_add_tcase(s, tc);
    return s;
}
