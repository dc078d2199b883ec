/* Bounded string helpers under everything else of libftcommon: the error
 * message convention (a status plus a caller's buffer) and a truncating copy.
 * They sit below both json_util (JSON readers) and file_io (whole-file I/O),
 * which use them, so that neither of those needs the other's header for them
 * (tests/structure.c: no include cycles). */
#ifndef FT_STR_UTIL_H
#define FT_STR_UTIL_H

#include <stdbool.h>
#include <stddef.h>

/* Formats into err (if non-NULL) and returns -1, so `return ft_errorf(...)` reads well. */
int ft_errorf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Copies src into dst[n], always NUL-terminated; false when it had to cut. */
bool ft_strlcpy(char *dst, const char *src, size_t n);

#endif
