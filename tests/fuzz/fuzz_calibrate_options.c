/* libFuzzer target: `ftest calibrate`'s option parser and grid planner. The
 * input is split at newlines into argv; whatever parses must plan a grid whose
 * keys fit and whose count is exact, never crash or overflow. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "calibrate.h"
#include "fuzz_argv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CAP 512

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0;
    char *buf = malloc(size + 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    char *argv[FUZZ_MAX_ARGS + 1];
    int argc = fuzz_split_argv(buf, "calibrate", argv);
    static cal_options o;
    static cal_point pts[CAP];
    char err[256];
    if (cal_options_parse(argc, argv, &o, err, sizeof err) == 0 && !o.help) {
        size_t n = cal_grid_plan(&o.grid, pts, CAP);
        size_t want = (size_t)o.grid.nmodels * (size_t)o.grid.nprecisions * (size_t)o.grid.nzeros *
                      (size_t)o.grid.nckpts * (size_t)o.grid.nseqs * (size_t)o.grid.nbatches *
                      (size_t)(o.grid.nemulated ? o.grid.nemulated : 1) *
                      (o.grid.layers > 1 ? 2 : 1);
        if (n != want) abort();
        for (size_t i = 0; i < n && i < CAP; i++)
            if (strlen(pts[i].key) >= CAL_KEY_MAX) abort();
    }
    free(buf);
    return 0;
}
