/* A decoder block's plain matmuls, below the Linears that use them
 * (block_linear.c's base layers and LoRA, block_pdelta.c, block_peft_vec.c,
 * block_prompt.c, the LM head): F.linear on a resident or autocast-cast
 * weight, and the adapter tensors PEFT's methods declare. */
#include <stdio.h>

#include "block_build.h"

/* A weight operand as the matmul reads it: autocast's cached cast. */
static int weight_as_read(est_bld *b, int w, const char *name) {
    if (w == EST_NONE || !b->g->autocast || !EST_IS_PARAM(w)) return w; /* a tensor: read as made */
    const est_mparam *p = &b->m->params[EST_PARAM_INDEX(w)];
    if (p->elem_bytes == b->g->act) return w;
    int t = est_op1(b, EST_OP_CAST, name, p->rows * p->cols * p->copies, b->g->act, w);
    est_module_tensor_role(b->m, t, EST_ROLE_WEIGHT, false);
    /* autocast's cached_cast keeps casts of leaf weights that require grad,
     * grad mode or not (aten/src/ATen/autocast_mode.cpp). */
    if (t >= 0 && p->trainable) b->m->tensors[t].autocast_cached = true;
    return t;
}

/* F.linear(x, W, bias) under the regime, on `rows` token rows. */
int est_linear_op(est_bld *b, const char *name, int x, int w, int bias, int64_t rows, int64_t din,
                  int64_t dout) {
    const int c = b->g->act;
    if (b->g->autocast) x = est_cast(b, "autocast input", x, c);
    char wn[EST_MOD_NAME];
    snprintf(wn, sizeof wn, "%s (cast)", name);
    int16_t in[3] = {(int16_t)x, (int16_t)weight_as_read(b, w, wn), (int16_t)EST_NONE};
    int n = 2;
    if (bias != EST_NONE) in[n++] = (int16_t)weight_as_read(b, bias, wn);
    /* out of autocast, the input's dtype: a tensor's, or a parameter's read
     * as the input (adaption prompt's k_proj and v_proj of its prompt) */
    const int in_bytes = EST_IS_PARAM(x) ? b->m->params[EST_PARAM_INDEX(x)].elem_bytes : b->m->tensors[x].elem_bytes;
    const int out_bytes = b->g->autocast ? c : in_bytes;
    int y = est_module_op(b->m, EST_OP_LINEAR, name, rows * dout, out_bytes, n, in);
    est_module_op_gemm(b->m, (double)rows, (double)din, (double)dout, 1);
    return y;
}

int est_linear_rows(est_bld *b, const char *name, int x, int w, int64_t rows, int64_t din,
                    int64_t dout) {
    return est_linear_op(b, name, x, w, EST_NONE, rows, din, dout);
}

int est_adapter_param(est_bld *b, int t, const char *stem, const char *what, int64_t rows, int64_t cols,
                      bool trains) {
    char name[EST_MOD_NAME];
    snprintf(name, sizeof name, "%s.%s", stem, what);
    return est_module_param(b->m, name, rows, cols, EST_PK_ADAPTER, t, trains, b->g->adapter);
}
