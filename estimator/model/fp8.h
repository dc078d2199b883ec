/* FP8 linears as torchao's Float8 training does them (torchao 0.19.0,
 * torchao/float8/: float8_linear.py Float8Linear and its autograd Function
 * matmul_with_hp_or_float8_args, config.py Float8LinearConfig recipes,
 * float8_scaling_utils.py hp_tensor_to_float8_dynamic, float8_utils.py
 * tensor_to_amax / amax_to_scale / to_fp8_saturated, float8_training_tensor.py
 * _ToFloat8ConstrFunc, float8_ops.py preprocess_addmm and
 * addmm_float8_unwrapped), converted the way accelerate's AO recipe does
 * (accelerate 1.15 utils/ao.py convert_model_to_fp8_ao: every nn.Linear with
 * both dims divisible by 16 except the model's first and last Linear), which
 * is what axolotl's `fp8: true` runs (axolotl core/trainers/base.py
 * additional_accelerator_args: AORecipeKwargs(Float8LinearConfig())), and
 * torchtitan's converter likewise leaves the output head alone.
 *
 * What the Function keeps: ctx.save_for_backward(input_hp, weight_hp_t), the
 * high-precision input and the weight itself, whichever the recipe: the fp8
 * casts live only inside its forward and backward (in eager mode; what
 * torch.compile's partitioner saves instead is the compile item's). So a
 * converted Linear saves exactly what nn.Linear saves; the casts are
 * transients of the op, derived here phase by phase (docs/method.md, "FP8
 * linears"). docs/method.md derives every term. */
#ifndef EST_FP8_H
#define EST_FP8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "run_desc.h"

/* Bytes alive while one eager cast of n high-precision elements to fp8 runs
 * (_ToFloat8ConstrFunc.forward: tensor_scaled = x.to(fp32) * scale stays
 * referenced while to_fp8_saturated makes x.clamp(...) (fp32) and its
 * .to(float8): 4 + 4 + 1 bytes per element; the fp32 copy of a 16-bit x
 * (4) is gone by then, and tensor_to_amax's torch.abs(x) temporary (2 or 4)
 * is freed before the scale is known). */
#define EST_FP8_CAST_PEAK_BYTES_PER_ELEM 9

const char *est_fp8_name(est_fp8 f);
int est_fp8_parse(const char *s, est_fp8 *out, char *err, size_t errlen);

/* Whether the run's block Linear of din -> dout runs as Float8Linear
 * (accelerate's filter_linear_layers: both dims divisible by 16). */
bool est_fp8_converts(const est_run *run, int64_t din, int64_t dout);

/* The combinations modelled: a card with FP8 tensor cores, bf16 compute, a
 * full fine-tune of a dense model under a framework that models it. */
int est_fp8_validate(const est_run *run, char *err, size_t errlen);

/* Transient bytes of one converted Linear on T token rows beyond what
 * nn.Linear's op keeps (its output, the saved input): the largest of the
 * phases of its forward and of its backward (fp8.c lists them). */
int64_t est_fp8_forward_transient_bytes(est_fp8 f, int64_t T, int64_t din, int64_t dout);
int64_t est_fp8_backward_transient_bytes(est_fp8 f, int64_t T, int64_t din, int64_t dout);
/* The same when FSDP2 gathered the weight in fp8 (--fsdp-float8-all-gather,
 * tensorwise only): the weight arrives as FSDP's Float8TrainingTensor, so no
 * weight cast in forward or backward, and its bytes are FSDP's, not the op's. */
int64_t est_fp8_gathered_forward_transient_bytes(int64_t T, int64_t din, int64_t dout);
int64_t est_fp8_gathered_backward_transient_bytes(int64_t T, int64_t din, int64_t dout);

/* Whether parameter (rows x cols), a Linear weight of the run, is all-gathered
 * in fp8 (--fsdp-float8-all-gather and the Linear converted). */
bool est_fp8_gathers_weight(const est_run *run, int64_t rows, int64_t cols);

/* Elements of one block's converted Linear weights (the seven projections
 * whose dims divide by 16). */
int64_t est_fp8_block_weight_elems(const est_run *run);

#endif
