/* The work of Liger-Kernel's Triton kernels (estimator/model/liger.h),
 * priced as work.c prices the eager ops they replace: the bytes each kernel
 * reads and writes (one Triton program per row, one launch per kernel) at
 * the ledger's achieved memory bandwidth (estimator/ledger/timing.c). Each
 * function prices the kernel when the run uses it and returns true, or
 * returns false and leaves the eager op to work.c. */
#ifndef EST_WORK_LIGER_H
#define EST_WORK_LIGER_H

#include <stdbool.h>

#include "events.h"
#include "run.h"

/* RMSNorm over `tokens` rows of `width` in the stream's rb bytes. */
bool est_work_liger_rmsnorm(est_step *st, const est_run *run, double tokens, double width, double rb,
                            bool backward);
/* RoPE on q (T x q) and k (T x kv) in c bytes, head_dim d. */
bool est_work_liger_rope(est_step *st, const est_run *run, double T, double q, double kv, double d, double c,
                         bool backward);
/* The gated MLP's activation and product over T x f in c bytes. */
bool est_work_liger_glu(est_step *st, const est_run *run, double T, double f, double c, bool backward);
/* The cross-entropy on rows x V fp32 logits. Forward: the kernel only (the
 * logits' .float() and the shift are work.c's). */
bool est_work_liger_cross_entropy(est_step *st, const est_run *run, double rows, double V, bool backward);

/* Rows per chunk of the fused linear cross-entropy over T rows of width h
 * and a vocabulary of V: next_power_of_2(ceil(T / ceil(V / h))), at most T
 * (fused_linear_cross_entropy.py, v0.8.5). */
double est_liger_flce_chunk_rows(double T, double h, double V);
/* Liger's fused linear cross-entropy (--loss chunked on the PyTorch stack;
 * false, nothing emitted, otherwise: ftrain's own chunked loss is work.c's):
 * its forward, where the gradients of the hidden states (T x h, rb bytes) and
 * of the LM head (V x h) are made chunk by chunk, with its host sync; c: the
 * compute dtype's bytes. */
bool est_work_liger_flce_forward(est_step *st, const est_run *run, double T, double h, double V, double c,
                                 double rb);
/* Its backward: a host sync, then the two gradients scaled in place unless
 * the loss's gradient is exactly 1. */
bool est_work_liger_flce_backward(est_step *st, const est_run *run, double T, double h, double V, double rb);

#endif
