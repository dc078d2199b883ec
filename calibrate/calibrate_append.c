/* Whole-line appends under flock (calibrate_append.h). Why each step:
 *  - flock(LOCK_EX): two sweeps (or a sweep and ftrain) appending to one file
 *    never interleave their bytes, and the end of file we write at is ours;
 *  - one pwrite() of line + newline at that end: a kill lands before or after
 *    it, and a short write (full disk) is cut back, so a line is whole or absent;
 *  - fsync before returning: a finished point survives a crash of the machine,
 *    not only of the process;
 *  - a tail without newline is what a writer killed mid-write (by an older tool,
 *    or an editor) leaves: keep it if it parses, else drop it, so the next
 *    record never glues onto a fragment. */
#include "calibrate_append.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cJSON.h>

#include "json_util.h"

/* Offset where the last line of a file of `size` bytes starts; -1 on error. */
static int64_t last_line_start(int fd, int64_t size) {
    char buf[4096];
    int64_t pos = size;
    while (pos > 0) {
        int64_t from = pos > (int64_t)sizeof buf ? pos - (int64_t)sizeof buf : 0;
        ssize_t n = pread(fd, buf, (size_t)(pos - from), from);
        if (n != pos - from) return -1;
        for (ssize_t i = n - 1; i >= 0; i--)
            if (buf[i] == '\n') return from + i + 1;
        pos = from;
    }
    return 0;
}

static bool tail_parses(int fd, int64_t start, int64_t end) {
    if (end - start > (int64_t)1 << 26) return false; /* no record is 64 MiB */
    size_t n = (size_t)(end - start);
    char *buf = malloc(n ? n : 1);
    if (!buf) return false;
    bool ok = pread(fd, buf, n, start) == (ssize_t)n;
    cJSON *j = ok ? cJSON_ParseWithLength(buf, n) : NULL;
    ok = j != NULL;
    cJSON_Delete(j);
    free(buf);
    return ok;
}

int cal_append_line(const char *path, const char *line, size_t len, cal_append_info *info,
                    char *err, size_t errlen) {
    cal_append_info ignored;
    if (!info) info = &ignored;
    memset(info, 0, sizeof *info);
    if (memchr(line, '\n', len)) return ft_errorf(err, errlen, "a record line holds a newline");
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0644);
    if (fd < 0) return ft_errorf(err, errlen, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return ft_errorf(err, errlen, "%s is not a regular file", path);
    }
    int rc;
    while ((rc = flock(fd, LOCK_EX)) != 0 && errno == EINTR) {}
    const char *why = NULL;
    int64_t end = 0;
    bool newline_first = false;
    if (rc != 0 || fstat(fd, &st) != 0) why = "cannot lock";
    else end = (int64_t)st.st_size;
    if (!why && end > 0) {
        char last = '\n';
        if (pread(fd, &last, 1, end - 1) != 1) why = "cannot read";
        if (!why && last != '\n') {
            int64_t start = last_line_start(fd, end);
            if (start < 0) why = "cannot read";
            else if (tail_parses(fd, start, end)) newline_first = info->terminated = true;
            else if (ftruncate(fd, start) != 0) why = "cannot repair the partial last line of";
            else info->dropped_bytes = end - start, end = start;
        }
    }
    char *buf = NULL;
    if (!why) {
        size_t total = len + 1 + (newline_first ? 1 : 0), k = 0;
        buf = malloc(total);
        if (!buf) {
            why = "out of memory appending to";
        } else {
            if (newline_first) buf[k++] = '\n';
            memcpy(buf + k, line, len);
            buf[k + len] = '\n';
            ssize_t w;
            do w = pwrite(fd, buf, total, end); while (w < 0 && errno == EINTR);
            if (w != (ssize_t)total) {
                why = "cannot write";
                if (ftruncate(fd, end) != 0) {} /* best effort; the lock is still ours */
            } else if (fsync(fd) != 0) {
                why = "cannot fsync";
            }
        }
    }
    int e = errno;
    free(buf);
    close(fd); /* releases the lock */
    if (why) return ft_errorf(err, errlen, "%s %s: %s", why, path, strerror(e ? e : EIO));
    return 0;
}
