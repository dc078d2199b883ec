/* The CPU backend: device memory is host memory, ops are ops.h. */
#include <string.h>

#include "backend.h"
#include "ops.h"
#include "optim.h"
#include "parallel.h"

static void cpu_zero(void *p, size_t bytes) { memset(p, 0, bytes); }
static void cpu_copy(void *dst, const void *src, size_t bytes) { memmove(dst, src, bytes); }

typedef struct convert_args {
    void *dst;
    const void *src;
    tr_dtype ddt, sdt;
} convert_args;

static void convert_range(void *p, int64_t i0, int64_t i1) {
    const convert_args *a = p;
    for (int64_t i = i0; i < i1; i++) tr_st(a->dst, i, tr_ld(a->src, i, a->sdt), a->ddt);
}

static void cpu_convert(void *dst, tr_dtype ddt, const void *src, tr_dtype sdt, int64_t n) {
    convert_args a = {dst, src, ddt, sdt};
    tr_par_for(n, n, convert_range, &a);
}

static void cpu_download_f32(float *dst, const void *src, tr_dtype sdt, int64_t n) {
    cpu_convert(dst, TR_F32, src, sdt, n);
}
static void cpu_upload_f32(void *dst, tr_dtype ddt, const float *src, int64_t n) {
    cpu_convert(dst, ddt, src, TR_F32, n);
}

/* Fixed blocks summed in order, so the result does not depend on threads. */
#define SUMSQ_BLOCK 4096
static double cpu_sumsq(const void *p, int64_t n, tr_dtype dt) {
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

static const tr_backend cpu = {
    .name = "cpu",
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
    .add = tr_cpu_add,
    .embedding_fwd = tr_cpu_embedding_fwd,
    .embedding_bwd = tr_cpu_embedding_bwd,
    .rmsnorm_fwd = tr_cpu_rmsnorm_fwd,
    .rmsnorm_bwd = tr_cpu_rmsnorm_bwd,
    .matmul_fwd = tr_cpu_matmul_fwd,
    .matmul_bwd = tr_cpu_matmul_bwd,
    .rope_fwd = tr_cpu_rope_fwd,
    .rope_bwd = tr_cpu_rope_bwd,
    .attn_eager_fwd = tr_cpu_attn_eager_fwd,
    .attn_eager_bwd = tr_cpu_attn_eager_bwd,
    .attn_flash_fwd = tr_cpu_attn_flash_fwd,
    .attn_flash_bwd = tr_cpu_attn_flash_bwd,
    .swiglu_fwd = tr_cpu_swiglu_fwd,
    .swiglu_bwd = tr_cpu_swiglu_bwd,
    .ce_fwd = tr_cpu_ce_fwd,
    .ce_bwd = tr_cpu_ce_bwd,
    .adamw = tr_cpu_adamw,
    .sgd = tr_cpu_sgd,
};

const tr_backend *tr_backend_cpu(void) { return &cpu; }
