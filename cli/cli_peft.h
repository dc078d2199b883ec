/* The flags of PEFT's methods, the training loop and sequences of many
 * lengths, applied to a run (after the LoRA flags and --seq). */
#ifndef EST_CLI_PEFT_H
#define EST_CLI_PEFT_H

#include <stddef.h>

#include "options.h"

int est_cli_apply_peft(const est_cli *cli, est_run *run, char *err, size_t errlen);

#endif
