/* PYTORCH_CUDA_ALLOC_CONF read as PyTorch reads it, and the out-of-memory
 * message (caching_allocator.h). Follows CUDAAllocatorConfig::lexArgs and
 * parseArgs (c10/cuda/CUDAAllocatorConfig.cpp, v2.6.0, lines 45-65 and
 * 260-353): the string is cut into tokens at ',' ':' '[' ']' (spaces dropped),
 * then read option by option, each followed by ',' unless it is the last. */
#include "caching_allocator.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOKENS 256
#define MIB (INT64_C(1) << 20)

typedef struct {
    const char *s[MAX_TOKENS];
    int len[MAX_TOKENS];
    int n;
    char *err;
    size_t errlen;
} tokens;

static int lex(const char *conf, tokens *t) {
    t->n = 0;
    const char *start = NULL;
    for (const char *c = conf;; c++) {
        bool sep = *c == ',' || *c == ':' || *c == '[' || *c == ']';
        bool end = *c == '\0' || sep || *c == ' ';
        if (start && end) {
            if (t->n == MAX_TOKENS) break;
            t->s[t->n] = start;
            t->len[t->n++] = (int)(c - start);
            start = NULL;
        }
        if (sep) {
            if (t->n == MAX_TOKENS) break;
            t->s[t->n] = c;
            t->len[t->n++] = 1;
        } else if (!end && !start) {
            start = c;
        }
        if (*c == '\0') return 0;
    }
    snprintf(t->err, t->errlen, "PYTORCH_CUDA_ALLOC_CONF: more than %d tokens", MAX_TOKENS);
    return -1;
}

static bool is(const tokens *t, int i, const char *word) {
    return i < t->n && t->len[i] == (int)strlen(word) && strncmp(t->s[i], word, (size_t)t->len[i]) == 0;
}

static int expect(const tokens *t, int i, const char *sep, const char *option) {
    if (is(t, i, sep)) return 0;
    snprintf(t->err, t->errlen, "PYTORCH_CUDA_ALLOC_CONF: expected '%s' after %s", sep, option);
    return -1;
}

/* A whole non-negative integer token (stoi/stoul would also take "12abc";
 * a value that is not all digits is refused here). */
static int number(const tokens *t, int i, const char *option, int64_t max, int64_t *out) {
    char buf[32];
    if (i >= t->n || t->len[i] == 0 || t->len[i] >= (int)sizeof buf) goto bad;
    memcpy(buf, t->s[i], (size_t)t->len[i]);
    buf[t->len[i]] = '\0';
    char *end;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (*end || errno || v < 0 || v > max || buf[0] == '-' || buf[0] == '+') goto bad;
    *out = v;
    return 0;
bad:
    snprintf(t->err, t->errlen, "PYTORCH_CUDA_ALLOC_CONF: %s needs a whole number up to %lld", option,
             (long long)max);
    return -1;
}

static int boolean(const tokens *t, int i, const char *option, bool *out) {
    if (is(t, i, "True") || is(t, i, "False")) {
        if (out) *out = is(t, i, "True");
        return 0;
    }
    snprintf(t->err, t->errlen, "PYTORCH_CUDA_ALLOC_CONF: expected True or False for %s", option);
    return -1;
}

static bool pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

/* max_split_size_mb and max_non_split_rounding_mb: MB over kLargeBuffer's 20
 * (parseMaxSplitSize, parseMaxNonSplitRoundingSize, lines 78-118). */
static int size_mb(const tokens *t, int *i, const char *option, int64_t *bytes) {
    int64_t mb;
    if (expect(t, ++*i, ":", option) < 0 || number(t, ++*i, option, INT64_C(1) << 30, &mb) < 0) return -1;
    if (mb <= EST_ALLOC_LARGE_BUFFER / MIB) {
        snprintf(t->err, t->errlen, "PYTORCH_CUDA_ALLOC_CONF: %s must be over 20", option);
        return -1;
    }
    *bytes = mb * MIB;
    return 0;
}

/* One `MB:N` or `>:N` of the list form (parseRoundUpPower2Divisions, lines
 * 138-217; '>' at 163-170): the first entry also fills every interval below it; '>' fills from
 * the previous entry's interval (that one included) to the end. */
static int division_entry(const tokens *t, int *i, int32_t div[], bool *first, int *last) {
    const char *o = "roundup_power2_divisions";
    int key = *i;
    int64_t n, mb = 0;
    if (expect(t, ++*i, ":", o) < 0 || number(t, ++*i, o, 1 << 30, &n) < 0) return -1;
    if (n != 0 && !pow2(n)) goto bad;
    if (is(t, key, ">")) {
        for (int k = *last; k < EST_ALLOC_ROUNDUP_INTERVALS; k++) div[k] = (int32_t)n;
        return 0;
    }
    if (number(t, key, o, INT64_C(1) << 40, &mb) < 0 || !pow2(mb)) goto bad;
    int index = 0;
    while (mb >>= 1) index++;
    if (index > EST_ALLOC_ROUNDUP_INTERVALS - 1) index = EST_ALLOC_ROUNDUP_INTERVALS - 1;
    if (*first)
        for (int k = 0; k < index; k++) div[k] = (int32_t)n;
    *first = false;
    div[index] = (int32_t)n;
    *last = index;
    return 0;
bad:
    snprintf(t->err, t->errlen, "PYTORCH_CUDA_ALLOC_CONF: roundup_power2_divisions takes powers of 2");
    return -1;
}

static int divisions(const tokens *t, int *i, int32_t div[]) {
    const char *o = "roundup_power2_divisions";
    if (expect(t, ++*i, ":", o) < 0) return -1;
    if (!is(t, ++*i, "[")) { /* one number for every interval */
        int64_t n;
        if (number(t, *i, o, 1 << 30, &n) < 0) return -1;
        if (!pow2(n)) {
            snprintf(t->err, t->errlen, "PYTORCH_CUDA_ALLOC_CONF: roundup_power2_divisions takes powers of 2");
            return -1;
        }
        for (int k = 0; k < EST_ALLOC_ROUNDUP_INTERVALS; k++) div[k] = (int32_t)n;
        return 0;
    }
    bool first = true;
    int last = 0;
    while (++*i < t->n && !is(t, *i, "]")) {
        if (division_entry(t, i, div, &first, &last) < 0) return -1;
        if (!is(t, *i + 1, "]") && expect(t, ++*i, ",", o) < 0) return -1;
    }
    if (*i >= t->n) return expect(t, *i, "]", o);
    return 0;
}

/* The options that simulate nothing different here. */
static int ignored(const tokens *t, int *i) {
    int64_t v;
    if (is(t, *i, "garbage_collection_threshold")) { /* acts only under a memory fraction */
        if (expect(t, ++*i, ":", "garbage_collection_threshold") < 0) return -1;
        double x = ++*i < t->n ? strtod(t->s[*i], NULL) : 0;
        if (!(x > 0 && x < 1)) {
            snprintf(t->err, t->errlen, "PYTORCH_CUDA_ALLOC_CONF: garbage_collection_threshold is between 0 and 1");
            return -1;
        }
        return 0;
    }
    if (is(t, *i, "backend")) {
        if (expect(t, ++*i, ":", "backend") < 0) return -1;
        if (is(t, ++*i, "native")) return 0;
        snprintf(t->err, t->errlen, "PYTORCH_CUDA_ALLOC_CONF: only backend:native is simulated");
        return -1;
    }
    if (is(t, *i, "pinned_num_register_threads"))
        return expect(t, ++*i, ":", "pinned_num_register_threads") < 0 ? -1
               : number(t, ++*i, "pinned_num_register_threads", 128, &v);
    const char *flags[] = {"release_lock_on_cudamalloc", "release_lock_on_hipmalloc", "pinned_use_cuda_host_register",
                           "pinned_use_hip_host_register", "pinned_use_background_threads"};
    for (size_t k = 0; k < sizeof flags / sizeof flags[0]; k++)
        if (is(t, *i, flags[k]))
            return expect(t, ++*i, ":", flags[k]) < 0 ? -1 : boolean(t, ++*i, flags[k], NULL);
    snprintf(t->err, t->errlen, "PYTORCH_CUDA_ALLOC_CONF: unknown option \"%.*s\"", t->len[*i], t->s[*i]);
    return -1;
}

static int option(tokens *t, int *i, est_alloc_config *c) {
    if (is(t, *i, "max_split_size_mb")) return size_mb(t, i, "max_split_size_mb", &c->max_split_size_bytes);
    if (is(t, *i, "max_non_split_rounding_mb")) {
        if (c->torch_version && c->torch_version < 206) {
            snprintf(t->err, t->errlen, "PYTORCH_CUDA_ALLOC_CONF: max_non_split_rounding_mb needs torch 2.6 or later");
            return -1;
        }
        return size_mb(t, i, "max_non_split_rounding_mb", &c->max_non_split_rounding_bytes);
    }
    if (is(t, *i, "roundup_power2_divisions")) return divisions(t, i, c->roundup_power2_divisions);
    if (is(t, *i, "expandable_segments"))
        return expect(t, ++*i, ":", "expandable_segments") < 0 ? -1
               : boolean(t, ++*i, "expandable_segments", &c->expandable_segments);
    return ignored(t, i);
}

int est_alloc_config_parse(const char *conf, est_alloc_config *cfg, char *err, size_t errlen) {
    tokens t = {.err = err, .errlen = errlen};
    if (!conf) conf = "";
    if (lex(conf, &t) < 0) return -1;
    est_alloc_config c = *cfg;
    /* parseArgs starts from these defaults every time (lines 261-264). */
    c.max_split_size_bytes = 0;
    memset(c.roundup_power2_divisions, 0, sizeof c.roundup_power2_divisions);
    for (int i = 0; i < t.n; i++) {
        if (option(&t, &i, &c) < 0) return -1;
        if (i + 1 < t.n && expect(&t, ++i, ",", "an option") < 0) return -1;
    }
    *cfg = c;
    return 0;
}

/* format_size of CUDACachingAllocator.cpp: bytes, KiB, MiB or GiB, two decimals. */
static void format_size(int64_t bytes, char *buf, size_t len) {
    double b = (double)bytes;
    if (bytes <= 1024) snprintf(buf, len, "%lld bytes", (long long)bytes);
    else if (bytes <= 1048576) snprintf(buf, len, "%.2f KiB", b / 1024.0);
    else if (bytes <= INT64_C(1073741824)) snprintf(buf, len, "%.2f MiB", b / 1048576.0);
    else snprintf(buf, len, "%.2f GiB", b / 1073741824.0);
}

void est_alloc_oom_message(const est_alloc *a, char *buf, size_t len) {
    const est_alloc_oom *o = est_alloc_last_oom(a);
    char seg[32], req[32], alloc[32], unalloc[32], cap[32];
    format_size(o->segment_bytes, seg, sizeof seg);
    format_size(o->requested_bytes, req, sizeof req);
    format_size(o->allocated_bytes, alloc, sizeof alloc);
    format_size(o->reserved_bytes - o->allocated_bytes, unalloc, sizeof unalloc);
    format_size(o->capacity_bytes, cap, sizeof cap);
    snprintf(buf, len,
             "CUDA out of memory (simulated). Tried to allocate %s (a %s tensor on stream %d) with %s for the "
             "allocator. Of the allocated memory %s is allocated by PyTorch, and %s is reserved by PyTorch but "
             "unallocated.",
             seg, req, (int)o->stream, cap, alloc, unalloc);
}
