/* The flags of PEFT's methods, the training loop and sequences of many
 * lengths, applied to a run (after the LoRA flags and --seq). */
#ifndef EST_CLI_PEFT_H
#define EST_CLI_PEFT_H

#include <stddef.h>

#include "options.h"

int est_cli_apply_peft(const est_cli *cli, est_run *run, char *err, size_t errlen);

/* --peft-rank, --peft-alpha, --peft-targets, --lokr-factor and
 * --n-frequency for --peft loha | lokr | oft | fourierft | waveft
 * (cli_peft_delta.c). */
int est_cli_apply_pdelta(const est_cli *cli, est_run *run, char *err, size_t errlen);

#endif
