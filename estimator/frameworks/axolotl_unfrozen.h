/* axolotl's unfrozen_parameters (axolotl 0.18.0 utils/freeze.py
 * freeze_layers_except, called from train.py setup_model_and_tokenizer after
 * the model and its adapter are loaded): every parameter of
 * model.named_parameters() frozen but those a pattern matches. */
#ifndef EST_AXOLOTL_UNFROZEN_H
#define EST_AXOLOTL_UNFROZEN_H

#include <stdbool.h>
#include <stddef.h>

#include <cJSON.h>

#include "run_given.h"
#include "run.h"

/* Reads unfrozen_parameters (a list of strings, or one) into run->trainable
 * as axolotl matches them, unless --trainable was given: each pattern's dots
 * are literal unless followed by '+', it is matched from the name's start
 * (re.match), and a trailing [start:end] range is dropped (the whole tensor
 * still requires grad; a gradient hook zeroes the rest, which changes no
 * byte). *set is true when it applied them. 0, or -1 with one line. */
int est_axolotl_unfrozen(const cJSON *root, const est_given *given, est_run *run, bool *set, char *err,
                         size_t errlen);

#endif
