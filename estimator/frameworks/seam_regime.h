/* The dtypes each framework runs the modeling code in (est_regime,
 * module_graph.h): the seams' own regime hooks (autograd.h), exported apart
 * from the seams so that the time ledger's work (work.c) builds the block
 * description as the memory side does without including autograd.h. */
#ifndef EST_SEAM_REGIME_H
#define EST_SEAM_REGIME_H

#include "module_graph.h"
#include "run.h"

/* The blocks' dtypes and the embedding's and head's, per framework. */
void est_hf_regime(const est_run *run, est_regime *block, est_regime *ends);
void est_ds_regime(const est_run *run, est_regime *block, est_regime *ends);
void est_fsdp_regime(const est_run *run, est_regime *block, est_regime *ends);

/* The dtypes the run's framework runs a decoder block in: its seam's regime;
 * ftrain, which has no seam, the modeling code's (est_regime_of). */
est_regime est_block_regime(const est_run *run);

#endif
