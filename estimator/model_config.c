#include "model_config.h"

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    }
    return "?";
}

static bool has_models_dir(const char *root) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/models/gpus.json", root);
    return access(p, R_OK) == 0;
}

const char *ft_data_dir(void) {
    static char root[PATH_MAX];
    if (root[0]) return root;
    const char *env = getenv("FTEST_DATA_DIR");
    if (env && *env) {
        ft_strlcpy(root, env, sizeof root);
        return root;
    }
    /* The binaries live in a build folder under the root; walk up from the executable. */
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        for (int up = 0; up < 3; up++) {
            char *slash = strrchr(exe, '/');
            if (!slash) break;
            *slash = '\0';
            if (exe[0] && has_models_dir(exe)) {
                ft_strlcpy(root, exe, sizeof root);
                return root;
            }
            /* Installed (make install): PREFIX/bin/ftest reads PREFIX/share/ftest. */
            char shared[PATH_MAX];
            snprintf(shared, sizeof shared, "%s/share/ftest", exe);
            if (has_models_dir(shared)) {
                ft_strlcpy(root, shared, sizeof root);
                return root;
            }
        }
    }
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
        if (cJSON_IsString(first) && first->valuestring) {
            if (strncmp(first->valuestring, "Llama", 5) == 0) ft_strlcpy(type, "llama", sizeof type);
            else if (strncmp(first->valuestring, "Mistral", 7) == 0) ft_strlcpy(type, "mistral", sizeof type);
            else if (strncmp(first->valuestring, "Qwen2", 5) == 0) ft_strlcpy(type, "qwen2", sizeof type);
        }
    }
    if (!strcmp(type, "llama")) *arch = FT_ARCH_LLAMA;
    else if (!strcmp(type, "mistral")) *arch = FT_ARCH_MISTRAL;
    else if (!strcmp(type, "qwen2")) *arch = FT_ARCH_QWEN2;
    else if (!type[0])
        return ft_errorf(err, errlen, "config has no \"model_type\" (llama, mistral or qwen2)");
    else
        return ft_errorf(err, errlen,
                         "model_type \"%.40s\" is not supported (llama, mistral, qwen2)", type);
    return 0;
}

static int required_int(const cJSON *root, const char *key, int64_t min, int64_t max,
                        int64_t *out, char *err, size_t errlen) {
    int r = ft_json_int64(root, key, min, max, out, err, errlen);
    if (r == 0) return ft_errorf(err, errlen, "config lacks \"%s\"", key);
    return r < 0 ? -1 : 0;
}

static int parse_fields(const cJSON *root, ft_model *m, char *err, size_t errlen) {
    if (!cJSON_IsObject(root)) return ft_errorf(err, errlen, "config is not a JSON object");
    if (parse_arch(root, &m->arch, err, errlen) < 0) return -1;
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

    m->max_position = 0;
    if (ft_json_int64(root, "max_position_embeddings", 1, FT_MAX_POSITION, &m->max_position, err,
                      errlen) < 0)
        return -1;

    /* Defaults are those of the transformers config classes for these three
     * architectures (LlamaConfig, MistralConfig, Qwen2Config): untied head,
     * eps 1e-6 (Llama's 1e-6 too), rope_theta 10000. */
    m->tied_embeddings = false;
    if (ft_json_bool(root, "tie_word_embeddings", &m->tied_embeddings, err, errlen) < 0) return -1;
    m->rms_norm_eps = 1e-6;
    if (ft_json_double(root, "rms_norm_eps", 0.0, 1.0, &m->rms_norm_eps, err, errlen) < 0) return -1;
    m->rope_theta = 10000.0;
    if (ft_json_double(root, "rope_theta", 1.0, 1e12, &m->rope_theta, err, errlen) < 0) return -1;

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
        m->qkv_bias = true;
        m->o_bias = m->mlp_bias = false;
        break;
    }

    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "ftest");
    if (meta) {
        if (!cJSON_IsObject(meta)) return ft_errorf(err, errlen, "\"ftest\" must be an object");
        if (ft_json_int64(meta, "params", 1, INT64_C(1) << 50, &m->params_official, err, errlen) < 0)
            return -1;
        if (ft_json_string(meta, "hf_repo", m->hf_repo, sizeof m->hf_repo, err, errlen) < 0)
            return -1;
        char name[FT_NAME_MAX];
        if (ft_json_string(meta, "name", name, sizeof name, err, errlen) < 0) return -1;
    }
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
        if (access(path, R_OK) != 0 || !is_model_file(strrchr(path, '/') + 1)) {
            char names[256][FT_NAME_MAX], hint[256];
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
