/* The work PEFT's methods add to a step (estimator/model/peft.h), priced as
 * work.c prices the rest: GEMMs by shape, elementwise ops as bytes read and
 * written with their kernel launches. */
#ifndef EST_WORK_PEFT_H
#define EST_WORK_PEFT_H

#include <stdbool.h>

#include "events.h"
#include "run.h"

/* DoRA's and IA3's work on Linear t (d_in x d_out) over T tokens whose
 * activations are c bytes per element, forward or backward. */
void est_work_peft_linear(est_step *st, const est_run *run, int t, double T, double din, double dout,
                          double c, bool backward);

/* LoRA-FA's optimizer step (peft optimizers/lorafa.py LoraFAOptimizer.step),
 * tensor by tensor. */
void est_work_lorafa_step(est_step *st, const est_run *run);

/* The optimizer's parameters and tensors under a PEFT method. */
double est_peft_step_params(const est_run *run);
double est_peft_step_tensors(const est_run *run);

#endif
