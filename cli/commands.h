/* The `sweep`, `timeline` and `plan` commands of ftest and the inverse
 * questions: option handling and output around sweep.c, the step timeline
 * (output/svg.c), plan.c and inverse.c. main.c only maps the result to an exit
 * status. */
#ifndef EST_COMMANDS_H
#define EST_COMMANDS_H

#include <stddef.h>
#include <stdio.h>

#include "estimate.h"
#include "gpu.h"
#include "options.h"

/* Runs cli->command (EST_CMD_SWEEP, EST_CMD_TIMELINE or EST_CMD_PLAN), writing
 * its report to `out`. Returns 0 when the run fits (sweep: some point fits;
 * plan: some plan exists), 1 when not, -1 with a one-line message on bad input. */
int est_run_command(const est_cli *cli, const est_gpu_catalog *cat, FILE *out, char *err,
                    size_t errlen);

/* --max-batch / --max-seq / --min-gpus: with strategy flags, the answer for
 * that strategy; without, the answer for every usual strategy and the best of
 * them (inverse.h). Prints text (or JSON with --json) to `out`. Returns 0 when
 * something fits, 1 when nothing does, -1 with a message on bad input. */
int est_inverse_command(const est_cli *cli, const est_run *base, FILE *out, char *err,
                        size_t errlen);

/* The text table of one step's moments: bytes per category, allocated total,
 * modelled time; the peak marked. */
void est_print_timeline(FILE *out, const est_run *run, const est_estimate *e);

/* The step as an SVG chart: memory by category at every moment. */
int est_timeline_svg(const char *path, const est_run *run, const est_estimate *e, char *err,
                     size_t errlen);

#endif
