/* Initial weights: a seeded initializer or a safetensors file.
 *
 * Seeded: every element is a pure function of (seed, unit, index), so any rank
 * can fill any part of the flat vector and the result does not depend on the
 * rank count. Matrices ~ N(0, 0.02^2) (GPT-2/Llama practice), o_proj and
 * down_proj scaled by 1/sqrt(2 * num_layers) (GPT-2's residual scaling),
 * norm weights 1, biases 0.
 *
 * Safetensors: HF Llama names (model.embed_tokens.weight,
 * model.layers.{i}.self_attn.q_proj.weight, ..., model.norm.weight,
 * lm_head.weight), dtypes F32, BF16 or F16, shapes exactly those of the config.
 * Blocks beyond --layers are ignored; any other unknown tensor, a missing one,
 * or a shape mismatch is an error. */
#ifndef TR_INIT_H
#define TR_INIT_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "safetensors.h"
#include "sizes.h"

#define TR_INIT_STD 0.02

/* One HF tensor feeding a row range of one of our tensors. */
typedef struct tr_init_part {
    const tr_st_tensor *src;
    int64_t at;                 /* element offset inside our tensor */
} tr_init_part;

typedef struct tr_init {
    uint64_t seed;
    int64_t model_layers;       /* for the residual scaling */
    const tr_sizes *s;
    /* safetensors */
    const uint8_t *map;
    size_t map_len;
    tr_st_header st;
    tr_init_part *parts;        /* [unit][tensor][3] */
} tr_init;

/* path "" or NULL: seeded. Safetensors files are opened, parsed and matched
 * against the model here, so a bad file fails before training starts. */
int tr_init_open(tr_init *in, const char *path, const tr_config *cfg, const tr_sizes *s, char *err,
                 size_t errlen);
void tr_init_close(tr_init *in);

/* The Hugging Face names of the pieces of our tensor t (a tr_tensor_id) of
 * block l (l unused for the embedding, final norm and head), with the rows of
 * each; q|k|v and gate|up are stacked on the output axis, in that order. Returns
 * the number of pieces (1..3); 0 for an unknown t. */
#define TR_HF_PARTS 3
int tr_init_hf_names(const tr_sizes *s, int t, int64_t l, char names[TR_HF_PARTS][96], int64_t rows[TR_HF_PARTS]);

/* dst[i] = initial value of element idx + i of unit u (0 for padding). */
void tr_init_fill(const tr_init *in, int64_t u, int64_t idx, int64_t n, float *dst);

#endif
