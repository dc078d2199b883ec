/* Concurrent sweeps into one --out (calibrate_sweep.h): before a point runs,
 * the sweep takes an exclusive flock on FILE.claims, reads what the records
 * and outcomes files gained since it last looked, and skips the point when it
 * is done or claimed by a sweep that is still running; otherwise it writes its
 * claim (PID, process start time, key) and runs the point. The claim goes when
 * the point's line is written. A claim whose process is gone (kill -9) is
 * dropped by the next sweep that reads the file, and the file is removed once
 * it holds no claim. So concurrent sweeps never run one point twice, and a
 * killed one leaves no point blocked. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "calibrate_sweep.h"
#include "json_util.h"
#include "line_reader.h"
#include "record.h"

/* One line of a records file (calibrate.key) or an outcomes file (key) into
 * the set. An outcome "error" is no measurement: its point stays to be run
 * again. Unparsable lines are skipped (never ours). 0, or -1 out of memory. */
static int take_line(const ft_line *ln, bool outcomes, cal_done_set *d) {
    cJSON *j = ln->text ? cJSON_ParseWithLength(ln->text, ln->len) : NULL;
    if (!j) return 0;
    const cJSON *holder = outcomes ? j : cJSON_GetObjectItemCaseSensitive(j, "calibrate");
    const cJSON *key = cJSON_GetObjectItemCaseSensitive(holder, "key");
    const cJSON *outcome = cJSON_GetObjectItemCaseSensitive(holder, "outcome");
    int rc = 0;
    bool failed = cJSON_IsString(outcome) && !strcmp(outcome->valuestring, "error");
    if (cJSON_IsString(key) && !failed) {
        cal_done_entry *e = cal_done_add(d, key->valuestring);
        if (!e) {
            rc = -1;
        } else {
            if (!outcomes) cal_read_peaks(j, e);
            e->refined = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(holder, "refined"));
        }
    }
    cJSON_Delete(j);
    return rc;
}

int cal_load_done(const char *path, bool outcomes, cal_done_set *d, char *err, size_t errlen) {
    int64_t *from = &d->read_to[outcomes ? 1 : 0];
    struct stat st;
    if (stat(path, &st) != 0) return 0; /* absent: holds none */
    if (st.st_size < *from) *from = 0;  /* rewritten: read again (keys are only added) */
    ft_line_reader rd;
    if (ft_lines_open(&rd, path, "", EST_RECORD_MAX_LINE_BYTES, err, errlen) < 0) return -1;
    if (lseek(rd.fd, (off_t)*from, SEEK_SET) < 0) {
        ft_lines_close(&rd);
        return ft_errorf(err, errlen, "cannot read %s: %s", path, strerror(errno));
    }
    ft_line ln;
    int got, rc = 0;
    /* Whole lines only: a last line without its newline is a write still
     * going (or cut): it is read when it is whole. */
    while (rc == 0 && (got = ft_lines_next(&rd, &ln, err, errlen)) == 1 && ln.terminated) {
        rc = take_line(&ln, outcomes, d);
        *from += (int64_t)ln.len + 1;
    }
    ft_lines_close(&rd);
    if (rc < 0) return ft_errorf(err, errlen, "out of memory");
    return got < 0 ? -1 : 0;
}

/* The start time of process pid (field 22 of /proc/PID/stat, clock ticks
 * since boot): with the PID it names one process, even after the PID is
 * reused. 0 when unknown. */
static unsigned long long start_time(long pid) {
    char p[64], buf[1024];
    snprintf(p, sizeof p, "/proc/%ld/stat", pid);
    FILE *f = fopen(p, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *c = strrchr(buf, ')'); /* the command name may hold spaces */
    if (!c) return 0;
    /* Fields 3, 4, ... follow the name, one space apart: field 22 is the 20th. */
    for (int field = 3; field <= 22 && c; field++) c = strchr(c + 1, ' ');
    return c ? strtoull(c + 1, NULL, 10) : 0;
}

static bool alive(long pid, unsigned long long start) {
    if (pid <= 0 || (kill((pid_t)pid, 0) != 0 && errno == ESRCH)) return false;
    unsigned long long now = start_time(pid);
    return !(now && start && now != start);
}

/* FILE.claims opened and locked; the descriptor, or -1 with err. The file is
 * removed by the last releaser, so a lock taken on a name that was removed
 * meanwhile is taken again on the new file. */
static int lock_claims(const char *path, char *err, size_t errlen) {
    for (;;) {
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0) return ft_errorf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        int rc;
        while ((rc = flock(fd, LOCK_EX)) != 0 && errno == EINTR) {}
        struct stat a, b;
        if (rc != 0 || fstat(fd, &a) != 0 || !S_ISREG(a.st_mode)) {
            int e = errno;
            close(fd);
            return ft_errorf(err, errlen, "cannot lock %s: %s", path, rc ? strerror(e) : "not a regular file");
        }
        if (stat(path, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev) return fd;
        close(fd);
    }
}

/* The claims of live processes, read from fd, minus (our PID, key) when
 * drop_key is given, into out (a heap string); whether `key` is claimed by
 * another live sweep in *busy. 0, or -1 out of memory. */
static int live_claims(int fd, const char *key, bool drop_ours, char **out, bool *busy) {
    struct stat st;
    *busy = false;
    *out = NULL;
    size_t size = fstat(fd, &st) == 0 && st.st_size > 0 ? (size_t)st.st_size : 0;
    char *text = malloc(size + 1), *kept = malloc(size + CAL_KEY_MAX + 64);
    if (!text || !kept) {
        free(text), free(kept);
        return -1;
    }
    ssize_t got = size ? pread(fd, text, size, 0) : 0;
    text[got > 0 ? got : 0] = '\0';
    size_t k = 0;
    for (char *line = text, *next; *line; line = next) {
        next = strchr(line, '\n');
        if (!next) break; /* a claim being written when its writer died */
        *next++ = '\0';
        long pid;
        unsigned long long start;
        int used = 0;
        if (sscanf(line, "%ld %llu %n", &pid, &start, &used) != 2 || !used || !alive(pid, start)) continue;
        const char *ckey = line + used;
        bool ours = pid == (long)getpid() && !strcmp(ckey, key);
        if (ours && drop_ours) continue;
        if (!strcmp(ckey, key) && !ours) *busy = true;
        k += (size_t)sprintf(kept + k, "%s\n", line);
    }
    kept[k] = '\0';
    free(text);
    *out = kept;
    return 0;
}

/* Replaces the locked file's content with text; an empty set removes the file
 * (while the lock is held: lock_claims retries on the new name). */
static int write_claims(int fd, const char *path, const char *text) {
    size_t n = strlen(text);
    if (n == 0) return unlink(path) == 0 || errno == ENOENT ? 0 : -1;
    if (ftruncate(fd, 0) != 0) return -1;
    return pwrite(fd, text, n, 0) == (ssize_t)n ? 0 : -1;
}

int cal_claim(cal_sweep *s, const char *key, char *err, size_t errlen) {
    int fd = lock_claims(s->p.claims, err, errlen);
    if (fd < 0) return -1;
    int rc = 0;
    if (cal_load_done(s->o->out, false, &s->done, err, errlen) < 0 ||
        cal_load_done(s->p.outcomes, true, &s->done, err, errlen) < 0) {
        rc = -1;
    } else if (!cal_done_find(&s->done, key)) {
        char *kept;
        bool busy;
        if (live_claims(fd, key, false, &kept, &busy) < 0) {
            rc = ft_errorf(err, errlen, "out of memory");
        } else {
            if (!busy) snprintf(kept + strlen(kept), CAL_KEY_MAX + 64, "%ld %llu %s\n", (long)getpid(),
                                start_time((long)getpid()), key);
            if (write_claims(fd, s->p.claims, kept) < 0)
                rc = ft_errorf(err, errlen, "cannot write %s: %s", s->p.claims, strerror(errno));
            else
                rc = busy ? 2 : 1;
            free(kept);
        }
    }
    /* Opening created the file when it was absent: holding no claim, it goes. */
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_size == 0) unlink(s->p.claims);
    close(fd); /* releases the lock */
    return rc;
}

void cal_release(cal_sweep *s, const char *key) {
    char err[64];
    int fd = lock_claims(s->p.claims, err, sizeof err);
    if (fd < 0) return;
    char *kept;
    bool busy;
    if (live_claims(fd, key, true, &kept, &busy) == 0) {
        if (write_claims(fd, s->p.claims, kept) < 0) {} /* best effort: a dead claim is dropped later */
        free(kept);
    }
    close(fd);
}
