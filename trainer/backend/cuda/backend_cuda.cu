/* The CUDA backend: one device per rank, a compute stream and a collectives
 * stream, a cuBLASLt handle and its workspace (backend.h). This file holds the
 * context, memory, copies and the elementwise and row-reduction kernels, and
 * fills the op table; the matmuls are in matmul_cuda.cu (cuBLASLt), the
 * attention in attention_cuda.cu (row bodies shared with the tests in
 * attn_rows.h).
 *
 * STATUS: never run on a GPU (no GPU was lent while it was written); it
 * compiles for sm_80 and sm_90 in CI, and the table is complete, so
 * `make test-gpu` (build/gpu_parity) compares every op with the CPU backend
 * the first time a GPU is there. What the CPU could check without one (the
 * attention and fallback-matmul row bodies, run on the host through the op
 * harness) is in tests/trainer_cuda_rows.c; docs/trainer.md lists the rest.
 *
 * One rank per process, device 0: the collectives of a single rank are no-ops
 * in zero.c and optim.c (they test comm->size), so a one-GPU run needs no
 * communicator; a second rank would need NCCL, which is not written, and is
 * refused in cu_open with one line.
 *
 * bf16 values are rounded to nearest even by __float2bfloat16_rn, the same
 * rounding as tr_f32_to_bf16 on the CPU. */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cublasLt.h>
#include <stdio.h>
#include <string.h>

#include "cuda_internal.h"
extern "C" {
#include "optim.h"
}
#include "check.h"

using trcu::blocks_for;
using trcu::kThreads;
using trcu::stream_of;

namespace {

constexpr size_t kWorkspaceBytes = 32u << 20;  /* cuBLASLt workspace: 32 MiB, NVIDIA's recommendation for Hopper */
constexpr int kSumsqBlocks = 1024;              /* fixed partition of the sum of squares (partials in the workspace) */

__device__ __forceinline__ float ld(const void *p, int64_t i, tr_dtype dt) {
    return dt == TR_BF16 ? __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]) : static_cast<const float *>(p)[i];
}
__device__ __forceinline__ void st(void *p, int64_t i, float v, tr_dtype dt) {
    if (dt == TR_BF16) static_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16_rn(v);
    else static_cast<float *>(p)[i] = v;
}

__global__ void k_convert(void *dst, tr_dtype ddt, const void *src, tr_dtype sdt, int64_t n) {
    TR_GRID_LOOP(i, n) st(dst, i, ld(src, i, sdt), ddt);
}
__global__ void k_add(void *y, const void *x, int64_t n, tr_dtype dt) {
    TR_GRID_LOOP(i, n) st(y, i, ld(y, i, dt) + ld(x, i, dt), dt);
}
/* The sum of squares in a fixed order, so that it does not vary run to run
 * (backend.h): pass 1, block b of kSumsqBlocks sums the fixed chunk
 * [b*chunk, (b+1)*chunk), each thread a fixed stride, then a fixed tree;
 * pass 2, one block sums the partials the same way. Partials go to the
 * context's workspace, idle between matmuls on the one stream. */
__device__ double block_sum_d(double v, double *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int w = kThreads / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    return sh[0];
}
__global__ void k_sumsq_part(double *part, const void *p, int64_t n, int64_t chunk, tr_dtype dt) {
    __shared__ double sh[kThreads];
    const int64_t lo = blockIdx.x * chunk, hi = lo + chunk < n ? lo + chunk : n;
    double s = 0;
    for (int64_t i = lo + threadIdx.x; i < hi; i += kThreads) {
        double v = ld(p, i, dt);
        s += v * v;
    }
    s = block_sum_d(s, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}
__global__ void k_sumsq_total(double *out, const double *part, int nparts) {
    __shared__ double sh[kThreads];
    double s = 0;
    for (int i = threadIdx.x; i < nparts; i += kThreads) s += part[i];
    s = block_sum_d(s, sh);
    if (threadIdx.x == 0) *out = s;
}
__global__ void k_swiglu_fwd(void *hact, const void *gu, int64_t n, int64_t I, tr_dtype dt) {
    TR_GRID_LOOP(k, n * I) {
        int64_t r = k / I, j = k % I;
        float g = ld(gu, r * 2 * I + j, dt), u = ld(gu, r * 2 * I + I + j, dt);
        st(hact, k, g / (1.0f + expf(-g)) * u, dt);
    }
}
__global__ void k_swiglu_bwd(void *dgu, const void *dh, const void *gu, int64_t n, int64_t I, tr_dtype dt) {
    TR_GRID_LOOP(k, n * I) {
        int64_t r = k / I, j = k % I;
        float g = ld(gu, r * 2 * I + j, dt), u = ld(gu, r * 2 * I + I + j, dt), d = ld(dh, k, dt);
        float s = 1.0f / (1.0f + expf(-g));
        st(dgu, r * 2 * I + j, d * u * (s + g * s * (1.0f - s)), dt);
        st(dgu, r * 2 * I + I + j, d * g * s, dt);
    }
}
__global__ void k_adamw(float *w, void *wout, tr_dtype wdt, const void *g, tr_dtype gdt, float *m, float *v,
                        int64_t n, tr_opt_args a, float c1, float c2) {
    TR_GRID_LOOP(i, n) {
        float gi = ld(g, i, gdt) * a.grad_scale;
        m[i] = TR_ADAM_BETA1 * m[i] + (1.0f - TR_ADAM_BETA1) * gi;
        v[i] = TR_ADAM_BETA2 * v[i] + (1.0f - TR_ADAM_BETA2) * gi * gi;
        float mh = m[i] / c1, vh = v[i] / c2;
        w[i] -= a.lr * (mh / (sqrtf(vh) + TR_ADAM_EPS) + a.weight_decay * w[i]);
        if (wout) st(wout, i, w[i], wdt);
    }
}
__global__ void k_sgd(float *w, void *wout, tr_dtype wdt, const void *g, tr_dtype gdt, int64_t n, tr_opt_args a) {
    TR_GRID_LOOP(i, n) {
        w[i] -= a.lr * (ld(g, i, gdt) * a.grad_scale + a.weight_decay * w[i]);
        if (wout) st(wout, i, w[i], wdt);
    }
}

/* Rotary embeddings in place (ops_rope.c's equations): one thread per
 * (b, t, head, i < hd/2); sign -1 is the backward (the inverse rotation). */
__global__ void k_rope(void *qkv, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd, double theta,
                       tr_dtype dt, float sign) {
    const int64_t half = hd / 2, heads = nh + nkv, row = (nh + 2 * nkv) * hd;
    TR_GRID_LOOP(k, B * T * heads * half) {
        int64_t i = k % half, hh = (k / half) % heads, bt = k / (half * heads), t = bt % T;
        double ang = (double)t * pow(theta, -2.0 * (double)i / (double)hd);
        float cs = (float)cos(ang), sn = sign * (float)sin(ang);
        int64_t k1 = bt * row + hh * hd + i, k2 = k1 + half;
        float v1 = ld(qkv, k1, dt), v2 = ld(qkv, k2, dt);
        st(qkv, k1, v1 * cs - v2 * sn, dt);
        st(qkv, k2, v2 * cs + v1 * sn, dt);
    }
}
/* One block per row: a fixed-order tree sum, so results do not vary run to run. */
__device__ float block_sum(float v, float *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int w = kThreads / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}
__global__ void k_rmsnorm_fwd(void *out, float *rstd, const void *inp, const void *w, int64_t h, float eps,
                              tr_dtype dt) {
    __shared__ float sh[kThreads];
    const int64_t r = blockIdx.x;
    float ss = 0;
    for (int64_t j = threadIdx.x; j < h; j += kThreads) {
        float x = ld(inp, r * h + j, dt);
        ss += x * x;
    }
    float rs = rsqrtf(block_sum(ss, sh) / (float)h + eps);
    if (threadIdx.x == 0) rstd[r] = rs;
    for (int64_t j = threadIdx.x; j < h; j += kThreads) st(out, r * h + j, ld(inp, r * h + j, dt) * rs * ld(w, j, dt), dt);
}
/* dinp (accumulated): one block per row. */
__global__ void k_rmsnorm_bwd_dx(void *dinp, const void *dout, const void *inp, const void *w, const float *rstd,
                                 int64_t h, tr_dtype dt) {
    __shared__ float sh[kThreads];
    const int64_t r = blockIdx.x;
    float dot = 0;
    for (int64_t j = threadIdx.x; j < h; j += kThreads)
        dot += ld(dout, r * h + j, dt) * ld(w, j, dt) * ld(inp, r * h + j, dt);
    dot = block_sum(dot, sh);
    const float rs = rstd[r];
    for (int64_t k = threadIdx.x; k < h; k += kThreads) {
        float g = rs * ld(w, k, dt) * ld(dout, r * h + k, dt) - rs * rs * rs / (float)h * ld(inp, r * h + k, dt) * dot;
        st(dinp, r * h + k, ld(dinp, r * h + k, dt) + g, dt);
    }
}
/* dw (accumulated): one thread per column, rows in order. */
__global__ void k_rmsnorm_bwd_dw(void *dw, const void *dout, const void *inp, const float *rstd, int64_t n, int64_t h,
                                 tr_dtype dt) {
    TR_GRID_LOOP(j, h) {
        float s = 0;
        for (int64_t r = 0; r < n; r++) s += ld(dout, r * h + j, dt) * ld(inp, r * h + j, dt) * rstd[r];
        st(dw, j, ld(dw, j, dt) + s, dt);
    }
}
__global__ void k_embedding_fwd(void *out, const int32_t *tok, const void *wte, int64_t n, int64_t h, tr_dtype dt) {
    TR_GRID_LOOP(k, n * h) st(out, k, ld(wte, (int64_t)tok[k / h] * h + k % h, dt), dt);
}
/* dwte[tok[r]] += dout[r], deterministic without atomics: one thread per
 * column walks the rows in order (h-way parallel; a token-sorted version
 * would be faster, this one is the simple correct one). */
__global__ void k_embedding_bwd(void *dwte, const void *dout, const int32_t *tok, int64_t n, int64_t h, tr_dtype dt) {
    TR_GRID_LOOP(j, h) {
        for (int64_t r = 0; r < n; r++) {
            int64_t k = (int64_t)tok[r] * h + j;
            st(dwte, k, ld(dwte, k, dt) + ld(dout, r * h + j, dt), dt);
        }
    }
}
/* One block per row: the row's max and sum of exponentials in a fixed order. */
__device__ float row_lse(const void *z, int64_t r, int64_t V, tr_dtype dt, float *sh) {
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < V; j += kThreads) mx = fmaxf(mx, ld(z, r * V + j, dt));
    sh[threadIdx.x] = mx;
    __syncthreads();
    for (int w = kThreads / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + w]);
        __syncthreads();
    }
    mx = sh[0];
    __syncthreads();
    float s = 0;
    for (int64_t j = threadIdx.x; j < V; j += kThreads) s += expf(ld(z, r * V + j, dt) - mx);
    return mx + logf(block_sum(s, sh));
}
__global__ void k_ce_fwd(float *losses, const void *z, const int32_t *tgt, int64_t V, tr_dtype dt) {
    __shared__ float sh[kThreads];
    const int64_t r = blockIdx.x;
    float lse = row_lse(z, r, V, dt, sh);
    if (threadIdx.x == 0) losses[r] = lse - ld(z, r * V + tgt[r], dt);
}
__global__ void k_ce_bwd(void *z, const int32_t *tgt, int64_t V, float scale, tr_dtype dt) {
    __shared__ float sh[kThreads];
    const int64_t r = blockIdx.x;
    float lse = row_lse(z, r, V, dt, sh);
    for (int64_t j = threadIdx.x; j < V; j += kThreads)
        st(z, r * V + j, scale * (expf(ld(z, r * V + j, dt) - lse) - (j == tgt[r] ? 1.0f : 0.0f)), dt);
}

/* ---- context ---- */

int cu_probe(char *err, size_t errlen) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e == cudaSuccess && count > 0) return 0;
    snprintf(err, errlen, "--device cuda: no CUDA device on this machine (%s)",
             e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return -1;
}

void cu_close(tr_backend_ctx *ctx);

int cu_open(tr_backend_ctx *ctx, int device, char *err, size_t errlen) {
    memset(ctx, 0, sizeof *ctx);
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        snprintf(err, errlen, "--device cuda: no CUDA device on this machine (%s)",
                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return -1;
    }
    if (device > 0) {
        snprintf(err, errlen, "--device cuda runs one rank on device 0: rank %d would need the NCCL communicator, "
                              "which is not written yet (docs/trainer.md)", device);
        return -1;
    }
    if (device >= count) {
        snprintf(err, errlen, "--device cuda: rank %d needs device %d, this machine has %d", device, device, count);
        return -1;
    }
    ctx->device = device;
    cudaStream_t s = nullptr, cs = nullptr;
    cublasLtHandle_t lt = nullptr;
    if (TR_CUDA_CHECK(ctx, cudaSetDevice(device)) || TR_CUDA_CHECK(ctx, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)) ||
        TR_CUDA_CHECK(ctx, cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking)) ||
        TR_CUBLAS_CHECK(ctx, cublasLtCreate(&lt)) ||
        TR_CUDA_CHECK(ctx, cudaMalloc(&ctx->workspace, kWorkspaceBytes)) ||
        TR_CUDA_CHECK(ctx, cudaMalloc(&ctx->scalars, TR_SCALARS_BYTES)) || trcu::matmul_open(ctx)) {
        ctx->stream = s, ctx->comm_stream = cs, ctx->blas = lt;
        snprintf(err, errlen, "%s", ctx->msg);
        cu_close(ctx);  /* the caller closes only a context that opened */
        return -1;
    }
    ctx->stream = s, ctx->comm_stream = cs, ctx->blas = lt;
    ctx->workspace_bytes = kWorkspaceBytes;
    return 0;
}
void cu_close(tr_backend_ctx *ctx) {
    trcu::matmul_close(ctx);
    if (ctx->scalars) cudaFree(ctx->scalars);
    if (ctx->workspace) cudaFree(ctx->workspace);
    if (ctx->blas) cublasLtDestroy(static_cast<cublasLtHandle_t>(ctx->blas));
    if (ctx->comm_stream) cudaStreamDestroy(static_cast<cudaStream_t>(ctx->comm_stream));
    if (ctx->stream) cudaStreamDestroy(stream_of(ctx));
    ctx->scalars = ctx->workspace = ctx->blas = ctx->comm_stream = ctx->stream = nullptr;
}
int cu_sync(tr_backend_ctx *ctx) {
    if (ctx->stream) TR_CUDA_CHECK(ctx, cudaStreamSynchronize(stream_of(ctx)));
    if (ctx->comm_stream) TR_CUDA_CHECK(ctx, cudaStreamSynchronize(static_cast<cudaStream_t>(ctx->comm_stream)));
    return ctx->status;
}
int cu_event_create(tr_backend_ctx *ctx, tr_event *e) {
    memset(e, 0, sizeof *e);
    cudaEvent_t ev;
    if (TR_CUDA_CHECK(ctx, cudaEventCreate(&ev))) return -1;
    e->impl = ev;
    return 0;
}
void cu_event_destroy(tr_backend_ctx *ctx, tr_event *e) {
    if (e->impl) TR_CUDA_CHECK(ctx, cudaEventDestroy(static_cast<cudaEvent_t>(e->impl)));
    e->impl = nullptr;
}
int cu_event_record(tr_backend_ctx *ctx, tr_event *e) {
    return TR_CUDA_CHECK(ctx, cudaEventRecord(static_cast<cudaEvent_t>(e->impl), stream_of(ctx)));
}
int cu_event_elapsed_s(tr_backend_ctx *ctx, const tr_event *a, const tr_event *b, double *s) {
    float ms = 0;
    *s = 0;
    if (TR_CUDA_CHECK(ctx, cudaEventSynchronize(static_cast<cudaEvent_t>(b->impl))) ||
        TR_CUDA_CHECK(ctx, cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(a->impl), static_cast<cudaEvent_t>(b->impl))))
        return -1;
    *s = 1e-3 * (double)ms;
    return 0;
}

/* ---- memory (tr_mem has no context: the arena allocates at plan time) ---- */

/* Zeroed before it returns: cudaMemset runs on the legacy default stream,
 * which does not order the non-blocking compute stream, so the host waits for
 * it here (plan time, once per slab). */
void *cu_alloc(size_t bytes) {
    void *p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) return nullptr;
    if (cudaMemset(p, 0, bytes) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
        cudaFree(p);  /* tr_mem promises zeroed memory */
        return nullptr;
    }
    return p;
}
void cu_free(void *p) { cudaFree(p); }
void *cu_host_alloc(size_t bytes) {
    void *p = nullptr;
    if (cudaMallocHost(&p, bytes) != cudaSuccess) return nullptr;
    memset(p, 0, bytes);
    return p;
}
void cu_host_free(void *p) { cudaFreeHost(p); }

void cu_zero(tr_backend_ctx *ctx, void *p, size_t bytes) { TR_CUDA_CHECK(ctx, cudaMemsetAsync(p, 0, bytes, stream_of(ctx))); }
void cu_copy(tr_backend_ctx *ctx, void *d, const void *s, size_t bytes) {
    TR_CUDA_CHECK(ctx, cudaMemcpyAsync(d, s, bytes, cudaMemcpyDeviceToDevice, stream_of(ctx)));
}
/* Synchronous: the host reads or reuses its buffer right after. */
void cu_to_host(tr_backend_ctx *ctx, void *d, const void *s, size_t bytes) {
    if (!TR_CUDA_CHECK(ctx, cudaMemcpyAsync(d, s, bytes, cudaMemcpyDeviceToHost, stream_of(ctx))))
        TR_CUDA_CHECK(ctx, cudaStreamSynchronize(stream_of(ctx)));
}
void cu_to_device(tr_backend_ctx *ctx, void *d, const void *s, size_t bytes) {
    if (!TR_CUDA_CHECK(ctx, cudaMemcpyAsync(d, s, bytes, cudaMemcpyHostToDevice, stream_of(ctx))))
        TR_CUDA_CHECK(ctx, cudaStreamSynchronize(stream_of(ctx)));
}
void cu_convert(tr_backend_ctx *ctx, void *dst, tr_dtype ddt, const void *src, tr_dtype sdt, int64_t n) {
    k_convert<<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(dst, ddt, src, sdt, n);
    TR_CUDA_LAUNCHED(ctx);
}
/* Through a device fp32 staging buffer when the device dtype is not fp32. */
void cu_download_f32(tr_backend_ctx *ctx, float *dst, const void *src, tr_dtype sdt, int64_t n) {
    if (sdt == TR_F32) return cu_to_host(ctx, dst, src, (size_t)n * 4);
    void *tmp = nullptr;
    if (TR_CUDA_CHECK(ctx, cudaMallocAsync(&tmp, (size_t)n * 4, stream_of(ctx)))) return;
    cu_convert(ctx, tmp, TR_F32, src, sdt, n);
    cu_to_host(ctx, dst, tmp, (size_t)n * 4);
    TR_CUDA_CHECK(ctx, cudaFreeAsync(tmp, stream_of(ctx)));
}
void cu_upload_f32(tr_backend_ctx *ctx, void *dst, tr_dtype ddt, const float *src, int64_t n) {
    if (ddt == TR_F32) return cu_to_device(ctx, dst, src, (size_t)n * 4);
    void *tmp = nullptr;
    if (TR_CUDA_CHECK(ctx, cudaMallocAsync(&tmp, (size_t)n * 4, stream_of(ctx)))) return;
    cu_to_device(ctx, tmp, src, (size_t)n * 4);
    cu_convert(ctx, dst, ddt, tmp, TR_F32, n);
    TR_CUDA_CHECK(ctx, cudaFreeAsync(tmp, stream_of(ctx)));
}
double cu_sumsq(tr_backend_ctx *ctx, const void *p, int64_t n, tr_dtype dt) {
    double out = 0;
    if (n <= 0) return 0;
    const int64_t chunk = (n + kSumsqBlocks - 1) / kSumsqBlocks;
    const int nparts = (int)((n + chunk - 1) / chunk);
    double *part = static_cast<double *>(ctx->workspace);
    k_sumsq_part<<<nparts, kThreads, 0, stream_of(ctx)>>>(part, p, n, chunk, dt);
    if (TR_CUDA_LAUNCHED(ctx)) return 0;
    k_sumsq_total<<<1, kThreads, 0, stream_of(ctx)>>>(static_cast<double *>(ctx->scalars), part, nparts);
    if (!TR_CUDA_LAUNCHED(ctx)) cu_to_host(ctx, &out, ctx->scalars, sizeof out);
    return out;
}
void cu_add(tr_backend_ctx *ctx, void *y, const void *x, int64_t n, tr_dtype dt) {
    k_add<<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(y, x, n, dt);
    TR_CUDA_LAUNCHED(ctx);
}
void cu_swiglu_fwd(tr_backend_ctx *ctx, void *h, const void *gu, int64_t n, int64_t I, tr_dtype dt) {
    k_swiglu_fwd<<<blocks_for(n * I), kThreads, 0, stream_of(ctx)>>>(h, gu, n, I, dt);
    TR_CUDA_LAUNCHED(ctx);
}
void cu_swiglu_bwd(tr_backend_ctx *ctx, void *dgu, const void *dh, const void *gu, int64_t n, int64_t I, tr_dtype dt) {
    k_swiglu_bwd<<<blocks_for(n * I), kThreads, 0, stream_of(ctx)>>>(dgu, dh, gu, n, I, dt);
    TR_CUDA_LAUNCHED(ctx);
}
void cu_adamw(tr_backend_ctx *ctx, float *w, void *wout, tr_dtype wdt, const void *g, tr_dtype gdt, float *m, float *v,
              int64_t n, const tr_opt_args *a) {
    float c1 = 1.0f - powf(TR_ADAM_BETA1, (float)a->t), c2 = 1.0f - powf(TR_ADAM_BETA2, (float)a->t);
    k_adamw<<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(w, wout, wdt, g, gdt, m, v, n, *a, c1, c2);
    TR_CUDA_LAUNCHED(ctx);
}
void cu_sgd(tr_backend_ctx *ctx, float *w, void *wout, tr_dtype wdt, const void *g, tr_dtype gdt, int64_t n,
            const tr_opt_args *a) {
    k_sgd<<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(w, wout, wdt, g, gdt, n, *a);
    TR_CUDA_LAUNCHED(ctx);
}

void cu_rope_fwd(tr_backend_ctx *ctx, void *qkv, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd, double theta,
                 tr_dtype dt) {
    k_rope<<<blocks_for(B * T * (nh + nkv) * (hd / 2)), kThreads, 0, stream_of(ctx)>>>(qkv, B, T, nh, nkv, hd, theta, dt, 1.0f);
    TR_CUDA_LAUNCHED(ctx);
}
void cu_rope_bwd(tr_backend_ctx *ctx, void *dqkv, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd, double theta,
                 tr_dtype dt) {
    k_rope<<<blocks_for(B * T * (nh + nkv) * (hd / 2)), kThreads, 0, stream_of(ctx)>>>(dqkv, B, T, nh, nkv, hd, theta, dt, -1.0f);
    TR_CUDA_LAUNCHED(ctx);
}
void cu_rmsnorm_fwd(tr_backend_ctx *ctx, void *out, float *rstd, const void *inp, const void *w, int64_t n, int64_t h,
                    double eps, tr_dtype dt) {
    if (n <= 0) return;
    k_rmsnorm_fwd<<<(unsigned)n, kThreads, 0, stream_of(ctx)>>>(out, rstd, inp, w, h, (float)eps, dt);
    TR_CUDA_LAUNCHED(ctx);
}
void cu_rmsnorm_bwd(tr_backend_ctx *ctx, void *dinp, void *dw, const void *dout, const void *inp, const void *w,
                    const float *rstd, int64_t n, int64_t h, tr_dtype dt) {
    if (n <= 0) return;
    k_rmsnorm_bwd_dx<<<(unsigned)n, kThreads, 0, stream_of(ctx)>>>(dinp, dout, inp, w, rstd, h, dt);
    if (TR_CUDA_LAUNCHED(ctx)) return;
    k_rmsnorm_bwd_dw<<<blocks_for(h), kThreads, 0, stream_of(ctx)>>>(dw, dout, inp, rstd, n, h, dt);
    TR_CUDA_LAUNCHED(ctx);
}
void cu_embedding_fwd(tr_backend_ctx *ctx, void *out, const int32_t *tok, const void *wte, int64_t n, int64_t h,
                      tr_dtype dt) {
    k_embedding_fwd<<<blocks_for(n * h), kThreads, 0, stream_of(ctx)>>>(out, tok, wte, n, h, dt);
    TR_CUDA_LAUNCHED(ctx);
}
void cu_embedding_bwd(tr_backend_ctx *ctx, void *dwte, const void *dout, const int32_t *tok, int64_t n, int64_t h,
                      tr_dtype dt) {
    k_embedding_bwd<<<blocks_for(h), kThreads, 0, stream_of(ctx)>>>(dwte, dout, tok, n, h, dt);
    TR_CUDA_LAUNCHED(ctx);
}
void cu_ce_fwd(tr_backend_ctx *ctx, float *losses, const void *z, const int32_t *tgt, int64_t n, int64_t V, tr_dtype dt) {
    if (n <= 0) return;
    k_ce_fwd<<<(unsigned)n, kThreads, 0, stream_of(ctx)>>>(losses, z, tgt, V, dt);
    TR_CUDA_LAUNCHED(ctx);
}
void cu_ce_bwd(tr_backend_ctx *ctx, void *z, const int32_t *tgt, int64_t n, int64_t V, float scale, tr_dtype dt) {
    if (n <= 0) return;
    k_ce_bwd<<<(unsigned)n, kThreads, 0, stream_of(ctx)>>>(z, tgt, V, scale, dt);
    TR_CUDA_LAUNCHED(ctx);
}

tr_backend make_backend() {
    tr_backend b;
    memset(&b, 0, sizeof b);
    b.name = "cuda";
    b.probe = cu_probe;
    b.open = cu_open;
    b.close = cu_close;
    b.sync = cu_sync;
    b.event_create = cu_event_create;
    b.event_destroy = cu_event_destroy;
    b.event_record = cu_event_record;
    b.event_elapsed_s = cu_event_elapsed_s;
    b.mem.alloc = cu_alloc;
    b.mem.free = cu_free;
    b.host_mem.alloc = cu_host_alloc;
    b.host_mem.free = cu_host_free;
    b.zero = cu_zero;
    b.copy = cu_copy;
    b.to_host = cu_to_host;
    b.to_device = cu_to_device;
    b.convert = cu_convert;
    b.download_f32 = cu_download_f32;
    b.upload_f32 = cu_upload_f32;
    b.sumsq = cu_sumsq;
    b.add = cu_add;
    b.rope_fwd = cu_rope_fwd;
    b.rope_bwd = cu_rope_bwd;
    b.rmsnorm_fwd = cu_rmsnorm_fwd;
    b.rmsnorm_bwd = cu_rmsnorm_bwd;
    b.embedding_fwd = cu_embedding_fwd;
    b.embedding_bwd = cu_embedding_bwd;
    b.ce_fwd = cu_ce_fwd;
    b.ce_bwd = cu_ce_bwd;
    b.swiglu_fwd = cu_swiglu_fwd;
    b.swiglu_bwd = cu_swiglu_bwd;
    b.adamw = cu_adamw;
    b.sgd = cu_sgd;
    b.matmul_fwd = trcu::matmul_fwd;
    b.matmul_bwd = trcu::matmul_bwd;
    b.attn_eager_fwd = trcu::attn_eager_fwd;
    b.attn_eager_bwd = trcu::attn_eager_bwd;
    b.attn_flash_fwd = trcu::attn_flash_fwd;
    b.attn_flash_bwd = trcu::attn_flash_bwd;
    return b;
}

const tr_backend cuda_backend = make_backend();

}  // namespace

extern "C" const tr_backend *tr_backend_cuda(void) { return &cuda_backend; }
