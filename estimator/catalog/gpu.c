/* The GPU catalog reader: models/gpus.json into est_gpu records.
 *
 * Strict on purpose: every figure feeds a capacity check or a time estimate,
 * so a missing, non-numeric, non-finite, zero or absurd value is an error that
 * names the GPU and the field, never a silent default. Each figure must also
 * carry a source string (sources.memory, .tflops, .hbm, .nvlink, .pcie); the
 * figures themselves and where they come from are documented in the catalog
 * file and in docs/catalogs.md. */
#include "gpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "suggest.h"

#include "json_util.h"
#include "model_config.h"

/* A catalog is a few tens of KiB; anything past this is not one. */
#define GPU_CATALOG_MAX_BYTES ((size_t)4 << 20)
/* Largest plausible device memory (1 PiB) and peak rate (1e6 TFLOPS, 1e6 GB/s):
 * beyond these a value is a typo (or bytes given as MiB), not a GPU. */
#define GPU_MAX_MEMORY_BYTES (INT64_C(1) << 50)
#define GPU_MAX_RATE 1e6

static const char *const source_keys[] = {"memory", "tflops", "hbm", "nvlink", "pcie", "sms",
                                          "matmul_ceiling"};
static const char *const arch_names[] = {"ampere", "ada", "hopper", "blackwell"};


/* A required positive (or, with allow_zero, non-negative) finite rate. */
static int read_rate(const cJSON *obj, const char *key, bool allow_zero, double *out, char *err,
                     size_t errlen) {
    int r = ft_json_double(obj, key, 0.0, GPU_MAX_RATE, out, err, errlen);
    if (r < 0) return -1;
    if (r == 0) return ft_errorf(err, errlen, "lacks \"%s\"", key);
    if (!allow_zero && *out <= 0.0) return ft_errorf(err, errlen, "\"%s\" must be positive", key);
    return 0;
}

static int read_name(const cJSON *obj, const char *key, char *out, size_t outlen, char *err,
                     size_t errlen) {
    int r = ft_json_string(obj, key, out, outlen, err, errlen);
    if (r <= 0) {
        out[0] = '\0'; /* a half-read name must not label the error message */
        return r < 0 ? -1 : ft_errorf(err, errlen, "lacks \"%s\"", key);
    }
    if (!out[0]) return ft_errorf(err, errlen, "\"%s\" is empty", key);
    for (const char *c = out; *c; c++)
        if (*c <= ' ' || *c == '"' || *c == '\\' || (unsigned char)*c >= 0x7f) {
            out[0] = '\0';
            return ft_errorf(err, errlen, "\"%s\" has a space or odd character", key);
        }
    return 0;
}

static int parse_aliases(const cJSON *obj, est_gpu *g, char *err, size_t errlen) {
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(obj, "aliases");
    g->n_aliases = 0;
    if (!arr || cJSON_IsNull(arr)) return 0; /* aliases are optional */
    if (!cJSON_IsArray(arr)) return ft_errorf(err, errlen, "\"aliases\" must be an array of strings");
    int n = cJSON_GetArraySize(arr);
    if (n > EST_GPU_ALIASES_MAX)
        return ft_errorf(err, errlen, "\"aliases\" has %d entries (at most %d)", n, EST_GPU_ALIASES_MAX);
    for (int i = 0; i < n; i++) {
        const cJSON *a = cJSON_GetArrayItem(arr, i);
        if (!cJSON_IsString(a) || !a->valuestring || !a->valuestring[0])
            return ft_errorf(err, errlen, "\"aliases\"[%d] must be a non-empty string", i);
        if (!ft_strlcpy(g->aliases[i], a->valuestring, sizeof g->aliases[i]))
            return ft_errorf(err, errlen, "\"aliases\"[%d] is longer than %d characters", i,
                             EST_GPU_NAME_MAX - 1);
        for (const char *c = g->aliases[i]; *c; c++)
            if (*c <= ' ' || (unsigned char)*c >= 0x7f)
                return ft_errorf(err, errlen, "\"aliases\"[%d] has a space or odd character", i);
    }
    g->n_aliases = n;
    return 0;
}

static int parse_sources(const cJSON *obj, char *err, size_t errlen) {
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(obj, "sources");
    if (!src) return ft_errorf(err, errlen, "lacks \"sources\" (where each figure comes from)");
    if (!cJSON_IsObject(src)) return ft_errorf(err, errlen, "\"sources\" must be an object");
    for (size_t i = 0; i < sizeof source_keys / sizeof source_keys[0]; i++) {
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(src, source_keys[i]);
        if (!cJSON_IsString(s) || !s->valuestring || !s->valuestring[0])
            return ft_errorf(err, errlen, "\"sources.%s\" must be a non-empty string", source_keys[i]);
    }
    return 0;
}

/* The architecture (one of arch_names), the SM count and the matmul ceiling,
 * which may not exceed the data sheet's dense bf16 peak. */
static int parse_compute(const cJSON *obj, est_gpu *g, char *err, size_t errlen) {
    int r = ft_json_string(obj, "arch", g->arch, sizeof g->arch, err, errlen);
    if (r < 0) return -1;
    if (r == 0) return ft_errorf(err, errlen, "lacks \"arch\"");
    bool known = false;
    for (size_t i = 0; i < sizeof arch_names / sizeof arch_names[0]; i++)
        known = known || !strcmp(g->arch, arch_names[i]);
    if (!known)
        return ft_errorf(err, errlen, "\"arch\" \"%s\" is not ampere, ada, hopper or blackwell", g->arch);
    int64_t sms = 0;
    r = ft_json_int64(obj, "sms", 1, 4096, &sms, err, errlen);
    if (r < 0) return -1;
    if (r == 0) return ft_errorf(err, errlen, "lacks \"sms\"");
    g->sms = (int)sms;
    if (read_rate(obj, "matmul_ceiling_tflops", false, &g->matmul_ceiling_tflops, err, errlen) < 0)
        return -1;
    if (g->matmul_ceiling_tflops > g->bf16_tflops)
        return ft_errorf(err, errlen, "\"matmul_ceiling_tflops\" %.1f is above the dense bf16 peak %.1f",
                         g->matmul_ceiling_tflops, g->bf16_tflops);
    /* Optional: the shape a measured ceiling was reached at, [M, N, K]. */
    const cJSON *mnk = cJSON_GetObjectItemCaseSensitive(obj, "matmul_ceiling_mnk");
    if (!mnk || cJSON_IsNull(mnk)) return 0;
    if (!cJSON_IsArray(mnk) || cJSON_GetArraySize(mnk) != 3)
        return ft_errorf(err, errlen, "\"matmul_ceiling_mnk\" must be [M, N, K]");
    for (int i = 0; i < 3; i++) {
        const cJSON *v = cJSON_GetArrayItem(mnk, i);
        if (!cJSON_IsNumber(v) || !(v->valuedouble >= 1) || !(v->valuedouble <= 1e7) ||
            v->valuedouble != floor(v->valuedouble))
            return ft_errorf(err, errlen, "\"matmul_ceiling_mnk\"[%d] must be a whole number in 1..1e7", i);
        g->matmul_ceiling_mnk[i] = v->valuedouble;
    }
    return 0;
}

/* Optional FP8 figures (absent: no FP8 tensor cores): the data-sheet peak,
 * a measured ceiling no higher than it, and where each comes from. */
static int parse_fp8(const cJSON *obj, est_gpu *g, char *err, size_t errlen) {
    if (!cJSON_GetObjectItemCaseSensitive(obj, "fp8_tflops")) {
        if (cJSON_GetObjectItemCaseSensitive(obj, "fp8_matmul_ceiling_tflops"))
            return ft_errorf(err, errlen, "\"fp8_matmul_ceiling_tflops\" without \"fp8_tflops\"");
        return 0;
    }
    if (read_rate(obj, "fp8_tflops", true, &g->fp8_tflops, err, errlen) < 0) return -1;
    if (cJSON_GetObjectItemCaseSensitive(obj, "fp8_matmul_ceiling_tflops") &&
        read_rate(obj, "fp8_matmul_ceiling_tflops", false, &g->fp8_matmul_ceiling_tflops, err, errlen) < 0)
        return -1;
    if (g->fp8_matmul_ceiling_tflops > g->fp8_tflops)
        return ft_errorf(err, errlen, "\"fp8_matmul_ceiling_tflops\" %.1f is above the dense fp8 peak %.1f",
                         g->fp8_matmul_ceiling_tflops, g->fp8_tflops);
    if (!(g->fp8_tflops > 0)) return 0;
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(obj, "sources");
    const char *keys[2] = {"fp8", "fp8_matmul_ceiling"};
    for (int i = 0; i < 2; i++) {
        const cJSON *s = cJSON_IsObject(src) ? cJSON_GetObjectItemCaseSensitive(src, keys[i]) : NULL;
        if (!cJSON_IsString(s) || !s->valuestring || !s->valuestring[0])
            return ft_errorf(err, errlen, "\"sources.%s\" must be a non-empty string", keys[i]);
    }
    return 0;
}

/* One catalog entry; the caller prefixes the GPU's name to any message. */
static int parse_gpu(const cJSON *obj, est_gpu *g, char *err, size_t errlen) {
    memset(g, 0, sizeof *g);
    if (!cJSON_IsObject(obj)) return ft_errorf(err, errlen, "is not a JSON object");
    if (read_name(obj, "name", g->name, sizeof g->name, err, errlen) < 0) return -1;
    int r = ft_json_string(obj, "display", g->display, sizeof g->display, err, errlen);
    if (r < 0) return -1;
    if (r == 0 || !g->display[0]) return ft_errorf(err, errlen, "lacks \"display\"");
    if (parse_aliases(obj, g, err, errlen) < 0) return -1;

    r = ft_json_int64(obj, "memory_bytes", 1, GPU_MAX_MEMORY_BYTES, &g->memory_bytes, err, errlen);
    if (r < 0) return -1;
    if (r == 0) return ft_errorf(err, errlen, "lacks \"memory_bytes\"");

    if (read_rate(obj, "fp32_tflops", false, &g->fp32_tflops, err, errlen) ||
        read_rate(obj, "tf32_tflops", false, &g->tf32_tflops, err, errlen) ||
        read_rate(obj, "bf16_tflops", false, &g->bf16_tflops, err, errlen) ||
        read_rate(obj, "fp16_tflops", false, &g->fp16_tflops, err, errlen) ||
        read_rate(obj, "hbm_gb_per_s", false, &g->hbm_gb_per_s, err, errlen) ||
        read_rate(obj, "nvlink_gb_per_s", true, &g->nvlink_gb_per_s, err, errlen) ||
        read_rate(obj, "pcie_gb_per_s", false, &g->pcie_gb_per_s, err, errlen))
        return -1;
    if (parse_compute(obj, g, err, errlen) < 0 || parse_fp8(obj, g, err, errlen) < 0) return -1;
    return parse_sources(obj, err, errlen);
}

double est_gpu_fp8_ceiling_tflops(const est_gpu *g) {
    if (!(g->fp8_tflops > 0)) return 0;
    if (g->fp8_matmul_ceiling_tflops > 0) return g->fp8_matmul_ceiling_tflops;
    return g->bf16_tflops > 0 ? g->fp8_tflops * g->matmul_ceiling_tflops / g->bf16_tflops : 0;
}

/* Every name and alias in the catalog must resolve to exactly one GPU. */
static int check_unique(const est_gpu *gpus, size_t n, char *err, size_t errlen) {
    for (size_t i = 0; i < n; i++) {
        for (int a = -1; a < gpus[i].n_aliases; a++) {
            const char *key = a < 0 ? gpus[i].name : gpus[i].aliases[a];
            for (size_t j = 0; j <= i; j++) {
                for (int b = -1; b < gpus[j].n_aliases; b++) {
                    if (j == i && b >= a) break;
                    const char *other = b < 0 ? gpus[j].name : gpus[j].aliases[b];
                    if (!strcasecmp(key, other))
                        return ft_errorf(err, errlen, "GPU \"%s\": name or alias \"%s\" is already used by GPU \"%s\"",
                                         gpus[i].name, key, gpus[j].name);
                }
            }
        }
    }
    return 0;
}

int est_gpu_catalog_parse(const char *text, size_t len, const char *what, est_gpu_catalog *cat,
                          char *err, size_t errlen) {
    if (!cat) return ft_errorf(err, errlen, "no catalog to fill");
    cat->gpus = NULL;
    cat->count = 0;
    if (!what) what = "GPU catalog";
    if (!text || len == 0) return ft_errorf(err, errlen, "%s is empty", what);
    cJSON *root = ft_json_parse(text, len, what, err, errlen);
    if (!root) return -1;
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "gpus");
    if (!cJSON_IsObject(root) || !cJSON_IsArray(arr)) {
        cJSON_Delete(root);
        return ft_errorf(err, errlen, "%s: expected {\"gpus\": [...]}", what);
    }
    int n = cJSON_GetArraySize(arr);
    if (n <= 0) {
        cJSON_Delete(root);
        return ft_errorf(err, errlen, "%s: \"gpus\" is empty", what);
    }
    est_gpu *gpus = calloc((size_t)n, sizeof *gpus);
    if (!gpus) {
        cJSON_Delete(root);
        return ft_errorf(err, errlen, "%s: out of memory", what);
    }
    char inner[200];
    for (int i = 0; i < n; i++) {
        if (parse_gpu(cJSON_GetArrayItem(arr, i), &gpus[i], inner, sizeof inner) < 0) {
            if (gpus[i].name[0])
                ft_errorf(err, errlen, "%s: GPU \"%s\": %s", what, gpus[i].name, inner);
            else
                ft_errorf(err, errlen, "%s: GPU entry %d: %s", what, i + 1, inner);
            free(gpus);
            cJSON_Delete(root);
            return -1;
        }
    }
    cJSON_Delete(root);
    if (check_unique(gpus, (size_t)n, inner, sizeof inner) < 0) {
        free(gpus);
        return ft_errorf(err, errlen, "%s: %s", what, inner);
    }
    cat->gpus = gpus;
    cat->count = (size_t)n;
    return 0;
}

int est_gpu_catalog_load(const char *path, est_gpu_catalog *cat, char *err, size_t errlen) {
    char buf[4096];
    if (cat) {
        cat->gpus = NULL;
        cat->count = 0;
    }
    if (!path) path = ft_data_path("models/gpus.json", buf, sizeof buf);
    size_t len = 0;
    char *text = ft_read_file(path, GPU_CATALOG_MAX_BYTES, &len, err, errlen);
    if (!text) return -1;
    int rc = est_gpu_catalog_parse(text, len, path, cat, err, errlen);
    free(text);
    return rc;
}

void est_gpu_catalog_free(est_gpu_catalog *cat) {
    if (!cat) return;
    free(cat->gpus);
    cat->gpus = NULL;
    cat->count = 0;
}

const est_gpu *est_gpu_find(const est_gpu_catalog *cat, const char *name) {
    if (!cat || !cat->gpus || !name || !name[0]) return NULL;
    for (size_t i = 0; i < cat->count; i++) {
        const est_gpu *g = &cat->gpus[i];
        if (!strcasecmp(g->name, name)) return g;
        for (int a = 0; a < g->n_aliases; a++)
            if (!strcasecmp(g->aliases[a], name)) return g;
    }
    return NULL;
}

int est_gpu_unknown(const est_gpu_catalog *cat, const char *name, char *err, size_t errlen) {
    const char *keys[64];
    size_t n = 0;
    for (size_t i = 0; cat && i < cat->count && n < sizeof keys / sizeof keys[0]; i++)
        keys[n++] = cat->gpus[i].name;
    char hint[160];
    ft_suggest_close(name ? name : "", keys, n, hint, sizeof hint);
    return ft_errorf(err, errlen, "unknown GPU \"%.40s\"%s%s%s (see `ftest gpus`)", name ? name : "",
                     hint[0] ? "; did you mean " : "", hint, hint[0] ? "?" : "");
}
