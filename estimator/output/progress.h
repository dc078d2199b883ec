/* A progress line for searches that take more than a second: on a terminal
 * only (stderr is a tty), redrawn at most ten times a second, erased at the
 * end. Quiet when output is piped or redirected, so scripts see nothing. */
#ifndef EST_PROGRESS_H
#define EST_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef struct est_progress {
    FILE *out;          /* stderr, or NULL when disabled */
    const char *what;   /* "plan", "sweep" */
    double start_s, last_s;
    bool shown;
} est_progress;

/* Enabled when stderr is a terminal. */
void est_progress_begin(est_progress *p, const char *what);
/* Same with an explicit stream (NULL disables): for tests. */
void est_progress_begin_on(est_progress *p, const char *what, FILE *out);
/* done of total units: draws once a second has passed since begin. */
void est_progress_update(est_progress *p, size_t done, size_t total);
/* Erases the line if one was drawn. */
void est_progress_end(est_progress *p);

#endif
