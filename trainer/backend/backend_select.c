/* --device: which backend a run gets (backend.h). Apart from backend.c so
 * that the backends, which use backend.c's error channel, are not called back
 * by it. */
#include <stdio.h>
#include <string.h>

#include "backend.h"

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
        const tr_backend *cu = tr_backend_cuda();
        if (cu) {
            if (cu->probe && cu->probe(err, errlen)) return -1;
            const char *missing = tr_backend_missing_op(cu);
            if (missing) {
                if (errlen)
                    snprintf(err, errlen, "--device cuda: the CUDA backend has no %s yet (docs/trainer.md lists "
                                          "what remains)", missing);
                return -1;
            }
            *be = cu;
            return 0;
        }
        if (errlen)
            snprintf(err, errlen, "--device cuda: this ftrain was built without CUDA (nvcc was not found "
                                  "when it was built)");
        return -1;
    }
    if (errlen) snprintf(err, errlen, "--device must be cpu or cuda, not '%s'", name);
    return -1;
}
