/* libFuzzer target: the instance catalog reader (estimator/catalog/instances.c), a
 * user file with --catalog, and the median host-RAM ratio taken from it. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "instances.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static est_gpu_catalog gpus;
    static int loaded;
    char err[256];
    if (!loaded) {
        if (est_gpu_catalog_load(NULL, &gpus, err, sizeof err) < 0) abort();
        loaded = 1;
    }
    est_instance_catalog cat;
    if (est_instances_parse((const char *)data, size, "fuzz", &gpus, &cat, err, sizeof err) == 0) {
        if (cat.count == 0) abort();
        double r = est_instances_host_ratio_median(&cat);
        if (!isfinite(r) || r <= 0) abort();
        for (size_t i = 0; i < cat.count; i++)
            if (cat.items[i].host_ram_bytes < 1 || cat.items[i].gpus < 1) abort();
        est_instances_free(&cat);
    }
    return 0;
}
