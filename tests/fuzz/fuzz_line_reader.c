/* libFuzzer target: common/line_reader.c, the streamed framing of records
 * files, against a reference split of the same bytes at '\n'. The first byte
 * picks the line cap (1..64 bytes), so lines over the cap, lines at it, NUL
 * bytes, unterminated last lines and buffer refills are all reached; every
 * line must come back whole (or be reported too long with its true length),
 * in order, with its number and its "terminated" flag. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "line_reader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[64];
    if (!path[0]) snprintf(path, sizeof path, "/tmp/fuzz_line_reader.%d.txt", (int)getpid());
    if (size < 1 || size > (1 << 16)) return 0;
    const size_t cap = 1 + data[0] % 64;
    const char *body = (const char *)data + 1;
    const size_t n = size - 1;
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(body, 1, n, f);
    fclose(f);
    ft_line_reader rd;
    char err[256];
    if (ft_lines_open(&rd, path, "", cap, err, sizeof err) != 0) abort();
    size_t at = 0, lineno = 0;
    ft_line ln;
    int got;
    while ((got = ft_lines_next(&rd, &ln, err, sizeof err)) == 1) {
        const char *nl = memchr(body + at, '\n', n - at);
        const size_t len = nl ? (size_t)(nl - (body + at)) : n - at;
        if (at >= n || ln.len != len || ln.lineno != ++lineno || ln.terminated != (nl != NULL)) abort();
        if (len > cap ? ln.text != NULL : (ln.text == NULL || memcmp(ln.text, body + at, len) || ln.text[len]))
            abort();
        at += len + (nl ? 1 : 0);
    }
    if (got != 0 || at != n) abort();
    ft_lines_close(&rd);
    unlink(path);
    return 0;
}
