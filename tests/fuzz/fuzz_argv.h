/* Shared by the command-line fuzz targets: the input split at newlines into
 * argv after `argv0`, in `buf` (the caller's NUL-terminated copy of the input,
 * modified in place). Returns argc; argv[argc] is NULL. */
#ifndef FUZZ_ARGV_H
#define FUZZ_ARGV_H

#include <string.h>

#define FUZZ_MAX_ARGS 64

static inline int fuzz_split_argv(char *buf, char *argv0, char *argv[FUZZ_MAX_ARGS + 1]) {
    int argc = 0;
    argv[argc++] = argv0;
    for (char *tok = buf; argc < FUZZ_MAX_ARGS;) {
        char *nl = strchr(tok, '\n');
        if (nl) *nl = '\0';
        argv[argc++] = tok;
        if (!nl) break;
        tok = nl + 1;
    }
    argv[argc] = NULL;
    return argc;
}

#endif
