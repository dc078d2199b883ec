/* The CPU backend: device memory is host memory, ops are ops.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "ops.h"
#include "optim.h"
#include "parallel.h"

/* The context: only the scalars buffer, which is host memory here. */
static int cpu_open(tr_backend_ctx *ctx, int device, char *err, size_t errlen) {
    memset(ctx, 0, sizeof *ctx);
    ctx->device = device;
    ctx->scalars = calloc(1, TR_SCALARS_BYTES);
    if (!ctx->scalars) {
        if (errlen)
            snprintf(err, errlen, "out of memory opening the CPU backend");
        return -1;
    }
    return 0;
}
static void cpu_close(tr_backend_ctx *ctx) {
    free(ctx->scalars);
    ctx->scalars = NULL;
}
/* Every op has finished when it returns: nothing to wait for. */
static int cpu_sync(tr_backend_ctx *ctx) { return ctx->status; }

static int cpu_event_create(tr_backend_ctx *ctx, tr_event *e) {
    (void)ctx;
    memset(e, 0, sizeof *e);
    return 0;
}
static void cpu_event_destroy(tr_backend_ctx *ctx, tr_event *e) { (void)ctx, (void)e; }
static int cpu_event_record(tr_backend_ctx *ctx, tr_event *e) {
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts))
        return tr_backend_fail(ctx, "clock_gettime failed");
    e->host_s = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    return 0;
}
static int cpu_event_elapsed_s(tr_backend_ctx *ctx, const tr_event *a, const tr_event *b, double *s) {
    (void)ctx;
    *s = b->host_s - a->host_s;
    return 0;
}

static void cpu_zero(tr_backend_ctx *ctx, void *p, size_t bytes) {
    (void)ctx;
    memset(p, 0, bytes);
}
static void cpu_copy(tr_backend_ctx *ctx, void *dst, const void *src, size_t bytes) {
    (void)ctx;
    memmove(dst, src, bytes);
}

typedef struct convert_args {
    void *dst;
    const void *src;
    tr_dtype ddt, sdt;
} convert_args;

static void convert_range(void *p, int64_t i0, int64_t i1) {
    const convert_args *a = p;
    for (int64_t i = i0; i < i1; i++)
        tr_st(a->dst, i, tr_ld(a->src, i, a->sdt), a->ddt);
}

static void cpu_convert(tr_backend_ctx *ctx, void *dst, tr_dtype ddt, const void *src, tr_dtype sdt,
                        int64_t n) {
    (void)ctx;
    convert_args a = {dst, src, ddt, sdt};
    tr_par_for(n, n, convert_range, &a);
}

static void cpu_download_f32(tr_backend_ctx *ctx, float *dst, const void *src, tr_dtype sdt, int64_t n) {
    cpu_convert(ctx, dst, TR_F32, src, sdt, n);
}
static void cpu_upload_f32(tr_backend_ctx *ctx, void *dst, tr_dtype ddt, const float *src, int64_t n) {
    cpu_convert(ctx, dst, ddt, src, TR_F32, n);
}

/* Fixed blocks summed in order, so the result does not depend on threads. */
#define SUMSQ_BLOCK 4096
static double cpu_sumsq(tr_backend_ctx *ctx, const void *p, int64_t n, tr_dtype dt) {
    (void)ctx;
    double total = 0;
    for (int64_t b0 = 0; b0 < n; b0 += SUMSQ_BLOCK) {
        int64_t bn = n - b0 < SUMSQ_BLOCK ? n - b0 : SUMSQ_BLOCK;
        double s = 0;
        for (int64_t i = 0; i < bn; i++) {
            double v = tr_ld(p, b0 + i, dt);
            s += v * v;
        }
        total += s;
    }
    return total;
}

/* The ops of ops.h behind the context argument, which they do not need. */
static void cpu_add(tr_backend_ctx *ctx, void *y, const void *x, int64_t n, tr_dtype dt) {
    (void)ctx;
    tr_cpu_add(y, x, n, dt);
}
static void cpu_embedding_fwd(tr_backend_ctx *ctx, void *out, const int32_t *tokens, const void *wte,
                              int64_t n, int64_t h, tr_dtype dt) {
    (void)ctx;
    tr_cpu_embedding_fwd(out, tokens, wte, n, h, dt);
}
static void cpu_embedding_bwd(tr_backend_ctx *ctx, void *dwte, const void *dout, const int32_t *tokens,
                              int64_t n, int64_t h, tr_dtype dt) {
    (void)ctx;
    tr_cpu_embedding_bwd(dwte, dout, tokens, n, h, dt);
}
static void cpu_rmsnorm_fwd(tr_backend_ctx *ctx, void *out, float *rstd, const void *inp, const void *w,
                            int64_t n, int64_t h, double eps, tr_dtype dt) {
    (void)ctx;
    tr_cpu_rmsnorm_fwd(out, rstd, inp, w, n, h, eps, dt);
}
static void cpu_rmsnorm_bwd(tr_backend_ctx *ctx, void *dinp, void *dw, const void *dout, const void *inp,
                            const void *w, const float *rstd, int64_t n, int64_t h, tr_dtype dt) {
    (void)ctx;
    tr_cpu_rmsnorm_bwd(dinp, dw, dout, inp, w, rstd, n, h, dt);
}
static void cpu_matmul_fwd(tr_backend_ctx *ctx, void *out, const void *inp, const void *w, const void *bias,
                           int64_t n, int64_t c, int64_t oc, tr_dtype dt) {
    (void)ctx;
    tr_cpu_matmul_fwd(out, inp, w, bias, n, c, oc, dt);
}
static void cpu_matmul_bwd(tr_backend_ctx *ctx, void *dinp, void *dw, void *dbias, const void *dout,
                           const void *inp, const void *w, int64_t n, int64_t c, int64_t oc, tr_dtype dt) {
    (void)ctx;
    tr_cpu_matmul_bwd(dinp, dw, dbias, dout, inp, w, n, c, oc, dt);
}
static void cpu_rope_fwd(tr_backend_ctx *ctx, void *qkv, int64_t B, int64_t T, int64_t nh, int64_t nkv,
                         int64_t hd, double theta, tr_dtype dt) {
    (void)ctx;
    tr_cpu_rope_fwd(qkv, B, T, nh, nkv, hd, theta, dt);
}
static void cpu_rope_bwd(tr_backend_ctx *ctx, void *dqkv, int64_t B, int64_t T, int64_t nh, int64_t nkv,
                         int64_t hd, double theta, tr_dtype dt) {
    (void)ctx;
    tr_cpu_rope_bwd(dqkv, B, T, nh, nkv, hd, theta, dt);
}
static void cpu_attn_eager_fwd(tr_backend_ctx *ctx, void *out, void *probs, const void *qkv, int64_t B,
                               int64_t T, int64_t nh, int64_t nkv, int64_t hd, tr_dtype dt) {
    (void)ctx;
    tr_cpu_attn_eager_fwd(out, probs, qkv, B, T, nh, nkv, hd, dt);
}
static void cpu_attn_eager_bwd(tr_backend_ctx *ctx, void *dqkv, void *dprobs, const void *dout,
                               const void *qkv, const void *probs, int64_t B, int64_t T, int64_t nh,
                               int64_t nkv, int64_t hd, tr_dtype dt) {
    (void)ctx;
    tr_cpu_attn_eager_bwd(dqkv, dprobs, dout, qkv, probs, B, T, nh, nkv, hd, dt);
}
static void cpu_attn_flash_fwd(tr_backend_ctx *ctx, void *out, float *lse, const void *qkv, int64_t B,
                               int64_t T, int64_t nh, int64_t nkv, int64_t hd, tr_dtype dt) {
    (void)ctx;
    tr_cpu_attn_flash_fwd(out, lse, qkv, B, T, nh, nkv, hd, dt);
}
static void cpu_attn_flash_bwd(tr_backend_ctx *ctx, void *dqkv, const void *dout, const void *qkv,
                               const void *out, const float *lse, int64_t B, int64_t T, int64_t nh,
                               int64_t nkv, int64_t hd, tr_dtype dt) {
    (void)ctx;
    tr_cpu_attn_flash_bwd(dqkv, dout, qkv, out, lse, B, T, nh, nkv, hd, dt);
}
static void cpu_swiglu_fwd(tr_backend_ctx *ctx, void *hact, const void *gu, int64_t n, int64_t I,
                           tr_dtype dt) {
    (void)ctx;
    tr_cpu_swiglu_fwd(hact, gu, n, I, dt);
}
static void cpu_swiglu_bwd(tr_backend_ctx *ctx, void *dgu, const void *dhact, const void *gu, int64_t n,
                           int64_t I, tr_dtype dt) {
    (void)ctx;
    tr_cpu_swiglu_bwd(dgu, dhact, gu, n, I, dt);
}
static void cpu_ce_fwd(tr_backend_ctx *ctx, float *losses, const void *logits, const int32_t *targets,
                       int64_t n, int64_t V, tr_dtype dt) {
    (void)ctx;
    tr_cpu_ce_fwd(losses, logits, targets, n, V, dt);
}
static void cpu_ce_bwd(tr_backend_ctx *ctx, void *logits, const int32_t *targets, int64_t n, int64_t V,
                       float scale, tr_dtype dt) {
    (void)ctx;
    tr_cpu_ce_bwd(logits, targets, n, V, scale, dt);
}
static void cpu_adamw(tr_backend_ctx *ctx, float *w, void *wout, tr_dtype wout_dt, const void *g,
                      tr_dtype g_dt, float *m, float *v, int64_t n, const tr_opt_args *a) {
    (void)ctx;
    tr_cpu_adamw(w, wout, wout_dt, g, g_dt, m, v, n, a);
}
static void cpu_sgd(tr_backend_ctx *ctx, float *w, void *wout, tr_dtype wout_dt, const void *g, tr_dtype g_dt,
                    int64_t n, const tr_opt_args *a) {
    (void)ctx;
    tr_cpu_sgd(w, wout, wout_dt, g, g_dt, n, a);
}

static const tr_backend cpu = {
    .name = "cpu",
    .open = cpu_open,
    .close = cpu_close,
    .sync = cpu_sync,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .event_elapsed_s = cpu_event_elapsed_s,
    .mem = {tr_host_alloc, tr_host_free},
    .host_mem = {tr_host_alloc, tr_host_free},
    .zero = cpu_zero,
    .copy = cpu_copy,
    .to_host = cpu_copy,
    .to_device = cpu_copy,
    .convert = cpu_convert,
    .download_f32 = cpu_download_f32,
    .upload_f32 = cpu_upload_f32,
    .sumsq = cpu_sumsq,
    .add = cpu_add,
    .embedding_fwd = cpu_embedding_fwd,
    .embedding_bwd = cpu_embedding_bwd,
    .rmsnorm_fwd = cpu_rmsnorm_fwd,
    .rmsnorm_bwd = cpu_rmsnorm_bwd,
    .matmul_fwd = cpu_matmul_fwd,
    .matmul_bwd = cpu_matmul_bwd,
    .rope_fwd = cpu_rope_fwd,
    .rope_bwd = cpu_rope_bwd,
    .attn_eager_fwd = cpu_attn_eager_fwd,
    .attn_eager_bwd = cpu_attn_eager_bwd,
    .attn_flash_fwd = cpu_attn_flash_fwd,
    .attn_flash_bwd = cpu_attn_flash_bwd,
    .swiglu_fwd = cpu_swiglu_fwd,
    .swiglu_bwd = cpu_swiglu_bwd,
    .ce_fwd = cpu_ce_fwd,
    .ce_bwd = cpu_ce_bwd,
    .adamw = cpu_adamw,
    .sgd = cpu_sgd,
};

const tr_backend *tr_backend_cpu(void) { return &cpu; }
