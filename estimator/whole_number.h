/* One whole number as the ftest options and calibrate's grids read it: an
 * optional leading '-', then digits, within min..max; "2k"-style sizes are
 * refused with both readings named. Used by cli/ and calibrate/, so it lives
 * below both. */
#ifndef EST_WHOLE_NUMBER_H
#define EST_WHOLE_NUMBER_H

#include <stddef.h>
#include <stdint.h>

/* 0, or -1 with one line naming opt. */
int est_parse_int(const char *opt, const char *s, int64_t min, int64_t max, int64_t *out,
                  char *err, size_t errlen);

/* Splits buf (a copy of s) at its colons into START, STOP and STEP: the
 * number of parts (1 to 3), or -1 with one line naming opt and s. */
int est_split_range(const char *opt, const char *s, char *buf, char *parts[3], char *err, size_t errlen);

#endif
