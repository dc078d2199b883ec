/* ftrain --dump-grads FILE: the gradients of the first optimizer step as a
 * safetensors file, fp32, under the Hugging Face names that --init reads
 * (init.h), so a test can set them beside PyTorch's for the same weights and
 * tokens (tests/torch/grad_parity.py).
 *
 * What is written is the gradient the optimizer receives at step 1: the
 * gradient of the step's mean loss over all ranks, micro-batches and tokens,
 * after the reduction across ranks and before clipping. Fused tensors are
 * split back into HF's pieces (q|k|v, gate|up); a tied head has no
 * lm_head.weight (its gradient is part of the embedding's, as in PyTorch,
 * where the two names are one parameter). Only the trained blocks (--layers)
 * are written.
 *
 * Each rank copies its own partition (tr_zero_for_partition) into one shared
 * fp32 vector laid out as the full flat parameter vector, so every ZeRO stage
 * dumps the same tensor set; rank 0 then writes it with ft_write_atomic
 * (common/file_io.h): a reader sees no file or the whole file. */
#ifndef TR_GRAD_DUMP_H
#define TR_GRAD_DUMP_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "sizes.h"

/* One fp32 tensor to write. */
typedef struct tr_st_out {
    char name[96];
    int ndim;                   /* 1 or 2 */
    int64_t shape[2];
    const float *data;          /* shape[0] * (ndim == 2 ? shape[1] : 1) values */
} tr_st_out;

/* Writes n tensors as one safetensors file (F32, little-endian, data in the
 * given order, header padded with spaces to a multiple of 8 bytes),
 * atomically. 0, or -1 with one line in err (path named). */
int tr_st_write_f32(const char *path, const tr_st_out *t, int64_t n, char *err, size_t errlen);

/* After the gradient reduction of a step, before the optimizer: copies rank
 * r's reduced gradients, as fp32, to their places in `full` (s.full_numel
 * floats). At ZeRO 0 every rank holds the whole reduced gradient and only
 * rank 0 copies it; at stages 1-3 each rank copies its partition, so the
 * ranks write disjoint ranges. */
void tr_grad_dump_collect(tr_rank *r, float *full);

/* Writes `full` (the layout of tr_sizes s) under HF names to path.
 * 0, or -1 with one line in err. */
int tr_grad_dump_write(const char *path, const tr_sizes *s, const float *full, char *err, size_t errlen);

#endif
