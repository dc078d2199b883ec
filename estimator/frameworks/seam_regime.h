/* The dtypes each framework runs the modeling code in (est_regime,
 * module_graph.h): the seams' own regime hooks (autograd.h), defined apart
 * from the seams (seam_regime.c) so that the time ledger's work (work.c)
 * builds the block description as the memory side does without calling into
 * the seams, which call the time ledger's work themselves. */
#ifndef EST_SEAM_REGIME_H
#define EST_SEAM_REGIME_H

#include "module_graph.h"
#include "run.h"

/* The blocks' dtypes and the embedding's and head's, per framework. */
void est_hf_regime(const est_run *run, est_regime *block, est_regime *ends);
void est_ds_regime(const est_run *run, est_regime *block, est_regime *ends);
void est_fsdp_regime(const est_run *run, est_regime *block, est_regime *ends);
/* FSDP1 with LoRA wrapped per decoder layer: the layer's frozen base weights
 * are views of a FlatParameter that requires grad, so they get gradients. */
bool est_fsdp_base_views_need_grad(const est_run *run);

/* The dtypes the run's framework runs a decoder block in: its seam's regime;
 * ftrain, which has no seam, the modeling code's (est_regime_of). */
est_regime est_block_regime(const est_run *run);

#endif
