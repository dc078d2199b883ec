/* Files that survive a kill and inputs that are what they say, shared by the
 * estimator and the trainer (docs/reliability.md states the guarantees).
 *
 * - Inputs: stat first, open non-blocking (a FIFO or device never hangs us),
 *   refuse anything but a regular file, cap the size before reading.
 * - Replaced outputs (CSV, SVG, profiles): a unique temporary file in the
 *   target's directory, fsync'ed, renamed over the target: a reader sees the
 *   old file or the new one, never a mix, and a failed write leaves the old.
 * - Appended records: one write() per line under an exclusive flock, a short
 *   write rolled back, a partial tail left by a killed writer repaired first. */
#ifndef FT_FILE_IO_H
#define FT_FILE_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Opens `path` read-only: it must be a regular file of at most max_bytes.
 * `what` prefixes the path in messages ("data file "). Returns the fd (blocking
 * again, close-on-exec) with its size in *size_out, or -1 with one line in err. */
int ft_open_input(const char *path, const char *what, size_t max_bytes, size_t *size_out, char *err,
                  size_t errlen);

/* Replaces `path` with `len` bytes of `data` atomically (temp + fsync + rename +
 * fsync of the directory). An existing path that is not a regular file is
 * refused. 0, or -1 with one line in err; the old file is then untouched. */
int ft_write_atomic(const char *path, const void *data, size_t len, char *err, size_t errlen);

/* The same for content produced by a writer onto a FILE (CSV, SVG): `fn` writes
 * to a memory stream (returns <0 on failure), which then goes to path through
 * ft_write_atomic. */
typedef int (*ft_file_writer)(FILE *f, const void *ctx);
int ft_write_atomic_with(const char *path, ft_file_writer fn, const void *ctx, char *err, size_t errlen);

/* Replaces directory `dir` as a whole with one holding exactly the n files
 * names[i] (plain names) with contents texts[i]: the set is written to a new
 * sibling directory, fsync'ed, and exchanged with `dir` in one rename
 * (renameat2 RENAME_EXCHANGE), so a reader sees the old set or the new one,
 * never a mix. An existing `dir` may hold only profiles that ftest fit wrote
 * (regular *.json files whose "schema" is "ftest.profile/..."); anything else,
 * a folder of model configs included, is refused by name, and so is a `dir`
 * that is a symbolic link, so a mistaken --out never sweeps away a user's
 * files. After the exchange only the old set's profiles are removed.
 * 0, or -1 with one line in err; `dir` is then untouched. */
int ft_replace_dir(const char *dir, const char *const *names, const char *const *texts, int n, char *err,
                   size_t errlen);

/* Would ft_replace_dir accept `dir` (the same checks, and a parent folder it
 * can write), asked before any work? 0, or -1 with one line in err. */
int ft_check_replaceable_dir(const char *dir, char *err, size_t errlen);

/* What ft_append_line found and did about the file's previous end. */
typedef struct ft_append_info {
    int64_t dropped_bytes;   /* an unparsable partial last line removed (a killed writer's) */
    bool terminated;         /* a complete last record lacking its newline got one */
} ft_append_info;

/* Appends `line` (no newline inside; one is added) to `path`, creating it
 * (0644 less umask) when absent. Under an exclusive flock: a last line without
 * its newline is kept and terminated when it is valid JSON, else removed
 * (reported in *info); the line then goes out in one write(), and a short write
 * is truncated away, so the file holds the record whole or not at all.
 * info may be NULL. 0, or -1 with one line in err. */
int ft_append_line(const char *path, const char *line, size_t len, ft_append_info *info, char *err,
                   size_t errlen);

/* Can records be appended to `path`? It must be a regular file open for
 * writing, or absent in a writable directory (then nothing is created).
 * 0, or -1 with one line in err. */
int ft_check_appendable(const char *path, char *err, size_t errlen);

#endif
