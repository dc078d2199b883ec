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
 * caches (Qwen2, Mistral) in `elem_bytes`. (The cuBLAS workspaces come with
 * the first GEMMs: autograd.c cublas_workspace.) */
void est_sim_modeling_buffers(est_sim *s, int elem_bytes);

/* References the training loop holds on the model's outputs (module_graph.h
 * model_output: the logits, the KV cache) from when the forward makes each
 * until the caller drops the output object: LlamaForCausalLM.forward computes
 * the loss inside itself and returns logits and past_key_values in its
 * CausalLMOutputWithPast (transformers 4.40-5.23 modeling_llama.py), which the
 * HF Trainer's compute_loss (or a script's model(...).loss) drops once the
 * forward has returned. */
typedef struct est_held_outputs {
    int32_t *ids;
    int n, cap;
} est_held_outputs;

/* After op `op` of instance `inst` in forward (not in backward, nor when a
 * checkpointed block recomputes: use_cache is off there): a reference on
 * each model output it made. */
void est_hold_outputs(est_sim *s, est_held_outputs *h, int inst, int op, bool backward);
/* Appends tensor `id` (a reference the caller owns); sets s->st->oom and
 * returns false when out of memory. */
bool est_held_push(est_sim *s, est_held_outputs *h, int32_t id);
/* Drops every held reference. */
void est_release_outputs(est_sim *s, est_held_outputs *h);
void est_held_free(est_held_outputs *h);

#endif
