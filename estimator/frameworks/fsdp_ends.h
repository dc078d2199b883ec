/* FSDP2 with the embedding and the LM head as units of their own
 * (run->fsdp_shard_ends, torchtune's custom_sharded_layers): what the time
 * ledger needs of them (fsdp_ends.c). The hooks are in seam_fsdp_ends.c (seam_fsdp.h). */
#ifndef EST_FSDP_ENDS_H
#define EST_FSDP_ENDS_H

#include <stdint.h>

#include "run_desc.h"

/* The output projection's calls per forward: ceil(s / ceil(s / 8)) chunks
 * under torchtune's chunked output (CEWithChunkedOutputLoss), else one. */
int64_t est_fsdp_head_calls(const est_run *run);

/* Collective bytes (before the ring's (W-1)/W) that the ends' own units add to
 * a step whose root unit would hold them: per micro-batch gathered, and per
 * step reduced. head and embed: each unit's bytes as gathered (compute dtype);
 * head_reduced: the head's gradient bytes (0 when frozen). */
void est_fsdp_ends_wire(const est_run *run, double head, double embed, double head_reduced, double *gathered,
                        double *reduced);

#endif
