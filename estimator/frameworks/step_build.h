/* The one entry to the framework profiles: a run's step, by its framework. */
#ifndef EST_STEP_BUILD_H
#define EST_STEP_BUILD_H

#include <stddef.h>

#include "constants.h"
#include "events.h"
#include "run.h"
#include "timing.h"

/* The step of `run` by its framework's profile, into `st` (cleared first).
 * 0, or -1 with a one-line message for a run the profile cannot describe. */
int est_step_build(const est_run *run, const est_constants *k, est_step *st, char *err,
                   size_t errlen);

/* The time of `run` with the constants `k`: builds the step with the run's
 * framework profile, then prices it. Not modelled (all zeros) when the profile
 * refuses the run. */
int est_time_model(const est_run *run, const est_constants *k, est_time_detail *out);

#endif
