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

#endif
