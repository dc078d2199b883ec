/* In-process communicator: N ranks are N threads of this process sharing one
 * address space. Each collective posts the rank's buffer pointers, meets the
 * others at a barrier, does its own share of the work reading the peers'
 * buffers directly, and meets them again before returning. No staging
 * buffers: reductions run in place, rank by rank in rank order (so the result
 * is bitwise reproducible), summing in fp32 (fp64 for F64) and rounding once.
 *
 * Ownership that makes the in-place forms race-free: during a reduction rank r
 * writes only chunk r of its own buffer, which no other rank reads; during a
 * gather rank r writes chunks k != r of its own buffer, which no rank reads. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "json_util.h"

typedef struct shared {
    int n;
    pthread_barrier_t barrier;
    const void *send[64];
    void *recv[64];
} shared;

static void meet(tr_comm *c) { pthread_barrier_wait(&((shared *)c->impl)->barrier); }

static void post(tr_comm *c, const void *send, void *recv) {
    shared *s = c->impl;
    s->send[c->rank] = send;
    s->recv[c->rank] = recv;
    meet(c);
}

/* dst[i] = sum_k src_k[off + i] over ranks in order, for i < n. */
static void sum_into(shared *s, void *dst, int64_t off, int64_t n, tr_dtype dt) {
    if (dt == TR_F64) {
        for (int64_t i = 0; i < n; i++) {
            double acc = 0;
            for (int k = 0; k < s->n; k++) acc += ((const double *)s->send[k])[off + i];
            ((double *)dst)[i] = acc;
        }
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        float acc = 0;
        for (int k = 0; k < s->n; k++) acc += tr_ld(s->send[k], off + i, dt);
        tr_st(dst, i, acc, dt);
    }
}

static int th_reduce_scatter(tr_comm *c, const void *send, void *recv, int64_t cnt, tr_dtype dt) {
    post(c, send, recv);
    sum_into(c->impl, recv, (int64_t)c->rank * cnt, cnt, dt);
    meet(c);
    return 0;
}

static int th_all_gather(tr_comm *c, const void *send, void *recv, int64_t cnt, tr_dtype dt) {
    shared *s = c->impl;
    post(c, send, recv);
    size_t bytes = (size_t)(cnt * tr_dtype_bytes(dt));
    for (int k = 0; k < s->n; k++) {
        void *dst = (char *)recv + (size_t)k * bytes;
        if (dst != s->send[k]) memcpy(dst, s->send[k], bytes);
    }
    meet(c);
    return 0;
}

static int th_all_reduce(tr_comm *c, void *buf, int64_t count, tr_dtype dt) {
    shared *s = c->impl;
    int64_t chunk = (count + s->n - 1) / s->n, esz = tr_dtype_bytes(dt);
    post(c, buf, buf);
    int64_t lo = (int64_t)c->rank * chunk, hi = lo + chunk < count ? lo + chunk : count;
    if (lo < hi) sum_into(s, (char *)buf + lo * esz, lo, hi - lo, dt);
    meet(c);
    for (int k = 0; k < s->n; k++) {
        int64_t klo = (int64_t)k * chunk, khi = klo + chunk < count ? klo + chunk : count;
        if (k == c->rank || klo >= khi) continue;
        memcpy((char *)buf + klo * esz, (const char *)s->send[k] + klo * esz, (size_t)((khi - klo) * esz));
    }
    meet(c);
    return 0;
}

static int th_broadcast(tr_comm *c, void *buf, int64_t count, tr_dtype dt, int root) {
    shared *s = c->impl;
    post(c, buf, buf);
    if (c->rank != root) memcpy(buf, s->send[root], (size_t)(count * tr_dtype_bytes(dt)));
    meet(c);
    return 0;
}

static int th_barrier(tr_comm *c) {
    meet(c);
    return 0;
}

static const tr_comm_ops threads_ops = {
    .name = "threads",
    .all_reduce = th_all_reduce,
    .reduce_scatter = th_reduce_scatter,
    .all_gather = th_all_gather,
    .broadcast = th_broadcast,
    .barrier = th_barrier,
};

int tr_comm_threads_create(int n, tr_comm *handles, char *err, size_t errlen) {
    if (n < 1 || n > 64) return ft_errorf(err, errlen, "in-process ranks must be 1..64");
    shared *s = calloc(1, sizeof *s);
    if (!s) return ft_errorf(err, errlen, "out of memory creating the communicator");
    s->n = n;
    if (pthread_barrier_init(&s->barrier, NULL, (unsigned)n)) {
        free(s);
        return ft_errorf(err, errlen, "cannot create the rank barrier");
    }
    for (int r = 0; r < n; r++) handles[r] = (tr_comm){&threads_ops, r, n, s};
    return 0;
}

void tr_comm_threads_destroy(tr_comm *handles, int n) {
    if (n < 1 || !handles[0].impl) return;
    shared *s = handles[0].impl;
    pthread_barrier_destroy(&s->barrier);
    free(s);
    for (int r = 0; r < n; r++) handles[r].impl = NULL;
}
