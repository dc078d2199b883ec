/* ftrain's CUDA attention kernels priced by their L1 wavefronts
 * (work_ftrain_cuda.h). The loads per iteration are counted from the row
 * bodies of trainer/backend/cuda/attn_rows.h (ftrain 0.1): ar_dot and
 * ar_axpby read both operands from memory at each call, which the PTX of
 * nvcc 13.0 for sm_90 keeps (its dot loops load both operands). */
#include "work_ftrain_cuda.h"

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

static void simt(est_step *st, const est_row_kernel *k, double sms) {
    est_event *e = est_step_add(st, EST_EV_SIMT);
    if (!e) return;
    e->u.simt.sm_cycles = est_row_kernel_sm_cycles(k, sms);
    e->u.simt.kernels = 1;
}

/* attention_cuda.cu: attn_flash_fwd (k_flash_fwd), attn_flash_bwd (k_flash_d,
 * k_flash_dq, k_flash_dkv), attn_eager_fwd (k_eager_fwd), attn_eager_bwd
 * (k_eager_ds, k_eager_dq, k_eager_dkv). Per iteration, from attn_rows.h:
 *   flash fwd, key j: q_t . k_j (q own, k shared), acc += e v_j (shared);
 *     once: the output row
 *   flash D: do_t . o_t once per row
 *   flash dq, key j: q_t . k_j, do_t . v_j, acc += ds k_j (q, do own);
 *     once: D recomputed (do, o) and the dq row
 *   flash dkv, query (hq, t): q_t . k_j and do_t . v_j (all four rows the
 *     lane's own: t = j + i differs by lane), ak += ds q_t, av += p do_t,
 *     lse and D (coalesced); once: the dk and dv rows
 *   eager fwd, key j <= t: three passes of q_t . k_j (max, sum, normalize),
 *     P_tj loaded back for acc += P_tj v_j; once: the T-wide row of P
 *     stored, the output row
 *   eager ds, key j <= t: do_t . v_j, dP stored, P and dP loaded; once: the
 *     second pass over the T-wide rows (P, dP loaded, dS stored)
 *   eager dq, key j <= t: dS_tj (own), k_j (shared); once: the dq row
 *   eager dkv, query (hq, t): dS, P, q_t and do_t, all the lane's own;
 *     once: the dk and dv rows */
void est_work_ftrain_cuda_attention(est_step *st, double B, double T, double nh, double nkv, double hd,
                                    bool eager, bool backward, double sms) {
    const double q = B * nh * T, kv = B * nkv * T, g = nh / nkv;
    if (!eager && !backward) {
        simt(st, &(est_row_kernel){q, T, g, false, hd, 2 * hd, hd}, sms);
    } else if (!eager) {
        simt(st, &(est_row_kernel){q, 1, g, false, 0, 0, 2 * hd}, sms);
        simt(st, &(est_row_kernel){q, T, g, false, 2 * hd, 3 * hd, 3 * hd}, sms);
        simt(st, &(est_row_kernel){kv, T, g, true, 6 * hd, 2, 2 * hd}, sms);
    } else if (!backward) {
        simt(st, &(est_row_kernel){q, T, g, false, 3 * hd + 1, 4 * hd, T + hd}, sms);
    } else {
        simt(st, &(est_row_kernel){q, T, g, false, hd + 3, hd, 3 * T}, sms);
        simt(st, &(est_row_kernel){q, T, g, false, 1, hd, hd}, sms);
        simt(st, &(est_row_kernel){kv, T, g, true, 2 * hd + 2, 0, 2 * hd}, sms);
    }
}
