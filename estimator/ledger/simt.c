/* The wavefronts of a thread-per-row kernel on a card's SMs (simt.h). */
#include "simt.h"

#include <math.h>
#include <stdlib.h>

enum { ROW_THREADS = 128, WARP = 32 };

/* Iterations of the warp covering rows first..last (its longest lane). A
 * warp that spans two heads holds row t = T-1 of one (query rows: T keys)
 * and row j = 0 of the next (key rows: group x T). */
static double warp_iterations(const est_row_kernel *k, double first, double last) {
    const bool spans = floor(first / k->T) != floor(last / k->T);
    if (k->by_key) return k->group * (spans ? k->T : k->T - fmod(first, k->T));
    return spans ? k->T : fmod(last, k->T) + 1;
}

static void sift_down(double *h, size_t n, size_t i) {
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        if (l < n && h[l] < h[m]) m = l;
        if (l + 1 < n && h[l + 1] < h[m]) m = l + 1;
        if (m == i) return;
        const double t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

/* Past this many blocks per SM the kernel fills every SM many times over:
 * its wavefronts spread evenly (one head's rows, as if aligned to a warp,
 * times the heads, over the SMs; the greedy placement differs from that by at
 * most one block, a sixty-fourth of an SM's share) instead of block by
 * block. */
#define EVEN_BLOCKS_PER_SM 64.0

static double spread_evenly(const est_row_kernel *k, double sms, double per_iter, double once) {
    double head = 0;
    for (double first = 0; first < k->T; first += WARP)
        head += warp_iterations(k, first, fmin(first + WARP - 1, k->T - 1)) * per_iter + once;
    return head * (k->rows / k->T) / sms;
}

double est_row_kernel_sm_cycles(const est_row_kernel *k, double sms) {
    if (!(k->rows >= 1) || !(k->T >= 1) || !(sms >= 1)) return 0;
    const double per_iter = WARP * k->distinct + k->shared, once = WARP * k->once_distinct;
    const double blocks = ceil(k->rows / ROW_THREADS);
    if (!(blocks <= EVEN_BLOCKS_PER_SM * sms)) return spread_evenly(k, sms, per_iter, once);
    const size_t n = (size_t)fmin(sms, blocks);
    double *load = calloc(n, sizeof *load); /* a min-heap of the SMs' wavefronts */
    if (!load) return 0;
    for (double b = 0; b < blocks; b++) {
        double w = 0;
        for (int i = 0; i < ROW_THREADS / WARP; i++) {
            const double first = (b * ROW_THREADS + i * WARP);
            if (first >= k->rows) break;
            const double last = fmin(first + WARP - 1, k->rows - 1);
            w += warp_iterations(k, first, last) * per_iter + once;
        }
        load[0] += w; /* the least loaded SM takes the next block */
        sift_down(load, n, 0);
    }
    double busiest = 0;
    for (size_t i = 0; i < n; i++) busiest = fmax(busiest, load[i]);
    free(load);
    return busiest;
}
