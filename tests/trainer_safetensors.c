/* The safetensors reader and the weight loader, on files this test writes with
 * its own writer: round trips of every float dtype, the HF name mapping (q, k,
 * v stacked; gate, up stacked) checked element by element against the layout
 * written out here, a run initialized from a file equal to a seeded run, and
 * truncated or corrupt files rejected with a message. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtype.h"
#include "init.h"
#include "safetensors.h"
#include "test_util.h"
#include "trainer_util.h"
#include "train.h"

/* ---- an independent writer ---- */
typedef struct st_entry {
    char name[96];
    const char *dtype;     /* "F32", "BF16", "F16", "I32" */
    int ndim;
    int64_t shape[2];
    float *values;         /* numel values, stored in dtype */
} st_entry;

static int64_t numel(const st_entry *e) {
    int64_t n = 1;
    for (int d = 0; d < e->ndim; d++) n *= e->shape[d];
    return n;
}
static int dsize(const char *dt) { return !strcmp(dt, "F32") || !strcmp(dt, "I32") ? 4 : 2; }

/* Exact for the values used here (multiples of 1/64 below 1 in magnitude). */
static uint16_t to_f16(float f) {
    if (f == 0) return 0;
    uint16_t sign = f < 0 ? 0x8000 : 0;
    float a = f < 0 ? -f : f;
    int e = 0;
    while (a >= 2) { a /= 2; e++; }
    while (a < 1) { a *= 2; e--; }
    return (uint16_t)(sign | (uint16_t)((e + 15) << 10) | (uint16_t)((a - 1) * 1024));
}

/* Serializes entries into a buffer: 8-byte length, JSON padded with spaces to
 * 8 bytes, data in entry order. */
static uint8_t *st_build(const st_entry *e, int n, size_t *len) {
    char *hdr = malloc(1 << 16);
    size_t h = (size_t)sprintf(hdr, "{\"__metadata__\":{\"format\":\"pt\"}");
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        int64_t bytes = numel(&e[i]) * dsize(e[i].dtype);
        h += (size_t)sprintf(hdr + h, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", e[i].name, e[i].dtype);
        for (int d = 0; d < e[i].ndim; d++) h += (size_t)sprintf(hdr + h, "%s%lld", d ? "," : "", (long long)e[i].shape[d]);
        h += (size_t)sprintf(hdr + h, "],\"data_offsets\":[%lld,%lld]}", (long long)off, (long long)(off + bytes));
        off += bytes;
    }
    hdr[h++] = '}';
    while (h % 8) hdr[h++] = ' ';
    *len = 8 + h + (size_t)off;
    uint8_t *buf = malloc(*len);
    for (int b = 0; b < 8; b++) buf[b] = (uint8_t)((uint64_t)h >> (8 * b));
    memcpy(buf + 8, hdr, h);
    uint8_t *p = buf + 8 + h;
    for (int i = 0; i < n; i++)
        for (int64_t k = 0; k < numel(&e[i]); k++) {
            float v = e[i].values[k];
            uint32_t u;
            if (!strcmp(e[i].dtype, "F32")) memcpy(&u, &v, 4);
            else if (!strcmp(e[i].dtype, "I32")) u = (uint32_t)(int32_t)v;
            else if (!strcmp(e[i].dtype, "BF16")) u = tr_f32_to_bf16(v);
            else u = to_f16(v);
            for (int b = 0; b < dsize(e[i].dtype); b++) *p++ = (uint8_t)(u >> (8 * b));
        }
    free(hdr);
    return buf;
}

static void write_file(const char *path, const uint8_t *buf, size_t len) {
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(buf, 1, len, f), len);
    fclose(f);
}

static float val(const char *name, int64_t i) {
    uint32_t hsh = 2166136261u;
    for (const char *c = name; *c; c++) hsh = (hsh ^ (uint8_t)*c) * 16777619u;
    return (float)((int64_t)((hsh + (uint64_t)i * 7) % 63) - 31) / 64.0f;
}

static void fill(st_entry *e, const char *name, const char *dtype, int64_t rows, int64_t cols) {
    snprintf(e->name, sizeof e->name, "%s", name);
    e->dtype = dtype;
    e->ndim = cols ? 2 : 1;
    e->shape[0] = rows;
    e->shape[1] = cols;
    e->values = malloc((size_t)numel(e) * sizeof(float));
    for (int64_t i = 0; i < numel(e); i++) e->values[i] = val(name, i);
}

START_TEST(test_parse_round_trip) {
    st_entry e[3];
    fill(&e[0], "a", "F32", 2, 3);
    fill(&e[1], "b.weight", "BF16", 4, 0);
    fill(&e[2], "c", "F16", 1, 5);
    size_t len;
    uint8_t *buf = st_build(e, 3, &len);
    tr_st_header h;
    char err[256];
    ck_assert_msg(tr_st_parse(buf, len, &h, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(h.count, 3);
    const tr_st_tensor *b = tr_st_find(&h, "b.weight");
    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(b->dtype, TR_ST_BF16);
    ck_assert_int_eq(b->ndim, 1);
    ck_assert_int_eq(b->shape[0], 4);
    ck_assert_uint_eq(b->begin, 24);
    ck_assert_uint_eq(b->end, 32);
    ck_assert_uint_eq(h.data_len, 24 + 8 + 10);
    for (int t = 0; t < 3; t++) {
        const tr_st_tensor *x = tr_st_find(&h, e[t].name);
        for (int64_t i = 0; i < numel(&e[t]); i++)
            ck_assert_msg(tr_st_value(buf + h.data_start, x, i) == e[t].values[i], "%s[%lld]", e[t].name, (long long)i);
    }
    ck_assert_ptr_null(tr_st_find(&h, "missing"));
    tr_st_free(&h);
    free(buf);
    for (int t = 0; t < 3; t++) free(e[t].values);
}
END_TEST

/* Each corruption of a valid file, with a word its message must contain. */
static void expect_reject(const uint8_t *buf, size_t len, const char *word) {
    tr_st_header h;
    char err[256] = "";
    ck_assert_msg(tr_st_parse(buf, len, &h, err, sizeof err) != 0, "accepted a file that should fail (%s)", word);
    ck_assert_msg(strstr(err, word) != NULL, "message \"%s\" lacks \"%s\"", err, word);
}

static uint8_t *with_header(const char *json, size_t data_len, size_t *len) {
    size_t h = strlen(json);
    *len = 8 + h + data_len;
    uint8_t *buf = calloc(1, *len);
    for (int b = 0; b < 8; b++) buf[b] = (uint8_t)((uint64_t)h >> (8 * b));
    memcpy(buf + 8, json, h);
    return buf;
}

START_TEST(test_parse_rejects) {
    st_entry e[2];
    fill(&e[0], "a", "F32", 2, 3);
    fill(&e[1], "b", "BF16", 4, 0);
    size_t len;
    uint8_t *good = st_build(e, 2, &len);
    expect_reject(good, 0, "too short");
    expect_reject(good, 7, "too short");
    /* Every truncation inside the header or the data is caught. */
    for (size_t cut = 8; cut < len; cut++) {
        tr_st_header h;
        char err[256];
        ck_assert_msg(tr_st_parse(good, cut, &h, err, sizeof err) != 0, "accepted a file cut at %zu of %zu", cut, len);
    }
    expect_reject(good, len - 1, "truncated");
    expect_reject(good, 20, "truncated");
    /* Bytes appended after the data. */
    uint8_t *longer = calloc(1, len + 4);
    memcpy(longer, good, len);
    expect_reject(longer, len + 4, "padded");
    free(longer);
    /* A header length beyond 100 MB. */
    uint8_t big[16] = {0, 0, 0, 0x10, 0, 0, 0, 0, '{', '}'};
    expect_reject(big, 16, "100 MB");
    size_t n;
    uint8_t *b;
#define REJECT(json, data, word)            \
    b = with_header(json, data, &n);        \
    expect_reject(b, n, word);              \
    free(b)
    REJECT("[1,2]   ", 0, "JSON object");
    REJECT("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]", 4, "JSON");
    REJECT("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}xy", 4, "after");
    REJECT("{\"a\":{\"dtype\":\"Q4\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "unknown dtype");
    REJECT("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, "bytes");
    REJECT("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "shape");
    REJECT("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, "shape");
    REJECT("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, "data_offsets");
    REJECT("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "lacks");
    REJECT("{\"a\":5}", 0, "not an object");
    REJECT("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "gap");
    REJECT("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
           "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "overlap");
    REJECT("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
           "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "twice");
    REJECT("{\"__metadata__\":{\"x\":1}}", 0, "strings");
    REJECT("{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "name");
    REJECT("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,2,3,4,5,6,7,8,9],\"data_offsets\":[0,4]}}", 4, "dimensions");
    REJECT("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", 4, "too large");
    REJECT("{}", 4, "no tensors");
    /* An empty header with no data is a valid (empty) file. */
    b = with_header("{}      ", 0, &n);
    tr_st_header h;
    char err[128];
    ck_assert(tr_st_parse(b, n, &h, err, sizeof err) == 0);
    ck_assert_int_eq(h.count, 0);
    tr_st_free(&h);
    free(b);
    free(good);
    free(e[0].values);
    free(e[1].values);
}
END_TEST

/* ---- the model loader ---- */
static tr_config make_cfg(const char *model) {
    tr_config c = test_tr_config(model);
    c.steps = 2;
    return c;
}

/* The HF tensors of a Llama model, with shapes, in an order of our choosing.
 * `layers` blocks; lm_head only when untied. Returns the count. */
static int hf_entries(const tr_config *c, int64_t layers, st_entry *e, const char *dtypes[3]) {
    const ft_model *m = &c->model;
    const int64_t h = m->hidden_size, I = m->intermediate_size, qd = m->num_heads * m->head_dim,
                  kvd = m->num_kv_heads * m->head_dim, V = m->vocab_size;
    int n = 0;
    char name[96];
    fill(&e[n++], "model.embed_tokens.weight", dtypes[0], V, h);
    for (int64_t l = 0; l < layers; l++) {
#define T(suffix, dt, r, cc)                                                      \
    snprintf(name, sizeof name, "model.layers.%lld." suffix, (long long)l); \
    fill(&e[n++], name, dtypes[dt], r, cc)
        T("input_layernorm.weight", 1, h, 0);
        T("self_attn.q_proj.weight", 2, qd, h);
        T("self_attn.k_proj.weight", 0, kvd, h);
        T("self_attn.v_proj.weight", 1, kvd, h);
        if (m->qkv_bias) {
            T("self_attn.q_proj.bias", 0, qd, 0);
            T("self_attn.k_proj.bias", 1, kvd, 0);
            T("self_attn.v_proj.bias", 2, kvd, 0);
        }
        T("self_attn.o_proj.weight", 2, h, qd);
        if (m->o_bias) { T("self_attn.o_proj.bias", 0, h, 0); }
        T("post_attention_layernorm.weight", 0, h, 0);
        T("mlp.gate_proj.weight", 1, I, h);
        T("mlp.up_proj.weight", 2, I, h);
        T("mlp.down_proj.weight", 0, h, I);
        if (m->mlp_bias) {
            T("mlp.gate_proj.bias", 1, I, 0);
            T("mlp.up_proj.bias", 2, I, 0);
            T("mlp.down_proj.bias", 0, h, 0);
        }
#undef T
    }
    fill(&e[n++], "model.norm.weight", dtypes[1], h, 0);
    if (!m->tied_embeddings) fill(&e[n++], "lm_head.weight", dtypes[2], V, h);
    return n;
}

static const st_entry *entry(const st_entry *e, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(e[i].name, name)) return &e[i];
    return NULL;
}

/* What element i of our tensor t of block l must hold, from the HF entries,
 * by the layout stated in sizes.h: q|k|v rows stacked, gate|up rows stacked. */
static float expected(const tr_config *c, const st_entry *e, int n, int t, int64_t l, int64_t i) {
    const ft_model *m = &c->model;
    const int64_t h = m->hidden_size, I = m->intermediate_size, qd = m->num_heads * m->head_dim,
                  kvd = m->num_kv_heads * m->head_dim;
    char name[96];
    const char *part = NULL;
    int64_t at = i;
    switch (t) {
    case TR_T_EMBED: return entry(e, n, "model.embed_tokens.weight")->values[i];
    case TR_T_NORM_F: return entry(e, n, "model.norm.weight")->values[i];
    case TR_T_LM_HEAD: return entry(e, n, "lm_head.weight")->values[i];
    case TR_T_LN1: part = "input_layernorm.weight"; break;
    case TR_T_LN2: part = "post_attention_layernorm.weight"; break;
    case TR_T_O_W: part = "self_attn.o_proj.weight"; break;
    case TR_T_O_B: part = "self_attn.o_proj.bias"; break;
    case TR_T_DOWN_W: part = "mlp.down_proj.weight"; break;
    case TR_T_DOWN_B: part = "mlp.down_proj.bias"; break;
    case TR_T_QKV_W: case TR_T_QKV_B: {
        int64_t cols = t == TR_T_QKV_W ? h : 1, row = i / cols;
        const char *w = t == TR_T_QKV_W ? "weight" : "bias";
        static char buf[48];
        if (row < qd) snprintf(buf, sizeof buf, "self_attn.q_proj.%s", w);
        else if (row < qd + kvd) { snprintf(buf, sizeof buf, "self_attn.k_proj.%s", w); at -= qd * cols; }
        else { snprintf(buf, sizeof buf, "self_attn.v_proj.%s", w); at -= (qd + kvd) * cols; }
        part = buf;
        break;
    }
    case TR_T_GU_W: case TR_T_GU_B: {
        int64_t cols = t == TR_T_GU_W ? h : 1, row = i / cols;
        const char *w = t == TR_T_GU_W ? "weight" : "bias";
        static char buf[48];
        if (row < I) snprintf(buf, sizeof buf, "mlp.gate_proj.%s", w);
        else { snprintf(buf, sizeof buf, "mlp.up_proj.%s", w); at -= I * cols; }
        part = buf;
        break;
    }
    }
    snprintf(name, sizeof name, "model.layers.%lld.%s", (long long)l, part);
    const st_entry *x = entry(e, n, name);
    ck_assert_msg(x != NULL, "no %s", name);
    return x->values[at];
}

static void tmp_path(char *path) {
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
}

START_TEST(test_loader_mapping) {
    /* Every bias, GQA, explicit head_dim, untied; F32, BF16 and F16 mixed. */
    tr_config c = make_cfg("tiny-llama-bias");
    st_entry e[64];
    const char *dts[3] = {"F32", "BF16", "F16"};
    int n = hf_entries(&c, 3, e, dts);
    size_t len;
    uint8_t *buf = st_build(e, n, &len);
    char path[] = "/tmp/ftrain_st_XXXXXX";
    tmp_path(path);
    write_file(path, buf, len);
    tr_sizes s;
    char err[256];
    ck_assert(tr_sizes_compute(&c, &s, err, sizeof err) == 0);
    tr_init in;
    ck_assert_msg(tr_init_open(&in, path, &c, &s, err, sizeof err) == 0, "%s", err);
    int64_t checked = 0;
    for (int64_t u = 0; u < s.n_units; u++) {
        const tr_unit *U = tr_unit_of(&s, u);
        float *got = malloc((size_t)U->padded * sizeof(float));
        tr_init_fill(&in, u, 0, U->padded, got);
        for (int t = 0; t < TR_T_COUNT; t++)
            for (int64_t i = 0; U->off[t] >= 0 && i < U->len[t]; i++, checked++)
                ck_assert_msg(got[U->off[t] + i] == expected(&c, e, n, t, u - 1, i), "unit %lld %s[%lld]",
                              (long long)u, tr_tensor_name((tr_tensor_id)t), (long long)i);
        free(got);
    }
    ck_assert_int_eq(checked, c.model.params_official);
    tr_init_close(&in);
    /* --layers 2 ignores the third block's tensors. */
    c.layers = 2;
    ck_assert(tr_sizes_compute(&c, &s, err, sizeof err) == 0);
    ck_assert_msg(tr_init_open(&in, path, &c, &s, err, sizeof err) == 0, "%s", err);
    tr_init_close(&in);
    unlink(path);
    free(buf);
    for (int i = 0; i < n; i++) free(e[i].values);
}
END_TEST

/* A file holding exactly the seeded initial weights trains bitwise like the
 * seeded run (tied Qwen2 model: no lm_head in the file). */
START_TEST(test_loader_equals_seeded_run) {
    tr_config c = make_cfg("tiny-qwen2");
    tr_sizes s;
    char err[256];
    ck_assert(tr_sizes_compute(&c, &s, err, sizeof err) == 0);
    tr_init seeded;
    ck_assert(tr_init_open(&seeded, "", &c, &s, err, sizeof err) == 0);
    st_entry e[64];
    const char *dts[3] = {"F32", "F32", "F32"};
    int n = hf_entries(&c, c.layers, e, dts);
    /* Each HF tensor gets the seeded values at its stated place in our layout
     * (written out here, independently of `expected` above). */
    const int64_t h = c.model.hidden_size, I = c.model.intermediate_size;
    const int64_t qd = c.model.num_heads * c.model.head_dim, kvd = c.model.num_kv_heads * c.model.head_dim;
    for (int i = 0; i < n; i++) {
        long long l = -1;
        char rest[64] = "";
        int64_t u, t, at = 0;
        if (sscanf(e[i].name, "model.layers.%lld.%63s", &l, rest) == 2) {
            u = l + 1;
            if (!strcmp(rest, "input_layernorm.weight")) t = TR_T_LN1;
            else if (!strcmp(rest, "post_attention_layernorm.weight")) t = TR_T_LN2;
            else if (!strcmp(rest, "self_attn.q_proj.weight")) t = TR_T_QKV_W;
            else if (!strcmp(rest, "self_attn.k_proj.weight")) { t = TR_T_QKV_W; at = qd * h; }
            else if (!strcmp(rest, "self_attn.v_proj.weight")) { t = TR_T_QKV_W; at = (qd + kvd) * h; }
            else if (!strcmp(rest, "self_attn.q_proj.bias")) t = TR_T_QKV_B;
            else if (!strcmp(rest, "self_attn.k_proj.bias")) { t = TR_T_QKV_B; at = qd; }
            else if (!strcmp(rest, "self_attn.v_proj.bias")) { t = TR_T_QKV_B; at = qd + kvd; }
            else if (!strcmp(rest, "self_attn.o_proj.weight")) t = TR_T_O_W;
            else if (!strcmp(rest, "mlp.gate_proj.weight")) t = TR_T_GU_W;
            else if (!strcmp(rest, "mlp.up_proj.weight")) { t = TR_T_GU_W; at = I * h; }
            else if (!strcmp(rest, "mlp.down_proj.weight")) t = TR_T_DOWN_W;
            else ck_abort_msg("unexpected %s", e[i].name);
        } else if (!strcmp(e[i].name, "model.embed_tokens.weight")) {
            u = 0;
            t = TR_T_EMBED;
        } else {
            ck_assert_str_eq(e[i].name, "model.norm.weight");
            u = s.L + 1;
            t = TR_T_NORM_F;
        }
        tr_init_fill(&seeded, u, tr_unit_of(&s, u)->off[t] + at, numel(&e[i]), e[i].values);
    }
    tr_init_close(&seeded);
    size_t len;
    uint8_t *buf = st_build(e, n, &len);
    char path[] = "/tmp/ftrain_st_XXXXXX";
    tmp_path(path);
    write_file(path, buf, len);
    tr_result a, b;
    c.ranks = 2;
    c.zero_stage = 3;
    ck_assert(tr_train(&c, &a, err, sizeof err) == 0);
    snprintf(c.init_path, sizeof c.init_path, "%s", path);
    ck_assert_msg(tr_train(&c, &b, err, sizeof err) == 0, "%s", err);
    for (int64_t k = 0; k < c.steps; k++)
        ck_assert_msg(!memcmp(&a.loss[k], &b.loss[k], sizeof(double)), "step %lld: %.17g vs %.17g", (long long)k,
                      a.loss[k], b.loss[k]);
    tr_result_free(&a);
    tr_result_free(&b);
    unlink(path);
    free(buf);
    for (int i = 0; i < n; i++) free(e[i].values);
}
END_TEST

/* The model-level checks: a missing tensor, an unexpected one, a wrong shape,
 * an integer dtype, a truncated file, and tolerated extras. */
START_TEST(test_loader_rejects) {
    tr_config c = make_cfg("tiny-llama");
    tr_sizes s;
    char err[256];
    ck_assert(tr_sizes_compute(&c, &s, err, sizeof err) == 0);
    st_entry e[64];
    const char *dts[3] = {"F32", "F32", "BF16"};
    int n = hf_entries(&c, 2, e, dts);
    char path[] = "/tmp/ftrain_st_XXXXXX";
    tmp_path(path);
    size_t len;
    uint8_t *buf;
    tr_init in;
#define TRY(count, word)                                                                  \
    buf = st_build(e, count, &len);                                                       \
    write_file(path, buf, len);                                                           \
    free(buf);                                                                            \
    ck_assert_msg(tr_init_open(&in, path, &c, &s, err, sizeof err) != 0, "accepted: %s", word); \
    ck_assert_msg(strstr(err, word) != NULL, "message \"%s\" lacks \"%s\"", err, word)
    TRY(n - 1, "lacks lm_head.weight");
    st_entry extra = e[n - 1];
    fill(&e[n], "model.rotary_emb.inv_freq", "F32", 4, 0);
    TRY(n + 1, "unexpected tensor model.rotary_emb.inv_freq");
    free(e[n].values);
    e[n - 1].shape[0] = 63;
    TRY(n, "expected a float tensor of shape [64, 32]");
    e[n - 1] = extra;
    e[0].dtype = "I32";
    TRY(n, "model.embed_tokens.weight");
    e[0].dtype = "F32";
    /* A truncated file. */
    buf = st_build(e, n, &len);
    write_file(path, buf, len - 10);
    ck_assert(tr_init_open(&in, path, &c, &s, err, sizeof err) != 0);
    ck_assert_ptr_nonnull(strstr(err, "truncated"));
    /* The complete file loads. */
    write_file(path, buf, len);
    ck_assert_msg(tr_init_open(&in, path, &c, &s, err, sizeof err) == 0, "%s", err);
    tr_init_close(&in);
    free(buf);
    ck_assert(tr_init_open(&in, "/nonexistent.safetensors", &c, &s, err, sizeof err) != 0);
    ck_assert_ptr_nonnull(strstr(err, "cannot open"));
    /* A tied model accepts (and ignores) an lm_head.weight of the right shape. */
    tr_config t = make_cfg("tiny-llama-tied");
    ck_assert(tr_sizes_compute(&t, &s, err, sizeof err) == 0);
    st_entry te[64];
    int tn = hf_entries(&t, 2, te, dts);
    fill(&te[tn++], "lm_head.weight", "F32", 64, 32);
    buf = st_build(te, tn, &len);
    write_file(path, buf, len);
    ck_assert_msg(tr_init_open(&in, path, &t, &s, err, sizeof err) == 0, "%s", err);
    tr_init_close(&in);
    free(buf);
    unlink(path);
    for (int i = 0; i < n; i++) free(e[i].values);
    for (int i = 0; i < tn; i++) free(te[i].values);
}
END_TEST

Suite *suite_trainer_safetensors(void); /* registered by the Makefile */
Suite *suite_trainer_safetensors(void) {
    Suite *s = suite_create("trainer_safetensors");
    TCase *tc = tcase_create("safetensors");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_parse_round_trip);
    tcase_add_test(tc, test_parse_rejects);
    tcase_add_test(tc, test_loader_mapping);
    tcase_add_test(tc, test_loader_equals_seeded_run);
    tcase_add_test(tc, test_loader_rejects);
    suite_add_tcase(s, tc);
    return s;
}
