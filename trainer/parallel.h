/* OpenMP, optional. Every parallel loop in the trainer gives each output
 * element to exactly one iteration and sums inside an iteration in a fixed
 * order, so results are bitwise the same for any thread count (no atomics on
 * floats, no OpenMP reductions). Without -fopenmp the pragmas vanish. */
#ifndef TR_PARALLEL_H
#define TR_PARALLEL_H

#ifdef _OPENMP
#include <omp.h>
#define TR_PRAGMA(x) _Pragma(#x)
#define TR_PAR_FOR TR_PRAGMA(omp parallel for schedule(static))
#define TR_PAR_FOR2 TR_PRAGMA(omp parallel for collapse(2) schedule(static))
#define TR_PAR_FOR3 TR_PRAGMA(omp parallel for collapse(3) schedule(static))
static inline int tr_max_threads(void) { return omp_get_max_threads(); }
static inline void tr_set_threads(int n) { omp_set_num_threads(n > 0 ? n : 1); }
#else
#define TR_PAR_FOR
#define TR_PAR_FOR2
#define TR_PAR_FOR3
static inline int tr_max_threads(void) { return 1; }
static inline void tr_set_threads(int n) { (void)n; }
#endif

#endif
