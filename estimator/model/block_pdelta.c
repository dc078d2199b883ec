/* LoHa, LoKr, OFT, FourierFT and WaveFT on a block Linear (peft_delta.h), op by op
 * as PEFT d787f51 runs them, in the adapters' dtype f (fp32: the harness's
 * autocast_adapter_dtype) on a pure-bf16 base:
 *
 * LoHa, LoKr, FourierFT, WaveFT (LycorisLayer.forward, lycoris_utils.py;
 * loha and lokr Linear._get_delta_activations; FourierFTLinear.forward,
 * WaveFTLinear.forward):
 *   result = base(x)
 *   delta  = get_delta_weight()                d_out x d_in, f
 *   result = result + F.linear(x.to(f), delta) (saves x.to(f) for delta's
 *                                               gradient, delta for x's)
 *   result = result.to(x's dtype)
 * so each adapted Linear keeps a d_out x d_in fp32 delta and a T x d_in
 * fp32 input from its forward to its backward.
 *
 * OFT (oft/layer.py Linear.forward, OFTRotationModule.forward):
 *   x = x.to(f); R = Cayley-Neumann(weight); x = einsum(x, R) (per block of
 *   b: a bmm that saves x and R); reshape (a copy: the einsum's output is
 *   permuted); result = base(x.to(previous dtype))
 * The frozen base saves nothing of its input. */
#include <stdio.h>

#include "block_build.h"
#include "peft_delta.h"

static int param(est_bld *b, int t, const char *stem, const char *what, int64_t rows, int64_t cols) {
    return est_adapter_param(b, t, stem, what, rows, cols, true);
}

void est_pdelta_params(est_bld *b, int t, const char *stem, int64_t din, int64_t dout) {
    const est_run *run = b->run;
    const int64_t r = run->pdelta.rank;
    int *p = b->pdelta[t];
    switch (run->peft) {
    case EST_PEFT_LOHA: /* loha/layer.py create_adapter_parameters, Linear */
        p[0] = param(b, t, stem, "hada_w1_a", dout, r);
        p[1] = param(b, t, stem, "hada_w1_b", r, din);
        p[2] = param(b, t, stem, "hada_w2_a", dout, r);
        p[3] = param(b, t, stem, "hada_w2_b", r, din);
        break;
    case EST_PEFT_LOKR: { /* lokr/layer.py create_adapter_parameters, Linear */
        est_lokr_shape s;
        est_lokr_shape_of(run, din, dout, &s);
        p[0] = param(b, t, stem, "lokr_w1", s.l, s.m);
        if (s.w2_whole) {
            p[1] = param(b, t, stem, "lokr_w2", s.k, s.n);
        } else {
            p[1] = param(b, t, stem, "lokr_w2_a", s.k, r);
            p[2] = param(b, t, stem, "lokr_w2_b", r, s.n);
        }
        break;
    }
    case EST_PEFT_OFT: {
        const int64_t bs = est_oft_block(run, din);
        p[0] = param(b, t, stem, "oft_R.weight", r, bs * (bs - 1) / 2);
        break;
    }
    case EST_PEFT_FOURIERFT: p[0] = param(b, t, stem, "fourierft_spectrum", run->pdelta.n_frequency, 1); break;
    case EST_PEFT_WAVEFT: p[0] = param(b, t, stem, "waveft_spectrum", run->pdelta.n_frequency, 1); break;
    default: break;
    }
}

/* HadaWeight (loha/layer.py), a custom Function saving only its four
 * factors: forward ((w1a @ w1b) * (w2a @ w2b)) * scale holds the two
 * products and theirs (3 d_out x d_in) before the output; backward
 * grad_out * scale, w2a @ w2b, temp, then the second temp beside the first
 * (4). */
static int loha_delta(est_bld *b, int t, int64_t din, int64_t dout) {
    const int f = b->g->adapter;
    const int *p = b->pdelta[t];
    const int16_t in[4] = {(int16_t)p[0], (int16_t)p[1], (int16_t)p[2], (int16_t)p[3]};
    int d = est_module_op(b->m, EST_OP_KERNEL, "loha HadaWeight", dout * din, f, 4, in);
    est_module_kernel_saves(b->m, 0, 0); /* ctx.save_for_backward(w1a, w1b, w2a, w2b, scale) */
    est_mop *o = &b->m->ops[b->m->n_ops - 1];
    o->forward_transient_bytes = 3 * dout * din * f;
    o->backward_transient_bytes = 4 * dout * din * f;
    return d;
}

/* make_kron (lokr/layer.py): torch.kron(w1, w2) (ATen's kron: a broadcast
 * product of w1 (l, 1, m, 1) and w2 (1, k, 1, n), which saves both), then
 * * scale; w2 made first as w2_a @ w2_b when factored (saved by the kron). */
static int lokr_delta(est_bld *b, int t, int64_t din, int64_t dout) {
    const int f = b->g->adapter;
    const int *p = b->pdelta[t];
    int w2 = p[1];
    if (p[2] != EST_NONE) {
        est_lokr_shape s;
        est_lokr_shape_of(b->run, din, dout, &s);
        w2 = est_op2(b, EST_OP_BMM, "lokr w2_a @ w2_b", s.k * s.n, f, p[1], p[2]);
    }
    int kron = est_op2(b, EST_OP_MUL, "lokr torch.kron(w1, w2)", dout * din, f, p[0], w2);
    return est_op1(b, EST_OP_SCALAR, "lokr kron * scale", dout * din, f, kron);
}

/* FourierFTLayer.get_delta_weight: zeros(d_out, d_in) with the spectrum
 * scattered in (index_put_ saves its int64 indices, 2 n), ifft2 of a real
 * input (ATen promotes it to complex64 first, then one c2c transform), .real
 * (a view) * scaling. */
static int fourierft_delta(est_bld *b, int t, int64_t din, int64_t dout) {
    const int f = b->g->adapter;
    int d0 = est_op1(b, EST_OP_KERNEL, "fourierft dense_spectrum", dout * din, f, b->pdelta[t][0]);
    est_module_kernel_saves(b->m, 0, 0);
    int c1 = est_cast(b, "ifft2 input to complex64", d0, 2 * f);
    int c2 = est_op1(b, EST_OP_KERNEL, "torch.fft.ifft2 (c2c)", dout * din, 2 * f, c1);
    est_module_kernel_saves(b->m, 0, 0); /* _fft_c2c's backward is another c2c: nothing saved */
    return est_op1(b, EST_OP_SCALAR, "fourierft .real * scaling", dout * din, f, c2);
}

/* WaveFTLayer.get_delta_weight with use_idwt and db1 (waveft/layer.py,
 * waverec2d.py; db1 pads nothing: WAVELET_REDUCTIONS (0, 0), even sizes):
 * zeros(d_out, d_in) with the valid spectrum scattered in; its four
 * quadrants cA, cH, cV, cD (views) stacked (a copy, d_out d_in); one level of
 * waverec2d: conv_transpose2d(stacked, the 2 x 2 db1 filters, stride 2),
 * whose ConvolutionBackward saves its input and its filters whatever needs a
 * gradient (derivatives.yaml convolution: one formula for input and weight);
 * then * scaling. The quadrants' slice backwards each make a zero-filled
 * d_out/2 x d_in and d_out x d_in gradient before they are summed. */
static int waveft_delta(est_bld *b, int t, int64_t din, int64_t dout) {
    const int f = b->g->adapter;
    int d0 = est_op1(b, EST_OP_KERNEL, "waveft dense_spectrum", dout * din, f, b->pdelta[t][0]);
    est_module_kernel_saves(b->m, 0, 0);
    int st = est_op1(b, EST_OP_COPY, "waveft stack(cA, cH, cV, cD)", dout * din, f, d0);
    b->m->ops[b->m->n_ops - 1].backward_transient_bytes = dout * din * f * 3 / 2;
    int w = est_op1(b, EST_OP_KERNEL, "waveft conv_transpose2d", dout * din, f, st);
    est_module_kernel_saves(b->m, 1u, 0); /* the stacked coefficients (the db1 filters: 16 floats) */
    return est_op1(b, EST_OP_SCALAR, "waveft * scaling", dout * din, f, w);
}

/* A matmul operand as torch.autocast reads it under mixed precision (the
 * HF Trainer's bf16/fp16 with a bf16 base and fp32 adapters): a new
 * compute-dtype copy each call (autocast caches only leaf weights). */
static int autocast_read(est_bld *b, int t, const char *name) {
    return b->g->autocast ? est_cast(b, name, t, b->g->act) : t;
}

/* F.linear(x, delta): the delta is a tensor, not a parameter; under
 * autocast both operands are cast, and the casts are what it saves. */
static int delta_linear(est_bld *b, int x, int delta, int64_t din, int64_t dout) {
    x = autocast_read(b, x, "autocast x");
    delta = autocast_read(b, delta, "autocast delta_weight");
    const int16_t in[2] = {(int16_t)x, (int16_t)delta};
    int y = est_module_op(b->m, EST_OP_LINEAR, "F.linear(x, delta_weight)", b->T * dout,
                          b->m->tensors[x].elem_bytes, 2, in);
    est_module_op_gemm(b->m, (double)b->T, (double)din, (double)dout, 1);
    return y;
}

int est_pdelta_output(est_bld *b, int t, int x, int y, int64_t din, int64_t dout) {
    const est_run *run = b->run;
    if (!est_pdelta_on(run) || b->pdelta[t][0] == EST_NONE || run->peft == EST_PEFT_OFT) return y;
    const int f = b->g->adapter, out_bytes = b->m->tensors[y].elem_bytes;
    int delta = run->peft == EST_PEFT_LOHA     ? loha_delta(b, t, din, dout)
                : run->peft == EST_PEFT_LOKR   ? lokr_delta(b, t, din, dout)
                : run->peft == EST_PEFT_WAVEFT ? waveft_delta(b, t, din, dout)
                                               : fourierft_delta(b, t, din, dout);
    int xf = est_cast(b, "x.to(delta dtype)", x, f); /* _cast_input_dtype / x.to(delta_w.dtype) */
    int dy = delta_linear(b, xf, delta, din, dout);
    const int dyb = b->m->tensors[dy].elem_bytes;
    int sum = est_op2(b, EST_OP_ADD, "result + delta", b->T * dout, dyb > out_bytes ? dyb : out_bytes, y, dy);
    return est_cast(b, "result.to(previous_dtype)", sum, out_bytes);
}

/* OFTRotationModule (oft/layer.py, use_cayley_neumann True and 5 terms, the
 * config's defaults): Q = skew(weight) (zeros, index_put_, Q - Q^T), R =
 * I + 2Q + 2Q^2 + 2Q^3 + Q^4 built in place (add_) from three bmm, each of
 * which saves its operands; the einsum "...rk,rkc->...rc" a bmm over the r
 * blocks saving the fp32 input and R; its output permuted, so reshape copies.
 * Under autocast the einsum's bmm reads compute-dtype copies of both (and its
 * output is cast back to fp32 by .to(required_dtype)); the Cayley bmm are
 * kept fp32 there (r b b elements each). */
int est_pdelta_input(est_bld *b, int t, int x, int64_t din) {
    const est_run *run = b->run;
    if (run->peft != EST_PEFT_OFT || b->pdelta[t][0] == EST_NONE) return x;
    const int f = b->g->adapter, xb = b->m->tensors[x].elem_bytes;
    const int64_t r = run->pdelta.rank, bs = est_oft_block(run, din), rbb = r * bs * bs;
    int xf = est_cast(b, "oft x.to(fp32)", x, f);
    int q = est_op1(b, EST_OP_KERNEL, "oft skew-symmetric Q", rbb, f, b->pdelta[t][0]);
    est_module_kernel_saves(b->m, 0, 0);
    b->m->ops[b->m->n_ops - 1].forward_transient_bytes = rbb * f; /* the zeros index_put_ fills */
    int q2 = est_op2(b, EST_OP_BMM, "oft Q @ Q", rbb, f, q, q);
    int q3 = est_op2(b, EST_OP_BMM, "oft Q^2 @ Q", rbb, f, q2, q);
    int q4 = est_op2(b, EST_OP_BMM, "oft Q^3 @ Q", rbb, f, q3, q);
    const int16_t in[4] = {(int16_t)q, (int16_t)q2, (int16_t)q3, (int16_t)q4};
    int R = est_module_op(b->m, EST_OP_ADD, "oft R (eye.repeat, add_)", rbb, f, 4, in);
    const int xa = autocast_read(b, xf, "autocast x"), Ra = autocast_read(b, R, "autocast R");
    const int rb = b->m->tensors[xa].elem_bytes;
    int rot = est_op2(b, EST_OP_BMM, "oft einsum(x, R)", b->T * din, rb, xa, Ra);
    int flat = est_op1(b, EST_OP_COPY, "oft reshape (copy)", b->T * din, rb, rot);
    flat = est_cast(b, "oft .to(required_dtype)", flat, f);
    return est_cast(b, "oft x.to(previous_dtype)", flat, xb);
}
