/* libFuzzer target: ftrain's command line (trainer/cli.c). The input is split
 * at NUL bytes into arguments; every flag value, model name and path goes
 * through the same strict parser as the binary (parsing never trains). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0;
    char *buf = malloc(size + 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    char *argv[65];
    int argc = 0;
    argv[argc++] = "ftrain";
    for (size_t i = 0; i < size && argc < 64;) {
        argv[argc++] = buf + i;
        i += strlen(buf + i) + 1;
    }
    argv[argc] = NULL;
    static tr_config cfg;
    bool help;
    char err[512];
    tr_cli_parse(argc, argv, &cfg, &help, err, sizeof err);
    free(buf);
    return 0;
}
