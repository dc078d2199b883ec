#include "line_reader.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "file_io.h"
#include "str_util.h"

/* The first buffer; it doubles up to max_line + 1 as long lines need. */
#define FIRST_CAP ((size_t)64 << 10)

int ft_lines_open(ft_line_reader *r, const char *path, const char *what, size_t max_line, char *err,
                  size_t errlen) {
    memset(r, 0, sizeof *r);
    r->fd = -1;
    r->max_line = max_line;
    r->cap = max_line + 1 < FIRST_CAP ? max_line + 1 : FIRST_CAP;
    r->buf = malloc(r->cap);
    if (!r->buf) return ft_errorf(err, errlen, "out of memory reading %s", path);
    r->fd = ft_open_input(path, what, SIZE_MAX, NULL, err, errlen);
    if (r->fd < 0) {
        free(r->buf);
        r->buf = NULL;
        return -1;
    }
    return 0;
}

void ft_lines_close(ft_line_reader *r) {
    if (r->fd >= 0) close(r->fd);
    free(r->buf);
    r->buf = NULL;
    r->fd = -1;
}

/* Reads more after the buffered bytes (moved to the front first). 0, or -1 with errno. */
static int fill(ft_line_reader *r) {
    if (r->pos > 0) {
        memmove(r->buf, r->buf + r->pos, r->len - r->pos);
        r->len -= r->pos;
        r->pos = 0;
    }
    for (;;) {
        ssize_t got = read(r->fd, r->buf + r->len, r->cap - r->len);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return -1;
        if (got == 0) r->eof = true;
        r->len += (size_t)got;
        r->bytes += got;
        return 0;
    }
}

/* A line longer than max_line: reads on, keeping nothing, to its '\n'. *len
 * gets its whole length. 0, or -1 with errno. */
static int skip_long(ft_line_reader *r, size_t *len, bool *terminated) {
    *len = r->len - r->pos;
    r->pos = r->len = 0;
    for (;;) {
        if (fill(r) < 0) return -1;
        char *nl = memchr(r->buf, '\n', r->len);
        if (nl) {
            *len += (size_t)(nl - r->buf);
            r->pos = (size_t)(nl - r->buf) + 1;
            *terminated = true;
            return 0;
        }
        *len += r->len;
        r->len = 0;
        if (r->eof) {
            *terminated = false;
            return 0;
        }
    }
}

int ft_lines_next(ft_line_reader *r, ft_line *line, char *err, size_t errlen) {
    memset(line, 0, sizeof *line);
    for (;;) {
        char *start = r->buf + r->pos;
        char *nl = memchr(start, '\n', r->len - r->pos);
        if (!nl && r->eof && r->len == r->cap && r->pos > 0) { /* room for the NUL of a last line */
            memmove(r->buf, start, r->len - r->pos);
            r->len -= r->pos;
            r->pos = 0;
            continue;
        }
        if (nl || (r->eof && r->len > r->pos && r->len < r->cap)) {
            line->len = nl ? (size_t)(nl - start) : r->len - r->pos;
            line->terminated = nl != NULL;
            start[line->len] = '\0'; /* the '\n', or the spare byte after an unterminated last line */
            line->text = start;
            r->pos += line->len + (nl ? 1 : 0);
            line->lineno = ++r->lineno;
            return 1;
        }
        if (r->eof && r->len == r->pos) return 0;
        if (r->pos == 0 && r->len == r->cap) { /* no '\n' in a full buffer */
            if (r->cap < r->max_line + 1) {
                size_t cap = r->cap * 2 < r->max_line + 1 ? r->cap * 2 : r->max_line + 1;
                char *nb = realloc(r->buf, cap);
                if (!nb) return ft_errorf(err, errlen, "out of memory reading a line");
                r->buf = nb;
                r->cap = cap;
            } else {
                if (skip_long(r, &line->len, &line->terminated) < 0)
                    return ft_errorf(err, errlen, "cannot read: %s", strerror(errno));
                line->lineno = ++r->lineno;
                return 1;
            }
        }
        if (fill(r) < 0) return ft_errorf(err, errlen, "cannot read: %s", strerror(errno));
    }
}
