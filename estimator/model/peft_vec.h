/* PEFT's methods that adapt a Linear with vectors or blocks, or tune
 * tensors the model already has (peft 0.19, src/peft/tuners/ at commit
 * d787f51, the commit PEFT's method comparison ran): what each trains and
 * holds. The ops each adds to a block are in block_peft_vec.c; docs/method.md
 * ("PEFT methods") derives them with file and line.
 *
 *  - AdaLoRA (tuners/adalora/layer.py SVDLinear): per target A (r, d_in),
 *    E (r, 1), B (d_out, r), r = init_r, all fp32 and trained; its
 *    RankAllocator (layer.py update_ipt, run each step by the harness's
 *    update_and_allocate) keeps ipt, exp_avg_ipt and exp_avg_unc, one fp32
 *    tensor of each per A, E and B.
 *  - VeRA (tuners/vera/layer.py Linear): per target lambda_d (r) and
 *    lambda_b (d_out), trained; one frozen fp32 pair vera_A (r, max d_in),
 *    vera_B (max d_out, r) shared by every layer (model.py
 *    _init_vera_A_vera_B: buffers, not parameters).
 *  - LN tuning (tuners/ln_tuning/layer.py LNTuningLayer): a deepcopy of each
 *    targeted RMSNorm, trained, beside the frozen original; the copies keep
 *    the base's dtype (model.py _cast_adapter_dtype is a no-op).
 *  - MiSS (tuners/miss/layer.py MissLayer): per target one block, (r, d_out)
 *    (init_weights true), (d_out / r, r, r) ("bat") or (r, mini_r)
 *    ("mini"), fp32 and trained.
 *  - Trainable tokens (tuners/trainable_tokens/layer.py TrainableTokensLayer):
 *    a delta (N, h) of the N token_indices' rows, fp32 (cast_adapter_dtype,
 *    tuners_utils.py 2243), trained; every forward builds the whole weight
 *    W.index_copy(0, indices, delta.to(W)) and looks up / multiplies by it.
 *    With tie_word_embeddings the LM head gets a layer tied to the same
 *    delta (trainable_tokens/model.py inject_adapter 55-96).
 *  - PVeRA (tuners/pvera/layer.py Linear): VeRA's shape with lambda_d of 2r
 *    (a mean and a log-variance) and the pair pvera_A (2r, max d_in),
 *    pvera_B (max d_out, r) (pvera/model.py 115-116).
 *  - TinyLoRA (tuners/tinylora/layer.py Linear): per target the frozen fp32
 *    buffers A (r, d_in) and B (d_out, r) of W's truncated SVD and P (u, r,
 *    r); trained vectors v (u), one per group of targets (model.py
 *    _create_and_replace: weight_tying 0 gives one per target, 1 one for the
 *    model), fp32 (model.py _cast_adapter_dtype). */
#ifndef EST_PEFT_VEC_H
#define EST_PEFT_VEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "run_desc.h"

/* One of the methods above. */
bool est_peft_vec_on(const est_run *run);
/* A method that adapts Linears (AdaLoRA, VeRA, MiSS) and targets t. */
bool est_peft_vec_targets_linear(const est_run *run, int t);
/* The targeted Linears: vec.targets, or PEFT's default for Llama-family
 * models (utils/constants.py: q_proj, v_proj for AdaLoRA, VeRA and MiSS). */
uint32_t est_peft_vec_targets(const est_run *run);

/* Elements one block adds (`trainable`: those that train), and those of the
 * model outside the blocks (LN tuning's copy of the final norm). */
int64_t est_peft_vec_block_params(const est_run *run, bool trainable);
int64_t est_peft_vec_model_params(const est_run *run);
/* Elements of the frozen fp32 buffers VeRA and PVeRA share over the model. */
void est_vera_buffers(const est_run *run, int64_t *a_elems, int64_t *b_elems);
/* Trained tensors of the model (the optimizer's tensor count). */
int64_t est_peft_vec_tensors(const est_run *run);
/* TinyLoRA: u, and the number of trained vectors (groups of targets). */
int64_t est_tinylora_u(const est_run *run);
int64_t est_tinylora_groups(const est_run *run);

const char *est_miss_init_name(est_miss_init m);
int est_miss_init_parse(const char *s, est_miss_init *out, char *err, size_t errlen);

/* "VeRA r256 on q,v", "MiSS bat r64 on q,v", "LN tuning" (labels of ftest
 * check and the report). */
void est_peft_vec_label(const est_run *run, char *buf, size_t n);

/* The settings against the method and the model; 0 or -1 with one line. */
int est_peft_vec_validate(const est_run *run, char *err, size_t errlen);

#endif
