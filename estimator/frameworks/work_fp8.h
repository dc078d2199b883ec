/* The work of a Linear run as torchao's Float8Linear (estimator/model/fp8.h),
 * priced as work.c prices the rest: its GEMMs by shape at the card's FP8
 * ceiling (1-byte operands: estimator/ledger/gemm.c), the eager casts, amax
 * reductions, layout copies and rescales as bytes read and written with their
 * kernel launches. docs/method.md, "FP8 linears". */
#ifndef EST_WORK_FP8_H
#define EST_WORK_FP8_H

#include <stdbool.h>

#include "events.h"
#include "run.h"

/* Bytes one eager hp_tensor_to_float8_dynamic moves over n elements held in
 * hb bytes (fp8.c derives it); its launches in *kernels when non-NULL. */
double est_fp8_cast_bytes(double n, double hb, bool rowwise, double *kernels);

/* The same cast under torch.compile (--compile): inductor fuses the pointwise
 * chain, so the amax is one reduction kernel (read hb) and the scale, clamp
 * and conversion one kernel (read hb, write 1): 2 hb + 1 bytes per element in
 * 2 launches, rowwise or not (docs/method.md, "FP8 linears"). */
double est_fp8_cast_bytes_fused(double n, double hb, double *kernels);

/* One converted Linear (T rows, din -> dout), activations in c bytes and the
 * weight held in wb bytes: its forward, or its backward. */
void est_work_fp8_linear(est_step *st, const est_run *run, double T, double din, double dout, double c,
                         double wb, bool backward);

#endif
