/* Status wrappers for the CUDA backend: every CUDA runtime, cuBLASLt and NCCL
 * call goes through one of these, which record the first failure in the
 * rank's backend context (backend.h) with the call, file and line, so that
 * it reaches main as one line. Nothing here exits or aborts. */
#ifndef TR_CUDA_CHECK_H
#define TR_CUDA_CHECK_H

#include <cuda_runtime.h>

#include "backend.h"

/* Evaluates `call` (a cudaError_t); on failure records it in ctx. Yields
 * 0 or -1. */
#define TR_CUDA_CHECK(ctx, call) tr_cuda_check((ctx), (call), #call, __FILE__, __LINE__)
/* After a kernel launch: launch-configuration errors surface here, faults
 * at the next sync. */
#define TR_CUDA_LAUNCHED(ctx) tr_cuda_check((ctx), cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
#define TR_CUBLAS_CHECK(ctx, call) tr_cublas_check((ctx), (int)(call), #call, __FILE__, __LINE__)

static inline int tr_cuda_check(tr_backend_ctx *ctx, cudaError_t e, const char *what, const char *file, int line) {
    if (e == cudaSuccess) return 0;
    return tr_backend_fail(ctx, "%s: %s (%s:%d)", what, cudaGetErrorString(e), file, line);
}
static inline int tr_cublas_check(tr_backend_ctx *ctx, int status, const char *what, const char *file, int line) {
    if (status == 0) return 0;  /* CUBLAS_STATUS_SUCCESS */
    return tr_backend_fail(ctx, "%s: cuBLAS status %d (%s:%d)", what, status, file, line);
}

#endif
