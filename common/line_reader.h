/* Reading a text file line by line with bounded memory (records files): the
 * memory a reader holds is one line, never the file, and a line longer than
 * the caller's cap is skipped without being kept (its length is reported), so
 * a 250 MB line costs a bounded buffer, not gigabytes of parse tree.
 *
 * Lines are split at '\n' by length, not by C string: a NUL byte stays inside
 * its line for the caller to see. */
#ifndef FT_LINE_READER_H
#define FT_LINE_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ft_line_reader {
    int fd;
    char *buf;        /* (cap) what has been read and not yet returned, from pos */
    size_t cap, pos, len;
    size_t max_line;  /* longest line returned whole, in bytes (without '\n') */
    size_t lineno;    /* lines returned so far */
    int64_t bytes;    /* bytes of the file read so far */
    bool eof;
} ft_line_reader;

typedef struct ft_line {
    char *text;       /* the line, NUL-terminated in place of its '\n'; NULL when too long */
    size_t len;       /* its length in bytes, also when it was too long */
    bool terminated;  /* ended by '\n' (false: the file's last line lacks one) */
    size_t lineno;    /* 1-based */
} ft_line;

/* Opens `path` (a regular file, through ft_open_input: a FIFO or device is
 * refused, never waited on). `what` prefixes the path in messages. 0, or -1
 * with one line in err. */
int ft_lines_open(ft_line_reader *r, const char *path, const char *what, size_t max_line, char *err,
                  size_t errlen);

/* The next line into *line (valid until the next call): 1, or 0 at the end of
 * the file, or -1 with one line in err (a read error, out of memory). */
int ft_lines_next(ft_line_reader *r, ft_line *line, char *err, size_t errlen);

void ft_lines_close(ft_line_reader *r);

#endif
