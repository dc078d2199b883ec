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


/* The three modules. `no_grad` builds the block as a checkpointed block's
 * first forward runs it (torch.no_grad: nothing saved). Each returns 0, or -1
 * with a message when the builder ran out of room (a bug). */
int est_module_embedding(const est_run *run, const est_regime *g, est_module *m, char *err,
                         size_t errlen);
int est_module_block(const est_run *run, const est_regime *g, bool no_grad, est_module *m,
                     char *err, size_t errlen);
int est_module_head(const est_run *run, const est_regime *g, est_module *m, char *err,
                    size_t errlen);
/* The embedding and the head under torch.no_grad, for a forward outside the
 * step's graph (a preference step's reference model, KTO's KL pass: the head
 * then makes the per-sequence log-probs, block_rl.c). */
int est_module_embedding_nograd(const est_run *run, const est_regime *g, est_module *m, char *err,
                                size_t errlen);
int est_module_head_nograd(const est_run *run, const est_regime *g, est_module *m, char *err,
                           size_t errlen);

#endif
