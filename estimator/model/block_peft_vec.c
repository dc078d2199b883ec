/* The ops of AdaLoRA, VeRA, MiSS and LN tuning in a decoder block (peft
 * d787f51; peft_vec.h). PEFT's method comparison keeps adapters in fp32
 * (autocast_adapter_dtype), so every adapter tensor below is fp32 (4 bytes)
 * while the base runs in the block's dtype. */
#include "block_peft_vec.h"

#include <stdio.h>

#include "peft_vec.h"

static int param(est_bld *b, const char *stem, const char *what, int64_t rows, int64_t cols, int t, bool trains) {
    return est_adapter_param(b, t, stem, what, rows, cols, trains);
}

void est_vec_params(est_bld *b, int t, const char *stem, int64_t din, int64_t dout) {
    const est_run *run = b->run;
    const int64_t r = run->vec.rank;
    b->vec[t][0] = b->vec[t][1] = b->vec[t][2] = b->vec[t][3] = EST_NONE;
    if (!est_peft_vec_targets_linear(run, t)) return;
    switch (run->peft) {
    case EST_PEFT_ADALORA: /* adalora/layer.py 69-73: lora_A, lora_E, lora_B */
        b->vec[t][0] = param(b, stem, "lora_A", r, din, t, true);
        b->vec[t][1] = param(b, stem, "lora_E", r, 1, t, true);
        b->vec[t][2] = param(b, stem, "lora_B", dout, r, t, true);
        break;
    case EST_PEFT_VERA: /* vera/layer.py update_layer: lambda_b (d_out), lambda_d (r) */
        b->vec[t][0] = param(b, stem, "vera_lambda_d", r, 1, t, true);
        b->vec[t][1] = param(b, stem, "vera_lambda_b", dout, 1, t, true);
        break;
    case EST_PEFT_PVERA: /* pvera/layer.py 100-101: lambda_b (d_out), lambda_d (2r) */
        b->vec[t][0] = param(b, stem, "pvera_lambda_d", 2 * r, 1, t, true);
        b->vec[t][1] = param(b, stem, "pvera_lambda_b", dout, 1, t, true);
        break;
    case EST_PEFT_TINYLORA: { /* tinylora/layer.py 184-237: v, and the frozen A, B, P buffers */
        const int64_t u = est_tinylora_u(run);
        b->vec[t][0] = param(b, stem, "tinylora_v", u, 1, t, true);
        b->vec[t][1] = param(b, stem, "tinylora_A (buffer)", r, din, t, false);
        b->vec[t][2] = param(b, stem, "tinylora_B (buffer)", dout, r, t, false);
        b->vec[t][3] = param(b, stem, "tinylora_P (buffer)", u, r * r, t, false);
        break;
    }
    case EST_PEFT_MISS: /* miss/layer.py 114-120 */
        b->vec[t][0] = run->vec.miss == EST_MISS_MINI ? param(b, stem, "miss_block", r, run->vec.mini_r, t, true)
                                                      : param(b, stem, "miss_block", r, dout, t, true);
        break;
    default: break;
    }
}

bool est_vec_replaces_base(const est_bld *b, int t) {
    return b->run->peft == EST_PEFT_MISS && b->run->vec.miss == EST_MISS_BAT && b->vec[t][0] != EST_NONE;
}

/* F.linear(x, w) over T rows, w a parameter or a tensor (a product, a
 * slice, a merged weight), out_bytes per element. Under autocast both
 * operands go to the compute dtype first: a parameter through
 * est_linear_rows (autocast's cache for a leaf that requires grad), any
 * other weight as a fresh copy each call (aten/src/ATen/autocast_mode.cpp
 * cached_cast caches leaves only); the output is in the compute dtype. The
 * methods' rows were measured without autocast (pure bf16). */
static int linear_t(est_bld *b, const char *name, int x, int w, int64_t din, int64_t dout, int out_bytes) {
    if (b->g->autocast) {
        if (EST_IS_PARAM(w)) return est_linear_rows(b, name, x, w, b->T, din, dout);
        w = est_cast(b, "autocast weight", w, b->g->act);
        x = est_cast(b, "autocast input", x, b->g->act);
        out_bytes = b->g->act;
    }
    int y = est_op2(b, EST_OP_LINEAR, name, b->T * dout, out_bytes, x, w);
    est_module_op_gemm(b->m, (double)b->T, (double)din, (double)dout, 1);
    return y;
}

/* AdaLoRA (adalora/layer.py SVDLinear.forward 183-195): x cast to lora_A's
 * dtype, then result += (x @ (lora_A * lora_E).T @ lora_B.T) * scaling /
 * ranknum. The product A * E (r, d_in) is saved by the matmul that reads it
 * (x needs a gradient), x's fp32 copy by the same matmul (A * E trains),
 * the (T, r) product by lora_B's. `result +=` adds in place into the base's
 * output (its dtype stays the base's). */
static int adalora(est_bld *b, int t, int x, int y, int64_t din, int64_t dout) {
    const int f = b->g->adapter, ro = b->m->tensors[y].elem_bytes;
    const int64_t r = b->run->vec.rank;
    int xa = est_cast(b, "x.to(lora_A dtype)", x, f);
    int ae = est_op2(b, EST_OP_MUL, "lora_A * lora_E", r * din, f, b->vec[t][0], b->vec[t][1]);
    int u = linear_t(b, "x @ (A * E).T", xa, ae, din, r, f);
    int v = linear_t(b, "@ lora_B.T", u, b->vec[t][2], r, dout, f);
    int s = est_op1(b, EST_OP_SCALAR, "* scaling", b->T * dout, f, v);
    s = est_op1(b, EST_OP_SCALAR, "/ ranknum", b->T * dout, f, s);
    return est_op2(b, EST_OP_ADD, "result += adapter", b->T * dout, ro, y, s);
}

/* VeRA (vera/layer.py Linear.forward): sliced_A = vera_A[:, :d_in] and
 * sliced_B = vera_B[:d_out, :] are views of the shared buffers (inputs here
 * that the block does not allocate); x cast to lambda_d's dtype, then
 * result = result + lambda_b * F.linear(lambda_d * F.linear(x, sliced_A),
 * sliced_B), cast back. The frozen slices need no gradient, so the first
 * F.linear saves nothing of x; the two products save their tensor operand
 * (T x r and T x d_out) for the vectors' gradients, whose backward forms
 * that product before summing it. */
static int vera(est_bld *b, int t, int x, int y, int64_t din, int64_t dout) {
    const int f = b->g->adapter, ro = b->m->tensors[y].elem_bytes;
    const int64_t r = b->run->vec.rank;
    int sa = est_module_input(b->m, "vera_A[:, :d_in] (view)", r * din, f, false);
    int sb = est_module_input(b->m, "vera_B[:d_out] (view)", dout * r, f, false);
    int xa = est_cast(b, "x.to(lambda_d dtype)", x, f);
    int u = linear_t(b, "F.linear(x, sliced_A)", xa, sa, din, r, f);
    int d = est_op2(b, EST_OP_MUL, "lambda_d * u", b->T * r, f, b->vec[t][0], u);
    b->m->ops[b->m->n_ops - 1].backward_transient_bytes = b->T * r * f;
    int v = linear_t(b, "F.linear(., sliced_B)", d, sb, r, dout, f);
    int w = est_op2(b, EST_OP_MUL, "lambda_b * v", b->T * dout, f, b->vec[t][1], v);
    b->m->ops[b->m->n_ops - 1].backward_transient_bytes = b->T * dout * f;
    int s = est_op2(b, EST_OP_ADD, "result + vera", b->T * dout, f > ro ? f : ro, y, w);
    return est_cast(b, "result.to(orig_dtype)", s, ro);
}

/* MiSS, init_weights true or "mini" (miss/layer.py Linear.forward 350-366):
 * x cast to miss's dtype, reshaped (T, d_in / r, r) and summed over the
 * slices (a (T, r) tensor, saved by the matmul for the block's gradient),
 * @ miss (r, d_out); "mini" first repeats its (r, mini_r) block to (r,
 * d_out) (saved by the matmul, x's sum needing a gradient). */
static int miss(est_bld *b, int t, int x, int y, int64_t din, int64_t dout) {
    const int f = b->g->adapter, ro = b->m->tensors[y].elem_bytes;
    const int64_t r = b->run->vec.rank;
    int w = b->vec[t][0];
    if (b->run->vec.miss == EST_MISS_MINI) w = est_op1(b, EST_OP_COPY, "miss.repeat", r * dout, f, w);
    int xa = est_cast(b, "x.to(miss dtype)", x, f);
    int s = est_op1(b, EST_OP_REDUCE, "sum over d_in / r slices", b->T * r, f, xa);
    int o = linear_t(b, "sum @ miss", s, w, r, dout, f);
    int sum = est_op2(b, EST_OP_ADD, "result + miss", b->T * dout, f > ro ? f : ro, y, o);
    return est_cast(b, "result.to(previous_dtype)", sum, ro);
}

/* MiSS "bat" (miss/layer.py Linear.forward 336-346 and get_delta_weight
 * 241-271): orig_weight = W.clone(); in get_delta_weight W.to(miss's
 * dtype) (an fp32 copy), viewed (d_in/r, d_out/r, r, r) and multiplied by
 * the (d_out/r, r, r) block (a batched matmul that saves the fp32 copy for
 * the block's gradient), + the block, permuted back by a reshape copy; then
 * orig_weight + delta (promoted to fp32) and F.linear(x.to(fp32), that):
 * an fp32 GEMM that saves x's fp32 copy and the fp32 weight. */
int est_vec_bat_linear(est_bld *b, int t, int x, int64_t din, int64_t dout) {
    const int f = b->g->adapter, xb = b->m->tensors[x].elem_bytes;
    const int64_t n = din * dout;
    const int wb = b->m->params[EST_PARAM_INDEX(b->base_param[t])].elem_bytes;
    int oc = est_op1(b, EST_OP_COPY, "weight.clone()", n, wb, (int)b->base_param[t]);
    int w32 = est_op1(b, EST_OP_CAST, "orig_weight.to(fp32)", n, f, oc);
    int bm = est_op2(b, EST_OP_BMM, "W @ miss_B", n, f, b->vec[t][0], w32);
    int d1 = est_op2(b, EST_OP_ADD, "+ miss_B", n, f, bm, b->vec[t][0]);
    int d2 = est_op1(b, EST_OP_COPY, "permute.reshape", n, f, d1);
    int m32 = est_op2(b, EST_OP_ADD, "orig_weight + delta", n, f, d2, oc);
    int xa = est_cast(b, "x.to(fp32)", x, f);
    int y = linear_t(b, "F.linear(x, merged)", xa, m32, din, dout, f);
    return est_cast(b, "result.to(previous_dtype)", y, xb);
}

/* PVeRA (pvera/layer.py Linear.forward 292-309, _reparametrize 152-159):
 * as VeRA, but lambda_d * F.linear(x, sliced_A) is (T, 2r), chunked into a
 * mean and a log-variance (views); in training z = mu + eps * exp(0.5 *
 * logvar), eps = randn_like; then lambda_b * F.linear(z, sliced_B). Saved:
 * the (T, 2r) operand of lambda_d's product, exp's output (std) and eps
 * (the product's operands), the (T, d_out) operand of lambda_b's. */
static int pvera(est_bld *b, int t, int x, int y, int64_t din, int64_t dout) {
    const int f = b->g->adapter, ro = b->m->tensors[y].elem_bytes;
    const int64_t r = b->run->vec.rank, T = b->T;
    int sa = est_module_input(b->m, "pvera_A[:, :d_in] (view)", 2 * r * din, f, false);
    int sb = est_module_input(b->m, "pvera_B[:d_out] (view)", dout * r, f, false);
    int xa = est_cast(b, "x.to(lambda_d dtype)", x, f);
    int u = linear_t(b, "F.linear(x, sliced_A)", xa, sa, din, 2 * r, f);
    int p = est_op2(b, EST_OP_MUL, "lambda_d * u (mu, logvar)", T * 2 * r, f, b->vec[t][0], u);
    b->m->ops[b->m->n_ops - 1].backward_transient_bytes = T * 2 * r * f;
    int h = est_op1(b, EST_OP_SCALAR, "0.5 * logvar", T * r, f, p);
    int sd = est_op1(b, EST_OP_TANH, "std = exp(.)", T * r, f, h); /* an op that saves its output */
    int eps = est_op1(b, EST_OP_COPY, "eps = randn_like(std)", T * r, f, EST_NONE);
    int es = est_op2(b, EST_OP_MUL, "eps * std", T * r, f, eps, sd);
    int z = est_op2(b, EST_OP_ADD, "z = mu + eps * std", T * r, f, p, es);
    int v = linear_t(b, "F.linear(z, sliced_B)", z, sb, r, dout, f);
    int w = est_op2(b, EST_OP_MUL, "lambda_b * v", T * dout, f, b->vec[t][1], v);
    b->m->ops[b->m->n_ops - 1].backward_transient_bytes = T * dout * f;
    int s = est_op2(b, EST_OP_ADD, "result + pvera", T * dout, f > ro ? f : ro, y, w);
    return est_cast(b, "result.to(previous_dtype)", s, ro);
}

/* TinyLoRA (tinylora/layer.py Linear.forward 382-413): R = einsum("i,ijk->jk",
 * v, P) (r x r, _compute_R 240-250), x.to(A's dtype), then F.linear(x, A)
 * (A frozen: no x saved), F.linear(h, R) (saves h, T x r, for R's gradient),
 * F.linear(., B) (B frozen) and result + delta, cast back. */
static int tinylora(est_bld *b, int t, int x, int y, int64_t din, int64_t dout) {
    const int f = b->g->adapter, ro = b->m->tensors[y].elem_bytes;
    const int64_t r = b->run->vec.rank, u = est_tinylora_u(b->run);
    int R = est_op2(b, EST_OP_LINEAR, "R = einsum(v, P)", r * r, f, b->vec[t][0], b->vec[t][3]);
    est_module_op_gemm(b->m, 1, (double)u, (double)(r * r), 1);
    int xa = est_cast(b, "x.to(A dtype)", x, f);
    int h = linear_t(b, "F.linear(x, A)", xa, b->vec[t][1], din, r, f);
    int h2 = linear_t(b, "F.linear(h, R)", h, R, r, r, f);
    int d = linear_t(b, "F.linear(., B)", h2, b->vec[t][2], r, dout, f);
    int s = est_op2(b, EST_OP_ADD, "result + delta", b->T * dout, f > ro ? f : ro, y, d);
    return est_cast(b, "result.to(previous_dtype)", s, ro);
}

int est_vec_adapter(est_bld *b, int t, int x, int y, int64_t din, int64_t dout) {
    if (b->vec[t][0] == EST_NONE || est_vec_replaces_base(b, t)) return y;
    switch (b->run->peft) {
    case EST_PEFT_ADALORA: return adalora(b, t, x, y, din, dout);
    case EST_PEFT_VERA: return vera(b, t, x, y, din, dout);
    case EST_PEFT_PVERA: return pvera(b, t, x, y, din, dout);
    case EST_PEFT_TINYLORA: return tinylora(b, t, x, y, din, dout);
    case EST_PEFT_MISS: return miss(b, t, x, y, din, dout);
    default: return y;
    }
}

/* LN tuning (ln_tuning/layer.py update_layer: deepcopy(layer); forward runs
 * the copy): the frozen original stays a parameter, the copy (its dtype)
 * trains and is what the norm reads. */
int est_vec_norm(est_bld *b, int original, const char *name) {
    if (b->run->peft != EST_PEFT_LN_TUNING) return original;
    const est_mparam *o = &b->m->params[EST_PARAM_INDEX(original)];
    char nm[EST_MOD_NAME];
    snprintf(nm, sizeof nm, "%s.ln_tuning", name);
    return est_module_param(b->m, nm, o->rows, o->cols, EST_PK_NORM, -1, true, o->elem_bytes);
}

void est_vec_model_buffers(est_module *m, const est_run *run) {
    int64_t a, bb;
    est_vera_buffers(run, &a, &bb);
    if (a == 0) return;
    const int64_t rows = run->peft == EST_PEFT_PVERA ? 2 * run->vec.rank : run->vec.rank;
    est_module_param(m, "vera_A (shared buffer)", rows, a / rows, EST_PK_ADAPTER, -1, false, 4);
    est_module_param(m, "vera_B (shared buffer)", bb / run->vec.rank, run->vec.rank, EST_PK_ADAPTER, -1, false, 4);
}

/* Trainable tokens (trainable_tokens/layer.py forward_adapters and
 * get_merged_weights): W = base.weight.index_copy(0, index,
 * delta.to(W)), a whole (V, h) copy in the base's dtype made each forward,
 * then F.embedding(x, W) (which saves only the indices: W goes when the
 * layer returns, and its (V, h) gradient is made in backward) or, on the
 * tied LM head, F.linear(x, W) (which saves W and x until the head's
 * backward, and makes W's (V, h) gradient there). The head's delta is the
 * embedding's (tied: counted once, its gradient the embedding's). */
int est_vec_tokens_weight(est_bld *b, int w, bool head) {
    if (b->run->peft != EST_PEFT_TRAINABLE_TOKENS) return w;
    const est_mparam o = b->m->params[EST_PARAM_INDEX(w)];
    if (head && !o.tied) return w; /* an untied head is not wrapped */
    const int64_t N = b->run->vec.tokens;
    int d = est_module_param(b->m, "trainable_tokens_delta", N, o.cols, EST_PK_ADAPTER, -1, true, b->g->adapter);
    if (head) b->m->params[EST_PARAM_INDEX(d)].tied = true;
    int dc = est_op1(b, EST_OP_CAST, "delta.to(W)", N * o.cols, o.elem_bytes, d);
    const int16_t in[2] = {(int16_t)dc, (int16_t)w}; /* the delta first: the weight a GEMM trains */
    return est_module_op(b->m, EST_OP_COPY, "W.index_copy(delta)", o.rows * o.cols, o.elem_bytes, 2, in);
}
