/* PEFT's prompt-learning methods beyond prompt tuning (peft at commit
 * d787f51, 0.19.2.dev0; the method comparison's records ran it), in PEFT's
 * own terms. docs/method.md ("Prefix tuning and P-tuning") derives each
 * term; block_prompt.c builds them into the embedding and the blocks.
 *
 *  - Prefix tuning (tuners/prefix_tuning/model.py PrefixEncoder, without
 *    prefix_projection): an nn.Embedding(N, 2 L token_dim), where
 *    utils/other.py _prepare_prompt_learning_config (lines 1186-1201) sets
 *    token_dim = head_dim x num_key_value_heads for a grouped-query model:
 *    the keys and values of N virtual tokens for every layer. get_prompt
 *    (peft_model.py 775-927) looks it up for the whole batch (b, N) in fp32,
 *    casts it to the base's dtype and hands it to transformers as a
 *    DynamicCache; every attention then reads N + s keys while the queries,
 *    the MLP and the logits stay over the s positions of the sequence.
 *  - P-tuning (tuners/p_tuning/model.py PromptEncoder, MLP type): an
 *    nn.Embedding(N, h) and an MLP Linear(h, H), ReLU, Linear(H, H), ReLU,
 *    Linear(H, h) (H = encoder_hidden_size) run on the N virtual token ids of
 *    one sequence (get_prompt takes prompt_tokens[:1]); the N rows are
 *    repeated over the batch and put before every sequence, as prompt
 *    tuning's are: the model runs on s + N positions.
 *  - Adaption prompt (tuners/adaption_prompt, LLaMA-Adapter): AdaptedAttention
 *    wraps the top adapter_layers attention modules (all of them here); each
 *    holds adaption_prompt (1, A, h) and adaption_gate (1) in q_proj's dtype
 *    (layer.py _BaseAdaptedAttention; PEFT's autocast_adapter_dtype reaches
 *    tuner layers only, so they stay bf16 on a bf16 base). After the layer's
 *    own attention it projects the A tokens with the frozen k_proj and
 *    v_proj, recomputes the queries (utils.py llama_compute_query_states:
 *    q_proj, an unused v_proj, RoPE), attends every query over the A keys
 *    (softmax in fp32, scaled by the gate), projects with o_proj and adds. */
#ifndef EST_PEFT_PROMPT_H
#define EST_PEFT_PROMPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "run_desc.h"

/* Prefix tuning's virtual tokens, each layer's attention reads them as keys
 * and values in front of the sequence's; 0 for any other method. */
int64_t est_prefix_tokens(const est_run *run);

/* Prefix tuning's token_dim: head_dim x num_key_value_heads. */
int64_t est_prefix_token_dim(const ft_model *m);

/* The trained elements of the prefix encoder or P-tuning's prompt encoder
 * (weights and biases); 0 for any other method. */
int64_t est_prompt_learning_params(const est_run *run);

/* Adaption prompt's trained elements in one block: A h + 1. */
int64_t est_adaption_block_params(const est_run *run);

/* The method's own settings (virtual tokens, P-tuning's encoder width); 0 or
 * -1 with one line. */
int est_prompt_learning_validate(const est_run *run, char *err, size_t errlen);

#endif
