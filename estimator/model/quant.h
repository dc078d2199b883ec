/* The frozen base's storage under LoRA/QLoRA: the compute dtype, or
 * bitsandbytes' NF4 (4-bit, block-wise absmax) or LLM.int8 (row-wise scales),
 * and the dequantized temporaries a quantized Linear makes in forward and
 * backward. bitsandbytes 0.44-0.45 (functional.py quantize_4bit,
 * nn/modules.py Linear4bit/Linear8bitLt, autograd/_functions.py MatMul4Bit,
 * MatMul8bitLt); docs/method.md ("QLoRA"). */
#ifndef EST_QUANT_H
#define EST_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "params.h"
#include "run_desc.h"

/* NF4 quantizes blocks of 64 weights with one absmax each (quantize_4bit
 * blocksize=64, Linear4bit/Params4bit default); double quantization stores the
 * absmax values as 8-bit codes in blocks of 256 with one fp32 absmax per block
 * and one fp32 offset per tensor (quantize_4bit compress_statistics:
 * quantize_blockwise(absmax - mean, blocksize=256)). */
#define EST_NF4_BLOCK 64
#define EST_NF4_DQ_BLOCK 256

/* Bytes of one weight matrix of n elements (d_out rows) in the run's storage. */
int64_t est_quant_matrix_bytes(const est_run *run, int64_t n, int64_t d_out);

/* The whole frozen base: quantized block linears, everything else (embedding,
 * LM head, norms, biases) in the compute dtype. */
int64_t est_frozen_base_bytes(const est_run *run, const est_params *p);

/* One block's quantization constants (absmax, second-level constants, int8
 * row scales): not parameters, so FSDP does not shard them. */
int64_t est_quant_block_constants_bytes(const est_run *run);

/* Bytes per element of the dtype dequantized weights are computed in. */
int64_t est_quant_compute_bytes(const est_run *run);

/* Largest transient a quantized block makes beyond what it saves: in the
 * forward (NF4: one dequantized weight; int8: the input's fp16 copy, its int8
 * codes and the int32 product) and in the backward (one dequantized weight for
 * the input gradient). 0 without quantization. */
int64_t est_quant_forward_transient(const est_run *run);
int64_t est_quant_backward_transient(const est_run *run);

/* --quant and --compute-dtype against the run (LoRA itself is checked by
 * est_lora_validate); 0 or -1 with one line. */
int est_quant_validate(const est_run *run, char *err, size_t errlen);

#endif
