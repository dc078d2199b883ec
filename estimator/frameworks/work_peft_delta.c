/* The work of LoHa, LoKr, OFT and FourierFT on one adapted Linear
 * (work_peft_delta.h), beside the GEMMs the block description already gives
 * (the delta's F.linear(x.to(fp32), delta), fp32: work.c block_gemms). The
 * ops are block_pdelta.c's; bytes are read + written per element, f = 4 for
 * the fp32 adapters and c for the activations. */
#include "work_peft_delta.h"

#include "lora.h"
#include "peft_delta.h"

/* A host sync inside the block's forward (timing.c est_pipeline_unit_s):
 * `waited` ATen ops issued after it before the device has work again (the
 * device idles through them), `extra` of them beyond the ops the block
 * description holds. */
static void host_sync(est_step *st, double waited, double extra) {
    est_event *e = est_step_add(st, EST_EV_HOST);
    if (!e) return;
    e->u.host.waits = true;
    e->u.host.waited_ops = waited;
    e->u.host.extra_ops = extra;
}

/* Over the tokens, LoHa/LoKr/FourierFT (lycoris_utils.py and fourierft
 * forward): forward x.to(fp32) (c + 4 per input element), result + delta
 * output (c + 4 read, 4 written) and .to(dtype) (4 + c): T (d_in (c + 4) +
 * d_out (2c + 12)), 3 kernels. Backward: the output cast's (c + 4), the add's
 * fp32 gradient cast for the bf16 base branch (4 + c), x.to(fp32)'s (4 + c)
 * and its sum into x's gradient (3c): T (d_out (2c + 8) + d_in (4c + 4)). */
static void token_side(est_step *st, double T, double din, double dout, double c, bool backward) {
    if (backward)
        est_step_memory_op(st, T * (dout * (2 * c + 8) + din * (4 * c + 4)), 4);
    else
        est_step_memory_op(st, T * (din * (c + 4) + dout * (2 * c + 12)), 3);
}

/* HadaWeight (loha/layer.py): forward w1a @ w1b and w2a @ w2b (d_out, r,
 * d_in), their product (8 read, 4 written) and * scale (4, 4): 20 per delta
 * element, 2 kernels. Backward: grad_out * scale (8), both products again,
 * two temps (12 each), and the four factor gradients (temp @ w1b.T: d_out x
 * d_in x r; w1a.T @ temp: r x d_out x d_in; twice): 32 per element. */
static void loha(est_step *st, double r, double din, double dout, bool backward) {
    est_step_gemm(st, dout, r, din, 4, 2, 2);
    if (!backward) {
        est_step_memory_op(st, dout * din * 20, 2);
        return;
    }
    est_step_gemm(st, dout, din, r, 4, 2, 2);
    est_step_gemm(st, r, dout, din, 4, 2, 2);
    est_step_memory_op(st, dout * din * 32, 3);
}

/* make_kron (lokr/layer.py): forward w2_a @ w2_b (k, r, n) when factored,
 * torch.kron's broadcast product (writes 4; its small operands stay in
 * cache) and * scale (8): 12 per element, 2 kernels. Backward: * scale (8),
 * the product's two gradients (grad * other operand, 8 each, then a sum to
 * the operand's shape, 4 each): 32 per element, 5 kernels; w2's factors'
 * gradients (k x n x r, r x k x n). */
static void lokr(est_step *st, const est_run *run, double din, double dout, bool backward) {
    est_lokr_shape s;
    est_lokr_shape_of(run, (int64_t)din, (int64_t)dout, &s);
    const double r = (double)run->pdelta.rank;
    if (!backward) {
        if (!s.w2_whole) est_step_gemm(st, (double)s.k, r, (double)s.n, 4, 1, 1);
        est_step_memory_op(st, dout * din * 12, 2);
        return;
    }
    if (!s.w2_whole) {
        est_step_gemm(st, (double)s.k, (double)s.n, r, 4, 1, 1);
        est_step_gemm(st, r, (double)s.k, (double)s.n, 4, 1, 1);
    }
    est_step_memory_op(st, dout * din * 32, 5);
}

/* FourierFTLayer.get_delta_weight: forward zeros (4), index_put_ (n),
 * .to(complex64) (4 + 8), ifft2 as one pass per dimension over the complex
 * array (cuFFT: 2 x (8 + 8)), .real * scaling (8 + 4): 60 per element, 6
 * kernels. Backward: * scaling (8), .real's gradient made complex (4 + 8),
 * the c2c transform (32), the complex gradient's real part (8 + 4): 64, 5
 * kernels. cuFFT's work area and plan are not counted (docs/method.md).
 * self.indices is a plain dict, which _move_adapter_to_device_of_base_layer
 * (tuners_utils.py) skips: every forward copies the indices from pageable
 * host memory (indices.to(spectrum.device)), a blocking copy after which
 * the host waits for the device (torch's copy_kernel_cuda synchronizes the
 * stream unless non_blocking). After it the host issues zeros, two
 * index views of two ops each, spectrum.float() and index_put_ (7 ops, 6
 * beyond the description's one) before the transform gives the device work. */
static void fourierft(est_step *st, double din, double dout, bool backward) {
    est_step_memory_op(st, dout * din * (backward ? 64 : 60), backward ? 5 : 6);
    if (!backward) host_sync(st, 7, 6);
}

/* OFTRotationModule.forward (oft/layer.py), b = d_in / r: x.to(fp32) (c +
 * 4), the einsum's bmm (T, b, b) x r in one launch, the reshape's copy (8),
 * .to(dtype) (4 + c): T d_in (2c + 16), 3 kernels. The Cayley-Neumann R:
 * three bmm (b, b, b) x r, and about 17 passes of 4 bytes over r b b (zeros,
 * index_put_, Q - Q^T, eye().repeat, four add_) in 9 kernels. Backward: the
 * bmm's two gradients (T, b, b) and (b, T, b) x r, the two casts (c + 4
 * each) and x's gradient sum (3c): T d_in (5c + 8); R's bmm gradients (6),
 * the adds' and the skew's gradients (r b b, 16 passes, 8 kernels). */
static void oft(est_step *st, const est_run *run, double T, double din, double c, bool backward) {
    const double r = (double)run->pdelta.rank, b = (double)est_oft_block(run, (int64_t)din);
    if (!backward) {
        est_step_gemm(st, T, b, b, 4, r, 1);
        est_step_memory_op(st, T * din * (2 * c + 16), 3);
        est_step_gemm(st, b, b, b, 4, 3 * r, 3);
        est_step_memory_op(st, r * b * b * 4 * 17, 9);
        return;
    }
    est_step_gemm(st, T, b, b, 4, r, 1);
    est_step_gemm(st, b, T, b, 4, r, 1);
    est_step_memory_op(st, T * din * (5 * c + 8), 3);
    est_step_gemm(st, b, b, b, 4, 6 * r, 6);
    est_step_memory_op(st, r * b * b * 4 * 16, 8);
}

/* WaveFTLayer.get_delta_weight (use_idwt, db1): forward zeros (4), the
 * valid spectrum's index_put_ (n), stack of the quadrants (4 + 4),
 * conv_transpose2d with 2 x 2 filters at stride 2 (each output element from
 * one input element: 4 + 4), * scaling (4 + 4): 28 per element, 5 kernels.
 * Backward: * scaling (8), the transposed convolution's input gradient (a
 * strided conv2d: 8), the stack's four slices' gradients (zeros of half and
 * of the whole, each filled with its quadrant: 12 per element over the four)
 * and their sum into one (three in-place adds, 12 each over the whole: 36):
 * 64 per element, 15 kernels. Per forward the host waits for the device
 * seven times: the CPU indices' pageable copy (waveft_indices is a plain
 * dict, as FourierFT's), two boolean-mask indexings (nonzero) and the four
 * filters' .to(device) (waverec2d.py _get_filter_tensors, flip False). The
 * ATen ops from the first sync to conv_transpose2d, as the source issues
 * them: clone 1; two `padded_indices[i, :] += offset` (getitem, add_,
 * setitem: 6 each); the mask (4 views, 2 comparisons, &: 7); two mask
 * indexings (3 + 2); zeros 1 and index_put_ with its views 5; the quadrants'
 * slices 8; waverec2d's unsqueezes 4, the filters (4 tensors, 4 copies: 8),
 * _construct_2d_filt (4 outer products of 5 ops, stack, unsqueeze: 22), the
 * stack 1 and the transposed convolution 1: 75, 72 beyond the description's
 * 3; after it two squeezes (not waited for). */
static void waveft(est_step *st, double din, double dout, bool backward) {
    est_step_memory_op(st, dout * din * (backward ? 64 : 28), backward ? 15 : 5);
    if (!backward) host_sync(st, 75, 74);
}

void est_work_pdelta_linear(est_step *st, const est_run *run, int t, double T, double din, double dout,
                            double c, bool backward) {
    if (!est_pdelta_on(run) || t < 0 || !(run->pdelta.targets & EST_LORA_BIT(t))) return;
    switch (run->peft) {
    case EST_PEFT_LOHA: loha(st, (double)run->pdelta.rank, din, dout, backward); break;
    case EST_PEFT_LOKR: lokr(st, run, din, dout, backward); break;
    case EST_PEFT_FOURIERFT: fourierft(st, din, dout, backward); break;
    case EST_PEFT_WAVEFT: waveft(st, din, dout, backward); break;
    case EST_PEFT_OFT: oft(st, run, T, din, c, backward); return;
    default: return;
    }
    token_side(st, T, din, dout, c, backward);
}
