/* The one entry to the framework profiles: a run's step, by its framework. */
#ifndef EST_STEP_BUILD_H
#define EST_STEP_BUILD_H

#include <stddef.h>

#include "constants.h"
#include "events.h"
#include "module_graph.h"
#include "run.h"

/* The step of `run` by its framework's profile, into `st` (cleared first).
 * 0, or -1 with a one-line message for a run the profile cannot describe. */
int est_step_build(const est_run *run, const est_constants *k, est_step *st, char *err,
                   size_t errlen);

/* The dtypes the run's framework runs a decoder block in: its seam's regime
 * (autograd.h), which the memory side builds the block description with, so
 * that the time ledger prices the same ops (work.c); ftrain, which has no
 * seam, the modeling code's (est_regime_of). */
est_regime est_block_regime(const est_run *run);

#endif
