/* LoRA adapters as PEFT builds them (peft 0.12-0.13, tuners/lora/layer.py):
 * for each targeted nn.Linear(d_in, d_out) of a decoder block, A = Linear(d_in,
 * r, bias=False) and B = Linear(r, d_out, bias=False), forward
 *   result = base(x) + B(A(dropout(x.to(A.weight.dtype)))) * alpha / r.
 * Only A and B train; every base weight is frozen. docs/method.md ("LoRA")
 * derives each term. */
#ifndef EST_LORA_H
#define EST_LORA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "run_desc.h"

/* The seven linears of a Llama block, in the order of --lora-targets. */
typedef enum {
    EST_LORA_Q, EST_LORA_K, EST_LORA_V, EST_LORA_O, EST_LORA_GATE, EST_LORA_UP, EST_LORA_DOWN,
    EST_LORA_TARGET_COUNT
} est_lora_target;

#define EST_LORA_BIT(t) (1u << (t))
/* PEFT's "all-linear": every nn.Linear except the output layer (lm_head). */
#define EST_LORA_ALL_LINEAR ((1u << EST_LORA_TARGET_COUNT) - 1u)
/* PEFT's default target_modules for Llama, Mistral and Qwen2 when none is given
 * (utils/constants.py TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING:
 * ["q_proj", "v_proj"]). */
#define EST_LORA_DEFAULT_TARGETS (EST_LORA_BIT(EST_LORA_Q) | EST_LORA_BIT(EST_LORA_V))
/* LoraConfig defaults (tuners/lora/config.py): r=8, lora_alpha=8, dropout 0. */
#define EST_LORA_DEFAULT_ALPHA 8.0
#define EST_LORA_MAX_RANK 65536

/* Tensors a targeted linear's input comes from; linears in one group read the
 * same tensor (q, k, v read the attention norm's output). */
typedef enum {
    EST_LORA_IN_ATTN_NORM, EST_LORA_IN_ATTN_OUT, EST_LORA_IN_MLP_NORM, EST_LORA_IN_MLP_PRODUCT,
    EST_LORA_IN_COUNT
} est_lora_input;

/* What the adapters of one block save for backward, whole micro-batch. */
typedef struct est_lora_saved_bytes {
    int64_t a_inputs;      /* A's saved input (a cast copy of x, or x itself) */
    int64_t b_inputs;      /* B's saved input: A's (T, r) output */
    int64_t dropout_masks; /* native_dropout's bool mask, 1 byte per element of x */
} est_lora_saved_bytes;

void est_lora_defaults(est_lora *l);
bool est_lora_on(const est_run *run);

/* lora_A requires grad, so autograd saves its input (the fp32 cast of x) and
 * computes its weight gradient: always but under LoRA-FA, whose
 * peft.optimizers.create_lorafa_optimizer (peft 0.19, optimizers/lorafa.py)
 * sets requires_grad_(False) on every lora_A. A script that afterwards runs
 * the model under PeftModel.disable_adapter() turns it back on: the context's
 * exit calls enable_adapter_layers(), whose BaseTunerLayer.enable_adapters(True)
 * -> set_adapter(active_adapters) sets requires_grad on every parameter of the
 * active adapters (peft d787f51 tuners/tuners_utils.py, utils/other.py
 * _set_layer_requires_grad); PEFT's method comparison does so for its
 * wiki-loss pass (method_comparison/MetaMathQA/run.py train(): the optimizer
 * at line 184, `with model.disable_adapter()` at 220). run->lora.fa_a_grad. */
bool est_lora_a_grad(const est_run *run);
/* The optimizer keeps state for and steps lora_A (not under LoRA-FA: its
 * LoraFAOptimizer pairs A with B and updates B alone, whatever A requires). */
bool est_lora_a_stepped(const est_run *run);
/* `name` is a LoRA A matrix ("...lora_A"). */
bool est_lora_is_a(const char *name);

/* "q,v", "q_proj,v_proj", "all-linear", ... 0, or -1 with the choices listed. */
int est_lora_targets_parse(const char *s, uint32_t *out, char *err, size_t errlen);
/* "q,v" for a bit set; returns buf. */
const char *est_lora_targets_name(uint32_t targets, char *buf, size_t n);

/* Input and output width of a block linear, and the group its input is in. */
void est_linear_shape(const ft_model *m, est_lora_target t, int64_t *d_in, int64_t *d_out);
est_lora_input est_linear_input(est_lora_target t);

/* A targeted Linear's adapter shape as PEFT finds it (fused projections,
 * experts: lora.c): d_in 0 when the name matches no module of the model;
 * `copies` adapters (one per routed expert). */
void est_adapter_shape(const ft_model *m, est_lora_target t, int64_t *d_in, int64_t *d_out, int64_t *copies);

/* Linears targeted per block. */
int est_lora_target_count(const est_run *run);

/* Adapter elements: r * (d_in + d_out) summed over targets, for one block and
 * for the run's layers. */
int64_t est_lora_block_params(const est_run *run);
int64_t est_lora_params(const est_run *run);

/* Parameters that train: the adapters under LoRA, else the whole model. */
int64_t est_trainable_params(const est_run *run);

/* Bytes per element of the adapters' weights: fp32 (PEFT get_peft_model's
 * autocast_adapter_dtype=True upcasts bf16/fp16 adapters, peft >= 0.12), or
 * bf16 in a pure bf16 run that keeps them in the base's dtype (lora.base_dtype:
 * autocast_adapter_dtype=False; torchtune's LoRA modules take the model's
 * dtype). */
int64_t est_lora_weight_bytes(const est_run *run);

/* The adapters' saved tensors in one block; base_saves[g] says the frozen base
 * already saves group g's tensor (so an adapter reading it shares it). */
void est_lora_saved(const est_run *run, const bool base_saves[EST_LORA_IN_COUNT],
                    est_lora_saved_bytes *out);

/* LoRA options against the rest of the run; 0 or -1 with one line. */
int est_lora_validate(const est_run *run, char *err, size_t errlen);

#endif
