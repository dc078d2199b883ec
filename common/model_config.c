#include "model_config.h"

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json_util.h"
#include "suggest.h"

#ifndef FTEST_SOURCE_ROOT
#define FTEST_SOURCE_ROOT "."
#endif

/* A config.json is a few KiB; anything past this is not one. */
#define CONFIG_MAX_BYTES ((size_t)1 << 20)

const char *ft_arch_name(ft_arch a) {
    switch (a) {
    case FT_ARCH_LLAMA: return "llama";
    case FT_ARCH_MISTRAL: return "mistral";
    case FT_ARCH_QWEN2: return "qwen2";
    case FT_ARCH_GEMMA: return "gemma";
    case FT_ARCH_PHI3: return "phi3";
    case FT_ARCH_MIXTRAL: return "mixtral";
    case FT_ARCH_QWEN2_MOE: return "qwen2_moe";
    case FT_ARCH_GEMMA2: return "gemma2";
    case FT_ARCH_QWEN3: return "qwen3";
    case FT_ARCH_QWEN3_MOE: return "qwen3_moe";
    case FT_ARCH_GEMMA3: return "gemma3_text";
    }
    return "?";
}

bool ft_model_is_llama_family(const ft_model *m) {
    return m->arch == FT_ARCH_LLAMA || m->arch == FT_ARCH_MISTRAL || m->arch == FT_ARCH_QWEN2;
}

/* model_type values and the architectures[0] prefixes that imply them. */
static const struct {
    const char *type, *class_prefix;
    ft_arch arch;
} ARCHS[] = {
    {"llama", "Llama", FT_ARCH_LLAMA},       {"mistral", "Mistral", FT_ARCH_MISTRAL},
    {"qwen2", "Qwen2For", FT_ARCH_QWEN2},    {"gemma", "GemmaFor", FT_ARCH_GEMMA},
    {"phi3", "Phi3", FT_ARCH_PHI3},          {"mixtral", "Mixtral", FT_ARCH_MIXTRAL},
    {"qwen2_moe", "Qwen2Moe", FT_ARCH_QWEN2_MOE}, {"gemma2", "Gemma2For", FT_ARCH_GEMMA2},
    {"qwen3", "Qwen3For", FT_ARCH_QWEN3},    {"qwen3_moe", "Qwen3Moe", FT_ARCH_QWEN3_MOE},
    {"gemma3_text", "Gemma3For", FT_ARCH_GEMMA3},
};
#define N_ARCHS (sizeof ARCHS / sizeof ARCHS[0])

static bool has_models_dir(const char *root) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/models/gpus.json", root);
    return access(p, R_OK) == 0;
}

static bool is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The source tree, not any folder holding a models/: its models, its
 * calibrate/profiles and its estimator sources together. */
static bool is_source_tree(const char *root) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/calibrate/profiles", root);
    if (!has_models_dir(root) || !is_dir(p)) return false;
    snprintf(p, sizeof p, "%s/estimator/estimate.c", root);
    return access(p, R_OK) == 0;
}

/* The data beside the running executable, in the two layouts ftest is built
 * and installed in, and no other: BUILD/ftest under the source tree (BUILD
 * one or two folders deep), or PREFIX/bin/ftest beside PREFIX/share/ftest.
 * A copy of the binary next to some folder that happens to hold models/ does
 * not count (issue 20, item 4). */
static bool beside_executable(char *out, size_t n) {
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) return false;
    exe[len] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) return false;
    *slash = '\0'; /* the executable's folder */
    const char *leaf = strrchr(exe, '/');
    if (leaf && !strcmp(leaf, "/bin")) {
        char shared[PATH_MAX];
        snprintf(shared, sizeof shared, "%.*s/share/ftest", (int)(leaf - exe), exe);
        if (has_models_dir(shared)) return ft_strlcpy(out, shared, n);
    }
    for (int up = 0; up < 2; up++) {
        slash = strrchr(exe, '/');
        if (!slash || slash == exe) return false;
        *slash = '\0';
        if (is_source_tree(exe)) return ft_strlcpy(out, exe, n);
    }
    return false;
}

const char *ft_data_dir(void) {
    static char root[PATH_MAX];
    if (root[0]) return root;
    const char *env = getenv("FTEST_DATA_DIR");
    if (env && *env) {
        ft_strlcpy(root, env, sizeof root);
        return root;
    }
    if (beside_executable(root, sizeof root)) return root;
    ft_strlcpy(root, has_models_dir(".") ? "." : FTEST_SOURCE_ROOT, sizeof root);
    return root;
}

const char *ft_data_path(const char *relative, char *buf, size_t buflen) {
    snprintf(buf, buflen, "%s/%s", ft_data_dir(), relative);
    return buf;
}

/* Architecture from "model_type", falling back to "architectures"[0]. */
static int parse_arch(const cJSON *root, ft_arch *arch, char *err, size_t errlen) {
    char type[64] = "";
    if (ft_json_string(root, "model_type", type, sizeof type, err, errlen) < 0) return -1;
    if (!type[0]) {
        const cJSON *archs = cJSON_GetObjectItemCaseSensitive(root, "architectures");
        const cJSON *first = cJSON_IsArray(archs) ? cJSON_GetArrayItem(archs, 0) : NULL;
        if (cJSON_IsString(first) && first->valuestring)
            for (size_t i = 0; i < N_ARCHS; i++)
                if (!strncmp(first->valuestring, ARCHS[i].class_prefix, strlen(ARCHS[i].class_prefix)))
                    ft_strlcpy(type, ARCHS[i].type, sizeof type);
    }
    for (size_t i = 0; i < N_ARCHS; i++)
        if (!strcmp(type, ARCHS[i].type)) {
            *arch = ARCHS[i].arch;
            return 0;
        }
    if (!type[0])
        return ft_errorf(err, errlen, "config has no \"model_type\" (llama, mistral, qwen2, qwen3, "
                                      "qwen3_moe, gemma, gemma2, gemma3_text, phi3, mixtral or qwen2_moe)");
    if (!strcmp(type, "gemma3"))
        return ft_errorf(err, errlen, "model_type \"gemma3\" is Gemma 3's vision-language model; its "
                                      "text model (gemma3_text, Gemma3ForCausalLM) is supported");
    return ft_errorf(err, errlen,
                     "model_type \"%.40s\" is not supported (llama, mistral, qwen2, qwen3, qwen3_moe, "
                     "gemma, gemma2, gemma3_text, phi3, mixtral, qwen2_moe)",
                     type);
}

static int required_int(const cJSON *root, const char *key, int64_t min, int64_t max,
                        int64_t *out, char *err, size_t errlen) {
    int r = ft_json_int64(root, key, min, max, out, err, errlen);
    if (r == 0) return ft_errorf(err, errlen, "config lacks \"%s\"", key);
    return r < 0 ? -1 : 0;
}

/* An explicit null turns a soft-cap (or the window) off; a number sets it. */
static int nullable_double(const cJSON *root, const char *key, double *v, char *err, size_t errlen) {
    if (cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(root, key))) *v = 0;
    return ft_json_double(root, key, 0.0, 1e6, v, err, errlen) < 0 ? -1 : 0;
}

/* The Gemma family. Gemma: GemmaMLP uses gelu_pytorch_tanh whatever
 * hidden_act says (4.40), embedding scaled by sqrt(h), (1 + w) norms.
 * Gemma-2 (modeling_gemma2.py, transformers 4.42): plus post_attention,
 * pre_feedforward and post_feedforward norms; Gemma2Config defaults:
 * soft-caps 50 (scores) and 30 (logits), sliding window 4096 on the even
 * layers (is_sliding = not layer_idx % 2). Gemma 3 text (modeling_gemma3.py,
 * transformers 4.50, Gemma3TextConfig): Gemma-2's block with q_norm and
 * k_norm over head_dim, no soft-caps unless given, a window of 4096 on all
 * layers but every sliding_window_pattern-th (6). */
static int parse_gemma(const cJSON *root, ft_model *m, char *err, size_t errlen) {
    m->activation = FT_ACT_GELU_TANH;
    m->embed_scale = m->norm_plus_one = true;
    if (m->arch == FT_ARCH_GEMMA) return 0;
    m->sandwich_norms = true;
    const bool g3 = m->arch == FT_ARCH_GEMMA3;
    m->qk_norm = g3;
    m->attn_logit_softcap = g3 ? 0 : 50.0;
    m->final_logit_softcap = g3 ? 0 : 30.0;
    m->sliding_window = 4096;
    int64_t pattern = g3 ? 6 : 2;
    if (nullable_double(root, "attn_logit_softcapping", &m->attn_logit_softcap, err, errlen) < 0 ||
        nullable_double(root, "final_logit_softcapping", &m->final_logit_softcap, err, errlen) < 0)
        return -1;
    if (cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(root, "sliding_window"))) m->sliding_window = 0;
    if (ft_json_int64(root, "sliding_window", 1, FT_MAX_POSITION, &m->sliding_window, err, errlen) < 0 ||
        (g3 && ft_json_int64(root, "sliding_window_pattern", 1, FT_MAX_LAYERS, &pattern, err, errlen) < 0))
        return -1;
    /* Gemma-2: layers 1, 3, 5, ... are global; Gemma 3: (i + 1) % pattern == 0. */
    m->global_layers = m->num_layers / pattern;
    return 0;
}

/* Mixture of experts. MixtralConfig: num_local_experts (8) of
 * intermediate_size, top-2, top-k weights renormalized. Qwen2MoeConfig: 60
 * experts, top-4, moe_intermediate_size 1408, shared expert 5632,
 * norm_topk_prob false, every layer sparse. Qwen3MoeConfig (transformers
 * 4.51): 128 experts, top-8, moe_intermediate_size 768, no shared expert,
 * norm_topk_prob false unless given (true in the released configs). */
static int parse_moe(const cJSON *root, ft_model *m, char *err, size_t errlen) {
    int64_t step = 1;
    if (m->arch == FT_ARCH_MIXTRAL) {
        m->num_experts = 8;
        m->experts_per_token = 2;
        if (ft_json_int64(root, "num_local_experts", 1, 4096, &m->num_experts, err, errlen) < 0) return -1;
        m->moe_intermediate_size = m->intermediate_size;
        m->norm_topk_prob = true;
    } else {
        const bool q3 = m->arch == FT_ARCH_QWEN3_MOE;
        m->num_experts = q3 ? 128 : 60;
        m->experts_per_token = q3 ? 8 : 4;
        m->moe_intermediate_size = q3 ? 768 : 1408;
        m->shared_expert_intermediate_size = q3 ? 0 : 5632;
        if (ft_json_int64(root, "num_experts", 1, 4096, &m->num_experts, err, errlen) < 0 ||
            ft_json_int64(root, "moe_intermediate_size", 1, 8 * FT_MAX_HIDDEN, &m->moe_intermediate_size, err,
                          errlen) < 0 ||
            (!q3 && ft_json_int64(root, "shared_expert_intermediate_size", 0, 8 * FT_MAX_HIDDEN,
                                  &m->shared_expert_intermediate_size, err, errlen) < 0) ||
            ft_json_int64(root, "decoder_sparse_step", 1, FT_MAX_LAYERS, &step, err, errlen) < 0 ||
            ft_json_bool(root, "norm_topk_prob", &m->norm_topk_prob, err, errlen) < 0)
            return -1;
    }
    if (ft_json_int64(root, "num_experts_per_tok", 1, 4096, &m->experts_per_token, err, errlen) < 0 ||
        ft_json_bool(root, "output_router_logits", &m->output_router_logits, err, errlen) < 0)
        return -1;
    const cJSON *dense = cJSON_GetObjectItemCaseSensitive(root, "mlp_only_layers");
    if (step != 1 || (cJSON_IsArray(dense) && cJSON_GetArraySize(dense) > 0))
        return ft_errorf(err, errlen, "%s with dense layers (decoder_sparse_step, mlp_only_layers) is not "
                                      "supported", ft_arch_name(m->arch));
    if (m->experts_per_token > m->num_experts)
        return ft_errorf(err, errlen, "num_experts_per_tok (%lld) is above the number of experts (%lld)",
                         (long long)m->experts_per_token, (long long)m->num_experts);
    return 0;
}

/* What the architectures beyond Llama add (transformers 4.40 modeling files;
 * Qwen3 and Qwen3-MoE: 4.51, their q_norm and k_norm). */
static int parse_variant(const cJSON *root, ft_model *m, char *err, size_t errlen) {
    m->activation = FT_ACT_SILU;
    switch (m->arch) {
    case FT_ARCH_GEMMA:
    case FT_ARCH_GEMMA2:
    case FT_ARCH_GEMMA3: return parse_gemma(root, m, err, errlen);
    case FT_ARCH_PHI3:
        m->fused_qkv = m->fused_gate_up = true;
        return 0;
    case FT_ARCH_QWEN3:
        m->qk_norm = true;
        return 0;
    case FT_ARCH_QWEN3_MOE:
        m->qk_norm = true;
        return parse_moe(root, m, err, errlen);
    case FT_ARCH_MIXTRAL:
    case FT_ARCH_QWEN2_MOE: return parse_moe(root, m, err, errlen);
    default: return 0;
    }
}

/* The sizes every config must give, and the attention heads' grouping. */
static int parse_sizes(const cJSON *root, ft_model *m, char *err, size_t errlen) {
    if (required_int(root, "vocab_size", 1, FT_MAX_VOCAB, &m->vocab_size, err, errlen) ||
        required_int(root, "hidden_size", 1, FT_MAX_HIDDEN, &m->hidden_size, err, errlen) ||
        required_int(root, "intermediate_size", 1, 8 * FT_MAX_HIDDEN, &m->intermediate_size, err, errlen) ||
        required_int(root, "num_hidden_layers", 1, FT_MAX_LAYERS, &m->num_layers, err, errlen) ||
        required_int(root, "num_attention_heads", 1, FT_MAX_HEADS, &m->num_heads, err, errlen))
        return -1;

    m->num_kv_heads = m->num_heads;
    if (ft_json_int64(root, "num_key_value_heads", 1, FT_MAX_HEADS, &m->num_kv_heads, err, errlen) < 0)
        return -1;
    if (m->num_heads % m->num_kv_heads != 0)
        return ft_errorf(err, errlen,
                         "num_attention_heads (%lld) is not a multiple of num_key_value_heads (%lld)",
                         (long long)m->num_heads, (long long)m->num_kv_heads);
    return 0;
}

/* head_dim as given, or hidden_size / num_attention_heads; even for rotary embeddings. */
static int parse_head_dim(const cJSON *root, ft_model *m, char *err, size_t errlen) {
    int r = ft_json_int64(root, "head_dim", 1, FT_MAX_HIDDEN, &m->head_dim, err, errlen);
    if (r < 0) return -1;
    if (r == 0) {
        if (m->hidden_size % m->num_heads != 0)
            return ft_errorf(err, errlen,
                             "hidden_size (%lld) is not divisible by num_attention_heads (%lld) "
                             "and no head_dim is given",
                             (long long)m->hidden_size, (long long)m->num_heads);
        m->head_dim = m->hidden_size / m->num_heads;
    }
    if (m->head_dim % 2 != 0)
        return ft_errorf(err, errlen, "head_dim (%lld) must be even for rotary embeddings",
                         (long long)m->head_dim);
    if (m->num_heads * m->head_dim > 8 * FT_MAX_HIDDEN)
        return ft_errorf(err, errlen, "num_attention_heads * head_dim is too large");
    return 0;
}

/* max_position_embeddings, tie_word_embeddings, rms_norm_eps, rope_theta. */
static int parse_embedding_and_norm(const cJSON *root, ft_model *m, char *err, size_t errlen) {
    m->max_position = 0;
    if (ft_json_int64(root, "max_position_embeddings", 1, FT_MAX_POSITION, &m->max_position, err,
                      errlen) < 0)
        return -1;

    /* Defaults are those of the transformers config classes (LlamaConfig,
     * MistralConfig, Qwen2Config, Phi3Config, MixtralConfig, Qwen2MoeConfig):
     * untied head, eps 1e-6 (Llama's 1e-6 too), rope_theta 10000; GemmaConfig
     * ties the head by default (transformers 4.40). */
    m->tied_embeddings = m->arch == FT_ARCH_GEMMA || m->arch == FT_ARCH_GEMMA2 || m->arch == FT_ARCH_GEMMA3;
    if (ft_json_bool(root, "tie_word_embeddings", &m->tied_embeddings, err, errlen) < 0) return -1;
    m->rms_norm_eps = 1e-6;
    if (ft_json_double(root, "rms_norm_eps", 0.0, 1.0, &m->rms_norm_eps, err, errlen) < 0) return -1;
    m->rope_theta = 10000.0;
    if (ft_json_double(root, "rope_theta", 1.0, 1e12, &m->rope_theta, err, errlen) < 0) return -1;
    return 0;
}

/* Which Linear layers carry a bias: fixed by each architecture's modeling file,
 * or attention_bias / mlp_bias where it reads them. */
static int parse_biases(const cJSON *root, ft_model *m, char *err, size_t errlen) {
    bool attention_bias = false, mlp_bias = false;
    if (ft_json_bool(root, "attention_bias", &attention_bias, err, errlen) < 0) return -1;
    if (ft_json_bool(root, "mlp_bias", &mlp_bias, err, errlen) < 0) return -1;
    switch (m->arch) {
    case FT_ARCH_LLAMA: /* modeling_llama.py: bias=config.attention_bias on q,k,v,o */
        m->qkv_bias = m->o_bias = attention_bias;
        m->mlp_bias = mlp_bias;
        break;
    case FT_ARCH_MISTRAL: /* modeling_mistral.py: every Linear has bias=False */
        m->qkv_bias = m->o_bias = m->mlp_bias = false;
        break;
    case FT_ARCH_QWEN2: /* modeling_qwen2.py: q,k,v bias=True, o_proj and MLP bias=False */
    case FT_ARCH_QWEN2_MOE: /* modeling_qwen2_moe.py: the same attention */
        m->qkv_bias = true;
        m->o_bias = m->mlp_bias = false;
        break;
    case FT_ARCH_GEMMA: /* modeling_gemma.py: q,k,v,o bias=config.attention_bias, MLP none */
    case FT_ARCH_GEMMA2:
    case FT_ARCH_GEMMA3:
    case FT_ARCH_QWEN3:     /* modeling_qwen3.py: q,k,v,o bias=config.attention_bias (false) */
    case FT_ARCH_QWEN3_MOE:
        m->qkv_bias = m->o_bias = attention_bias;
        m->mlp_bias = false;
        break;
    case FT_ARCH_PHI3:    /* modeling_phi3.py: every Linear bias=False */
    case FT_ARCH_MIXTRAL: /* modeling_mixtral.py: every Linear bias=False */
        m->qkv_bias = m->o_bias = m->mlp_bias = false;
        break;
    }
    return 0;
}

/* The "ftest" object of the shipped configs: official parameter count, HF repo. */
static int parse_ftest_meta(const cJSON *root, ft_model *m, char *err, size_t errlen) {
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "ftest");
    if (!meta) return 0;
    if (!cJSON_IsObject(meta)) return ft_errorf(err, errlen, "\"ftest\" must be an object");
    if (ft_json_int64(meta, "params", 1, INT64_C(1) << 50, &m->params_official, err, errlen) < 0)
        return -1;
    if (ft_json_string(meta, "hf_repo", m->hf_repo, sizeof m->hf_repo, err, errlen) < 0)
        return -1;
    char name[FT_NAME_MAX];
    if (ft_json_string(meta, "name", name, sizeof name, err, errlen) < 0) return -1;
    return 0;
}

static int parse_fields(const cJSON *root, ft_model *m, char *err, size_t errlen) {
    if (!cJSON_IsObject(root)) return ft_errorf(err, errlen, "config is not a JSON object");
    if (parse_arch(root, &m->arch, err, errlen) < 0 || parse_sizes(root, m, err, errlen) < 0 ||
        parse_head_dim(root, m, err, errlen) < 0 || parse_embedding_and_norm(root, m, err, errlen) < 0 ||
        parse_biases(root, m, err, errlen) < 0 || parse_variant(root, m, err, errlen) < 0 ||
        parse_ftest_meta(root, m, err, errlen) < 0)
        return -1;
    return 0;
}

int ft_model_parse(const char *text, size_t len, const char *name, ft_model *out, char *err,
                   size_t errlen) {
    char inner[200];
    cJSON *root = ft_json_parse(text, len, name, err, errlen);
    if (!root) return -1;
    ft_model m;
    memset(&m, 0, sizeof m);
    ft_strlcpy(m.name, name, sizeof m.name);
    int rc = parse_fields(root, &m, inner, sizeof inner);
    cJSON_Delete(root);
    if (rc < 0) return ft_errorf(err, errlen, "%s: %s", name, inner);
    *out = m;
    return 0;
}

static bool looks_like_path(const char *s) {
    size_t n = strlen(s);
    return strchr(s, '/') || (n > 5 && !strcmp(s + n - 5, ".json"));
}

/* "path/to/Meta-Llama-3-8B/config.json" -> "Meta-Llama-3-8B"; "x/foo.json" -> "foo". */
static void name_from_path(const char *path, char *out, size_t outlen) {
    char tmp[PATH_MAX];
    ft_strlcpy(tmp, path, sizeof tmp);
    char *base = strrchr(tmp, '/');
    if (base && !strcmp(base + 1, "config.json")) {
        *base = '\0';
        base = strrchr(tmp, '/');
    }
    char *stem = base ? base + 1 : tmp;
    size_t n = strlen(stem);
    if (n > 5 && !strcmp(stem + n - 5, ".json")) stem[n - 5] = '\0';
    ft_strlcpy(out, stem[0] ? stem : "config", outlen);
}

static bool is_model_file(const char *fname) {
    size_t n = strlen(fname);
    if (n <= 5 || strcmp(fname + n - 5, ".json")) return false;
    return strcmp(fname, "gpus.json") && strcmp(fname, "instances.json");
}

static int cmp_names(const void *a, const void *b) { return strcmp(a, b); }

int ft_model_names(char (*names)[FT_NAME_MAX], int max, char *err, size_t errlen) {
    char dir[PATH_MAX];
    ft_data_path("models", dir, sizeof dir);
    DIR *d = opendir(dir);
    if (!d) return ft_errorf(err, errlen, "cannot open the model folder %s", dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        if (!is_model_file(e->d_name)) continue;
        size_t len = strlen(e->d_name) - 5;
        if (len >= FT_NAME_MAX) continue;
        memcpy(names[n], e->d_name, len);
        names[n][len] = '\0';
        n++;
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], cmp_names);
    return n;
}

void ft_suggest(const char *query, char (*names)[FT_NAME_MAX], int n, char *out, size_t outlen) {
    const char *ptrs[256];
    size_t m = 0;
    for (int i = 0; i < n && m < sizeof ptrs / sizeof ptrs[0]; i++) ptrs[m++] = names[i];
    ft_suggest_close(query, ptrs, m, out, outlen);
}

int ft_model_load(const char *name_or_path, ft_model *out, char *err, size_t errlen) {
    char path[PATH_MAX], name[FT_NAME_MAX];
    if (!name_or_path || !*name_or_path) return ft_errorf(err, errlen, "empty model name");
    if (looks_like_path(name_or_path)) {
        ft_strlcpy(path, name_or_path, sizeof path);
        name_from_path(name_or_path, name, sizeof name);
    } else {
        if (strlen(name_or_path) >= FT_NAME_MAX)
            return ft_errorf(err, errlen, "model name is too long");
        for (const char *c = name_or_path; *c; c++)
            if (!(*c == '-' || *c == '.' || *c == '_' || (*c >= '0' && *c <= '9') ||
                  ((*c | 0x20) >= 'a' && (*c | 0x20) <= 'z')))
                return ft_errorf(err, errlen, "model name \"%.64s\" has odd characters", name_or_path);
        char rel[PATH_MAX];
        snprintf(rel, sizeof rel, "models/%s.json", name_or_path);
        ft_data_path(rel, path, sizeof path);
        ft_strlcpy(name, name_or_path, sizeof name);
        char names[256][FT_NAME_MAX], hint[256];
        if (access(path, R_OK) != 0 || !is_model_file(strrchr(path, '/') + 1)) {
            /* Names are matched without regard to case ("Llama3-8B"), when
             * exactly one shipped name matches. */
            int n = ft_model_names(names, 256, NULL, 0), match = -1, matches = 0;
            for (int i = 0; i < n; i++)
                if (!strcasecmp(names[i], name_or_path)) match = i, matches++;
            if (matches == 1) {
                snprintf(rel, sizeof rel, "models/%s.json", names[match]);
                ft_data_path(rel, path, sizeof path);
                ft_strlcpy(name, names[match], sizeof name);
            }
        }
        if (access(path, R_OK) != 0 || !is_model_file(strrchr(path, '/') + 1)) {
            int n = ft_model_names(names, 256, NULL, 0);
            if (n <= 0)
                return ft_errorf(err, errlen, "unknown model \"%s\" (no models found under %s/models)",
                                 name_or_path, ft_data_dir());
            ft_suggest(name_or_path, names, n, hint, sizeof hint);
            return ft_errorf(err, errlen,
                             "unknown model \"%s\"%s%s%s (see `ftest models`, or pass a config.json path)",
                             name_or_path, hint[0] ? "; did you mean " : "", hint, hint[0] ? "?" : "");
        }
    }
    size_t len = 0;
    char *text = ft_read_file(path, CONFIG_MAX_BYTES, &len, err, errlen);
    if (!text) return -1;
    int rc = ft_model_parse(text, len, name, out, err, errlen);
    free(text);
    return rc;
}
