#include "arena.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_util.h"

const char *const tr_category_names[TR_CAT_COUNT] = {
    "params", "master", "grads", "optimizer", "activations", "logits", "comm", "workspace",
};

_Noreturn void tr_assert_fail(const char *file, int line, const char *what) {
    fprintf(stderr, "ftrain: internal error at %s:%d: %s\n", file, line, what);
    abort();
}

#define SLAB_ALIGN 64

/* calloc: large slabs come as fresh zero pages from the kernel, so memory is
 * touched only as buffers are used. malloc's 16-byte alignment is enough for
 * every element type; offsets inside a slab are 64-byte aligned. */
void *tr_host_alloc(size_t bytes) { return calloc(1, bytes ? bytes : 1); }
void tr_host_free(void *p) { free(p); }

void tr_arena_init(tr_arena *a, const char *space, const tr_mem *mem) {
    memset(a, 0, sizeof *a);
    a->space = space;
    a->mem = mem;
    ft_strlcpy(a->phase, "init", sizeof a->phase);
}

int tr_arena_plan(tr_arena *a, tr_buf *b, tr_category cat, int64_t bytes, const char *name) {
    TR_ASSERT(!a->committed && bytes >= 0 && (unsigned)cat < TR_CAT_COUNT);
    memset(b, 0, sizeof *b);
    b->cat = cat;
    b->bytes = bytes;
    b->name = name;
    if (bytes == 0) return 0;
    if (a->nbufs == a->capbufs) {
        size_t cap = a->capbufs ? a->capbufs * 2 : 64;
        tr_buf **nb = realloc(a->bufs, cap * sizeof *nb);
        if (!nb) return -1;
        a->bufs = nb;
        a->capbufs = cap;
    }
    b->offset = (a->capacity[cat] + SLAB_ALIGN - 1) / SLAB_ALIGN * SLAB_ALIGN;
    a->capacity[cat] = b->offset + bytes;
    a->bufs[a->nbufs++] = b;
    return 0;
}

int tr_arena_commit(tr_arena *a, char *err, size_t errlen) {
    TR_ASSERT(!a->committed);
    for (int c = 0; c < TR_CAT_COUNT; c++) {
        if (!a->capacity[c]) continue;
        a->slab[c] = a->mem->alloc((size_t)a->capacity[c]);
        if (!a->slab[c])
            return ft_errorf(err, errlen, "out of %s memory: cannot allocate %lld bytes for %s",
                             a->space, (long long)a->capacity[c], tr_category_names[c]);
    }
    for (size_t i = 0; i < a->nbufs; i++) a->bufs[i]->ptr = a->slab[a->bufs[i]->cat] + a->bufs[i]->offset;
    a->committed = true;
    return 0;
}

void tr_arena_free(tr_arena *a) {
    for (int c = 0; c < TR_CAT_COUNT; c++)
        if (a->slab[c]) a->mem->free(a->slab[c]);
    free(a->bufs);
    memset(a->slab, 0, sizeof a->slab);
    a->bufs = NULL;
    a->nbufs = a->capbufs = 0;
}

void tr_arena_phase(tr_arena *a, const char *label) { ft_strlcpy(a->phase, label, sizeof a->phase); }

void tr_arena_acquire(tr_arena *a, tr_buf *b) {
    if (!b->bytes) return;
    TR_ASSERT(a->committed && !b->live);
    b->live = true;
    a->live[b->cat] += b->bytes;
    a->live_total += b->bytes;
    if (a->live[b->cat] > a->peak[b->cat]) a->peak[b->cat] = a->live[b->cat];
    if (a->live_total > a->peak_total) {
        a->peak_total = a->live_total;
        memcpy(a->at_peak, a->live, sizeof a->at_peak);
        ft_strlcpy(a->peak_phase, a->phase, sizeof a->peak_phase);
    }
}

void tr_arena_release(tr_arena *a, tr_buf *b) {
    if (!b->bytes) return;
    TR_ASSERT(b->live);
    b->live = false;
    a->live[b->cat] -= b->bytes;
    a->live_total -= b->bytes;
}

void tr_arena_acquire_n(tr_arena *a, tr_buf *const *bufs, int n) {
    for (int i = 0; i < n; i++) tr_arena_acquire(a, bufs[i]);
}

void tr_arena_release_n(tr_arena *a, tr_buf *const *bufs, int n) {
    for (int i = 0; i < n; i++) tr_arena_release(a, bufs[i]);
}

int64_t tr_arena_reserved(const tr_arena *a) {
    int64_t sum = 0;
    for (int c = 0; c < TR_CAT_COUNT; c++) sum += a->capacity[c];
    return sum;
}
