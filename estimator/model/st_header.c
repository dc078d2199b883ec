#include "st_header.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cJSON.h>

#include "json_util.h"

/* Bytes per element of the safetensors dtypes (safetensors' Dtype enum). */
static int dtype_bytes(const char *d) {
    static const struct {
        const char *name;
        int bytes;
    } T[] = {{"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2},
             {"U16", 2},  {"F16", 2}, {"BF16", 2}, {"I32", 4},    {"U32", 4},     {"F32", 4},
             {"F64", 8},  {"I64", 8}, {"U64", 8}};
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++)
        if (!strcmp(d, T[i].name)) return T[i].bytes;
    return 0;
}

static void note_dtype(est_st_summary *acc, const char *d) {
    char key[16];
    snprintf(key, sizeof key, "%s", d);
    /* Already listed? (names are whole words separated by '+') */
    const char *p = acc->dtypes;
    size_t kl = strlen(key);
    while ((p = strstr(p, key))) {
        bool start = p == acc->dtypes || p[-1] == '+';
        bool end = p[kl] == '\0' || p[kl] == '+';
        if (start && end) return;
        p += kl;
    }
    size_t len = strlen(acc->dtypes);
    snprintf(acc->dtypes + len, sizeof acc->dtypes - len, "%s%s", len ? "+" : "", key);
}

int est_st_header_parse(const char *json, size_t len, uint64_t data_bytes, est_st_summary *acc,
                        char *err, size_t errlen) {
    cJSON *root = ft_json_parse(json, len, "safetensors header", err, errlen);
    if (!root) return -1;
    int rc = -1;
    uint64_t in_header = 0; /* bytes of this header's tensors */
    if (!cJSON_IsObject(root)) {
        ft_errorf(err, errlen, "safetensors header is not a JSON object");
        goto done;
    }
    const cJSON *t;
    cJSON_ArrayForEach(t, root) {
        if (t->string && !strcmp(t->string, "__metadata__")) continue;
        const char *name = t->string ? t->string : "?";
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(t, "dtype");
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(t, "shape");
        const cJSON *off = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
        int eb = cJSON_IsString(dt) && dt->valuestring ? dtype_bytes(dt->valuestring) : 0;
        if (!cJSON_IsObject(t) || !eb || !cJSON_IsArray(shape) || !cJSON_IsArray(off) ||
            cJSON_GetArraySize(off) != 2) {
            ft_errorf(err, errlen, "safetensors tensor \"%.60s\": needs dtype, shape and data_offsets", name);
            goto done;
        }
        /* Elements: each dimension a whole number, the product bounded (2^50). */
        int64_t n = 1;
        const cJSON *d;
        cJSON_ArrayForEach(d, shape) {
            double v = cJSON_IsNumber(d) ? d->valuedouble : -1;
            if (!(v >= 0 && v <= (double)((int64_t)1 << 50)) || v != (double)(int64_t)v ||
                (v > 0 && (double)n * v > (double)((int64_t)1 << 50))) {
                ft_errorf(err, errlen, "safetensors tensor \"%.60s\": bad shape", name);
                goto done;
            }
            n *= (int64_t)v;
        }
        double b = cJSON_IsNumber(cJSON_GetArrayItem(off, 0)) ? cJSON_GetArrayItem(off, 0)->valuedouble : -1;
        double e = cJSON_IsNumber(cJSON_GetArrayItem(off, 1)) ? cJSON_GetArrayItem(off, 1)->valuedouble : -1;
        if (!(b >= 0 && e >= b && e <= (double)data_bytes) || b != (double)(int64_t)b ||
            e != (double)(int64_t)e || (double)(e - b) != (double)n * eb) {
            ft_errorf(err, errlen,
                      "safetensors tensor \"%.60s\": data_offsets do not match its shape and the file",
                      name);
            goto done;
        }
        in_header += (uint64_t)(n * eb);
        if (in_header > data_bytes) {
            ft_errorf(err, errlen, "safetensors tensors overlap: more bytes than the data region");
            goto done;
        }
        if (acc->bytes > ((int64_t)1 << 60) - n * eb) {
            ft_errorf(err, errlen, "safetensors: more than an exbibyte of tensors");
            goto done;
        }
        acc->tensors++;
        acc->elements += n;
        acc->bytes += n * eb;
        note_dtype(acc, dt->valuestring);
    }
    rc = 0;
done:
    cJSON_Delete(root);
    return rc;
}

int est_st_scan_file(const char *path, est_st_summary *acc, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) return ft_errorf(err, errlen, "cannot open %s", path);
    int rc = -1;
    char *json = NULL;
    struct stat st;
    unsigned char head[8];
    if (fstat(fileno(f), &st) != 0 || fread(head, 1, 8, f) != 8) {
        ft_errorf(err, errlen, "%s: not a safetensors file (shorter than 8 bytes)", path);
        goto done;
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | head[i];
    const uint64_t size = (uint64_t)st.st_size;
    if (n == 0 || n > EST_ST_MAX_HEADER_BYTES || n > size - 8) {
        ft_errorf(err, errlen, "%s: header length %llu does not fit the file (%llu bytes)", path,
                  (unsigned long long)n, (unsigned long long)size);
        goto done;
    }
    json = malloc((size_t)n);
    if (!json || fread(json, 1, (size_t)n, f) != (size_t)n) {
        ft_errorf(err, errlen, "%s: cannot read its header", path);
        goto done;
    }
    char inner[200];
    if (est_st_header_parse(json, (size_t)n, size - 8 - n, acc, inner, sizeof inner) < 0) {
        ft_errorf(err, errlen, "%s: %s", path, inner);
        goto done;
    }
    acc->files++;
    rc = 0;
done:
    free(json);
    fclose(f);
    return rc;
}

int est_st_scan_index(const char *path, est_st_summary *acc, char *err, size_t errlen) {
    size_t len = 0;
    char *text = ft_read_file(path, (size_t)64 << 20, &len, err, errlen);
    if (!text) return -1;
    cJSON *root = ft_json_parse(text, len, path, err, errlen);
    free(text);
    if (!root) return -1;
    int rc = -1;
    char (*seen)[256] = NULL;
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(map)) {
        ft_errorf(err, errlen, "%s: no \"weight_map\" object", path);
        goto done;
    }
    seen = calloc(EST_ST_MAX_FILES, sizeof *seen);
    if (!seen) {
        ft_errorf(err, errlen, "out of memory");
        goto done;
    }
    int nseen = 0;
    const char *slash = strrchr(path, '/');
    const cJSON *e;
    cJSON_ArrayForEach(e, map) {
        const char *file = cJSON_IsString(e) ? e->valuestring : NULL;
        /* A shard is a plain file name in the index's folder. */
        if (!file || !*file || strchr(file, '/') || !strcmp(file, "..") || strlen(file) >= 256) {
            ft_errorf(err, errlen, "%s: weight_map names \"%.60s\", not a file beside the index", path,
                      file ? file : "(not a string)");
            goto done;
        }
        bool dup = false;
        for (int i = 0; i < nseen && !dup; i++) dup = !strcmp(seen[i], file);
        if (dup) continue;
        if (nseen == EST_ST_MAX_FILES) {
            ft_errorf(err, errlen, "%s: more than %d shards", path, EST_ST_MAX_FILES);
            goto done;
        }
        ft_strlcpy(seen[nseen++], file, sizeof seen[0]);
        char shard[2048];
        snprintf(shard, sizeof shard, "%.*s%s%s", slash ? (int)(slash - path) : 0, path,
                 slash ? "/" : "", file);
        if (est_st_scan_file(shard, acc, err, errlen) < 0) goto done;
    }
    rc = 0;
done:
    free(seen);
    cJSON_Delete(root);
    return rc;
}
