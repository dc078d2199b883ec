#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "json_util.h"

/* Tests run from the repository root (make test); FTEST_ROOT overrides. */
const char *test_repo_path(const char *relative) {
    static char buf[4][1024];
    static int next;
    const char *root = getenv("FTEST_ROOT");
    char *out = buf[next++ % 4];
    snprintf(out, sizeof buf[0], "%s/%s", root ? root : ".", relative);
    return out;
}

const char *test_build_dir(void) {
    static char dir[1024];
    const char *b = getenv("FTEST_BUILD");
    if (b && *b) return b;
    ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
    if (n <= 0) return "build";
    dir[n] = '\0';
    char *slash = strrchr(dir, '/');
    if (!slash) return "build";
    *slash = '\0';
    return dir;
}

char *test_slurp(const char *path, size_t *len) {
    size_t n;
    char err[256];
    char *text = ft_read_file(path, (size_t)1 << 30, &n, err, sizeof err);
    ck_assert_msg(text != NULL, "%s", err);
    if (len) *len = n;
    return text;
}
