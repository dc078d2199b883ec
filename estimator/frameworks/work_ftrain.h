/* The work of ftrain's step as events: the kernels trainer/step.c, model.c
 * and optim.c really run, one event each (GEMMs, attention, and every other
 * kernel tagged with its name for the CPU device's measured rate,
 * cpu_device.h), where work.c describes PyTorch's. Its CUDA backend runs the
 * same calls: GEMMs through cuBLASLt, the other kernels as memory traffic,
 * attention by its thread-per-row kernels (work_ftrain_cuda.h). */
#ifndef EST_WORK_FTRAIN_H
#define EST_WORK_FTRAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "constants.h"
#include "events.h"
#include "run.h"

/* The shapes of one ftrain rank (profile_ftrain.c's layout). */
typedef struct est_ftrain_shape {
    double V, h, I, nh, nkv, hd, qd, kvd, qkvd, B, T, BT, cd;
    double logits_rows;       /* rows of logits per chunk of the loss (all BT, or 32) */
    double opt_numel;         /* parameters this rank's optimizer updates */
    double sumsq_numel;       /* gradient elements of its share of the norm */
    double grads_bytes;       /* its gradient buffer, zeroed after the step */
    bool adam, eager, sel, full, offload, off_par;
    bool cuda;                /* the CUDA backend (else the CPU backend) */
} est_ftrain_shape;

/* Appends `unit` (block units at `layer`) with ftrain's kernels. The loss
 * unit (EST_UNIT_HEAD_FWD) holds the final norm, the LM head, the loss and
 * their backward (tr_step_loss); EST_UNIT_LOSS_BWD and EST_UNIT_HEAD_BWD are
 * empty units; the reduce unit is work.c's. */
void est_work_ftrain(est_step *st, const est_run *run, const est_constants *k, const est_ftrain_shape *x,
                         est_unit unit, int32_t layer);

#endif
