/* Turning parsed options into a run description: model and GPU lookup,
 * defaults, the user's flags on top. Shared by every ftest command. */
#ifndef EST_CLI_RUN_H
#define EST_CLI_RUN_H

#include <stddef.h>

#include "gpu.h"
#include "options.h"
#include "run.h"
#include "run_given.h"

#define EST_DEFAULT_GPU "h100-80gb"

/* Which of the run's settings `cli` gives, for the config readers (axolotl.h,
 * accelerate_config.h): what the user gave wins over their files. */
void est_cli_given(const est_cli *cli, est_given *given);

/* Loads the model and the GPU named in `cli` (catalog `cat`) and fills `run`. */
int est_cli_build_run(const est_cli *cli, const est_gpu_catalog *cat, est_run *run, char *err,
                      size_t errlen);

#endif
