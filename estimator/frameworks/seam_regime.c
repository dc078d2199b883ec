#include "seam_regime.h"

#include "hf_modeling.h"

est_regime est_block_regime(const est_run *run) {
    est_regime block, ends;
    switch (run->framework) {
    case EST_FW_HF: est_hf_regime(run, &block, &ends); return block;
    case EST_FW_DEEPSPEED: est_ds_regime(run, &block, &ends); return block;
    case EST_FW_FSDP: est_fsdp_regime(run, &block, &ends); return block;
    case EST_FW_FTRAIN: break;
    }
    return est_regime_of(run);
}
