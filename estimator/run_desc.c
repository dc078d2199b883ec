#include "run_desc.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "json_util.h"

/* Name tables; index = enum value. */
static const char *const FRAMEWORK_NAMES[] = {"ftrain", "hf", "deepspeed", "fsdp"};
static const char *const QUANT_NAMES[] = {"none", "nf4", "int8"};
static const char *const COMPUTE_DTYPE_NAMES[] = {"auto", "bf16", "fp16", "fp32"};
static const char *const TRAIN_LOOP_NAMES[] = {"trainer", "plain"};
static const char *const BATCHING_NAMES[] = {"random", "sorted"};

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const char *name_of(const char *const *names, int n, int v) {
    return (v >= 0 && v < n) ? names[v] : "?";
}

#define NAME_FNS(fn, type, table, what)                                                   \
    const char *est_##fn##_name(type v) { return name_of(table, COUNT(table), (int)v); }  \
    int est_##fn##_parse(const char *s, type *out, char *err, size_t errlen) {            \
        int v;                                                                            \
        if (ft_parse_choice(what, table, COUNT(table), s, &v, err, errlen) < 0) return -1;     \
        *out = (type)v;                                                                   \
        return 0;                                                                         \
    }

NAME_FNS(framework, est_framework, FRAMEWORK_NAMES, "--framework")
NAME_FNS(quant, est_quant, QUANT_NAMES, "--quant")
NAME_FNS(compute_dtype, est_compute_dtype, COMPUTE_DTYPE_NAMES, "--compute-dtype")
NAME_FNS(train_loop, est_train_loop, TRAIN_LOOP_NAMES, "--train-loop")
NAME_FNS(batching, est_batching, BATCHING_NAMES, "--batching")

int64_t est_compute_dtype_bytes(est_precision p) { return p == EST_PREC_FP32 ? 4 : 2; }

bool est_has_master(est_precision p) {
    return p == EST_PREC_BF16_MIXED || p == EST_PREC_FP16_MIXED;
}

int64_t est_run_world(const est_run *run) { return run->gpus_per_node * run->nodes; }

int64_t est_run_dp(const est_run *run) {
    const int64_t ranks = est_run_world(run);
    return run->tp > 1 && ranks % run->tp == 0 ? ranks / run->tp : ranks;
}

bool est_run_ckpt_wraps(const est_run *run) {
    return run->checkpointing == EST_CKPT_FULL || run->checkpointing == EST_CKPT_SELECTIVE_OP;
}

bool est_run_block_checkpointed(const est_run *run, int64_t layer) {
    if (!est_run_ckpt_wraps(run)) return false;
    return run->ckpt_every <= 1 || (layer + 1) % run->ckpt_every == 0;
}

int64_t est_tokens(const est_run *run) { return run->micro_batch * run->seq_len; }
