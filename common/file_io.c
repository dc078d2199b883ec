#define _GNU_SOURCE /* renameat2 */
#include "file_io.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dirent.h>

#include <cJSON.h>

#include "str_util.h"

int ft_open_input(const char *path, const char *what, size_t max_bytes, size_t *size_out, char *err,
                  size_t errlen) {
    struct stat st, st2;
    if (!path || !*path) return ft_errorf(err, errlen, "empty %spath", what);
    /* stat before open: open() itself blocks on a FIFO without a writer. */
    if (stat(path, &st) != 0)
        return ft_errorf(err, errlen, "cannot open %s%s: %s", what, path, strerror(errno));
    if (!S_ISREG(st.st_mode)) return ft_errorf(err, errlen, "%s%s is not a regular file", what, path);
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return ft_errorf(err, errlen, "cannot open %s%s: %s", what, path, strerror(errno));
    /* The path may have been swapped between stat and open: judge what was opened. */
    if (fstat(fd, &st2) != 0 || !S_ISREG(st2.st_mode)) {
        close(fd);
        return ft_errorf(err, errlen, "%s%s is not a regular file", what, path);
    }
    if ((uint64_t)st2.st_size > (uint64_t)max_bytes) {
        close(fd);
        return ft_errorf(err, errlen, "%s%s is larger than %zu bytes", what, path, max_bytes);
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    if (size_out) *size_out = (size_t)st2.st_size;
    return fd;
}

/* Directory part of path into dir ("." when none), base part into *base. */
static int split_path(const char *path, char *dir, size_t n, const char **base) {
    const char *slash = strrchr(path, '/');
    if (!slash) {
        *base = path;
        return ft_strlcpy(dir, ".", n) ? 0 : -1;
    }
    *base = slash + 1;
    size_t len = slash == path ? 1 : (size_t)(slash - path);
    if (len >= n) return -1;
    memcpy(dir, path, len);
    dir[len] = '\0';
    return 0;
}

static int write_all(int fd, const char *p, size_t len) {
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (w == 0) errno = EIO;
            return -1;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

static void fsync_dir(const char *dir) {
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd); /* best effort: some file systems refuse fsync on directories */
        close(dfd);
    }
}

int ft_write_atomic(const char *path, const void *data, size_t len, char *err, size_t errlen) {
    char dir[PATH_MAX], tmp[PATH_MAX];
    const char *base;
    if (!path || !*path) return ft_errorf(err, errlen, "empty output path");
    if (split_path(path, dir, sizeof dir, &base) < 0 || !*base)
        return ft_errorf(err, errlen, "cannot write %s: not a file name", path);
    struct stat st;
    /* Renaming over a device or a directory would replace the node itself. */
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return ft_errorf(err, errlen, "cannot write %s: not a regular file", path);
    if ((size_t)snprintf(tmp, sizeof tmp, "%s/.%s.XXXXXX", dir, base) >= sizeof tmp)
        return ft_errorf(err, errlen, "cannot write %s: path too long", path);
    int fd = mkstemp(tmp);
    if (fd < 0) return ft_errorf(err, errlen, "cannot write %s: %s", path, strerror(errno));
    /* mkstemp creates 0600; an output file gets the usual 0666 less umask. */
    mode_t um = umask(0);
    umask(um);
    int rc = fchmod(fd, 0666 & ~um);
    if (rc == 0) rc = write_all(fd, data, len);
    if (rc == 0) rc = fsync(fd);
    int e = errno;
    if (close(fd) != 0 && rc == 0) {
        rc = -1;
        e = errno;
    }
    if (rc == 0 && rename(tmp, path) != 0) {
        rc = -1;
        e = errno;
    }
    if (rc != 0) {
        unlink(tmp);
        return ft_errorf(err, errlen, "cannot write %s: %s", path, strerror(e));
    }
    fsync_dir(dir);
    return 0;
}

int ft_write_atomic_with(const char *path, ft_file_writer fn, const void *ctx, char *err, size_t errlen) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return ft_errorf(err, errlen, "cannot write %s: out of memory", path);
    int rc = fn(f, ctx);
    if (ferror(f)) rc = -1;
    if (fclose(f) != 0) rc = -1;
    if (rc < 0) {
        free(buf);
        return ft_errorf(err, errlen, "cannot write %s: out of memory", path);
    }
    rc = ft_write_atomic(path, buf, len, err, errlen);
    free(buf);
    return rc;
}

/* Removes the regular files of `dir` (our own new set: nothing else is in
 * it), then `dir` (best effort: cleanup). */
static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char p[PATH_MAX];
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
                (size_t)snprintf(p, sizeof p, "%s/%s", dir, e->d_name) < sizeof p)
                unlink(p);
        closedir(d);
    }
    rmdir(dir);
}

/* Does the regular file `name` in directory `dfd` hold a profile that ftest fit
 * wrote (a JSON object whose "schema" is "ftest.profile/...")? Never follows a
 * symbolic link. */
static bool is_profile_at(int dfd, const char *name) {
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return false;
    struct stat st;
    bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 && st.st_size <= (1 << 20);
    char *buf = ok ? malloc((size_t)st.st_size + 1) : NULL;
    ok = buf && pread(fd, buf, (size_t)st.st_size, 0) == (ssize_t)st.st_size;
    close(fd);
    if (ok) {
        buf[st.st_size] = '\0';
        cJSON *j = cJSON_ParseWithLength(buf, (size_t)st.st_size);
        const cJSON *schema = cJSON_GetObjectItemCaseSensitive(j, "schema");
        ok = cJSON_IsString(schema) && !strncmp(schema->valuestring, "ftest.profile/", 14);
        cJSON_Delete(j);
    }
    free(buf);
    return ok;
}

static bool is_json_name(const char *name) {
    size_t n = strlen(name);
    return n > 5 && !strcmp(name + n - 5, ".json");
}

/* May existing directory `dir` be replaced whole? Only when every entry is a
 * profile that ftest fit wrote (*.json, "schema": "ftest.profile/..."): a
 * folder of model configs, notes or anything else is a user's and is refused
 * by name. Opened without following a link (the caller refused links). */
static int only_profiles(const char *dir, char *err, size_t errlen) {
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d) {
        int e = errno;
        if (dfd >= 0) close(dfd);
        return ft_errorf(err, errlen, "cannot read %s: %s", dir, strerror(e));
    }
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (!is_json_name(e->d_name) || !is_profile_at(dfd, e->d_name))
            rc = ft_errorf(err, errlen, "%s holds %s, which is not a profile written by ftest fit; the "
                           "profile set replaces the whole directory, so name a new or empty one, or "
                           "one that holds only profiles", dir, e->d_name);
    }
    closedir(d);
    return rc;
}

/* The old set, after the exchange, at `path`: its profiles are removed, then
 * the directory. Anything else found there (put in after the check) stays, and
 * so does the directory, under its hidden name: nothing of a user's is lost.
 * Never follows a link. */
static void remove_old_set(const char *path) {
    int dfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d) {
        if (dfd >= 0) close(dfd);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d)))
        if (is_json_name(e->d_name) && is_profile_at(dfd, e->d_name)) unlinkat(dfd, e->d_name, 0);
    closedir(d);
    rmdir(path);
}

/* The set written into the fresh directory `tmp`. 0, or -1 with err. */
static int write_set(const char *tmp, const char *const *names, const char *const *texts, int n, char *err,
                     size_t errlen) {
    for (int i = 0; i < n; i++) {
        char p[PATH_MAX];
        if (strchr(names[i], '/') || (size_t)snprintf(p, sizeof p, "%s/%s", tmp, names[i]) >= sizeof p)
            return ft_errorf(err, errlen, "bad output file name %s", names[i]);
        if (ft_write_atomic(p, texts[i], strlen(texts[i]), err, errlen) < 0) return -1;
    }
    fsync_dir(tmp);
    return 0;
}

/* Puts the new set `tmp` where `dir` is: a plain rename when there is none,
 * else one exchange (or, where the file system has none, the old set moved
 * aside first); the old set's profiles are then removed. 0, or -1 with err. */
static int commit_set(const char *tmp, const char *dir, const char *parent, const char *base, bool exists,
                      char *err, size_t errlen) {
    char old[PATH_MAX];
    if (!exists) {
        if (rename(tmp, dir) != 0) return ft_errorf(err, errlen, "cannot create %s: %s", dir, strerror(errno));
        return 0;
    }
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, dir, RENAME_EXCHANGE) == 0) {
        remove_old_set(tmp); /* tmp now names the old set */
        return 0;
    }
    /* No exchange on this file system: move the old set aside, then the new
     * one in (a reader may find no directory for an instant). */
    if ((size_t)snprintf(old, sizeof old, "%s/.%s.old-XXXXXX", parent, base) >= sizeof old || !mkdtemp(old))
        return ft_errorf(err, errlen, "cannot replace %s: %s", dir, strerror(errno));
    if (rename(dir, old) != 0) {
        int e = errno;
        rmdir(old);
        return ft_errorf(err, errlen, "cannot replace %s: %s", dir, strerror(e));
    }
    if (rename(tmp, dir) != 0) {
        int e = errno;
        if (rename(old, dir) != 0) {} /* put the old set back: best effort */
        return ft_errorf(err, errlen, "cannot replace %s: %s", dir, strerror(e));
    }
    remove_old_set(old);
    return 0;
}

/* The checks of ft_check_replaceable_dir; dir (trailing slashes cut), its
 * parent and base name filled, *exists set. 0, or -1 with err. */
static int replaceable(const char *dir_in, char dir[PATH_MAX], char parent[PATH_MAX], const char **base,
                       bool *exists, char *err, size_t errlen) {
    if (!ft_strlcpy(dir, dir_in, PATH_MAX)) return ft_errorf(err, errlen, "output directory path is too long");
    for (size_t l = strlen(dir); l > 1 && dir[l - 1] == '/'; l--) dir[l - 1] = '\0';
    if (split_path(dir, parent, PATH_MAX, base) < 0 || !**base || !strcmp(*base, ".") || !strcmp(*base, ".."))
        return ft_errorf(err, errlen, "output directory \"%s\" must be named (not ., .. or /)", dir_in);
    struct stat st;
    /* lstat: a link to a folder would be replaced by the new set while the
     * old set was removed through it, deleting the linked folder's files. */
    *exists = lstat(dir, &st) == 0;
    if (*exists && S_ISLNK(st.st_mode))
        return ft_errorf(err, errlen, "%s is a symbolic link; name the directory itself (the profile set "
                         "replaces a directory whole and never follows a link)", dir);
    if (*exists && !S_ISDIR(st.st_mode)) return ft_errorf(err, errlen, "%s is not a directory", dir);
    if (*exists && only_profiles(dir, err, errlen) < 0) return -1;
    return 0;
}

int ft_check_replaceable_dir(const char *dir_in, char *err, size_t errlen) {
    char dir[PATH_MAX], parent[PATH_MAX];
    const char *base;
    bool exists;
    if (replaceable(dir_in, dir, parent, &base, &exists, err, errlen) < 0) return -1;
    struct stat st;
    if (stat(parent, &st) != 0 || !S_ISDIR(st.st_mode))
        return ft_errorf(err, errlen, "cannot create %s: no directory %s", dir, parent);
    if (access(parent, W_OK | X_OK) != 0)
        return ft_errorf(err, errlen, "cannot create %s: %s", dir, strerror(errno));
    return 0;
}

int ft_replace_dir(const char *dir_in, const char *const *names, const char *const *texts, int n, char *err,
                   size_t errlen) {
    char dir[PATH_MAX], parent[PATH_MAX], tmp[PATH_MAX];
    const char *base;
    bool exists;
    if (replaceable(dir_in, dir, parent, &base, &exists, err, errlen) < 0) return -1;
    if ((size_t)snprintf(tmp, sizeof tmp, "%s/.%s.new-XXXXXX", parent, base) >= sizeof tmp)
        return ft_errorf(err, errlen, "output directory path is too long");
    if (!mkdtemp(tmp)) return ft_errorf(err, errlen, "cannot create a directory beside %s: %s", dir, strerror(errno));
    mode_t um = umask(0);
    umask(um);
    chmod(tmp, 0777 & ~um);
    if (write_set(tmp, names, texts, n, err, errlen) < 0 ||
        commit_set(tmp, dir, parent, base, exists, err, errlen) < 0) {
        remove_tree(tmp);
        return -1;
    }
    fsync_dir(parent);
    return 0;
}

/* Offset just past the last '\n' before `end` (0 when none). A line longer
 * than 64 MiB is not searched past: -1. */
static int64_t last_line_start(int fd, int64_t end) {
    char buf[65536];
    int64_t pos = end;
    while (pos > 0) {
        if (end - pos > (INT64_C(64) << 20)) return -1;
        size_t n = pos > (int64_t)sizeof buf ? sizeof buf : (size_t)pos;
        ssize_t r = pread(fd, buf, n, pos - (int64_t)n);
        if (r != (ssize_t)n) return -1;
        for (size_t i = n; i-- > 0;)
            if (buf[i] == '\n') return pos - (int64_t)n + (int64_t)i + 1;
        pos -= (int64_t)n;
    }
    return 0;
}

/* Is bytes [from, end) of fd one JSON value? */
static bool tail_is_json(int fd, int64_t from, int64_t end) {
    size_t n = (size_t)(end - from);
    char *buf = malloc(n + 1);
    if (!buf) return false;
    bool ok = pread(fd, buf, n, from) == (ssize_t)n;
    buf[n] = '\0';
    if (ok) {
        /* The whole tail must be the value: nothing but blanks after it. */
        const char *stop = NULL;
        cJSON *j = cJSON_ParseWithLengthOpts(buf, n, &stop, 0);
        ok = j != NULL && stop != NULL;
        while (ok && stop < buf + n && (*stop == ' ' || *stop == '\t' || *stop == '\r')) stop++;
        ok = ok && stop == buf + n;
        cJSON_Delete(j);
    }
    free(buf);
    return ok;
}

/* The record file opened and locked exclusively: whoever holds the lock owns
 * the end of the file, so appenders never interleave. The descriptor, or -1
 * with the message. */
static int open_locked(const char *path, char *err, size_t errlen) {
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return ft_errorf(err, errlen, "record file %s is not a regular file", path);
    int fd = open(path, O_RDWR | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0666);
    if (fd < 0) return ft_errorf(err, errlen, "cannot open record file %s: %s", path, strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return ft_errorf(err, errlen, "record file %s is not a regular file", path);
    }
    int rc;
    while ((rc = flock(fd, LOCK_EX)) != 0 && errno == EINTR) {}
    if (rc != 0) {
        int e = errno;
        close(fd);
        return ft_errorf(err, errlen, "cannot lock record file %s: %s", path, strerror(e));
    }
    return fd;
}

/* *end: where the new record goes in the locked file. A writer was killed inside
 * its write(), or a person left the last record without its newline: keep a
 * whole record (*need_newline), drop a fragment. 0, or -1 with *e an errno. */
static int repair_tail(int fd, int64_t *end, bool *need_newline, ft_append_info *info, int *e) {
    struct stat st;
    if (fstat(fd, &st) != 0) {
        *e = errno;
        return -1;
    }
    *end = (int64_t)st.st_size;
    if (*end == 0) return 0;
    char last = 0;
    if (pread(fd, &last, 1, *end - 1) != 1) {
        *e = errno ? errno : EIO;
        return -1;
    }
    if (last == '\n') return 0;
    int64_t start = last_line_start(fd, *end);
    if (start < 0) {
        *e = EFBIG;
        return -1;
    }
    if (tail_is_json(fd, start, *end)) {
        *need_newline = true;
        info->terminated = true;
        return 0;
    }
    if (ftruncate(fd, start) != 0) {
        *e = errno;
        return -1;
    }
    info->dropped_bytes = *end - start;
    *end = start;
    return 0;
}

/* The line and its newline (after one ending the previous record when
 * need_newline) in one write() at end, then fsync. A short write (full disk,
 * file size limit) is cut back so no partial line remains. 0, or -1 with *e. */
static int write_record(int fd, const char *line, size_t len, int64_t end, bool need_newline,
                        int *e) {
    size_t total = len + 1 + (need_newline ? 1 : 0);
    char *buf = malloc(total);
    if (!buf) {
        *e = ENOMEM;
        return -1;
    }
    size_t k = 0;
    if (need_newline) buf[k++] = '\n';
    memcpy(buf + k, line, len);
    buf[k + len] = '\n';
    int rc = 0;
    ssize_t w;
    do w = pwrite(fd, buf, total, end); while (w < 0 && errno == EINTR);
    if (w != (ssize_t)total) {
        *e = w < 0 ? errno : ENOSPC;
        if (ftruncate(fd, end) != 0) {} /* best effort: the lock is still ours */
        rc = -1;
    } else if (fsync(fd) != 0) {
        *e = errno;
        rc = -1;
    }
    free(buf);
    return rc;
}

int ft_append_line(const char *path, const char *line, size_t len, ft_append_info *info, char *err,
                   size_t errlen) {
    ft_append_info dummy;
    if (!info) info = &dummy;
    memset(info, 0, sizeof *info);
    if (memchr(line, '\n', len)) return ft_errorf(err, errlen, "a record line holds a newline");
    int fd = open_locked(path, err, errlen);
    if (fd < 0) return -1;
    int e = 0;
    int64_t end = 0;
    bool need_newline = false;
    int rc = repair_tail(fd, &end, &need_newline, info, &e);
    if (rc == 0) rc = write_record(fd, line, len, end, need_newline, &e);
    if (close(fd) != 0 && rc == 0) {
        e = errno;
        rc = -1;
    }
    if (rc != 0) return ft_errorf(err, errlen, "cannot write record file %s: %s", path, strerror(e));
    return 0;
}

int ft_check_appendable(const char *path, char *err, size_t errlen) {
    struct stat st;
    if (!path || !*path) return ft_errorf(err, errlen, "empty record file path");
    if (stat(path, &st) == 0) {
        if (!S_ISREG(st.st_mode)) return ft_errorf(err, errlen, "record file %s is not a regular file", path);
        int fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0) return ft_errorf(err, errlen, "cannot open record file %s: %s", path, strerror(errno));
        /* The repair ft_append_line makes before appending must be possible:
         * a last line without its newline is searched back at most 64 MiB. */
        char last = '\n';
        bool unrepairable = fstat(fd, &st) == 0 && st.st_size > 0 && pread(fd, &last, 1, st.st_size - 1) == 1 &&
                            last != '\n' && last_line_start(fd, (int64_t)st.st_size) < 0;
        close(fd);
        if (unrepairable)
            return ft_errorf(err, errlen, "record file %s ends in a line of more than 64 MiB without its "
                             "newline, which an append cannot repair; move the file aside or end it with a "
                             "newline", path);
        return 0;
    }
    if (errno != ENOENT) return ft_errorf(err, errlen, "cannot open record file %s: %s", path, strerror(errno));
    char dir[PATH_MAX];
    const char *base;
    if (split_path(path, dir, sizeof dir, &base) < 0 || !*base)
        return ft_errorf(err, errlen, "record file %s: not a file name", path);
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return ft_errorf(err, errlen, "cannot create record file %s: no directory %s", path, dir);
    if (access(dir, W_OK | X_OK) != 0)
        return ft_errorf(err, errlen, "cannot create record file %s: %s", path, strerror(errno));
    return 0;
}
