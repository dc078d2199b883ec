/* Plain SVG charts, written by hand (no dependency): memory by category as a
 * stacked area along a swept variable or along the moments of one step, the
 * GPU's capacity as a line, the fits / does-not-fit boundary, and measured
 * points. Standalone files that open in any browser; every element a test
 * looks for carries an id or class (series-<name>, capacity, fit-boundary,
 * measured, measured-oom). */
#ifndef EST_SVG_H
#define EST_SVG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef struct est_svg_chart {
    const char *title;
    const char *subtitle;             /* second line under the title, or NULL */
    const char *x_label, *y_label;
    size_t n;                         /* points along x */
    const double *x;                  /* n values, increasing */
    bool steps;                       /* each point spans [x_i, x_i + 1): a step's moments */
    size_t nseries;
    const char *const *series_names;  /* bottom to top; ids are series-<name> */
    const double *const *series;      /* nseries arrays of n values (stacked) */
    double capacity;                  /* horizontal line at this y; <= 0: none */
    const char *capacity_label;
    double boundary_x;                /* vertical line where fitting stops; NAN: none */
    double highlight_x;               /* a marked x (the peak moment); NAN: none */
    const char *highlight_label;
    size_t nmarks;                    /* measured points */
    const double *mark_x, *mark_y;
    const bool *mark_oom;             /* drawn as crosses at the capacity line */
    size_t nticks;                    /* optional labelled x ticks (timeline phases) */
    const double *tick_x;
    const char *const *tick_labels;
} est_svg_chart;

/* Writes the chart; 0, or -1 on a write error. */
int est_svg_write(FILE *f, const est_svg_chart *c);

/* The same into a file; -1 with a message naming the file. */
int est_svg_write_file(const char *path, const est_svg_chart *c, char *err, size_t errlen);

/* Writes `s` with &, <, >, " and ' escaped. */
void est_svg_escape(FILE *f, const char *s);

#endif
