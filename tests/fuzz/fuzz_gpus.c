/* libFuzzer target: the GPU catalog reader (estimator/catalog/gpu.c), a file a user
 * may replace through FTEST_DATA_DIR. Whatever it accepts must hold what
 * est_gpu_catalog_parse promises: every figure finite and positive (NVLink
 * may be 0), names that find their GPU. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "gpu.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    est_gpu_catalog cat;
    char err[256];
    if (est_gpu_catalog_parse((const char *)data, size, "fuzz", &cat, err, sizeof err) < 0) return 0;
    for (size_t i = 0; i < cat.count; i++) {
        const est_gpu *g = &cat.gpus[i];
        if (g->memory_bytes <= 0 || !(g->bf16_tflops > 0) || !isfinite(g->bf16_tflops) ||
            !(g->hbm_gb_per_s > 0) || !(g->nvlink_gb_per_s >= 0) || !isfinite(g->pcie_gb_per_s))
            abort();
        if (est_gpu_find(&cat, g->name) != g) abort();
    }
    est_gpu_catalog_free(&cat);
    return 0;
}
