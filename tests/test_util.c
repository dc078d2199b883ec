#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>

/* Tests run from the repository root (make test); FTEST_ROOT overrides. */
const char *test_repo_path(const char *relative) {
    static char buf[4][1024];
    static int next;
    const char *root = getenv("FTEST_ROOT");
    char *out = buf[next++ % 4];
    snprintf(out, sizeof buf[0], "%s/%s", root ? root : ".", relative);
    return out;
}
