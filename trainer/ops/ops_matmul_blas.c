/* fp32 linear layers through a BLAS (CBLAS sgemm); the math and shapes are
 * those of ops_matmul.c, whose kernels remain the reference and the bf16 path.
 *
 * The BLAS is OpenBLAS (Debian libopenblas0-pthread) told to use one thread
 * of its own: the pool's threads call it side by side, each on its own slice,
 *   forward   out[:, s]    = inp @ w[s, :]^T            (slices of output features)
 *   dinp      dinp[:, s]   = dout @ w[:, s]             (slices of input features)
 *   dw        dw[s, :]    += dout[:, s]^T @ inp         (slices of output features)
 * so there is one pool on the cores, ours, and a BLAS thread never competes
 * with it. Slices are SLICE wide whatever the thread count, so each element
 * is always computed by the same sgemm call and results do not depend on the
 * threads. Why not the serial build (libopenblas0-serial), which starts no
 * thread at all: Debian's 0.3.21 serial build is not safe to call from
 * several threads at once (four threads calling sgemm side by side got a
 * wrong product in about one call in ten; the same program with the pthread
 * build, none), while the pthread build locks its buffers. The pthread build starts its workers when loaded (one per other
 * CPU); with one BLAS thread they are never handed work and sleep.
 *
 * sgemm sums each element over the reduction dimension in blocks in a fixed
 * order for a given shape and CPU, with fused multiply-adds where the CPU has
 * them: not the reference's order, so the two agree to fp32 rounding (the op
 * tests state the tolerance). Bias is added after the product, as the
 * reference does. */
/* ops.h first: OpenBLAS's cblas.h includes <complex.h>, whose macro I would
 * rename ops.h's parameters of that name. */
#include "ops.h"
#include "parallel.h"

#include <cblas.h>
#include <pthread.h>

/* Columns per sgemm call: wide enough that packing the shared operand costs
 * little against the product (the BLAS repacks it once per call), narrow
 * enough that a 256-column layer still splits for two threads. */
#define SLICE 128

typedef struct blas_args {
    float *out;
    const float *inp, *w, *bias, *dout;
    float *dinp, *dw, *dbias;
    int64_t n, c, oc;
} blas_args;

static int64_t slices(int64_t cols) { return (cols + SLICE - 1) / SLICE; }
static int64_t width(int64_t s, int64_t cols) { return cols - s * SLICE < SLICE ? cols - s * SLICE : SLICE; }

static void fwd_slices(void *p, int64_t s0, int64_t s1) {
    const blas_args *a = p;
    for (int64_t s = s0; s < s1; s++) {
        const int64_t o0 = s * SLICE, on = width(s, a->oc);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)a->n, (int)on, (int)a->c, 1.0f, a->inp,
                    (int)a->c, a->w + o0 * a->c, (int)a->c, 0.0f, a->out + o0, (int)a->oc);
        if (!a->bias) continue;
        for (int64_t i = 0; i < a->n; i++) {
            float *row = a->out + i * a->oc + o0;
            TR_SIMD
            for (int64_t o = 0; o < on; o++) row[o] += a->bias[o0 + o];
        }
    }
}

static void dinp_slices(void *p, int64_t s0, int64_t s1) {
    const blas_args *a = p;
    for (int64_t s = s0; s < s1; s++) {
        const int64_t k0 = s * SLICE, kn = width(s, a->c);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)a->n, (int)kn, (int)a->oc, 1.0f, a->dout,
                    (int)a->oc, a->w + k0, (int)a->c, 0.0f, a->dinp + k0, (int)a->c);
    }
}

static void dw_slices(void *p, int64_t s0, int64_t s1) {
    const blas_args *a = p;
    for (int64_t s = s0; s < s1; s++) {
        const int64_t o0 = s * SLICE, on = width(s, a->oc);
        if (a->dw)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)on, (int)a->c, (int)a->n, 1.0f,
                        a->dout + o0, (int)a->oc, a->inp, (int)a->c, 1.0f, a->dw + o0 * a->c, (int)a->c);
        if (!a->dbias) continue;
        /* The reference's order: rows in sequence, one sum per feature. */
        float acc[SLICE] = {0};
        for (int64_t i = 0; i < a->n; i++) {
            const float *row = a->dout + i * a->oc + o0;
            TR_SIMD
            for (int64_t o = 0; o < on; o++) acc[o] += row[o];
        }
        for (int64_t o = 0; o < on; o++) a->dbias[o0 + o] += acc[o];
    }
}

/* sgemm takes int dimensions (and rejects empty leading dimensions); other
 * products stay on the reference. */
static int fits_int(int64_t n, int64_t c, int64_t oc) {
    const int64_t lim = 0x7fffffff;
    return n > 0 && c > 0 && oc > 0 && n <= lim && c <= lim && oc <= lim && n * c <= lim && n * oc <= lim && oc * c <= lim;
}

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static void blas_single_thread(void) { openblas_set_num_threads(1); }

void tr_cpu_matmul_fwd(void *out, const void *inp, const void *w, const void *bias, int64_t n,
                       int64_t c, int64_t oc, tr_dtype dt) {
    pthread_once(&blas_once, blas_single_thread);
    if (dt != TR_F32 || !fits_int(n, c, oc)) {
        tr_cpu_matmul_fwd_ref(out, inp, w, bias, n, c, oc, dt);
        return;
    }
    blas_args a = {.out = out, .inp = inp, .w = w, .bias = bias, .n = n, .c = c, .oc = oc};
    tr_par_for(slices(oc), n * c * oc, fwd_slices, &a);
}

void tr_cpu_matmul_bwd(void *dinp, void *dw, void *dbias, const void *dout, const void *inp,
                       const void *w, int64_t n, int64_t c, int64_t oc, tr_dtype dt) {
    pthread_once(&blas_once, blas_single_thread);
    if (dt != TR_F32 || !fits_int(n, c, oc)) {
        tr_cpu_matmul_bwd_ref(dinp, dw, dbias, dout, inp, w, n, c, oc, dt);
        return;
    }
    blas_args a = {.dout = dout, .inp = inp, .w = w, .dinp = dinp, .dw = dw, .dbias = dbias,
                   .n = n, .c = c, .oc = oc};
    if (dinp) tr_par_for(slices(c), n * c * oc, dinp_slices, &a);
    if (dw || dbias) tr_par_for(slices(oc), n * c * oc, dw_slices, &a);
}
