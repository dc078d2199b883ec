/* The GPU catalog (models/gpus.json): capacity, peak rates and links, each
 * figure with its source in the catalog file. */
#ifndef EST_GPU_H
#define EST_GPU_H

#include <stddef.h>
#include <stdint.h>

#define EST_GPU_NAME_MAX 32

typedef struct est_gpu {
    char name[EST_GPU_NAME_MAX];  /* catalog key, e.g. "h100-80gb" */
    char display[48];             /* "NVIDIA H100 SXM5 80GB" */
    int64_t memory_bytes;         /* total device memory as the driver reports it */
    double fp32_tflops;           /* dense peak, non-tensor-core fp32 */
    double tf32_tflops;           /* dense tensor-core peaks (no sparsity) */
    double bf16_tflops;
    double fp16_tflops;
    double hbm_gb_per_s;          /* device memory bandwidth, 1e9 B/s */
    double nvlink_gb_per_s;       /* per-GPU NVLink bandwidth, one direction, 1e9 B/s; 0 if none */
    double pcie_gb_per_s;         /* host link, one direction, 1e9 B/s */
} est_gpu;

typedef struct est_gpu_catalog {
    est_gpu *gpus;
    size_t count;
} est_gpu_catalog;

/* Loads models/gpus.json (or `path` when non-NULL). */
int est_gpu_catalog_load(const char *path, est_gpu_catalog *cat, char *err, size_t errlen);
void est_gpu_catalog_free(est_gpu_catalog *cat);
/* Finds by catalog key, case-insensitive; also accepts a few aliases ("h100" -> h100-80gb). */
const est_gpu *est_gpu_find(const est_gpu_catalog *cat, const char *name);

#endif
