#include "config.h"

#include <math.h>
#include <string.h>

#include "json_util.h"

void tr_config_defaults(tr_config *cfg) {
    ft_model keep = cfg->model;
    memset(cfg, 0, sizeof *cfg);
    cfg->model = keep;
    cfg->layers = keep.num_layers;
    cfg->seq_len = 32;
    cfg->micro_batch = 2;
    cfg->grad_accum = 1;
    cfg->steps = 10;
    cfg->ranks = 1;
    memcpy(cfg->device, "cpu", 4);
    cfg->zero_stage = 0;
    cfg->offload = FT_OFFLOAD_NONE;
    cfg->checkpointing = FT_CKPT_NONE;
    cfg->attention = FT_ATTN_FLASH;
    cfg->loss = FT_LOSS_STANDARD;
    cfg->precision = FT_PREC_FP32;
    cfg->optimizer = FT_OPT_ADAMW;
    cfg->lr = 1e-3;
    cfg->warmup = 0;
    cfg->weight_decay = 0.0;
    cfg->clip = 1.0;
    cfg->seed = 1337;
}

int64_t tr_compute_bytes(ft_precision p) { return p == FT_PREC_BF16_MIXED ? 2 : 4; }

/* A configuration filled directly (tests, not the flags) may still hold a
 * value of the shared vocabulary that ftrain does not implement. */
static int refuse_unimplemented(const tr_config *c, char *err, size_t errlen) {
    const char *flag = NULL, *name = NULL;
    if (!(TR_HAS_PRECISION & FT_VOCAB_BIT(c->precision)))
        flag = "--precision", name = ft_precision_name(c->precision);
    else if (!(TR_HAS_OFFLOAD & FT_VOCAB_BIT(c->offload)))
        flag = "--offload", name = ft_offload_name(c->offload);
    else if (!(TR_HAS_CHECKPOINTING & FT_VOCAB_BIT(c->checkpointing)))
        flag = "--checkpointing", name = ft_checkpointing_name(c->checkpointing);
    else if (!(TR_HAS_ATTENTION & FT_VOCAB_BIT(c->attention)))
        flag = "--attention", name = ft_attention_name(c->attention);
    else if (!(TR_HAS_LOSS & FT_VOCAB_BIT(c->loss)))
        flag = "--loss", name = ft_loss_name(c->loss);
    else if (!(TR_HAS_OPTIMIZER & FT_VOCAB_BIT(c->optimizer)))
        flag = "--optimizer", name = ft_optimizer_name(c->optimizer);
    if (!flag) return 0;
    return ft_errorf(err, errlen, "%s %s is not implemented by ftrain", flag, name);
}

int tr_config_validate(const tr_config *c, char *err, size_t errlen) {
    const ft_model *m = &c->model;
    if (m->hidden_size <= 0 || m->vocab_size <= 0 || m->num_layers <= 0 || m->num_heads <= 0 ||
        m->num_kv_heads <= 0 || m->head_dim <= 0 || m->intermediate_size <= 0)
        return ft_errorf(err, errlen, "model \"%s\" has missing shapes", m->name);
    if (m->num_heads % m->num_kv_heads)
        return ft_errorf(err, errlen, "num_attention_heads is not a multiple of num_key_value_heads");
    if (m->head_dim > TR_MAX_HEAD_DIM || m->head_dim % 2)
        return ft_errorf(err, errlen, "head_dim %lld is not supported (even, at most %d)",
                         (long long)m->head_dim, TR_MAX_HEAD_DIM);
    if (m->vocab_size > INT32_MAX)
        return ft_errorf(err, errlen, "vocab_size %lld does not fit token ids", (long long)m->vocab_size);
    if (c->layers < 1 || c->layers > m->num_layers)
        return ft_errorf(err, errlen, "--layers %lld is outside 1..%lld (the model's blocks)",
                         (long long)c->layers, (long long)m->num_layers);
    if (c->seq_len < 1)
        return ft_errorf(err, errlen, "--seq must be at least 1 (got %lld)", (long long)c->seq_len);
    if (m->max_position > 0 && c->seq_len > m->max_position)
        return ft_errorf(err, errlen, "--seq %lld is above the model's maximum of %lld positions",
                         (long long)c->seq_len, (long long)m->max_position);
    if (c->seq_len > FT_MAX_POSITION)
        return ft_errorf(err, errlen, "--seq %lld is too large", (long long)c->seq_len);
    if (c->micro_batch < 1 || c->micro_batch > TR_MAX_BATCH)
        return ft_errorf(err, errlen, "--batch must be in 1..%d (got %lld)", TR_MAX_BATCH,
                         (long long)c->micro_batch);
    if (c->grad_accum < 1 || c->grad_accum > TR_MAX_ACCUM)
        return ft_errorf(err, errlen, "--grad-accum must be in 1..%d (got %lld)", TR_MAX_ACCUM,
                         (long long)c->grad_accum);
    if (c->steps < 1 || c->steps > TR_MAX_STEPS)
        return ft_errorf(err, errlen, "--steps must be in 1..%lld (got %lld)", TR_MAX_STEPS,
                         (long long)c->steps);
    if (c->ranks < 1 || c->ranks > TR_MAX_RANKS)
        return ft_errorf(err, errlen, "--ranks must be in 1..%d (got %d)", TR_MAX_RANKS, c->ranks);
    if (refuse_unimplemented(c, err, errlen)) return -1;
    if (c->zero_stage < 0 || c->zero_stage > 3)
        return ft_errorf(err, errlen, "--zero must be 0, 1, 2 or 3 (got %d)", c->zero_stage);
    if (c->offload == FT_OFFLOAD_OPTIMIZER_PARAMS && c->zero_stage != 3)
        return ft_errorf(err, errlen, "--offload optimizer+params needs --zero 3 (parameters are "
                                      "offloaded as shards)");
    if (c->offload == FT_OFFLOAD_OPTIMIZER && c->zero_stage == 0)
        return ft_errorf(err, errlen, "--offload optimizer needs --zero 1, 2 or 3 (the offloaded "
                                      "optimizer updates a partition, as in ZeRO-Offload)");
    if (!(c->lr >= 0 && c->lr <= 10))
        return ft_errorf(err, errlen, "--lr must be in 0..10");
    if (c->warmup < 0 || c->warmup > TR_MAX_STEPS)
        return ft_errorf(err, errlen, "--warmup must be in 0..%lld", TR_MAX_STEPS);
    if (!(c->weight_decay >= 0 && c->weight_decay <= 1))
        return ft_errorf(err, errlen, "--weight-decay must be in 0..1");
    if (!(c->clip >= 0 && c->clip <= 1e9))
        return ft_errorf(err, errlen, "--clip must be in 0..1e9 (0 disables clipping)");
    if (c->threads < 0 || c->threads > 1024)
        return ft_errorf(err, errlen, "--threads must be in 0..1024");
    return 0;
}

#define PARSER(fn, type, shared, has)                                                       \
    int fn(const char *s, type *out, char *err, size_t errlen) {                                \
        return shared##_parse_among(s, has, "ftrain", out, err, errlen);                        \
    }

PARSER(tr_precision_parse, ft_precision, ft_precision, TR_HAS_PRECISION)
PARSER(tr_offload_parse, ft_offload, ft_offload, TR_HAS_OFFLOAD)
PARSER(tr_ckpt_parse, ft_checkpointing, ft_checkpointing, TR_HAS_CHECKPOINTING)
PARSER(tr_loss_parse, ft_loss, ft_loss, TR_HAS_LOSS)
PARSER(tr_optimizer_parse, ft_optimizer, ft_optimizer, TR_HAS_OPTIMIZER)

int tr_attention_parse(const char *s, ft_attention *out, char *err, size_t errlen) {
    if (s && !strcmp(s, "sdpa"))
        return ft_errorf(err, errlen, "--attention sdpa is PyTorch's; ftrain has eager and flash "
                                      "(flash keeps the same memory as sdpa's flash kernel)");
    return ft_attention_parse_among(s, TR_HAS_ATTENTION, "ftrain", out, err, errlen);
}
