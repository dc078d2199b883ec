/* `ftest calibrate` and the fit guard: the calibrate/ side that ftest's main
 * reaches (the sweep runner in calibrate_run.c, the record-set census in
 * calibrate_fitguard.c). */
#ifndef CAL_CALIBRATE_H
#define CAL_CALIBRATE_H

#include "calibrate_fitguard.h"

#endif
