/* PyTorch's CUDA caching allocator, simulated (caching_allocator.h).
 *
 * The functions below are PyTorch's DeviceCachingAllocator methods of the same
 * names, c10/cuda/CUDACachingAllocator.cpp in the v2.6.0 release; each comment
 * gives the lines it follows. The later main-branch code read for this (a
 * templated allocator shared by every device, with AcceleratorAllocatorConfig)
 * and the 2.3/2.4-era main code keep the same rules; docs/method.md, "The
 * caching allocator", says what differs and what is left out (CUDA graph
 * pools, garbage collection under a memory fraction, IPC).
 *
 * State: blocks live in one array and are named by index. A segment is a
 * doubly linked list of blocks tiling its address range (Block::prev/next).
 * Each (stream, pool) has a set of free mapped blocks ordered by (size, address)
 * -- BlockPool::blocks, whose comparator orders by stream first, so one set per
 * stream is the same order -- and, under expandable segments, a set of unmapped
 * ranges ordered by address (BlockPool::unmapped). The sets are sorted arrays:
 * a step's free lists hold tens to hundreds of blocks.
 *
 * Addresses are simulated: segments are laid out one after another and never
 * reused, where cudaMalloc may hand back a freed range. Addresses only break
 * ties between free blocks of equal size. */
#include "caching_allocator.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ST_FREE, ST_ALLOCATED, ST_PENDING, ST_UNMAPPED, ST_DEAD };
enum { POOL_SMALL, POOL_LARGE };

/* Requests above this are refused as input errors (1 PiB: no card comes close,
 * and it keeps every sum below int64's range). */
#define MAX_REQUEST_BYTES (INT64_C(1) << 50)
#define ROOMY_DEVICE_BYTES (INT64_C(1) << 40)

typedef struct {
    int64_t addr, size;
    int64_t requested; /* the tensor's bytes while allocated or pending */
    int32_t prev, next; /* neighbours in the segment, -1 none; a dead block's next links the free slots */
    int32_t seg;        /* expandable segment, -1 for a cudaMalloc'd segment */
    uint32_t gen;       /* bumped whenever the slot is reused: stale handles are refused */
    uint64_t uses;      /* record_stream uses while allocated, as stream-slot bits */
    uint8_t slot, pool, state;
    uint8_t events;     /* outstanding events of a pending block */
} blk;

/* A set's entry: its sort key and the block, in 128 bits: the size (free
 * sets; 0 in the unmapped ones), then the address, then the block index, so
 * that the order is (size, address) and one move shifts an entry whole.
 * Sizes and addresses are multiples of 512 (round_size, segments and pages
 * are), so 512-byte units fit: sizes below 2^56 bytes (the largest capacity
 * config_check accepts), addresses below 2^62 (address_room), and block
 * indices below 2^27 (reserve_for_op). */
__extension__ typedef unsigned __int128 u128;
#define KEY_SIZE_SHIFT 80
#define KEY_ADDR_SHIFT 27
#define KEY_IDX_MASK ((UINT64_C(1) << KEY_ADDR_SHIFT) - 1)
#define MAX_BLOCKS ((int64_t)KEY_IDX_MASK)

typedef struct {
    u128 *key;    /* sorted */
    int32_t n, cap;
} bset;

typedef struct {
    int32_t stream;
    bset free_[2];    /* BlockPool::blocks: free mapped blocks by (size, address) */
    bset unmapped[2]; /* BlockPool::unmapped: unmapped ranges by address */
} sslot;

typedef struct {
    int64_t base, page;
    bool live;
} xseg;

typedef struct {
    int32_t block;
    uint8_t slot;
} pevent;

typedef struct {
    int64_t size, alloc_size;
    int32_t stream, block;
    int32_t pos; /* the block's place in its free set when found there, else -1 */
    uint8_t slot, pool;
} params;

struct est_alloc {
    est_alloc_config cfg;
    int64_t max_split;      /* INT64_MAX when unlimited (PyTorch: SIZE_MAX) */
    int64_t rounding_limit; /* max_non_split_rounding_size */
    int64_t addr_space;     /* address space of one expandable segment */
    blk *b;
    int32_t nb, capb, dead;
    sslot slots[EST_ALLOC_MAX_STREAMS];
    int nslots, last_slot;
    xseg *xs;
    int32_t nxs, capxs;
    pevent *ev;
    int32_t nev, capev;
    int32_t *tmp;
    int32_t captmp;
    int32_t set_cap;        /* every used set holds room for this many entries */
    int64_t n_free, n_unmapped; /* entries in all free sets, all unmapped sets */
    int64_t next_addr;
    est_alloc_stats st;
    est_alloc_oom oom;
    char err[200];
};

/* ------------------------------------------------------------ small helpers */

__attribute__((format(printf, 3, 4))) static int fail(est_alloc *a, int status, const char *fmt, ...);

static int fail(est_alloc *a, int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->err, sizeof a->err, fmt, ap);
    va_end(ap);
    return status;
}

/* A statistic of all pools and of `pool` changes by delta; a peak can only
 * rise with a positive change (stat_down skips it). */
static inline void stat_add(est_alloc_stat s[EST_ALLOC_POOL_KINDS], int pool, int64_t delta) {
    est_alloc_stat *all = &s[EST_ALLOC_ALL], *one = &s[pool == POOL_SMALL ? EST_ALLOC_SMALL_POOL : EST_ALLOC_LARGE_POOL];
    all->current += delta;
    one->current += delta;
    all->peak = all->current > all->peak ? all->current : all->peak;
    one->peak = one->current > one->peak ? one->current : one->peak;
}

static inline void stat_down(est_alloc_stat s[EST_ALLOC_POOL_KINDS], int pool, int64_t delta) {
    s[EST_ALLOC_ALL].current -= delta;
    s[pool == POOL_SMALL ? EST_ALLOC_SMALL_POOL : EST_ALLOC_LARGE_POOL].current -= delta;
}

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

static bool is_pow2(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

static int log2_floor(int64_t x) { return 63 - __builtin_clzll((unsigned long long)x); }

static int grow(void **v, int32_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) return 0;
    int64_t c = *cap ? 2 * (int64_t)*cap : 16;
    if (c < need) c = need;
    if (c > INT32_MAX) return -1;
    void *p = realloc(*v, (size_t)c * elem);
    if (!p) return -1;
    *v = p;
    *cap = (int32_t)c;
    return 0;
}

/* ---------------------------------------------------- ordered sets of blocks */

static u128 key_of(int64_t size, int64_t addr, int32_t idx) {
    return (u128)(uint64_t)(size >> 9) << KEY_SIZE_SHIFT | (u128)(uint64_t)(addr >> 9) << KEY_ADDR_SHIFT |
           (uint64_t)idx;
}
static int64_t key_size(u128 k) { return (int64_t)(uint64_t)(k >> KEY_SIZE_SHIFT) << 9; }
static int32_t key_idx(u128 k) { return (int32_t)((uint64_t)k & KEY_IDX_MASK); }

/* First position whose key is not below `key`. Branch-free halving: the
 * comparisons of a best-fit search are unpredictable, and mispredicted
 * branches were most of its cost. */
static int32_t bset_lower(const bset *s, u128 key) {
    if (s->n == 0) return 0;
    const u128 *base = s->key;
    int32_t n = s->n;
    while (n > 1) {
        int32_t half = n / 2;
        base = base[half] < key ? base + half : base;
        n -= half;
    }
    return (int32_t)(base - s->key) + (*base < key);
}

static void bset_shift(bset *s, int32_t to, int32_t from, int32_t count) {
    memmove(&s->key[to], &s->key[from], (size_t)count * sizeof *s->key);
}

static void bset_erase_at(est_alloc *a, bset *s, bool unmapped, int32_t i) {
    bset_shift(s, i, i + 1, s->n - i - 1);
    s->n--;
    if (unmapped) a->n_unmapped--;
    else a->n_free--;
}

/* The entry at position i of a free set now stands for block idx with a new
 * key: one shift of the entries between its old and new places, where an
 * erase and an insert would each move half the set. */
static void bset_rekey(bset *s, int32_t i, int64_t size, int64_t addr, int32_t idx) {
    u128 key = key_of(size, addr, idx);
    int32_t j = bset_lower(s, key); /* counts the stale entry i when it is below */
    if (j > i) bset_shift(s, i, i + 1, --j - i);
    else if (j < i) bset_shift(s, j + 1, j, i - j);
    s->key[j] = key;
}

static bool block_unmapped(const est_alloc *a, int32_t idx) { return a->b[idx].state == ST_UNMAPPED; }

static bset *set_of(est_alloc *a, int32_t idx) {
    const blk *k = &a->b[idx];
    sslot *s = &a->slots[k->slot];
    return k->state == ST_UNMAPPED ? &s->unmapped[k->pool] : &s->free_[k->pool];
}

static u128 set_key(const est_alloc *a, int32_t idx) {
    const blk *k = &a->b[idx];
    return key_of(k->state == ST_UNMAPPED ? 0 : k->size, k->addr, idx);
}

/* A set holds at most one entry per live block, and reserve_for_op keeps every
 * set's room at the block array's, so this never grows the array. */
static void set_insert(est_alloc *a, int32_t idx) {
    bset *s = set_of(a, idx);
    u128 key = set_key(a, idx);
    int32_t i = bset_lower(s, key);
    bset_shift(s, i + 1, i, s->n - i);
    s->key[i] = key;
    s->n++;
    if (block_unmapped(a, idx)) a->n_unmapped++;
    else a->n_free++;
}

static void set_erase(est_alloc *a, int32_t idx) {
    bset *s = set_of(a, idx);
    int32_t i = bset_lower(s, set_key(a, idx));
    if (i < s->n && key_idx(s->key[i]) == idx) bset_erase_at(a, s, block_unmapped(a, idx), i);
}

/* ------------------------------------------------------------------- blocks */

static int32_t blk_new(est_alloc *a, int64_t addr, int64_t size, int32_t seg, uint8_t slot,
                       uint8_t pool, uint8_t state) {
    int32_t idx;
    if (a->dead >= 0) {
        idx = a->dead;
        a->dead = a->b[idx].next;
    } else {
        idx = a->nb++;
        a->b[idx].gen = 0;
    }
    blk *k = &a->b[idx];
    uint32_t gen = k->gen + 1;
    *k = (blk){.addr = addr, .size = size, .prev = -1, .next = -1, .seg = seg, .gen = gen,
               .slot = slot, .pool = pool, .state = state};
    return idx;
}

static void blk_kill(est_alloc *a, int32_t idx) {
    a->b[idx].state = ST_DEAD;
    a->b[idx].next = a->dead;
    a->dead = idx;
}

/* Block::splice: `idx` goes between `before` and `after`. */
static void splice(est_alloc *a, int32_t idx, int32_t before, int32_t after) {
    a->b[idx].prev = before;
    a->b[idx].next = after;
    if (before >= 0) a->b[before].next = idx;
    if (after >= 0) a->b[after].prev = idx;
}

/* Every set of a slot gets room for a->set_cap entries. */
static int grow_slot_sets(est_alloc *a, int slot) {
    for (int p = 0; p < 2; p++) {
        bset *f = &a->slots[slot].free_[p], *u = &a->slots[slot].unmapped[p];
        if (grow((void **)&f->key, &f->cap, a->set_cap, sizeof *f->key) < 0 ||
            grow((void **)&u->key, &u->cap, a->set_cap, sizeof *u->key) < 0)
            return -1;
    }
    return 0;
}

/* Room for the worst any one call can do, reserved before it changes anything,
 * so that no call stops half-way on a failed host allocation: release_cached
 * may unmap every free block (two new blocks each), a malloc then maps and
 * splits a few more, and every pending free may return a block to its set.
 * The sets and the scratch list get as much room as the block array. */
static int reserve_for_op(est_alloc *a, int64_t new_events) {
    int64_t need = (int64_t)a->nb + 2 * a->n_free + a->n_unmapped + a->nev + 8;
    if (need <= a->capb && a->nev + new_events <= a->capev && a->nxs + 2 <= a->capxs) return 0;
    if (need > MAX_BLOCKS) return fail(a, EST_ALLOC_ENOMEM, "more than %lld blocks", (long long)MAX_BLOCKS);
    if (grow((void **)&a->b, &a->capb, need, sizeof *a->b) < 0 ||
        grow((void **)&a->ev, &a->capev, (int64_t)a->nev + new_events, sizeof *a->ev) < 0 ||
        grow((void **)&a->xs, &a->capxs, (int64_t)a->nxs + 2, sizeof *a->xs) < 0 ||
        grow((void **)&a->tmp, &a->captmp, a->capb, sizeof *a->tmp) < 0)
        return fail(a, EST_ALLOC_ENOMEM, "out of host memory");
    a->set_cap = a->capb;
    for (int s = 0; s < a->nslots; s++)
        if (grow_slot_sets(a, s) < 0) return fail(a, EST_ALLOC_ENOMEM, "out of host memory");
    return 0;
}

/* The slot of a stream id, created on first use when `create`; -1 if unknown
 * or when all EST_ALLOC_MAX_STREAMS slots are taken. */
static int slot_of(est_alloc *a, int32_t stream, bool create) {
    if (a->last_slot < a->nslots && a->slots[a->last_slot].stream == stream) return a->last_slot;
    for (int s = 0; s < a->nslots; s++)
        if (a->slots[s].stream == stream) return a->last_slot = s;
    if (!create || a->nslots == EST_ALLOC_MAX_STREAMS) return -1;
    sslot *s = &a->slots[a->nslots];
    s->stream = stream;
    for (int p = 0; p < 2; p++) s->free_[p].n = s->unmapped[p].n = 0;
    if (grow_slot_sets(a, a->nslots) < 0) return -2;
    return a->last_slot = a->nslots++;
}

/* Whether the simulated address space has room for `bytes` more: it never runs
 * out in any real replay (2^62 bytes), but a failed device allocation is the
 * answer if it would, rather than an overflow. */
static bool address_room(const est_alloc *a, int64_t bytes) {
    return a->next_addr <= (INT64_C(1) << 62) - bytes - EST_ALLOC_SMALL_BUFFER;
}

/* A simulated address range for a new segment (2 MiB aligned, like cudaMalloc's). */
static int64_t bump(est_alloc *a, int64_t bytes) {
    int64_t addr = a->next_addr;
    a->next_addr += round_up(bytes, EST_ALLOC_SMALL_BUFFER);
    return addr;
}

/* -------------------------------------------------------------- sizes (rules) */

/* roundup_power2_next_division, lines 2043-2061: the next of `divisions` equal
 * steps between the powers of two around size. */
static int64_t roundup_power2_next_division(int64_t size, int64_t divisions) {
    if (is_pow2(size)) return size;
    int64_t floor2 = INT64_C(1) << log2_floor(size);
    int64_t step = floor2 >> log2_floor(divisions);
    if (step == 0) return floor2 << 1;
    int64_t down = size & ~(step - 1);
    return down == size ? size : down + step;
}

/* round_size, lines 2063-2074; the interval of a size is
 * CUDAAllocatorConfig::roundup_power2_divisions(size), CUDAAllocatorConfig.cpp
 * lines 26-43 (log2 of the size less 20, clamped to the 16 intervals). */
static int64_t round_size(const est_alloc *a, int64_t size) {
    if (size < EST_ALLOC_MIN_BLOCK) return EST_ALLOC_MIN_BLOCK;
    int interval = log2_floor(size) - 20;
    if (interval < 0) interval = 0;
    if (interval > EST_ALLOC_ROUNDUP_INTERVALS - 1) interval = EST_ALLOC_ROUNDUP_INTERVALS - 1;
    int64_t divisions = a->cfg.roundup_power2_divisions[interval];
    if (divisions > 1 && size > EST_ALLOC_MIN_BLOCK * divisions)
        return roundup_power2_next_division(size, divisions);
    return round_up(size, EST_ALLOC_MIN_BLOCK);
}

/* get_allocation_size, lines 2550-2558: the segment a new request gets. */
static int64_t allocation_size(int64_t size) {
    if (size <= EST_ALLOC_SMALL_SIZE) return EST_ALLOC_SMALL_BUFFER;
    if (size < EST_ALLOC_MIN_LARGE_ALLOC) return EST_ALLOC_LARGE_BUFFER;
    return round_up(size, EST_ALLOC_ROUND_LARGE);
}

/* should_split, lines 2540-2548. */
static bool should_split(const est_alloc *a, int32_t idx, int64_t size) {
    int64_t remaining = a->b[idx].size - size;
    if (a->b[idx].pool == POOL_SMALL || a->cfg.expandable_segments) return remaining >= EST_ALLOC_MIN_BLOCK;
    return size < a->max_split && remaining > EST_ALLOC_SMALL_SIZE;
}

/* ------------------------------------------------------- merging and freeing */

/* The link surgery of try_merge_blocks (lines 2474-2505): the neighbour src
 * folds into dst and goes. */
static void absorb(est_alloc *a, int32_t dst, int32_t src) {
    blk *s = &a->b[src], *d = &a->b[dst];
    if (d->prev == src) {
        d->addr = s->addr;
        d->prev = s->prev;
        if (d->prev >= 0) a->b[d->prev].next = dst;
    } else {
        d->next = s->next;
        if (d->next >= 0) a->b[d->next].prev = dst;
    }
    d->size += s->size;
    blk_kill(a, src);
}

/* try_merge_blocks, lines 2474-2505: a free or unmapped neighbour, mapped as
 * dst is, folds into dst. Returns the bytes subsumed, or 0. */
static int64_t try_merge(est_alloc *a, int32_t dst, int32_t src) {
    if (src < 0) return 0;
    const blk *s = &a->b[src], *d = &a->b[dst];
    if (s->state != ST_FREE && s->state != ST_UNMAPPED) return 0;
    if ((s->state == ST_UNMAPPED) != (d->state == ST_UNMAPPED)) return 0;
    int64_t subsumed = s->size;
    set_erase(a, src);
    absorb(a, dst, src);
    return subsumed;
}

/* free_block, lines 2397-2470: the block returns to its (stream, pool) set,
 * merged with free neighbours (try_merge_blocks, whose conditions make a
 * mapped block merge only with free mapped ones); active bytes drop now (not
 * at the release request when events were pending). The first merged
 * neighbour's set entry is re-keyed for the merged block. */
static void free_block(est_alloc *a, int32_t idx) {
    blk *k = &a->b[idx];
    int64_t orig = k->size, requested = k->requested;
    int pool = k->pool;
    bset *fs = &a->slots[k->slot].free_[k->pool];
    int64_t net_blocks = 0, net_bytes = 0;
    int32_t reuse = -1;
    k->state = ST_FREE;
    k->requested = 0;
    for (int side = 0; side < 2; side++) {
        int32_t src = side ? a->b[idx].next : a->b[idx].prev;
        if (src < 0 || a->b[src].state != ST_FREE) continue;
        int32_t pos = bset_lower(fs, key_of(a->b[src].size, a->b[src].addr, src));
        if (reuse < 0) {
            reuse = pos;
        } else {
            bset_erase_at(a, fs, false, pos);
            if (pos < reuse) reuse--;
        }
        net_blocks--, net_bytes -= a->b[src].size;
        absorb(a, idx, src);
    }
    k = &a->b[idx];
    if (reuse >= 0) bset_rekey(fs, reuse, k->size, k->addr, idx);
    else set_insert(a, idx);
    if (k->prev >= 0 || k->next >= 0) net_blocks++, net_bytes += k->size;
    if (k->seg < 0) { /* expandable segments are left out of inactive_split */
        stat_add(a->st.inactive_split, pool, net_blocks);
        stat_add(a->st.inactive_split_bytes, pool, net_bytes);
    }
    stat_down(a->st.active, pool, 1);
    stat_down(a->st.active_bytes, pool, orig);
    stat_down(a->st.requested_bytes, pool, requested);
}

/* synchronize_and_free_events (lines 3077-3119) with all = true; with a slot,
 * process_events (lines 3177-3218) once that stream's events have completed.
 * Events complete in the order they were recorded. */
static void complete_events(est_alloc *a, int slot, bool sync_all) {
    if (sync_all) a->st.num_sync_all_streams++;
    int32_t kept = 0;
    for (int32_t i = 0; i < a->nev; i++) {
        pevent e = a->ev[i];
        if (slot >= 0 && e.slot != slot) {
            a->ev[kept++] = e;
            continue;
        }
        if (--a->b[e.block].events == 0) free_block(a, e.block);
    }
    a->nev = kept;
}

/* ------------------------------------------------ cudaMalloc'd segments */

/* release_block, lines 2923-2972: cudaFree of a whole cached segment. */
static void release_block(est_alloc *a, int32_t idx) {
    blk *k = &a->b[idx];
    set_erase(a, idx);
    stat_down(a->st.segment, k->pool, 1);
    stat_down(a->st.reserved_bytes, k->pool, k->size);
    a->st.num_device_free++;
    blk_kill(a, idx);
}

/* alloc_block, lines 2693-2806 (the cudaMalloc path): a new segment of
 * alloc_size, unless it would exceed the capacity. */
static bool new_segment(est_alloc *a, params *p) {
    if (a->cfg.capacity_bytes > 0 &&
        a->st.reserved_bytes[EST_ALLOC_ALL].current + p->alloc_size > a->cfg.capacity_bytes) {
        a->st.num_capacity_refusals++;
        return false;
    }
    if (!address_room(a, p->alloc_size)) return false;
    int64_t addr = bump(a, p->alloc_size);
    p->block = blk_new(a, addr, p->alloc_size, -1, p->slot, p->pool, ST_FREE);
    stat_add(a->st.segment, p->pool, 1);
    stat_add(a->st.reserved_bytes, p->pool, p->alloc_size);
    a->st.num_device_alloc++;
    return true;
}

/* ------------------------------------------------------ expandable segments */

static int64_t page_of(const est_alloc *a, int32_t idx) { return a->xs[a->b[idx].seg].page; }

/* The `allocatable` lambda of find_expandable_block: free or unmapped, no
 * pending event, no recorded stream. */
static bool allocatable(const est_alloc *a, int32_t idx) {
    return idx >= 0 && (a->b[idx].state == ST_FREE || a->b[idx].state == ST_UNMAPPED);
}

static bool has_address_space(const est_alloc *a, int32_t idx, int64_t size) {
    int64_t bytes = 0;
    while (bytes < size && allocatable(a, idx)) {
        bytes += a->b[idx].size;
        idx = a->b[idx].next;
    }
    return bytes >= size;
}

/* A new expandable segment: address space for 9/8 of the card, in pages of
 * 2 MiB (small pool) or 20 MiB (large pool), nothing mapped (lines 2272-2292,
 * and the ExpandableSegment constructor, lines 359-379). */
static int32_t new_expandable_segment(est_alloc *a, uint8_t slot, uint8_t pool) {
    int64_t page = pool == POOL_SMALL ? EST_ALLOC_SMALL_BUFFER : EST_ALLOC_LARGE_BUFFER;
    int64_t bytes = round_up(a->addr_space, page);
    if (!address_room(a, bytes)) return -1;
    int32_t seg = a->nxs++;
    a->xs[seg] = (xseg){.base = bump(a, bytes), .page = page, .live = true};
    int32_t idx = blk_new(a, a->xs[seg].base, bytes, seg, slot, pool, ST_UNMAPPED);
    set_insert(a, idx);
    a->st.expandable_segments.current++;
    if (a->st.expandable_segments.current > a->st.expandable_segments.peak)
        a->st.expandable_segments.peak = a->st.expandable_segments.current;
    return idx;
}

/* find_expandable_block, lines 2239-2293: the lowest unmapped range (with the
 * free block just before it) that has room for size, else a new segment. */
static int32_t find_expandable_block(est_alloc *a, uint8_t slot, uint8_t pool, int64_t size) {
    const bset *us = &a->slots[slot].unmapped[pool];
    for (int32_t i = 0; i < us->n; i++) {
        int32_t c = key_idx(us->key[i]);
        if (allocatable(a, a->b[c].prev)) c = a->b[c].prev;
        if (has_address_space(a, c, size)) return c;
    }
    return new_expandable_segment(a, slot, pool);
}

/* map_block, lines 2295-2361, and ExpandableSegment::map (389-426): whole pages
 * from the start of an unmapped range, merged with free neighbours. Fails when
 * the pages exceed the capacity (cuMemCreate's out-of-memory). */
static bool map_block(est_alloc *a, int32_t idx, int64_t size) {
    int64_t bytes = round_up(size, page_of(a, idx));
    if (bytes > a->b[idx].size) bytes = a->b[idx].size;
    if (a->cfg.capacity_bytes > 0 &&
        a->st.reserved_bytes[EST_ALLOC_ALL].current + bytes > a->cfg.capacity_bytes) {
        a->st.num_capacity_refusals++;
        return false;
    }
    set_erase(a, idx);
    blk *k = &a->b[idx];
    k->state = ST_FREE;
    if (bytes < k->size) {
        int32_t rest = blk_new(a, k->addr + bytes, k->size - bytes, k->seg, k->slot, k->pool, ST_UNMAPPED);
        k = &a->b[idx];
        splice(a, rest, idx, k->next);
        set_insert(a, rest);
        k->size = bytes;
    }
    try_merge(a, idx, a->b[idx].prev);
    try_merge(a, idx, a->b[idx].next);
    set_insert(a, idx);
    stat_add(a->st.reserved_bytes, a->b[idx].pool, bytes);
    a->st.num_device_alloc++;
    return true;
}

/* try_allocate_expandable_block, lines 2363-2394: map pages until a free block
 * of at least size bytes (the rounded request, not the 20 MiB segment) starts
 * at the candidate. A mapping that succeeded stays mapped if a later one fails. */
static int32_t try_allocate_expandable(est_alloc *a, const params *p) {
    if (p->size > round_up(a->addr_space, EST_ALLOC_LARGE_BUFFER)) return -1; /* beyond any segment */
    int32_t c = find_expandable_block(a, p->slot, p->pool, p->size);
    if (c < 0) return -1;
    if (a->b[c].state == ST_UNMAPPED) {
        int64_t want = a->b[c].size < p->size ? a->b[c].size : p->size;
        if (!map_block(a, c, want)) return -1;
    }
    while (a->b[c].size < p->size) {
        int32_t n = a->b[c].next;
        if (n < 0 || a->b[n].state != ST_UNMAPPED) return -1;
        int64_t want = p->size - a->b[c].size;
        if (!map_block(a, n, want < a->b[n].size ? want : a->b[n].size)) return -1;
        c = n; /* n absorbed c */
    }
    set_erase(a, c);
    return c;
}

/* unmap_block, lines 2974-3044, and ExpandableSegment::unmap (431-439): the
 * pages wholly inside a free block are unmapped; the slivers before and after
 * stay mapped as free blocks. */
static void unmap_block(est_alloc *a, int32_t idx) {
    const xseg *s = &a->xs[a->b[idx].seg];
    int64_t off = a->b[idx].addr - s->base;
    int64_t begin = (off + s->page - 1) / s->page, end = (off + a->b[idx].size) / s->page;
    if (begin >= end) return;
    int64_t un_addr = s->base + begin * s->page, un_size = (end - begin) * s->page;
    set_erase(a, idx);
    blk k = a->b[idx];
    int64_t before = un_addr - k.addr, after = k.size - before - un_size;
    if (before > 0) {
        int32_t f = blk_new(a, k.addr, before, k.seg, k.slot, k.pool, ST_FREE);
        splice(a, f, a->b[idx].prev, idx);
        set_insert(a, f);
    }
    if (after > 0) {
        int32_t f = blk_new(a, un_addr + un_size, after, k.seg, k.slot, k.pool, ST_FREE);
        splice(a, f, idx, a->b[idx].next);
        set_insert(a, f);
    }
    a->b[idx].addr = un_addr;
    a->b[idx].size = un_size;
    a->b[idx].state = ST_UNMAPPED;
    try_merge(a, idx, a->b[idx].prev);
    try_merge(a, idx, a->b[idx].next);
    set_insert(a, idx);
    stat_down(a->st.reserved_bytes, k.pool, un_size);
    a->st.num_device_free++;
}

/* release_expandable_segment, lines 2907-2921: a segment with nothing mapped goes. */
static void release_expandable_segment(est_alloc *a, int32_t idx) {
    set_erase(a, idx);
    a->xs[a->b[idx].seg].live = false;
    a->st.expandable_segments.current--;
    blk_kill(a, idx);
}

/* ------------------------------------------------------- releasing the cache */

/* release_blocks, lines 3045-3069: every cached segment with nothing allocated
 * goes back (cudaFree); under expandable segments every free page is unmapped
 * and a segment left with nothing mapped is released. */
static void release_blocks(est_alloc *a, int pool) {
    for (int s = 0; s < a->nslots; s++) {
        bset *fs = &a->slots[s].free_[pool];
        if (!a->cfg.expandable_segments) {
            for (int32_t i = 0; i < fs->n;) {
                int32_t idx = key_idx(fs->key[i]);
                if (a->b[idx].prev < 0 && a->b[idx].next < 0) release_block(a, idx);
                else i++;
            }
            continue;
        }
        int32_t n = fs->n;
        for (int32_t i = 0; i < n; i++) a->tmp[i] = key_idx(fs->key[i]);
        for (int32_t i = 0; i < n; i++) {
            int32_t idx = a->tmp[i];
            unmap_block(a, idx);
            if (a->b[idx].state == ST_UNMAPPED && a->b[idx].prev < 0 && a->b[idx].next < 0)
                release_expandable_segment(a, idx);
        }
    }
}

/* release_cached_blocks, lines 2859-2905 (no private pools): wait for every
 * pending free, then release the large pool and the small pool. */
static void release_cached(est_alloc *a) {
    complete_events(a, -1, true);
    release_blocks(a, POOL_LARGE);
    release_blocks(a, POOL_SMALL);
}

/* release_available_cached_blocks, lines 2811-2857: with max_split_size set,
 * cudaFree the smallest oversize cached block that covers the request, else
 * the largest ones until their sum does. Expandable blocks are skipped (2.6;
 * earlier releases assert on them). */
static bool release_available(est_alloc *a, const params *p) {
    if (a->max_split == INT64_MAX) return false;
    bset *fs = &a->slots[p->slot].free_[p->pool];
    int64_t key = p->size < a->max_split ? a->max_split : p->size;
    int32_t i = bset_lower(fs, key_of(key, 0, 0));
    if (i < fs->n && a->b[key_idx(fs->key[i])].seg < 0) {
        release_block(a, key_idx(fs->key[i]));
        return true;
    }
    if (i == 0) return false;
    int64_t released = 0;
    for (int32_t j = i - 1; released < key && key_size(fs->key[j]) >= a->max_split; j--) {
        int32_t idx = key_idx(fs->key[j]);
        if (a->b[idx].seg < 0) {
            released += a->b[idx].size;
            release_block(a, idx);
        }
        if (j == 0) break;
    }
    return released >= key;
}

/* --------------------------------------------------------- finding a block */

/* What a free expandable block could grow to: itself and the unmapped range
 * after it (the expandable_size lambda of get_free_block). */
static int64_t expandable_size(const est_alloc *a, int32_t idx) {
    int32_t n = a->b[idx].next;
    return a->b[idx].size + (n >= 0 && a->b[n].state == ST_UNMAPPED ? a->b[n].size : 0);
}

/* get_free_block, lines 2560-2618: best fit in the (stream, pool) set; an
 * oversize block (>= max_split_size) serves only a request that is itself
 * oversize and at most max_non_split_rounding smaller. */
static bool get_free_block(est_alloc *a, params *p) {
    bset *fs = &a->slots[p->slot].free_[p->pool];
    int32_t i = bset_lower(fs, key_of(p->size, 0, 0));
    if (i == fs->n) return false;
    if (a->cfg.expandable_segments)
        while (i + 1 < fs->n && expandable_size(a, key_idx(fs->key[i + 1])) < expandable_size(a, key_idx(fs->key[i])))
            i++;
    int64_t got = key_size(fs->key[i]);
    if (p->size < a->max_split && got >= a->max_split) return false;
    if (p->size >= a->max_split && got >= p->size + a->rounding_limit) return false;
    p->block = key_idx(fs->key[i]);
    p->pos = i; /* left in the set: alloc_found_block re-keys it for the remainder or erases it */
    return true;
}

/* alloc_block, lines 2693-2806. */
static bool alloc_block(est_alloc *a, params *p, bool retry) {
    if (retry) a->st.num_alloc_retries++;
    if (!a->cfg.expandable_segments) return new_segment(a, p);
    int32_t idx = try_allocate_expandable(a, p);
    if (idx < 0) return false;
    p->block = idx;
    return true;
}

/* alloc_found_block, lines 1371-1467: the front of the block serves the
 * request; the rest (when should_split) stays cached in the same set. */
static int32_t alloc_found_block(est_alloc *a, const params *p, int64_t bytes, bool split) {
    int32_t idx = p->block;
    bool already_split = a->b[idx].prev >= 0 || a->b[idx].next >= 0;
    bool counted = a->b[idx].seg < 0; /* inactive_split leaves expandable segments out */
    int pool = p->pool;
    bset *fs = &a->slots[p->slot].free_[p->pool];
    if (split) {
        blk k = a->b[idx];
        int32_t front = blk_new(a, k.addr, p->size, k.seg, k.slot, k.pool, ST_FREE);
        splice(a, front, k.prev, idx);
        a->b[idx].addr += p->size;
        a->b[idx].size -= p->size;
        if (p->pos >= 0) bset_rekey(fs, p->pos, a->b[idx].size, a->b[idx].addr, idx);
        else set_insert(a, idx);
        if (counted && already_split) {
            stat_down(a->st.inactive_split_bytes, pool, p->size);
        } else if (counted) {
            stat_add(a->st.inactive_split_bytes, pool, a->b[idx].size);
            stat_add(a->st.inactive_split, pool, 1);
        }
        idx = front;
    } else {
        if (p->pos >= 0) bset_erase_at(a, fs, false, p->pos);
        if (already_split && counted) {
            stat_down(a->st.inactive_split_bytes, pool, a->b[idx].size);
            stat_down(a->st.inactive_split, pool, 1);
        }
    }
    blk *k = &a->b[idx];
    k->state = ST_ALLOCATED;
    k->requested = bytes;
    k->uses = 0;
    stat_add(a->st.allocation, pool, 1);
    stat_add(a->st.allocated_bytes, pool, k->size);
    stat_add(a->st.active, pool, 1);
    stat_add(a->st.active_bytes, pool, k->size);
    stat_add(a->st.requested_bytes, pool, bytes);
    return idx;
}

/* ------------------------------------------------------------------ the API */

void est_alloc_config_default(est_alloc_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->torch_version = 206;
}

int est_alloc_version_parse(const char *torch, int *version, char *err, size_t errlen) {
    int major = 0, minor = 0, used = 0;
    if (!torch || sscanf(torch, "%d.%d%n", &major, &minor, &used) != 2 || major != 2 || minor < 2 ||
        minor > 99 || (torch[used] && torch[used] != '.' && torch[used] != '+')) {
        snprintf(err, errlen, "torch version \"%s\": the allocator is simulated for 2.2 to 2.99",
                 torch ? torch : "(none)");
        return -1;
    }
    *version = major * 100 + minor;
    return 0;
}

static int config_check(const est_alloc_config *c, char *err, size_t errlen) {
    int v = c->torch_version ? c->torch_version : 206;
    if (v < 202 || v > 299) {
        snprintf(err, errlen, "torch_version %d: the allocator is simulated for 2.2 to 2.99", v);
        return -1;
    }
    if (c->max_split_size_bytes != 0 && c->max_split_size_bytes <= EST_ALLOC_LARGE_BUFFER) {
        snprintf(err, errlen, "max_split_size must be over 20 MiB (CUDAAllocatorConfig::parseMaxSplitSize)");
        return -1;
    }
    if (c->max_non_split_rounding_bytes != 0 && v < 206) {
        snprintf(err, errlen, "max_non_split_rounding_mb needs torch 2.6 or later (this is %d.%d)", v / 100, v % 100);
        return -1;
    }
    if (c->max_non_split_rounding_bytes != 0 && c->max_non_split_rounding_bytes <= EST_ALLOC_LARGE_BUFFER) {
        snprintf(err, errlen, "max_non_split_rounding must be over 20 MiB (CUDAAllocatorConfig.cpp)");
        return -1;
    }
    for (int i = 0; i < EST_ALLOC_ROUNDUP_INTERVALS; i++) {
        int32_t d = c->roundup_power2_divisions[i];
        if (d != 0 && !is_pow2(d)) {
            snprintf(err, errlen, "roundup_power2_divisions: %d is not 0 or a power of 2", (int)d);
            return -1;
        }
    }
    if (c->capacity_bytes < 0 || c->device_bytes < 0 || c->device_bytes > MAX_REQUEST_BYTES ||
        c->capacity_bytes > MAX_REQUEST_BYTES * 64) {
        snprintf(err, errlen, "capacity and device bytes must be between 0 and 1 PiB");
        return -1;
    }
    return 0;
}

int est_alloc_reconfigure(est_alloc *a, const est_alloc_config *cfg, char *err, size_t errlen) {
    if (config_check(cfg, err, errlen) < 0) return -1;
    a->cfg = *cfg;
    if (!a->cfg.torch_version) a->cfg.torch_version = 206;
    a->max_split = cfg->max_split_size_bytes ? cfg->max_split_size_bytes : INT64_MAX;
    a->rounding_limit = cfg->max_non_split_rounding_bytes ? cfg->max_non_split_rounding_bytes : EST_ALLOC_LARGE_BUFFER;
    int64_t device = cfg->device_bytes ? cfg->device_bytes : cfg->capacity_bytes ? cfg->capacity_bytes : ROOMY_DEVICE_BYTES;
    a->addr_space = device + device / 8;
    est_alloc_reset(a);
    return 0;
}

est_alloc *est_alloc_new(const est_alloc_config *cfg, char *err, size_t errlen) {
    if (config_check(cfg, err, errlen) < 0) return NULL;
    est_alloc *a = calloc(1, sizeof *a);
    if (!a) {
        snprintf(err, errlen, "out of host memory");
        return NULL;
    }
    est_alloc_reconfigure(a, cfg, err, errlen);
    return a;
}

void est_alloc_free(est_alloc *a) {
    if (!a) return;
    for (int s = 0; s < EST_ALLOC_MAX_STREAMS; s++)
        for (int p = 0; p < 2; p++) {
            free(a->slots[s].free_[p].key);
            free(a->slots[s].unmapped[p].key);
        }
    free(a->b);
    free(a->xs);
    free(a->ev);
    free(a->tmp);
    free(a);
}

void est_alloc_reset(est_alloc *a) {
    a->nb = 0;
    a->dead = -1;
    for (int s = 0; s < a->nslots; s++)
        for (int p = 0; p < 2; p++) a->slots[s].free_[p].n = a->slots[s].unmapped[p].n = 0;
    a->nslots = a->last_slot = 0;
    a->nxs = a->nev = 0;
    a->n_free = a->n_unmapped = 0;
    a->next_addr = EST_ALLOC_SMALL_BUFFER; /* no block at address 0 */
    memset(&a->st, 0, sizeof a->st);
    memset(&a->oom, 0, sizeof a->oom);
    a->err[0] = '\0';
}

static est_alloc_handle make_handle(const est_alloc *a, int32_t idx) {
    return ((uint64_t)a->b[idx].gen << 32) | (uint64_t)(uint32_t)(idx + 1);
}

/* The block of a live (allocated) tensor, or -1. */
static int32_t block_of(const est_alloc *a, est_alloc_handle h) {
    int64_t idx = (int64_t)(h & 0xffffffffu) - 1;
    if (idx < 0 || idx >= a->nb) return -1;
    const blk *k = &a->b[idx];
    if (k->gen != (uint32_t)(h >> 32) || k->state != ST_ALLOCATED) return -1;
    return (int32_t)idx;
}

static int record_oom(est_alloc *a, const params *p, int64_t bytes) {
    a->st.num_ooms++;
    a->oom = (est_alloc_oom){.requested_bytes = bytes, .rounded_bytes = p->size,
                             .segment_bytes = p->alloc_size, .stream = p->stream,
                             .allocated_bytes = a->st.allocated_bytes[EST_ALLOC_ALL].current,
                             .reserved_bytes = a->st.reserved_bytes[EST_ALLOC_ALL].current,
                             .capacity_bytes = a->cfg.capacity_bytes};
    return EST_ALLOC_OOM;
}

/* DeviceCachingAllocator::malloc, lines 1185-1369 (get_pool, 2507-2530: at
 * most 1 MiB after rounding is the small pool): the cache, then a new
 * segment, then (under max_split_size) freeing oversize cached blocks and
 * trying again, then releasing the whole cache and trying a last time. */
int est_alloc_malloc(est_alloc *a, int64_t bytes, int32_t stream, est_alloc_handle *out) {
    if (!out) return fail(a, EST_ALLOC_EINVAL, "malloc: no handle to fill");
    *out = EST_ALLOC_NULL;
    if (bytes < 0 || bytes > MAX_REQUEST_BYTES)
        return fail(a, EST_ALLOC_EINVAL, "malloc of %lld bytes: must be between 0 and 1 PiB", (long long)bytes);
    if (bytes == 0) return EST_ALLOC_OK;
    int slot = slot_of(a, stream, true);
    if (slot == -2) return fail(a, EST_ALLOC_ENOMEM, "out of host memory");
    if (slot < 0) return fail(a, EST_ALLOC_EINVAL, "more than %d streams", EST_ALLOC_MAX_STREAMS);
    if (reserve_for_op(a, 0) < 0) return EST_ALLOC_ENOMEM;
    params p = {.size = round_size(a, bytes), .stream = stream, .block = -1, .pos = -1, .slot = (uint8_t)slot};
    p.pool = p.size <= EST_ALLOC_SMALL_SIZE ? POOL_SMALL : POOL_LARGE;
    p.alloc_size = allocation_size(p.size);
    bool found = get_free_block(a, &p);
    if (!found)
        found = alloc_block(a, &p, false) || (release_available(a, &p) && alloc_block(a, &p, false)) ||
                (release_cached(a), alloc_block(a, &p, true));
    if (!found) return record_oom(a, &p, bytes);
    int32_t idx = alloc_found_block(a, &p, bytes, should_split(a, p.block, p.size));
    *out = make_handle(a, idx);
    return EST_ALLOC_OK;
}

/* DeviceCachingAllocator::free, lines 1469-1523, and insert_events (3139-3156):
 * one event per stream the block was used on; the block stays active until
 * they complete. */
int est_alloc_release(est_alloc *a, est_alloc_handle h) {
    if (h == EST_ALLOC_NULL) return EST_ALLOC_OK;
    int32_t idx = block_of(a, h);
    if (idx < 0) return fail(a, EST_ALLOC_EINVAL, "release: not a live tensor (freed twice?)");
    if (!a->b[idx].uses) { /* no other stream used it: back to the cache now */
        if (reserve_for_op(a, 0) < 0) return EST_ALLOC_ENOMEM;
        stat_down(a->st.allocation, a->b[idx].pool, 1);
        stat_down(a->st.allocated_bytes, a->b[idx].pool, a->b[idx].size);
        free_block(a, idx);
        return EST_ALLOC_OK;
    }
    const int uses = __builtin_popcountll(a->b[idx].uses);
    if (reserve_for_op(a, uses) < 0) return EST_ALLOC_ENOMEM;
    blk *k = &a->b[idx];
    stat_down(a->st.allocation, k->pool, 1);
    stat_down(a->st.allocated_bytes, k->pool, k->size);
    k->state = ST_PENDING;
    k->events = (uint8_t)uses;
    for (int s = 0; s < EST_ALLOC_MAX_STREAMS; s++)
        if (k->uses >> s & 1) a->ev[a->nev++] = (pevent){idx, (uint8_t)s};
    k->uses = 0;
    return EST_ALLOC_OK;
}

/* recordStream, lines 1569-1580. */
int est_alloc_record_stream(est_alloc *a, est_alloc_handle h, int32_t stream) {
    int32_t idx = block_of(a, h);
    if (idx < 0) return fail(a, EST_ALLOC_EINVAL, "record_stream: not a live tensor");
    int slot = slot_of(a, stream, true);
    if (slot == -2) return fail(a, EST_ALLOC_ENOMEM, "out of host memory");
    if (slot < 0) return fail(a, EST_ALLOC_EINVAL, "more than %d streams", EST_ALLOC_MAX_STREAMS);
    if (slot != a->b[idx].slot) a->b[idx].uses |= UINT64_C(1) << slot;
    return EST_ALLOC_OK;
}

int est_alloc_release_pending(est_alloc *a, est_alloc_handle h, int32_t use_stream) {
    if (h == EST_ALLOC_NULL) return EST_ALLOC_OK;
    int rc = est_alloc_record_stream(a, h, use_stream);
    return rc ? rc : est_alloc_release(a, h);
}

int est_alloc_sync_stream(est_alloc *a, int32_t stream) {
    int slot = slot_of(a, stream, false);
    if (slot < 0) return EST_ALLOC_OK; /* never used: nothing waits on it */
    if (reserve_for_op(a, 0) < 0) return EST_ALLOC_ENOMEM;
    complete_events(a, slot, false);
    return EST_ALLOC_OK;
}

int est_alloc_sync(est_alloc *a) {
    if (reserve_for_op(a, 0) < 0) return EST_ALLOC_ENOMEM;
    complete_events(a, -1, false);
    return EST_ALLOC_OK;
}

/* emptyCache, lines 1606-1610. */
int est_alloc_empty_cache(est_alloc *a) {
    if (reserve_for_op(a, 0) < 0) return EST_ALLOC_ENOMEM;
    release_cached(a);
    return EST_ALLOC_OK;
}

void est_alloc_stats_get(const est_alloc *a, est_alloc_stats *out) { *out = a->st; }

int64_t est_alloc_reserved_now(const est_alloc *a) { return a->st.reserved_bytes[EST_ALLOC_ALL].current; }

void est_alloc_reset_peaks(est_alloc *a) {
    est_alloc_stat *arrays[] = {a->st.allocated_bytes, a->st.active_bytes, a->st.reserved_bytes,
                                a->st.requested_bytes, a->st.inactive_split_bytes, a->st.allocation,
                                a->st.active, a->st.segment, a->st.inactive_split};
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++)
        for (int p = 0; p < EST_ALLOC_POOL_KINDS; p++) arrays[i][p].peak = arrays[i][p].current;
    a->st.expandable_segments.peak = a->st.expandable_segments.current;
}

int64_t est_alloc_block_bytes(const est_alloc *a, est_alloc_handle h) {
    int32_t idx = block_of(a, h);
    return idx < 0 ? -1 : a->b[idx].size;
}

const est_alloc_oom *est_alloc_last_oom(const est_alloc *a) { return &a->oom; }

const char *est_alloc_error(const est_alloc *a) { return a->err; }

/* ------------------------------------------------------------- invariants */

/* Sums over the blocks, per pool: what the statistics must equal. */
typedef struct {
    int64_t allocated, active, reserved, requested, split_bytes;
    int64_t n_allocated, n_active, segments, n_split, n_free, n_unmapped;
} sums;

static int check_block(const est_alloc *a, int32_t i, sums sum[2], char *err, size_t errlen) {
    const blk *k = &a->b[i];
    sums *s = &sum[k->pool];
    if (k->size <= 0 || k->slot >= a->nslots || k->pool > 1) goto bad;
    for (int side = 0; side < 2; side++) {
        int32_t n = side ? k->next : k->prev;
        if (n < 0) continue;
        const blk *o = &a->b[n];
        if (n >= a->nb || o->state == ST_DEAD || (side ? o->prev : o->next) != i || o->seg != k->seg ||
            o->pool != k->pool || o->slot != k->slot || (side ? k->addr + k->size != o->addr : o->addr + o->size != k->addr))
            goto bad;
        if ((o->state == ST_FREE || o->state == ST_UNMAPPED) && o->state == k->state) goto bad; /* unmerged */
    }
    bool mapped = k->state != ST_UNMAPPED, live = k->state == ST_ALLOCATED || k->state == ST_PENDING;
    if (k->state == ST_UNMAPPED) {
        const xseg *x = &a->xs[k->seg];
        if (k->seg < 0 || (k->addr - x->base) % x->page || k->size % x->page) goto bad;
    }
    s->reserved += mapped ? k->size : 0;
    s->allocated += k->state == ST_ALLOCATED ? k->size : 0;
    s->n_allocated += k->state == ST_ALLOCATED;
    s->active += live ? k->size : 0;
    s->n_active += live;
    s->requested += live ? k->requested : 0;
    s->segments += k->seg < 0 && k->prev < 0;
    s->n_free += k->state == ST_FREE;
    s->n_unmapped += k->state == ST_UNMAPPED;
    if (k->state == ST_FREE && k->seg < 0 && (k->prev >= 0 || k->next >= 0)) s->n_split++, s->split_bytes += k->size;
    return 0;
bad:
    snprintf(err, errlen, "block %d (state %d, %lld bytes at %lld) breaks its segment", (int)i, k->state,
             (long long)k->size, (long long)k->addr);
    return -1;
}

static int check_sets(const est_alloc *a, const sums sum[2], char *err, size_t errlen) {
    int64_t entries[2][2] = {{0, 0}, {0, 0}};
    for (int s = 0; s < a->nslots; s++)
        for (int p = 0; p < 2; p++)
            for (int u = 0; u < 2; u++) {
                const bset *set = u ? &a->slots[s].unmapped[p] : &a->slots[s].free_[p];
                entries[p][u] += set->n;
                for (int32_t j = 0; j < set->n; j++) {
                    int32_t idx = key_idx(set->key[j]);
                    const blk *k = &a->b[idx];
                    bool ordered = j == 0 || set->key[j - 1] < set->key[j];
                    if (!ordered || idx < 0 || idx >= a->nb || k->state != (u ? ST_UNMAPPED : ST_FREE) ||
                        k->slot != s || k->pool != p || set_key(a, idx) != set->key[j]) {
                        snprintf(err, errlen, "set entry %d of stream slot %d pool %d is wrong", (int)j, s, p);
                        return -1;
                    }
                }
            }
    for (int p = 0; p < 2; p++)
        if (entries[p][0] != sum[p].n_free || entries[p][1] != sum[p].n_unmapped) {
            snprintf(err, errlen, "pool %d: the sets hold %lld free and %lld unmapped blocks of %lld and %lld", p,
                     (long long)entries[p][0], (long long)entries[p][1], (long long)sum[p].n_free,
                     (long long)sum[p].n_unmapped);
            return -1;
        }
    return 0;
}

static int check_stats(const est_alloc *a, const sums sum[2], char *err, size_t errlen) {
    const est_alloc_stats *st = &a->st;
    for (int p = 0; p < 2; p++) {
        int k = p == POOL_SMALL ? EST_ALLOC_SMALL_POOL : EST_ALLOC_LARGE_POOL;
        const sums *s = &sum[p];
        int64_t got[] = {st->allocated_bytes[k].current, st->active_bytes[k].current, st->reserved_bytes[k].current,
                         st->requested_bytes[k].current, st->allocation[k].current, st->active[k].current,
                         st->segment[k].current, st->inactive_split[k].current, st->inactive_split_bytes[k].current};
        int64_t want[] = {s->allocated, s->active, s->reserved, s->requested, s->n_allocated,
                          s->n_active, s->segments, s->n_split, s->split_bytes};
        for (size_t i = 0; i < sizeof got / sizeof got[0]; i++)
            if (got[i] != want[i]) {
                snprintf(err, errlen, "pool %d statistic %d is %lld, the blocks say %lld", p, (int)i,
                         (long long)got[i], (long long)want[i]);
                return -1;
            }
    }
    if (st->reserved_bytes[EST_ALLOC_ALL].current != sum[0].reserved + sum[1].reserved ||
        st->allocated_bytes[EST_ALLOC_ALL].current != sum[0].allocated + sum[1].allocated ||
        st->active_bytes[EST_ALLOC_ALL].current != sum[0].active + sum[1].active ||
        (a->cfg.capacity_bytes > 0 && st->reserved_bytes[EST_ALLOC_ALL].current > a->cfg.capacity_bytes)) {
        snprintf(err, errlen, "the all-pools statistics disagree with the pools or exceed the capacity");
        return -1;
    }
    return 0;
}

int est_alloc_check(const est_alloc *a, char *err, size_t errlen) {
    sums sum[2];
    memset(sum, 0, sizeof sum);
    int64_t pending_events = 0;
    for (int32_t i = 0; i < a->nb; i++) {
        if (a->b[i].state == ST_DEAD) continue;
        if (check_block(a, i, sum, err, errlen) < 0) return -1;
        if (a->b[i].state == ST_PENDING) pending_events += a->b[i].events;
    }
    if (pending_events != a->nev) {
        snprintf(err, errlen, "%lld events queued, the pending blocks wait on %lld", (long long)a->nev,
                 (long long)pending_events);
        return -1;
    }
    if (check_sets(a, sum, err, errlen) < 0) return -1;
    return check_stats(a, sum, err, errlen);
}
