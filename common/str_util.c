#include "str_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int ft_errorf(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

bool ft_strlcpy(char *dst, const char *src, size_t n) {
    if (n == 0) return false;
    size_t len = strlen(src);
    if (len >= n) {
        memcpy(dst, src, n - 1);
        dst[n - 1] = '\0';
        return false;
    }
    memcpy(dst, src, len + 1);
    return true;
}
