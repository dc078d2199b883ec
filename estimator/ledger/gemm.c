/* GEMM time from the shape (gemm.h; docs/method.md, "GEMMs from their shapes"). */
#include "gemm.h"

#include <math.h>

/* The thread-block tiles of C a GEMM library picks among for 16-bit tensor-core
 * GEMMs: CUTLASS's default for SM80 (cutlass/gemm/device/default_gemm_configuration.h,
 * OpClassTensorOp, Sm80: ThreadblockShape 128x256x64, 3 stages), its transpose,
 * and the smaller tiles cuBLAS also ships (ampere_*gemm_128x128, _128x64,
 * _64x64 kernel names in profiles of A100 and RTX 30-series runs). The library
 * picks the tile that wastes least. */
static const double TILES[][2] = {{128, 256}, {256, 128}, {128, 128}, {128, 64}, {64, 128}, {64, 64}};
#define N_TILES (sizeof TILES / sizeof TILES[0])

/* A smaller tile reuses each operand element it loads on fewer multiply-adds:
 * a tm x tn tile does tm*tn/(tm+tn) of them per element of A and B it reads
 * per K step. The SM must be fed that fast from L2: on the A100, L2 delivers
 * 5120 bytes per clock (NVIDIA A100 Tensor Core GPU Architecture whitepaper,
 * "L2 cache": 5120 B/clk, 2.3x V100) to 108 SMs at 1.41 GHz, 33.4e9 16-bit
 * elements per second per SM. A tile whose reuse is below the SM's rate /
 * that feed runs at the ratio. Other GPUs are taken to feed their SMs as fast
 * per SM (an assumption: their L2 bandwidth is not in the data sheets); a card
 * with slow tensor cores per SM (GeForce's half-rate FP32 accumulate) then
 * runs even 64x64 tiles at full speed, a fast one (H100) prefers large ones. */
#define FEED_ELEMS_PER_S_PER_SM (5120.0 * 1.41e9 / 108.0 / 2.0)

/* A split of K among blocks is worth it only when each split keeps a few
 * passes of the mainloop's 64-element K slice (the SM80 configuration above):
 * at least 4, 256 elements. */
#define K_SPLIT_MIN 256.0

est_gemm_device est_gemm_device_of(const est_gpu *gpu, double elem_bytes, double bw) {
    est_gemm_device d = {.bw = bw, .sms = gpu->sms > 0 ? gpu->sms : 1};
    /* Multiply-adds per second one SM's tensor cores need fed, over the feed. */
    d.reuse_needed = gpu->matmul_ceiling_tflops * 1e12 / 2.0 / d.sms / FEED_ELEMS_PER_S_PER_SM;
    /* The ceiling was measured at one shape, whose own tiles and waves are in
     * it: full tiles in full waves run at ceiling / efficiency(that shape). */
    double at_shape = 1;
    const double *s = gpu->matmul_ceiling_mnk;
    d.ceiling_flops = 1;
    if (s[0] > 0 && s[1] > 0 && s[2] > 0) at_shape = est_gemm_shape_efficiency(&d, s[0], s[2], s[1], 1);
    const double ratio = gpu->bf16_tflops > 0 ? gpu->matmul_ceiling_tflops / gpu->bf16_tflops : 0;
    /* fp32 without TF32 runs on the CUDA cores: the fp32 peak at the card's
     * achieved ratio (no MAMF row measures it). FP8 (1 byte, torch._scaled_mm)
     * runs at the card's FP8 ceiling (est_gpu_fp8_ceiling_tflops: MAMF's
     * fp8_e4m3fn row, or the data-sheet FP8 peak at the bf16 ratio), taken to
     * lose to tiles and waves as the bf16 ceiling's shape does; the tiles are
     * the same (an FP8 element is half the bytes, so L2 feeds twice as many:
     * the reuse needed is the bf16 one). A card without FP8 tensor cores has
     * no FP8 ceiling; est_run_validate refuses --fp8 there. */
    const double tflops = elem_bytes >= 4  ? gpu->fp32_tflops * ratio
                          : elem_bytes < 2 ? est_gpu_fp8_ceiling_tflops(gpu)
                                           : gpu->matmul_ceiling_tflops;
    d.ceiling_flops = tflops * 1e12 / (at_shape > 0 ? at_shape : 1);
    return d;
}

/* The split of K among blocks when the tiles alone leave SMs idle. */
static double k_splits(const est_gemm_device *d, double tiles, double K) {
    if (tiles >= d->sms) return 1;
    double s = fmin(floor(d->sms / tiles), floor(K / K_SPLIT_MIN));
    return s > 1 ? s : 1;
}

/* Efficiency with one tile shape; *splits gets its split of K. */
static double tile_efficiency(const est_gemm_device *d, const double tile[2], double M, double K,
                              double N, double batch, double *splits) {
    const double tm = ceil(M / tile[0]), tn = ceil(N / tile[1]), tiles = tm * tn;
    const double filled = (M * N) / (tiles * tile[0] * tile[1]);
    const double s = k_splits(d, tiles * batch, K);
    const double blocks = tiles * batch * s;
    const double waves = ceil(blocks / d->sms);
    const double wave = blocks / (waves * d->sms);
    const double reuse = tile[0] * tile[1] / (tile[0] + tile[1]);
    const double fed = d->reuse_needed > reuse ? reuse / d->reuse_needed : 1;
    *splits = s;
    return filled * wave * fed;
}

static double best(const est_gemm_device *d, double M, double K, double N, double batch, double *splits) {
    double eff = 0;
    *splits = 1;
    for (size_t i = 0; i < N_TILES; i++) {
        double s, e = tile_efficiency(d, TILES[i], M, K, N, batch, &s);
        if (e > eff) eff = e, *splits = s;
    }
    return eff;
}

double est_gemm_shape_efficiency(const est_gemm_device *d, double M, double K, double N, double batch) {
    if (!(M >= 1) || !(K >= 1) || !(N >= 1)) return 1;
    double s;
    return best(d, M, K, N, batch >= 1 ? batch : 1, &s);
}

double est_gemm_time_s(const est_gemm_device *d, double M, double K, double N, double elem_bytes,
                       double batch) {
    if (!(M > 0) || !(K > 0) || !(N > 0) || !(d->ceiling_flops > 0) || !(d->bw > 0)) return 0;
    if (!(batch >= 1)) batch = 1;
    double s;
    const double eff = best(d, M >= 1 ? M : 1, K >= 1 ? K : 1, N >= 1 ? N : 1, batch, &s);
    const double compute = batch * 2.0 * M * K * N / (d->ceiling_flops * eff);
    /* A and B read, C written once (the tiles of one operand row or column
     * meet in L2); split-K writes and reads back fp32 partial tiles. */
    double bytes = batch * elem_bytes * (M * K + K * N + M * N);
    if (s > 1) bytes += batch * 2.0 * s * M * N * 4;
    return fmax(compute, bytes / d->bw);
}
