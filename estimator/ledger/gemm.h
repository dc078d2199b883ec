/* The time of one GEMM from its shape, on one GPU (docs/method.md, "GEMMs from
 * their shapes").
 *
 * C (M x N) = A (M x K) @ B (K x N). A GEMM library splits C into tiles, one
 * thread block per tile, and runs the blocks in waves over the GPU's SMs. The
 * card's measured ceiling (models/gpus.json matmul_ceiling_tflops: MAMF, the
 * best torch.mm rate over shapes) is what full tiles in full waves reach; a
 * shape loses to
 *   - tile quantization: the last row and column of tiles are partly empty,
 *     unless a smaller tile is picked, which reuses each operand element on
 *     fewer multiply-adds and may starve the SM's tensor cores;
 *   - wave quantization: the last wave leaves SMs idle; with fewer tiles than
 *     SMs the K dimension is split among blocks (split-K) when it is long;
 * and no GEMM is faster than moving its operands through device memory at the
 * achieved bandwidth (thin GEMMs: LoRA's rank-r products, a token or two).
 * No constant here is fitted: the tiles and the pipeline depth are the
 * libraries' (CUTLASS's default configurations, cited in gemm.c). */
#ifndef EST_GEMM_H
#define EST_GEMM_H

#include "gpu.h"

typedef struct est_gemm_device {
    double ceiling_flops; /* FLOP/s of full tiles in full waves, in the GEMM's dtype */
    double bw;            /* achieved device-memory bytes/s */
    int sms;              /* streaming multiprocessors */
    double reuse_needed;  /* multiply-adds per operand element a tile must reach to keep the
                             SM's tensor cores fed from L2 (gemm.c) */
} est_gemm_device;

/* The device of `gpu` for GEMMs of `elem_bytes` (2: bf16/fp16 at the matmul
 * ceiling; 4: fp32 without TF32, the fp32 peak at the same achieved ratio)
 * with `bw` achieved bytes/s. */
est_gemm_device est_gemm_device_of(const est_gpu *gpu, double elem_bytes, double bw);

/* Fraction of the ceiling a GEMM of this shape runs at (tile, wave and
 * pipeline start-up), launched `batch` at a time (a batched GEMM's problems
 * share the waves); in (0, 1]. */
double est_gemm_shape_efficiency(const est_gemm_device *d, double M, double K, double N, double batch);

/* Seconds for `batch` GEMMs of one shape in one launch, elements of
 * `elem_bytes`: the larger of the compute at the shape's efficiency and the
 * operand traffic (A, B read, C written, split-K's partial sums) at the
 * achieved bandwidth. */
double est_gemm_time_s(const est_gemm_device *d, double M, double K, double N, double elem_bytes,
                       double batch);

#endif
