/* Appending one record line so that no kill loses or splits it.
 *
 * The same contract as ft_append_line in the `reliability` branch
 * (estimator/file_io.h there), written here because that function is not on
 * this branch yet; when both are merged, calls to cal_append_line become calls
 * to ft_append_line and this file goes. */
#ifndef CAL_APPEND_H
#define CAL_APPEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What cal_append_line found at the file's previous end. */
typedef struct cal_append_info {
    int64_t dropped_bytes;   /* an unparsable partial last line removed (a killed writer's) */
    bool terminated;         /* a complete last record lacking its newline got one */
} cal_append_info;

/* Appends `line` (len bytes, no newline inside; one is added) to `path`,
 * creating it when absent. Under an exclusive flock: a last line without its
 * newline is terminated when it is whole JSON and cut off otherwise; the line
 * then goes out in one write() and is fsync'ed; a short write is truncated
 * away. info may be NULL. 0, or -1 with one line in err. */
int cal_append_line(const char *path, const char *line, size_t len, cal_append_info *info,
                    char *err, size_t errlen);

#endif
