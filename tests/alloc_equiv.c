/* The caching allocator simulation, made faster, must make exactly the
 * decisions it made before (docs/performance.md): random traffic replayed
 * through estimator/ledger/caching_allocator.c and through a frozen copy of it
 * as it was before (tests/alloc_ref/), operation by operation, under every
 * configuration the estimator uses and more (expandable segments,
 * max_split_size_mb with max_non_split_rounding, roundup_power2_divisions, a
 * capacity that forces the free-and-retry path, several streams with
 * record_stream, empty_cache), comparing every status, every block size and
 * handle, and every statistic, with the new allocator's invariants checked as
 * it goes. The hand-traced expectations are tests/caching_allocator.c's. */
/* the frozen copy first: its helper named fail() is a macro of check.h */
#include "alloc_ref/ref_allocator.c"

#include <check.h>
#include <string.h>

#include "caching_allocator.h"

#define MiB (INT64_C(1) << 20)
#define LIVE 600

static uint64_t next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

typedef struct mode {
    const char *name;
    bool expandable;
    int64_t max_split, rounding, capacity, device;
    int32_t divisions; /* roundup_power2_divisions for every interval; 0 none */
    int streams;       /* 1 to 3 */
} mode;

static const mode modes[] = {
    {"defaults", false, 0, 0, 0, 0, 0, 1},
    {"two streams", false, 0, 0, 0, 0, 0, 3},
    {"expandable", true, 0, 0, 0, 0, 0, 2},
    {"max_split 256 MiB", false, 256 * MiB, 0, 0, 0, 0, 2},
    {"max_split + rounding", false, 64 * MiB, 512 * MiB, 0, 0, 0, 1},
    {"power-of-two divisions", false, 0, 0, 0, 0, 4, 1},
    {"pressure 3 GiB", false, 0, 0, 3072 * MiB, 3200 * MiB, 0, 2},
    {"pressure + max_split", false, 128 * MiB, 0, 2048 * MiB, 0, 0, 1},
    {"pressure + expandable", true, 0, 0, 2048 * MiB, 2400 * MiB, 0, 2},
};

static void configure(const mode *m, est_alloc_config *c, ref_alloc_config *r) {
    est_alloc_config_default(c);
    c->expandable_segments = m->expandable;
    c->max_split_size_bytes = m->max_split;
    c->max_non_split_rounding_bytes = m->rounding;
    c->capacity_bytes = m->capacity;
    c->device_bytes = m->device;
    for (int i = 0; i < EST_ALLOC_ROUNDUP_INTERVALS; i++) c->roundup_power2_divisions[i] = m->divisions;
    memset(r, 0, sizeof *r);
    r->torch_version = c->torch_version;
    r->expandable_segments = c->expandable_segments;
    r->max_split_size_bytes = c->max_split_size_bytes;
    r->max_non_split_rounding_bytes = c->max_non_split_rounding_bytes;
    r->capacity_bytes = c->capacity_bytes;
    r->device_bytes = c->device_bytes;
    for (int i = 0; i < EST_ALLOC_ROUNDUP_INTERVALS; i++) r->roundup_power2_divisions[i] = m->divisions;
}

/* Every statistic, the same in both. */
static void same_stats(const est_alloc *a, const ref_alloc *b, const char *mode_name, int op) {
    est_alloc_stats x;
    ref_alloc_stats y;
    est_alloc_stats_get(a, &x);
    ref_alloc_stats_get(b, &y);
    ck_assert_msg(sizeof x == sizeof y && !memcmp(&x, &y, sizeof x), "%s, op %d: statistics differ", mode_name, op);
    const est_alloc_oom *o = est_alloc_last_oom(a);
    const ref_alloc_oom *p = ref_alloc_last_oom(b);
    ck_assert_msg(o->requested_bytes == p->requested_bytes && o->rounded_bytes == p->rounded_bytes &&
                      o->segment_bytes == p->segment_bytes && o->reserved_bytes == p->reserved_bytes,
                  "%s, op %d: out-of-memory details differ", mode_name, op);
}

/* Sizes a step asks for: mostly the same few shapes (a block's tensors again
 * and again), some log-uniform from 1 byte to 96 MiB, and now and then a large
 * one (a logits tensor). */
static int64_t size_of(uint64_t *seed) {
    static const int64_t shapes[] = {512, 4096, 65536, 1 * MiB, 1 * MiB + 512, 2 * MiB, 11 * MiB,
                                     16 * MiB, 44 * MiB, 64 * MiB};
    uint64_t r = next(seed) % 16;
    if (r < 8) return shapes[next(seed) % (sizeof shapes / sizeof shapes[0])];
    if (r < 15) {
        int64_t b = (int64_t)1 << (next(seed) % 27);
        return b + (int64_t)(next(seed) % (uint64_t)b);
    }
    return (int64_t)(256 + next(seed) % 768) * MiB;
}

/* One random operation on both; false when a status differs. */
static void step_both(est_alloc *a, ref_alloc *b, const mode *m, uint64_t *seed, est_alloc_handle *la,
                      ref_alloc_handle *lb, int *n, int op) {
    const uint64_t r = next(seed) % 100;
    int ra, rb;
    if ((r < 50 && *n < LIVE) || *n == 0) {
        const int64_t bytes = size_of(seed);
        const int32_t stream = (int32_t)(next(seed) % (uint64_t)m->streams) * 7;
        ra = est_alloc_malloc(a, bytes, stream, &la[*n]);
        rb = ref_alloc_malloc(b, bytes, stream, &lb[*n]);
        ck_assert_msg(ra == rb, "%s, op %d: malloc(%lld) %d vs %d", m->name, op, (long long)bytes, ra, rb);
        if (ra == EST_ALLOC_OK) {
            ck_assert_msg(la[*n] == lb[*n], "%s, op %d: handles differ", m->name, op);
            ck_assert_int_eq(est_alloc_block_bytes(a, la[*n]), ref_alloc_block_bytes(b, lb[*n]));
            (*n)++;
        }
    } else if (r < 95) {
        const int k = (int)(next(seed) % (uint64_t)*n);
        if (m->streams > 1 && r % 4 == 0) {
            const int32_t use = (int32_t)(next(seed) % (uint64_t)m->streams) * 7;
            ra = est_alloc_release_pending(a, la[k], use);
            rb = ref_alloc_release_pending(b, lb[k], use);
        } else {
            ra = est_alloc_release(a, la[k]);
            rb = ref_alloc_release(b, lb[k]);
        }
        ck_assert_msg(ra == rb && ra == EST_ALLOC_OK, "%s, op %d: release %d vs %d", m->name, op, ra, rb);
        la[k] = la[*n - 1];
        lb[k] = lb[*n - 1];
        (*n)--;
    } else if (r < 99) {
        const int32_t stream = (int32_t)(next(seed) % (uint64_t)m->streams) * 7;
        ra = r % 2 ? est_alloc_sync_stream(a, stream) : est_alloc_sync(a);
        rb = r % 2 ? ref_alloc_sync_stream(b, stream) : ref_alloc_sync(b);
        ck_assert_int_eq(ra, rb);
    } else {
        ck_assert_int_eq(est_alloc_empty_cache(a), ref_alloc_empty_cache(b));
    }
}

START_TEST(test_random_traffic_same_decisions) {
    const mode *m = &modes[_i];
    est_alloc_config ca;
    ref_alloc_config cb;
    configure(m, &ca, &cb);
    char err[256];
    est_alloc *a = est_alloc_new(&ca, err, sizeof err);
    ck_assert_msg(a != NULL, "%s", err);
    ref_alloc *b = ref_alloc_new(&cb, err, sizeof err);
    ck_assert_msg(b != NULL, "%s", err);
    static est_alloc_handle la[LIVE];
    static ref_alloc_handle lb[LIVE];
    for (int round = 0; round < 3; round++) { /* the second and third reuse the buffers */
        uint64_t seed = 0x9E3779B97F4A7C15ull * (uint64_t)(round + 1) + (uint64_t)_i;
        int n = 0;
        est_alloc_reset(a);
        ref_alloc_reset(b);
        for (int op = 0; op < 40000; op++) {
            step_both(a, b, m, &seed, la, lb, &n, op);
            if (op % 97 == 0) same_stats(a, b, m->name, op);
            if (op % 1999 == 0) ck_assert_msg(est_alloc_check(a, err, sizeof err) == 0, "%s: %s", m->name, err);
        }
        same_stats(a, b, m->name, -1);
        est_alloc_stats x;
        est_alloc_stats_get(a, &x); /* the paths under test were taken */
        if (m->capacity) ck_assert(x.num_ooms > 0 && x.num_alloc_retries > 0 && x.num_capacity_refusals > 0);
        if (m->expandable) ck_assert(x.expandable_segments.peak > 0 && x.num_device_free > 0);
        if (m->max_split) ck_assert(x.num_device_alloc > 0);
    }
    est_alloc_free(a);
    ref_alloc_free(b);
}
END_TEST

Suite *suite_alloc_equiv(void);
Suite *suite_alloc_equiv(void) {
    Suite *s = suite_create("alloc_equiv");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_random_traffic_same_decisions, 0, (int)(sizeof modes / sizeof modes[0]));
    suite_add_tcase(s, tc);
    return s;
}
