/* PEFT's methods whose forward builds a dense weight, or a rotation of the
 * input, per adapted Linear on every call (peft 0.19.2.dev0 at d787f51, the
 * harness's commit; docs/method.md "PEFT methods: a weight per call"):
 *
 *  - LoHa (tuners/loha/layer.py): hada_w1_a, hada_w2_a (d_out, r) and
 *    hada_w1_b, hada_w2_b (r, d_in); HadaWeight.forward makes
 *    ((w1a @ w1b) * (w2a @ w2b)) * scale, a d_out x d_in fp32 delta, and
 *    _get_delta_activations runs F.linear(x.to(fp32), delta) beside the base.
 *  - LoKr (tuners/lokr/layer.py): factorization(d, decompose_factor) splits
 *    d_out = l k and d_in = m n; lokr_w1 (l, m) whole (decompose_both False),
 *    lokr_w2 (k, n) whole when r >= max(k, n) / 2, else lokr_w2_a (k, r) @
 *    lokr_w2_b (r, n); make_kron(w1, w2, scale) = torch.kron(w1, w2) * scale,
 *    then F.linear(x.to(fp32), delta).
 *  - OFT (tuners/oft/layer.py): weight (r, b (b - 1) / 2) with b = d_in / r;
 *    OFTRotationModule.forward rotates the fp32 input block by block with the
 *    Cayley-Neumann R (5 terms: three bmm of (r, b, b)) through an einsum,
 *    and the base Linear runs on the rotated input cast back.
 *  - FourierFT (tuners/fourierft/layer.py): fourierft_spectrum (n_frequency);
 *    get_delta_weight scatters it into a d_out x d_in fp32 zeros,
 *    torch.fft.ifft2 (complex64), .real * scaling, then F.linear(x.to(fp32),
 *    delta).
 *  - WaveFT (tuners/waveft/layer.py, waverec2d.py; db1, use_idwt):
 *    waveft_spectrum (n_frequency) scattered into zeros, its quadrants stacked,
 *    one conv_transpose2d (which saves the stack), * scaling, then as LoHa. */
#ifndef EST_PEFT_DELTA_H
#define EST_PEFT_DELTA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "run_desc.h"

/* The run trains LoHa, LoKr, OFT, FourierFT or WaveFT. */
bool est_pdelta_on(const est_run *run);

/* PEFT's lokr/layer.py factorization(dimension, factor): dimension = m n,
 * m <= n; factor -1 searches divisors up from 1 while m + n shrinks. */
void est_pdelta_factorization(int64_t dimension, int64_t factor, int64_t *m, int64_t *n);

/* LoKr on a d_out x d_in Linear: w1 (l, m), w2 (k, n) or its factors. */
typedef struct est_lokr_shape {
    int64_t l, k, m, n; /* d_out = l k, d_in = m n */
    bool w2_whole;      /* lokr_w2 (k, n); else lokr_w2_a (k, r), lokr_w2_b (r, n) */
} est_lokr_shape;
void est_lokr_shape_of(const est_run *run, int64_t din, int64_t dout, est_lokr_shape *s);

/* OFT's block size b = d_in / r. */
int64_t est_oft_block(const est_run *run, int64_t din);

/* Trainable elements and tensors the method adds to one adapted Linear. */
int64_t est_pdelta_linear_params(const est_run *run, int64_t din, int64_t dout);
int est_pdelta_linear_tensors(const est_run *run);
/* Over one block's targets (every target's own shape). */
int64_t est_pdelta_block_params(const est_run *run);
int est_pdelta_block_tensors(const est_run *run);

/* The method's settings against the model: 0, or -1 with one line. */
int est_pdelta_validate(const est_run *run, char *err, size_t errlen);

/* "LoHa r32 on q,v" and the like (report and check_records' row label). */
void est_pdelta_label(const est_run *run, char *buf, size_t n);

/* The block builder's hooks (block_pdelta.c): the method's parameters on
 * Linear t, the input the base reads (OFT's rotation), and the base output
 * plus the delta's F.linear (LoHa, LoKr, FourierFT, WaveFT). */
struct est_bld;
void est_pdelta_params(struct est_bld *b, int t, const char *stem, int64_t din, int64_t dout);
int est_pdelta_input(struct est_bld *b, int t, int x, int64_t din);
int est_pdelta_output(struct est_bld *b, int t, int x, int y, int64_t din, int64_t dout);

#endif
