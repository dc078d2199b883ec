/* Linear layers: out = inp @ w^T + bias, the PyTorch nn.Linear convention
 * (w is (out_features, in_features), rows contiguous).
 *
 * Forward: every output element is one dot product of an input row with a
 * weight row; eight partial sums in a fixed order keep it fast and bitwise
 * reproducible. Backward:
 *   dinp[i,k]  = sum_o dout[i,o] * w[o,k]      (one thread per input row i)
 *   dw[o,k]   += sum_i dout[i,o] * inp[i,k]    (one thread per weight row o)
 *   dbias[o]  += sum_i dout[i,o]
 * Sums run over fixed-size column tiles of fp32 accumulators on the stack. */
#include <stdint.h>

#include "ops.h"
#include "parallel.h"

#define TILE 64
#define INL static inline __attribute__((always_inline))

INL float dot(const void *a, const void *b, int64_t n, tr_dtype dt) {
    float s[8] = {0};
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
        for (int l = 0; l < 8; l++) s[l] += tr_ld(a, k + l, dt) * tr_ld(b, k + l, dt);
    float tail = 0;
    for (; k < n; k++) tail += tr_ld(a, k, dt) * tr_ld(b, k, dt);
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7])) + tail;
}

INL void fwd(void *out, const void *inp, const void *w, const void *bias, int64_t n, int64_t c,
             int64_t oc, tr_dtype dt) {
    TR_PAR_FOR2
    for (int64_t i = 0; i < n; i++)
        for (int64_t o = 0; o < oc; o++) {
            float acc = dot(tr_cat(inp, i * c, dt), tr_cat(w, o * c, dt), c, dt);
            if (bias) acc += tr_ld(bias, o, dt);
            tr_st(out, i * oc + o, acc, dt);
        }
}

INL void bwd_inp(void *dinp, const void *dout, const void *w, int64_t n, int64_t c, int64_t oc,
                 tr_dtype dt) {
    TR_PAR_FOR
    for (int64_t i = 0; i < n; i++) {
        for (int64_t k0 = 0; k0 < c; k0 += TILE) {
            int64_t kn = c - k0 < TILE ? c - k0 : TILE;
            float acc[TILE] = {0};
            for (int64_t o = 0; o < oc; o++) {
                float d = tr_ld(dout, i * oc + o, dt);
                const void *wr = tr_cat(w, o * c + k0, dt);
                for (int64_t k = 0; k < kn; k++) acc[k] += d * tr_ld(wr, k, dt);
            }
            for (int64_t k = 0; k < kn; k++) tr_st(dinp, i * c + k0 + k, acc[k], dt);
        }
    }
}

INL void bwd_w(void *dw, void *dbias, const void *dout, const void *inp, int64_t n, int64_t c,
               int64_t oc, tr_dtype dt) {
    TR_PAR_FOR
    for (int64_t o = 0; o < oc; o++) {
        if (dw) {
            for (int64_t k0 = 0; k0 < c; k0 += TILE) {
                int64_t kn = c - k0 < TILE ? c - k0 : TILE;
                float acc[TILE] = {0};
                for (int64_t i = 0; i < n; i++) {
                    float d = tr_ld(dout, i * oc + o, dt);
                    const void *xr = tr_cat(inp, i * c + k0, dt);
                    for (int64_t k = 0; k < kn; k++) acc[k] += d * tr_ld(xr, k, dt);
                }
                for (int64_t k = 0; k < kn; k++) {
                    int64_t j = o * c + k0 + k;
                    tr_st(dw, j, tr_ld(dw, j, dt) + acc[k], dt);
                }
            }
        }
        if (dbias) {
            float acc = 0;
            for (int64_t i = 0; i < n; i++) acc += tr_ld(dout, i * oc + o, dt);
            tr_st(dbias, o, tr_ld(dbias, o, dt) + acc, dt);
        }
    }
}

void tr_cpu_matmul_fwd(void *out, const void *inp, const void *w, const void *bias, int64_t n,
                       int64_t c, int64_t oc, tr_dtype dt) {
    if (dt == TR_BF16) fwd(out, inp, w, bias, n, c, oc, TR_BF16);
    else fwd(out, inp, w, bias, n, c, oc, TR_F32);
}

void tr_cpu_matmul_bwd(void *dinp, void *dw, void *dbias, const void *dout, const void *inp,
                       const void *w, int64_t n, int64_t c, int64_t oc, tr_dtype dt) {
    if (dinp) {
        if (dt == TR_BF16) bwd_inp(dinp, dout, w, n, c, oc, TR_BF16);
        else bwd_inp(dinp, dout, w, n, c, oc, TR_F32);
    }
    if (dw || dbias) {
        if (dt == TR_BF16) bwd_w(dw, dbias, dout, inp, n, c, oc, TR_BF16);
        else bwd_w(dw, dbias, dout, inp, n, c, oc, TR_F32);
    }
}
