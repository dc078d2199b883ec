/* Backend selection and the shared error channel (backend.h). */
#include "backend.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int tr_backend_fail(tr_backend_ctx *ctx, const char *fmt, ...) {
    if (ctx->status) return -1;  /* the first failure is the cause; later ones follow from it */
    ctx->status = -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->msg, sizeof ctx->msg, fmt, ap);
    va_end(ap);
    return -1;
}

#ifndef TR_HAVE_CUDA
const tr_backend *tr_backend_cuda(void) { return NULL; }
#endif

int tr_backend_select(const char *name, const tr_backend **be, char *err, size_t errlen) {
    *be = NULL;
    if (!strcmp(name, "cpu")) {
        *be = tr_backend_cpu();
        return 0;
    }
    if (!strcmp(name, "cuda")) {
        *be = tr_backend_cuda();
        if (*be) return 0;
        if (errlen)
            snprintf(err, errlen, "--device cuda: this ftrain was built without CUDA (nvcc was not found "
                                  "when it was built)");
        return -1;
    }
    if (errlen) snprintf(err, errlen, "--device must be cpu or cuda, not '%s'", name);
    return -1;
}
