/* ftrain's CUDA attention kernels priced by their L1 wavefronts
 * (work_ftrain_cuda.h). The loads per iteration are counted from the row
 * bodies of trainer/backend/cuda/attn_rows.h (ftrain 0.1): ar_dot and
 * ar_axpby read both operands from memory at each call, which the PTX of
 * nvcc 13.0 for sm_90 keeps (its dot loops load both operands). */
#include "work_ftrain_cuda.h"

/* Field by field into the zeroed event: a struct copy would carry the
 * source's padding bytes (after by_key), and steps are compared and hashed
 * byte for byte (search/plan_memo.c). */
static void simt(est_step *st, const est_row_kernel *k) {
    est_event *e = est_step_add(st, EST_EV_SIMT);
    if (!e) return;
    est_row_kernel *d = &e->u.simt.kernel;
    d->rows = k->rows;
    d->T = k->T;
    d->group = k->group;
    d->by_key = k->by_key;
    d->distinct = k->distinct;
    d->shared = k->shared;
    d->once_distinct = k->once_distinct;
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
                                    bool eager, bool backward) {
    const double q = B * nh * T, kv = B * nkv * T, g = nh / nkv;
    if (!eager && !backward) {
        simt(st, &(est_row_kernel){q, T, g, false, hd, 2 * hd, hd});
    } else if (!eager) {
        simt(st, &(est_row_kernel){q, 1, g, false, 0, 0, 2 * hd});
        simt(st, &(est_row_kernel){q, T, g, false, 2 * hd, 3 * hd, 3 * hd});
        simt(st, &(est_row_kernel){kv, T, g, true, 6 * hd, 2, 2 * hd});
    } else if (!backward) {
        simt(st, &(est_row_kernel){q, T, g, false, 3 * hd + 1, 4 * hd, T + hd});
    } else {
        simt(st, &(est_row_kernel){q, T, g, false, hd + 3, hd, 3 * T});
        simt(st, &(est_row_kernel){q, T, g, false, 1, hd, hd});
        simt(st, &(est_row_kernel){kv, T, g, true, 2 * hd + 2, 0, 2 * hd});
    }
}
