/* RMSNorm as the module builders run it (block_build.h est_rmsnorm): the
 * decoder block's norms (block.c), its q/k norms, and the final norm before
 * the LM head (block_ends.c). */
#include <stdio.h>

#include "block_build.h"
#include "liger.h"

/* LlamaRMSNorm: h = x.to(fp32); var = h.pow(2).mean(-1); h = h * rsqrt(var +
 * eps); return weight * h.to(x.dtype). GemmaRMSNorm: out = norm(x.float()) *
 * (1 + weight.float()); return out.type_as(x). */
int est_rmsnorm(est_bld *b, const char *name, int x, int weight, bool plus_one) {
    return est_rmsnorm_over(b, name, x, weight, plus_one, b->run->model.hidden_size);
}

/* The same over rows of `h` elements (Qwen3's and Gemma 3's q_norm and
 * k_norm: each head's head_dim). */
int est_rmsnorm_over(est_bld *b, const char *name, int x, int weight, bool plus_one, int64_t h) {
    if (b->run->liger & EST_LIGER_RMS_NORM) return est_liger_rmsnorm(b, name, x, weight, h);
    const est_mtensor *xt = &b->m->tensors[x];
    const int64_t n = xt->elems, rows = n / h;
    const int xb = xt->elem_bytes;
    char nm[EST_MOD_NAME];
    snprintf(nm, sizeof nm, "%s fp32 input", name);
    int h32 = est_cast(b, nm, x, 4);
    int p = est_op1(b, EST_OP_POW, "pow(2)", n, 4, h32);
    int var = est_op1(b, EST_OP_REDUCE, "mean", rows, 4, p);
    int ve = est_op1(b, EST_OP_SCALAR, "+ eps", rows, 4, var);
    snprintf(nm, sizeof nm, "%s rsqrt", name);
    int rs = est_op1(b, EST_OP_RSQRT, nm, rows, 4, ve);
    snprintf(nm, sizeof nm, "%s normalized", name);
    int y32 = est_op2(b, EST_OP_MUL, nm, n, 4, h32, rs);
    if (plus_one) {
        int wf = b->m->params[EST_PARAM_INDEX(weight)].elem_bytes == 4
                     ? weight
                     : est_op1(b, EST_OP_CAST, "weight.float()", h, 4, weight);
        int w1 = est_op1(b, EST_OP_SCALAR, "1 + weight", h, 4, wf);
        int o32 = est_op2(b, EST_OP_MUL, name, n, 4, y32, w1);
        return est_cast(b, "type_as(x)", o32, xb);
    }
    int y = est_cast(b, "normalized.to(dtype)", y32, xb);
    /* weight * y promotes to the wider dtype (an fp32 weight under autocast
     * over a compute-dtype q or k gives fp32) */
    const int wb = b->m->params[EST_PARAM_INDEX(weight)].elem_bytes;
    return est_op2(b, EST_OP_MUL, name, n, wb > xb ? wb : xb, weight, y);
}
