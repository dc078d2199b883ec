/* libFuzzer target: the estimator's safetensors header reader
 * (estimator/model/st_header.c). The first 8 bytes give the data region's size, the
 * rest is the header JSON. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "st_header.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 8 || size > (1u << 20)) return 0;
    uint64_t region = 0;
    for (int i = 7; i >= 0; i--) region = (region << 8) | data[i];
    est_st_summary acc;
    memset(&acc, 0, sizeof acc);
    char err[256];
    if (est_st_header_parse((const char *)data + 8, size - 8, region, &acc, err, sizeof err) == 0) {
        /* One header's tensors fit its data region (they may not overlap). */
        if (acc.bytes < 0 || acc.elements < 0 || (uint64_t)acc.bytes > region) abort();
    } else if (!err[0]) {
        abort();
    }
    return 0;
}
