/* Parameter counts by tensor, from the model shapes alone.
 *
 * Conventions are Hugging Face's: a tied LM head is not counted twice, RMSNorm
 * has a weight and no bias, rotary embeddings have no parameters. */
#ifndef EST_PARAMS_H
#define EST_PARAMS_H

#include <stdint.h>

#include "model_config.h"

typedef struct est_layer_params {
    int64_t q, k, v, o;        /* attention projections, biases included */
    int64_t gate, up, down;    /* SwiGLU MLP */
    int64_t norms;             /* input_layernorm + post_attention_layernorm */
    int64_t total;
    int64_t largest;           /* largest single tensor in the block */
    /* Appended for mixture of experts (gate/up/down above then hold every
     * routed expert's weights: all experts are resident). */
    int64_t router;            /* the router's (experts, h) Linear */
    int64_t shared_expert;     /* Qwen2-MoE: shared expert's gate, up, down and its (1, h) gate */
    int64_t active;            /* what one token uses: attention, k routed experts, router, shared */
} est_layer_params;

typedef struct est_params {
    est_layer_params layer;    /* one decoder block (all blocks are alike) */
    int64_t embedding;         /* V * h */
    int64_t final_norm;        /* h */
    int64_t lm_head;           /* V * h, or 0 when tied */
    int64_t layers;            /* blocks counted */
    int64_t total;             /* everything, the published figure */
    int64_t largest_tensor;    /* largest single tensor (embedding or head, usually) */
    int64_t active;            /* parameters one token uses (== total for dense models) */
} est_params;

/* Counts parameters for the first `layers` blocks (pass model->num_layers for all). */
void est_count_params(const ft_model *model, int64_t layers, est_params *out);

#endif
