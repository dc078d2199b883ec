/* ftrain's CPU kernels timed one by one (ftrain_kernel_rates.h). Shapes: the
 * tiny models' (hidden 32, intermediate 64, vocabulary 64, 4 heads of 8 over 2
 * KV heads) at 64 and 128 tokens, and 8 K and 24 K parameters for the
 * optimizer's passes (the tiny models hold 20-30 K, a ZeRO shard a half to a
 * quarter); a kernel's rate is the mean of its two sizes' rates. */
#include "ftrain_kernel_rates.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "ops.h"
#include "optim.h"

static const char *const names[CAL_FTRAIN_KERNELS] = {
    "rmsnorm_fwd", "rmsnorm_bwd", "rope_fwd", "rope_bwd", "swiglu_fwd", "swiglu_bwd", "add", "embedding_fwd",
    "embedding_bwd", "ce_fwd", "ce_bwd", "sumsq", "zero", "adamw", "sgd", "convert"};

const char *cal_ftrain_kernel_name(int k) { return k >= 0 && k < CAL_FTRAIN_KERNELS ? names[k] : NULL; }

enum { H = 32, I = 64, V = 64, NH = 4, NKV = 2, HD = 8 };

/* One kernel call: kernel k over `rows` tokens (row ops) or `n` parameters. */
typedef struct call {
    int k;
    tr_dtype dt;
    int64_t rows, n;
    void *a, *b, *c, *d;
    float *rstd;
    int32_t *tok;
} call;

static void row_op(const call *x) {
    const int64_t n = x->rows, B = 2, T = n / 2;
    switch (x->k) {
    case 0: tr_cpu_rmsnorm_fwd(x->a, x->rstd, x->b, x->c, n, H, 1e-5, x->dt); break;
    case 1: tr_cpu_rmsnorm_bwd(x->a, x->d, x->b, x->c, x->d, x->rstd, n, H, x->dt); break;
    case 2: tr_cpu_rope_fwd(x->a, B, T, NH, NKV, HD, 10000.0, x->dt); break;
    case 3: tr_cpu_rope_bwd(x->a, B, T, NH, NKV, HD, 10000.0, x->dt); break;
    case 4: tr_cpu_swiglu_fwd(x->a, x->b, n, I, x->dt); break;
    case 5: tr_cpu_swiglu_bwd(x->a, x->b, x->c, n, I, x->dt); break;
    case 6: tr_cpu_add(x->a, x->b, n * H, x->dt); break;
    case 7: tr_cpu_embedding_fwd(x->a, x->tok, x->b, n, H, x->dt); break;
    case 8: tr_cpu_embedding_bwd(x->a, x->b, x->tok, n, H, x->dt); break;
    case 9: tr_cpu_ce_fwd(x->rstd, x->a, x->tok, n, V, x->dt); break;
    case 10: tr_cpu_ce_bwd(x->a, x->tok, n, V, 1e-3f, x->dt); break;
    default: break;
    }
}

static void param_op(const call *x) {
    const tr_opt_args args = {.lr = 1e-3f, .weight_decay = 0.1f, .grad_scale = 1.0f, .t = 3};
    const bool mixed = x->dt != TR_F32;
    static tr_backend_ctx ctx;
    switch (x->k) {
    case 11: (void)tr_backend_cpu()->sumsq(&ctx, x->b, x->n, x->dt); break;
    case 12: tr_backend_cpu()->zero(&ctx, x->a, (size_t)x->n); break;
    case 13: tr_cpu_adamw(x->a, mixed ? x->d : NULL, x->dt, x->b, x->dt, x->c, (float *)x->d + x->n, x->n, &args); break;
    case 14: tr_cpu_sgd(x->a, mixed ? x->d : NULL, x->dt, x->b, x->dt, x->n, &args); break;
    case 15: tr_backend_cpu()->download_f32(&ctx, x->a, x->b, x->dt, x->n); break;
    default: break;
    }
}

static void thunk(const void *p) {
    const call *x = p;
    if (x->k <= 10) row_op(x);
    else param_op(x);
}

/* Elements kernel k works on (ftrain_kernel_rates.h; cpu_device.h). */
static double elems_of(const call *x) {
    switch (x->k) {
    case 2: case 3: return (double)x->rows * (NH + NKV) * HD;
    case 4: case 5: return (double)x->rows * I;
    case 9: case 10: return (double)x->rows * V;
    default: return x->k <= 10 ? (double)x->rows * H : (double)x->n;
    }
}

static double rate_of(double (*best)(void (*)(const void *), const void *), int k, tr_dtype dt, int size) {
    const int64_t rows = size ? 128 : 64, n = size ? 24576 : 8192, big = 4 * (n > rows * 256 ? n : rows * 256);
    call x = {.k = k, .dt = dt, .rows = rows, .n = n};
    x.a = calloc((size_t)big, 4), x.b = calloc((size_t)big, 4), x.c = calloc((size_t)big, 4);
    x.d = calloc((size_t)big, 4), x.rstd = calloc((size_t)rows, 4), x.tok = calloc((size_t)rows, 4);
    double r = 0;
    if (x.a && x.b && x.c && x.d && x.rstd && x.tok) {
        for (int64_t i = 0; i < rows; i++) x.tok[i] = (int32_t)((i * 37) % V);
        for (int64_t i = 0; i < rows; i++) x.rstd[i] = 1.0f;
        r = elems_of(&x) / best(thunk, &x);
    }
    free(x.a), free(x.b), free(x.c), free(x.d), free(x.rstd), free(x.tok);
    return r;
}

void cal_ftrain_kernel_rates(double (*best)(void (*)(const void *), const void *), double out[][2]) {
    const tr_dtype dts[2] = {TR_F32, TR_BF16};
    for (int k = 0; k < CAL_FTRAIN_KERNELS; k++)
        for (int d = 0; d < 2; d++)
            out[k][d] = 0.5 * (rate_of(best, k, dts[d], 0) + rate_of(best, k, dts[d], 1));
}
