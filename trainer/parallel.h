/* OpenMP, optional. Every parallel loop in the trainer gives each output
 * element to exactly one iteration and sums inside an iteration in a fixed
 * order, so results are bitwise the same for any thread count (no atomics on
 * floats, no OpenMP reductions). Without -fopenmp the pragmas vanish. */
#ifndef TR_PARALLEL_H
#define TR_PARALLEL_H

/* About 20 us of work on one core. */
#define TR_PAR_MIN_WORK ((int64_t)1 << 16)

#ifdef _OPENMP
#include <omp.h>
#define TR_PRAGMA(x) _Pragma(#x)
/* `work` estimates the loop's element operations: below TR_PAR_MIN_WORK the
 * loop runs on one thread, since waking a team costs more than it saves (and
 * far more on a busy machine, where spinning threads fight for cores). */
#define TR_PAR_FOR(work) TR_PRAGMA(omp parallel for schedule(static) if((work) >= TR_PAR_MIN_WORK))
#define TR_PAR_FOR2(work) TR_PRAGMA(omp parallel for collapse(2) schedule(static) if((work) >= TR_PAR_MIN_WORK))
#define TR_PAR_FOR3(work) TR_PRAGMA(omp parallel for collapse(3) schedule(static) if((work) >= TR_PAR_MIN_WORK))
/* Element-wise inner loops (no reduction across iterations), so vector and
 * scalar code give the same bits (x86-64 without -mfma contracts nothing). */
#define TR_SIMD TR_PRAGMA(omp simd)
static inline int tr_max_threads(void) { return omp_get_max_threads(); }
static inline void tr_set_threads(int n) { omp_set_num_threads(n > 0 ? n : 1); }
#else
#define TR_PAR_FOR(work)
#define TR_PAR_FOR2(work)
#define TR_PAR_FOR3(work)
#define TR_SIMD
static inline int tr_max_threads(void) { return 1; }
static inline void tr_set_threads(int n) { (void)n; }
#endif

#endif
