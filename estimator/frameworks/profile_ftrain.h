/* The `ftrain` framework profile: the reference trainer's memory layout, by the
 * estimator's own equations (it never includes or links trainer code). For CPU
 * records the prediction must equal the trainer's arena accounting to the byte
 * in every category; docs/trainer.md is the layout both sides follow. */
#ifndef EST_PROFILE_FTRAIN_H
#define EST_PROFILE_FTRAIN_H

#include <stddef.h>

#include "constants.h"
#include "run.h"
#include "events.h"

/* Emits one optimizer step of rank 0 (the rank with the largest share when
 * sizes do not divide evenly) into `st`: the eight allocator categories only,
 * plus st->cpu_bytes for host (offload) buffers, and the work of each unit
 * (`k`: the constants its work reads).
 * Returns 0, or -1 with a one-line message for runs ftrain cannot do. */
int est_step_ftrain(const est_run *run, const est_constants *k, est_step *st, char *err,
                    size_t errlen);

#endif
