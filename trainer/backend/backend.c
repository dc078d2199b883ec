/* The shared error channel and the op table check of every backend (backend.h). */
#include "backend.h"

#include <stdarg.h>
#include <stdio.h>

int tr_backend_fail(tr_backend_ctx *ctx, const char *fmt, ...) {
    if (ctx->status) return -1;  /* the first failure is the cause; later ones follow from it */
    ctx->status = -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->msg, sizeof ctx->msg, fmt, ap);
    va_end(ap);
    return -1;
}

const char *tr_backend_missing_op(const tr_backend *be) {
    struct {
        const char *name;
        int present;
    } ops[] = {
#define OP(f) {#f, be->f != NULL}
        OP(open), OP(close), OP(sync), OP(event_create), OP(event_destroy), OP(event_record),
        OP(event_elapsed_s), OP(mem.alloc), OP(mem.free), OP(host_mem.alloc), OP(host_mem.free), OP(zero),
        OP(copy), OP(to_host), OP(to_device), OP(convert), OP(download_f32), OP(upload_f32), OP(sumsq), OP(add),
        OP(embedding_fwd), OP(embedding_bwd), OP(rmsnorm_fwd), OP(rmsnorm_bwd), OP(matmul_fwd), OP(matmul_bwd),
        OP(rope_fwd), OP(rope_bwd), OP(attn_eager_fwd), OP(attn_eager_bwd), OP(attn_flash_fwd),
        OP(attn_flash_bwd), OP(swiglu_fwd), OP(swiglu_bwd), OP(ce_fwd), OP(ce_bwd), OP(adamw), OP(sgd),
#undef OP
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (!ops[i].present) return ops[i].name;
    return NULL;
}
