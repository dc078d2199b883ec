#include "device_mem.h"

#include <math.h>
#include <stdio.h>
#include <string.h>


/* Compute capability from the catalog's architecture and name: "hopper" is
 * 9.0 and "blackwell" 10.0 in models/gpus.json, "ada" 8.9; of the "ampere"
 * cards only the A100s are GA100 (8.0), the others GA102/GA104 (8.6)
 * (NVIDIA "CUDA GPUs - Compute Capability"). */
int est_gpu_threads_per_sm(const est_gpu *g) {
    if (!g) return 0;
    if (!strcmp(g->arch, "hopper") || !strcmp(g->arch, "blackwell")) return 2048;
    if (!strcmp(g->arch, "ampere") && !strncmp(g->name, "a100", 4)) return 2048;
    return 1536;
}

int64_t est_cuda_local_mem_bytes(const est_gpu *g) {
    if (!g || g->sms <= 0) return 0;
    return EST_CUDA_STACK_BYTES * est_gpu_threads_per_sm(g) * (int64_t)g->sms;
}

int64_t est_cuda_context_sourced_bytes(const est_gpu *g) {
    return est_cuda_local_mem_bytes(g) + EST_CUDA_PRINTF_FIFO_BYTES + EST_CUDA_MALLOC_HEAP_BYTES;
}

int64_t est_nccl_buffer_bytes(int channels, int connections) {
    if (channels <= 0 || connections <= 0) return 0;
    const int64_t conn = EST_NCCL_LL_BUF_BYTES + EST_NCCL_LL128_BUF_BYTES + EST_NCCL_SIMPLE_BUF_BYTES;
    return conn * channels * connections;
}

void est_cuda_context_in_force(const est_gpu *g, est_constants *k) {
    est_constants def;
    est_constants_defaults(&def);
    const int id = EST_K_CUDA_CONTEXT_BYTES;
    if (strcmp(k->source[id], def.source[id]) != 0 || !g) return; /* a profile's value */
    const int64_t sourced = est_cuda_context_sourced_bytes(g);
    const double images = k->value[EST_K_CUDA_IMAGES_BYTES];
    k->value[id] = (double)sourced + (isfinite(images) && images > 0 ? images : 0);
    snprintf(k->source[id], sizeof k->source[id],
             "%.0f MiB stack local memory (1 KiB x %d threads x %d SMs) + 9 MiB printf/heap + "
             "cuda_step_images_bytes (device_mem.c)",
             (double)est_cuda_local_mem_bytes(g) / (1 << 20), est_gpu_threads_per_sm(g), g->sms);
}
