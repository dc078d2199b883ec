#include "calibrate_temp.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json_util.h"

/* The files a sweep keeps in its folder (calibrate_command.c names them). */
static const char *const SCRATCH_FILES[] = {"log", "record"};

static const char *tmp_root(void) {
    const char *t = getenv("TMPDIR");
    return t && *t ? t : "/tmp";
}

int cal_temp_make(char *dir, size_t n, char *err, size_t errlen) {
    if ((size_t)snprintf(dir, n, "%s/" CAL_TEMP_PREFIX "%ld-XXXXXX", tmp_root(), (long)getpid()) >= n)
        return ft_errorf(err, errlen, "TMPDIR is too long");
    if (!mkdtemp(dir))
        return ft_errorf(err, errlen, "cannot create a scratch folder in %s: %s", tmp_root(), strerror(errno));
    return 0;
}

/* Unlinks the scratch files in the folder open as dfd, then the folder. */
static void remove_at(int parent, const char *name) {
    int dfd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd >= 0) {
        for (size_t i = 0; i < sizeof SCRATCH_FILES / sizeof SCRATCH_FILES[0]; i++)
            unlinkat(dfd, SCRATCH_FILES[i], 0);
        close(dfd);
    }
    unlinkat(parent, name, AT_REMOVEDIR);
}

void cal_temp_remove(const char *dir) {
    if (!dir || !dir[0]) return;
    remove_at(AT_FDCWD, dir);
}

/* Is process `pid` gone? (kill with signal 0 says ESRCH.) */
static bool gone(long pid) {
    return pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* The PID in a name CAL_TEMP_PREFIX "PID-XXXXXX" (a folder) or "PID.log" /
 * "PID.record" (what older versions left); 0 when it is neither. */
static long pid_of(const char *name, bool *folder) {
    const char *p = name + strlen(CAL_TEMP_PREFIX);
    char *end;
    long pid = strtol(p, &end, 10);
    if (end == p || pid <= 0) return 0;
    *folder = *end == '-';
    if (*folder) return strlen(end) == 7 ? pid : 0;
    return !strcmp(end, ".log") || !strcmp(end, ".record") ? pid : 0;
}

size_t cal_temp_sweep_stale(void) {
    int root = open(tmp_root(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = root >= 0 ? fdopendir(root) : NULL;
    if (!d) {
        if (root >= 0) close(root);
        return 0;
    }
    size_t removed = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, CAL_TEMP_PREFIX, strlen(CAL_TEMP_PREFIX))) continue;
        bool folder = false;
        long pid = pid_of(e->d_name, &folder);
        struct stat st;
        /* Only this user's, never through a link, only of processes gone. */
        if (!pid || fstatat(root, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || st.st_uid != getuid() ||
            !gone(pid))
            continue;
        if (folder && S_ISDIR(st.st_mode)) remove_at(root, e->d_name);
        else if (!folder && S_ISREG(st.st_mode)) unlinkat(root, e->d_name, 0);
        else continue;
        removed++;
    }
    closedir(d);
    return removed;
}
