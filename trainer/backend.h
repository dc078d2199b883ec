/* The backend boundary: device memory and the operations of a training step.
 *
 * The model (model.c), ZeRO (zero.c) and the optimizer only call through this
 * table, so a CUDA backend (cuBLAS matmuls, CUDA kernels, cudaMalloc slabs)
 * slots in by filling another one. Every pointer passed to an op is device
 * memory of that backend, token ids included (model.c copies each
 * micro-batch's tokens and targets into the device `batch` buffer with
 * to_device). Signatures and semantics are those of ops.h. */
#ifndef TR_BACKEND_H
#define TR_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "arena.h"
#include "dtype.h"

/* Arguments of one optimizer update (optim.h has the equations). */
typedef struct tr_opt_args {
    float lr, weight_decay, grad_scale;
    int64_t t;               /* 1-based step for bias correction */
} tr_opt_args;

typedef struct tr_backend {
    const char *name;                /* "cpu" */
    tr_mem mem;                      /* device slabs */
    tr_mem host_mem;                 /* host slabs for offload (pinned memory on a GPU backend) */
    void (*zero)(void *p, size_t bytes);
    void (*copy)(void *dst, const void *src, size_t bytes);  /* device to device */
    void (*to_host)(void *dst, const void *src, size_t bytes);
    void (*to_device)(void *dst, const void *src, size_t bytes);
    /* dst[i] = round_dst(src[i]) for n elements, any of F32/BF16 each side. */
    void (*convert)(void *dst, tr_dtype dst_dt, const void *src, tr_dtype src_dt, int64_t n);
    /* Host fp32 <-> device dtype, for the offloaded optimizer. */
    void (*download_f32)(float *dst_host, const void *src, tr_dtype src_dt, int64_t n);
    void (*upload_f32)(void *dst, tr_dtype dst_dt, const float *src_host, int64_t n);
    /* Sum of squares of n elements, in double, in a fixed order. */
    double (*sumsq)(const void *p, int64_t n, tr_dtype dt);

    void (*add)(void *y, const void *x, int64_t n, tr_dtype dt);
    void (*embedding_fwd)(void *out, const int32_t *tokens, const void *wte, int64_t n, int64_t h, tr_dtype dt);
    void (*embedding_bwd)(void *dwte, const void *dout, const int32_t *tokens, int64_t n, int64_t h, tr_dtype dt);
    void (*rmsnorm_fwd)(void *out, float *rstd, const void *inp, const void *w, int64_t n, int64_t h,
                        double eps, tr_dtype dt);
    void (*rmsnorm_bwd)(void *dinp, void *dw, const void *dout, const void *inp, const void *w,
                        const float *rstd, int64_t n, int64_t h, tr_dtype dt);
    void (*matmul_fwd)(void *out, const void *inp, const void *w, const void *bias, int64_t n, int64_t c,
                       int64_t oc, tr_dtype dt);
    void (*matmul_bwd)(void *dinp, void *dw, void *dbias, const void *dout, const void *inp, const void *w,
                       int64_t n, int64_t c, int64_t oc, tr_dtype dt);
    void (*rope_fwd)(void *qkv, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd, double theta,
                     tr_dtype dt);
    void (*rope_bwd)(void *dqkv, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd, double theta,
                     tr_dtype dt);
    void (*attn_eager_fwd)(void *out, void *probs, const void *qkv, int64_t B, int64_t T, int64_t nh,
                           int64_t nkv, int64_t hd, tr_dtype dt);
    void (*attn_eager_bwd)(void *dqkv, void *dprobs, const void *dout, const void *qkv, const void *probs,
                           int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd, tr_dtype dt);
    void (*attn_flash_fwd)(void *out, float *lse, const void *qkv, int64_t B, int64_t T, int64_t nh,
                           int64_t nkv, int64_t hd, tr_dtype dt);
    void (*attn_flash_bwd)(void *dqkv, const void *dout, const void *qkv, const void *out, const float *lse,
                           int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd, tr_dtype dt);
    void (*swiglu_fwd)(void *hact, const void *gu, int64_t n, int64_t I, tr_dtype dt);
    void (*swiglu_bwd)(void *dgu, const void *dhact, const void *gu, int64_t n, int64_t I, tr_dtype dt);
    void (*ce_fwd)(float *losses, const void *logits, const int32_t *targets, int64_t n, int64_t V,
                   tr_dtype dt);
    void (*ce_bwd)(void *logits, const int32_t *targets, int64_t n, int64_t V, float scale, tr_dtype dt);
    /* Optimizer updates of device-resident state (optim.h). */
    void (*adamw)(float *w, void *wout, tr_dtype wout_dt, const void *g, tr_dtype g_dt, float *m, float *v,
                  int64_t n, const tr_opt_args *a);
    void (*sgd)(float *w, void *wout, tr_dtype wout_dt, const void *g, tr_dtype g_dt, int64_t n,
                const tr_opt_args *a);
} tr_backend;

/* The reference backend: host memory, the ops of ops.h. */
const tr_backend *tr_backend_cpu(void);

#endif
