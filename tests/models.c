/* Model configs: every shipped model counts to its published total, two counts
 * derived by hand term by term, Hugging Face config.json variants, and bad
 * configs that must fail with a one-line message (never a crash).
 *
 * The expected numbers here come from outside the program: the published
 * totals (Hugging Face safetensors totals, model cards; see each file's
 * ftest.params_source) and hand derivations written out below. */
#include <check.h>
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model_config.h"
#include "params.h"
#include "test_util.h"

/* ---- helpers ---------------------------------------------------------------- */

static char tmp_dir[64];

static void remove_tmp_dir(void) {
    if (tmp_dir[0]) rmdir(tmp_dir);
}

/* Writes text to a fresh temporary file named <stem>.json in a private folder
 * (removed at exit); returns its path, valid until four more calls. */
static const char *write_tmp(const char *stem, const char *text, size_t len) {
    static char path[4][160];
    static int next;
    if (!tmp_dir[0]) {
        snprintf(tmp_dir, sizeof tmp_dir, "/tmp/ftest-models-XXXXXX");
        ck_assert_msg(mkdtemp(tmp_dir) != NULL, "mkdtemp failed");
        atexit(remove_tmp_dir);
    }
    char *p = path[next++ % 4];
    snprintf(p, sizeof path[0], "%s/%s.json", tmp_dir, stem);
    FILE *f = fopen(p, "wb");
    ck_assert_msg(f != NULL, "cannot create %s", p);
    ck_assert_uint_eq(fwrite(text, 1, len, f), len);
    fclose(f);
    return p;
}

static const char *write_tmp_str(const char *stem, const char *text) {
    return write_tmp(stem, text, strlen(text));
}

/* Loads text as a config file; returns ft_model_load's status, message in err. */
static int load_text(const char *stem, const char *text, ft_model *m, char *err, size_t errlen) {
    const char *p = write_tmp_str(stem, text);
    err[0] = '\0';
    int rc = ft_model_load(p, m, err, errlen);
    unlink(p);
    return rc;
}

/* A load that must fail: -1, a non-empty one-line message containing `needle`. */
static void expect_reject(const char *stem, const char *text, const char *needle) {
    ft_model m;
    char err[256];
    int rc = load_text(stem, text, &m, err, sizeof err);
    ck_assert_msg(rc == -1, "%s: accepted a bad config", stem);
    ck_assert_msg(err[0] != '\0', "%s: no message", stem);
    ck_assert_msg(strchr(err, '\n') == NULL, "%s: message is not one line: %s", stem, err);
    if (needle)
        ck_assert_msg(strstr(err, needle) != NULL, "%s: message \"%s\" does not mention \"%s\"", stem,
                      err, needle);
}

static int64_t total_params(const ft_model *m) {
    est_params p;
    est_count_params(m, m->num_layers, &p);
    return p.total;
}

/* A valid Llama-style config with one field replaced: FIELD is the text that
 * goes where "hidden_size": 64 would be. Small shapes keep the counts easy. */
#define LLAMA_WITH(FIELD)                                                                  \
    "{\"model_type\": \"llama\", " FIELD ", \"intermediate_size\": 128, "                  \
    "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, " \
    "\"vocab_size\": 100, \"tie_word_embeddings\": false}"

/* ---- every shipped model equals its published total ------------------------ */

/* Published totals, transcribed from the sources named in each file's
 * ftest.params_source (Hugging Face safetensors totals; the safetensors index
 * metadata.total_size / 2 for bf16 weights). Written here independently of the
 * JSON so that a typo in either is caught. */
static const struct {
    const char *name;
    int64_t published;
} published[] = {
    {"llama3-8b", INT64_C(8030261248)},      {"llama3.1-8b", INT64_C(8030261248)},
    {"llama3-70b", INT64_C(70553706496)},    {"llama3.1-70b", INT64_C(70553706496)},
    {"llama3.1-405b", INT64_C(405853388800)}, {"llama3.2-1b", INT64_C(1235814400)},
    {"llama3.2-3b", INT64_C(3212749824)},    {"qwen1.5-0.5b", INT64_C(463987712)},
    {"qwen2.5-0.5b", INT64_C(494032768)},    {"qwen2.5-7b", INT64_C(7615616512)},
    {"mistral-7b", INT64_C(7248023552)},     {"mistral-nemo-12b", INT64_C(12247782400)},
    {"tinyllama-1.1b", INT64_C(1100048384)},
    {"qwen3-8b", INT64_C(8190735360)},       {"qwen3-32b", INT64_C(32762123264)},
    {"qwen3-30b-a3b", INT64_C(30532122624)}, {"gemma3-1b", INT64_C(999885952)},
    {"mistral-small-24b", INT64_C(23572403200)}, {"llama3.3-70b", INT64_C(70553706496)},
};
#define N_PUBLISHED (sizeof published / sizeof published[0])

START_TEST(test_required_models_shipped) {
    for (size_t i = 0; i < N_PUBLISHED; i++) {
        ft_model m;
        char err[256] = "";
        ck_assert_msg(ft_model_load(published[i].name, &m, err, sizeof err) == 0, "%s: %s",
                      published[i].name, err);
        ck_assert_msg(m.params_official == published[i].published,
                      "%s: ftest.params = %lld, published %lld", published[i].name,
                      (long long)m.params_official, (long long)published[i].published);
        ck_assert_msg(total_params(&m) == published[i].published, "%s: counted %lld, published %lld",
                      published[i].name, (long long)total_params(&m),
                      (long long)published[i].published);
    }
}
END_TEST

/* Every model file in models/ (whatever is added later) must load, carry a
 * published total with its source, and count to exactly that total. */
START_TEST(test_every_shipped_model_counts_to_published_total) {
    char names[256][FT_NAME_MAX];
    char err[256] = "";
    int n = ft_model_names(names, 256, err, sizeof err);
    ck_assert_msg(n >= (int)N_PUBLISHED, "found %d models: %s", n, err);
    int checked = 0;
    for (int i = 0; i < n; i++) {
        /* Tiny test models belong to the trainer's tests and carry no published total. */
        if (!strncmp(names[i], "tiny-", 5)) continue;
        ft_model m;
        ck_assert_msg(ft_model_load(names[i], &m, err, sizeof err) == 0, "%s: %s", names[i], err);
        ck_assert_msg(m.params_official > 0, "%s: no ftest.params", names[i]);
        ck_assert_msg(total_params(&m) == m.params_official, "%s: counted %lld, ftest.params %lld",
                      names[i], (long long)total_params(&m), (long long)m.params_official);

        /* The "ftest" object: name equal to the file stem, a repo and a source. */
        char rel[128], path[4096];
        snprintf(rel, sizeof rel, "models/%s.json", names[i]);
        ft_data_path(rel, path, sizeof path);
        char *text = test_slurp(path, NULL);
        cJSON *root = cJSON_Parse(text);
        free(text);
        ck_assert_msg(root != NULL, "%s: not JSON", path);
        const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "ftest");
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(meta, "name");
        const cJSON *src = cJSON_GetObjectItemCaseSensitive(meta, "params_source");
        const cJSON *repo = cJSON_GetObjectItemCaseSensitive(meta, "hf_repo");
        ck_assert_msg(cJSON_IsString(nm) && !strcmp(nm->valuestring, names[i]),
                      "%s: ftest.name differs from the file name", names[i]);
        ck_assert_msg(cJSON_IsString(src) && strlen(src->valuestring) > 20,
                      "%s: ftest.params_source missing", names[i]);
        ck_assert_msg(cJSON_IsString(repo) && strchr(repo->valuestring, '/'),
                      "%s: ftest.hf_repo missing", names[i]);
        cJSON_Delete(root);
        checked++;
    }
    ck_assert_int_ge(checked, (int)N_PUBLISHED);
}
END_TEST

/* ---- hand-derived counts ----------------------------------------------------- */

/* Qwen2.5-0.5B: tied embeddings, q/k/v biases, GQA (14 query heads, 2 KV heads).
 * V = 151936, h = 896, ffn = 4864, L = 24, head_dim = 896 / 14 = 64. */
START_TEST(test_hand_count_qwen25_05b_tied) {
    const int64_t V = 151936, h = 896, ff = 4864, L = 24, hd = 64, H = 14, KV = 2;
    /* embed_tokens: V x h = 151936 * 896 = 136,134,656 (the LM head reuses it) */
    const int64_t embed = INT64_C(136134656);
    /* q_proj: h x (14*64) weights + 896 bias = 802,816 + 896 = 803,712 */
    const int64_t q = INT64_C(803712);
    /* k_proj, v_proj: h x (2*64) + 128 bias = 114,688 + 128 = 114,816 each */
    const int64_t k = INT64_C(114816), v = INT64_C(114816);
    /* o_proj: (14*64) x h, no bias = 802,816 */
    const int64_t o = INT64_C(802816);
    /* gate_proj, up_proj, down_proj: 896 x 4864 = 4,358,144 each, no bias */
    const int64_t mlp = 3 * INT64_C(4358144);
    /* input_layernorm + post_attention_layernorm: 2 x 896 */
    const int64_t norms = 1792;
    /* one block = 803,712 + 2*114,816 + 802,816 + 13,074,432 + 1,792 = 14,912,384 */
    const int64_t block = INT64_C(14912384);
    ck_assert_int_eq(q + k + v + o + mlp + norms, block);
    /* total = embed + 24 blocks + final norm (896) + no separate head */
    const int64_t total = embed + 24 * block + 896;
    ck_assert_int_eq(total, INT64_C(494032768)); /* the arithmetic above, checked */
    ck_assert_int_eq(embed, V * h);               /* and its first term */
    ck_assert_int_eq(q, h * H * hd + H * hd);

    ft_model m;
    char err[256] = "";
    ck_assert_msg(ft_model_load("qwen2.5-0.5b", &m, err, sizeof err) == 0, "%s", err);
    est_params p;
    est_count_params(&m, m.num_layers, &p);
    ck_assert_int_eq(m.num_layers, L);
    ck_assert_int_eq(m.intermediate_size, ff);
    ck_assert_int_eq(m.num_kv_heads, KV);
    ck_assert_int_eq(m.head_dim, hd);
    ck_assert(m.tied_embeddings && m.qkv_bias && !m.o_bias && !m.mlp_bias);
    ck_assert_int_eq(p.embedding, embed);
    ck_assert_int_eq(p.lm_head, 0);
    ck_assert_int_eq(p.layer.q, q);
    ck_assert_int_eq(p.layer.k, k);
    ck_assert_int_eq(p.layer.v, v);
    ck_assert_int_eq(p.layer.o, o);
    ck_assert_int_eq(p.layer.gate + p.layer.up + p.layer.down, mlp);
    ck_assert_int_eq(p.layer.norms, norms);
    ck_assert_int_eq(p.layer.total, block);
    ck_assert_int_eq(p.final_norm, 896);
    ck_assert_int_eq(p.total, total);
}
END_TEST

/* Mistral-Nemo-Base-2407: untied head, explicit head_dim 128 (hidden 5120 / 32
 * heads would be 160), GQA 32/8, no biases. V = 131072, h = 5120, ffn = 14336, L = 40. */
START_TEST(test_hand_count_nemo_untied_explicit_head_dim) {
    /* embed_tokens and lm_head: 131072 x 5120 = 671,088,640 each */
    const int64_t embed = INT64_C(671088640), head = INT64_C(671088640);
    /* q_proj: 5120 -> 32*128 = 4096 outputs: 5120 * 4096 = 20,971,520 */
    const int64_t q = INT64_C(20971520);
    /* k_proj, v_proj: 5120 -> 8*128 = 1024: 5,242,880 each */
    const int64_t k = INT64_C(5242880), v = INT64_C(5242880);
    /* o_proj: 4096 -> 5120: 20,971,520 */
    const int64_t o = INT64_C(20971520);
    /* gate, up, down: 5120 * 14336 = 73,400,320 each */
    const int64_t gate = INT64_C(73400320), up = INT64_C(73400320), down = INT64_C(73400320);
    /* two RMSNorm weights of 5120 */
    const int64_t norms = 10240;
    /* block = 41,943,040 + 10,485,760 + 220,200,960 + 10,240 = 272,640,000 */
    const int64_t block = INT64_C(272640000);
    ck_assert_int_eq(q + k + v + o + gate + up + down + norms, block);
    /* total = 2 x 671,088,640 + 40 x 272,640,000 + 5,120 (final norm) */
    const int64_t total = embed + head + 40 * block + 5120;
    ck_assert_int_eq(total, INT64_C(12247782400));

    ft_model m;
    char err[256] = "";
    ck_assert_msg(ft_model_load("mistral-nemo-12b", &m, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(m.head_dim, 128);
    ck_assert_int_ne(m.head_dim, m.hidden_size / m.num_heads);
    ck_assert(!m.tied_embeddings && !m.qkv_bias && !m.o_bias && !m.mlp_bias);
    ck_assert_int_eq(m.arch, FT_ARCH_MISTRAL);
    est_params p;
    est_count_params(&m, m.num_layers, &p);
    ck_assert_int_eq(p.embedding, embed);
    ck_assert_int_eq(p.lm_head, head);
    ck_assert_int_eq(p.layer.q, q);
    ck_assert_int_eq(p.layer.k, k);
    ck_assert_int_eq(p.layer.v, v);
    ck_assert_int_eq(p.layer.o, o);
    ck_assert_int_eq(p.layer.gate, gate);
    ck_assert_int_eq(p.layer.up, up);
    ck_assert_int_eq(p.layer.down, down);
    ck_assert_int_eq(p.layer.total, block);
    ck_assert_int_eq(p.total, total);
    /* the largest single tensor is the embedding (671M) */
    ck_assert_int_eq(p.largest_tensor, embed);
}
END_TEST

/* ---- Hugging Face config.json variants ---------------------------------------- */

START_TEST(test_variant_missing_kv_heads_defaults_to_heads) {
    ft_model m;
    char err[256];
    const char *cfg = "{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, "
                      "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 100}";
    ck_assert_msg(load_text("nokv", cfg, &m, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(m.num_kv_heads, 4);
    ck_assert_int_eq(m.head_dim, 16);
    /* untied by default (LlamaConfig.tie_word_embeddings = False):
     * 2*(100*64) + 2*(4*64*64 + 3*64*128 + 2*64) + 64 = 12800 + 2*(16384 + 24576 + 128) + 64 */
    ck_assert_int_eq(total_params(&m), 12800 + 2 * (16384 + 24576 + 128) + 64);
}
END_TEST

START_TEST(test_variant_gqa_and_explicit_head_dim) {
    ft_model m;
    char err[256];
    /* 4 query heads of 32 (128 wide) over a 64-wide residual, 2 KV heads. */
    const char *cfg = "{\"model_type\": \"mistral\", \"hidden_size\": 64, \"intermediate_size\": 128, "
                      "\"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
                      "\"head_dim\": 32, \"vocab_size\": 10, \"tie_word_embeddings\": true}";
    ck_assert_msg(load_text("gqa", cfg, &m, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(m.head_dim, 32);
    ck_assert_int_eq(m.num_kv_heads, 2);
    est_params p;
    est_count_params(&m, m.num_layers, &p);
    ck_assert_int_eq(p.layer.q, 64 * 128);  /* h -> heads*head_dim */
    ck_assert_int_eq(p.layer.k, 64 * 64);   /* h -> kv_heads*head_dim */
    ck_assert_int_eq(p.layer.v, 64 * 64);
    ck_assert_int_eq(p.layer.o, 128 * 64);
    /* tied: 10*64 once + block + final norm */
    ck_assert_int_eq(p.total, 640 + (8192 + 4096 + 4096 + 8192 + 3 * 8192 + 128) + 64);
}
END_TEST

START_TEST(test_variant_biases) {
    ft_model m;
    char err[256];
    /* Qwen2: q, k, v carry biases, o and the MLP do not (modeling_qwen2.py). */
    const char *qwen = "{\"model_type\": \"qwen2\", \"hidden_size\": 64, \"intermediate_size\": 128, "
                       "\"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
                       "\"vocab_size\": 10, \"tie_word_embeddings\": true}";
    ck_assert_msg(load_text("qwen", qwen, &m, err, sizeof err) == 0, "%s", err);
    ck_assert(m.qkv_bias && !m.o_bias && !m.mlp_bias);
    est_params p;
    est_count_params(&m, 1, &p);
    ck_assert_int_eq(p.layer.q, 64 * 64 + 64);
    ck_assert_int_eq(p.layer.k, 64 * 32 + 32);
    ck_assert_int_eq(p.layer.o, 64 * 64);

    /* Llama with attention_bias: q, k, v and o all carry biases; mlp_bias the MLP. */
    const char *llama = "{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, "
                        "\"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
                        "\"vocab_size\": 10, \"attention_bias\": true, \"mlp_bias\": true}";
    ck_assert_msg(load_text("llamab", llama, &m, err, sizeof err) == 0, "%s", err);
    ck_assert(m.qkv_bias && m.o_bias && m.mlp_bias);
    est_count_params(&m, 1, &p);
    ck_assert_int_eq(p.layer.o, 64 * 64 + 64);
    ck_assert_int_eq(p.layer.gate, 64 * 128 + 128);
    ck_assert_int_eq(p.layer.down, 128 * 64 + 64);

    /* Mistral's modeling code has no biases, whatever the config says. */
    const char *mis = "{\"model_type\": \"mistral\", \"hidden_size\": 64, \"intermediate_size\": 128, "
                      "\"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"vocab_size\": 10, "
                      "\"attention_bias\": true}";
    ck_assert_msg(load_text("misb", mis, &m, err, sizeof err) == 0, "%s", err);
    ck_assert(!m.qkv_bias && !m.o_bias && !m.mlp_bias);
}
END_TEST

START_TEST(test_variant_tied_vs_untied) {
    ft_model tied, untied;
    char err[256];
    const char *t = "{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, "
                    "\"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"vocab_size\": 1000, "
                    "\"tie_word_embeddings\": true}";
    const char *u = "{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, "
                    "\"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"vocab_size\": 1000, "
                    "\"tie_word_embeddings\": false}";
    ck_assert_msg(load_text("tied", t, &tied, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(load_text("untied", u, &untied, err, sizeof err) == 0, "%s", err);
    ck_assert(tied.tied_embeddings && !untied.tied_embeddings);
    /* the untied head adds exactly one more V x h matrix */
    ck_assert_int_eq(total_params(&untied) - total_params(&tied), 1000 * 64);
}
END_TEST

START_TEST(test_variant_arch_from_architectures) {
    ft_model m;
    char err[256];
    const char *cfg = "{\"architectures\": [\"Qwen2ForCausalLM\"], \"hidden_size\": 64, "
                      "\"intermediate_size\": 128, \"num_hidden_layers\": 1, "
                      "\"num_attention_heads\": 4, \"vocab_size\": 10}";
    ck_assert_msg(load_text("archonly", cfg, &m, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(m.arch, FT_ARCH_QWEN2);
    ck_assert(m.qkv_bias);
}
END_TEST

/* A config.json of a real model, given by path (what --model path/config.json does):
 * the shipped file minus the "ftest" object counts the same. */
START_TEST(test_real_config_by_path) {
    char path[4096], err[256] = "";
    ft_data_path("models/llama3.2-1b.json", path, sizeof path);
    char *text = test_slurp(path, NULL);
    cJSON *root = cJSON_Parse(text);
    free(text);
    ck_assert(root != NULL);
    cJSON_DeleteItemFromObjectCaseSensitive(root, "ftest");
    char *plain = cJSON_Print(root);
    cJSON_Delete(root);
    ck_assert(plain != NULL);
    ft_model m;
    int rc = load_text("config", plain, &m, err, sizeof err);
    free(plain);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_int_eq(m.params_official, 0);
    ck_assert(m.tied_embeddings);
    ck_assert_int_eq(m.head_dim, 64);
    ck_assert_int_eq(total_params(&m), INT64_C(1235814400));
}
END_TEST

/* ---- bad configs ---------------------------------------------------------------- */

START_TEST(test_reject_missing_fields) {
    expect_reject("nohidden",
                  "{\"model_type\": \"llama\", \"intermediate_size\": 128, \"num_hidden_layers\": 2, "
                  "\"num_attention_heads\": 4, \"vocab_size\": 100}",
                  "hidden_size");
    expect_reject("novocab",
                  "{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, "
                  "\"num_hidden_layers\": 2, \"num_attention_heads\": 4}",
                  "vocab_size");
    expect_reject("nolayers",
                  "{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, "
                  "\"num_attention_heads\": 4, \"vocab_size\": 100}",
                  "num_hidden_layers");
    expect_reject("notype",
                  "{\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2, "
                  "\"num_attention_heads\": 4, \"vocab_size\": 100}",
                  "model_type");
}
END_TEST

START_TEST(test_reject_bad_numbers) {
    expect_reject("string", LLAMA_WITH("\"hidden_size\": \"64\""), "hidden_size");
    expect_reject("negative", LLAMA_WITH("\"hidden_size\": -64"), "hidden_size");
    expect_reject("zero", LLAMA_WITH("\"hidden_size\": 0"), "hidden_size");
    expect_reject("fraction", LLAMA_WITH("\"hidden_size\": 64.5"), "hidden_size");
    expect_reject("huge", LLAMA_WITH("\"hidden_size\": 1e15"), "hidden_size");
    expect_reject("bool", LLAMA_WITH("\"hidden_size\": true"), "hidden_size");
    expect_reject("array", LLAMA_WITH("\"hidden_size\": [64]"), "hidden_size");
    expect_reject("hugevocab",
                  "{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, "
                  "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 1e12}",
                  "vocab_size");
    expect_reject("hugelayers",
                  "{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, "
                  "\"num_hidden_layers\": 100000000, \"num_attention_heads\": 4, \"vocab_size\": 10}",
                  "num_hidden_layers");
    expect_reject("negkv",
                  "{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, "
                  "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": -2, "
                  "\"vocab_size\": 10}",
                  "num_key_value_heads");
    expect_reject("badeps", LLAMA_WITH("\"hidden_size\": 64, \"rms_norm_eps\": \"small\""), "rms_norm_eps");
    expect_reject("badtie",
                  "{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, "
                  "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 10, "
                  "\"tie_word_embeddings\": \"yes\"}",
                  "tie_word_embeddings");
}
END_TEST

START_TEST(test_reject_inconsistent_heads) {
    /* 32 query heads cannot be grouped over 5 KV heads */
    expect_reject("kvdiv",
                  "{\"model_type\": \"llama\", \"hidden_size\": 4096, \"intermediate_size\": 128, "
                  "\"num_hidden_layers\": 2, \"num_attention_heads\": 32, \"num_key_value_heads\": 5, "
                  "\"vocab_size\": 10}",
                  "num_key_value_heads");
    /* 4096 / 24 is not whole and no head_dim says otherwise */
    expect_reject("hdiv",
                  "{\"model_type\": \"llama\", \"hidden_size\": 4096, \"intermediate_size\": 128, "
                  "\"num_hidden_layers\": 2, \"num_attention_heads\": 24, \"vocab_size\": 10}",
                  "num_attention_heads");
    /* odd head_dim cannot be rotated in pairs */
    expect_reject("oddhd",
                  "{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, "
                  "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"head_dim\": 15, "
                  "\"vocab_size\": 10}",
                  "head_dim");
}
END_TEST

START_TEST(test_reject_unsupported_type) {
    expect_reject("gpt2",
                  "{\"model_type\": \"gpt2\", \"hidden_size\": 64, \"intermediate_size\": 128, "
                  "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 10}",
                  "gpt2");
    expect_reject("typenum",
                  "{\"model_type\": 7, \"hidden_size\": 64, \"intermediate_size\": 128, "
                  "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 10}",
                  "model_type");
}
END_TEST

START_TEST(test_reject_not_a_config) {
    expect_reject("notjson", "this is not JSON", NULL);
    expect_reject("toparray", "[1, 2, 3]", NULL);
    expect_reject("topnum", "42", NULL);
    expect_reject("topnull", "null", NULL);
    expect_reject("ftestobj", LLAMA_WITH("\"hidden_size\": 64, \"ftest\": 3"), "ftest");
    expect_reject("ftestparams", LLAMA_WITH("\"hidden_size\": 64, \"ftest\": {\"params\": -5}"), "params");
}
END_TEST

START_TEST(test_reject_empty_and_truncated_files) {
    ft_model m;
    char err[256];
    /* empty file */
    const char *p = write_tmp("empty", "", 0);
    ck_assert_int_eq(ft_model_load(p, &m, err, sizeof err), -1);
    ck_assert_msg(err[0] && !strchr(err, '\n'), "empty file: bad message \"%s\"", err);
    unlink(p);

    /* a real shipped config cut in half at every 97th byte */
    char path[4096];
    ft_data_path("models/llama3-8b.json", path, sizeof path);
    size_t len;
    char *text = test_slurp(path, &len);
    ck_assert_uint_gt(len, 200);
    for (size_t cut = 1; cut + 2 < len; cut += 97) {
        p = write_tmp("truncated", text, cut);
        err[0] = '\0';
        ck_assert_msg(ft_model_load(p, &m, err, sizeof err) == -1, "accepted a file cut at %zu", cut);
        ck_assert_msg(err[0] && !strchr(err, '\n'), "cut at %zu: bad message \"%s\"", cut, err);
        unlink(p);
    }
    free(text);
}
END_TEST

START_TEST(test_reject_missing_file_and_unknown_name) {
    ft_model m;
    char err[512] = "";
    ck_assert_int_eq(ft_model_load("/nonexistent/dir/config.json", &m, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "/nonexistent/dir/config.json") != NULL, "%s", err);

    err[0] = '\0';
    ck_assert_int_eq(ft_model_load("llama3-8", &m, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "llama3-8b") != NULL, "no suggestion in \"%s\"", err);
    ck_assert_msg(!strchr(err, '\n'), "message is not one line: %s", err);

    err[0] = '\0';
    ck_assert_int_eq(ft_model_load("", &m, err, sizeof err), -1);
    ck_assert(err[0]);
    err[0] = '\0';
    ck_assert_int_eq(ft_model_load("../etc/passwd", &m, err, sizeof err), -1);
    ck_assert(err[0]);
}
END_TEST

Suite *suite_models(void); /* registered by the Makefile */
Suite *suite_models(void) {
    Suite *s = suite_create("models");
    TCase *tc = tcase_create("shipped");
    tcase_add_test(tc, test_required_models_shipped);
    tcase_add_test(tc, test_every_shipped_model_counts_to_published_total);
    tcase_add_test(tc, test_hand_count_qwen25_05b_tied);
    tcase_add_test(tc, test_hand_count_nemo_untied_explicit_head_dim);
    tcase_add_test(tc, test_real_config_by_path);
    suite_add_tcase(s, tc);

    tc = tcase_create("variants");
    tcase_add_test(tc, test_variant_missing_kv_heads_defaults_to_heads);
    tcase_add_test(tc, test_variant_gqa_and_explicit_head_dim);
    tcase_add_test(tc, test_variant_biases);
    tcase_add_test(tc, test_variant_tied_vs_untied);
    tcase_add_test(tc, test_variant_arch_from_architectures);
    suite_add_tcase(s, tc);

    tc = tcase_create("bad");
    tcase_add_test(tc, test_reject_missing_fields);
    tcase_add_test(tc, test_reject_bad_numbers);
    tcase_add_test(tc, test_reject_inconsistent_heads);
    tcase_add_test(tc, test_reject_unsupported_type);
    tcase_add_test(tc, test_reject_not_a_config);
    tcase_add_test(tc, test_reject_empty_and_truncated_files);
    tcase_add_test(tc, test_reject_missing_file_and_unknown_name);
    suite_add_tcase(s, tc);
    return s;
}
