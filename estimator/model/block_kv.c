/* The keys and values a decoder block's attention reads (block_build.h).
 *
 * KV cache: LlamaModel.forward builds a DynamicCache when use_cache is on
 * (config.use_cache, True for the Llama family) and the blocks are not
 * checkpointed (transformers 4.40-4.49 turns use_cache off under gradient
 * checkpointing, 5.x GradientCheckpointingLayer.__call__ likewise). The
 * attention calls past_key_values.update(key_states, value_states) after
 * RoPE and reads what it returns:
 *  - 4.40-4.49 (cache_utils.py DynamicCache.update): the tensors themselves,
 *    appended to the cache's lists;
 *  - 5.x (DynamicLayer.update): torch.cat([empty, states], dim=-2), a copy,
 *    whose backward hands the gradient through (a slice of it).
 * Either way the cache holds them in the model's outputs until the training
 * loop drops those (module_graph.h model_output; seam_hf.c).
 *
 * repeat_kv (grouped-query attention): eager attention and SDPA copy the
 * keys and values to every query head (reshape of an expand), except flash
 * attention (the kernel takes the groups) and, from transformers 5.x with
 * torch >= 2.5, SDPA without a mask (enable_gqa=True; stack.h). */
#include "block_build.h"
#include "peft_prompt.h"

/* A cache copy: torch.cat onto the empty cache. Its backward passes the
 * gradient on unchanged, as an add's does, so it is built as one. The empty
 * tensors are made in the keys' dtype (DynamicLayer.lazy_initialization:
 * torch.tensor([], dtype=key_states.dtype) for keys and values alike) and
 * torch.cat promotes over every input, so values in a narrower dtype than the
 * keys come out in the keys' (bf16 values beside fp32 keys rotated by the
 * model's fp32 cos/sin under autocast; transformers 5.17 cache_utils.py). */
static int cache_copy(est_bld *b, const char *name, int x, int empty_bytes) {
    const est_mtensor *t = &b->m->tensors[x];
    return est_op1(b, EST_OP_ADD, name, t->elems, t->elem_bytes > empty_bytes ? t->elem_bytes : empty_bytes, x);
}

static void hold(est_bld *b, int t) {
    if (t >= 0) b->m->tensors[t].model_output = true;
}

void est_attention_kv(est_bld *b, int *k, int *v, int mask) {
    const est_run *run = b->run;
    const ft_model *md = &run->model;
    const bool cache = !run->kv_cache_off && !est_run_ckpt_wraps(run) && !b->m->no_grad;
    if (cache && run->stack && run->stack->kv_cache_copies) {
        const int key_bytes = b->m->tensors[*k].elem_bytes;
        *k = cache_copy(b, "KV cache keys (cat)", *k, key_bytes);
        *v = cache_copy(b, "KV cache values (cat)", *v, key_bytes);
    }
    if (cache) {
        hold(b, *k);
        hold(b, *v);
    }
    const bool gqa_kernel = run->attention == EST_ATTN_FLASH ||
                            (run->attention == EST_ATTN_SDPA && mask == EST_NONE &&
                             run->stack && run->stack->sdpa_gqa_unmasked);
    if (md->num_heads != md->num_kv_heads && !gqa_kernel) {
        const int64_t qw = md->num_heads * md->head_dim;
        const int64_t keys = b->T + b->b * est_prefix_tokens(run); /* prefix tuning's N rows too */
        *k = est_op1(b, EST_OP_COPY, "repeat_kv(k)", keys * qw, b->m->tensors[*k].elem_bytes, *k);
        *v = est_op1(b, EST_OP_COPY, "repeat_kv(v)", keys * qw, b->m->tensors[*v].elem_bytes, *v);
    }
}
