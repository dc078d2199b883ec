#include "calibrate_child.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "json_util.h"

double cal_now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int cal_child_run(char *const argv[], double limit_s, const char *log_path,
                  const volatile sig_atomic_t *stop, cal_child_result *res, char *err,
                  size_t errlen) {
    memset(res, 0, sizeof *res);
    int log = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log < 0) return ft_errorf(err, errlen, "cannot open %s: %s", log_path, strerror(errno));
    /* A pipe closed on exec tells the parent whether exec worked. */
    int gate[2];
    if (pipe(gate) != 0 || fcntl(gate[1], F_SETFD, FD_CLOEXEC) != 0) {
        close(log);
        return ft_errorf(err, errlen, "pipe: %s", strerror(errno));
    }
    const double t0 = cal_now_s();
    pid_t pid = fork();
    if (pid < 0) {
        close(log), close(gate[0]), close(gate[1]);
        return ft_errorf(err, errlen, "fork: %s", strerror(errno));
    }
    if (pid == 0) {
        setpgid(0, 0);
#ifdef __linux__
        prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
        close(gate[0]);
        dup2(log, STDOUT_FILENO);
        dup2(log, STDERR_FILENO);
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0) dup2(devnull, STDIN_FILENO);
        execvp(argv[0], argv);
        int e = errno;
        if (write(gate[1], &e, sizeof e) != (ssize_t)sizeof e) {}
        _exit(127);
    }
    setpgid(pid, pid); /* both sides set it: whichever runs first */
    close(log);
    close(gate[1]);
    int exec_errno = 0;
    ssize_t got;
    do got = read(gate[0], &exec_errno, sizeof exec_errno); while (got < 0 && errno == EINTR);
    close(gate[0]);
    int status = 0;
    if (got == (ssize_t)sizeof exec_errno) {
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
        return ft_errorf(err, errlen, "cannot run %s: %s", argv[0], strerror(exec_errno));
    }
    bool killed_for_time = false, killed_for_stop = false;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) break;
        if (w < 0 && errno != EINTR) return ft_errorf(err, errlen, "waitpid: %s", strerror(errno));
        if (!killed_for_time && !killed_for_stop) {
            if (stop && *stop) killed_for_stop = true;
            else if (limit_s > 0 && cal_now_s() - t0 > limit_s) killed_for_time = true;
            if (killed_for_time || killed_for_stop) {
                kill(-pid, SIGKILL);
                kill(pid, SIGKILL);
            }
        }
        struct timespec nap = {0, 5 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    res->elapsed_s = cal_now_s() - t0;
    if (killed_for_stop) res->outcome = CAL_CHILD_INTERRUPTED;
    else if (killed_for_time) res->outcome = CAL_CHILD_TIMEOUT;
    else if (WIFEXITED(status)) res->outcome = CAL_CHILD_EXITED, res->exit_code = WEXITSTATUS(status);
    else res->outcome = CAL_CHILD_SIGNALLED, res->signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    /* Whatever the child started in its group goes with it. */
    kill(-pid, SIGKILL);
    return 0;
}
