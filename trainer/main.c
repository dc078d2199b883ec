/* ftrain: the reference trainer. Parses flags, trains, writes records.
 * Exit 0 trained; 1 out of memory (recorded as oom) or stopped at a non-finite
 * loss or gradient norm (recorded with "stopped"); 2 bad input, or a record or
 * stdout that could not be written; 128 + the signal when SIGINT, SIGTERM or
 * SIGHUP stopped it (after the step under way, with a final record saying so;
 * a second signal ends it at once) (docs/reliability.md). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "file_io.h"
#include "record_writer.h"
#include "str_util.h"
#include "train.h"

/* The observer that keeps what was measured: a record per window. */
typedef struct window_ctx {
    const tr_config *cfg;
    tr_record_meta meta;
    double last_write_s;   /* monotonic time of the last record written */
    int64_t written;       /* window records written */
} window_ctx;

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void say_note(const char *note) {
    if (note[0]) fprintf(stderr, "ftrain: %s\n", note);
}

/* The first SIGINT, SIGTERM or SIGHUP: the run stops after the step under way
 * and keeps it in a final record. SA_RESETHAND gives the second one its
 * default action, so it ends the run at once. */
static volatile sig_atomic_t g_signal;
static void on_signal(int sig) { g_signal = sig; }

static void catch_stop_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESETHAND | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    /* A signal ignored when the run started stays ignored (nohup's SIGHUP,
     * SIGINT of a shell's background job). */
    const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (int i = 0; i < 3; i++) {
        struct sigaction old;
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN) sigaction(sigs[i], &sa, NULL);
    }
    /* A file-size limit makes a write fail (EFBIG, rolled back by
     * ft_append_line) instead of killing the run with its measurements. */
    signal(SIGXFSZ, SIG_IGN);
}

static const char *signal_name(int sig) {
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : "a signal";
}

/* After each step: stop when a signal came (tr_train then fails with the
 * message), else a window record when the window has elapsed (the last step
 * is left to the final record). */
static int on_step(const tr_result *so_far, void *p, char *err, size_t errlen) {
    window_ctx *w = p;
    if (g_signal && so_far->steps_done < w->cfg->steps)
        return ft_errorf(err, errlen, "stopped by %s after step %lld of %lld", signal_name(g_signal),
                         (long long)so_far->steps_done, (long long)w->cfg->steps);
    if (so_far->steps_done >= w->cfg->steps || !w->cfg->record_path[0]) return 0;
    double now = mono_s();
    if (now - w->last_write_s < w->cfg->record_window_s) return 0;
    char note[512];
    if (tr_record_append(w->cfg->record_path, w->cfg, so_far, &w->meta, note, sizeof note, err, errlen))
        return -1;
    say_note(note);
    w->last_write_s = now;
    w->written++;
    return 0;
}

/* Output that could not be written is a failure, never a silent success. */
static int finish_stdout(int status) {
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "ftrain: cannot write the output: %s\n", strerror(errno ? errno : EIO));
        return 2;
    }
    return status;
}

int main(int argc, char **argv) {
    static tr_config cfg;
    char err[512];
    bool help = false;
    if (tr_cli_parse(argc, argv, &cfg, &help, err, sizeof err)) {
        fprintf(stderr, "ftrain: %s\n", err);
        return 2;
    }
    if (help) {
        tr_cli_usage(stdout);
        return finish_stdout(0);
    }
    /* Fail before training, not after, and create nothing: a device such as
     * /dev/full, a directory or an unwritable path is refused here. */
    if (cfg.record_path[0] && ft_check_appendable(cfg.record_path, err, sizeof err)) {
        fprintf(stderr, "ftrain: %s\n", err);
        return 2;
    }
    char run_id[64];
    tr_record_run_id(run_id, sizeof run_id);
    window_ctx w = {.cfg = &cfg, .meta = {.run_id = run_id, .final = false}, .last_write_s = mono_s()};
    catch_stop_signals();
    tr_result res;
    int rc = tr_train_observed(&cfg, &res, on_step, &w, err, sizeof err);
    const bool signalled = rc && g_signal && res.steps_done > 0 && !res.oom && !res.nonfinite;
    if (rc && !res.oom && !res.nonfinite && !signalled) {
        fprintf(stderr, "ftrain: %s\n", err);
        tr_result_free(&res);
        return g_signal ? 128 + g_signal : 2;
    }
    int status = 0;
    if (rc) {
        fprintf(stderr, "ftrain: %s\n", err);
        status = signalled ? 128 + g_signal : 1;
    } else if (!cfg.quiet) {
        fprintf(stderr, "ftrain: %lld params, rank 0 peak %lld bytes at \"%s\", %.1f tokens/s\n",
                (long long)res.params_numel, (long long)res.rank[0].peak_total, res.rank[0].peak_phase,
                res.tokens_per_s);
    }
    w.meta.final = true;
    w.meta.stopped = res.nonfinite || signalled ? err : NULL;
    char note[512], werr[512];
    if (cfg.record_path[0]) {
        if (tr_record_append(cfg.record_path, &cfg, &res, &w.meta, note, sizeof note, werr, sizeof werr)) {
            fprintf(stderr, "ftrain: %s\n", werr);
            status = 2;
        } else {
            say_note(note);
        }
    }
    tr_result_free(&res);
    return finish_stdout(status);
}
