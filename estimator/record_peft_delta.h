/* A record's config for LoHa, LoKr, OFT and FourierFT (peft_delta.h), as the
 * PEFT method comparison's importer writes it:
 *   peft_method          "loha", "lokr", "oft", "fourierft", "waveft"
 *   peft_key_params      r, alpha, decompose_factor, n_frequency (the
 *                        experiment's adapter_config.json keys)
 *   peft_target_modules  "q_proj;v_proj" */
#ifndef EST_RECORD_PEFT_DELTA_H
#define EST_RECORD_PEFT_DELTA_H

#include <stdbool.h>
#include <stddef.h>

#include <cJSON.h>

#include "run_desc.h"

/* The method named `name`, when it is one of these four. */
bool est_record_pdelta_method(const char *name, est_peft *out);
/* Reads the settings of run->peft's method; 0, or -1 with one line. */
int est_record_pdelta(const cJSON *cfg, est_run *run, char *err, size_t errlen);

#endif
