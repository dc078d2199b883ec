/* The optimizer step: learning-rate schedule, global-norm clipping, AdamW
 * (Loshchilov & Hutter 2019) or SGD over this rank's partition, in fp32.
 *
 *   lr(s)  = lr * (s+1)/warmup                                   s < warmup
 *          = lr_min + (lr - lr_min)/2 * (1 + cos(pi * p)),       p = (s-warmup)/(steps-warmup)
 *            with lr_min = TR_MIN_LR_FRAC * lr
 *   g      = grad * min(1, clip / ||grad||)          (clip = 0: no clipping)
 *   AdamW  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
 *          w -= lr * (m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + wd * w)
 *   SGD    w -= lr * (g + wd * w)
 * Weight decay applies to 2-D weights only (sizes.h: tr_tensor_decays). */
#ifndef TR_OPTIM_H
#define TR_OPTIM_H

#include <stdint.h>

#include "backend.h"
#include "config.h"
#include "dtype.h"
#include "model.h"

#define TR_ADAM_BETA1 0.9f
#define TR_ADAM_BETA2 0.95f   /* llm.c and the Llama papers' pre-training value */
#define TR_ADAM_EPS 1e-8f

/* w (fp32) is updated in place; when wout is given it receives round(w) in
 * wout_dt. g is read in g_dt. m and v are AdamW's fp32 moments. */
void tr_cpu_adamw(float *w, void *wout, tr_dtype wout_dt, const void *g, tr_dtype g_dt, float *m, float *v,
                  int64_t n, const tr_opt_args *a);
void tr_cpu_sgd(float *w, void *wout, tr_dtype wout_dt, const void *g, tr_dtype g_dt, int64_t n,
                const tr_opt_args *a);

double tr_lr_at(const tr_config *cfg, int64_t step);

/* Gradient norm (over all ranks), clipping, the update of this rank's
 * partition, zeroed gradients, and (stage 1/2) the all-gather of the updated
 * weights. Returns the gradient norm before clipping. */
double tr_optimizer_step(tr_rank *r, int64_t step);

#endif
