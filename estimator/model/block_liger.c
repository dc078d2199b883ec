/* Liger-Kernel's Triton kernels as ops of the module graph (block_build.h).
 * Each is one custom autograd.Function: it saves exactly what its forward
 * hands ctx.save_for_backward, and several work in place. Sources:
 * linkedin/Liger-Kernel v0.8.2, src/liger_kernel/ops/ (rms_norm.py,
 * rope.py, swiglu.py, geglu.py, cross_entropy.py) and
 * transformers/{rms_norm,swiglu,geglu}.py, monkey_patch.py. */
#include "block_build.h"
#include "liger.h"

/* LigerRMSNormFunction.forward: Y = empty(X.shape, X.dtype) and RSTD =
 * empty(rows, fp32) (casting modes "llama" and "gemma"; the weight's offset
 * 1.0 for Gemma is added inside the kernel); save_for_backward(X, W, RSTD).
 * backward: _dW = empty(sm_count, h, fp32) per SM, summed into dW; dX = dY
 * when in_place (LigerRMSNorm's default; False for Gemma-2 and Gemma 3,
 * whose sandwich norms read dY again: LigerRMSNormForGemma2/3), else a new
 * zeros_like(dY). */
int est_liger_rmsnorm(est_bld *b, const char *name, int x, int weight, int64_t h) {
    const est_mtensor *xt = &b->m->tensors[x];
    const int64_t n = xt->elems, rows = n / h;
    int16_t in[2] = {(int16_t)x, (int16_t)weight};
    int y = est_module_op(b->m, EST_OP_KERNEL, name, n, xt->elem_bytes, 2, in);
    est_module_op_out2(b->m, "rstd fp32", rows, 4);
    est_module_kernel_saves(b->m, 3u, 2u);
    est_mop *o = &b->m->ops[b->m->n_ops - 1];
    o->grad_from_out[0] = !b->run->model.sandwich_norms;
    o->backward_transient_bytes = (int64_t)(b->run->gpu.sms > 0 ? b->run->gpu.sms : 1) * h * 4;
    return y;
}

/* LigerRopeFunction.forward: rope_forward transposes q (b, heads, s, d) back
 * to its storage (b, s, heads, d), which q_proj's output already is, so
 * .contiguous() is no copy and the Triton kernel rotates q and k where they
 * lie; save_for_backward(cos, sin). Its backward rotates dq and dk where they
 * lie too: no tensor is made in either direction. */
void est_liger_rope(est_bld *b, int q, int k, int cos, int sin) {
    int16_t in[4] = {(int16_t)q, (int16_t)k, (int16_t)cos, (int16_t)sin};
    est_module_op(b->m, EST_OP_KERNEL, "liger rope (in place)", 0, 0, 4, in);
    est_module_kernel_saves(b->m, 12u, 0u);
    est_mop *o = &b->m->ops[b->m->n_ops - 1];
    o->in_place = true;
    o->grad_in[0] = o->grad_in[1] = false;
}

/* LigerSiLUMulFunction / LigerGELUMulFunction.forward(a, b): c =
 * empty_like(a) = act(a) * b; save_for_backward(a, b). The backward
 * recomputes act(a) from a and writes da into a's storage and db into b's
 * (swiglu_backward returns a, b): no gradient tensor is made. Phi-3's
 * LigerPhi3SwiGLUMLP chunks gate_up_proj's output in two, and
 * @ensure_contiguous copies each non-contiguous half first. */
int est_liger_glu(est_bld *b, int gate, int up) {
    const est_mtensor *g = &b->m->tensors[gate];
    const int64_t n = b->T * b->run->model.intermediate_size;
    const int c = g->elem_bytes;
    if (gate == up) { /* the two halves of one tensor */
        gate = est_op1(b, EST_OP_COPY, "gate.contiguous()", n, c, gate);
        up = est_op1(b, EST_OP_COPY, "up.contiguous()", n, c, up);
    }
    const bool gelu = b->run->model.activation == FT_ACT_GELU_TANH;
    int16_t in[2] = {(int16_t)gate, (int16_t)up};
    int out = est_module_op(b->m, EST_OP_KERNEL, gelu ? "liger geglu" : "liger swiglu", n, c, 2, in);
    est_module_kernel_saves(b->m, 3u, 2u);
    est_mop *o = &b->m->ops[b->m->n_ops - 1];
    o->grad_into_saved[0] = o->grad_into_saved[1] = true;
    return out;
}

/* LigerCrossEntropyFunction.forward(_input = the fp32 logits, ...): the
 * Triton kernel computes each row's loss and writes the row's gradient into
 * _input itself; loss_1d (rows, the input's dtype) is summed into the loss;
 * save_for_backward(_input.detach()). backward: with a scalar grad_output
 * the gradient is scaled in place (element_mul_kernel) and _input returned:
 * no tensor is made. */
int est_liger_cross_entropy(est_bld *b, int logits) {
    const est_mtensor *l = &b->m->tensors[logits];
    const int64_t rows = l->elems / b->run->model.vocab_size;
    int16_t in[1] = {(int16_t)logits};
    int loss = est_module_op(b->m, EST_OP_KERNEL, "liger cross-entropy", 1, 4, 1, in);
    est_mop *o = &b->m->ops[b->m->n_ops - 1];
    o->forward_transient_bytes = rows * l->elem_bytes; /* loss_1d */
    est_module_kernel_saves(b->m, 1u, 0u);
    o->grad_into_saved[0] = true;
    return loss;
}
