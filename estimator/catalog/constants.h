/* Every number the model uses that is not a shape: its built-in default with the
 * source of that default, optionally replaced per framework and per GPU by a
 * profile fitted from measurement records (calibrate/profiles/<framework>.json,
 * written by `ftest fit`). `ftest constants` prints the table in force. */
#ifndef EST_CONSTANTS_H
#define EST_CONSTANTS_H

#include <stdbool.h>
#include <stddef.h>

#include "gpu.h" /* EST_GPU_NAME_MAX */

/* X(id, json name, default value, unit, source of the default) */
#define EST_CONSTANTS(X)                                                                         \
    /* Device memory outside the caching allocator (device_mem.h): the total in \
     * force is built per GPU by est_cuda_context_in_force unless a profile     \
     * sets it; the images are the one fitted part (cal_fit_context).           */ \
    X(CUDA_CONTEXT_BYTES, "cuda_context_bytes", 419430400, "bytes",                               \
      "PyTorch maintainer, pytorch/pytorch#109888: ~400 MB with CUDA >= 11.7 lazy loading; "      \
      "replace by a per-GPU measurement")                                                          \
    X(CUDA_IMAGES_BYTES, "cuda_step_images_bytes", 419430400, "bytes",                            \
      "no record: pytorch/pytorch#109888's whole ~400 MB context with lazy loading; ftest fit "    \
      "(largest device used - reserved - sourced context of a framework's records)")              \
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
    X(HF_CHECKPOINT_SHARD_BYTES, "hf_checkpoint_shard_bytes", 5e9, "bytes",                      \
      "transformers modeling_utils.py save_pretrained: max_shard_size default \"5GB\"")            \
    X(DDP_BUCKET_CAP_BYTES, "ddp_bucket_cap_bytes", 26214400, "bytes",                            \
      "PyTorch torch/nn/parallel/distributed.py: bucket_cap_mb default 25")                       \
    /* Step time (estimator/ledger/timing.c, docs/method.md ("Step time")). */ \
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
    /* Per ATen op the host dispatches (a block's ops counted from its description,  \
     * model/host_ops.h; one per kernel elsewhere); fitted over every stack into     \
     * calibrate/profiles/pytorch.json (cal_fit_host_ops). */                        \
    X(KERNEL_HOST_S, "kernel_host_overhead_s", 1e-5, "s",                                         \
      "PyTorch eager CPU cost per op (Python, dispatcher, launch) ~5-25 us: horace.io "           \
      "brrr_intro 'Overhead'; jiahuanglin.xyz gpu_kernel_serving lesson 18")                       \
    X(FRAMEWORK_LAYER_HOST_S, "framework_layer_host_s", 0, "s",                                   \
      "no default: framework host time per decoder block per micro-batch beyond kernel "          \
      "dispatch (module hooks, ZeRO-3 fetch/release); ftest fit")                                  \
    X(NCCL_BUS_EFF, "nccl_bus_efficiency", 0.82, "fraction",                                      \
      "NCCL maintainer, NVIDIA/nccl-tests#212: 370 of 450 GB/s NVLink after ~20% protocol "       \
      "overhead")                                                                                   \
    X(NCCL_BASE_LAT_S, "nccl_base_latency_s", 8.4e-6, "s",                                        \
      "NCCL src/graph/tuning.cc (v2.18-2.21) baseLat, Ring/Simple: 8.4 us per collective")       \
    X(NCCL_NVLINK_HOP_S, "nccl_nvlink_step_latency_s", 3.4e-6, "s",                               \
      "NCCL src/graph/tuning.cc hwLat[NVLINK], Ring/Simple: 3.4 us per ring step")                \
    X(NCCL_PCIE_HOP_S, "nccl_pcie_step_latency_s", 5.7e-6, "s",                                   \
      "NCCL src/graph/tuning.cc hwLat[PCI], Ring/Simple: 5.7 us per ring step")                   \
    X(NCCL_NET_HOP_S, "nccl_net_step_latency_s", 14e-6, "s",                                      \
      "NCCL src/graph/tuning.cc hwLat[NET], Ring/Simple: 14 us per inter-node ring step")         \
    X(INTER_NODE_GB_PER_S, "default_inter_node_gb_per_s", 25, "GB/s",                             \
      "network per node when no instance says: one 200 Gb/s HDR InfiniBand HCA "                  \
      "(NVIDIA ConnectX-6 product brief)")                                                         \
    X(PCIE_EFF, "pcie_efficiency", 0.70, "fraction",                                              \
      "CUDA samples bandwidthTest, pinned: 9.6-11.4 GB/s on PCIe Gen3 x16 cards (T4, V100) of "   \
      "15.75 (router-gao/cuda-demo cuda-samples/02-cuda-bandwidth.md)")                            \
    X(HOST_MEM_GB_PER_S_PER_GPU, "host_mem_gb_per_s_per_gpu", 51.2, "GB/s",                      \
      "a node's DRAM bandwidth per GPU when no instance says: DGX A100, 2 AMD EPYC 7742 with 8 "  \
      "channels of DDR4-3200 each (409.6 GB/s, AMD EPYC 7002 spec) for 8 GPUs")                  \
    X(HOST_CORES_PER_GPU, "host_cores_per_gpu", 16, "cores",                                      \
      "a node's cores per GPU when no instance says: DGX A100, 2 x 64 cores for 8 GPUs "          \
      "(NVIDIA DGX A100 datasheet)")                                                                \
    X(HOST_MEM_EFF, "host_memory_efficiency", 0.75, "fraction",                                   \
      "share of the node's DRAM peak its ranks' CPU optimizers stream at together; default: "     \
      "STREAM triad ~75% of peak on 2-socket servers; ftest fit from offload records")           \
    X(CPU_ADAM_CORE_BYTES_PER_S, "cpu_adam_core_bytes_per_s", 30.0e9, "B/s",                      \
      "DeepSpeedCPUAdam on one core, 28 B/param: 1.07e9 param/s on an AMD EPYC (Zen 4, AVX-512) " \
      "vCPU, best of 8 runs, calibrate/host/measured-epyc-zen4.jsonl (docs/method.md, The host)") \
    X(TORCH_CPU_ADAMW_SLOWDOWN, "torch_cpu_adamw_slowdown", 8.49, "ratio",                        \
      "torch.optim.AdamW (foreach) on CPU over DeepSpeedCPUAdam, same core and tensors, best "    \
      "runs: 1.26e8 vs 1.07e9 param/s, calibrate/host/measured-epyc-zen4.jsonl")                \
    X(CPU_OPTIM_OVERSUBSCRIPTION, "cpu_optimizer_oversubscription", 0.294, "fraction",           \
      "extra CPU-optimizer time when several ranks' OpenMP teams all span every core (deepspeed " \
      "launcher without --bind_cores_to_rank): deepspeedai/DeepSpeed#7474, 2 A100 ranks on 128 "  \
      "cores, 3084 vs 2383 ms per step bound; taken for any rank count above 1")                 \
    X(HGX_GPUS_PER_PCIE_SWITCH, "hgx_gpus_per_pcie_switch", 2, "GPUs",                            \
      "GPUs behind one x16 uplink to the CPU on 8-GPU NVLink boards: DGX A100 User Guide, "       \
      "system topology (4 PCIe Gen4 switches, 2 GPUs each); DGX H100 alike")                     \
    X(ZERO3_COMM_EFF, "zero3_comm_efficiency", 0.11, "fraction",                                  \
      "ZeRO-3's link share: DeepSpeed PR #1188, 8 x A100 NVSwitch: 5.1B fp16 params gathered "    \
      "(8.9 GB/rank) in a 270 ms forward, 33 of 300 GB/s; ftest fit")                             \
    X(COMM_INTERFERENCE, "comm_compute_interference", 0.189, "fraction",                          \
      "compute slowdown beside collectives: Lee et al. 2025 (arXiv 2507.03114): 18.9% mean "      \
      "over A100/H100/MI250/MI210, GPT and LLaMA layers; ftest fit")

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

/* The profile every PyTorch stack reads before its own (calibrate/profiles/
 * pytorch.json): the host's cost per ATen op, fitted over all frameworks'
 * records (calibrate/fit_time.c, cal_fit_host_ops). */
#define EST_COMMON_PROFILE "pytorch"

/* Defaults, then calibrate/profiles/pytorch.json (for hf, deepspeed, fsdp), then
 * calibrate/profiles/<framework>.json; in each file "constants", then the
 * "gpus"[gpu] section. A missing profile file is not an error (defaults stay,
 * and est_constants_profiles_in_force says so); one that exists but cannot be
 * read or parsed is (docs/reliability.md). Results are cached per (framework, gpu).
 * `fw` is the framework's name (est_framework_name: "hf", "deepspeed" ...). */
int est_constants_for(const char *fw, const char *gpu_name, est_constants *k, char *err,
                      size_t errlen);

/* --no-profile: built-in defaults only (call before the first est_constants_for). */
void est_constants_use_profiles(bool on);

/* The profile files in force for fw, under the data folder, for the output:
 * "calibrate/profiles/pytorch.json, deepspeed.json", or "none (built-in
 * defaults)" / "none (--no-profile)". */
void est_constants_profiles_in_force(const char *fw, char *buf, size_t n);

/* Where the data folder (models, catalogs, profiles) comes from, for the output:
 * "shipped", "FTEST_DATA_DIR=PATH" or "./models of the working directory". */
const char *est_data_origin(char *buf, size_t n);

/* Parses one profile's JSON text into k (over whatever k already holds). */
int est_constants_apply_json(const char *text, size_t len, const char *gpu_name, est_constants *k,
                             char *err, size_t errlen);

const char *est_constant_name(est_constant_id id);
const char *est_constant_unit(est_constant_id id);

#endif
