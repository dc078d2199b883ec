#include "cublas_ws.h"

#include <stdbool.h>
#include <string.h>

#include "str_util.h"

/* Which cards are compute capability 9.0: NVIDIA "CUDA GPUs - Compute
 * Capability" (developer.nvidia.com/cuda-gpus): H100 and H200 are 9.0 (the
 * only "hopper" cards of models/gpus.json); A100 8.0; A10, RTX 3090 and RTX
 * A6000 8.6; L4, L40S and RTX 4090 8.9; B200 10.0.
 *
 * The branch on 9.0 in each stack's torch: PyTorch CublasHandlePool.cpp,
 * "const bool sm90 = properties->major == 9 && properties->minor == 0;
 * default_size = sm90 ? 4096 * 8 * 1024 : 4096 * 1024 * 2 + 16 * 1024 * 8"
 * (since v2.1, PR "increase cuBLAS workspace for Hopper"); in the 2.11.0+cu130
 * wheel of the H200 day the compiled parseChosenWorkspaceSize compares the
 * (major, minor) pair with (9, 0) and picks 0x2000000 or 0x820000
 * (objdump of libtorch_cuda.so). Blackwell (10.x) takes the smaller size there. */
int64_t est_cublas_workspace_bytes(const est_gpu *g) {
    const bool sm90 = g && !strcmp(g->arch, "hopper");
    return sm90 ? EST_CUBLAS_WS_SM90_BYTES : EST_CUBLAS_WS_OTHER_BYTES;
}

void est_cublas_workspace_in_force(const est_gpu *g, est_constants *k) {
    est_constants def;
    est_constants_defaults(&def);
    const int id = EST_K_CUBLAS_WORKSPACE_BYTES;
    if (strcmp(k->source[id], def.source[id]) != 0) return; /* a profile's value */
    k->value[id] = (double)est_cublas_workspace_bytes(g);
    ft_strlcpy(k->source[id],
               est_cublas_workspace_bytes(g) == EST_CUBLAS_WS_SM90_BYTES
                   ? "PyTorch CublasHandlePool.cpp parseChosenWorkspaceSize (2.2-2.11): "
                     "4096 KiB * 8 on compute capability 9.0"
                   : def.source[id],
               sizeof k->source[id]);
}
