/* One sweep point as a child process with a time limit: its own process group
 * (a timeout or Ctrl-C kills the child and everything it started), killed with
 * its parent (Linux PR_SET_PDEATHSIG, so kill -9 of a sweep leaves no trainer
 * running), output to a log file. */
#ifndef CAL_CHILD_H
#define CAL_CHILD_H

#include <signal.h>
#include <stddef.h>

typedef enum {
    CAL_CHILD_EXITED,       /* exit_code holds the status */
    CAL_CHILD_TIMEOUT,      /* ran past the limit; killed */
    CAL_CHILD_SIGNALLED,    /* died of a signal it was not sent by us */
    CAL_CHILD_INTERRUPTED,  /* *stop was set (Ctrl-C, SIGTERM); killed */
} cal_child_outcome;

typedef struct cal_child_result {
    cal_child_outcome outcome;
    int exit_code;          /* CAL_CHILD_EXITED */
    int signal;             /* CAL_CHILD_SIGNALLED */
    double elapsed_s;
} cal_child_result;

/* Runs argv (argv[0] looked up in PATH) with stdout and stderr to log_path,
 * for at most limit_s seconds; polls *stop (may be NULL). 0 with *res filled,
 * or -1 with one line in err when it could not be started. */
int cal_child_run(char *const argv[], double limit_s, const char *log_path,
                  const volatile sig_atomic_t *stop, cal_child_result *res, char *err,
                  size_t errlen);

/* Seconds on the monotonic clock. */
double cal_now_s(void);

#endif
