#include "step_build.h"

#include <string.h>

#include "json_util.h"
#include "profile_ftrain.h"
#include "profiles.h"
#include "tp.h"

int est_step_build(const est_run *run, const est_constants *k, est_step *st, char *err,
                   size_t errlen) {
    est_run local; /* a tensor-parallel rank's view of the model (tp.h) */
    run = est_tp_view(run, &local);
    est_step_clear(st);
    switch (run->framework) {
    case EST_FW_FTRAIN: return est_step_ftrain(run, k, st, err, errlen);
    case EST_FW_HF: return est_step_hf(run, k, st, err, errlen);
    case EST_FW_DEEPSPEED: return est_step_deepspeed(run, k, st, err, errlen);
    case EST_FW_FSDP: return est_step_fsdp(run, k, st, err, errlen);
    }
    return ft_errorf(err, errlen, "unknown framework");
}

int est_time_model(const est_run *run, const est_constants *k, est_time_detail *out) {
    memset(out, 0, sizeof *out);
    est_step st;
    est_step_init(&st);
    char err[sizeof out->why];
    if (est_step_build(run, k, &st, err, sizeof err) == 0) est_time_ledger(run, &st, k, out, NULL);
    else memcpy(out->why, err, sizeof out->why); /* not modelled: say why */
    est_step_free(&st);
    return 0;
}
