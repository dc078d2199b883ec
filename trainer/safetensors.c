#include "safetensors.h"

#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "dtype.h"
#include "json_util.h"

static const char *const dtype_names[TR_ST_DTYPE_COUNT] = {"F64", "F32", "F16", "BF16", "I64",
                                                           "I32", "I16", "I8",  "U8",  "BOOL"};
static const int64_t dtype_bytes[TR_ST_DTYPE_COUNT] = {8, 4, 2, 2, 8, 4, 2, 1, 1, 1};

const char *tr_st_dtype_name(tr_st_dtype d) {
    return (unsigned)d < TR_ST_DTYPE_COUNT ? dtype_names[d] : "?";
}
int64_t tr_st_dtype_bytes(tr_st_dtype d) { return (unsigned)d < TR_ST_DTYPE_COUNT ? dtype_bytes[d] : 0; }

void tr_st_free(tr_st_header *h) {
    free(h->tensors);
    memset(h, 0, sizeof *h);
}

/* A JSON number that is a non-negative integer below 2^53 (exact in a double). */
static int get_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= 9007199254740992.0) || d != (double)(uint64_t)d) return -1;
    *out = (uint64_t)d;
    return 0;
}

static int parse_entry(const cJSON *e, tr_st_tensor *t, char *err, size_t errlen) {
    if (!cJSON_IsObject(e)) return ft_errorf(err, errlen, "tensor \"%.64s\" is not an object", t->name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(off))
        return ft_errorf(err, errlen, "tensor \"%.64s\" lacks dtype, shape or data_offsets", t->name);
    int found = 0;
    for (int d = 0; d < TR_ST_DTYPE_COUNT; d++)
        if (!strcmp(dt->valuestring, dtype_names[d])) {
            t->dtype = (tr_st_dtype)d;
            found = 1;
        }
    if (!found)
        return ft_errorf(err, errlen, "tensor \"%.64s\" has unknown dtype \"%.16s\"", t->name, dt->valuestring);
    int nd = cJSON_GetArraySize(sh);
    if (nd > TR_ST_MAX_DIMS)
        return ft_errorf(err, errlen, "tensor \"%.64s\" has %d dimensions (at most %d)", t->name, nd,
                         TR_ST_MAX_DIMS);
    t->ndim = nd;
    uint64_t numel = 1;
    for (int i = 0; i < nd; i++) {
        uint64_t v;
        if (get_uint(cJSON_GetArrayItem(sh, i), &v))
            return ft_errorf(err, errlen, "tensor \"%.64s\" has a bad shape", t->name);
        if (v && numel > (UINT64_C(1) << 53) / v)
            return ft_errorf(err, errlen, "tensor \"%.64s\" is too large", t->name);
        numel *= v;
        t->shape[i] = (int64_t)v;
    }
    t->numel = (int64_t)numel;
    if (cJSON_GetArraySize(off) != 2 || get_uint(cJSON_GetArrayItem(off, 0), &t->begin) ||
        get_uint(cJSON_GetArrayItem(off, 1), &t->end) || t->end < t->begin)
        return ft_errorf(err, errlen, "tensor \"%.64s\" has bad data_offsets", t->name);
    if ((t->end - t->begin) != numel * (uint64_t)dtype_bytes[t->dtype])
        return ft_errorf(err, errlen, "tensor \"%.64s\": %llu bytes in data_offsets for %llu %s elements",
                         t->name, (unsigned long long)(t->end - t->begin), (unsigned long long)numel,
                         dtype_names[t->dtype]);
    return 0;
}

static int cmp_begin(const void *a, const void *b) {
    const tr_st_tensor *x = *(tr_st_tensor *const *)a, *y = *(tr_st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp((*(tr_st_tensor *const *)a)->name, (*(tr_st_tensor *const *)b)->name);
}

static int check_layout(tr_st_header *h, char *err, size_t errlen) {
    if (!h->count) {
        if (h->data_len) return ft_errorf(err, errlen, "%llu data bytes but no tensors",
                                          (unsigned long long)h->data_len);
        return 0;
    }
    tr_st_tensor **v = malloc((size_t)h->count * sizeof *v);
    if (!v) return ft_errorf(err, errlen, "out of memory");
    for (int64_t i = 0; i < h->count; i++) v[i] = &h->tensors[i];
    qsort(v, (size_t)h->count, sizeof *v, cmp_name);
    for (int64_t i = 1; i < h->count; i++)
        if (!strcmp(v[i - 1]->name, v[i]->name)) {
            ft_errorf(err, errlen, "tensor \"%.64s\" appears twice", v[i]->name);
            free(v);
            return -1;
        }
    qsort(v, (size_t)h->count, sizeof *v, cmp_begin);
    uint64_t at = 0;
    int rc = 0;
    for (int64_t i = 0; i < h->count && !rc; i++) {
        if (v[i]->begin != at)
            rc = ft_errorf(err, errlen, "tensor \"%.64s\" starts at byte %llu, expected %llu (gap or overlap)",
                           v[i]->name, (unsigned long long)v[i]->begin, (unsigned long long)at);
        at = v[i]->end;
    }
    if (!rc && at != h->data_len)
        rc = ft_errorf(err, errlen, "the tensors cover %llu data bytes but the file has %llu (truncated or "
                       "padded)", (unsigned long long)at, (unsigned long long)h->data_len);
    free(v);
    return rc;
}

int tr_st_parse(const uint8_t *buf, size_t len, tr_st_header *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (len < 8) return ft_errorf(err, errlen, "file too short for a safetensors header (%zu bytes)", len);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | buf[i];
    if (n > TR_ST_MAX_HEADER) return ft_errorf(err, errlen, "header length %llu exceeds 100 MB", (unsigned long long)n);
    if (n > len - 8)
        return ft_errorf(err, errlen, "header length %llu runs past the end of the file (%zu bytes): truncated",
                         (unsigned long long)n, len);
    if (n < 2 || buf[8] != '{') return ft_errorf(err, errlen, "header is not a JSON object");
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts((const char *)buf + 8, (size_t)n, &end, 0);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return ft_errorf(err, errlen, "header is not valid JSON");
    }
    /* Only space padding may follow the object (writers align the data buffer). */
    for (const char *p = end; p && p < (const char *)buf + 8 + n; p++)
        if (*p != ' ') {
            cJSON_Delete(root);
            return ft_errorf(err, errlen, "header has bytes after its JSON object");
        }
    out->data_start = 8 + n;
    out->data_len = len - 8 - n;
    int64_t count = 0;
    for (const cJSON *e = root->child; e; e = e->next) count++;
    if (count > TR_ST_MAX_TENSORS) {
        cJSON_Delete(root);
        return ft_errorf(err, errlen, "header lists %lld entries (at most %d)", (long long)count, TR_ST_MAX_TENSORS);
    }
    out->tensors = calloc(count ? (size_t)count : 1, sizeof *out->tensors);
    if (!out->tensors) {
        cJSON_Delete(root);
        return ft_errorf(err, errlen, "out of memory");
    }
    int rc = 0, seen_meta = 0;
    for (const cJSON *e = root->child; e && !rc; e = e->next) {
        if (!e->string) {
            rc = ft_errorf(err, errlen, "header entry without a name");
        } else if (!strcmp(e->string, "__metadata__")) {
            if (seen_meta++ || !cJSON_IsObject(e)) {
                rc = ft_errorf(err, errlen, "__metadata__ must be one object of strings");
                break;
            }
            for (const cJSON *m = e->child; m; m = m->next)
                if (!cJSON_IsString(m)) rc = ft_errorf(err, errlen, "__metadata__ values must be strings");
        } else {
            tr_st_tensor *t = &out->tensors[out->count];
            size_t nl = strlen(e->string);
            if (nl == 0 || nl >= TR_ST_NAME_MAX) {
                rc = ft_errorf(err, errlen, "tensor name of %zu bytes (1..%d)", nl, TR_ST_NAME_MAX - 1);
                break;
            }
            memcpy(t->name, e->string, nl + 1);
            rc = parse_entry(e, t, err, errlen);
            out->count++;
        }
    }
    cJSON_Delete(root);
    if (!rc) rc = check_layout(out, err, errlen);
    if (rc) tr_st_free(out);
    return rc;
}

const tr_st_tensor *tr_st_find(const tr_st_header *h, const char *name) {
    for (int64_t i = 0; i < h->count; i++)
        if (!strcmp(h->tensors[i].name, name)) return &h->tensors[i];
    return NULL;
}

float tr_st_value(const uint8_t *data, const tr_st_tensor *t, int64_t i) {
    const uint8_t *p = data + t->begin + (uint64_t)i * (uint64_t)dtype_bytes[t->dtype];
    switch (t->dtype) {
    case TR_ST_F32: {
        uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        float f;
        memcpy(&f, &u, sizeof f);
        return f;
    }
    case TR_ST_BF16: return tr_bf16_to_f32((uint16_t)(p[0] | p[1] << 8));
    case TR_ST_F16: return tr_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
    default: return 0;
    }
}
