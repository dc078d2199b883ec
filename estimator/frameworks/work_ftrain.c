/* ftrain's CPU kernels as events of the step (work_ftrain.h). Each event is
 * one call of trainer/step.c, model.c or optim.c (ftrain 0.1); a tagged
 * memory op counts the elements its kernel works on (cpu_device.h) and, for
 * the record, the bytes it reads and writes. */
#include "work_ftrain.h"

#include <math.h>

#include "cpu_device.h"
#include "work.h"
#include "work_ftrain_cuda.h"

/* One kernel call over `elems` elements touching `bytes_per_elem` each. */
static void kop(est_step *st, est_cpu_kernel k, double elems, double bytes_per_elem) {
    est_step_kernel_op(st, (int32_t)k, elems, elems * bytes_per_elem);
}

/* The attention core, forward or backward (ops_attn_*.c). Flash: one fused
 * kernel, 4 B T^2 q / 2 FLOPs forward (causal). Eager: its products as the
 * batched GEMMs the CPU device's eager rate is measured against (QK^T and PV
 * per head forward, twice as many backward). CUDA: its thread-per-row
 * kernels (work_ftrain_cuda.h). */
static void attention(est_step *st, const est_ftrain_shape *x, bool backward) {
    if (x->cuda) {
        est_work_ftrain_cuda_attention(st, x->B, x->T, x->nh, x->nkv, x->hd, x->eager, backward);
        return;
    }
    if (x->eager) {
        const double bh = x->B * x->nh, n = backward ? 2 : 1;
        est_step_gemm(st, x->T, x->hd, x->T, x->cd, n * bh, n);
        est_step_gemm(st, x->T, x->T, x->hd, x->cd, n * bh, n);
        return;
    }
    est_event *e = est_step_add(st, EST_EV_ATTENTION);
    if (!e) return;
    e->u.attn.flops = 4 * x->B * x->T * x->T * x->qd * 0.5;
    e->u.attn.backward = backward;
    e->u.attn.bytes = x->BT * (backward ? 4 * x->qd + 4 * x->kvd : 2 * x->qd + 2 * x->kvd) * x->cd;
    e->u.attn.kernels = 1;
}

/* tr_step_block_fwd: `recompute` (full checkpointing's backward) stops
 * after SwiGLU. */
static void block_forward(est_step *st, const est_ftrain_shape *x, bool recompute) {
    const double T = x->BT, c = x->cd;
    kop(st, EST_CPU_K_RMSNORM_FWD, T * x->h, 2 * c);
    est_step_gemm(st, T, x->h, x->qkvd, c, 1, 1);
    kop(st, EST_CPU_K_ROPE_FWD, T * (x->nh + x->nkv) * x->hd, 2 * c);
    attention(st, x, false);
    est_step_gemm(st, T, x->qd, x->h, c, 1, 1);
    kop(st, EST_CPU_K_ADD, T * x->h, 3 * c);
    kop(st, EST_CPU_K_RMSNORM_FWD, T * x->h, 2 * c);
    est_step_gemm(st, T, x->h, 2 * x->I, c, 1, 1);
    kop(st, EST_CPU_K_SWIGLU_FWD, T * x->I, 3 * c);
    if (recompute) return;
    est_step_gemm(st, T, x->I, x->h, c, 1, 1);
    kop(st, EST_CPU_K_ADD, T * x->h, 3 * c);
}

/* A linear layer's backward (tr_cpu_matmul_bwd): the input's gradient and
 * the weight's, each as many FLOPs as the forward. */
static void linear_backward(est_step *st, const est_ftrain_shape *x, double rows, double in, double out) {
    est_step_gemm(st, rows, out, in, x->cd, 1, 1);
    est_step_gemm(st, out, rows, in, x->cd, 1, 1);
}

/* model.c's backward of one block: the recompute its checkpointing needs,
 * then tr_step_block_bwd. */
static void block_backward(est_step *st, const est_ftrain_shape *x) {
    const double T = x->BT, c = x->cd;
    if (x->full) block_forward(st, x, true);
    if (x->sel) attention(st, x, false);
    linear_backward(st, x, T, x->I, x->h);
    kop(st, EST_CPU_K_SWIGLU_BWD, T * x->I, 5 * c);
    linear_backward(st, x, T, x->h, 2 * x->I);
    kop(st, EST_CPU_K_RMSNORM_BWD, T * x->h, 4 * c);
    linear_backward(st, x, T, x->qd, x->h);
    attention(st, x, true);
    kop(st, EST_CPU_K_ROPE_BWD, T * (x->nh + x->nkv) * x->hd, 2 * c);
    linear_backward(st, x, T, x->h, x->qkvd);
    kop(st, EST_CPU_K_RMSNORM_BWD, T * x->h, 4 * c);
}

/* tr_step_loss: the final norm, the residual gradient zeroed, then per chunk
 * of logits_rows rows the logits, the loss, its gradient in place and both
 * of the head's gradients; the final norm's backward. */
static void loss(est_step *st, const est_ftrain_shape *x) {
    const double T = x->BT, c = x->cd, chunks = ceil(T / x->logits_rows), rows = T / chunks;
    kop(st, EST_CPU_K_RMSNORM_FWD, T * x->h, 2 * c);
    kop(st, EST_CPU_K_ZERO, T * x->h * c, 1);
    est_step_gemm(st, rows, x->h, x->V, c, chunks, chunks);
    kop(st, EST_CPU_K_CE_FWD, T * x->V, c);
    kop(st, EST_CPU_K_CE_BWD, T * x->V, 2 * c);
    est_step_gemm(st, rows, x->V, x->h, c, chunks, chunks);
    est_step_gemm(st, x->V, rows, x->h, c, chunks, chunks);
    kop(st, EST_CPU_K_RMSNORM_BWD, T * x->h, 4 * c);
}

/* tr_optimizer_step: the rank's share of the gradient norm, the update (on
 * the host under offload, between the gradients' download and the weights'
 * upload), the gradient buffer zeroed. */
static void optimizer(est_step *st, const est_ftrain_shape *x) {
    const double n = x->opt_numel;
    kop(st, EST_CPU_K_SUMSQ, x->sumsq_numel, x->cd);
    if (x->offload) kop(st, EST_CPU_K_CONVERT, n, x->cd + 4);
    if (x->adam) kop(st, EST_CPU_K_ADAMW, n, 16 + x->cd + 4);
    else kop(st, EST_CPU_K_SGD, n, 8 + x->cd);
    if (x->offload && !x->off_par) kop(st, EST_CPU_K_CONVERT, n, 4 + x->cd);
    kop(st, EST_CPU_K_ZERO, x->grads_bytes, 1);
}

void est_work_ftrain(est_step *st, const est_run *run, const est_constants *k, const est_ftrain_shape *x,
                         est_unit unit, int32_t layer) {
    if (unit == EST_UNIT_REDUCE) {
        est_work_emit(st, run, k, unit, layer);
        return;
    }
    if (unit == EST_UNIT_BLOCK_FWD || unit == EST_UNIT_BLOCK_BWD)
        if (est_step_unit_repeat(st, unit, layer)) return; /* every block does block 0's work */
    est_step_unit(st, unit, layer);
    switch (unit) {
    case EST_UNIT_EMBED_FWD: kop(st, EST_CPU_K_EMBED_FWD, x->BT * x->h, 2 * x->cd); break;
    case EST_UNIT_BLOCK_FWD: block_forward(st, x, false); break;
    case EST_UNIT_HEAD_FWD: loss(st, x); break;
    case EST_UNIT_BLOCK_BWD: block_backward(st, x); break;
    case EST_UNIT_EMBED_BWD: kop(st, EST_CPU_K_EMBED_BWD, x->BT * x->h, 3 * x->cd); break;
    case EST_UNIT_LOSS_BWD: /* empty: inside the loss unit */
    case EST_UNIT_HEAD_BWD: break;
    case EST_UNIT_OPTIMIZER: optimizer(st, x); break;
    default: break;
    }
    est_step_unit_end(st);
}
