/* The modules of a decoder-only model as Hugging Face Transformers runs them
 * (modeling_llama.py and its copies for Mistral, Qwen2, Gemma, Gemma-2, Phi-3,
 * Mixtral, Qwen2-MoE; transformers 4.40-4.49), op by op: the embedding (with
 * the attention mask built once per forward), one decoder block (every block
 * has the same shapes), and the final norm, LM head and loss. PEFT's LoRA
 * adapters and bitsandbytes' quantized Linears are ops of the block like any
 * other. Built for one rank's micro-batch and one dtype regime; the module
 * graph (module_graph.h) derives what is saved, what is alive when, and the
 * work. docs/method.md ("Activations") walks through each op. */
#ifndef EST_BLOCK_H
#define EST_BLOCK_H

#include <stdbool.h>

#include "module_graph.h"
#include "run_desc.h"

/* The dtypes a framework runs the modeling code in (it decides them; the
 * builders only apply them):
 *  - module cast (DeepSpeed fp16/bf16, FSDP MixedPrecision, pure bf16): weights,
 *    Linear outputs and the residual stream in the compute dtype;
 *  - autocast (plain PyTorch AMP over fp32 weights): fp32 weights and residual
 *    stream, each Linear casting its input and weight to the compute dtype;
 *  - fp32: 4 bytes everywhere. */
typedef struct est_regime {
    int act;            /* bytes of the compute dtype: Linear outputs, attention */
    int resid;          /* bytes of the residual stream */
    bool autocast;      /* torch.autocast casts each Linear's input and weight */
    int weight;         /* bytes of a base weight as the module holds it */
    bool train_base;    /* the model's own weights train (false under LoRA) */
    int adapter;        /* bytes of a LoRA weight as the module holds it */
} est_regime;

/* The three modules. `no_grad` builds the block as a checkpointed block's
 * first forward runs it (torch.no_grad: nothing saved). Each returns 0, or -1
 * with a message when the builder ran out of room (a bug). */
int est_module_embedding(const est_run *run, const est_regime *g, est_module *m, char *err,
                         size_t errlen);
int est_module_block(const est_run *run, const est_regime *g, bool no_grad, est_module *m,
                     char *err, size_t errlen);
int est_module_head(const est_run *run, const est_regime *g, est_module *m, char *err,
                    size_t errlen);

#endif
