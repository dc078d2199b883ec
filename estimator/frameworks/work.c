/* The compute of each unit, from the same Hugging Face modeling code
 * (transformers 4.40 modeling_llama.py / qwen2 / mistral) that hf_modeling.c
 * reads for the activation memory; the collectives, offload copies and
 * optimizer steps are in work_parallel.c.
 *
 * Notation: b micro-batch, s sequence, T = b*s tokens, h hidden, f MLP width,
 * q = heads*head_dim, kv = kv_heads*head_dim, V vocabulary, c bytes of the
 * compute dtype, r bytes of the residual stream (4 under autocast). */
#include "work.h"

#include <math.h>
#include <stdlib.h>

#include "block.h"
#include "compile.h"
#include "fw_registry.h"
#include "hf_modeling.h"
#include "host_ops.h"
#include "lora.h"
#include "peft.h"
#include "profiles.h"
#include "quant.h"
#include "work_liger.h"
#include "sac.h"
#include "seam_regime.h"
#include "work_parallel.h"
#include "work_peft.h"
#include "work_peft_prompt.h"
#include "peft_prompt.h"
#include "work_peft_vec.h"
#include "work_fp8.h"
#include "work_ds_host.h"
#include "work_fsdp2.h"
#include "fp8.h"

/* What every emitter of one run needs. */
typedef struct shape {
    double b, s, T, h, f, q, kv, V, c, rb;
    double Ts; /* tokens in the sequence-parallel norms and residuals: T / tp (model/tp.h) */
    bool autocast;
    const est_module *block; /* the block's description as the step runs it; NULL: build it */
} shape;

static shape shape_of(const est_run *run) {
    const ft_model *m = &run->model;
    const est_dtypes d = est_dtypes_of(run);
    shape x = {
        .b = (double)run->micro_batch,
        .s = (double)est_model_positions(run), /* prompt tuning's virtual tokens too */
        .h = (double)m->hidden_size,
        .f = (double)m->intermediate_size,
        .q = (double)(m->num_heads * m->head_dim),
        .kv = (double)(m->num_kv_heads * m->head_dim),
        .V = (double)m->vocab_size,
        .c = (double)d.act,
        .rb = (double)d.resid,
        .autocast = d.autocast,
    };
    x.T = x.b * x.s;
    x.Ts = run->tp > 1 ? x.T / (double)run->tp : x.T;
    if (m->num_experts > 0) x.f = 0; /* no dense MLP: the experts' work is moe_mlp's */
    return x;
}

/* One block's parameters as PyTorch counts them. */
static int64_t block_params(const est_run *run) {
    est_params pp;
    est_run_params(run, &pp);
    return pp.layer.total;
}

static void host(est_step *st, double layer_host_frac, double ops) {
    est_event *e = est_step_add(st, EST_EV_HOST);
    if (e) {
        e->u.host.layer_host_frac = layer_host_frac;
        e->u.host.ops = ops;
    }
}

/* LlamaRMSNorm over `tokens` x `width` as eager PyTorch runs it, kernel by
 * kernel (transformers 4.40-5.17 modeling_llama.py LlamaRMSNorm.forward:
 * h = x.to(fp32); var = h.pow(2).mean(-1); h = h * rsqrt(var + eps);
 * return weight * h.to(input_dtype)); bytes read + written per element of
 * an input of r bytes (the row-sized mean, + eps and rsqrt are not counted):
 *  forward: x.to(fp32) (r + 4, unless r is 4), pow (8), mean (4), h * rsqrt
 *    (8), .to(r) (4 + r, unless r is 4), weight * y (2r): 6 kernels (+2);
 *  backward (torch 2.11 tools/autograd/derivatives.yaml, mul and pow;
 *    FunctionsManual.cpp pow_backward = grad * (2 * self.pow(1))):
 *    weight * y: grad * weight (2r), grad * y (3r) and its sum to the
 *    weight's shape (r); ToCopyBackward of .to(r) (r + 4); h * rsqrt:
 *    grad * h (12), its sum over the row (4), grad * rsqrt (8); mean's
 *    expand / width (write 4); pow's self.pow(1) (8), * 2 (8), grad * (12);
 *    the two gradients of h added (12); ToCopyBackward of x.to(fp32)
 *    (4 + r): 11 kernels over the elements and 3 over the rows (+2). */
static void rmsnorm(est_step *st, double tokens, double width, double rb, double scale) {
    const bool cast = rb != 4;
    const double n = tokens * width;
    if (scale <= 1) {
        const double per = (cast ? rb + 4 : 0) + 8 + 4 + 8 + (cast ? 4 + rb : 0) + 2 * rb;
        est_step_memory_op(st, n * per, 6 + (cast ? 2 : 0));
        return;
    }
    const double per = 6 * rb + (cast ? 4 + rb : 0) + 12 + 4 + 8 + 4 + 8 + 8 + 12 + 12 + (cast ? 4 + rb : 0);
    est_step_memory_op(st, n * per, 14 + (cast ? 2 : 0));
}

/* The bytes of a base projection's output whose input is the block's
 * residual-stream norm (q, k, v, gate, up) or the SwiGLU product (down):
 * the compute dtype's, but a bitsandbytes base returns its input's dtype
 * (0.50.2 nn/modules.py Linear4bit.forward line 637 `.to(inp_dtype)`;
 * MatMul8bitLt's output in A's dtype), fp32 on the HF Trainer's QLoRA
 * stream (prepare_model_for_kbit_training's fp32 norms): RoPE and SwiGLU
 * then run in fp32 (silu and mul are outside autocast's lists). */
static double proj_bytes(const est_run *run, const shape *x) {
    return run->quant != EST_QUANT_NONE && x->rb > x->c ? x->rb : x->c;
}

/* One frozen weight of n elements (d_out rows) dequantized before its GEMM,
 * in every forward and backward, for an input of `a` bytes per element
 * (bitsandbytes 0.50.2; the counts are those of its Python and CUDA ops):
 *  - NF4 (autograd/_functions.py MatMul4Bit.forward and .backward each call
 *    functional.py dequantize_4bit): read the codes and the fp32 absmax,
 *    write the compute-dtype copy, one kernel; with double quantization
 *    (quant_state.nested) the absmax is first made whole by
 *    dequantize_blockwise (read n/64 bytes, write n/64 fp32) and
 *    `absmax += offset` (read and write them): two kernels more.
 *  - LLM.int8 forward (MatMul8bitLt.forward, backends/cuda/ops.py
 *    int8_vectorwise_quant with the default threshold 6.0, default/ops.py
 *    int8_mixed_scaled_mm and int8_scaled_mm): A.to(fp16) (read a, write
 *    2), A.abs() (2, 2), >= threshold (2, 1), outliers.any() (1), the
 *    row-wise quantization (2, 1) per input element; int8_mm_dequant reads the
 *    int32 product and writes A's dtype per output element: six kernels
 *    beside the int8 GEMM, which is priced at the 16-bit rate. (No outlier
 *    columns taken: random weights keep the inputs far below 6.)
 *  - LLM.int8 backward (MatMul8bitLt.backward): CB.to(dtype_A, copy=True)
 *    (read n, write n x a), SCB.unsqueeze(1).mul(1/127) (d_out fp32) and the
 *    in-place .mul_ (read and write n x a): three kernels; grad_A's matmul
 *    then runs in A's dtype (block_gemms). */
static void dequantize(est_step *st, const est_run *run, const shape *x, double din, double dout,
                       double a, bool backward) {
    const double n = din * dout, cq = (double)est_quant_compute_bytes(run);
    if (run->quant == EST_QUANT_INT8) {
        if (!backward)
            est_step_memory_op(st, x->T * din * (a + 13) + x->T * dout * (4 + a), 6);
        else
            est_step_memory_op(st, n * (1 + 3 * a) + dout * 4 * 3, 3);
        return;
    }
    const double blocks = ceil(n / EST_NF4_BLOCK);
    if (run->double_quant) est_step_memory_op(st, blocks * (1 + 4) + blocks * 4 * 2, 2);
    est_step_memory_op(st, ceil(n / 2) + blocks * 4 + n * cq, 1);
}

/* LoRA's elementwise work around one adapted Linear of `T` rows (peft
 * 0.21.2 tuners/lora/layer.py Linear.forward, line 1102: result = result +
 * lora_B(lora_A(dropout(x))) * scaling; bnb.py's Linear4bit the same):
 * forward the scaling, a product by a Python number (read and write T x
 * d_out: 2 passes), and the add into the result (read 2, write 1: 3 passes);
 * backward the scaling's gradient, grad * scaling (MulBackward0: 2 passes
 * over T x d_out; the add's backward passes the gradient on without a
 * kernel), and the add of the adapter's input gradient into the base's (3
 * over T x d_in in the input's dtype, `a` bytes: fp32 on an fp32 residual
 * stream); dropout p > 0 writes the dropped copy and its mask. The
 * base's result is `ro` bytes an element: the compute dtype's under
 * autocast, but a bitsandbytes base returns its input's dtype (0.50.2
 * nn/modules.py Linear4bit.forward `.to(inp_dtype)`, MatMul8bitLt's output
 * in A's dtype): fp32 on QLoRA's fp32 residual stream. Then the add
 * promotes (peft 0.21.2 tuners/lora/bnb.py Linear4bit.forward line 552,
 * Linear8bitLt.forward line 269:
 * `result = result + output`, output bf16 from autocast's lora_B): read ro
 * and c, write ro; in backward AddBackward0 hands `output` an ro gradient
 * that the engine casts to that input's dtype (an aten._to_copy, read ro,
 * write c, one kernel: a TorchDispatchMode log of `r32 + o16 * s` under
 * torch 2.11) before MulBackward0. With ro == c both are the 3c and nothing above. The
 * adapter's four GEMMs are the block description's (block_gemms). */
static void lora_elementwise(est_step *st, const est_run *run, const shape *x, double T, double din,
                             double dout, double a, double ro, bool backward) {
    const double c = x->c, promoted = ro != c ? 1 : 0;
    if (backward) est_step_memory_op(st, T * dout * (2 * c + promoted * (ro + c)) + 3 * T * din * a, 2 + promoted);
    else est_step_memory_op(st, T * dout * (2 * c + 2 * ro + c), 2);
    if (run->lora.dropout > 0) est_step_memory_op(st, T * din * (2 * c + 1), 1);
}

/* The copies of a Linear's input and output that PEFT and bitsandbytes make
 * under the HF Trainer's autocast, for an input of `a` bytes per element;
 * each is a cast in forward and its ToCopyBackward in backward, reading one
 * dtype and writing the other over the same elements:
 *  - NF4 base (bitsandbytes 0.50.2 nn/modules.py Linear4bit.forward):
 *    x.to(compute_dtype) and the output's .to(inp_dtype), when the input is
 *    not already in the compute dtype (the fp32 residual stream's norms and
 *    the fp32 SwiGLU product under prepare_model_for_kbit_training); PEFT's
 *    Linear4bit (tuners/lora/bnb.py, peft 0.21.2) then clones the base's
 *    output before adding the adapter (forward only).
 *  - the adapter's input: PEFT's plain Linear (tuners/lora/layer.py) casts x
 *    to the fp32 adapter's dtype, and autocast casts that to the compute
 *    dtype for lora_A; the bitsandbytes layers hand x to lora_A as it is
 *    (requires_conversion off under autocast), so only autocast's cast of an
 *    fp32 x remains; so does PEFT's plain Linear over an fp32 x (an fp32
 *    base, whose x is already in the fp32 adapter's dtype: autocast casts it
 *    for lora_A apart from the base layer's own cast, both in forward and as
 *    ToCopyBackward: a TorchDispatchMode log of peft 0.21.2 under torch 2.11
 *    autocast shows two casts of x forward, two back and the fp32 add). */
static void autocast_copies(est_step *st, const est_run *run, double T, double din, double dout, double a,
                            double c, bool adapted, bool backward) {
    const bool nf4 = run->quant == EST_QUANT_NF4;
    if (nf4 && a != c) est_step_memory_op(st, T * (din + dout) * (a + c), 2);
    if (nf4 && adapted && !backward) est_step_memory_op(st, 2 * T * dout * a, 1);
    if (!adapted) return;
    const double ad = (double)est_lora_weight_bytes(run);
    if (run->quant == EST_QUANT_NONE && a != ad)
        est_step_memory_op(st, T * din * (a + ad) + T * din * (ad + c), 2);
    else if (a != c) /* autocast's own cast for lora_A: an fp32 x already in the adapter's dtype */
        est_step_memory_op(st, T * din * (a + c), 1);
}

/* One GEMM of a linear (T rows) in forward, or its input and (unless frozen)
 * weight gradients in backward. */
static void linear_gemm(est_step *st, double T, double din, double dout, double c, bool backward,
                        bool frozen) {
    if (!backward) {
        est_step_gemm(st, T, din, dout, c, 1, 1);
        return;
    }
    est_step_gemm(st, T, dout, din, c, 1, 1);
    if (!frozen) est_step_gemm(st, dout, T, din, c, 1, 1);
}

/* LoRA's adapter on one expert's Linear (moe_mlp): forward u = x A^T (T,
 * d_in, r), B (T, r, d_out); backward du = dy B, dB = dy^T u, dA = du^T x
 * (not under LoRA-FA: A frozen), dx += du A. */
static void lora_adapter(est_step *st, const est_run *run, const shape *x, double T, double din, double dout,
                         bool backward) {
    const double r = (double)run->lora.rank, c = x->c;
    if (!backward) {
        est_step_gemm(st, T, din, r, c, 1, 1);
        est_step_gemm(st, T, r, dout, c, 1, 1);
    } else {
        est_step_gemm(st, T, dout, r, c, 1, 1);
        est_step_gemm(st, dout, T, r, c, 1, 1);
        if (est_lora_a_grad(run)) est_step_gemm(st, r, T, din, c, 1, 1); /* not when A is frozen */
        est_step_gemm(st, T, r, din, c, 1, 1);
    }
    lora_elementwise(st, run, x, T, din, dout, c, c, backward);
}

/* A mixture-of-experts MLP as the Transformers modeling code runs it
 * (modeling_mixtral.py MixtralSparseMoeBlock, modeling_qwen2_moe.py
 * Qwen2MoeSparseMoeBlock): the router (T, h, E) and its softmax and top-k over
 * T x E; then expert by expert, the tokens routed to it gathered (index), its
 * gate, up and down GEMMs over them, and the result added back (index_add_).
 * Routing is taken as balanced: each expert sees T * k / E tokens. Qwen2-MoE
 * adds a shared expert over every token and its sigmoid gate (T, h, 1). */
static void moe_mlp(est_step *st, const est_run *run, const shape *x, bool backward) {
    const ft_model *m = &run->model;
    const double E = (double)m->num_experts, k = (double)m->experts_per_token;
    const double fe = (double)m->moe_intermediate_size, T = x->T, c = x->c;
    const double Te = T * k / E;
    linear_gemm(st, T, x->h, E, c, backward, false);
    est_step_memory_op(st, (backward ? 2 : 1) * T * E * 4 * 4, 4); /* softmax, top-k, normalize */
    const bool lora = est_lora_on(run), frozen = est_peft_on(run);
    const uint32_t tg = run->lora.targets;
    for (int64_t e = 0; e < m->num_experts; e++) {
        est_step_memory_op(st, 2 * Te * x->h * c, 1); /* gather the expert's tokens */
        if (run->quant != EST_QUANT_NONE) { /* each expert's three weights, dequantized */
            dequantize(st, run, x, x->h, fe, x->rb, backward);
            dequantize(st, run, x, x->h, fe, x->rb, backward);
            dequantize(st, run, x, fe, x->h, x->rb, backward);
        }
        linear_gemm(st, Te, x->h, fe, c, backward, frozen);
        linear_gemm(st, Te, x->h, fe, c, backward, frozen);
        est_step_memory_op(st, (backward ? 2 : 1) * 5 * Te * fe * c, 2); /* SwiGLU */
        linear_gemm(st, Te, fe, x->h, c, backward, frozen);
        est_step_memory_op(st, 3 * Te * x->h * c, 1); /* index_add_ into the output */
        /* PEFT's adapters on the expert's own Linears, over its rows */
        if (lora && (tg & EST_LORA_BIT(EST_LORA_GATE))) lora_adapter(st, run, x, Te, x->h, fe, backward);
        if (lora && (tg & EST_LORA_BIT(EST_LORA_UP))) lora_adapter(st, run, x, Te, x->h, fe, backward);
        if (lora && (tg & EST_LORA_BIT(EST_LORA_DOWN))) lora_adapter(st, run, x, Te, fe, x->h, backward);
    }
    const double fs = (double)m->shared_expert_intermediate_size;
    if (fs > 0) {
        linear_gemm(st, T, x->h, fs, c, backward, false);
        linear_gemm(st, T, x->h, fs, c, backward, false);
        linear_gemm(st, T, fs, x->h, c, backward, false);
        linear_gemm(st, T, x->h, 1, c, backward, false);
    }
}

/* The block's description in the framework's dtypes (seam_regime.h), as
 * the memory side builds it; NULL when the builder ran out of room (a bug). */
static est_module *block_module(const est_run *run) {
    est_module *m = malloc(sizeof *m);
    char err[160];
    const est_regime g = est_block_regime(run);
    if (m && est_module_block(run, &g, false, m, err, sizeof err) == 0) return m;
    free(m);
    return NULL;
}

/* The parameter a Linear op's weight operand reads: the parameter itself, or
 * the one under autocast's cast or bitsandbytes' dequantization of it, or the
 * one a PEFT delta weight is built from (block_pdelta.c: FourierFT's zeros,
 * complex copy, transform and scaling, and autocast's cast of it: 5 hops). */
static const est_mparam *op_weight(const est_module *m, const est_mop *o) {
    int w = o->n_in > 1 ? o->in[1] : EST_NONE;
    for (int hops = 0; w >= 0 && hops < 6; hops++) {
        const int p = m->tensors[w].producer;
        if (p < 0 || m->ops[p].n_in < 1) return NULL;
        w = m->ops[p].in[0];
    }
    return EST_IS_PARAM(w) ? &m->params[EST_PARAM_INDEX(w)] : NULL;
}

/* One Linear op's GEMMs: forward (M, K, N); in backward its input gradient
 * (M, N, K) when its input needs one and its weight gradient (N, M, K) when
 * the weight trains; `count` launches each, in dtype c. */
static void op_gemms(est_step *st, const est_mop *o, double c, bool trains, bool backward) {
    if (!backward) {
        est_step_gemm(st, o->M, o->K, o->N, c, o->count, o->count);
        return;
    }
    if (o->grad_in[0]) est_step_gemm(st, o->M, o->N, o->K, c, o->count, o->count);
    if (trains) est_step_gemm(st, o->N, o->M, o->K, c, o->count, o->count);
}

/* A base Linear of the block (its weight an nn.Linear weight of a LoRA
 * target) in forward, or in backward: a quantized frozen base dequantized
 * first (every pass), torchao's Float8Linear, then LoRA's elementwise work and
 * PEFT's other methods around it. */
static void base_linear(est_step *st, const est_run *run, const shape *x, const est_mop *o,
                        const est_mparam *w, double c, double a, bool backward) {
    const int t = w->lora_target;
    const double din = (double)w->cols, dout = (double)w->rows;
    if (run->quant != EST_QUANT_NONE) dequantize(st, run, x, din, dout, a, backward);
    const bool amp = est_fw_of(run)->autocast_over_master && est_has_master(run->precision);
    const bool adapted =
        est_lora_on(run) && (run->lora.targets & EST_LORA_BIT(t)) && run->lora.variant != EST_LORA_DORA;
    if (amp && est_lora_on(run)) autocast_copies(st, run, o->M, din, dout, a, x->c, adapted, backward);
    if (est_fp8_converts(run, w->cols, w->rows)) /* torchao Float8Linear: weights fp32 under autocast */
        est_work_fp8_linear(st, run, o->M, din, dout, x->c, x->autocast ? 4 : x->c, backward);
    else
        op_gemms(st, o, c, w->trainable, backward);
    int64_t ain, aout, copies;
    est_adapter_shape(&run->model, (est_lora_target)t, &ain, &aout, &copies);
    if (est_lora_on(run) && (run->lora.targets & EST_LORA_BIT(t)) && ain > 0)
        lora_elementwise(st, run, x, o->M, (double)ain, (double)aout, a, run->quant != EST_QUANT_NONE ? a : x->c,
                         backward);
    est_work_peft_linear(st, run, t, o->M, din, dout, x->c, backward); /* DoRA, IA3 */
}

/* Every GEMM of one block, read from its description (model/block.h, the
 * table that also gives its parameters and saved bytes): each Linear op's
 * (M, K, N) in forward; in backward its input gradient (M, N, K) when the
 * op's input needs one and its weight gradient (N, M, K) when the weight
 * trains. Detached ops (DoRA's weight norm) run no backward. A mixture of
 * experts' MLP is moe_mlp's (routing taken as balanced). */
static void block_gemms(est_step *st, const est_run *run, const shape *x, bool backward) {
    const bool moe = run->model.num_experts > 0;
    est_module *own = x->block ? NULL : block_module(run);
    const est_module *m = x->block ? x->block : own;
    if (!m) {
        st->oom = true; /* the builder ran out of room: a bug, the step is incomplete */
        return;
    }
    for (int j = 0; j < m->n_ops; j++) {
        const est_mop *o = &m->ops[j];
        if (o->kind != EST_OP_LINEAR || (backward && !o->backward)) continue;
        const est_mparam *w = op_weight(m, o);
        if (moe && (!w || w->lora_target < 0 || w->lora_target >= EST_LORA_GATE)) continue;
        const double c = o->out >= 0 ? (double)m->tensors[o->out].elem_bytes : x->c; /* the GEMM's dtype */
        if (w && w->kind == EST_PK_LINEAR_WEIGHT && w->lora_target >= 0) {
            /* LLM.int8's output is in its input's dtype (fp32 under autocast);
             * its int8 GEMM is priced at the 16-bit rate (dequantize), its
             * backward's matmul(grad_output.to(dtype_A), CB) in A's dtype
             * (backward runs outside autocast) */
            double a = o->in[0] >= 0 ? (double)m->tensors[o->in[0]].elem_bytes : x->c;
            if (run->quant == EST_QUANT_NF4 && o->in[0] >= 0) { /* the input before Linear4bit's cast */
                const est_mtensor *xc = &m->tensors[o->in[0]];
                const est_mop *cast = xc->producer >= 0 ? &m->ops[xc->producer] : NULL;
                if (cast && cast->kind == EST_OP_CAST && cast->in[0] >= 0)
                    a = (double)m->tensors[cast->in[0]].elem_bytes;
            }
            const double int8_c = backward ? a : x->c;
            base_linear(st, run, x, o, w, run->quant == EST_QUANT_INT8 ? int8_c : c, a, backward);
            continue;
        }
        op_gemms(st, o, c, w && w->trainable, backward);
    }
    free(own);
    if (moe) moe_mlp(st, run, x, backward);
    est_work_peft_vec_block(st, run, x->T, x->c, backward); /* AdaLoRA, VeRA, MiSS, LN tuning */
}

/* Autocast's casts of the block's w fp32 weights (seven Linears), forward
 * one each (read 4, write c: autocast's weight cache makes it once a
 * forward); backward its ToCopyBackward (read c, write 4) hands AccumulateGrad
 * a new fp32 tensor, which the first micro-batch's .grad takes as it is (the
 * Trainer's zero_grad sets grads to None; torch 2.11
 * autograd/functions/accumulate_grad.h accumulateGrad steals a gradient
 * nothing else holds) and every later one adds in place (read 8, write 4):
 * per micro-batch on average 12 (ga - 1) / ga. */
static void weight_casts(est_step *st, const est_run *run, double w, double c, bool backward) {
    if (!backward) {
        est_step_memory_op(st, w * (4 + c), 7);
        return;
    }
    const double ga = run->grad_accum > 1 ? (double)run->grad_accum : 1, later = (ga - 1) / ga;
    est_step_memory_op(st, w * (c + 4) + later * 12 * w, 7 + 7 * later);
}

/* RoPE on q and k as eager PyTorch runs it (transformers 5.17
 * modeling_llama.py apply_rotary_pos_emb: q * cos + rotate_half(q) * sin,
 * rotate_half = cat(-x2, x1)), per element of q and k (T x (q + kv)) in the
 * compute dtype c against cos/sin of p bytes: the model's cos/sin follow the
 * hidden states' dtype (LlamaRotaryEmbedding.forward's cos.to(x.dtype):
 * fp32 under autocast over fp32 weights, stack.h rope_once_per_forward), the
 * per-layer ones of transformers < 4.45 value_states' (c); the products
 * promote to p.
 *  forward: q * cos (c + p), -x2 (c: half the elements), cat (2c),
 *    * sin (c + p), the add (3p): 5 kernels; when p > c autocast casts the
 *    result to c for attention (p + c), 1 kernel;
 *  backward: that cast's ToCopyBackward (c + p); grad * sin (2p) and its
 *    cast to rotate_half's dtype (p + c, when p > c); -grad (c); the two
 *    SliceBackward of x1 and x2 (at::zeros of the whole, then the half
 *    copied in: 2c each); their add (3c); grad * cos (2p) and its cast
 *    (p + c); the add of the two gradients of q (3c): 9 kernels (+3).
 * Over a bitsandbytes base on an fp32 stream q, k and v themselves are fp32
 * (proj_bytes): the c terms above are q's bytes, no cast back is needed
 * before the product, and autocast casts v for SDPA as well. */
static void rope(est_step *st, const est_run *run, const shape *x, bool backward) {
    const bool shared = run->stack && run->stack->rope_once_per_forward;
    const double c = x->c, qd = proj_bytes(run, x), p = shared && x->rb > qd ? x->rb : qd;
    const bool up = p > c, promote = p > qd;
    const double n = x->T * (x->q + x->kv);
    if (backward)
        est_step_memory_op(st, n * (4 * p + 11 * qd + (up ? p + c : 0) + (promote ? 2 * (p + qd) : 0)),
                           2 * (9 + (up ? 1 : 0) + (promote ? 2 : 0)));
    else
        est_step_memory_op(st, n * (5 * qd + 5 * p + (up ? p + c : 0)), 2 * (5 + (up ? 1 : 0)));
    if (qd > c) /* an fp32 v cast by autocast for SDPA, and its ToCopyBackward */
        est_step_memory_op(st, x->T * x->kv * (qd + c), 1);
    if (!backward && !shared) /* transformers < 4.45: each layer's cos/sin */
        est_step_memory_op(st, 2 * x->s * (double)run->model.head_dim * (4 + c), 2);
}

/* A block's elementwise work before its attention core; `scale` 2 is its
 * backward (read the output gradient and the saved inputs, write the input
 * gradient). */
static void block_elementwise_pre(est_step *st, const est_run *run, const shape *x, double scale) {
    /* the block's RMSNorms over the hidden width: two, or four with Gemma-2's
     * sandwich norms (post-attention and pre/post-feed-forward; block.c) */
    const int norms = run->model.sandwich_norms ? 4 : 2;
    for (int i = 0; i < norms; i++)
        if (!est_work_liger_rmsnorm(st, run, x->T, x->h, x->rb, scale > 1)) rmsnorm(st, x->Ts, x->h, x->rb, scale);
    if (x->autocast) {
        /* autocast casts each Linear's fp32 input (q, k, v, gate, up read the
         * fp32 norm output): forward 5 casts (4 + c each); backward their
         * ToCopyBackward (c + 4 each) and the fp32 gradients of the norm's
         * output added together, two adds for q, k, v and one for gate and
         * up (12 each). Once per forward (its weight cache) autocast casts
         * each weight (weight_casts; not a Float8Linear's: its fp8 cast reads
         * the fp32 weight, work_fp8.c). */
        if (scale > 1) est_step_memory_op(st, x->T * x->h * (5 * (4 + x->c) + 3 * 12), 8);
        else est_step_memory_op(st, 5 * x->T * x->h * (4 + x->c), 5);
        double w = x->h * x->q + 2 * x->h * x->kv + x->q * x->h + 3 * x->h * x->f;
        if (run->fp8 == EST_FP8_NONE) weight_casts(st, run, w, x->c, scale > 1);
    }
    /* Qwen3's and Gemma 3's q_norm and k_norm: an RMSNorm over each head. */
    if (run->model.qk_norm && !est_work_liger_rmsnorm(st, run, x->T, x->q + x->kv, x->c, scale > 1))
        rmsnorm(st, x->T, x->q + x->kv, x->c, scale);
    if (!est_work_liger_rope(st, run, x->T, x->q, x->kv, (double)run->model.head_dim, x->c, scale > 1))
        rope(st, run, x, scale > 1);
    const bool gqa = run->model.num_heads != run->model.num_kv_heads;
    const bool gqa_kernel = run->attention == EST_ATTN_FLASH ||
                            (run->attention == EST_ATTN_SDPA && !run->padding_mask && !est_prefix_tokens(run) &&
                             run->stack && run->stack->sdpa_gqa_unmasked); /* block_kv.c */
    /* prefix tuning's keys and values span N + s rows (peft_prompt.h) */
    const double keys = x->T * (x->s + (double)est_prefix_tokens(run)) / x->s;
    if (gqa && !gqa_kernel) /* repeat_kv materializes K and V per head */
        est_step_memory_op(st, scale * (2 * keys * (x->kv + x->q) * x->c), scale * 2);
    if (est_fw_of(run)->torch_stack && run->stack && run->stack->kv_cache_copies && !run->kv_cache_off &&
        run->checkpointing == EST_CKPT_NONE && scale == 1)
        est_step_memory_op(st, 2 * 2 * keys * x->kv * x->c, 2); /* DynamicLayer's cat copies */
}

/* After the core: the two residual adds, forward residual (rb) + the
 * o_proj / down_proj output (c; Gemma-2's sandwich norm returns
 * type_as(x), c too) into
 * rb, backward the gradient of each fork added (3 rb; AddBackward itself
 * runs no kernel); SwiGLU act(gate) * up over T x f: forward silu (2c) and
 * the product (3c), backward the product's two gradients (3c each) and
 * silu_backward (3c) (torch 2.11 derivatives.yaml mul, silu). Over a
 * bitsandbytes base on an fp32 stream gate, up and down_proj's outputs are
 * fp32 (proj_bytes): SwiGLU's passes in fp32 and the MLP's residual add
 * reading an fp32 down_proj output. */
static void block_elementwise_post(est_step *st, const est_run *run, const shape *x, double scale) {
    est_work_adaption_block(st, run, x->b, x->s, x->c, scale > 1); /* work_peft_prompt.c */
    const double po = proj_bytes(run, x); /* gate, up and down_proj's outputs */
    if (scale > 1) est_step_memory_op(st, 2 * 3 * x->Ts * x->h * x->rb, 2);
    else est_step_memory_op(st, x->Ts * x->h * (4 * x->rb + x->c + po), 2);
    if (x->f > 0 && est_work_liger_glu(st, run, x->T, x->f, x->c, scale > 1)) return;
    if (scale > 1) est_step_memory_op(st, 9 * x->T * x->f * po, 3);
    else est_step_memory_op(st, 5 * x->T * x->f * po, 2);
}

/* Sliding-window layers under flash attention (window_size=(w, 0): each
 * query sees at most w keys; eager and SDPA mask the full square): a causal
 * span of l tokens costs l w - w^2 / 2 of its l^2 / 2 score pairs when l > w.
 * Every block's unit is block 0's, so the share is the layers' mean: global
 * layers 1, local ones the window's share (Gemma-2, Gemma 3). */
static double window_share(const est_run *run, double span) {
    const ft_model *m = &run->model;
    const double w = (double)m->sliding_window, L = (double)m->num_layers;
    if (run->attention != EST_ATTN_FLASH || w <= 0 || span <= w || L <= 0) return 1.0;
    const double local = (span * w - w * w / 2) / (span * span / 2);
    const double g = (double)m->global_layers;
    return (g + (L - g) * local) / L;
}

/* The attention core, forward (`scale` 1, or 2 for eager's backward: four
 * batched GEMMs and the score gradients) or the fused kernels' backward. */
static void attention_core(est_step *st, const est_run *run, const shape *x, bool backward,
                           double scale) {
    const ft_model *m = &run->model;
    if (run->attention == EST_ATTN_EAGER) {
        /* QK^T and PV as batched GEMMs of (s x d) @ (d x s) and (s x s) @ (s x d)
         * per head, one launch each; the scores go through /sqrt(d), + mask,
         * softmax in fp32 and the cast back: (2c) + (3c) + (c+4) + (4+c) bytes
         * per score; the output's transpose(1,2).contiguous(). */
        const double hd = (double)m->head_dim, bh = x->b * (double)m->num_heads;
        est_step_gemm(st, x->s, hd, x->s, x->c, scale * bh, scale);
        est_step_gemm(st, x->s, x->s, hd, x->c, scale * bh, scale);
        est_step_memory_op(st, scale * (bh * x->s * x->s * (7 * x->c + 8)), scale * 4);
        est_step_memory_op(st, scale * (2 * x->T * x->q * x->c), scale);
        return;
    }
    /* SDPA/flash: 4 b s^2 q FLOPs (QK^T and PV), half of them under a causal
     * kernel; an explicit padding mask makes SDPA compute the full square.
     * Forward reads q, k, v and writes o; backward reads q, k, v, o, dO and
     * writes dq, dk, dv. */
    /* prefix tuning: s queries over N + s keys under an explicit mask (peft_prompt.h) */
    const double prefix = (double)est_prefix_tokens(run);
    bool causal = run->attention == EST_ATTN_FLASH || (!run->padding_mask && prefix == 0);
    est_event *e = est_step_add(st, EST_EV_ATTENTION);
    if (!e) return;
    /* Packed rows (flash_attn_varlen_func over cu_seqlens from position_ids,
     * transformers 4.49 _flash_attention_forward): each sample attends
     * causally within itself, so a row of samples l_i costs sum(l_i^2) where
     * an unpacked row costs s^2; sum(l_i^2) = s x packed_sample_len (its
     * length-weighted mean; unknown: s, one sample per row, the bound). */
    const double span = run->packed && run->packed_sample_len > 0 ? (double)run->packed_sample_len : x->s + prefix;
    e->u.attn.flops = 4 * x->b * x->s * span * x->q * (causal ? 0.5 : 1.0) * window_share(run, span);
    e->u.attn.backward = backward;
    if (backward) {
        e->u.attn.bytes = x->T * (4 * x->q + 4 * x->kv) * x->c;
        e->u.attn.kernels = 2;
    } else {
        e->u.attn.bytes = x->T * (2 * x->q + 2 * x->kv) * x->c;
        e->u.attn.kernels = (run->padding_mask || prefix > 0) && run->attention == EST_ATTN_SDPA ? 3 : 1;
    }
}

/* Under torch.compile the elementwise ops run as inductor's fused kernels
 * (compile.h): the bytes of the tensors that must exist in memory, from the
 * block description partitioned as AOTAutograd does; the backward's at twice
 * the forward's, as for eager (its recompute of the cut's far side is fused
 * into it). Returns false when the block has no description (then eager's). */
static bool compiled_elementwise(est_step *st, const est_run *run, double scale) {
    if (!run->compiled) return false;
    est_module *m = block_module(run);
    const bool ok = m && est_compile_partition(m) >= 0;
    if (ok) {
        double kernels = 0;
        const double bytes = est_compile_elementwise_bytes(m, &kernels);
        est_step_memory_op(st, scale * bytes, scale * kernels);
    }
    free(m);
    return ok;
}

/* The ATen ops the host dispatches for one block's forward, or its backward
 * (with the forward again under checkpointing: the recompute runs the
 * block's Python once more), counted from the block description
 * (model/host_ops.h). 0, so that the unit's kernels stand for them, where
 * no PyTorch eager code runs the block: ftrain, torch.compile's graphs. */
static double block_host_ops(const est_run *run, const shape *x, bool backward, bool ckpt) {
    if (!est_fw_of(run)->torch_stack || run->compiled) return 0;
    est_module *own = x->block ? NULL : block_module(run);
    const est_module *m = x->block ? x->block : own;
    if (!m) return 0;
    const est_host_ops h = est_module_host_ops(m);
    free(own);
    return backward ? h.backward + (ckpt ? h.forward : 0) : h.forward;
}

static void block_forward_compute(est_step *st, const est_run *run, const shape *x) {
    block_gemms(st, run, x, false);
    if (compiled_elementwise(st, run, 1)) {
        attention_core(st, run, x, false, 1);
        return;
    }
    block_elementwise_pre(st, run, x, 1);
    attention_core(st, run, x, false, 1);
    block_elementwise_post(st, run, x, 1);
}

/* The recompute of a block under an op-level policy (sac.h): the GEMMs of
 * the ops it does not save, from the block description's own shapes, every
 * elementwise op again, and the attention core when the policy does not save
 * it (flash-attn's kernel, eager). */
static void sac_recompute_compute(est_step *st, const est_run *run, const shape *x) {
    est_module *m = malloc(sizeof *m);
    char err[160];
    const est_regime g = est_block_regime(run);
    if (!m || est_sac_block(run, &g, m, err, sizeof err) < 0) {
        free(m);
        block_forward_compute(st, run, x); /* no description: the whole forward */
        return;
    }
    bool attention_saved = false;
    for (int j = 0; j < m->n_ops; j++) {
        const est_mop *o = &m->ops[j];
        attention_saved |= o->kind == EST_OP_ATTENTION && o->sac_save;
        if (o->kind == EST_OP_LINEAR && !o->sac_save)
            est_step_gemm(st, o->M, o->K, o->N, x->c, o->count, 1);
    }
    free(m);
    if (!attention_saved) attention_core(st, run, x, false, 1); /* eager: its two bmm too */
    block_elementwise_pre(st, run, x, 1);
    block_elementwise_post(st, run, x, 1);
}

/* One decoder block's backward: each GEMM's gradients, the elementwise ops at
 * twice their forward traffic, the attention backward, and the recompute of
 * checkpointing (`ckpt`: this block is checkpointed). */
static void block_backward_compute(est_step *st, const est_run *run, const shape *x, bool ckpt) {
    block_gemms(st, run, x, true);
    if (!compiled_elementwise(st, run, 2)) {
        block_elementwise_pre(st, run, x, 2);
        block_elementwise_post(st, run, x, 2);
    }
    if (run->attention == EST_ATTN_EAGER) attention_core(st, run, x, false, 2);
    else attention_core(st, run, x, true, 1);
    /* DeepSpeed ZeRO copies each gradient into its reduce bucket (or, at
     * stage 3, the contiguous gradient buffer) as the hook fires. */
    if (est_fw_of(run)->zero_grad_copy && run->zero_stage >= 1)
        est_step_memory_op(st, 2 * x->c * (double)block_params(run), 9);
    if (ckpt && run->checkpointing == EST_CKPT_SELECTIVE_OP) sac_recompute_compute(st, run, x);
    else if (ckpt) block_forward_compute(st, run, x);
    else if (run->checkpointing == EST_CKPT_SELECTIVE) attention_core(st, run, x, false, 1);
}

/* log_softmax over rows of V fp32 logits, forward or backward, bytes read +
 * written per element: torch 2.11 aten/src/ATen/native/cuda/SoftMax.cu
 * host_softmax / host_softmax_backward take, for rows longer than 2,048
 * (not the warp softmax) whose potential_register_count is 10 or more
 * (V > 9 x 1,024) and that do not fit sharedMemPerBlock (48 KiB: V >
 * 12,288 fp32), cunn_SoftMaxForward: a pass for the max, one for the sum of
 * exponentials, and the epilogue reading the input again and writing the
 * output (3 reads + 1 write); backward cunn_SoftMaxBackward: the sum of the
 * output gradient, then the epilogue reading it and the output and writing
 * the input gradient (3 + 1). Every vocabulary of the catalog is that long;
 * shorter rows stay in registers or shared memory (forward 1 + 1, backward
 * 2 + 1). */
static double log_softmax_bytes(double V, bool backward) {
    if (V > 12288) return 16;
    return backward ? 12 : 8;
}

/* transformers >= 4.46 shifts the labels, not the logits (stack.h). */
static bool shifts_labels(const est_run *run) { return run->stack && run->stack->loss_shifts_labels; }

/* Final norm, LM head and loss forward (modeling_llama.py
 * LlamaForCausalLM.forward; hf_modeling.c's est_logits_forward for the tensors). */
static void head_forward(est_step *st, const est_run *run, const shape *x) {
    if (!est_work_liger_rmsnorm(st, run, x->T, x->h, x->rb, false)) rmsnorm(st, x->T, x->h, x->rb, 1);
    if (x->autocast) est_step_memory_op(st, x->T * x->h * (4 + x->c) + x->V * x->h * (4 + x->c), 2);
    const double up = x->c == 4 ? 0 : x->c + 4; /* .float() of the logits */
    if (run->loss == EST_LOSS_CCE) { /* Cut Cross-Entropy: the logits GEMM, blockwise (block_kernels.c) */
        est_step_gemm(st, x->T, x->h, x->V, x->c, 1, 1);
        return;
    }
    if (est_work_liger_flce_forward(st, run, x->T, x->h, x->V, x->c, x->rb)) return; /* Liger's (work_liger.h) */
    if (run->loss == EST_LOSS_CHUNKED) {
        /* ftrain's chunked loss: per chunk of ~T/ceil(V/h) rows, the logits
         * GEMM, their fp32 softmax and gradient, and both gradient GEMMs, all
         * inside the forward. */
        double chunks = ceil(x->V / x->h), rows = fmax(1, ceil(x->T / chunks));
        est_step_gemm(st, rows, x->h, x->V, x->c, chunks, chunks);
        est_step_gemm(st, rows, x->V, x->h, x->c, chunks, chunks);
        est_step_gemm(st, x->h, rows, x->V, x->c, chunks, chunks);
        est_step_memory_op(st, x->T * x->V * (up + 12), 4 * chunks);
        return;
    }
    est_step_gemm(st, x->T, x->h, x->V, x->c, 1, 1);
    /* logits.float(), the shifted .contiguous() copy (transformers < 4.46,
     * and only when b > 1: one sequence is already contiguous), log_softmax,
     * nll; or Liger's cross-entropy kernel after the first two. */
    const double shift = !shifts_labels(run) && x->b > 1 ? 8 : 0;
    if (est_work_liger_cross_entropy(st, run, x->T, x->V, false))
        est_step_memory_op(st, x->T * x->V * (up + shift), (up > 0) + (shift > 0));
    else
        est_step_memory_op(st, x->T * x->V * (up + shift + log_softmax_bytes(x->V, false)), (up > 0) + (shift > 0) + 2);
}

/* The loss backward: nll_loss_backward (at::zeros of the fp32 gradient, 4,
 * and the scatter of the targets' rows), log_softmax's (log_softmax_bytes),
 * the shift's SliceBackward (transformers < 4.46: at::zeros, 4, and the
 * slice copied in, 8; the .contiguous() copy's backward runs no kernel),
 * the cast's ToCopyBackward (4 + c). Inside the forward when chunked. */
static void loss_backward(est_step *st, const est_run *run, const shape *x) {
    if (est_work_liger_flce_backward(st, run, x->T, x->h, x->V, x->rb)) return;
    if (run->loss == EST_LOSS_CHUNKED || run->loss == EST_LOSS_CCE) return;
    const double up = x->c == 4 ? 0 : x->c + 4, slice = shifts_labels(run) ? 0 : 12;
    if (est_work_liger_cross_entropy(st, run, x->T, x->V, true)) { /* no nll, no log_softmax */
        if (slice + up > 0) est_step_memory_op(st, x->T * x->V * (slice + up), (slice > 0 ? 2 : 0) + (up > 0));
        return;
    }
    est_step_memory_op(st, x->T * x->V * (4 + log_softmax_bytes(x->V, true) + slice + up), 3 + (slice > 0 ? 2 : 0) + (up > 0));
}

static void head_backward(est_step *st, const est_run *run, const shape *x) {
    /* Cut Cross-Entropy makes the logits again block by block (the filter of
     * negligible blocks, which depends on the data, is not taken) */
    if (run->loss == EST_LOSS_CCE) est_step_gemm(st, x->T, x->h, x->V, x->c, 1, 1);
    if (run->loss != EST_LOSS_CHUNKED) { /* input gradient; LoRA: a frozen head has no weight gradient */
        est_step_gemm(st, x->T, x->V, x->h, x->c, 1, 1);
        if (!est_peft_on(run) || (run->modules_to_save & EST_SAVE_HEAD)) /* a trained head (or its copy) */
            est_step_gemm(st, x->V, x->T, x->h, x->c, 1, 1);
    }
    if (!est_work_liger_rmsnorm(st, run, x->T, x->h, x->rb, true)) {
        rmsnorm(st, x->T, x->h, x->rb, 2);
    }
    if (x->autocast) est_step_memory_op(st, x->V * x->h * (4 + x->c), 1);
}

/* Embedding lookup, and the attention mask built once per forward when used. */
static void embed_forward(est_step *st, const est_run *run, const shape *x) {
    est_step_memory_op(st, x->T * x->h * 2 * x->rb, 1);
    est_work_prompt_encoder(st, run, x->b, x->s, x->c, false); /* work_peft_prompt.c */
    if (run->padding_mask || run->attention == EST_ATTN_EAGER) /* _update_causal_mask */
        est_step_memory_op(st, 3 * x->b * x->s * x->s * x->c, 6);
}

/* Whether the token embedding's weight trains (its module given; without
 * one, as if it did). A frozen weight gets no gradient: autograd records
 * EmbeddingBackward only when an input of the lookup requires grad, and the
 * int64 ids never do (torch 2.x tools/autograd/derivatives.yaml, `embedding`:
 * the only differentiable input is weight), so PEFT's frozen base (LoRA
 * without modules_to_save, IA3, prompt learning) runs no
 * embedding_dense_backward, tied head or not. */
static bool embedding_weight_trains(const est_module *m) {
    if (!m) return true;
    for (int i = 0; i < m->n_params; i++)
        if (m->params[i].kind == EST_PK_EMBEDDING && m->params[i].trainable) return true;
    return false;
}

/* The dense backward: zero the V x h gradient, index_add the token rows. */
static void embed_backward(est_step *st, const est_run *run, const shape *x) {
    est_work_prompt_encoder(st, run, x->b, x->s, x->c, true); /* work_peft_prompt.c */
    if (!embedding_weight_trains(x->block)) return;
    const double g = x->autocast ? 4 : x->c;
    est_step_memory_op(st, x->V * x->h * g + 3 * x->T * x->h * g, 3);
    if (run->model.tied_embeddings) /* added into the head's .grad */
        est_step_memory_op(st, 3 * x->V * x->h * g, 1);
}

void est_work_emit(est_step *st, const est_run *run, const est_constants *k, est_unit unit,
                   int32_t layer) {
    est_work_emit_block(st, run, k, unit, layer, NULL);
}

void est_work_emit_block(est_step *st, const est_run *run, const est_constants *k, est_unit unit,
                         int32_t layer, const est_module *block) {
    /* Every decoder block has the same shapes, so block i does block 0's work
     * (but for the backward when only every N-th block is checkpointed, and
     * under partial training, where blocks differ in what trains). */
    const bool same = (unit == EST_UNIT_BLOCK_FWD || (unit == EST_UNIT_BLOCK_BWD && run->ckpt_every <= 1)) &&
                      run->trainable.n == 0;
    if (same && est_step_unit_repeat(st, unit, layer)) return;
    est_step_unit(st, unit, layer);
    shape x = shape_of(run);
    x.block = block;
    const bool ckpt = est_run_block_checkpointed(run, layer);
    const double layer_host = ckpt ? 1.0 : 0.5;
    switch (unit) {
    case EST_UNIT_EMBED_FWD: embed_forward(st, run, &x); break;
    case EST_UNIT_BLOCK_FWD:
        block_forward_compute(st, run, &x);
        host(st, 0.5, block_host_ops(run, &x, false, false)); /* the framework's host time per
                                                                 block, half in each direction */
        break;
    case EST_UNIT_HEAD_FWD: head_forward(st, run, &x); break;
    case EST_UNIT_LOSS_BWD: loss_backward(st, run, &x); break;
    case EST_UNIT_HEAD_BWD: head_backward(st, run, &x); break;
    case EST_UNIT_BLOCK_BWD:
        block_backward_compute(st, run, &x, ckpt);
        host(st, layer_host, block_host_ops(run, &x, true, ckpt)); /* full checkpointing runs
                                                                     the block's forward hooks again */
        break;
    case EST_UNIT_EMBED_BWD: embed_backward(st, run, &x); break;
    case EST_UNIT_REDUCE: est_work_step_collectives(st, run, k); break;
    case EST_UNIT_OPTIMIZER: est_work_optimizer(st, run, k); break;
    case EST_UNIT_COUNT: break;
    }
    est_work_peft_vec_unit(st, run, unit, x.T, x.h, x.V, x.c); /* trainable tokens' merged weights */
    const double ds_ops = est_ds_host_ops(run, k, unit, block); /* DeepSpeed's hooks and step */
    if (ds_ops > 0) {
        est_event *e = est_step_add(st, EST_EV_HOST);
        if (e) {
            e->u.host.extra_ops = ds_ops;
            e->u.host.waited_ops = est_ds_host_waited_ops(run, k, unit); /* before the step's syncs */
        }
    }
    est_work_fsdp2(st, run, unit, block); /* FSDP2's copies and per-parameter host work */
    est_work_zero3_lanes(st, run, k, unit);
    est_work_tp_lanes(st, run, unit, ckpt);
    est_step_unit_end(st);
}

void est_work_emit_units(est_step *st, const est_run *run, const est_constants *k, unsigned units,
                         int32_t layer) {
    for (int u = 0; u < EST_UNIT_COUNT; u++)
        if (units & EST_UNIT_BIT(u)) est_work_emit(st, run, k, (est_unit)u, layer);
}
