#include "svg.h"

#include <math.h>
#include <string.h>

#include "file_io.h"
#include "json_util.h"

#define WIDTH 960.0
#define HEIGHT 540.0
#define LEFT 80.0
#define RIGHT 200.0
#define TOP 62.0
#define BOTTOM 64.0

/* One colour per series, in stacking order (categories of timeline.h). */
static const char *const PALETTE[] = {"#4e79a7", "#a0cbe8", "#f28e2b", "#ffbe7d", "#59a14f",
                                      "#8cd17d", "#b6992d", "#f1ce63", "#86bcb6", "#bab0ac",
                                      "#e15759", "#ff9d9a"};

void est_svg_escape(FILE *f, const char *s) {
    for (; s && *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default:
            /* Control characters are not allowed in XML 1.0 text. */
            if ((unsigned char)*s >= 0x20 || *s == '\n' || *s == '\t') fputc(*s, f);
        }
    }
}

/* A "nice" tick step (1, 2, 5 x 10^k) giving about `want` ticks over span. */
static double nice_step(double span, int want) {
    if (!(span > 0)) return 1;
    double raw = span / want, mag = pow(10, floor(log10(raw))), r = raw / mag;
    return mag * (r < 1.5 ? 1 : r < 3.5 ? 2 : r < 7.5 ? 5 : 10);
}

typedef struct {
    double x0, x1, y1; /* data ranges (y from 0) */
} frame;

static double px(const frame *fr, double x) {
    double w = fr->x1 > fr->x0 ? fr->x1 - fr->x0 : 1;
    return LEFT + (x - fr->x0) / w * (WIDTH - LEFT - RIGHT);
}

static double py(const frame *fr, double y) {
    return HEIGHT - BOTTOM - (fr->y1 > 0 ? y / fr->y1 : 0) * (HEIGHT - TOP - BOTTOM);
}

static void text(FILE *f, double x, double y, const char *anchor, const char *cls, const char *s) {
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" class=\"%s\">", x, y, anchor, cls);
    est_svg_escape(f, s);
    fputs("</text>\n", f);
}

/* The x coordinates of the outline: steps double every point. */
static size_t outline(const est_svg_chart *c, size_t k, double *x) {
    if (!c->steps) {
        *x = c->x[k];
        return 1;
    }
    x[0] = c->x[k];
    x[1] = c->x[k] + 1;
    return 2;
}

#define NCOLOURS (sizeof PALETTE / sizeof PALETTE[0])

/* The data ranges: x over the points (a step is one wide), y from 0 to the
 * tallest stack, capacity or measured point, with 8% headroom. */
static frame chart_frame(const est_svg_chart *c) {
    frame fr = {0, 1, 0};
    if (c->n > 0) {
        fr.x0 = c->x[0];
        fr.x1 = c->x[c->n - 1] + (c->steps ? 1 : 0);
        if (fr.x1 <= fr.x0) fr.x1 = fr.x0 + 1;
    }
    for (size_t i = 0; i < c->n; i++) {
        double sum = 0;
        for (size_t s = 0; s < c->nseries; s++) sum += c->series[s][i];
        if (sum > fr.y1) fr.y1 = sum;
    }
    if (c->capacity > fr.y1) fr.y1 = c->capacity;
    for (size_t i = 0; i < c->nmarks; i++)
        if (c->mark_y[i] > fr.y1) fr.y1 = c->mark_y[i];
    fr.y1 = fr.y1 > 0 ? fr.y1 * 1.08 : 1;
    return fr;
}

/* The XML prolog, styles, white background, title and subtitle. */
static void write_header(FILE *f, const est_svg_chart *c) {
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
            WIDTH, HEIGHT, WIDTH, HEIGHT);
    fputs("<style>.title{font-size:16px;font-weight:bold}.sub{fill:#555}.axis{fill:#333}"
          ".tick{fill:#555;font-size:11px}.legend{fill:#222}</style>\n", f);
    fputs("<rect x=\"0\" y=\"0\" width=\"100%\" height=\"100%\" fill=\"white\"/>\n", f);
    if (c->title) text(f, LEFT, 24, "start", "title", c->title);
    if (c->subtitle) text(f, LEFT, 44, "start", "sub", c->subtitle);
}

/* Grid lines and y ticks. */
static void write_y_axis(FILE *f, const frame *fr) {
    double ys = nice_step(fr->y1, 6);
    fputs("<g id=\"y-axis\">\n", f);
    for (double y = 0; y <= fr->y1 + 1e-9; y += ys) {
        char lab[32];
        snprintf(lab, sizeof lab, "%g", y);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", LEFT,
                py(fr, y), WIDTH - RIGHT, py(fr, y));
        text(f, LEFT - 6, py(fr, y) + 4, "end", "tick", lab);
    }
    fputs("</g>\n", f);
}

/* The chart's own x ticks (labels slanted), or nice numeric ones. */
static void write_x_axis(FILE *f, const est_svg_chart *c, const frame *fr) {
    fputs("<g id=\"x-axis\">\n", f);
    if (c->nticks > 0) {
        for (size_t i = 0; i < c->nticks; i++) {
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#999\"/>\n",
                    px(fr, c->tick_x[i]), HEIGHT - BOTTOM, px(fr, c->tick_x[i]), HEIGHT - BOTTOM + 5);
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" class=\"tick\" "
                       "transform=\"rotate(-30 %.1f %.1f)\">",
                    px(fr, c->tick_x[i]), HEIGHT - BOTTOM + 16, px(fr, c->tick_x[i]),
                    HEIGHT - BOTTOM + 16);
            est_svg_escape(f, c->tick_labels[i]);
            fputs("</text>\n", f);
        }
    } else {
        double xs = nice_step(fr->x1 - fr->x0, 8);
        for (double x = ceil(fr->x0 / xs) * xs; x <= fr->x1 + 1e-9; x += xs) {
            char lab[32];
            snprintf(lab, sizeof lab, "%g", x);
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#999\"/>\n",
                    px(fr, x), HEIGHT - BOTTOM, px(fr, x), HEIGHT - BOTTOM + 5);
            text(f, px(fr, x), HEIGHT - BOTTOM + 18, "middle", "tick", lab);
        }
    }
    fputs("</g>\n", f);
}

static void write_axis_labels(FILE *f, const est_svg_chart *c) {
    if (c->x_label) text(f, (LEFT + WIDTH - RIGHT) / 2, HEIGHT - 12, "middle", "axis", c->x_label);
    if (c->y_label) {
        fprintf(f, "<text x=\"18\" y=\"%.1f\" text-anchor=\"middle\" class=\"axis\" "
                   "transform=\"rotate(-90 18 %.1f)\">",
                (TOP + HEIGHT - BOTTOM) / 2, (TOP + HEIGHT - BOTTOM) / 2);
        est_svg_escape(f, c->y_label);
        fputs("</text>\n", f);
    }
}

/* Series s as a closed area: along the top of the stack up to s, back along its bottom. */
static void write_area(FILE *f, const est_svg_chart *c, const frame *fr, size_t s) {
    fprintf(f, "<path id=\"series-");
    est_svg_escape(f, c->series_names[s]);
    fprintf(f, "\" class=\"series\" fill=\"%s\" fill-opacity=\"0.9\" stroke=\"none\" d=\"",
            PALETTE[s % NCOLOURS]);
    bool first = true;
    for (size_t i = 0; i < c->n; i++) {
        double top = 0;
        for (size_t j = 0; j <= s; j++) top += c->series[j][i];
        double xs[2];
        size_t k = outline(c, i, xs);
        for (size_t m = 0; m < k; m++) {
            fprintf(f, "%s%.2f,%.2f ", first ? "M" : "L", px(fr, xs[m]), py(fr, top));
            first = false;
        }
    }
    for (size_t i = c->n; i-- > 0;) {
        double bot = 0;
        for (size_t j = 0; j < s; j++) bot += c->series[j][i];
        double xs[2];
        size_t k = outline(c, i, xs);
        for (size_t m = k; m-- > 0;) fprintf(f, "L%.2f,%.2f ", px(fr, xs[m]), py(fr, bot));
    }
    fputs(c->n ? "Z\"/>\n" : "\"/>\n", f);
}

/* The axes' frame and the capacity line. */
static void write_frame_and_capacity(FILE *f, const est_svg_chart *c, const frame *fr) {
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n", LEFT,
            HEIGHT - BOTTOM, WIDTH - RIGHT, HEIGHT - BOTTOM);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n", LEFT, TOP,
            LEFT, HEIGHT - BOTTOM);
    if (c->capacity > 0) {
        fprintf(f, "<line id=\"capacity\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                   "stroke=\"#c00\" stroke-width=\"2\"/>\n",
                LEFT, py(fr, c->capacity), WIDTH - RIGHT, py(fr, c->capacity));
        text(f, WIDTH - RIGHT - 4, py(fr, c->capacity) - 5, "end", "axis",
             c->capacity_label ? c->capacity_label : "capacity");
    }
}

/* The dashed fit boundary and the dotted highlighted point, when the chart has them. */
static void write_vertical_markers(FILE *f, const est_svg_chart *c, const frame *fr) {
    if (!isnan(c->boundary_x)) {
        double x = px(fr, c->boundary_x);
        fprintf(f, "<g id=\"fit-boundary\"><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                   "stroke=\"#c00\" stroke-dasharray=\"6 4\" stroke-width=\"1.5\"/>\n",
                x, TOP, x, HEIGHT - BOTTOM);
        text(f, x - 4, TOP + 12, "end", "axis", "fits");
        text(f, x + 4, TOP + 12, "start", "axis", "does not fit");
        fputs("</g>\n", f);
    }
    if (!isnan(c->highlight_x)) {
        double x = px(fr, c->highlight_x + (c->steps ? 0.5 : 0));
        fprintf(f, "<g id=\"highlight\"><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                   "stroke=\"#000\" stroke-dasharray=\"2 3\"/>\n",
                x, TOP, x, HEIGHT - BOTTOM);
        text(f, x + 4, TOP + 26, "start", "axis", c->highlight_label ? c->highlight_label : "");
        fputs("</g>\n", f);
    }
}

/* Measured points: a dot, or a cross on the capacity line for an OOM. */
static void write_measured(FILE *f, const est_svg_chart *c, const frame *fr) {
    if (c->nmarks == 0) return;
    fputs("<g id=\"measured-points\">\n", f);
    for (size_t i = 0; i < c->nmarks; i++) {
        double x = px(fr, c->mark_x[i]);
        if (c->mark_oom && c->mark_oom[i]) {
            double y = py(fr, c->capacity > 0 ? c->capacity : c->mark_y[i]);
            fprintf(f, "<path class=\"measured-oom\" d=\"M%.1f,%.1f L%.1f,%.1f M%.1f,%.1f L%.1f,%.1f\" "
                       "stroke=\"#000\" stroke-width=\"2\"/>\n",
                    x - 5, y - 5, x + 5, y + 5, x - 5, y + 5, x + 5, y - 5);
        } else {
            fprintf(f, "<circle class=\"measured\" cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"#000\" "
                       "fill-opacity=\"0.6\"/>\n",
                    x, py(fr, c->mark_y[i]));
        }
    }
    fputs("</g>\n", f);
}

/* Legend, top of the stack first, then the capacity line and the measured points. */
static void write_legend(FILE *f, const est_svg_chart *c) {
    fputs("<g id=\"legend\">\n", f);
    double ly = TOP + 4;
    for (size_t s = c->nseries; s-- > 0;) {
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\"/>\n",
                WIDTH - RIGHT + 16, ly, PALETTE[s % NCOLOURS]);
        text(f, WIDTH - RIGHT + 34, ly + 10, "start", "legend", c->series_names[s]);
        ly += 18;
    }
    if (c->capacity > 0) {
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#c00\" stroke-width=\"2\"/>\n",
                WIDTH - RIGHT + 16, ly + 6, WIDTH - RIGHT + 28, ly + 6);
        text(f, WIDTH - RIGHT + 34, ly + 10, "start", "legend", "GPU capacity");
        ly += 18;
    }
    if (c->nmarks > 0) {
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"#000\"/>\n", WIDTH - RIGHT + 22, ly + 6);
        text(f, WIDTH - RIGHT + 34, ly + 10, "start", "legend", "measured (x = OOM)");
    }
    fputs("</g>\n", f);
}

int est_svg_write(FILE *f, const est_svg_chart *c) {
    const frame fr = chart_frame(c);
    write_header(f, c);
    write_y_axis(f, &fr);
    write_x_axis(f, c, &fr);
    write_axis_labels(f, c);
    /* Stacked areas, bottom to top. */
    fputs("<g id=\"series\">\n", f);
    for (size_t s = 0; s < c->nseries; s++) write_area(f, c, &fr, s);
    fputs("</g>\n", f);
    write_frame_and_capacity(f, c, &fr);
    write_vertical_markers(f, c, &fr);
    write_measured(f, c, &fr);
    write_legend(f, c);
    fputs("</svg>\n", f);
    return ferror(f) ? -1 : 0;
}

static int svg_writer(FILE *f, const void *chart) { return est_svg_write(f, chart); }

/* Replaced atomically (file_io.h): a kill or a full disk leaves the old chart. */
int est_svg_write_file(const char *path, const est_svg_chart *c, char *err, size_t errlen) {
    return ft_write_atomic_with(path, svg_writer, c, err, errlen);
}
