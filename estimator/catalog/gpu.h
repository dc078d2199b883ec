/* The GPU catalog (models/gpus.json): capacity, peak rates and links, each
 * figure with its source in the catalog file. */
#ifndef EST_GPU_H
#define EST_GPU_H

#include <stddef.h>
#include <stdint.h>

#define EST_GPU_NAME_MAX 32
#define EST_GPU_ALIASES_MAX 4     /* other names est_gpu_find accepts for one GPU */

typedef struct est_gpu {
    char name[EST_GPU_NAME_MAX];  /* catalog key, e.g. "h100-80gb" */
    char display[48];             /* "NVIDIA H100 SXM5 80GB" */
    int64_t memory_bytes;         /* total device memory as the driver reports it */
    double fp32_tflops;           /* dense peak, non-tensor-core fp32 */
    double tf32_tflops;           /* dense tensor-core peaks (no sparsity) */
    double bf16_tflops;
    double fp16_tflops;
    double hbm_gb_per_s;          /* device memory bandwidth, 1e9 B/s */
    double nvlink_gb_per_s;       /* per-GPU NVLink bandwidth, one direction, 1e9 B/s; 0 if none
                                     (or only a bridge joining two cards) */
    double pcie_gb_per_s;         /* host link, one direction, 1e9 B/s */
    char arch[16];                /* "ampere", "ada", "hopper", "blackwell": the GEMM tiles
                                     (estimator/ledger/gemm.c) and the derived ceilings */
    int sms;                      /* streaming multiprocessors: the waves of a GEMM's tiles */
    double matmul_ceiling_tflops; /* the largest bf16/fp16 GEMM rate torch.mm reaches on the
                                     card, measured (MAMF, shared/data/mamf) or derived from its
                                     architecture's measured ratio (calibrate/import/mamf.py) */
    double matmul_ceiling_mnk[3]; /* the M, N, K it was measured at; 0s when derived */
    double fp8_tflops;            /* dense FP8 tensor-core peak with fp32 accumulate (what
                                     torch._scaled_mm runs); 0: no FP8 tensor cores (Ampere) */
    double fp8_matmul_ceiling_tflops; /* the largest torch._scaled_mm rate measured (MAMF
                                     fp8_e4m3fn row); 0 when the card has no such row */
    char aliases[EST_GPU_ALIASES_MAX][EST_GPU_NAME_MAX]; /* "h100", "h100-sxm"; unused are "" */
    int n_aliases;
} est_gpu;

typedef struct est_gpu_catalog {
    est_gpu *gpus;
    size_t count;
} est_gpu_catalog;

/* Loads models/gpus.json (or `path` when non-NULL). Every figure is required and
 * checked (finite, positive; NVLink may be 0), names and aliases must be unique;
 * on error returns -1 with a one-line message naming the GPU and the field. */
int est_gpu_catalog_load(const char *path, est_gpu_catalog *cat, char *err, size_t errlen);
/* The same from JSON text; `what` names the text in messages. */
int est_gpu_catalog_parse(const char *text, size_t len, const char *what, est_gpu_catalog *cat,
                          char *err, size_t errlen);
void est_gpu_catalog_free(est_gpu_catalog *cat);
/* Finds by catalog key, case-insensitive; also accepts a few aliases ("h100" -> h100-80gb). */
const est_gpu *est_gpu_find(const est_gpu_catalog *cat, const char *name);

/* The FP8 GEMM ceiling in TFLOP/s: the measured one, or the data-sheet FP8
 * peak at the card's own bf16 achieved ratio (matmul ceiling / bf16 peak);
 * 0 when the card has no FP8 tensor cores. */
double est_gpu_fp8_ceiling_tflops(const est_gpu *g);

/* The message for a GPU name est_gpu_find does not know, with the close
 * catalog keys ("a100" -> "did you mean a100-40gb or a100-80gb?"). Returns -1. */
int est_gpu_unknown(const est_gpu_catalog *cat, const char *name, char *err, size_t errlen);

#endif
