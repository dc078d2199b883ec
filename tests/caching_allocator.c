/* The caching allocator simulation (estimator/ledger/caching_allocator.c)
 * against sequences traced by hand from PyTorch's rules (docs/method.md, "The
 * caching allocator"; c10/cuda/CUDACachingAllocator.cpp v2.6.0), and against
 * the expectations PyTorch's own test suite asserts (test/test_cuda.py
 * v2.6.0). Every expected number is derived in the comment beside it; each
 * rule has a test that fails when the rule is dropped. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "caching_allocator.h"

#define KiB INT64_C(1024)
#define MiB (INT64_C(1) << 20)

static est_alloc *make(bool expandable, int64_t max_split, int64_t capacity) {
    est_alloc_config c;
    est_alloc_config_default(&c);
    c.expandable_segments = expandable;
    c.max_split_size_bytes = max_split;
    c.capacity_bytes = capacity;
    char err[256];
    est_alloc *a = est_alloc_new(&c, err, sizeof err);
    ck_assert_msg(a != NULL, "%s", err);
    return a;
}

static est_alloc_stats stats(const est_alloc *a) {
    char err[256];
    ck_assert_msg(est_alloc_check(a, err, sizeof err) == 0, "%s", err);
    est_alloc_stats s;
    est_alloc_stats_get(a, &s);
    return s;
}

static est_alloc_handle get(est_alloc *a, int64_t bytes, int32_t stream) {
    est_alloc_handle h;
    int rc = est_alloc_malloc(a, bytes, stream, &h);
    ck_assert_msg(rc == EST_ALLOC_OK, "malloc %lld: %d %s", (long long)bytes, rc, est_alloc_error(a));
    return h;
}

static void put(est_alloc *a, est_alloc_handle h) { ck_assert_int_eq(est_alloc_release(a, h), EST_ALLOC_OK); }

#define RESERVED(s) ((s).reserved_bytes[EST_ALLOC_ALL].current)
#define ALLOCATED(s) ((s).allocated_bytes[EST_ALLOC_ALL].current)
#define ACTIVE(s) ((s).active_bytes[EST_ALLOC_ALL].current)
#define SEGMENTS(s) ((s).segment[EST_ALLOC_ALL].current)

/* round_size: below 512 bytes -> 512, else up to a multiple of 512; allocated
 * bytes count the block, requested bytes the tensor. */
START_TEST(test_sizes_round_to_512) {
    est_alloc *a = make(false, 0, 0);
    est_alloc_handle one = get(a, 1, 0), odd = get(a, 1000, 0), zero = get(a, 0, 0);
    ck_assert_int_eq(est_alloc_block_bytes(a, one), 512);
    ck_assert_int_eq(est_alloc_block_bytes(a, odd), 1024); /* 1000 -> 2 x 512 */
    ck_assert(zero == EST_ALLOC_NULL);                      /* allocate(0) calls no malloc */
    est_alloc_stats s = stats(a);
    ck_assert_int_eq(ALLOCATED(s), 1536);
    ck_assert_int_eq(s.requested_bytes[EST_ALLOC_ALL].current, 1001);
    ck_assert_int_eq(s.allocation[EST_ALLOC_ALL].current, 2);
    est_alloc_free(a);
}
END_TEST

/* Small pool: requests <= 1 MiB are carved from 2 MiB segments. Three 600 KiB
 * tensors (614,400 bytes, already a multiple of 512) fit in one: after two,
 * 2,097,152 - 1,228,800 = 868,352 bytes remain, enough for the third. A fourth
 * needs a second segment. The free tail of the first (2,097,152 - 1,843,200 =
 * 253,952 bytes) is an inactive split block. */
START_TEST(test_small_pool_shares_2mib_segments) {
    est_alloc *a = make(false, 0, 0);
    for (int i = 0; i < 3; i++) get(a, 600 * KiB, 0);
    est_alloc_stats s = stats(a);
    ck_assert_int_eq(RESERVED(s), 2 * MiB);
    ck_assert_int_eq(SEGMENTS(s), 1);
    ck_assert_int_eq(ALLOCATED(s), 3 * 614400);
    ck_assert_int_eq(s.inactive_split_bytes[EST_ALLOC_SMALL_POOL].current, 253952);
    get(a, 600 * KiB, 0);
    s = stats(a);
    ck_assert_int_eq(RESERVED(s), 4 * MiB);
    ck_assert_int_eq(s.reserved_bytes[EST_ALLOC_SMALL_POOL].current, 4 * MiB);
    ck_assert_int_eq(s.reserved_bytes[EST_ALLOC_LARGE_POOL].current, 0);
    est_alloc_free(a);
}
END_TEST

/* Large pool, >= 10 MiB: a segment of the request rounded up to 2 MiB. 12 MiB
 * gets exactly 12 MiB. 11 MiB + 1 byte rounds to 11 MiB + 512, its segment to
 * 12 MiB, and the 1 MiB - 512 left over is not more than 1 MiB, so the block
 * is not split: the tensor holds all 12 MiB (allocated bytes count it). */
START_TEST(test_large_requests_get_rounded_segments) {
    est_alloc *a = make(false, 0, 0);
    get(a, 12 * MiB, 0);
    est_alloc_stats s = stats(a);
    ck_assert_int_eq(RESERVED(s), 12 * MiB);
    ck_assert_int_eq(s.reserved_bytes[EST_ALLOC_LARGE_POOL].current, 12 * MiB);
    est_alloc_handle h = get(a, 11 * MiB + 1, 0);
    ck_assert_int_eq(est_alloc_block_bytes(a, h), 12 * MiB);
    s = stats(a);
    ck_assert_int_eq(RESERVED(s), 24 * MiB);
    ck_assert_int_eq(ALLOCATED(s), 24 * MiB);
    ck_assert_int_eq(SEGMENTS(s), 2);
    ck_assert_int_eq(s.num_device_alloc, 2);
    est_alloc_free(a);
}
END_TEST

/* Between 1 and 10 MiB: a 20 MiB segment that later requests split. 5 MiB gets
 * a 20 MiB segment (15 MiB left, more than 1 MiB: split); the second and third
 * 5 MiB split the rest; the fourth takes the last 5 MiB whole (nothing left to
 * split); the fifth needs a second 20 MiB segment. */
START_TEST(test_mid_requests_share_20mib_segments) {
    est_alloc *a = make(false, 0, 0);
    get(a, 5 * MiB, 0);
    est_alloc_stats s = stats(a);
    ck_assert_int_eq(RESERVED(s), 20 * MiB);
    for (int i = 0; i < 3; i++) get(a, 5 * MiB, 0);
    s = stats(a);
    ck_assert_int_eq(RESERVED(s), 20 * MiB);
    ck_assert_int_eq(SEGMENTS(s), 1);
    ck_assert_int_eq(ALLOCATED(s), 20 * MiB);
    get(a, 5 * MiB, 0);
    s = stats(a);
    ck_assert_int_eq(RESERVED(s), 40 * MiB);
    ck_assert_int_eq(SEGMENTS(s), 2);
    est_alloc_free(a);
}
END_TEST

/* Merging: A, B, C of 5 MiB in one 20 MiB segment, 5 MiB free after C. Freeing
 * B leaves two inactive split blocks (B, and the tail): 10 MiB. Freeing C
 * merges B, C and the tail into one 15 MiB block. A 15 MiB request (large
 * pool) then fits in it: still one 20 MiB segment. Without merging the largest
 * free block would be 5 MiB and 15 MiB would need a new 16 MiB segment. */
START_TEST(test_freed_neighbours_merge) {
    est_alloc *a = make(false, 0, 0);
    est_alloc_handle A = get(a, 5 * MiB, 0), B = get(a, 5 * MiB, 0), C = get(a, 5 * MiB, 0);
    (void)A;
    put(a, B);
    est_alloc_stats s = stats(a);
    ck_assert_int_eq(s.inactive_split[EST_ALLOC_ALL].current, 2);
    ck_assert_int_eq(s.inactive_split_bytes[EST_ALLOC_ALL].current, 10 * MiB);
    put(a, C);
    s = stats(a);
    ck_assert_int_eq(s.inactive_split[EST_ALLOC_ALL].current, 1);
    ck_assert_int_eq(s.inactive_split_bytes[EST_ALLOC_ALL].current, 15 * MiB);
    get(a, 15 * MiB, 0);
    s = stats(a);
    ck_assert_int_eq(RESERVED(s), 20 * MiB);
    ck_assert_int_eq(SEGMENTS(s), 1);
    est_alloc_free(a);
}
END_TEST

/* Best fit: cached free segments of 12 and 16 MiB. 11 MiB takes the 12 MiB one
 * (the smallest that fits; the 1 MiB left is not split off), 14 MiB the 16 MiB
 * one: nothing new reserved. Any other choice (the larger first, or the first
 * cached) would split the 16 MiB block for 11 MiB and leave 14 MiB without a
 * block: a third segment. */
START_TEST(test_best_fit) {
    est_alloc *a = make(false, 0, 0);
    est_alloc_handle big = get(a, 16 * MiB, 0), small = get(a, 12 * MiB, 0);
    put(a, big);
    put(a, small);
    est_alloc_handle x = get(a, 11 * MiB, 0), y = get(a, 14 * MiB, 0);
    ck_assert_int_eq(est_alloc_block_bytes(a, x), 12 * MiB);
    ck_assert_int_eq(est_alloc_block_bytes(a, y), 14 * MiB); /* 16 MiB split: 2 MiB > 1 MiB left */
    est_alloc_stats s = stats(a);
    ck_assert_int_eq(RESERVED(s), 28 * MiB);
    ck_assert_int_eq(SEGMENTS(s), 2);
    est_alloc_free(a);
}
END_TEST

/* Where a long-lived block lands decides the next step's segments (the
 * cuBLAS workspace of autograd's thread, booked at the LM head's backward GEMM
 * just after the loss's large fp32 blocks are freed; seam_hf.c
 * carried_workspaces). Three 101 MiB blocks take three 102 MiB segments (a
 * request of 10 MiB or more gets its own segment rounded up to 2 MiB).
 * - Freed, then a 32 MiB workspace: best fit takes the lowest of the three
 *   equal free blocks and splits it (70 MiB left, over 1 MiB), reserving
 *   nothing; three 101 MiB blocks again find two whole blocks and need a
 *   fourth segment: 4 x 102 = 408 MiB reserved.
 * - The workspace first: its own 32 MiB segment, and the three blocks reuse
 *   theirs: 32 + 3 x 102 = 338 MiB. */
START_TEST(test_a_kept_block_splits_a_freed_segment) {
    for (int first = 0; first < 2; first++) {
        est_alloc *a = make(false, 0, 0);
        est_alloc_handle ws = EST_ALLOC_NULL, h[3];
        if (first) ws = get(a, 32 * MiB, 0);
        for (int i = 0; i < 3; i++) h[i] = get(a, 101 * MiB, 0);
        ck_assert_int_eq(RESERVED(stats(a)), (first ? 32 : 0) * MiB + 3 * 102 * MiB);
        for (int i = 0; i < 3; i++) put(a, h[i]);
        if (!first) ws = get(a, 32 * MiB, 0);
        ck_assert_int_eq(est_alloc_block_bytes(a, ws), 32 * MiB);
        ck_assert_int_eq(RESERVED(stats(a)), (first ? 338 : 306) * MiB);
        for (int i = 0; i < 3; i++) h[i] = get(a, 101 * MiB, 0);
        est_alloc_stats s = stats(a);
        ck_assert_int_eq(RESERVED(s), (first ? 338 : 408) * MiB);
        ck_assert_int_eq(SEGMENTS(s), 4);
        est_alloc_free(a);
    }
}
END_TEST

/* A block is reused only by its own stream: a 12 MiB block freed on stream 0 is
 * not given to stream 1 (a second segment), but is to stream 0 again. */
START_TEST(test_per_stream_pools) {
    est_alloc *a = make(false, 0, 0);
    put(a, get(a, 12 * MiB, 0));
    get(a, 12 * MiB, 1);
    est_alloc_stats s = stats(a);
    ck_assert_int_eq(RESERVED(s), 24 * MiB);
    get(a, 12 * MiB, 0);
    s = stats(a);
    ck_assert_int_eq(RESERVED(s), 24 * MiB);
    ck_assert_int_eq(s.num_device_alloc, 2);
    est_alloc_free(a);
}
END_TEST

/* max_split_size_mb:40. A 60 MiB block, once cached, is oversize (>= 40 MiB):
 * - a 30 MiB request (under 40) may not use it: a new 30 MiB segment (90 MiB
 *   reserved), where without the rule it would split the 60 MiB block;
 * - a 45 MiB request (oversize itself) may, since 60 < 45 + 20 (the
 *   max_non_split_rounding default, kLargeBuffer): it holds all 60 MiB
 *   (oversize blocks are never split);
 * - a 40 MiB request may not (60 >= 40 + 20): a new 40 MiB segment (130 MiB). */
START_TEST(test_max_split_size_limits_reuse) {
    est_alloc *a = make(false, 40 * MiB, 0);
    put(a, get(a, 60 * MiB, 0));
    get(a, 30 * MiB, 0);
    est_alloc_stats s = stats(a);
    ck_assert_int_eq(RESERVED(s), 90 * MiB);
    est_alloc_handle c = get(a, 45 * MiB, 0);
    ck_assert_int_eq(est_alloc_block_bytes(a, c), 60 * MiB);
    s = stats(a);
    ck_assert_int_eq(RESERVED(s), 90 * MiB);
    ck_assert_int_eq(ALLOCATED(s), 90 * MiB);
    put(a, c);
    get(a, 40 * MiB, 0);
    s = stats(a);
    ck_assert_int_eq(RESERVED(s), 130 * MiB);
    est_alloc_free(a);
}
END_TEST

/* max_non_split_rounding_mb:30 (torch >= 2.6): the 40 MiB request of the test
 * above now fits the cached 60 MiB block (60 < 40 + 30): nothing new. Refused
 * for torch 2.2, which has no such option. */
START_TEST(test_max_non_split_rounding) {
    est_alloc_config c;
    est_alloc_config_default(&c);
    c.max_split_size_bytes = 40 * MiB;
    c.max_non_split_rounding_bytes = 30 * MiB;
    char err[256];
    est_alloc *a = est_alloc_new(&c, err, sizeof err);
    ck_assert_ptr_nonnull(a);
    put(a, get(a, 60 * MiB, 0));
    est_alloc_handle h = get(a, 40 * MiB, 0);
    ck_assert_int_eq(est_alloc_block_bytes(a, h), 60 * MiB);
    ck_assert_int_eq(RESERVED(stats(a)), 60 * MiB);
    est_alloc_free(a);
    c.torch_version = 202;
    ck_assert_ptr_null(est_alloc_new(&c, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "2.6"));
}
END_TEST

/* Oversize blocks are not split even for an oversize request that leaves much
 * over: max_split 40 MiB, a cached 100 MiB block, an 85 MiB request (100 <
 * 85 + 20) holds all 100 MiB. Without max_split (default) the same request
 * splits it (15 MiB > 1 MiB left over) and holds 85 MiB. */
START_TEST(test_oversize_blocks_are_not_split) {
    est_alloc *a = make(false, 40 * MiB, 0), *b = make(false, 0, 0);
    put(a, get(a, 100 * MiB, 0));
    put(b, get(b, 100 * MiB, 0));
    ck_assert_int_eq(est_alloc_block_bytes(a, get(a, 85 * MiB, 0)), 100 * MiB);
    ck_assert_int_eq(est_alloc_block_bytes(b, get(b, 85 * MiB, 0)), 85 * MiB);
    est_alloc_free(a);
    est_alloc_free(b);
}
END_TEST

/* record_stream: a 12 MiB tensor of stream 0 used on stream 1 and freed stays
 * active (allocated drops to 0, active stays 12 MiB) and cannot serve the next
 * 12 MiB request of stream 0: a second segment. Stream 2 finishing frees
 * nothing; once stream 1 has finished, the block is cached again and the next
 * request reuses it (still 24 MiB). */
START_TEST(test_record_stream_defers_the_free) {
    est_alloc *a = make(false, 0, 0);
    est_alloc_handle x = get(a, 12 * MiB, 0);
    ck_assert_int_eq(est_alloc_release_pending(a, x, 1), EST_ALLOC_OK);
    est_alloc_stats s = stats(a);
    ck_assert_int_eq(ALLOCATED(s), 0);
    ck_assert_int_eq(ACTIVE(s), 12 * MiB);
    est_alloc_handle y = get(a, 12 * MiB, 0);
    ck_assert_int_eq(RESERVED(stats(a)), 24 * MiB);
    ck_assert_int_eq(est_alloc_sync_stream(a, 2), EST_ALLOC_OK);
    ck_assert_int_eq(ACTIVE(stats(a)), 24 * MiB);
    ck_assert_int_eq(est_alloc_sync_stream(a, 1), EST_ALLOC_OK);
    s = stats(a);
    ck_assert_int_eq(ACTIVE(s), 12 * MiB);
    put(a, y);
    get(a, 12 * MiB, 0);
    get(a, 12 * MiB, 0);
    s = stats(a);
    ck_assert_int_eq(RESERVED(s), 24 * MiB);
    ck_assert_int_eq(s.num_device_alloc, 2);
    est_alloc_free(a);
}
END_TEST

/* A use on the tensor's own stream needs no event (recordStream ignores it):
 * the block is cached at once. */
START_TEST(test_record_on_own_stream_is_ignored) {
    est_alloc *a = make(false, 0, 0);
    est_alloc_handle x = get(a, 12 * MiB, 3);
    ck_assert_int_eq(est_alloc_release_pending(a, x, 3), EST_ALLOC_OK);
    ck_assert_int_eq(ACTIVE(stats(a)), 0);
    est_alloc_free(a);
}
END_TEST

/* empty_cache returns whole free segments only. A 12 MiB segment, then a
 * 20 MiB one holding a 5 MiB tensor (another 5 MiB freed into its 15 MiB
 * tail); the 12 MiB tensor is freed; a 16 MiB tensor fits neither free block
 * (12 and 15 MiB) and gets its own segment, and is freed while in use on
 * stream 1: 48 MiB reserved. empty_cache waits for the pending free first
 * (synchronize_and_free_events), then gives back the 12 and 16 MiB segments;
 * the 20 MiB one, partly allocated, stays. */
START_TEST(test_empty_cache) {
    est_alloc *a = make(false, 0, 0);
    est_alloc_handle t = get(a, 12 * MiB, 0);
    get(a, 5 * MiB, 0);
    put(a, get(a, 5 * MiB, 0));
    put(a, t);
    est_alloc_handle p = get(a, 16 * MiB, 0);
    ck_assert_int_eq(est_alloc_release_pending(a, p, 1), EST_ALLOC_OK);
    ck_assert_int_eq(RESERVED(stats(a)), 48 * MiB);
    ck_assert_int_eq(est_alloc_empty_cache(a), EST_ALLOC_OK);
    est_alloc_stats s = stats(a);
    ck_assert_int_eq(RESERVED(s), 20 * MiB);
    ck_assert_int_eq(SEGMENTS(s), 1);
    ck_assert_int_eq(ACTIVE(s), 5 * MiB);
    ck_assert_int_eq(s.num_device_free, 2);
    ck_assert_int_eq(s.num_sync_all_streams, 1);
    est_alloc_free(a);
}
END_TEST

/* Pressure: capacity 40 MiB. Two 12 MiB tensors (two 12 MiB segments) are freed
 * and cached; a 20 MiB request finds no cached block, and a new 20 MiB segment
 * would make 44 MiB > 40. max_split_size is unset, so
 * release_available_cached_blocks does nothing; release_cached_blocks gives
 * both 12 MiB segments back (2 cudaFree), and the retry reserves 20 MiB. */
START_TEST(test_pressure_frees_the_cache_and_retries) {
    est_alloc *a = make(false, 0, 40 * MiB);
    est_alloc_handle x = get(a, 12 * MiB, 0), y = get(a, 12 * MiB, 0);
    put(a, x);
    put(a, y);
    get(a, 20 * MiB, 0);
    est_alloc_stats s = stats(a);
    ck_assert_int_eq(RESERVED(s), 20 * MiB);
    ck_assert_int_eq(s.reserved_bytes[EST_ALLOC_ALL].peak, 24 * MiB);
    ck_assert_int_eq(s.num_alloc_retries, 1);
    ck_assert_int_eq(s.num_device_free, 2);
    ck_assert_int_eq(s.num_ooms, 0);
    est_alloc_free(a);
}
END_TEST

/* Pressure paid by another stream's cache (release_cached_blocks v2.6.0
 * 2859-2905 visits the whole large pool, every stream): capacity 100 MiB.
 * Three 30 MiB tensors on stream 0, each in its own 30 MiB segment; two are
 * freed and stay cached for stream 0 (90 MiB reserved). A 20 MiB request on
 * stream 1 can take no stream-0 block (get_free_block 2569-2571), and its new
 * 20 MiB segment would make 110 > 100: max_split_size is unset, so the
 * allocator gives back both free 30 MiB segments (2 cudaFree, 30 MiB left) and
 * the retry maps 20 MiB: 50 MiB reserved, the peak stays 90. Roomy, the same
 * sequence reserves 110. This is the shape of DeepSpeed ZeRO-3's reduce-stream
 * cat at the end of backward beside the freed logits' segments (docs/
 * validation.md, "Reserved peaks"). */
START_TEST(test_pressure_releases_other_streams_cache) {
    est_alloc *a = make(false, 0, 100 * MiB), *roomy = make(false, 0, 0);
    est_alloc *both[2] = {a, roomy};
    for (int i = 0; i < 2; i++) {
        est_alloc_handle x = get(both[i], 30 * MiB, 0), y = get(both[i], 30 * MiB, 0);
        get(both[i], 30 * MiB, 0);
        put(both[i], x);
        put(both[i], y);
        get(both[i], 20 * MiB, 1);
    }
    est_alloc_stats s = stats(a), r = stats(roomy);
    ck_assert_int_eq(RESERVED(s), 50 * MiB);
    ck_assert_int_eq(s.reserved_bytes[EST_ALLOC_ALL].peak, 90 * MiB);
    ck_assert_int_eq(s.num_alloc_retries, 1);
    ck_assert_int_eq(s.num_device_free, 2);
    ck_assert_int_eq(s.num_ooms, 0);
    ck_assert_int_eq(r.reserved_bytes[EST_ALLOC_ALL].peak, 110 * MiB);
    ck_assert_int_eq(r.num_alloc_retries, 0);
    est_alloc_free(a);
    est_alloc_free(roomy);
}
END_TEST

/* Pressure that cannot be relieved: capacity 40 MiB, a live 30 MiB tensor, a
 * 12 MiB request (30 + 12 = 42 > 40; nothing cached to free): out of memory,
 * after one retry, asking for a 12 MiB segment. Run roomy, the same sequence
 * reserves 42 MiB. */
START_TEST(test_pressure_out_of_memory) {
    est_alloc *a = make(false, 0, 40 * MiB), *roomy = make(false, 0, 0);
    get(a, 30 * MiB, 0);
    get(roomy, 30 * MiB, 0);
    est_alloc_handle h = 12345;
    ck_assert_int_eq(est_alloc_malloc(a, 12 * MiB, 0, &h), EST_ALLOC_OOM);
    ck_assert(h == EST_ALLOC_NULL);
    get(roomy, 12 * MiB, 0);
    ck_assert_int_eq(RESERVED(stats(roomy)), 42 * MiB);
    est_alloc_stats s = stats(a);
    ck_assert_int_eq(s.num_ooms, 1);
    ck_assert_int_eq(s.num_alloc_retries, 1);
    ck_assert_int_eq(RESERVED(s), 30 * MiB);
    const est_alloc_oom *o = est_alloc_last_oom(a);
    ck_assert_int_eq(o->requested_bytes, 12 * MiB);
    ck_assert_int_eq(o->segment_bytes, 12 * MiB);
    ck_assert_int_eq(o->reserved_bytes, 30 * MiB);
    char msg[512];
    est_alloc_oom_message(a, msg, sizeof msg);
    ck_assert_ptr_nonnull(strstr(msg, "Tried to allocate 12.00 MiB"));
    est_alloc_free(a);
    est_alloc_free(roomy);
}
END_TEST

/* Pressure with a pending free (PyTorch's test_caching_allocator_record_stream_oom,
 * issue #19219): capacity 20 MiB, a 12 MiB tensor freed while used on stream 1;
 * the next 12 MiB request cannot use it and 24 > 20. release_cached_blocks
 * first waits for the event, then gives the now-free segment back, and the
 * retry fits. */
START_TEST(test_pressure_waits_for_pending_frees) {
    est_alloc *a = make(false, 0, 20 * MiB);
    ck_assert_int_eq(est_alloc_release_pending(a, get(a, 12 * MiB, 0), 1), EST_ALLOC_OK);
    get(a, 12 * MiB, 0);
    est_alloc_stats s = stats(a);
    ck_assert_int_eq(RESERVED(s), 12 * MiB);
    ck_assert_int_eq(ACTIVE(s), 12 * MiB);
    ck_assert_int_eq(s.num_sync_all_streams, 1);
    ck_assert_int_eq(s.num_alloc_retries, 1);
    est_alloc_free(a);
}
END_TEST

/* With max_split_size, pressure first frees just enough oversize cached blocks
 * (release_available_cached_blocks) before giving up the whole cache. The
 * sequence of PyTorch's test_max_split_expandable without its expandable part:
 * capacity 120 MiB, max_split 40 MiB; three 40 MiB tensors fill it, a fourth is
 * out of memory; after freeing the three, 120 MiB fits: no single cached block
 * covers it, so the largest ones are freed until their sum does (40 + 40 + 40),
 * and the malloc succeeds without a retry of the whole cache. */
START_TEST(test_pressure_releases_oversize_blocks) {
    est_alloc *a = make(false, 40 * MiB, 120 * MiB);
    est_alloc_handle x[3];
    for (int i = 0; i < 3; i++) x[i] = get(a, 40 * MiB, 0);
    est_alloc_handle h;
    ck_assert_int_eq(est_alloc_malloc(a, 40 * MiB, 0, &h), EST_ALLOC_OOM);
    for (int i = 0; i < 3; i++) put(a, x[i]);
    get(a, 120 * MiB, 0);
    est_alloc_stats s = stats(a);
    ck_assert_int_eq(RESERVED(s), 120 * MiB);
    ck_assert_int_eq(s.num_device_free, 3);
    ck_assert_int_eq(s.num_alloc_retries, 1); /* only the out-of-memory request retried */
    est_alloc_free(a);
}
END_TEST

/* expandable_segments:True. One segment per (pool, stream), mapped in pages of
 * 2 MiB (small pool) and 20 MiB (large pool), as much as the rounded request
 * needs (not the 20 MiB segment a regular allocation would get).
 * Small: three 600 KiB tensors map one 2 MiB page; the fourth does not fit the
 * 253,952 bytes left and maps a second page, straddling the two: 4 MiB.
 * Large: 12 MiB maps one 20 MiB page (a regular segment would be 12 MiB); 5 MiB
 * fits the 8 MiB left; the next 5 MiB does not fit the 3 MiB left and maps a
 * second page: 40 MiB. Segments are not counted for expandable memory. When all
 * is freed, empty_cache unmaps every page (one unmapping per free range) and
 * releases both segments. */
START_TEST(test_expandable_segments_grow_and_reuse) {
    est_alloc *a = make(true, 0, 0);
    est_alloc_handle h[8];
    for (int i = 0; i < 3; i++) h[i] = get(a, 600 * KiB, 0);
    est_alloc_stats s = stats(a);
    ck_assert_int_eq(RESERVED(s), 2 * MiB);
    ck_assert_int_eq(SEGMENTS(s), 0);
    ck_assert_int_eq(s.expandable_segments.current, 1);
    h[3] = get(a, 600 * KiB, 0);
    ck_assert_int_eq(RESERVED(stats(a)), 4 * MiB);
    h[4] = get(a, 12 * MiB, 0);
    ck_assert_int_eq(stats(a).reserved_bytes[EST_ALLOC_LARGE_POOL].current, 20 * MiB);
    h[5] = get(a, 5 * MiB, 0);
    ck_assert_int_eq(stats(a).reserved_bytes[EST_ALLOC_LARGE_POOL].current, 20 * MiB);
    h[6] = get(a, 5 * MiB, 0);
    s = stats(a);
    ck_assert_int_eq(s.reserved_bytes[EST_ALLOC_LARGE_POOL].current, 40 * MiB);
    ck_assert_int_eq(s.expandable_segments.current, 2);
    ck_assert_int_eq(s.num_device_alloc, 4);
    for (int i = 0; i < 7; i++) put(a, h[i]);
    ck_assert_int_eq(est_alloc_empty_cache(a), EST_ALLOC_OK);
    s = stats(a);
    ck_assert_int_eq(RESERVED(s), 0);
    ck_assert_int_eq(s.expandable_segments.current, 0);
    ck_assert_int_eq(s.num_device_free, 2);
    est_alloc_free(a);
}
END_TEST

/* Best fit under expandable segments weighs a free block at the end of the
 * mapped range by what it could grow to (get_free_block's expandable_size).
 * One 20 MiB page: A 8 MiB, B 6 MiB, a 6 MiB free tail; A is freed (an 8 MiB
 * hole). A 5 MiB request: the smallest fit is the tail (6 MiB), but it could
 * grow to the whole unmapped range, more than the hole's 8 MiB, so the hole
 * serves it (3 MiB left). A 7 MiB request then fits neither 3 MiB nor the
 * 6 MiB tail, which grows by a page: 40 MiB. (Had the tail served 5 MiB, 7 MiB
 * would fit the hole and 20 MiB would do.) */
START_TEST(test_expandable_best_fit_spares_the_tail) {
    est_alloc *a = make(true, 0, 0);
    est_alloc_handle A = get(a, 8 * MiB, 0);
    get(a, 6 * MiB, 0);
    put(a, A);
    get(a, 5 * MiB, 0);
    ck_assert_int_eq(RESERVED(stats(a)), 20 * MiB);
    get(a, 7 * MiB, 0);
    ck_assert_int_eq(RESERVED(stats(a)), 40 * MiB);
    est_alloc_free(a);
}
END_TEST

/* Unmapping goes by whole pages. A 10 MiB tensor maps page [0, 20); a 40 MiB
 * one fits the 10 MiB left plus two more pages: [10, 50) of [0, 60) mapped.
 * Freed, it merges with the 10 MiB after it: [10, 60) free. empty_cache unmaps
 * the pages wholly inside it, [20, 60), and keeps [10, 20) mapped: 20 MiB.
 * A 30 MiB request then uses that 10 MiB sliver and maps one page again. */
START_TEST(test_expandable_unmaps_whole_pages) {
    est_alloc *a = make(true, 0, 0);
    get(a, 10 * MiB, 0);
    est_alloc_handle b = get(a, 40 * MiB, 0);
    ck_assert_int_eq(RESERVED(stats(a)), 60 * MiB);
    put(a, b);
    ck_assert_int_eq(est_alloc_empty_cache(a), EST_ALLOC_OK);
    est_alloc_stats s = stats(a);
    ck_assert_int_eq(RESERVED(s), 20 * MiB);
    ck_assert_int_eq(s.num_device_free, 1);
    get(a, 30 * MiB, 0);
    ck_assert_int_eq(RESERVED(stats(a)), 40 * MiB);
    est_alloc_free(a);
}
END_TEST

/* Pressure under expandable segments: capacity 40 MiB. A 20 MiB tensor fills
 * page [0, 20); a 5 MiB one maps [20, 40) and leaves [25, 40) free. A 30 MiB
 * request would map a third page (60 > 40); release_cached_blocks finds no
 * free page to unmap ([25, 40) shares its page with the 5 MiB tensor); out of
 * memory after one retry. Once the 20 MiB tensor is freed, the same request
 * fails its first mapping again, then release_cached_blocks unmaps [0, 20)
 * (20 MiB reserved), and the retry takes the lowest range with room for 30 MiB:
 * not [0, 20) (20 MiB, then the 5 MiB tensor), but [25, 40) and a new page
 * [40, 60): 40 MiB. */
START_TEST(test_expandable_pressure) {
    est_alloc *a = make(true, 0, 40 * MiB);
    est_alloc_handle x = get(a, 20 * MiB, 0), h;
    get(a, 5 * MiB, 0);
    ck_assert_int_eq(RESERVED(stats(a)), 40 * MiB);
    ck_assert_int_eq(est_alloc_malloc(a, 30 * MiB, 0, &h), EST_ALLOC_OOM);
    ck_assert_int_eq(stats(a).num_alloc_retries, 1);
    put(a, x);
    get(a, 30 * MiB, 0);
    est_alloc_stats s = stats(a);
    ck_assert_int_eq(RESERVED(s), 40 * MiB);
    ck_assert_int_eq(s.num_alloc_retries, 2);
    ck_assert_int_eq(s.num_device_free, 1);
    ck_assert_int_eq(s.num_device_alloc, 3);
    est_alloc_free(a);
}
END_TEST

/* PyTorch's own expectations: test_graph_memory_stats_and_use_result_after_
 * destroy_graph (test/test_cuda.py v2.6.0, lines 2436-2600), which PyTorch's CI
 * asserts on GPUs, with expandable segments off and (test_cuda_expandable_
 * segments.py) on. Inside a CUDA graph's private pool, on one stream:
 *     b = a.clone(); for _ in range(5): b = b.clone() + 1
 * that is: alloc b; 5 x (alloc t, alloc u, free t, free old b). The private pool
 * starts empty, so a fresh allocator replays it. The test's table gives, per
 * tensor size, the segments and reserved bytes the capture adds, and the
 * reserved bytes left once the graph is deleted and empty_cache has run (only
 * the last b alive); under expandable segments no segment is counted, and
 * cases 3 and 4 keep the pages the comments there explain. The test's small-pool
 * cases also count CUDA graph's two rng holders, allocated outside the private
 * pool: not replayed here. */
typedef struct {
    int64_t bytes, segments, reserved, reserved_after;   /* expandable segments off */
    int64_t x_reserved, x_reserved_after;                /* on */
} graph_case;

static const graph_case GRAPH_CASES[] = {
    {512, 1, EST_ALLOC_SMALL_BUFFER, EST_ALLOC_SMALL_BUFFER, EST_ALLOC_SMALL_BUFFER, EST_ALLOC_SMALL_BUFFER},
    {EST_ALLOC_SMALL_SIZE, 2, 2 * EST_ALLOC_SMALL_BUFFER, EST_ALLOC_SMALL_BUFFER, 2 * EST_ALLOC_SMALL_BUFFER,
     EST_ALLOC_SMALL_BUFFER},
    {EST_ALLOC_SMALL_SIZE + 512, 1, EST_ALLOC_LARGE_BUFFER, EST_ALLOC_LARGE_BUFFER, EST_ALLOC_LARGE_BUFFER,
     EST_ALLOC_LARGE_BUFFER},
    {EST_ALLOC_MIN_LARGE_ALLOC - 512, 2, 2 * EST_ALLOC_LARGE_BUFFER, EST_ALLOC_LARGE_BUFFER,
     2 * EST_ALLOC_LARGE_BUFFER, 2 * EST_ALLOC_LARGE_BUFFER},
    /* (kMinLargeAlloc + 512) rounds to a 12 MiB segment (kRoundLarge). */
    {EST_ALLOC_MIN_LARGE_ALLOC + 512, 3, 3 * 12 * MiB, 12 * MiB, 2 * EST_ALLOC_LARGE_BUFFER, EST_ALLOC_LARGE_BUFFER},
};

START_TEST(test_pytorch_graph_pool_expectations) {
    const graph_case *c = &GRAPH_CASES[_i / 2];
    bool expandable = _i % 2;
    est_alloc *a = make(expandable, 0, 0);
    est_alloc_handle b = get(a, c->bytes, 0);
    for (int i = 0; i < 5; i++) {
        est_alloc_handle t = get(a, c->bytes, 0), u = get(a, c->bytes, 0);
        put(a, t);
        put(a, b);
        b = u;
    }
    est_alloc_stats s = stats(a);
    ck_assert_int_eq(SEGMENTS(s), expandable ? 0 : c->segments);
    ck_assert_int_eq(RESERVED(s), expandable ? c->x_reserved : c->reserved);
    ck_assert_int_eq(ACTIVE(s), c->bytes); /* only b, its block exactly its size */
    ck_assert_int_eq(s.active[EST_ALLOC_ALL].current, 1);
    ck_assert_int_eq(est_alloc_empty_cache(a), EST_ALLOC_OK);
    s = stats(a);
    ck_assert_int_eq(SEGMENTS(s), expandable ? 0 : 1);
    ck_assert_int_eq(RESERVED(s), expandable ? c->x_reserved_after : c->reserved_after);
    est_alloc_free(a);
}
END_TEST

/* roundup_power2_divisions, with PyTorch's own expectations (test_allocator_
 * settings, test/test_cuda.py v2.6.0, lines 3712-3795): 21 Mi floats (84 MiB)
 * with 4 divisions round to 96 MiB (steps of 16 MiB above 64 MiB); with the
 * list [64:8,128:2,256:2,512:2,1024:1,>:1] 84 MiB is in the 64 MiB interval (8
 * divisions: 88 MiB), and 100 Mi floats (400 MiB) in the 256 MiB one (2
 * divisions: 384, then 512 MiB). */
START_TEST(test_roundup_power2_divisions) {
    est_alloc_config c;
    est_alloc_config_default(&c);
    char err[256];
    ck_assert_int_eq(est_alloc_config_parse("roundup_power2_divisions:4", &c, err, sizeof err), 0);
    est_alloc *a = est_alloc_new(&c, err, sizeof err);
    ck_assert_int_eq(est_alloc_block_bytes(a, get(a, 84 * MiB, 0)), 96 * MiB);
    /* sizes at most 512 x divisions keep 512-byte rounding; a power of two stays */
    ck_assert_int_eq(est_alloc_block_bytes(a, get(a, 2000, 0)), 2048);
    ck_assert_int_eq(est_alloc_block_bytes(a, get(a, 9000, 0)), 10240); /* 8 KiB + a quarter (512-rounding: 9216) */
    ck_assert_int_eq(est_alloc_block_bytes(a, get(a, 64 * MiB, 0)), 64 * MiB);
    est_alloc_free(a);
    ck_assert_int_eq(est_alloc_config_parse("garbage_collection_threshold:0.5,roundup_power2_divisions:"
                                            "[64:8,128:2,256:2,512:2,1024:1,>:1]",
                                            &c, err, sizeof err),
                     0);
    a = est_alloc_new(&c, err, sizeof err);
    ck_assert_int_eq(est_alloc_block_bytes(a, get(a, 84 * MiB, 0)), 88 * MiB);
    ck_assert_int_eq(est_alloc_block_bytes(a, get(a, 400 * MiB, 0)), 512 * MiB);
    est_alloc_free(a);
}
END_TEST

/* PYTORCH_CUDA_ALLOC_CONF as parseArgs reads it. */
START_TEST(test_config_parse) {
    est_alloc_config c;
    est_alloc_config_default(&c);
    char err[256];
    ck_assert_int_eq(est_alloc_config_parse("expandable_segments:True, max_split_size_mb:128", &c, err, sizeof err), 0);
    ck_assert(c.expandable_segments);
    ck_assert_int_eq(c.max_split_size_bytes, 128 * MiB);
    /* every parse starts max_split and the divisions from their defaults */
    ck_assert_int_eq(est_alloc_config_parse("", &c, err, sizeof err), 0);
    ck_assert_int_eq(c.max_split_size_bytes, 0);
    /* the first list entry fills the intervals below it; '>' fills from the
     * previous entry's interval on, that one included (CUDAAllocatorConfig.cpp
     * v2.6.0 lines 163-170) */
    ck_assert_int_eq(est_alloc_config_parse("roundup_power2_divisions:[256:1,>:4]", &c, err, sizeof err), 0);
    ck_assert_int_eq(c.roundup_power2_divisions[7], 1);
    ck_assert_int_eq(c.roundup_power2_divisions[8], 4);
    ck_assert_int_eq(c.roundup_power2_divisions[15], 4);
    ck_assert_int_eq(est_alloc_config_parse("garbage_collection_threshold:0.6,backend:native,"
                                            "release_lock_on_cudamalloc:True,pinned_num_register_threads:8",
                                            &c, err, sizeof err),
                     0);
    const char *bad[] = {"max_split_size_mb:20", "foo:1", "backend:cudaMallocAsync", "expandable_segments:yes",
                         "max_split_size_mb", "max_split_size_mb:64 max_split_size_mb:64", "roundup_power2_divisions:3",
                         "roundup_power2_divisions:[256:2", "garbage_collection_threshold:1.5",
                         "max_split_size_mb:-64", "expandable_segments:True,,"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        ck_assert_msg(est_alloc_config_parse(bad[i], &c, err, sizeof err) < 0, "accepted \"%s\"", bad[i]);
        ck_assert_msg(err[0], "no message for \"%s\"", bad[i]);
    }
    c.torch_version = 202;
    ck_assert_int_lt(est_alloc_config_parse("max_non_split_rounding_mb:30", &c, err, sizeof err), 0);
    c.torch_version = 206;
    ck_assert_int_eq(est_alloc_config_parse("max_non_split_rounding_mb:30", &c, err, sizeof err), 0);
    ck_assert_int_eq(c.max_non_split_rounding_bytes, 30 * MiB);
}
END_TEST

START_TEST(test_version_parse) {
    int v = 0;
    char err[128];
    ck_assert_int_eq(est_alloc_version_parse("2.6.0", &v, err, sizeof err), 0);
    ck_assert_int_eq(v, 206);
    ck_assert_int_eq(est_alloc_version_parse("2.2.2+cu121", &v, err, sizeof err), 0);
    ck_assert_int_eq(v, 202);
    ck_assert_int_eq(est_alloc_version_parse("2.13", &v, err, sizeof err), 0);
    ck_assert_int_eq(v, 213);
    const char *bad[] = {"1.13.1", "2.1.0", "3.0", "2", "2.x", "2.6rc1", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(est_alloc_version_parse(bad[i], &v, err, sizeof err) < 0, "accepted %s", bad[i]);
}
END_TEST

/* Misuse is refused with a message, never a crash: a double free, a stale
 * handle whose block slot was reused, a negative size, a 65th stream. */
START_TEST(test_misuse_is_refused) {
    est_alloc *a = make(false, 0, 0);
    est_alloc_handle x = get(a, 5 * MiB, 0);
    put(a, x);
    ck_assert_int_eq(est_alloc_release(a, x), EST_ALLOC_EINVAL);
    ck_assert_ptr_nonnull(strstr(est_alloc_error(a), "release"));
    est_alloc_handle y = get(a, 5 * MiB, 0);
    ck_assert_int_eq(est_alloc_release(a, x), EST_ALLOC_EINVAL);
    ck_assert_int_eq(est_alloc_record_stream(a, x, 1), EST_ALLOC_EINVAL);
    put(a, y);
    est_alloc_handle h;
    ck_assert_int_eq(est_alloc_malloc(a, -1, 0, &h), EST_ALLOC_EINVAL);
    for (int s = 0; s < EST_ALLOC_MAX_STREAMS - 1; s++) get(a, 512, 100 + s);
    ck_assert_int_eq(est_alloc_malloc(a, 512, 9999, &h), EST_ALLOC_EINVAL);
    ck_assert_int_eq(est_alloc_release(a, EST_ALLOC_NULL), EST_ALLOC_OK);
    stats(a);
    est_alloc_config c;
    est_alloc_config_default(&c);
    char err[128];
    c.max_split_size_bytes = 20 * MiB;
    ck_assert_ptr_null(est_alloc_new(&c, err, sizeof err));
    c.max_split_size_bytes = 0;
    c.roundup_power2_divisions[3] = 3;
    ck_assert_ptr_null(est_alloc_new(&c, err, sizeof err));
    est_alloc_free(a);
}
END_TEST

/* Random traffic in every mode (roomy and under pressure, expandable or not,
 * with max_split_size, several streams, record_stream, syncs, empty_cache):
 * after every call the state must pass est_alloc_check (blocks tile their
 * segments, sets and statistics agree, reserved stays within the capacity),
 * and once everything is freed and the cache emptied nothing stays reserved. */
static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

START_TEST(test_random_traffic_keeps_invariants) {
    const int64_t caps[] = {0, 256 * MiB};
    est_alloc *a = make(_i & 1, (_i & 2) ? 40 * MiB : 0, caps[(_i >> 2) & 1]);
    uint64_t seed = 0x9E3779B97F4A7C15ull + (uint64_t)_i;
    est_alloc_handle live[256];
    int n = 0;
    char err[256];
    for (int op = 0; op < 3000; op++) {
        uint64_t r = rng_next(&seed);
        int kind = (int)(r % 100);
        if (kind < 50 && n < 256) {
            int64_t bytes = (int64_t)(1 + rng_next(&seed) % ((uint64_t)1 << (rng_next(&seed) % 26)));
            est_alloc_handle h;
            int rc = est_alloc_malloc(a, bytes, (int32_t)(r >> 32) % 3, &h);
            ck_assert_msg(rc == EST_ALLOC_OK || rc == EST_ALLOC_OOM, "%d %s", rc, est_alloc_error(a));
            if (rc == EST_ALLOC_OK) live[n++] = h;
        } else if (kind < 90 && n > 0) {
            int k = (int)(rng_next(&seed) % (uint64_t)n);
            int rc = kind < 80 ? est_alloc_release(a, live[k])
                               : est_alloc_release_pending(a, live[k], (int32_t)(r >> 40) % 3);
            ck_assert_int_eq(rc, EST_ALLOC_OK);
            live[k] = live[--n];
        } else if (kind < 96) {
            ck_assert_int_eq(est_alloc_sync_stream(a, (int32_t)(r >> 48) % 3), EST_ALLOC_OK);
        } else if (kind < 99) {
            ck_assert_int_eq(est_alloc_sync(a), EST_ALLOC_OK);
        } else {
            ck_assert_int_eq(est_alloc_empty_cache(a), EST_ALLOC_OK);
        }
        ck_assert_msg(est_alloc_check(a, err, sizeof err) == 0, "op %d: %s", op, err);
    }
    while (n > 0) put(a, live[--n]);
    ck_assert_int_eq(est_alloc_empty_cache(a), EST_ALLOC_OK);
    est_alloc_stats s = stats(a);
    ck_assert_int_eq(RESERVED(s), 0);
    ck_assert_int_eq(ACTIVE(s), 0);
    /* (an expandable segment whose first mapping failed under pressure keeps
     * its address space: release_blocks only visits mapped free blocks, in
     * PyTorch too; it holds no memory) */
    est_alloc_reset(a);
    s = stats(a);
    ck_assert_int_eq(s.num_device_alloc, 0);
    ck_assert_int_eq(RESERVED(s), 0);
    get(a, 12 * MiB, 0);
    est_alloc_free(a);
}
END_TEST

Suite *suite_caching_allocator(void);
Suite *suite_caching_allocator(void) {
    Suite *s = suite_create("caching_allocator");
    TCase *rules = tcase_create("rules");
    tcase_add_test(rules, test_sizes_round_to_512);
    tcase_add_test(rules, test_small_pool_shares_2mib_segments);
    tcase_add_test(rules, test_large_requests_get_rounded_segments);
    tcase_add_test(rules, test_mid_requests_share_20mib_segments);
    tcase_add_test(rules, test_freed_neighbours_merge);
    tcase_add_test(rules, test_best_fit);
    tcase_add_test(rules, test_a_kept_block_splits_a_freed_segment);
    tcase_add_test(rules, test_per_stream_pools);
    tcase_add_test(rules, test_max_split_size_limits_reuse);
    tcase_add_test(rules, test_max_non_split_rounding);
    tcase_add_test(rules, test_oversize_blocks_are_not_split);
    tcase_add_test(rules, test_record_stream_defers_the_free);
    tcase_add_test(rules, test_record_on_own_stream_is_ignored);
    tcase_add_test(rules, test_empty_cache);
    tcase_add_test(rules, test_pressure_frees_the_cache_and_retries);
    tcase_add_test(rules, test_pressure_out_of_memory);
    tcase_add_test(rules, test_pressure_releases_other_streams_cache);
    tcase_add_test(rules, test_pressure_waits_for_pending_frees);
    tcase_add_test(rules, test_pressure_releases_oversize_blocks);
    tcase_add_test(rules, test_expandable_segments_grow_and_reuse);
    tcase_add_test(rules, test_expandable_best_fit_spares_the_tail);
    tcase_add_test(rules, test_expandable_unmaps_whole_pages);
    tcase_add_test(rules, test_expandable_pressure);
    suite_add_tcase(s, rules);
    TCase *pub = tcase_create("published");
    tcase_add_loop_test(pub, test_pytorch_graph_pool_expectations, 0,
                        (int)(2 * sizeof GRAPH_CASES / sizeof GRAPH_CASES[0]));
    tcase_add_test(pub, test_roundup_power2_divisions);
    suite_add_tcase(s, pub);
    TCase *api = tcase_create("api");
    tcase_add_test(api, test_config_parse);
    tcase_add_test(api, test_version_parse);
    tcase_add_test(api, test_misuse_is_refused);
    tcase_add_loop_test(api, test_random_traffic_keeps_invariants, 0, 8);
    tcase_set_timeout(api, 30);
    suite_add_tcase(s, api);
    return s;
}
