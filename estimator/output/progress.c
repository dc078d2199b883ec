#include "progress.h"

#include <time.h>
#include <unistd.h>

#define SHOW_AFTER_S 1.0
#define REDRAW_EVERY_S 0.1

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void est_progress_begin_on(est_progress *p, const char *what, FILE *out) {
    p->out = out;
    p->what = what;
    p->start_s = p->last_s = now_s();
    p->shown = false;
}

void est_progress_begin(est_progress *p, const char *what) {
    est_progress_begin_on(p, what, isatty(STDERR_FILENO) ? stderr : NULL);
}

void est_progress_update(est_progress *p, size_t done, size_t total) {
    if (!p->out) return;
    double t = now_s();
    if (t - p->start_s < SHOW_AFTER_S || (p->shown && t - p->last_s < REDRAW_EVERY_S)) return;
    p->last_s = t;
    p->shown = true;
    double frac = total ? (double)done / (double)total : 0;
    double left = frac > 0 ? (t - p->start_s) * (1 - frac) / frac : 0;
    fprintf(p->out, "\r%s: %3.0f%% (%zu/%zu), %.0f s left   ", p->what, 100 * frac, done, total, left);
    fflush(p->out);
}

void est_progress_end(est_progress *p) {
    if (p->out && p->shown) {
        fprintf(p->out, "\r%*s\r", 60, "");
        fflush(p->out);
    }
    p->shown = false;
}
