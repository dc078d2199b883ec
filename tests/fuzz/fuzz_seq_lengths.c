/* libFuzzer target: a --seq-lengths file (estimator/seq_lengths.c), parsed
 * from the bytes as given; when it parses, the longest sample and the padded
 * means of both batchings are finite and within the lengths. */
#include <math.h>
#include <stdint.h>

#include "seq_lengths.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    est_seq_hist h;
    char err[256];
    if (est_seq_lengths_parse((const char *)data, size, &h, err, sizeof err) < 0) return 0;
    const int64_t longest = est_seq_longest(&h, 0);
    if (longest < 1 || longest > EST_MAX_SEQ) __builtin_trap();
    const int64_t batches[3] = {1, 4, 97};
    for (int i = 0; i < 3; i++)
        for (int how = 0; how < 2; how++) {
            const double m = est_seq_padded_mean(&h, batches[i], (est_batching)how, 512);
            if (!isfinite(m) || m < 1 - 1e-9 || m > 512 + 1e-9) __builtin_trap();
        }
    est_seq_hist_free(&h);
    return 0;
}
