/* The workspace PyTorch gives each cuBLAS handle through its caching
 * allocator: its size on each GPU, in force unless a profile replaces
 * cublas_workspace_bytes. docs/method.md ("cuBLAS workspace"). */
#ifndef EST_CUBLAS_WS_H
#define EST_CUBLAS_WS_H

#include <stdint.h>

#include "constants.h"
#include "gpu.h"

/* PyTorch aten/src/ATen/cuda/CublasHandlePool.cpp parseChosenWorkspaceSize,
 * default without CUBLAS_WORKSPACE_CONFIG: 4096 KiB x 8 on compute
 * capability 9.0, ":4096:2:16:8" (4096 KiB x 2 + 16 KiB x 8) elsewhere. */
#define EST_CUBLAS_WS_SM90_BYTES ((int64_t)4096 * 1024 * 8)
#define EST_CUBLAS_WS_OTHER_BYTES ((int64_t)4096 * 1024 * 2 + (int64_t)16 * 1024 * 8)

/* Bytes of one handle's workspace on `g`: the same rule in every stack ftest
 * names (torch 2.2.2 to 2.15.0). */
int64_t est_cublas_workspace_bytes(const est_gpu *g);

/* Puts the size for `g` in k's cublas_workspace_bytes when k still holds the
 * built-in default (a profile's value stays). */
void est_cublas_workspace_in_force(const est_gpu *g, est_constants *k);

#endif
