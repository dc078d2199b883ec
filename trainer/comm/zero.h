/* ZeRO (Rajbhandari et al. 2019) over units (sizes.h):
 *   stage 0  every rank holds and updates everything; gradients all-reduced
 *   stage 1  optimizer state and master weights sharded; gradients
 *            reduce-scattered after the last micro-batch, updated weights all-gathered
 *   stage 2  gradients sharded too: each unit's gradient is built in a bucket
 *            during backward, reduce-scattered, and added into the shard
 *   stage 3  weights sharded too: each unit is all-gathered into a gather
 *            buffer before it is used (forward, loss, backward) and dropped after
 * A rank's partition of unit u is [rank*shard, (rank+1)*shard) of the padded
 * unit; padding elements are zero and never updated. */
#ifndef TR_ZERO_H
#define TR_ZERO_H

#include "rank.h"

void tr_zero_gather(tr_rank *r, int64_t u);          /* stage 3: acquire + all-gather unit u */
void tr_zero_release_gather(tr_rank *r, int64_t u);
void tr_zero_open_bucket(tr_rank *r, int64_t u);     /* stage 2/3: acquire + zero unit u's bucket */
void tr_zero_reduce_bucket(tr_rank *r, int64_t u);   /* reduce-scatter, add into the shard, release */
void tr_zero_reduce_grads(tr_rank *r);               /* stage 0/1, after the last micro-batch */
void tr_zero_publish_params(tr_rank *r);             /* stage 1/2, after the optimizer */

/* A run of consecutive elements of one tensor inside this rank's partition. */
typedef struct tr_segment {
    int64_t u;          /* unit */
    tr_tensor_id t;     /* tensor */
    int64_t idx;        /* first element, index inside the unit */
    int64_t n;          /* elements */
    int64_t full;       /* index in the full flat vector */
    int64_t shard;      /* index in the shard vector (stage >= 1), else -1 */
    int64_t opt;        /* index in the optimizer's vector (full at stage 0, else shard) */
} tr_segment;

typedef void (*tr_segment_fn)(const tr_segment *seg, void *ctx);
/* Calls fn for every segment of rank's partition, in unit and tensor order. */
void tr_zero_for_partition(const tr_sizes *s, int rank, tr_segment_fn fn, void *ctx);

#endif
