/* The module builders' helpers (block_build.h): one-line ops, casts, the
 * builder's context and its end, and the predicates on the run that more
 * than one builder reads. */
#include "block_build.h"
#include "peft_prompt.h"

#include <string.h>

#include "json_util.h"
#include "stack.h"

void est_bld_init(est_bld *b, est_module *m, const est_run *run, const est_regime *g) {
    memset(b, 0, sizeof *b);
    b->m = m;
    b->run = run;
    b->g = g;
    b->b = run->micro_batch;
    b->s = est_model_positions(run); /* prompt tuning's virtual tokens lengthen it (peft.h) */
    b->T = b->b * b->s;
    m->train_masked = g->masked;
    m->train_mask = g->train_mask;
    m->linear_saves_input = g->linear_saves_input;
}

/* The choices more than one builder reads (block_build.h). */
bool est_rope_shared(const est_run *run) { return run->stack && run->stack->rope_once_per_forward; }

bool est_moe_fused(const est_run *run) {
    return run->model.num_experts > 0 && run->stack && run->stack->moe_experts_fused;
}

bool est_attention_masked(const est_run *run) {
    return (run->padding_mask && run->attention != EST_ATTN_FLASH) || run->attention == EST_ATTN_EAGER ||
           est_prefix_tokens(run) > 0; /* prefix tuning: keys outnumber queries (block_prompt.c) */
}

int est_op1(est_bld *b, est_op_kind kind, const char *name, int64_t elems, int bytes, int a) {
    int16_t in[1] = {(int16_t)a};
    return est_module_op(b->m, kind, name, elems, bytes, 1, in);
}

int est_op2(est_bld *b, est_op_kind kind, const char *name, int64_t elems, int bytes, int a,
            int c) {
    int16_t in[2] = {(int16_t)a, (int16_t)c};
    return est_module_op(b->m, kind, name, elems, bytes, 2, in);
}

int est_cast(est_bld *b, const char *name, int x, int bytes) {
    if (x < 0 || b->m->tensors[x].elem_bytes == bytes) return x;
    return est_op1(b, EST_OP_CAST, name, b->m->tensors[x].elems, bytes, x);
}

int est_bld_done(est_bld *b, int output, char *err, size_t errlen) {
    est_module_finish(b->m, output);
    if (b->m->overflow)
        return ft_errorf(err, errlen, "internal: the %s module needs more room than its tables hold",
                         b->m->kind == EST_MODULE_BLOCK ? "block" : "model");
    return 0;
}
