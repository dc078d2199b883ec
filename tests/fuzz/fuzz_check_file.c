/* libFuzzer target: a whole records file as `ftest check` reads it (framing:
 * NUL bytes, blank and unterminated lines, window records; then every record),
 * and the same bytes as the tail an appender must repair (common/file_io.c). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_records.h"
#include "file_io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static est_gpu_catalog cat;
    static int loaded;
    static FILE *sink;
    static char path[64];
    if (!loaded) {
        char err[256];
        loaded = est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0 ? 1 : -1;
        sink = fopen("/dev/null", "w");
        snprintf(path, sizeof path, "/tmp/fuzz_check_file.%d.jsonl", (int)getpid());
    }
    if (size > (1 << 20)) return 0;
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    est_check_totals tot = {0};
    est_check_options opt = {.quiet = false, .markdown = size % 2 == 1, .diag = sink};
    char err[256];
    est_check_file(path, loaded > 0 ? &cat : NULL, &opt, sink, &tot, err, sizeof err);
    /* The appender's repair: afterwards the file must end with a newline. */
    if (ft_append_line(path, "{}", 2, NULL, err, sizeof err) == 0) {
        f = fopen(path, "rb");
        if (f) {
            fseek(f, -1, SEEK_END);
            if (fgetc(f) != '\n') abort();
            fclose(f);
        }
    }
    unlink(path);
    return 0;
}
