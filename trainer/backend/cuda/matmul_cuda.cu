/* Linear layers on the GPU: out (n,oc) = inp (n,c) w(oc,c)^T + bias, and its
 * backward (ops.h's semantics: dinp written, dw and dbias accumulated),
 * through cuBLASLt.
 *
 * STATUS: compiled for sm_80/sm_90, never run (no GPU was lent while it was
 * written); `make test-gpu` compares it with the CPU backend.
 *
 * cuBLASLt is column-major, ours row-major: a row-major (r,c) matrix is the
 * column-major (c,r) one, its transpose. So, with m x n results:
 *   out^T (oc,n)  = T(w^T (c,oc)) . inp^T (c,n)         m=oc n=n  k=c   beta 0
 *   dinp^T (c,n)  = w^T (c,oc) . dout^T (oc,n)            m=c  n=n  k=oc  beta 0
 *   dw^T (c,oc)  += inp^T (c,n) . T(dout^T (oc,n))        m=c  n=oc k=n   beta 1
 * Both dtypes accumulate in fp32 (CUBLAS_COMPUTE_32F; for fp32 inputs that is
 * plain fp32, not TF32, so fp32 parity holds to 1e-4) and round once on
 * store, as the CPU's kernels do; dw's beta = 1 adds the old value before
 * that one rounding. The bias is added by a separate kernel (in bf16 a
 * second rounding: within the parity tolerance of two units), and its
 * gradient summed over rows in order by one thread per column, so the
 * result does not vary run to run.
 *
 * Algorithms come from cublasLtMatmulAlgoGetHeuristic with the actual
 * pointer alignments (the default preference assumes 256-byte alignment)
 * and the context's workspace, cached per shape in ctx->impl. A shape for
 * which cuBLASLt has no algorithm (odd leading dimensions) runs the
 * one-thread-per-element kernels of attn_rows.h instead. */
#include <cublasLt.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "attn_rows.h"
#include "check.h"

namespace trcu {
namespace {

/* One cuBLASLt product D (m,n) = op(A) op(B) + beta D, column-major. */
struct gemm {
    bool ta, tb;
    int64_t m, n, k;
    const void *A;
    int64_t lda;
    const void *B;
    int64_t ldb;
    void *D;
    int64_t ldd;
    float beta;
    tr_dtype dt;
};

/* What makes an algorithm valid: shapes, ops, dtype, beta, alignments. */
struct lt_key {
    int64_t m, n, k, lda, ldb, ldd;
    int ta, tb, dt, beta_nonzero;
    uint32_t align_a, align_b, align_d;
};
constexpr int kCache = 256;
struct lt_cache {
    int used;
    lt_key key[kCache];
    cublasLtMatmulAlgo_t algo[kCache];
    bool found[kCache];
};

uint32_t align_of(const void *p) {
    uintptr_t a = (uintptr_t)p;
    uint32_t al = 256;
    while (al > 1 && a % al) al /= 2;
    return al;
}

lt_key key_of(const gemm &g) {
    lt_key k;
    memset(&k, 0, sizeof k);
    k.m = g.m, k.n = g.n, k.k = g.k, k.lda = g.lda, k.ldb = g.ldb, k.ldd = g.ldd;
    k.ta = g.ta, k.tb = g.tb, k.dt = (int)g.dt, k.beta_nonzero = g.beta != 0.0f;
    k.align_a = align_of(g.A), k.align_b = align_of(g.B), k.align_d = align_of(g.D);
    return k;
}

struct lt_descs {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
};

void destroy_descs(lt_descs &d) {
    if (d.d) cublasLtMatrixLayoutDestroy(d.d);
    if (d.b) cublasLtMatrixLayoutDestroy(d.b);
    if (d.a) cublasLtMatrixLayoutDestroy(d.a);
    if (d.op) cublasLtMatmulDescDestroy(d.op);
}

int create_descs(tr_backend_ctx *ctx, const gemm &g, lt_descs &d) {
    const cudaDataType_t t = g.dt == TR_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    const cublasOperation_t ta = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    /* Stored shapes (before the op): A is m x k or, transposed, k x m. */
    const uint64_t ar = g.ta ? g.k : g.m, ac = g.ta ? g.m : g.k, br = g.tb ? g.n : g.k, bc = g.tb ? g.k : g.n;
    if (TR_CUBLAS_CHECK(ctx, cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F)) ||
        TR_CUBLAS_CHECK(ctx, cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta)) ||
        TR_CUBLAS_CHECK(ctx, cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb)) ||
        TR_CUBLAS_CHECK(ctx, cublasLtMatrixLayoutCreate(&d.a, t, ar, ac, g.lda)) ||
        TR_CUBLAS_CHECK(ctx, cublasLtMatrixLayoutCreate(&d.b, t, br, bc, g.ldb)) ||
        TR_CUBLAS_CHECK(ctx, cublasLtMatrixLayoutCreate(&d.d, t, (uint64_t)g.m, (uint64_t)g.n, g.ldd)))
        return -1;
    return 0;
}

/* The heuristic's first algorithm for the descriptors d and key k: 0 found, 1 none (use the
 * fallback), -1 failure (recorded in ctx). */
int query_algo(tr_backend_ctx *ctx, const lt_descs &d, const lt_key &k, cublasLtMatmulAlgo_t *algo) {
    cublasLtMatmulPreference_t pref = nullptr;
    const uint64_t ws = ctx->workspace_bytes;
    int rc = 0, found = 0;
    cublasLtMatmulHeuristicResult_t res;
    memset(&res, 0, sizeof res);
    if (TR_CUBLAS_CHECK(ctx, cublasLtMatmulPreferenceCreate(&pref)) ||
        TR_CUBLAS_CHECK(ctx, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                                  sizeof ws)) ||
        TR_CUBLAS_CHECK(ctx, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                                  &k.align_a, sizeof k.align_a)) ||
        TR_CUBLAS_CHECK(ctx, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                                  &k.align_b, sizeof k.align_b)) ||
        TR_CUBLAS_CHECK(ctx, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                                  &k.align_d, sizeof k.align_d)) ||
        TR_CUBLAS_CHECK(ctx, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                                  &k.align_d, sizeof k.align_d)))
        rc = -1;
    if (!rc) {
        cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(ctx->blas), d.op, d.a, d.b,
                                                           d.d, d.d, pref, 1, &res, &found);
        if (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && found == 0)) rc = 1;
        else if (TR_CUBLAS_CHECK(ctx, st)) rc = -1;
    }
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (rc == 0) *algo = res.algo;
    return rc;
}

/* The cached algorithm of g's key, querying on a miss. */
int find_algo(tr_backend_ctx *ctx, const gemm &g, const lt_descs &d, cublasLtMatmulAlgo_t *algo) {
    lt_cache *c = static_cast<lt_cache *>(ctx->impl);
    const lt_key k = key_of(g);
    for (int i = 0; c && i < c->used; i++)
        if (!memcmp(&c->key[i], &k, sizeof k)) {
            if (!c->found[i]) return 1;
            *algo = c->algo[i];
            return 0;
        }
    int rc = query_algo(ctx, d, k, algo);
    if (rc >= 0 && c && c->used < kCache) {
        c->key[c->used] = k, c->found[c->used] = rc == 0;
        if (rc == 0) c->algo[c->used] = *algo;
        c->used++;
    }
    return rc;
}

/* D = op(A) op(B) + beta D: 0 done, 1 no algorithm (the caller falls back), -1 failed. */
int lt_gemm(tr_backend_ctx *ctx, const gemm &g) {
    lt_descs d;
    cublasLtMatmulAlgo_t algo;
    int rc = create_descs(ctx, g, d) ? -1 : find_algo(ctx, g, d, &algo);
    if (rc == 0) {
        const float alpha = 1.0f, beta = g.beta;
        cublasStatus_t st = cublasLtMatmul(static_cast<cublasLtHandle_t>(ctx->blas), d.op, &alpha, g.A, d.a, g.B, d.b,
                                           &beta, g.D, d.d, g.D, d.d, &algo, ctx->workspace, ctx->workspace_bytes,
                                           stream_of(ctx));
        if (st == CUBLAS_STATUS_NOT_SUPPORTED) rc = 1;
        else if (TR_CUBLAS_CHECK(ctx, st)) rc = -1;
    }
    destroy_descs(d);
    return rc;
}

__global__ void k_mm_fwd(void *out, const void *inp, const void *w, const void *bias, int64_t n, int64_t c,
                         int64_t oc, tr_dtype dt) {
    TR_GRID_LOOP(e, n * oc) ar_mm_fwd_elem(out, inp, w, bias, c, oc, e, dt);
}
__global__ void k_mm_dinp(void *dinp, const void *dout, const void *w, int64_t n, int64_t c, int64_t oc, tr_dtype dt) {
    TR_GRID_LOOP(e, n * c) ar_mm_bwd_dinp_elem(dinp, dout, w, c, oc, e, dt);
}
__global__ void k_mm_dw(void *dw, const void *dout, const void *inp, int64_t n, int64_t c, int64_t oc, tr_dtype dt) {
    TR_GRID_LOOP(e, oc * c) ar_mm_bwd_dw_elem(dw, dout, inp, n, c, oc, e, dt);
}
__global__ void k_bias_add(void *out, const void *bias, int64_t n, int64_t oc, tr_dtype dt) {
    TR_GRID_LOOP(e, n * oc) ar_bias_add_elem(out, bias, oc, e, dt);
}
__global__ void k_bias_grad(void *dbias, const void *dout, int64_t n, int64_t oc, tr_dtype dt) {
    TR_GRID_LOOP(o, oc) ar_bias_grad_col(dbias, dout, n, oc, o, dt);
}

}  // namespace

int matmul_open(tr_backend_ctx *ctx) {
    ctx->impl = calloc(1, sizeof(lt_cache));
    return ctx->impl ? 0 : tr_backend_fail(ctx, "out of host memory for the cuBLASLt algorithm cache");
}
void matmul_close(tr_backend_ctx *ctx) {
    free(ctx->impl);
    ctx->impl = nullptr;
}

void matmul_fwd(tr_backend_ctx *ctx, void *out, const void *inp, const void *w, const void *bias, int64_t n, int64_t c,
                int64_t oc, tr_dtype dt) {
    if (n <= 0 || oc <= 0) return;
    const gemm g = {true, false, oc, n, c, w, c, inp, c, out, oc, 0.0f, dt};
    int rc = lt_gemm(ctx, g);
    if (rc < 0) return;
    if (rc == 1) {
        k_mm_fwd<<<blocks_for(n * oc), kThreads, 0, stream_of(ctx)>>>(out, inp, w, bias, n, c, oc, dt);
        TR_CUDA_LAUNCHED(ctx);
        return;
    }
    if (!bias) return;
    k_bias_add<<<blocks_for(n * oc), kThreads, 0, stream_of(ctx)>>>(out, bias, n, oc, dt);
    TR_CUDA_LAUNCHED(ctx);
}

void matmul_bwd(tr_backend_ctx *ctx, void *dinp, void *dw, void *dbias, const void *dout, const void *inp,
                const void *w, int64_t n, int64_t c, int64_t oc, tr_dtype dt) {
    if (n <= 0 || oc <= 0 || c <= 0) return;
    if (dinp) {
        const gemm g = {false, false, c, n, oc, w, c, dout, oc, dinp, c, 0.0f, dt};
        int rc = lt_gemm(ctx, g);
        if (rc < 0) return;
        if (rc == 1) {
            k_mm_dinp<<<blocks_for(n * c), kThreads, 0, stream_of(ctx)>>>(dinp, dout, w, n, c, oc, dt);
            if (TR_CUDA_LAUNCHED(ctx)) return;
        }
    }
    if (dw) {
        const gemm g = {false, true, c, oc, n, inp, c, dout, oc, dw, c, 1.0f, dt};
        int rc = lt_gemm(ctx, g);
        if (rc < 0) return;
        if (rc == 1) {
            k_mm_dw<<<blocks_for(oc * c), kThreads, 0, stream_of(ctx)>>>(dw, dout, inp, n, c, oc, dt);
            if (TR_CUDA_LAUNCHED(ctx)) return;
        }
    }
    if (dbias) {
        k_bias_grad<<<blocks_for(oc), kThreads, 0, stream_of(ctx)>>>(dbias, dout, n, oc, dt);
        TR_CUDA_LAUNCHED(ctx);
    }
}

}  // namespace trcu
