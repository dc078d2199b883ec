/* The work of each unit of one training step, as events of the step
 * (estimator/ledger/events.h): the GEMMs, memory-bound ops and attention cores of the
 * Hugging Face modeling code, the collectives of each framework, the host
 * copies and CPU optimizer of offload. Profiles call est_work_emit at the
 * moment a unit starts; the time ledger (timing.c) prices what is emitted.
 * docs/method.md ("Step time") derives every term. */
#ifndef EST_WORK_H
#define EST_WORK_H

#include <stdint.h>

#include "constants.h"
#include "module_graph.h"
#include "run.h"
#include "events.h"

/* Appends a UNIT event and the work of `unit` (`layer`: the block, or -1). */
void est_work_emit(est_step *st, const est_run *run, const est_constants *k, est_unit unit,
                   int32_t layer);

/* The same for a block unit of the step as it runs (autograd.c): `block` is
 * that block's description (under partial training, its own variant: which
 * weights train decides its weight-gradient GEMMs); NULL builds it from the
 * run. */
void est_work_emit_block(est_step *st, const est_run *run, const est_constants *k, est_unit unit,
                         int32_t layer, const est_module *block);

/* Each unit of `units` (a set of EST_UNIT_BIT) in est_unit order, block units at `layer`. */
void est_work_emit_units(est_step *st, const est_run *run, const est_constants *k, unsigned units,
                         int32_t layer);

#endif
