/* The backend boundary: device memory and the operations of a training step.
 *
 * The model (model.c), ZeRO (zero.c) and the optimizer only call through this
 * table, so a CUDA backend (cuBLAS matmuls, CUDA kernels, cudaMalloc slabs)
 * slots in by filling another one. Every pointer passed to an op is device
 * memory of that backend, token ids included (model.c copies each
 * micro-batch's tokens and targets into the device `batch` buffer with
 * to_device). Signatures and semantics are those of ops.h, with the rank's
 * backend context first.
 *
 * Errors: a device reports failures asynchronously (a kernel launch error or a
 * fault surfaces at the next synchronisation), so an op cannot return its own
 * status truthfully. Every op and memory call records its first failure in the
 * context (sticky, like CUDA's last error); `sync` waits for the queued work
 * and returns that status with its one-line message. The driver syncs after
 * every micro-batch, the gradient reduction and the optimizer, and a failed
 * status stops the run and reaches main as one line. Collectives return their
 * status directly (comm.h) and callers record it with tr_backend_fail. */
#ifndef TR_BACKEND_H
#define TR_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "arena.h"
#include "dtype.h"

/* Arguments of one optimizer update (optim.h has the equations). */
typedef struct tr_opt_args {
    float lr, weight_decay, grad_scale;
    int64_t t; /* 1-based step for bias correction */
} tr_opt_args;

/* One rank's handle on its device. The CPU backend uses only the status and
 * `scalars`; a GPU backend fills the rest in `open`. */
typedef struct tr_backend_ctx {
    int device;        /* ordinal on this node (CUDA device), 0 on the CPU */
    void *stream;      /* compute stream (cudaStream_t) */
    void *comm_stream; /* collectives' stream, so they overlap compute */
    void *blas;        /* BLAS handle (cublasLtHandle_t) */
    void *workspace;   /* BLAS workspace, device memory */
    size_t workspace_bytes;
    /* Device memory for small collectives (the gradient norm's sum of
     * squares): NCCL reduces device buffers only. Outside the arena, so
     * the arena's categories (and records) are those of the CPU trainer. */
    void *scalars;
    void *impl;    /* the backend's own state */
    int status;    /* 0, or the first failure (sticky) */
    char msg[256]; /* that failure, one line */
} tr_backend_ctx;

/* An event on the compute stream, for timing (cudaEvent_t on a GPU; the
 * host clock when the event was recorded on the CPU). */
typedef struct tr_event {
    double host_s;
    void *impl;
} tr_event;

#define TR_SCALARS_BYTES 64

/* Records a failure in ctx unless one is already there; returns -1. */
int tr_backend_fail(tr_backend_ctx *ctx, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

typedef struct tr_backend {
    const char *name; /* "cpu", "cuda" */
    /* Whether this machine can run it (a GPU is there); NULL: always. */
    int (*probe)(char *err, size_t errlen);
    /* Opens one rank's context on `device`; on failure, one line in err. */
    int (*open)(tr_backend_ctx *ctx, int device, char *err, size_t errlen);
    void (*close)(tr_backend_ctx *ctx);
    /* Waits for the work queued on ctx's streams; returns ctx->status. */
    int (*sync)(tr_backend_ctx *ctx);
    int (*event_create)(tr_backend_ctx *ctx, tr_event *e);
    void (*event_destroy)(tr_backend_ctx *ctx, tr_event *e);
    int (*event_record)(tr_backend_ctx *ctx, tr_event *e);
    /* Seconds between two recorded events (waits for `end`). */
    int (*event_elapsed_s)(tr_backend_ctx *ctx, const tr_event *start, const tr_event *end, double *s);
    tr_mem mem;      /* device slabs */
    tr_mem host_mem; /* host slabs for offload (pinned memory on a GPU backend) */
    void (*zero)(tr_backend_ctx *ctx, void *p, size_t bytes);
    void (*copy)(tr_backend_ctx *ctx, void *dst, const void *src, size_t bytes); /* device to device */
    void (*to_host)(tr_backend_ctx *ctx, void *dst, const void *src, size_t bytes);
    void (*to_device)(tr_backend_ctx *ctx, void *dst, const void *src, size_t bytes);
    /* dst[i] = round_dst(src[i]) for n elements, any of F32/BF16 each side. */
    void (*convert)(tr_backend_ctx *ctx, void *dst, tr_dtype dst_dt, const void *src, tr_dtype src_dt,
                    int64_t n);
    /* Host fp32 <-> device dtype, for the offloaded optimizer. */
    void (*download_f32)(tr_backend_ctx *ctx, float *dst_host, const void *src, tr_dtype src_dt, int64_t n);
    void (*upload_f32)(tr_backend_ctx *ctx, void *dst, tr_dtype dst_dt, const float *src_host, int64_t n);
    /* Sum of squares of n elements, in double, in a fixed order. */
    double (*sumsq)(tr_backend_ctx *ctx, const void *p, int64_t n, tr_dtype dt);

    void (*add)(tr_backend_ctx *ctx, void *y, const void *x, int64_t n, tr_dtype dt);
    void (*embedding_fwd)(tr_backend_ctx *ctx, void *out, const int32_t *tokens, const void *wte, int64_t n,
                          int64_t h, tr_dtype dt);
    void (*embedding_bwd)(tr_backend_ctx *ctx, void *dwte, const void *dout, const int32_t *tokens, int64_t n,
                          int64_t h, tr_dtype dt);
    void (*rmsnorm_fwd)(tr_backend_ctx *ctx, void *out, float *rstd, const void *inp, const void *w,
                        int64_t n, int64_t h, double eps, tr_dtype dt);
    void (*rmsnorm_bwd)(tr_backend_ctx *ctx, void *dinp, void *dw, const void *dout, const void *inp,
                        const void *w, const float *rstd, int64_t n, int64_t h, tr_dtype dt);
    void (*matmul_fwd)(tr_backend_ctx *ctx, void *out, const void *inp, const void *w, const void *bias,
                       int64_t n, int64_t c, int64_t oc, tr_dtype dt);
    void (*matmul_bwd)(tr_backend_ctx *ctx, void *dinp, void *dw, void *dbias, const void *dout,
                       const void *inp, const void *w, int64_t n, int64_t c, int64_t oc, tr_dtype dt);
    void (*rope_fwd)(tr_backend_ctx *ctx, void *qkv, int64_t B, int64_t T, int64_t nh, int64_t nkv,
                     int64_t hd, double theta, tr_dtype dt);
    void (*rope_bwd)(tr_backend_ctx *ctx, void *dqkv, int64_t B, int64_t T, int64_t nh, int64_t nkv,
                     int64_t hd, double theta, tr_dtype dt);
    void (*attn_eager_fwd)(tr_backend_ctx *ctx, void *out, void *probs, const void *qkv, int64_t B, int64_t T,
                           int64_t nh, int64_t nkv, int64_t hd, tr_dtype dt);
    void (*attn_eager_bwd)(tr_backend_ctx *ctx, void *dqkv, void *dprobs, const void *dout, const void *qkv,
                           const void *probs, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                           tr_dtype dt);
    void (*attn_flash_fwd)(tr_backend_ctx *ctx, void *out, float *lse, const void *qkv, int64_t B, int64_t T,
                           int64_t nh, int64_t nkv, int64_t hd, tr_dtype dt);
    void (*attn_flash_bwd)(tr_backend_ctx *ctx, void *dqkv, const void *dout, const void *qkv,
                           const void *out, const float *lse, int64_t B, int64_t T, int64_t nh, int64_t nkv,
                           int64_t hd, tr_dtype dt);
    void (*swiglu_fwd)(tr_backend_ctx *ctx, void *hact, const void *gu, int64_t n, int64_t I, tr_dtype dt);
    void (*swiglu_bwd)(tr_backend_ctx *ctx, void *dgu, const void *dhact, const void *gu, int64_t n,
                       int64_t I, tr_dtype dt);
    void (*ce_fwd)(tr_backend_ctx *ctx, float *losses, const void *logits, const int32_t *targets, int64_t n,
                   int64_t V, tr_dtype dt);
    void (*ce_bwd)(tr_backend_ctx *ctx, void *logits, const int32_t *targets, int64_t n, int64_t V,
                   float scale, tr_dtype dt);
    /* Optimizer updates of device-resident state (optim.h). */
    void (*adamw)(tr_backend_ctx *ctx, float *w, void *wout, tr_dtype wout_dt, const void *g, tr_dtype g_dt,
                  float *m, float *v, int64_t n, const tr_opt_args *a);
    void (*sgd)(tr_backend_ctx *ctx, float *w, void *wout, tr_dtype wout_dt, const void *g, tr_dtype g_dt,
                int64_t n, const tr_opt_args *a);
} tr_backend;

/* The reference backend: host memory, the ops of ops.h. */
const tr_backend *tr_backend_cpu(void);

/* The CUDA backend, or NULL when ftrain was built without nvcc. */
const tr_backend *tr_backend_cuda(void);

/* The first entry of be's table that is NULL (an op not written yet), or
 * NULL when the table is complete. */
const char *tr_backend_missing_op(const tr_backend *be);

/* The backend named by --device ("cpu" or "cuda"); on failure (an unknown
 * name, a build without CUDA, no GPU) one line in err and -1. */
int tr_backend_select(const char *name, const tr_backend **be, char *err, size_t errlen);

#endif
