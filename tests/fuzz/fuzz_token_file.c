/* libFuzzer target: an ftrain --data token file (trainer/data.c), opened
 * through the same stat / non-blocking open path as the binary, checked for
 * the windows of 4 * 977 samples, then sampled at a few of them (read with
 * pread, every token checked). */
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[64];
    if (!path[0]) snprintf(path, sizeof path, "/tmp/fuzz_token_file.%d.bin", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    tr_data d;
    char err[256];
    const int64_t V = 64, T = 8;
    if (tr_data_open(&d, path, V, T, 4 * 977, 1337, err, sizeof err) == 0) {
        int32_t in[8], tg[8];
        for (int64_t g = 0; g < 4; g++) {
            if (tr_data_sample(&d, g * 977, T, in, tg, err, sizeof err)) __builtin_trap(); /* a checked window */
            for (int t = 0; t < T; t++)
                if (in[t] < 0 || in[t] >= V || tg[t] < 0 || tg[t] >= V) __builtin_trap();
        }
        tr_data_close(&d);
    }
    unlink(path);
    return 0;
}
