#include "grad_dump.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "file_io.h"
#include "init.h"
#include "json_util.h"
#include "zero.h"

/* ---- a safetensors writer (the format of trainer/safetensors.h) ---- */

static int64_t numel_of(const tr_st_out *t) { return t->shape[0] * (t->ndim == 2 ? t->shape[1] : 1); }

/* The JSON header: one entry per tensor with its byte range in the data
 * buffer, which the tensors tile in the given order. Names are ours (ASCII,
 * no quote or backslash), so they need no escaping. */
static int write_header(FILE *f, const tr_st_out *t, int64_t n) {
    uint64_t at = 0;
    fputs("{\"__metadata__\":{\"format\":\"pt\",\"source\":\"ftrain --dump-grads\"}", f);
    for (int64_t i = 0; i < n; i++) {
        uint64_t bytes = (uint64_t)numel_of(&t[i]) * 4u;
        fprintf(f, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld", t[i].name, (long long)t[i].shape[0]);
        if (t[i].ndim == 2) fprintf(f, ",%lld", (long long)t[i].shape[1]);
        fprintf(f, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)at, (unsigned long long)(at + bytes));
        at += bytes;
    }
    fputc('}', f);
    return ferror(f) ? -1 : 0;
}

typedef struct st_file {
    const char *header;
    size_t header_len;          /* padded with spaces to a multiple of 8 */
    const tr_st_out *t;
    int64_t n;
} st_file;

/* Floats go out as little-endian bytes whatever the host's order, a block at a time. */
static int write_body(FILE *f, const void *p) {
    const st_file *sf = p;
    unsigned char le[8], block[4096];
    for (int k = 0; k < 8; k++) le[k] = (unsigned char)((uint64_t)sf->header_len >> (8 * k));
    fwrite(le, 1, 8, f);
    fwrite(sf->header, 1, sf->header_len, f);
    for (int64_t i = 0; i < sf->n; i++) {
        const float *x = sf->t[i].data;
        const int64_t m = numel_of(&sf->t[i]);
        for (int64_t j = 0; j < m;) {
            size_t used = 0;
            for (; j < m && used < sizeof block; j++, used += 4) {
                uint32_t u;
                memcpy(&u, &x[j], 4);
                for (int k = 0; k < 4; k++) block[used + (size_t)k] = (unsigned char)(u >> (8 * k));
            }
            fwrite(block, 1, used, f);
        }
    }
    return ferror(f) ? -1 : 0;
}

int tr_st_write_f32(const char *path, const tr_st_out *t, int64_t n, char *err, size_t errlen) {
    char *header = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&header, &len);
    if (!f) return ft_errorf(err, errlen, "cannot write %s: out of memory", path);
    /* len is current after each fflush; spaces pad the header to the
     * format's recommended 8-byte alignment of the data buffer. */
    int rc = write_header(f, t, n) || fflush(f) ? -1 : 0;
    while (!rc && len % 8) {
        fputc(' ', f);
        if (fflush(f)) rc = -1;
    }
    if (fclose(f) || rc) {
        free(header);
        return ft_errorf(err, errlen, "cannot write %s: out of memory", path);
    }
    st_file sf = {header, len, t, n};
    rc = ft_write_atomic_with(path, write_body, &sf, err, errlen);
    free(header);
    return rc;
}

/* ---- the gradients of one step ---- */

typedef struct collect_ctx {
    tr_rank *r;
    float *full;
} collect_ctx;

/* Where the reduced gradient of a segment lives is where the optimizer reads
 * it (optim.c, update_segment): the shard at stages 2-3, else the full buffer. */
static void collect_segment(const tr_segment *seg, void *p) {
    collect_ctx *c = p;
    tr_rank *r = c->r;
    const int64_t gi = r->cfg->zero_stage >= 2 ? seg->shard : seg->full;
    r->be->download_f32(&r->bctx, c->full + seg->full, (const char *)r->grads.ptr + gi * r->s.cd, r->dt, seg->n);
}

void tr_grad_dump_collect(tr_rank *r, float *full) {
    if (r->cfg->zero_stage == 0 && r->rank != 0) return;
    collect_ctx c = {r, full};
    tr_zero_for_partition(&r->s, r->rank, collect_segment, &c);
}

/* The HF tensors of the model, in unit and tensor order, pointing into full. */
static int64_t list_tensors(const tr_sizes *s, const float *full, tr_st_out *out) {
    int64_t n = 0;
    for (int64_t u = 0; u < s->n_units; u++) {
        const tr_unit *U = tr_unit_of(s, u);
        for (int t = 0; t < TR_T_COUNT; t++) {
            if (U->off[t] < 0) continue;
            char names[TR_HF_PARTS][96];
            int64_t rows[TR_HF_PARTS], total_rows, cols, at = tr_unit_full_off(s, u) + U->off[t];
            tr_tensor_shape(s, (tr_tensor_id)t, &total_rows, &cols);
            /* The 2-D tensors are exactly those that decay (sizes.h); the rest are vectors. */
            const int ndim = tr_tensor_decays((tr_tensor_id)t) ? 2 : 1;
            const int parts = tr_init_hf_names(s, t, u - 1, names, rows);
            for (int k = 0; k < parts; k++) {
                if (out) {
                    tr_st_out *o = &out[n];
                    memcpy(o->name, names[k], sizeof o->name);
                    o->ndim = ndim;
                    o->shape[0] = rows[k];
                    o->shape[1] = ndim == 2 ? cols : 1;
                    o->data = full + at;
                }
                at += rows[k] * (ndim == 2 ? cols : 1);
                n++;
            }
        }
    }
    return n;
}

int tr_grad_dump_write(const char *path, const tr_sizes *s, const float *full, char *err, size_t errlen) {
    const int64_t n = list_tensors(s, full, NULL);
    tr_st_out *t = calloc((size_t)n, sizeof *t);
    if (!t) return ft_errorf(err, errlen, "cannot write %s: out of memory", path);
    list_tensors(s, full, t);
    int rc = tr_st_write_f32(path, t, n, err, errlen);
    free(t);
    return rc;
}
