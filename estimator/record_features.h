/* What a measured run used that the estimator cannot express yet.
 *
 * A record's config says exactly what ran, including features ftest does not
 * model (dynamic padding without its mean length, FSDP1 prefetch
 * as configured, PEFT methods other than LoRA, pure bf16 with fp32 adapters,
 * ...). Estimating such a run as the nearest run ftest can express would
 * compare a stand-in with the measurement, so `ftest check` reports each one in
 * one line as "not expressible: <features>" and counts it; `ftest fit` leaves
 * it out. When the estimator learns a feature, its entry here goes and the
 * records that needed only it are checked again. docs/records.md lists the keys. */
#ifndef EST_RECORD_FEATURES_H
#define EST_RECORD_FEATURES_H

#include <stddef.h>

#include <cJSON.h>

/* The features of `config` (a record's "config" object) that ftest cannot
 * express, as "padding dynamic, unknown training script" into out
 * (empty when none). Returns how many. */
int est_record_features(const cJSON *config, char *out, size_t n);

#endif
