/* make test-gpu: the op harness (tests/trainer_parity.c) CUDA against CPU,
 * in fp32 and bf16, and finite differences through the CUDA backend.
 * Exit 0 when all agree, 1 on a disagreement, 2 when it cannot run (no CUDA
 * build, no GPU, an op not written yet), always with one line saying which.
 * Tolerances are those of tests/trainer_backend_parity.c. */
#include <stdio.h>

#include "backend.h"
#include "trainer_parity.h"

int main(void) {
    const tr_backend *cu = tr_backend_cuda();
    char err[256];
    if (!cu) {
        fprintf(stderr, "test-gpu: needs a GPU and a CUDA build: this build has no CUDA backend (nvcc not found)\n");
        return 2;
    }
    if (cu->probe && cu->probe(err, sizeof err)) {
        fprintf(stderr, "test-gpu: needs a GPU: %s\n", err);
        return 2;
    }
    const char *missing = tr_backend_missing_op(cu);
    if (missing) {
        fprintf(stderr, "test-gpu: the CUDA backend has no %s yet: nothing to compare\n", missing);
        return 2;
    }
    const tr_parity_tol fp32 = {1e-5, 1e-4}, bf16 = {1.0 / 128, 1.0 / 64};
    tr_parity_result r;
    if (tr_parity_run(cu, tr_backend_cpu(), TR_F32, fp32, &r)) return fprintf(stderr, "test-gpu: %s\n", r.fail), 1;
    printf("test-gpu: fp32 %d ops, %lld values, worst %.3f of tolerance at %s\n", r.ops, (long long)r.compared,
           r.worst, r.worst_at);
    if (tr_parity_run(cu, tr_backend_cpu(), TR_BF16, bf16, &r)) return fprintf(stderr, "test-gpu: %s\n", r.fail), 1;
    printf("test-gpu: bf16 %d ops, %lld values, worst %.3f of tolerance at %s\n", r.ops, (long long)r.compared,
           r.worst, r.worst_at);
    if (tr_parity_fd(cu, &r)) return fprintf(stderr, "test-gpu: %s\n", r.fail), 1;
    printf("test-gpu: finite differences of %d backward ops agree\n", r.ops);
    return 0;
}
