/* libFuzzer target: one measurement-record line (estimator/record.c). */
#include <stdint.h>
#include <stdlib.h>

#include "record.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static est_gpu_catalog cat;
    static int loaded;
    if (!loaded) {
        char err[256];
        loaded = est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0 ? 1 : -1;
    }
    est_record rec;
    char err[256];
    if (est_record_parse((const char *)data, size, loaded > 0 ? &cat : NULL, &rec, err,
                         sizeof err) == 0)
        est_record_free(&rec);
    return 0;
}
