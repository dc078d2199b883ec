/* Placeholder so the estimator links before the trainer's layout lands; the
 * trainer engineer replaces this file with the real profile (docs/trainer.md). */
#include "profile_ftrain.h"

#include "json_util.h"

int est_timeline_ftrain(const est_run *run, est_timeline *tl, char *err, size_t errlen) {
    (void)run;
    (void)tl;
    return ft_errorf(err, errlen, "the ftrain profile is not built yet");
}
