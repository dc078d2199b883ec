/* The trainer's threads: one pool of sleeping workers (pool.c) shared by
 * every rank and every op, sized from the CPUs the process may really use
 * (cpus.h). Workers wait on a condition variable, never spin: on a shared
 * machine a spinning thread takes a core from someone else's work (the
 * OpenMP runtime this replaces spins about 300,000 iterations at each
 * barrier unless OMP_WAIT_POLICY=passive, libgomp's GOMP_SPINCOUNT).
 *
 * Every parallel loop gives each output element to exactly one iteration and
 * sums inside an iteration in a fixed order, so results are bitwise the same
 * for any thread count (no atomics on floats, no parallel reductions). */
#ifndef TR_PARALLEL_H
#define TR_PARALLEL_H

#include <stdint.h>

/* About 20 us of work on one core: below it a loop runs on its caller, since
 * waking workers costs more than it saves. */
#define TR_PAR_MIN_WORK ((int64_t)1 << 16)

/* Runs iterations [i0, i1) of a loop; ctx carries its arguments. */
typedef void (*tr_range_fn)(void *ctx, int64_t i0, int64_t i1);

/* Runs fn over [0, n) on the calling thread's team (tr_set_threads), in
 * contiguous ranges; returns when all are done. `work` estimates the loop's
 * element operations: below TR_PAR_MIN_WORK, or with a team of one, fn(ctx,
 * 0, n) runs on the caller. Workers run with a team of one, so a nested call
 * runs inline. */
void tr_par_for(int64_t n, int64_t work, tr_range_fn fn, void *ctx);

/* The calling thread's team size: what tr_set_threads set on this thread,
 * else the CPUs available to the process (cpus.h). */
int tr_max_threads(void);
/* Sets the calling thread's team size (n < 1 means 1); the pool grows to
 * n - 1 workers when it first needs them. */
void tr_set_threads(int n);

/* Element-wise inner loops (no reduction across iterations), so vector and
 * scalar code give the same bits (x86-64 without -mfma contracts nothing).
 * The build passes -fopenmp-simd (and -DTR_OMP_SIMD): the simd pragma
 * without the OpenMP runtime. */
#ifdef TR_OMP_SIMD
#define TR_PRAGMA(x) _Pragma(#x)
#define TR_SIMD TR_PRAGMA(omp simd)
#else
#define TR_SIMD
#endif

#endif
