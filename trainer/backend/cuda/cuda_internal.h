/* What the CUDA backend's files share (C++, nvcc only): the launch helpers
 * and the entry points that backend_cuda.cu puts in the op table. Each op
 * has backend.h's signature and semantics. */
#ifndef TR_CUDA_INTERNAL_H
#define TR_CUDA_INTERNAL_H

#include <cuda_runtime.h>
#include <stdint.h>

/* The C headers use C11's _Noreturn, which C++ spells [[noreturn]]. */
#ifndef _Noreturn
#define _Noreturn [[noreturn]]
#endif
extern "C" {
#include "backend.h"
}

namespace trcu {

constexpr int kThreads = 256;    /* grid-stride elementwise kernels */
constexpr int kRowThreads = 128; /* one-thread-per-row kernels (attention, fallback matmul) */

inline cudaStream_t stream_of(tr_backend_ctx *ctx) { return static_cast<cudaStream_t>(ctx->stream); }

/* Blocks for a grid-stride loop over n elements (capped; the loop covers the rest). */
inline unsigned blocks_for(int64_t n) {
    int64_t b = (n + kThreads - 1) / kThreads;
    return (unsigned)(b < 65535 * 32 ? (b > 0 ? b : 1) : 65535 * 32);
}
/* Blocks for exactly one thread per row (rows < 2^31 * kRowThreads). */
inline unsigned row_blocks(int64_t rows) { return (unsigned)((rows + kRowThreads - 1) / kRowThreads); }

/* for (i over [0, n)) as a grid-stride loop. */
#define TR_GRID_LOOP(i, n) \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

/* matmul_cuda.cu: cuBLASLt with a per-context algorithm cache (ctx->impl). */
int matmul_open(tr_backend_ctx *ctx);
void matmul_close(tr_backend_ctx *ctx);
void matmul_fwd(tr_backend_ctx *ctx, void *out, const void *inp, const void *w, const void *bias, int64_t n,
                int64_t c, int64_t oc, tr_dtype dt);
void matmul_bwd(tr_backend_ctx *ctx, void *dinp, void *dw, void *dbias, const void *dout, const void *inp,
                const void *w, int64_t n, int64_t c, int64_t oc, tr_dtype dt);

/* attention_cuda.cu */
void attn_eager_fwd(tr_backend_ctx *ctx, void *out, void *probs, const void *qkv, int64_t B, int64_t T, int64_t nh,
                    int64_t nkv, int64_t hd, tr_dtype dt);
void attn_eager_bwd(tr_backend_ctx *ctx, void *dqkv, void *dprobs, const void *dout, const void *qkv,
                    const void *probs, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd, tr_dtype dt);
void attn_flash_fwd(tr_backend_ctx *ctx, void *out, float *lse, const void *qkv, int64_t B, int64_t T, int64_t nh,
                    int64_t nkv, int64_t hd, tr_dtype dt);
void attn_flash_bwd(tr_backend_ctx *ctx, void *dqkv, const void *dout, const void *qkv, const void *out,
                    const float *lse, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd, tr_dtype dt);

}  // namespace trcu

#endif
