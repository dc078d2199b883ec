/* Every number the model uses that is not a shape: its built-in default with the
 * source of that default, optionally replaced per framework and per GPU by a
 * profile fitted from measurement records (calibrate/profiles/<framework>.json,
 * written by `ftest fit`). `ftest constants` prints the table in force. */
#ifndef EST_CONSTANTS_H
#define EST_CONSTANTS_H

#include <stddef.h>

#include "run.h"

/* X(id, json name, default value, unit, source of the default) */
#define EST_CONSTANTS(X)                                                                         \
    X(CUDA_CONTEXT_BYTES, "cuda_context_bytes", 419430400, "bytes",                               \
      "PyTorch maintainer, pytorch/pytorch#109888: ~400 MB with CUDA >= 11.7 lazy loading; "      \
      "replace by a per-GPU measurement")                                                          \
    X(ALLOC_RESERVE_FRAC, "allocator_reserve_frac", 0, "fraction",                                \
      "no default: caching-allocator reserve beyond allocated under memory pressure; ftest fit")   \
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
    X(DDP_BUCKET_CAP_BYTES, "ddp_bucket_cap_bytes", 26214400, "bytes",                            \
      "PyTorch torch/nn/parallel/distributed.py: bucket_cap_mb default 25")

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

/* Defaults, then calibrate/profiles/<framework>.json's "constants", then its
 * "gpus"[gpu] section. A missing profile file is not an error (defaults stay);
 * a malformed one is. Results are cached per (framework, gpu). */
int est_constants_for(est_framework fw, const char *gpu_name, est_constants *k, char *err,
                      size_t errlen);

/* Parses one profile's JSON text into k (over whatever k already holds). */
int est_constants_apply_json(const char *text, size_t len, const char *gpu_name, est_constants *k,
                             char *err, size_t errlen);

const char *est_constant_name(est_constant_id id);
const char *est_constant_unit(est_constant_id id);

#endif
