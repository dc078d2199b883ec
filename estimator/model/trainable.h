/* Partial training: only the parameters whose Hugging Face names match one
 * of the run's patterns train (--trainable, axolotl's unfrozen_parameters;
 * run_desc.h est_trainable). Every other parameter is frozen, adapters
 * included, as axolotl 0.18.0 utils/freeze.py freeze_layers_except does
 * (requires_grad = False on every parameter of model.named_parameters(),
 * then True on those a pattern matches).
 *
 * What freezing changes is derived, not assumed: a frozen parameter gets no
 * gradient, no optimizer state and (DeepSpeed) no fp32 master; autograd saves
 * only what the gradients it must compute need (module_graph.c save_rules),
 * so a frozen Linear whose input needs no gradient saves nothing, and the
 * data gradient still flows back to the first block after anything that
 * trains. Blocks differ in what trains, so the step runs one block module per
 * distinct trainable set (autograd.c). docs/method.md ("Partial training"). */
#ifndef EST_TRAINABLE_H
#define EST_TRAINABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "module_graph.h"
#include "run_desc.h"

/* Which parameters of each module train, and which modules' inputs require
 * grad, for one run. */
typedef struct est_train_plan {
    int64_t L;                /* blocks */
    uint64_t embed_mask, head_mask;
    uint64_t *block_mask;     /* per block: bit i = parameter i of the block trains */
    bool *block_in_grad;      /* per block: its input hidden states require grad */
    bool embed_in_grad;       /* the embedding's output is made to require grad */
    bool head_in_grad;
    int64_t trainable_elems;  /* elements that train (a tied head counted once) */
    int64_t total_elems;      /* every parameter's elements, as the modules hold them */
} est_train_plan;

/* The name model.named_parameters() gives parameter p of module m (the
 * embedding, block `layer`, or the head), expert `expert` of its copies:
 * transformers 4.40-4.57's module names (modeling_llama.py and its kin,
 * modeling_mixtral.py's block_sparse_moe.experts.E.w1; on a stack with
 * transformers 5.x's fused experts, 5.23's mlp.gate.weight and the bare
 * 3-D parameters mlp.experts.gate_up_proj / down_proj), under PEFT 0.12-0.19
 * prefixed by base_model.model. with a tuner layer's base_layer and
 * <adapter>.default. Returns 0, or -1 when the name does not fit `n`. */
int est_param_hf_name(const est_run *run, const est_module *m, int p, int64_t layer, int64_t expert,
                      char *out, size_t n);

/* Resolves the run's patterns over the three modules as built for the run
 * (shapes and names; their trainable flags are ignored). Errors (one line):
 * a pattern that is not a POSIX extended regex, or uses Python's syntax
 * POSIX lacks; one that matches no parameter (unless the run's patterns are
 * lenient); one that matches some experts of a parameter but not all; a
 * quantized base weight made trainable; and reentrant checkpointing of a
 * block whose parameters train but whose input needs no gradient (torch's
 * reentrant checkpoint then gives them none). */
int est_train_plan_make(const est_run *run, const est_module *embed, const est_module *block,
                        const est_module *head, est_train_plan *plan, char *err, size_t errlen);
void est_train_plan_free(est_train_plan *plan);

/* One pattern checked as est_train_plan_make reads it: a POSIX extended
 * regex without Python-only syntax. 0, or -1 with why (no pattern named). */
int est_trainable_pattern_check(const char *pattern, char *err, size_t errlen);

/* The regime of block i (embedding: -1, head: L) under the plan. */
void est_train_plan_regime(const est_train_plan *plan, int64_t i, est_regime *g);

/* Checks the run's patterns and counts what trains (builds the modules in a
 * neutral regime). trainable/total may be NULL. */
int est_trainable_count(const est_run *run, int64_t *trainable, int64_t *total, char *err,
                        size_t errlen);

#endif
