/* A record's peft_target_modules, shared by the readers of PEFT's methods
 * that take their own targets (record_peft_vec.c, record_peft_delta.c). */
#ifndef EST_RECORD_PEFT_TARGETS_H
#define EST_RECORD_PEFT_TARGETS_H

#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>

/* peft_target_modules as the method comparison writes them ("q_proj;v_proj",
 * a trailing ';' allowed) into est_lora_target bits. 0 when absent (out
 * untouched), 1 when read, -1 with one line. */
int est_record_peft_targets(const cJSON *cfg, uint32_t *out, char *err, size_t errlen);

#endif
