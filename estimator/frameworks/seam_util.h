/* What every framework seam needs of the model's parameters: the parameter
 * tensors in registration order (model.parameters(): embedding, each block's
 * Linears and norms, the final norm, the LM head), their storage, and one
 * slot per distinct tensor (a tied LM head is the embedding's). */
#ifndef EST_SEAM_UTIL_H
#define EST_SEAM_UTIL_H

#include <stdbool.h>
#include <stdint.h>

#include "autograd.h"

typedef struct est_param_ref {
    int inst;   /* module instance (autograd.h) */
    int p;      /* parameter of that module */
    int slot;   /* one per distinct tensor of the model */
} est_param_ref;

/* Slots: blocks' parameters are inst-major; -1 for a tied LM head's own (use
 * the embedding's). est_sim_slots() is the number of slots. */
int est_sim_slot(const est_sim *s, int inst, int p);
int est_sim_slots(const est_sim *s);
/* The slot a gradient of (inst, p) accumulates into (a tied head: the embedding's). */
int est_sim_grad_slot(const est_sim *s, int inst, int p);

/* Every distinct parameter tensor in registration order (or reversed, as
 * DDP's buckets and DeepSpeed's gradient hooks meet them). Returns the count
 * written to out (capacity est_sim_slots(s)). */
int est_sim_params(const est_sim *s, bool reversed, est_param_ref *out);

const est_mparam *est_sim_param(const est_sim *s, int inst, int p);
int64_t est_sim_param_elems(const est_sim *s, int inst, int p);
/* Device bytes of the parameter as loaded: its elements x its dtype, or
 * bitsandbytes' storage for a quantized frozen Linear weight. */
int64_t est_sim_param_storage(const est_sim *s, int inst, int p);

/* Resident tensors common to the PyTorch stacks: 4.40's per-layer rotary
 * caches (Qwen2, Mistral) in `elem_bytes`, and one cuBLAS workspace. */
void est_sim_modeling_buffers(est_sim *s, int elem_bytes);
void est_sim_cublas_workspace(est_sim *s);

#endif
