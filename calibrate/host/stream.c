/* A STREAM-like host memory bandwidth benchmark (after McCalpin's STREAM:
 * copy, scale, add, triad over arrays far larger than the last-level cache),
 * for the CPU-optimizer model of docs/method.md ("The host"). Counts the bytes
 * the kernels name (copy/scale 16 per element, add/triad 24), not the
 * write-allocate reads. Prints one JSON object.
 *
 *   cc -O3 -march=native -fopenmp calibrate/host/stream.c -o build/stream
 *   OMP_NUM_THREADS=N build/stream [MiB per array]
 */
#ifdef _OPENMP
#include <omp.h>
#else
static int omp_get_max_threads(void) { return 1; }
#endif
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    const size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 512;
    const size_t n = mib * 1024 * 1024 / sizeof(double);
    double *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
    if (!a || !b || !c) {
        fprintf(stderr, "stream: out of memory\n");
        return 2;
    }
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) a[i] = 1.0, b[i] = 2.0, c[i] = 0.0;
    const int reps = 10;
    double best[4] = {1e30, 1e30, 1e30, 1e30};
    const double q = 3.0;
    for (int r = 0; r < reps; r++) {
        double t = now_s();
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) c[i] = a[i];
        double t1 = now_s();
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) b[i] = q * c[i];
        double t2 = now_s();
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) c[i] = a[i] + b[i];
        double t3 = now_s();
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) a[i] = b[i] + q * c[i];
        double t4 = now_s();
        double d[4] = {t1 - t, t2 - t1, t3 - t2, t4 - t3};
        for (int k = 0; k < 4; k++)
            if (d[k] < best[k]) best[k] = d[k];
    }
    const double bytes[4] = {16.0 * n, 16.0 * n, 24.0 * n, 24.0 * n};
    printf("{\"threads\": %d, \"array_mib\": %zu, \"copy_gb_per_s\": %.2f, \"scale_gb_per_s\": %.2f, "
           "\"add_gb_per_s\": %.2f, \"triad_gb_per_s\": %.2f, \"check\": %.1f}\n",
           omp_get_max_threads(), mib, bytes[0] / best[0] / 1e9, bytes[1] / best[1] / 1e9,
           bytes[2] / best[2] / 1e9, bytes[3] / best[3] / 1e9, a[n / 2]);
    free(a);
    free(b);
    free(c);
    return 0;
}
