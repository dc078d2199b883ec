#include "init.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_util.h"
#include "mapfile.h"
#include "parallel.h"
#include "rng.h"

#define PARTS TR_HF_PARTS /* q,k,v: at most three HF tensors per tensor of ours */

static tr_init_part *part(const tr_init *in, int64_t u, int t, int k) {
    return &in->parts[(u * TR_T_COUNT + t) * PARTS + k];
}

int tr_init_hf_names(const tr_sizes *s, int t, int64_t l, char names[PARTS][96], int64_t rows[PARTS]) {
    char buf[PARTS][48];
    const char *sub[PARTS] = {0};
    int64_t r[PARTS] = {0};
    int n = 1;
    switch (t) {
    case TR_T_EMBED: snprintf(names[0], 96, "model.embed_tokens.weight"); rows[0] = s->V; return 1;
    case TR_T_NORM_F: snprintf(names[0], 96, "model.norm.weight"); rows[0] = s->h; return 1;
    case TR_T_LM_HEAD: snprintf(names[0], 96, "lm_head.weight"); rows[0] = s->V; return 1;
    case TR_T_LN1: sub[0] = "input_layernorm.weight"; r[0] = s->h; break;
    case TR_T_LN2: sub[0] = "post_attention_layernorm.weight"; r[0] = s->h; break;
    case TR_T_QKV_W: case TR_T_QKV_B: {
        const char *suffix = t == TR_T_QKV_W ? "weight" : "bias";
        snprintf(buf[0], 48, "self_attn.q_proj.%s", suffix);
        snprintf(buf[1], 48, "self_attn.k_proj.%s", suffix);
        snprintf(buf[2], 48, "self_attn.v_proj.%s", suffix);
        for (int k = 0; k < 3; k++) sub[k] = buf[k];
        r[0] = s->qd; r[1] = s->kvd; r[2] = s->kvd;
        n = 3;
        break;
    }
    case TR_T_O_W: sub[0] = "self_attn.o_proj.weight"; r[0] = s->h; break;
    case TR_T_O_B: sub[0] = "self_attn.o_proj.bias"; r[0] = s->h; break;
    case TR_T_GU_W: sub[0] = "mlp.gate_proj.weight"; sub[1] = "mlp.up_proj.weight"; r[0] = r[1] = s->I; n = 2; break;
    case TR_T_GU_B: sub[0] = "mlp.gate_proj.bias"; sub[1] = "mlp.up_proj.bias"; r[0] = r[1] = s->I; n = 2; break;
    case TR_T_DOWN_W: sub[0] = "mlp.down_proj.weight"; r[0] = s->h; break;
    case TR_T_DOWN_B: sub[0] = "mlp.down_proj.bias"; r[0] = s->h; break;
    default: return 0;
    }
    for (int k = 0; k < n; k++) {
        snprintf(names[k], 96, "model.layers.%lld.%s", (long long)l, sub[k]);
        rows[k] = r[k];
    }
    return n;
}

static int is_vector(int t) {
    return t == TR_T_LN1 || t == TR_T_LN2 || t == TR_T_NORM_F || t == TR_T_QKV_B || t == TR_T_O_B ||
           t == TR_T_GU_B || t == TR_T_DOWN_B;
}

static int is_float(tr_st_dtype d) { return d == TR_ST_F32 || d == TR_ST_BF16 || d == TR_ST_F16; }

/* Matches every tensor of the model to the file; every file tensor must be used
 * (or belong to a block beyond --layers, or be lm_head.weight of a tied model). */
static int match(tr_init *in, const tr_config *cfg, char *err, size_t errlen) {
    const tr_sizes *s = in->s;
    char *used = calloc((size_t)in->st.count + 1, 1);
    if (!used) return ft_errorf(err, errlen, "out of memory");
    int rc = 0;
    for (int64_t u = 0; u < s->n_units && !rc; u++) {
        const tr_unit *U = tr_unit_of(s, u);
        for (int t = 0; t < TR_T_COUNT && !rc; t++) {
            if (U->off[t] < 0) continue;
            char names[PARTS][96];
            int64_t rows[PARTS], total_rows, cols, at = 0;
            tr_tensor_shape(s, (tr_tensor_id)t, &total_rows, &cols);
            int vec = is_vector(t);
            int n = tr_init_hf_names(s, t, u - 1, names, rows);
            for (int k = 0; k < n && !rc; k++) {
                const tr_st_tensor *src = tr_st_find(&in->st, names[k]);
                if (!src) {
                    rc = ft_errorf(err, errlen, "safetensors file lacks %s", names[k]);
                    break;
                }
                int ok = is_float(src->dtype) &&
                         (vec ? (src->ndim == 1 && src->shape[0] == rows[k])
                              : (src->ndim == 2 && src->shape[0] == rows[k] && src->shape[1] == cols));
                if (!ok) {
                    rc = vec ? ft_errorf(err, errlen, "%s: expected a float tensor of shape [%lld], got %s "
                                         "with %d dims", names[k], (long long)rows[k],
                                         tr_st_dtype_name(src->dtype), src->ndim)
                             : ft_errorf(err, errlen, "%s: expected a float tensor of shape [%lld, %lld], "
                                         "got %s with %d dims", names[k], (long long)rows[k], (long long)cols,
                                         tr_st_dtype_name(src->dtype), src->ndim);
                    break;
                }
                used[src - in->st.tensors] = 1;
                *part(in, u, t, k) = (tr_init_part){src, at};
                at += src->numel;
            }
        }
    }
    for (int64_t i = 0; i < in->st.count && !rc; i++) {
        if (used[i]) continue;
        const char *name = in->st.tensors[i].name;
        long long layer;
        int consumed = 0;
        if (sscanf(name, "model.layers.%lld.%n", &layer, &consumed) == 1 && consumed > 0 &&
            layer >= cfg->layers && layer < cfg->model.num_layers)
            continue; /* a block beyond --layers */
        if (!strcmp(name, "lm_head.weight") && cfg->model.tied_embeddings) continue;
        rc = ft_errorf(err, errlen, "safetensors file has unexpected tensor %.96s", name);
    }
    free(used);
    return rc;
}

int tr_init_open(tr_init *in, const char *path, const tr_config *cfg, const tr_sizes *s, char *err,
                 size_t errlen) {
    memset(in, 0, sizeof *in);
    in->seed = cfg->seed;
    in->model_layers = cfg->model.num_layers;
    in->s = s;
    if (!path || !*path) return 0;
    if (tr_map_file(path, "", &in->map, &in->map_len, err, errlen)) return -1;
    char inner[300];
    if (tr_st_parse(in->map, in->map_len, &in->st, inner, sizeof inner)) {
        tr_init_close(in);
        return ft_errorf(err, errlen, "%s: %s", path, inner);
    }
    in->parts = calloc((size_t)(s->n_units * TR_T_COUNT * PARTS), sizeof *in->parts);
    if (!in->parts) {
        tr_init_close(in);
        return ft_errorf(err, errlen, "out of memory");
    }
    if (match(in, cfg, inner, sizeof inner)) {
        tr_init_close(in);
        return ft_errorf(err, errlen, "%s: %s", path, inner);
    }
    return 0;
}

void tr_init_close(tr_init *in) {
    tr_st_free(&in->st);
    free(in->parts);
    tr_unmap_file(in->map, in->map_len);
    memset(in, 0, sizeof *in);
}

static double std_of(const tr_init *in, int t) {
    switch (t) {
    case TR_T_EMBED: case TR_T_QKV_W: case TR_T_GU_W: case TR_T_LM_HEAD: return TR_INIT_STD;
    case TR_T_O_W: case TR_T_DOWN_W: return TR_INIT_STD / sqrt(2.0 * (double)in->model_layers);
    default: return 0;
    }
}

static float value_at(const tr_init *in, int64_t u, int t, int64_t e) {
    if (in->parts) {
        for (int k = PARTS - 1; k >= 0; k--) {
            const tr_init_part *p = part(in, u, t, k);
            if (p->src && e >= p->at)
                return tr_st_value(in->map + in->st.data_start, p->src, e - p->at);
        }
        return 0;
    }
    if (t == TR_T_LN1 || t == TR_T_LN2 || t == TR_T_NORM_F) return 1.0f;
    double sd = std_of(in, t);
    if (sd == 0) return 0.0f;
    uint64_t stream = (uint64_t)u * TR_T_COUNT + (uint64_t)t;
    return (float)(sd * tr_normal(in->seed, stream, (uint64_t)e));
}

/* The tensor of unit u holding element e (-1: padding). */
static int tensor_at(const tr_unit *U, int64_t e) {
    for (int t = 0; t < TR_T_COUNT; t++)
        if (U->off[t] >= 0 && e >= U->off[t] && e < U->off[t] + U->len[t]) return t;
    return -1;
}

typedef struct fill_args {
    const tr_init *in;
    int64_t u, idx;
    float *dst;
} fill_args;

/* dst[i0..i1): the tensor is looked up once per run of its elements, not per
 * element (a block's tensors are a handful of long runs). */
static void fill_range(void *ctx, int64_t i0, int64_t i1) {
    const fill_args *a = ctx;
    const tr_unit *U = tr_unit_of(a->in->s, a->u);
    for (int64_t i = i0; i < i1;) {
        const int64_t e = a->idx + i;
        const int t = tensor_at(U, e);
        int64_t end = i1;
        if (t >= 0 && U->off[t] + U->len[t] - a->idx < end) end = U->off[t] + U->len[t] - a->idx;
        if (t < 0) { /* padding: up to the next tensor that starts after e */
            for (int k = 0; k < TR_T_COUNT; k++)
                if (U->off[k] > e && U->off[k] - a->idx < end) end = U->off[k] - a->idx;
        }
        for (; i < end; i++) a->dst[i] = t < 0 ? 0.0f : value_at(a->in, a->u, t, a->idx + i - U->off[t]);
    }
}

/* A seeded element costs about a hundred element operations of
 * TR_PAR_MIN_WORK's scale (two splitmix64 hashes of three rounds, a log, a
 * sqrt and a cos: tens of ns). On one core, Llama-3.2-1B's 262 M-element
 * embedding drawn twice (bf16 copy and fp32 master) was most of the 27 s
 * before ftrain's first GPU step on the GPU day of 2026-11-26. Each element is
 * a pure function of (seed, unit, index), so the pool gives the same bits. */
#define INIT_OPS_PER_ELEMENT 100

void tr_init_fill(const tr_init *in, int64_t u, int64_t idx, int64_t n, float *dst) {
    fill_args a = {in, u, idx, dst};
    tr_par_for(n, n * INIT_OPS_PER_ELEMENT, fill_range, &a);
}
