/* The memory ledger: replays a step's ALLOC and FREE events (estimator/ledger/events.h)
 * and samples the live bytes per category at every MOMENT, giving the step
 * timeline whose maximum is the peak (estimator/ledger/timeline.h). */
#ifndef EST_MEMORY_LEDGER_H
#define EST_MEMORY_LEDGER_H

#include <stddef.h>

#include "events.h"
#include "timeline.h"

/* Fills `tl` (cleared first) from `st`. 0, or -1 with a one-line message
 * (out of memory). */
int est_memory_ledger(const est_step *st, est_timeline *tl, char *err, size_t errlen);

#endif
