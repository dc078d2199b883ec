/* The work LoHa, LoKr, OFT and FourierFT add to one adapted Linear
 * (estimator/model/peft_delta.h), priced as work.c prices the rest: GEMMs
 * by shape, elementwise ops as bytes read and written with their kernel
 * launches. */
#ifndef EST_WORK_PEFT_DELTA_H
#define EST_WORK_PEFT_DELTA_H

#include <stdbool.h>

#include "events.h"
#include "run.h"

/* Linear t (d_in x d_out) over T tokens whose activations are c bytes per
 * element, forward or backward. */
void est_work_pdelta_linear(est_step *st, const est_run *run, int t, double T, double din, double dout,
                            double c, bool backward);

#endif
