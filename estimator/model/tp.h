/* Tensor parallelism as torchtitan applies it to a Llama block over FSDP2
 * (torchtitan/models/llama3/infra/parallelize.py apply_tp, PyTorch's DTensor
 * styles in torch/distributed/tensor/parallel/style.py; docs/method.md,
 * "Tensor parallelism"). A rank of a TP group of N holds 1/N of every
 * projection (ColwiseParallel wq/wk/wv/w1/w3 split their output features,
 * RowwiseParallel wo/w2 their input features), 1/N of the embedding's and
 * the output's vocabulary rows, and whole norms; FSDP2 then shards what the
 * rank holds over the data-parallel mesh of world / N ranks. Under sequence
 * parallelism the norms and residuals run on 1/N of the tokens; each
 * attention and MLP all-gathers its input along the sequence and reduce-
 * scatters its output back. */
#ifndef EST_TP_H
#define EST_TP_H

#include <stdbool.h>
#include <stddef.h>

#include "run_desc.h"

/* tp > 1 on the run. */
bool est_tp_on(const est_run *run);

/* One line naming what --tp / --cp cannot model for the run; 0 when none. */
int est_tp_validate(const est_run *run, char *err, size_t errlen);

/* The run as one TP rank sees it: `run` itself without TP (or when it is a
 * view already); else `local`, a copy whose model has num_heads,
 * num_kv_heads, intermediate_size and vocab_size divided by tp (the shapes
 * a rank's sharded projections, attention and vocabulary have) and
 * tp_local set, and no KV cache (torchtitan's model keeps none). The
 * data-parallel degree is est_run_dp. */
const est_run *est_tp_view(const est_run *run, est_run *local);

/* Tokens of one rank's micro-batch in the sequence-parallel regions (the
 * norms, residuals, embedding output and LM head input): tokens / tp. */
int64_t est_tp_seq_tokens(const est_run *run, int64_t tokens);

#endif
