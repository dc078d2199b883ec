/* The sweep's scratch files (the child's log and record) in a private folder
 * of its own: made with mkdtemp (mode 0700) under $TMPDIR, so no name in it
 * can be planted or raced by another user, removed when the sweep ends or is
 * stopped by Ctrl-C or SIGTERM. A sweep killed with SIGKILL cannot remove its
 * folder; the next sweep removes every such folder of this user whose process
 * is gone (docs/reliability.md). */
#ifndef CAL_TEMP_H
#define CAL_TEMP_H

#include <stddef.h>

/* The scratch folder's name starts with this, then "PID-XXXXXX". */
#define CAL_TEMP_PREFIX "ftest-calibrate-"

/* Makes the folder under $TMPDIR (else /tmp) into dir[n]. 0, or -1 with err. */
int cal_temp_make(char *dir, size_t n, char *err, size_t errlen);

/* Removes the folder and the files the sweep puts in it (best effort). */
void cal_temp_remove(const char *dir);

/* Removes the scratch folders (and the files older versions left, "PID.log"
 * and "PID.record") of this user's sweeps whose process no longer runs.
 * Returns how many it removed. */
size_t cal_temp_sweep_stale(void);

#endif
