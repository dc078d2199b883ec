/* The device memory a PyTorch process holds outside its caching allocator
 * (what nvidia-smi shows beyond torch.cuda.memory_reserved), built from its
 * mechanism: the CUDA context's local-memory reservation, its printf FIFO and
 * device malloc heap, NCCL's per-channel buffers, and the module images and
 * fixed context state a training step loads (the one fitted part,
 * cuda_step_images_bytes). docs/method.md ("device used"). */
#ifndef EST_DEVICE_MEM_H
#define EST_DEVICE_MEM_H

#include <stdint.h>

#include "constants.h"
#include "gpu.h"

/* Per-thread stack a fresh context has (cudaDeviceGetLimit(cudaLimitStackSize)
 * before any cudaDeviceSetLimit: 1 KiB), which the driver backs with local
 * memory for every thread the device can hold at once (cuCtxSetLimit,
 * CU_LIMIT_STACK_SIZE, CUDA Driver API reference). */
#define EST_CUDA_STACK_BYTES ((int64_t)1024)
/* cudaLimitPrintfFifoSize default 1 MiB ("Formatted Output") and
 * cudaLimitMallocHeapSize default 8 MiB ("Dynamic Global Memory Allocation"),
 * CUDA C++ Programming Guide. */
#define EST_CUDA_PRINTF_FIFO_BYTES ((int64_t)1 << 20)
#define EST_CUDA_MALLOC_HEAP_BYTES ((int64_t)8 << 20)

/* NCCL 2.30.7 src/include/device.h and src/init.cc computeBuffSizes: the
 * buffers of one connection (one peer on one channel), one per protocol;
 * the same in 2.21.5 (init.cc:542-544, device.h:22,57-58,74-75). */
#define EST_NCCL_STEPS 8
#define EST_NCCL_LL_BUF_BYTES ((int64_t)8 * 512 * EST_NCCL_STEPS * 16)   /* LL: lines x threads x steps x 16 B */
#define EST_NCCL_LL128_BUF_BYTES ((int64_t)120 * 640 * EST_NCCL_STEPS * 8) /* LL128: elems x threads x steps x 8 B */
#define EST_NCCL_SIMPLE_BUF_BYTES ((int64_t)1 << 22)                       /* NCCL_BUFFSIZE default 4 MiB */

/* NCCL 2.21.5 (torch 2.6.0's, the default 2025-02 stack), what a
 * communicator of more than one rank allocates on each GPU at init
 * (src/init.cc:1257-1277 initTransportsRank: rings, trees and NVLS are all
 * connected there; lazy connection came with 2.22). docs/method.md ("device
 * used"). */
#define EST_NCCL_IPC_ALIGN_BYTES ((int64_t)2097152) /* CUDA_IPC_MIN, src/include/comm.h:32 */
#define EST_NCCL_CONN_HEADER_BYTES ((int64_t)4096)  /* MEM_ALIGN pad of ncclSendMem/ncclRecvMem, comm.h:31,49,61 */
#define EST_NCCL_TREE_CHANNELS_MAX 16               /* ringGraph.maxChannels = MAXCHANNELS/2, init.cc:1051 */
#define EST_NCCL_NVLS_CHANNELS 16                   /* NCCL_NVLS_NCHANNELS default, src/transport/nvls.cc:232 */
#define EST_NCCL_NVLS_BUF_BYTES ((int64_t)128 * 1024 * EST_NCCL_STEPS) /* NCCL_NVLS_CHUNKSIZE x steps, nvls.cc:233,311 */
#define EST_NCCL_NVLS_ALIGN_BYTES ((int64_t)1 << 21) /* NVLS_MEM_ALIGN_SIZE, nvls.cc:229 */

/* The channels of one communicator on one node of `g` (the rings of
 * src/graph/search.cc ncclTopoCompute, doubled by ncclTopoDupChannels and
 * again by connect.cc:458 ncclTopoPostset): 24 on an NVSwitch node of
 * A100s or H100s, 4 over PCIe Gen4 (tests/device_mem.c derives both). */
int est_nccl_channels(const est_gpu *g);

/* One send and one receive connection of the P2P transport, each its own
 * allocation rounded to CUDA_IPC_MIN (src/transport/p2p.cc:354-357,419-422):
 * 12 MiB whether the Simple buffer lies with the sender (P2P read) or not. */
int64_t est_nccl_conn_pair_bytes(void);

/* NVLink SHARP's buffers on each GPU: on an NVSwitch node (nvlink_gb_per_s
 * > 0) of compute capability 9.0 or later and more than two GPUs
 * (nvls.cc:240 ncclNvlsInit), 16 channels x 2 x (1 MiB + 2 MiB) x one head
 * per local GPU (nvls.cc:311-314, search.cc:895-901); 0 otherwise. */
int64_t est_nccl_nvls_bytes(const est_gpu *g, int64_t local_ranks);

/* What one communicator over local_ranks x nodes ranks holds on each GPU:
 * its channels x (a ring pair, + a tree pair past two ranks) + NVLS. 0 for
 * one rank. */
int64_t est_nccl_comm_bytes(const est_gpu *g, int64_t local_ranks, int64_t nodes);

/* Adds `communicators` x est_nccl_comm_bytes to k's cuda_context_bytes and
 * says so in its source (no-op for one rank or no communicator). */
void est_nccl_in_force(const est_gpu *g, int64_t local_ranks, int64_t nodes, int communicators,
                       est_constants *k);

/* Threads an SM holds at once: CUDA C++ Programming Guide, "Technical
 * Specifications per Compute Capability": 2048 on 8.0 (A100), 9.0 (H100,
 * H200) and 10.0 (B200); 1536 on 8.6 (A10, RTX 3090, RTX A5000/A6000) and
 * 8.9 (L4, L40, L40S, RTX 4090, RTX 6000 Ada). */
int est_gpu_threads_per_sm(const est_gpu *g);

/* The local memory the context reserves for the default stack:
 * EST_CUDA_STACK_BYTES x threads per SM x SMs. */
int64_t est_cuda_local_mem_bytes(const est_gpu *g);

/* What the sources give for the context on `g`: local memory, printf FIFO
 * and malloc heap. */
int64_t est_cuda_context_sourced_bytes(const est_gpu *g);

/* NCCL's device buffers for `connections` connections on each of `channels`
 * channels (a ring: one receive and one send connection per channel). */
int64_t est_nccl_buffer_bytes(int channels, int connections);

/* Puts in k's cuda_context_bytes the sourced part for `g` plus k's
 * cuda_step_images_bytes, unless a profile set cuda_context_bytes itself
 * (a per-GPU measurement stays). */
void est_cuda_context_in_force(const est_gpu *g, est_constants *k);

#endif
