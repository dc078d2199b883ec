/* TRL's preference trainers on autograd's step (trl 0.15.2 dpo_trainer.py,
 * orpo_trainer.py, kto_trainer.py; docs/method.md, "Preference training"):
 * the reference model (a frozen copy for a full fine-tune, the policy with its
 * adapters disabled under PEFT) and its forward under torch.no_grad after the
 * policy's, and KTO's KL pass. The paired rows and the policy's head are the
 * modules' (autograd.c builds them for est_policy_rows, block_rl.c). A seam
 * that runs preference steps sets s->objective = est_rl_objective(run) after
 * est_sim_init. */
#ifndef EST_RL_H
#define EST_RL_H

#include "autograd.h"

/* The hooks for the run's objective, or NULL for plain SFT. */
const est_objective *est_rl_objective(const est_run *run);

#endif
