/* Helpers shared by the trainer's Check suites. */
#ifndef FTEST_TRAINER_UTIL_H
#define FTEST_TRAINER_UTIL_H

#include "config.h"

/* A shipped model (models/NAME.json) with tr_config_defaults, quiet; the test
 * fails when the model cannot be loaded. Callers set what their test needs. */
tr_config test_tr_config(const char *model);

#endif
