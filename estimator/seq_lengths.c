#include "seq_lengths.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "file_io.h"
#include "json_util.h"

void est_seq_hist_free(est_seq_hist *h) {
    free(h->length);
    free(h->count);
    memset(h, 0, sizeof *h);
}

static int push(est_seq_hist *h, int64_t length, int64_t count) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 256;
        int64_t *l = realloc(h->length, cap * sizeof *l);
        if (!l) return -1;
        h->length = l;
        int64_t *c = realloc(h->count, cap * sizeof *c);
        if (!c) return -1;
        h->count = c;
        h->cap = cap;
    }
    h->length[h->n] = length;
    h->count[h->n++] = count;
    return 0;
}

/* A whole number of at most 18 digits at *p (advanced past it); -1 when none. */
static int64_t whole(const char **p, const char *end) {
    const char *s = *p;
    int64_t v = 0;
    int digits = 0;
    while (s < end && isdigit((unsigned char)*s)) {
        if (++digits > 18) return -1;
        v = v * 10 + (*s++ - '0');
    }
    if (!digits) return -1;
    *p = s;
    return v;
}

static const char *skip_blank(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r')) p++;
    return p;
}

/* One line: "", "# ...", "LENGTH" or "LENGTH COUNT". */
static int parse_line(const char *p, const char *end, size_t lineno, est_seq_hist *h, char *err,
                      size_t errlen) {
    p = skip_blank(p, end);
    if (p == end || *p == '#') return 0;
    int64_t length = whole(&p, end), count = 1;
    if (length < 1 || length > EST_MAX_SEQ)
        return ft_errorf(err, errlen, "--seq-lengths line %zu: a length must be a whole number of tokens "
                                      "from 1 to %lld", lineno, (long long)EST_MAX_SEQ);
    const char *q = skip_blank(p, end);
    if (q != p && q < end && *q != '#') {
        count = whole(&q, end);
        if (count < 0 || count > EST_SEQ_MAX_SAMPLES)
            return ft_errorf(err, errlen, "--seq-lengths line %zu: the count must be a whole number from 0 "
                                          "to %lld", lineno, (long long)EST_SEQ_MAX_SAMPLES);
        p = q;
    }
    p = skip_blank(p, end);
    if (p < end && *p != '#')
        return ft_errorf(err, errlen, "--seq-lengths line %zu: expected LENGTH or LENGTH COUNT", lineno);
    if (count == 0) return 0;
    if (h->samples > EST_SEQ_MAX_SAMPLES - count)
        return ft_errorf(err, errlen, "--seq-lengths: more than %lld samples", (long long)EST_SEQ_MAX_SAMPLES);
    h->samples += count;
    return push(h, length, count) < 0 ? ft_errorf(err, errlen, "out of memory") : 0;
}

static int by_length(const void *a, const void *b) {
    const int64_t *x = a, *y = b;
    return (x[0] > y[0]) - (x[0] < y[0]);
}

/* Sorts the (length, count) pairs and merges equal lengths. */
static int normalize(est_seq_hist *h) {
    int64_t *pairs = malloc(h->n * 2 * sizeof *pairs + 1);
    if (!pairs) return -1;
    for (size_t i = 0; i < h->n; i++) {
        pairs[2 * i] = h->length[i];
        pairs[2 * i + 1] = h->count[i];
    }
    qsort(pairs, h->n, 2 * sizeof *pairs, by_length);
    size_t m = 0;
    for (size_t i = 0; i < h->n; i++) {
        if (m && h->length[m - 1] == pairs[2 * i]) {
            h->count[m - 1] += pairs[2 * i + 1];
            continue;
        }
        h->length[m] = pairs[2 * i];
        h->count[m++] = pairs[2 * i + 1];
    }
    h->n = m;
    free(pairs);
    return 0;
}

int est_seq_lengths_parse(const char *text, size_t len, est_seq_hist *h, char *err, size_t errlen) {
    memset(h, 0, sizeof *h);
    const char *p = text, *end = text + len;
    size_t lineno = 0;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        lineno++;
        int rc = memchr(p, '\0', (size_t)(le - p))
                     ? ft_errorf(err, errlen, "--seq-lengths line %zu: not text", lineno)
                     : parse_line(p, le, lineno, h, err, errlen);
        if (rc < 0) {
            est_seq_hist_free(h);
            return -1;
        }
        p = nl ? nl + 1 : end;
    }
    if (h->samples == 0) {
        est_seq_hist_free(h);
        return ft_errorf(err, errlen, "--seq-lengths holds no sample lengths");
    }
    if (normalize(h) < 0) {
        est_seq_hist_free(h);
        return ft_errorf(err, errlen, "out of memory");
    }
    return 0;
}

int est_seq_lengths_load(const char *path, est_seq_hist *h, char *err, size_t errlen) {
    memset(h, 0, sizeof *h);
    size_t size = 0;
    int fd = ft_open_input(path, "--seq-lengths file ", EST_SEQ_LENGTHS_MAX_BYTES, &size, err, errlen);
    if (fd < 0) return -1;
    char *buf = malloc(size + 1);
    size_t got = 0;
    while (buf && got < size) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    if (!buf) return ft_errorf(err, errlen, "out of memory reading %s", path);
    int rc = got == size ? est_seq_lengths_parse(buf, size, h, err, errlen)
                         : ft_errorf(err, errlen, "could not read %s", path);
    free(buf);
    return rc;
}

static int64_t cut(int64_t l, int64_t truncate) { return truncate > 0 && l > truncate ? truncate : l; }

int64_t est_seq_longest(const est_seq_hist *h, int64_t truncate) {
    return h->n ? cut(h->length[h->n - 1], truncate) : 0;
}

/* Random batches: sum_l l (F(l)^b - F(l-)^b). */
static double random_mean(const est_seq_hist *h, int64_t batch, int64_t truncate) {
    double below = 0, mean = 0;
    const double n = (double)h->samples;
    for (size_t i = 0; i < h->n; i++) {
        const double upto = below + (double)h->count[i];
        mean += (double)cut(h->length[i], truncate) * (pow(upto / n, (double)batch) - pow(below / n, (double)batch));
        below = upto;
    }
    return mean;
}

/* Sorted batches: walking the samples from the longest down, every b-th
 * sample opens a batch padded to its length. */
static double sorted_mean(const est_seq_hist *h, int64_t batch, int64_t truncate) {
    int64_t seen = 0; /* samples walked so far */
    double sum = 0;
    for (size_t i = h->n; i-- > 0;) {
        const int64_t c = h->count[i];
        /* batch openers among samples seen .. seen + c - 1: indices k with k % b == 0 */
        const int64_t openers = (seen + c + batch - 1) / batch - (seen + batch - 1) / batch;
        sum += (double)openers * (double)cut(h->length[i], truncate);
        seen += c;
    }
    const double batches = (double)((h->samples + batch - 1) / batch);
    return batches > 0 ? sum / batches : 0;
}

double est_seq_padded_mean(const est_seq_hist *h, int64_t batch, est_batching how, int64_t truncate) {
    if (!h->n || batch < 1) return 0;
    return how == EST_BATCHING_SORTED ? sorted_mean(h, batch, truncate) : random_mean(h, batch, truncate);
}
