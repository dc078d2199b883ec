/* The communicator: collectives between ranks, NCCL's semantics.
 *
 * Counts are elements, never bytes. Sums are the only reduction. In-place use
 * follows NCCL: reduce_scatter is in place when recv == send + rank*recv_count,
 * all_gather when send == recv + rank*send_count. An implementation must give
 * every rank bitwise the same all_reduce result, and the same result on every
 * run (a fixed reduction order), so that training is deterministic.
 *
 * Implementations: in-process threads (comm_threads.c, one handle per rank
 * thread); NCCL arrives with the CUDA backend behind the same table. */
#ifndef TR_COMM_H
#define TR_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"

typedef struct tr_comm tr_comm;

typedef struct tr_comm_ops {
    const char *name;
    /* buf (count) = sum over ranks of buf, in place. */
    int (*all_reduce)(tr_comm *c, void *buf, int64_t count, tr_dtype dt);
    /* recv (recv_count) = sum over ranks k of send_k[rank*recv_count : (rank+1)*recv_count]. */
    int (*reduce_scatter)(tr_comm *c, const void *send, void *recv, int64_t recv_count, tr_dtype dt);
    /* recv[k*send_count : (k+1)*send_count] = send_k for every rank k. */
    int (*all_gather)(tr_comm *c, const void *send, void *recv, int64_t send_count, tr_dtype dt);
    /* buf = buf of rank `root`. */
    int (*broadcast)(tr_comm *c, void *buf, int64_t count, tr_dtype dt, int root);
    int (*barrier)(tr_comm *c);
} tr_comm_ops;

struct tr_comm {
    const tr_comm_ops *ops;
    int rank, size;
    void *impl;      /* the implementation's shared state */
};

/* N handles (one per rank thread) over one shared in-process group. */
int tr_comm_threads_create(int n, tr_comm *handles, char *err, size_t errlen);
void tr_comm_threads_destroy(tr_comm *handles, int n);

#endif
