/* PEFT's methods beyond plain LoRA, in PEFT's own terms (peft 0.14-0.19,
 * src/peft/tuners/; the records of the method comparison ran peft 0.19.2.dev0
 * at commit d787f51): what each trains, with which shapes. The ops each one
 * adds to a decoder block are in block_linear.c (LoRA variants, IA3) and
 * block_ends.c (prompt tuning); docs/method.md ("PEFT methods") derives them.
 *
 *  - rsLoRA (LoraConfig use_rslora): scaling alpha / sqrt(r) instead of
 *    alpha / r (tuners/lora/layer.py update_layer); no tensor changes.
 *  - DoRA (use_dora, tuners/lora/dora.py DoraLinearLayer): a trained magnitude
 *    vector of d_out per adapted Linear; every forward rebuilds B A through
 *    lora_B(lora_A(eye(d_in))) and the norm of W + scaling B A per output row,
 *    and saves the base output and the adapter output for the magnitude's
 *    gradient.
 *  - LoRA-FA (peft.optimizers.create_lorafa_optimizer): every lora_A frozen
 *    (requires_grad_(False)); LoraFAOptimizer keeps Adam moments for B only and
 *    steps tensor by tensor.
 *  - IA3 (tuners/ia3/layer.py Linear): a trained vector per targeted Linear,
 *    (d_out, 1) scaling the output, or (1, d_in) scaling the input of a
 *    feed-forward module.
 *  - Prompt tuning (tuners/prompt_tuning/model.py PromptEmbedding): an
 *    nn.Embedding(N, h) whose N rows are prepended to every sequence
 *    (peft_model.py PeftModelForCausalLM.forward), so the model runs on s + N
 *    positions. */
#ifndef EST_PEFT_H
#define EST_PEFT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "run_desc.h"

/* "lora", "ia3", "prompt-tuning"; "lora", "rslora", "dora", "lora-fa". */
const char *est_peft_name(est_peft p);
int est_peft_parse(const char *s, est_peft *out, char *err, size_t errlen);
const char *est_lora_variant_name(est_lora_variant v);
int est_lora_variant_parse(const char *s, est_lora_variant *out, char *err, size_t errlen);

/* The run trains a PEFT method: the base model is frozen. */
bool est_peft_on(const est_run *run);
/* IA3 or prompt tuning (a method other than LoRA). */
bool est_peft_other(const est_run *run);

/* PEFT's default IA3 targets and feed-forward modules for the model's family
 * (utils/constants.py TRANSFORMERS_MODELS_TO_IA3_TARGET_MODULES_MAPPING and
 * ..._FEEDFORWARD_MODULES_MAPPING: llama and mistral k_proj, v_proj, down_proj;
 * qwen2 q_proj, v_proj, down_proj; feed-forward down_proj). */
void est_ia3_defaults(const ft_model *m, uint32_t *targets, uint32_t *feedforward);

/* Elements PEFT adds for one block (adapters, magnitude vectors, IA3
 * vectors), and for the whole model (the blocks, plus prompt tuning's N x h
 * embedding); the part of them that trains (LoRA-FA freezes A). */
int64_t est_peft_block_params(const est_run *run);
int64_t est_peft_params(const est_run *run);
int64_t est_peft_trainable_params(const est_run *run);

/* Positions the model runs on: the sequence plus prompt tuning's virtual tokens. */
int64_t est_model_positions(const est_run *run);

/* The PEFT options against the rest of the run; 0 or -1 with one line. */
int est_peft_validate(const est_run *run, char *err, size_t errlen);

#endif
