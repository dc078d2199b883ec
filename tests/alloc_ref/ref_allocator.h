/* FROZEN REFERENCE for tests/alloc_equiv.c: estimator/ledger/caching_allocator.h as it was at
 * commit 826484b (before its free-block sets and bookkeeping were made faster),
 * with est_alloc/EST_ALLOC renamed ref_alloc/REF_ALLOC. Never edit it: the
 * allocator must keep making exactly its decisions. */
/* PyTorch's CUDA caching allocator, simulated: the memory ledger replays a step's
 * allocations and frees (bytes, stream) through it and reads back what
 * torch.cuda.memory_stats() would say: allocated, active and reserved bytes,
 * current and peak, and how many cudaMalloc/cudaFree calls and retries it took.
 *
 * Every rule follows c10/cuda/CUDACachingAllocator.cpp and CUDAAllocatorConfig.cpp
 * (read in the v2.6.0 release; docs/method.md, "The caching allocator", gives
 * each rule with its lines and what differs between releases): sizes rounded to
 * 512 bytes (or to power-of-two divisions), a small pool (<= 1 MiB, 2 MiB
 * segments) and a large pool (20 MiB segments below 10 MiB, else the request
 * rounded to 2 MiB), best fit per (pool, stream), splitting and merging,
 * max_split_size, record_stream's deferred frees, empty_cache, expandable
 * segments mapped in pages, and the free-and-retry path when a segment does not
 * fit in the capacity. Nothing here touches a GPU.
 *
 * Library code: every call returns a status; none prints or exits. */
#ifndef REF_ALLOCATOR_H
#define REF_ALLOCATOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* PyTorch's constants (CUDACachingAllocator.cpp v2.6.0 lines 51-52, 121-128). */
#define REF_ALLOC_MIN_BLOCK INT64_C(512)          /* kMinBlockSize: every size rounds to it */
#define REF_ALLOC_SMALL_SIZE INT64_C(1048576)     /* kSmallSize: largest small-pool request */
#define REF_ALLOC_SMALL_BUFFER INT64_C(2097152)   /* kSmallBuffer: small-pool segment, and page */
#define REF_ALLOC_LARGE_BUFFER INT64_C(20971520)  /* kLargeBuffer: 20 MiB segment, and page */
#define REF_ALLOC_MIN_LARGE_ALLOC INT64_C(10485760) /* kMinLargeAlloc: below it, 20 MiB segments */
#define REF_ALLOC_ROUND_LARGE INT64_C(2097152)    /* kRoundLarge: larger segments round to 2 MiB */
/* roundup_power2_divisions has one setting per power-of-two interval, from
 * [1 MiB, 2 MiB) (and everything below) to [32 GiB, ...) (CUDAAllocatorConfig.cpp
 * v2.6.0 lines 11, 26-43). */
#define REF_ALLOC_ROUNDUP_INTERVALS 16
/* At most this many distinct streams (a block's record_stream uses are a bit mask). */
#define REF_ALLOC_MAX_STREAMS 64

/* Statuses. */
#define REF_ALLOC_OK 0
#define REF_ALLOC_OOM 1      /* malloc: does not fit in capacity_bytes even after the retries */
#define REF_ALLOC_EINVAL (-1) /* bad argument or handle: ref_alloc_error() says which */
#define REF_ALLOC_ENOMEM (-2) /* the host ran out of memory */

/* A tensor's block. 0 is the null handle (a 0-byte tensor has no block, as in
 * PyTorch, whose allocate(0) returns a null pointer without calling malloc). */
typedef uint64_t ref_alloc_handle;
#define REF_ALLOC_NULL ((ref_alloc_handle)0)

typedef struct ref_alloc_config {
    /* major * 100 + minor (202 for 2.2.x, 206 for 2.6.x); 0 means 206. Accepted:
     * 2.2 to 2.x. The rules modelled are the same from 2.2 on; the version
     * only gates max_non_split_rounding_bytes (2.6 and later). */
    int torch_version;
    /* PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: one segment per (pool,
     * stream) that grows by mapping pages (2 MiB small pool, 20 MiB large). */
    bool expandable_segments;
    /* max_split_size_mb in bytes; 0 is PyTorch's default, unlimited. Blocks at
     * least this large are never split and serve only requests of at least this
     * size. Must be over 20 MiB (CUDAAllocatorConfig.cpp v2.6.0 line 86). */
    int64_t max_split_size_bytes;
    /* max_non_split_rounding_mb in bytes: how much larger than a request (of at
     * least max_split_size) a cached oversize block may be and still serve it.
     * 0 is the default, kLargeBuffer (20 MiB), the only value before 2.6. */
    int64_t max_non_split_rounding_bytes;
    /* roundup_power2_divisions per interval (0 or 1: plain 512-byte rounding; else
     * a power of two). */
    int32_t roundup_power2_divisions[REF_ALLOC_ROUNDUP_INTERVALS];
    /* Bytes the allocator may reserve (the card's memory less the CUDA context and
     * whatever else lives outside the allocator); 0: no limit (a roomy card). */
    int64_t capacity_bytes;
    /* The card's total memory: an expandable segment reserves address space for
     * 9/8 of it (find_expandable_block). 0: capacity_bytes, or 1 TiB without one. */
    int64_t device_bytes;
} ref_alloc_config;

/* torch.cuda.memory_stats() keeps each statistic for all pools, the small pool
 * and the large pool ("allocated_bytes.all.peak", ...): index with these. */
enum { REF_ALLOC_ALL, REF_ALLOC_SMALL_POOL, REF_ALLOC_LARGE_POOL, REF_ALLOC_POOL_KINDS };

typedef struct ref_alloc_stat {
    int64_t current, peak;
} ref_alloc_stat;

typedef struct ref_alloc_stats {
    ref_alloc_stat allocated_bytes[REF_ALLOC_POOL_KINDS]; /* blocks handed to tensors */
    ref_alloc_stat active_bytes[REF_ALLOC_POOL_KINDS];    /* allocated + freed but waiting on a stream's event */
    ref_alloc_stat reserved_bytes[REF_ALLOC_POOL_KINDS];  /* cudaMalloc'd segments + mapped pages */
    ref_alloc_stat requested_bytes[REF_ALLOC_POOL_KINDS]; /* what the active blocks' tensors asked for */
    ref_alloc_stat inactive_split_bytes[REF_ALLOC_POOL_KINDS]; /* free pieces of split segments (not expandable) */
    ref_alloc_stat allocation[REF_ALLOC_POOL_KINDS];      /* counts of blocks allocated */
    ref_alloc_stat active[REF_ALLOC_POOL_KINDS];          /* counts of active blocks */
    ref_alloc_stat segment[REF_ALLOC_POOL_KINDS];         /* cudaMalloc'd segments (expandable ones are not counted) */
    ref_alloc_stat inactive_split[REF_ALLOC_POOL_KINDS];  /* counts of inactive split blocks */
    int64_t num_alloc_retries;    /* mallocs that had to release the whole cache and try again */
    int64_t num_ooms;             /* mallocs that failed after that */
    int64_t num_sync_all_streams; /* synchronize_and_free_events calls (empty_cache, retries) */
    int64_t num_device_alloc;     /* cudaMalloc calls and page mappings */
    int64_t num_device_free;      /* cudaFree calls and page unmappings */
    ref_alloc_stat expandable_segments; /* live expandable segments (not a torch key) */
    int64_t num_capacity_refusals; /* segments or pages refused because they would pass
                                      capacity_bytes (not a torch key). While it is 0 the
                                      allocator has done exactly what it does with no capacity
                                      set (and the same device_bytes, which sizes expandable
                                      segments' address space) */
} ref_alloc_stats;

/* What the last failed malloc asked for, and the state it left. */
typedef struct ref_alloc_oom {
    int64_t requested_bytes; /* the tensor's bytes */
    int64_t rounded_bytes;   /* its block size after rounding */
    int64_t segment_bytes;   /* the segment it needed ("Tried to allocate" in PyTorch's message) */
    int32_t stream;
    int64_t allocated_bytes, reserved_bytes, capacity_bytes; /* after the retries */
} ref_alloc_oom;

typedef struct ref_alloc ref_alloc;

/* PyTorch's defaults (PYTORCH_CUDA_ALLOC_CONF unset) for torch 2.6. */
void ref_alloc_config_default(ref_alloc_config *cfg);

/* Reads a PYTORCH_CUDA_ALLOC_CONF string into cfg (whose capacity, device bytes
 * and torch_version are kept), as CUDAAllocatorConfig::parseArgs reads it:
 * max_split_size_mb, max_non_split_rounding_mb, roundup_power2_divisions (N or
 * [MB:N,...,>:N]), expandable_segments, and the options that change nothing
 * simulated here (garbage_collection_threshold, which acts only under
 * set_per_process_memory_fraction; release_lock_on_cudamalloc; pinned_*;
 * backend:native). backend:cudaMallocAsync and unknown options are refused.
 * 0, or -1 with one line in err. */
int ref_alloc_config_parse(const char *conf, ref_alloc_config *cfg, char *err, size_t errlen);

/* "2.6.0", "2.2.2+cu121", "2.13" -> 206, 202, 213. 0, or -1 with a message. */
int ref_alloc_version_parse(const char *torch, int *version, char *err, size_t errlen);

/* A fresh allocator (nothing reserved), or NULL with a message in err. */
ref_alloc *ref_alloc_new(const ref_alloc_config *cfg, char *err, size_t errlen);
void ref_alloc_free(ref_alloc *a);
/* Back to fresh with the same configuration, keeping the host buffers. */
void ref_alloc_reset(ref_alloc *a);

/* A tensor of `bytes` allocated on `stream` (any int32 id; PyTorch's blocks are
 * reused only by their stream). REF_ALLOC_OK with *out set; REF_ALLOC_OOM when
 * even after freeing the cache it would exceed capacity_bytes (ref_alloc_last_oom
 * says what); REF_ALLOC_EINVAL or REF_ALLOC_ENOMEM. */
int ref_alloc_malloc(ref_alloc *a, int64_t bytes, int32_t stream, ref_alloc_handle *out);

/* The tensor is freed. Without record_stream uses its block returns to the cache
 * at once (merged with free neighbours); with them it stays active, unusable,
 * until every recorded stream's event completes (ref_alloc_sync_stream). */
int ref_alloc_release(ref_alloc *a, ref_alloc_handle h);

/* Tensor.record_stream(stream): the block is in use on `stream` too; a use on
 * its own allocation stream is ignored, as in PyTorch. */
int ref_alloc_record_stream(ref_alloc *a, ref_alloc_handle h, int32_t stream);

/* record_stream(use_stream) then release: the usual side-stream free
 * (a gradient bucket reduced on a communication stream, a prefetch copied on a
 * copy stream). */
int ref_alloc_release_pending(ref_alloc *a, ref_alloc_handle h, int32_t use_stream);

/* The work queued so far on `stream` has finished: the frees waiting on it
 * complete. PyTorch notices at its next malloc (process_events); here at once. */
int ref_alloc_sync_stream(ref_alloc *a, int32_t stream);
/* Every stream has finished (torch.cuda.synchronize()). */
int ref_alloc_sync(ref_alloc *a);

/* torch.cuda.empty_cache(): waits for pending frees, then gives back every
 * cached segment with nothing allocated and, under expandable segments, every
 * free page. */
int ref_alloc_empty_cache(ref_alloc *a);

/* The statistics now. */
void ref_alloc_stats_get(const ref_alloc *a, ref_alloc_stats *out);
/* reserved_bytes.all.current, cheaply. */
int64_t ref_alloc_reserved_now(const ref_alloc *a);
/* torch.cuda.reset_peak_memory_stats(): every peak becomes its current value. */
void ref_alloc_reset_peaks(ref_alloc *a);

/* The size of the block a live tensor got (its request rounded), or -1. */
int64_t ref_alloc_block_bytes(const ref_alloc *a, ref_alloc_handle h);

/* The last REF_ALLOC_OOM's details (zeros before any). */
const ref_alloc_oom *ref_alloc_last_oom(const ref_alloc *a);
/* PyTorch's message for it: "CUDA out of memory. Tried to allocate 20.00 MiB. ..." */
void ref_alloc_oom_message(const ref_alloc *a, char *buf, size_t len);

/* The message of the last REF_ALLOC_EINVAL / REF_ALLOC_ENOMEM. */
const char *ref_alloc_error(const ref_alloc *a);

/* Checks every invariant of the simulated state (blocks tile their segments,
 * the free sets hold exactly the free blocks in order, no two free neighbours
 * are left unmerged, the statistics equal sums over the blocks). For tests and
 * the fuzzer: O(blocks). 0, or -1 with the first violation in err. */
int ref_alloc_check(const ref_alloc *a, char *err, size_t errlen);

#endif
