/* Activation memory of Hugging Face Transformers' Llama-family modeling code
 * (modeling_llama.py, modeling_mistral.py, modeling_qwen2.py, transformers 4.40),
 * tensor by tensor: what autograd saves for backward in one decoder block, in the
 * final norm and in the loss, and what is in flight during a block's backward.
 *
 * Each figure is derived in docs/method.md ("Activations") from the forward code:
 * which op saves which tensor, and in which dtype. Three dtype regimes exist:
 *  - module cast (DeepSpeed fp16/bf16, FSDP MixedPrecision, pure bf16): every
 *    tensor in the compute dtype, RMSNorm upcasting to fp32 internally;
 *  - autocast (plain PyTorch AMP over fp32 weights, the HF Trainer default):
 *    fp32 residual stream, every Linear saving its own low-precision cast of
 *    its input;
 *  - fp32: everything 4 bytes. */
#ifndef EST_HF_MODELING_H
#define EST_HF_MODELING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "module_graph.h"
#include "run_desc.h"

typedef struct est_dtypes {
    int64_t act;      /* bytes per element of Linear outputs (compute dtype) */
    int64_t resid;    /* bytes per element of the residual stream */
    bool autocast;    /* torch.autocast: Linear inputs are cast (and saved) per op */
} est_dtypes;

/* The dtype regime of a run (framework + precision). */
est_dtypes est_dtypes_of(const est_run *run);
/* The same as the block builders take it (weights and adapters in the
 * compute dtype), for figures derived from one block outside the step. */
est_regime est_regime_of(const est_run *run);

#define EST_TERM_NAME_MAX 40
typedef struct est_term {
    char name[EST_TERM_NAME_MAX];
    int64_t bytes; /* for the whole micro-batch of one rank */
} est_term;

typedef struct est_terms {
    est_term items[48];
    size_t count;
    int64_t total;
} est_terms;

/* Tensors one decoder block saves for backward (no checkpointing), micro-batch b, seq s. */
void est_block_saved(const est_run *run, est_terms *out);

/* Saved once per forward for all blocks (the attention mask of a padded batch). */
int64_t est_model_saved_bytes(const est_run *run);

/* Non-parameter buffers of the modeling code (4.40's per-layer RoPE caches). */
int64_t est_rope_cache_bytes(const est_run *run);

/* What a block keeps between its forward and its backward under the run's
 * checkpointing mode (full: only its input). */
int64_t est_block_kept_bytes(const est_run *run);

/* What a block keeps when nothing is offloaded (the host's share per block
 * under --activation-offload). */
int64_t est_block_offloadable_bytes(const est_run *run);

/* Extra bytes live inside a block's forward beyond what it saves (eager
 * attention's pre-softmax scores). */
int64_t est_block_forward_transient(const est_run *run);

/* What coexists inside a checkpointed block's no-grad forward: the gated MLP's
 * gate, up and product (one expert's rows at a time for MoE). */
int64_t est_block_ckpt_forward_bytes(const est_run *run);

/* Activation gradients in flight during one block's backward (largest sub-step). */
int64_t est_block_backward_working(const est_run *run);

/* Final RMSNorm's saved tensors and the LM head's saved input. */
int64_t est_final_norm_saved(const est_run *run);

/* Logits and loss at their highest point in the forward (the cross-entropy)
 * and in the backward (the log-softmax gradient), standard (full logits, fp32
 * upcast, shifted copy, log-softmax) or chunked. */
void est_logits_forward(const est_run *run, est_terms *out);
void est_logits_backward(const est_run *run, est_terms *out);

#endif
