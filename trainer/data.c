#include "data.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "file_io.h"
#include "json_util.h"
#include "rng.h"

static uint32_t rd32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Reads n tokens from token index i into out (decoded), each checked below
 * V. 0, or -1 with a message. */
static int read_tokens(const tr_data *d, int64_t i, int64_t n, int32_t *out, char *err, size_t errlen) {
    unsigned char *raw = (unsigned char *)out; /* the raw bytes first, decoded in place below */
    const size_t want = (size_t)n * (size_t)d->bpt;
    const off_t at = (off_t)TR_TOKEN_HEADER + (off_t)i * d->bpt;
    size_t got = 0;
    while (got < want) {
        ssize_t r = pread(d->fd, raw + got, want - got, at + (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return ft_errorf(err, errlen, "cannot read data file %s: %s", d->path, strerror(errno));
        if (r == 0)
            return ft_errorf(err, errlen, "data file %s ends before token %lld: it is shorter than when it "
                             "was opened (truncated while training?)", d->path, (long long)(i + n));
        got += (size_t)r;
    }
    /* Backwards: token k's 4 decoded bytes cover raw tokens >= k, already read. */
    for (int64_t k = n - 1; k >= 0; k--) {
        const unsigned char *p = raw + (size_t)k * (size_t)d->bpt;
        int64_t v = d->bpt == 2 ? (int64_t)(p[0] | p[1] << 8) : (int64_t)rd32(p);
        if (v >= d->V)
            return ft_errorf(err, errlen, "data file %s: token %lld at position %lld is not below the "
                             "vocabulary size %lld", d->path, (long long)v, (long long)(i + k), (long long)d->V);
        out[k] = (int32_t)v;
    }
    return 0;
}

/* Every token of the windows of samples 0 .. samples-1, or of the whole file
 * when those cover about as much (samples < 0: the whole file). */
static int check_tokens(const tr_data *d, int64_t T, int64_t samples, char *err, size_t errlen) {
    const bool whole = samples < 0 || samples > d->count / (T + 1);
    const int64_t chunk = whole ? (d->count < (1 << 20) ? d->count : (1 << 20)) : T + 1;
    int32_t *buf = malloc((size_t)chunk * sizeof *buf);
    if (!buf) return ft_errorf(err, errlen, "out of memory reading data file %s", d->path);
    int rc = 0;
    if (whole) {
        for (int64_t i = 0; rc == 0 && i < d->count; i += chunk)
            rc = read_tokens(d, i, d->count - i < chunk ? d->count - i : chunk, buf, err, errlen);
    } else {
        for (int64_t g = 0; rc == 0 && g < samples; g++)
            rc = read_tokens(d, (int64_t)(((uint64_t)g * (uint64_t)T) % (uint64_t)(d->count - T)), T + 1, buf,
                             err, errlen);
    }
    free(buf);
    return rc;
}

static int open_file(tr_data *d, const char *path, int64_t T, int64_t samples, char *err, size_t errlen) {
    size_t size = 0;
    ft_strlcpy(d->path, path, sizeof d->path);
    d->fd = ft_open_input(path, "data file ", (size_t)1 << 40, &size, err, errlen);
    if (d->fd < 0) return -1;
    unsigned char hdr[TR_TOKEN_HEADER];
    if (size < TR_TOKEN_HEADER || pread(d->fd, hdr, sizeof hdr, 0) != (ssize_t)sizeof hdr)
        return ft_errorf(err, errlen, "data file %s is too short for its %d-byte header", path,
                         TR_TOKEN_HEADER);
    if (memcmp(hdr, TR_TOKEN_MAGIC, 8))
        return ft_errorf(err, errlen, "data file %s does not start with \"%s\"", path, TR_TOKEN_MAGIC);
    uint32_t version = rd32(hdr + 8), bpt = rd32(hdr + 12);
    if (version != 1) return ft_errorf(err, errlen, "data file %s has version %u (expected 1)", path, version);
    if (bpt != 2 && bpt != 4)
        return ft_errorf(err, errlen, "data file %s has %u bytes per token (expected 2 or 4)", path, bpt);
    d->bpt = (int)bpt;
    size_t body = size - TR_TOKEN_HEADER;
    if (body % bpt)
        return ft_errorf(err, errlen, "data file %s ends inside a token (%zu bytes after the header)",
                         path, body);
    d->count = (int64_t)(body / bpt);
    if (d->count < T + 1)
        return ft_errorf(err, errlen, "data file %s has %lld tokens; --seq %lld needs at least %lld",
                         path, (long long)d->count, (long long)T, (long long)T + 1);
    return check_tokens(d, T, samples, err, errlen);
}

int tr_data_open(tr_data *d, const char *path, int64_t V, int64_t T, int64_t samples, uint64_t seed,
                 char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    d->fd = -1;
    d->V = V;
    d->seed = seed;
    if (path && *path) {
        if (open_file(d, path, T, samples, err, errlen)) {
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
    if (d->fd >= 0) close(d->fd);
    memset(d, 0, sizeof *d);
    d->fd = -1;
}

int tr_data_sample(const tr_data *d, int64_t g, int64_t T, int32_t *inputs, int32_t *targets, char *err,
                   size_t errlen) {
    if (d->perm) {
        int32_t x = (int32_t)(tr_hash3(d->seed, 0x64617461 /* "data" */, (uint64_t)g) % (uint64_t)d->V);
        for (int64_t t = 0; t < T; t++) {
            inputs[t] = x;
            x = d->perm[x];
            targets[t] = x;
        }
        return 0;
    }
    int64_t start = (int64_t)(((uint64_t)g * (uint64_t)T) % (uint64_t)(d->count - T));
    if (read_tokens(d, start, T, inputs, err, errlen) < 0 ||
        read_tokens(d, start + T, 1, targets + T - 1, err, errlen) < 0)
        return -1;
    for (int64_t t = 0; t + 1 < T; t++) targets[t] = inputs[t + 1];
    return 0;
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
