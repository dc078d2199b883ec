/* The training YAML's keys that ftest did not use, in the text report and
 * in --json (estimator/report/report_settings.c). */
#ifndef EST_REPORT_SETTINGS_H
#define EST_REPORT_SETTINGS_H

#include <stdio.h>

#include "run.h"

/* One line each for the ignored keys and the keys outside ftest's tables;
 * nothing when there are none. */
void est_print_settings_unused(FILE *out, const est_run *run);

/* {"from", "schema", "ignored": [...], "unknown": [...]} as a cJSON * (void *
 * keeps cJSON out of this header); NULL when no YAML set anything. */
void *est_settings_json(const est_run *run);

#endif
