/* Every number the model uses that is not a shape: its built-in default with the
 * source of that default, optionally replaced per framework and per GPU by a
 * profile fitted from measurement records (calibrate/profiles/<framework>.json,
 * written by `ftest fit`). `ftest constants` prints the table in force. */
#ifndef EST_CONSTANTS_H
#define EST_CONSTANTS_H

#include <stdbool.h>
#include <stddef.h>

#include "run.h"

/* X(id, json name, default value, unit, source of the default) */
#define EST_CONSTANTS(X)                                                                         \
    X(CUDA_CONTEXT_BYTES, "cuda_context_bytes", 419430400, "bytes",                               \
      "PyTorch maintainer, pytorch/pytorch#109888: ~400 MB with CUDA >= 11.7 lazy loading; "      \
      "replace by a per-GPU measurement")                                                          \
    X(CUBLAS_WORKSPACE_BYTES, "cublas_workspace_bytes", 8519680, "bytes",                         \
      "PyTorch aten/src/ATen/cuda/CublasHandlePool.cpp getChosenWorkspaceSize: "                  \
      "4096 KiB * 2 + 16 KiB * 8 before Hopper (one handle per stream)")                          \
    X(DS_REDUCE_BUCKET_ELEMS, "ds_reduce_bucket_elems", 5e8, "elements",                          \
      "DeepSpeed deepspeed/runtime/zero/config.py: reduce_bucket_size default 5e8")                \
    X(DS_ALLGATHER_BUCKET_ELEMS, "ds_allgather_bucket_elems", 5e8, "elements",                    \
      "DeepSpeed deepspeed/runtime/zero/config.py: allgather_bucket_size default 5e8")             \
    X(DS_PREFETCH_BUCKET_ELEMS, "ds_prefetch_bucket_elems", 5e7, "elements",                      \
      "DeepSpeed deepspeed/runtime/zero/config.py: stage3_prefetch_bucket_size default 5e7")       \
    X(DS_PARAM_PERSISTENCE_ELEMS, "ds_param_persistence_elems", 1e5, "elements",                  \
      "DeepSpeed deepspeed/runtime/zero/config.py: stage3_param_persistence_threshold default 1e5") \
    X(DS_SUB_GROUP_ELEMS, "ds_sub_group_elems", 1e9, "elements",                                  \
      "DeepSpeed deepspeed/runtime/zero/config.py: sub_group_size default 1e9")                    \
    X(ZERO3_PENDING_FREE_HEADS, "zero3_pending_free_heads", 0, "LM heads",                       \
      "no default: ZeRO-3 at W > 1 frees gathered parameters and gradients with record_stream "   \
      "on side streams; they stay active until the GPU passes the free; ftest fit")                \
    X(HF_CHECKPOINT_SHARD_BYTES, "hf_checkpoint_shard_bytes", 5e9, "bytes",                      \
      "transformers modeling_utils.py save_pretrained: max_shard_size default \"5GB\"")            \
    X(DDP_BUCKET_CAP_BYTES, "ddp_bucket_cap_bytes", 26214400, "bytes",                            \
      "PyTorch torch/nn/parallel/distributed.py: bucket_cap_mb default 25")                       \
    /* Step time (estimator/ledger/timing.c, docs/method.md ("Step time")). */ \
    X(MATMUL_PEAK_EFF, "matmul_peak_efficiency", 0.80, "fraction",                                \
      "best large bf16 GEMM / dense peak: H100 SXM 792.1 of 989 TFLOPS (A100 SXM 85.9%), "        \
      "stas00/ml-engineering compute/accelerator MAMF table")                                      \
    X(GEMM_HALF_EFF_DIM, "gemm_half_efficiency_dim", 128, "elements",                             \
      "NVIDIA Matrix Multiplication Background guide 2.3: cuBLAS tiles are 64-256 wide; "         \
      "efficiency d/(d+128) of the smallest GEMM dimension d: one 128 tile = half")                \
    X(ATTN_PEAK_EFF, "attention_efficiency", 0.50, "fraction",                                    \
      "FlashAttention-2 (Dao 2023) abstract: 50-73% of peak on A100; low end for fwd+bwd")         \
    X(FLASH_BWD_FLOPS_RATIO, "flash_backward_flops_ratio", 2.5, "ratio",                          \
      "FlashAttention-2 (Dao 2023) 4.1: backward FLOPs are 2.5x forward (recompute included)")    \
    X(HBM_EFF, "hbm_efficiency", 0.75, "fraction",                                                \
      "device-to-device copy on A100 80GB: 1536 of 2039 GB/s (FastIceFlo "                        \
      "output/EffectiveMemoryThroughput.md, memcopy.cu; V100 785 of 900)")                         \
    X(KERNEL_GPU_S, "kernel_gpu_overhead_s", 3e-6, "s",                                           \
      "launch gap per kernel on the device, ~3 us: NVIDIA blog 'Getting Started with CUDA "       \
      "Graphs' (2019), short kernels launched back to back")                                       \
    X(KERNEL_HOST_S, "kernel_host_overhead_s", 1e-5, "s",                                         \
      "PyTorch eager CPU cost per op (Python, dispatcher, launch) ~5-25 us: horace.io "           \
      "brrr_intro 'Overhead'; jiahuanglin.xyz gpu_kernel_serving lesson 18")                       \
    X(FRAMEWORK_LAYER_HOST_S, "framework_layer_host_s", 0, "s",                                   \
      "no default: framework host time per decoder block per micro-batch beyond kernel "          \
      "dispatch (module hooks, ZeRO-3 fetch/release); ftest fit")                                  \
    X(NCCL_BUS_EFF, "nccl_bus_efficiency", 0.82, "fraction",                                      \
      "NCCL maintainer, NVIDIA/nccl-tests#212: 370 of 450 GB/s NVLink after ~20% protocol "       \
      "overhead")                                                                                   \
    X(INTER_NODE_GB_PER_S, "default_inter_node_gb_per_s", 25, "GB/s",                             \
      "network per node when no instance says: one 200 Gb/s HDR InfiniBand HCA "                  \
      "(NVIDIA ConnectX-6 product brief)")                                                         \
    X(PCIE_EFF, "pcie_efficiency", 0.70, "fraction",                                              \
      "CUDA samples bandwidthTest, pinned: 9.6-11.4 GB/s on PCIe Gen3 x16 cards (T4, V100) of "   \
      "15.75 (router-gao/cuda-demo cuda-samples/02-cuda-bandwidth.md)")                            \
    X(CPU_ADAM_BYTES_PER_S, "cpu_adam_host_bytes_per_s", 51.2e9, "B/s",                           \
      "host memory bandwidth per rank for DeepSpeedCPUAdam: 2 channels of DDR4-3200 at "          \
      "25.6 GB/s (JEDEC JESD79-4); ftest fit from offload records")                            \
    X(ZERO3_COMM_EFF, "zero3_comm_efficiency", 0.82, "fraction",                                  \
      "link share of ZeRO-3's per-submodule all-gathers and reduce-scatters; default: "           \
      "nccl_bus_efficiency (NVIDIA/nccl-tests#212); ftest fit from multi-GPU records")

typedef enum {
#define EST_K_ENUM(id, name, def, unit, src) EST_K_##id,
    EST_CONSTANTS(EST_K_ENUM)
#undef EST_K_ENUM
    EST_K_COUNT
} est_constant_id;

typedef struct est_constants {
    double value[EST_K_COUNT];
    char source[EST_K_COUNT][160]; /* where the value in force comes from */
} est_constants;

/* Built-in defaults only. */
void est_constants_defaults(est_constants *k);

/* Defaults, then calibrate/profiles/pytorch.json (for hf, deepspeed, fsdp), then
 * calibrate/profiles/<framework>.json; in each file "constants", then the
 * "gpus"[gpu] section. A missing profile file is not an error (defaults stay,
 * and est_constants_profiles_in_force says so); one that exists but cannot be
 * read or parsed is (docs/reliability.md). Results are cached per (framework, gpu). */
int est_constants_for(est_framework fw, const char *gpu_name, est_constants *k, char *err,
                      size_t errlen);

/* --no-profile: built-in defaults only (call before the first est_constants_for). */
void est_constants_use_profiles(bool on);

/* The profile files in force for fw, under the data folder, for the output:
 * "calibrate/profiles/pytorch.json, deepspeed.json", or "none (built-in
 * defaults)" / "none (--no-profile)". */
void est_constants_profiles_in_force(est_framework fw, char *buf, size_t n);

/* Where the data folder (models, catalogs, profiles) comes from, for the output:
 * "shipped", "FTEST_DATA_DIR=PATH" or "./models of the working directory". */
const char *est_data_origin(char *buf, size_t n);

/* Parses one profile's JSON text into k (over whatever k already holds). */
int est_constants_apply_json(const char *text, size_t len, const char *gpu_name, est_constants *k,
                             char *err, size_t errlen);

const char *est_constant_name(est_constant_id id);
const char *est_constant_unit(est_constant_id id);

#endif
