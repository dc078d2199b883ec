/* libFuzzer target: a framework profile (calibrate/profiles/<fw>.json), the
 * file `ftest fit` writes and every estimate reads. Whatever it accepts must
 * leave every constant finite. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "constants.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    est_constants k;
    est_constants_defaults(&k);
    char err[256];
    if (est_constants_apply_json((const char *)data, size, "h100-80gb", &k, err, sizeof err) < 0)
        return 0;
    for (int i = 0; i < EST_K_COUNT; i++)
        if (!isfinite(k.value[i])) abort();
    return 0;
}
