#include "data.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "file_io.h"
#include "json_util.h"
#include "mapfile.h"
#include "rng.h"

static uint32_t rd32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int64_t token_at(const tr_data *d, int64_t i) {
    const unsigned char *p = d->map + TR_TOKEN_HEADER + (size_t)i * (size_t)d->bpt;
    return d->bpt == 2 ? (int64_t)(p[0] | p[1] << 8) : (int64_t)rd32(p);
}

static int open_file(tr_data *d, const char *path, int64_t T, char *err, size_t errlen) {
    if (tr_map_file(path, "data file ", &d->map, &d->map_len, err, errlen)) return -1;
    if (d->map_len < TR_TOKEN_HEADER)
        return ft_errorf(err, errlen, "data file %s is too short for its %d-byte header", path,
                         TR_TOKEN_HEADER);
    if (memcmp(d->map, TR_TOKEN_MAGIC, 8))
        return ft_errorf(err, errlen, "data file %s does not start with \"%s\"", path, TR_TOKEN_MAGIC);
    uint32_t version = rd32(d->map + 8), bpt = rd32(d->map + 12);
    if (version != 1) return ft_errorf(err, errlen, "data file %s has version %u (expected 1)", path, version);
    if (bpt != 2 && bpt != 4)
        return ft_errorf(err, errlen, "data file %s has %u bytes per token (expected 2 or 4)", path, bpt);
    d->bpt = (int)bpt;
    size_t body = d->map_len - TR_TOKEN_HEADER;
    if (body % bpt)
        return ft_errorf(err, errlen, "data file %s ends inside a token (%zu bytes after the header)",
                         path, body);
    d->count = (int64_t)(body / bpt);
    if (d->count < T + 1)
        return ft_errorf(err, errlen, "data file %s has %lld tokens; --seq %lld needs at least %lld",
                         path, (long long)d->count, (long long)T, (long long)T + 1);
    for (int64_t i = 0; i < d->count; i++)
        if (token_at(d, i) >= d->V)
            return ft_errorf(err, errlen, "data file %s: token %lld at position %lld is not below the "
                             "vocabulary size %lld", path, (long long)token_at(d, i), (long long)i,
                             (long long)d->V);
    return 0;
}

int tr_data_open(tr_data *d, const char *path, int64_t V, int64_t T, uint64_t seed, char *err,
                 size_t errlen) {
    memset(d, 0, sizeof *d);
    d->V = V;
    d->seed = seed;
    if (path && *path) {
        if (open_file(d, path, T, err, errlen)) {
            tr_data_close(d);
            return -1;
        }
        return 0;
    }
    d->perm = malloc((size_t)V * sizeof *d->perm);
    if (!d->perm) return ft_errorf(err, errlen, "out of memory for the synthetic task");
    for (int64_t i = 0; i < V; i++) d->perm[i] = (int32_t)i;
    for (int64_t i = V - 1; i > 0; i--) { /* Fisher-Yates */
        int64_t j = (int64_t)(tr_hash3(seed, 0x7065726d /* "perm" */, (uint64_t)i) % (uint64_t)(i + 1));
        int32_t t = d->perm[i];
        d->perm[i] = d->perm[j];
        d->perm[j] = t;
    }
    return 0;
}

void tr_data_close(tr_data *d) {
    free(d->perm);
    tr_unmap_file(d->map, d->map_len);
    memset(d, 0, sizeof *d);
}

void tr_data_sample(const tr_data *d, int64_t g, int64_t T, int32_t *inputs, int32_t *targets) {
    if (d->perm) {
        int32_t x = (int32_t)(tr_hash3(d->seed, 0x64617461 /* "data" */, (uint64_t)g) % (uint64_t)d->V);
        for (int64_t t = 0; t < T; t++) {
            inputs[t] = x;
            x = d->perm[x];
            targets[t] = x;
        }
        return;
    }
    int64_t start = (int64_t)(((uint64_t)g * (uint64_t)T) % (uint64_t)(d->count - T));
    for (int64_t t = 0; t < T; t++) {
        inputs[t] = (int32_t)token_at(d, start + t);
        targets[t] = (int32_t)token_at(d, start + t + 1);
    }
}

int tr_data_write(const char *path, const int32_t *tokens, int64_t n, int bpt, char *err, size_t errlen) {
    if (bpt != 2 && bpt != 4) return ft_errorf(err, errlen, "bytes per token must be 2 or 4");
    if (n < 0 || (uint64_t)n > (SIZE_MAX - TR_TOKEN_HEADER) / 4) return ft_errorf(err, errlen, "bad token count");
    const size_t len = TR_TOKEN_HEADER + (size_t)n * (size_t)bpt;
    unsigned char *buf = calloc(1, len);
    if (!buf) return ft_errorf(err, errlen, "out of memory writing %s", path);
    memcpy(buf, TR_TOKEN_MAGIC, 8);
    buf[8] = 1;
    buf[12] = (unsigned char)bpt;
    for (int64_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)tokens[i];
        if (bpt == 2 && v > 0xffff) {
            free(buf);
            return ft_errorf(err, errlen, "token %lld (%u) does not fit in 2 bytes", (long long)i, v);
        }
        unsigned char *p = buf + TR_TOKEN_HEADER + (size_t)i * (size_t)bpt;
        for (int b = 0; b < bpt; b++) p[b] = (unsigned char)(v >> (8 * b));
    }
    /* Replaced atomically like every output (file_io.h). */
    int rc = ft_write_atomic(path, buf, len, err, errlen);
    free(buf);
    return rc;
}
