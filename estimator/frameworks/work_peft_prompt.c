/* Bytes per element as the tensors of block_prompt.c hold them: the encoders'
 * fp32 (4), the base's dtype c (the regime's activations). */
#include "work_peft_prompt.h"

#include "peft_prompt.h"

/* Prefix tuning, over E = b N 2 L d_kv elements. Forward (get_prompt): the
 * lookup writes E fp32 (4), the cast reads it and writes c, the 2 L cache
 * copies read and write c each: E (8 + 3c), 2 + 2L launches. Each layer's
 * SDPA converts the boolean mask (b s (N + s) bytes: logical_not and where
 * read 1 + 1, write 1 + c; the pad to 16 reads and writes c): b s (N + s)
 * (3 + 3c) per layer, launches in work.c's attention. Backward: each layer's
 * two SelectBackward zero-fill a (2, b, kv, N, d) buffer and copy in (3c per
 * element of the pair) and add into the split's (3c); SplitBackward's cat
 * (2c), the cast's backward (c + 4), embedding_dense_backward's index_add
 * over E (8) and its zeroed N x 2 L d_kv gradient: E (8c + 12) + 4 N 2 L d_kv,
 * 4L + 4 launches. */
static void prefix(est_step *st, const est_run *run, double b, double s, double c, bool backward) {
    const double N = (double)run->virtual_tokens, L = (double)run->layers_used;
    const double row = 2 * L * (double)est_prefix_token_dim(&run->model), E = b * N * row;
    if (backward) {
        est_step_memory_op(st, E * (8 * c + 12) + N * row * 4, 4 * L + 4);
        return;
    }
    est_step_memory_op(st, E * (8 + 3 * c), 2 + 2 * L);
    est_step_memory_op(st, L * b * s * (N + s) * (3 + 3 * c), 0);
}

/* P-tuning's MLP on N rows (fp32 GEMMs: forward three, backward six, the
 * input's gradient of the first one included: the embedding trains), its
 * ReLUs and biases (N H 4 bytes each way), the repeat over the batch and the
 * cast (b N h (4 + 4 + c)); backward the same bytes again with the
 * embedding's dense gradient (N h 8). */
static void p_tuning(est_step *st, const est_run *run, double b, double c, bool backward) {
    const double N = (double)run->virtual_tokens, h = (double)run->model.hidden_size;
    const double H = (double)run->encoder_hidden, k = backward ? 2 : 1;
    est_step_gemm(st, N, h, H, 4, k, k);
    est_step_gemm(st, N, H, H, 4, k, k);
    est_step_gemm(st, N, H, h, 4, k, k);
    est_step_memory_op(st, k * (4 * N * H * 8 + b * N * h * (8 + c)) + (backward ? N * h * 8 : 0), 8);
}

void est_work_prompt_encoder(est_step *st, const est_run *run, double b, double s, double c, bool backward) {
    if (run->peft == EST_PEFT_PREFIX_TUNING) prefix(st, run, b, s, c, backward);
    if (run->peft == EST_PEFT_P_TUNING) p_tuning(st, run, b, c, backward);
}

/* Adaption prompt per block (block_prompt.c est_adaption_prompt), Sc = b
 * heads s A scores, Hq = b s heads d queries. Forward: the batched matmuls
 * (s x d) @ (d x A) and (s x A) @ (A x d) per (b, head); the keys' and
 * values' repeat and repeat_interleave (b A heads d, 2c each way, twice);
 * RoPE on the queries (x cos 3c, -x2 c, cat 2c, x sin 3c, add 3c: 12c), the
 * division (2c), softmax to fp32 (c + 4), the cast back (4 + c), the gate's
 * product (2c), the transpose-reshape (2c) and the residual add (3c): Sc (6c
 * + 8) + Hq 17c, 15 launches. Backward: four matmuls; the add passes, the
 * reshape (2c), the gate product's two gradients (4c), the cast's (c + 4),
 * softmax's backward (8 + c), the division's (2c), RoPE's (10c): Sc (8c +
 * 12) + Hq 12c, 15 launches. */
void est_work_adaption_block(est_step *st, const est_run *run, double b, double s, double c, bool backward) {
    if (run->peft != EST_PEFT_ADAPTION_PROMPT) return;
    const ft_model *m = &run->model;
    const double A = (double)run->adapter_len, d = (double)m->head_dim, bh = b * (double)m->num_heads;
    const double Sc = bh * s * A, Hq = bh * s * d, k = backward ? 2 : 1;
    est_step_gemm(st, s, d, A, c, k * bh, k);
    est_step_gemm(st, s, A, d, c, k * bh, k);
    if (backward) {
        est_step_memory_op(st, Sc * (8 * c + 12) + Hq * 12 * c, 15);
        return;
    }
    est_step_memory_op(st, Sc * (6 * c + 8) + Hq * 17 * c + 8 * b * A * (double)m->num_heads * d * c, 15);
}
