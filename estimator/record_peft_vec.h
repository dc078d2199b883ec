/* A record's settings for PEFT's methods of peft_vec.h (AdaLoRA, VeRA, LN
 * tuning, MiSS), read from the method comparison's peft_key_params (the
 * experiment's adapter_config.json) and peft_target_modules. */
#ifndef EST_RECORD_PEFT_VEC_H
#define EST_RECORD_PEFT_VEC_H

#include <stddef.h>

#include <cJSON.h>
#include "run_desc.h"

/* Sets run->peft for "adalora", "vera", "ln_tuning", "miss"; 1 when the
 * method is one of them, 0 when not, -1 with one line on a bad key. */
int est_record_peft_vec(const cJSON *cfg, const char *method, est_run *run, char *err, size_t errlen);

#endif
