#include "peft_vec.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "json_util.h"
#include "lora.h"

static const char *const MISS_NAMES[] = {"default", "bat", "mini"};
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

const char *est_miss_init_name(est_miss_init m) {
    return (int)m >= 0 && (int)m < COUNT(MISS_NAMES) ? MISS_NAMES[m] : "?";
}

int est_miss_init_parse(const char *s, est_miss_init *out, char *err, size_t errlen) {
    int v;
    if (ft_parse_choice("--miss-init", MISS_NAMES, COUNT(MISS_NAMES), s, &v, err, errlen) < 0) return -1;
    *out = (est_miss_init)v;
    return 0;
}

/* --peft's spelling (peft.c's table, which includes this header). */
static const char *method_name(est_peft p) {
    switch (p) {
    case EST_PEFT_ADALORA: return "adalora";
    case EST_PEFT_VERA: return "vera";
    case EST_PEFT_PVERA: return "pvera";
    case EST_PEFT_TINYLORA: return "tinylora";
    default: return "miss";
    }
}

bool est_peft_vec_on(const est_run *run) {
    return run->peft == EST_PEFT_ADALORA || run->peft == EST_PEFT_VERA || run->peft == EST_PEFT_LN_TUNING ||
           run->peft == EST_PEFT_MISS || run->peft == EST_PEFT_TRAINABLE_TOKENS || run->peft == EST_PEFT_PVERA ||
           run->peft == EST_PEFT_TINYLORA;
}

static bool adapts_linears(const est_run *run) {
    return run->peft == EST_PEFT_ADALORA || run->peft == EST_PEFT_VERA || run->peft == EST_PEFT_MISS ||
           run->peft == EST_PEFT_PVERA || run->peft == EST_PEFT_TINYLORA;
}

int64_t est_tinylora_u(const est_run *run) { return run->vec.u > 0 ? run->vec.u : 64; /* TinyLoraConfig.u */ }

static int64_t target_count(const est_run *run) {
    int64_t n = 0;
    for (int t = 0; t < EST_LORA_TARGET_COUNT; t++) n += est_peft_vec_targets_linear(run, t);
    return n;
}

/* tinylora/model.py _create_and_replace: num_groups = max(1,
 * round(num_target_layers * (1 - weight_tying))) over every targeted module
 * of the model (Python's round: half to even). */
int64_t est_tinylora_groups(const est_run *run) {
    const double n = (double)(target_count(run) * run->layers_used) * (1.0 - run->vec.tying);
    const int64_t g = (int64_t)nearbyint(n);
    return g > 1 ? g : 1;
}

uint32_t est_peft_vec_targets(const est_run *run) {
    return run->vec.targets ? run->vec.targets : EST_LORA_DEFAULT_TARGETS;
}

bool est_peft_vec_targets_linear(const est_run *run, int t) {
    return adapts_linears(run) && (est_peft_vec_targets(run) & EST_LORA_BIT(t));
}

/* One targeted Linear's parameters (d_in, d_out): every one these methods
 * add trains (VeRA's, PVeRA's and TinyLoRA's frozen matrices are buffers). */
static int64_t linear_params(const est_run *run, int64_t din, int64_t dout) {
    const int64_t r = run->vec.rank;
    switch (run->peft) {
    case EST_PEFT_ADALORA: return r * din + r + dout * r; /* lora_A, lora_E, lora_B (layer.py 69-73) */
    case EST_PEFT_VERA: return r + dout;                  /* lambda_d, lambda_b (layer.py update_layer) */
    case EST_PEFT_PVERA: return 2 * r + dout;             /* pvera/layer.py 100-101 */
    case EST_PEFT_TINYLORA: return est_tinylora_u(run);   /* v, one per target in the block */
    case EST_PEFT_MISS:                                   /* miss_block (layer.py 114-120) */
        return run->vec.miss == EST_MISS_MINI ? r * run->vec.mini_r : r * dout;
    default: return 0;
    }
}

/* LN tuning's default targets for Llama (utils/constants.py
 * TRANSFORMERS_MODELS_TO_LNTUNING_TARGET_MODULES_MAPPING: input_layernorm,
 * post_attention_layernorm, norm): both norms of a block. */
int64_t est_peft_vec_block_params(const est_run *run, bool trainable) {
    (void)trainable; /* all of them train */
    if (run->peft == EST_PEFT_LN_TUNING) return 2 * run->model.hidden_size;
    int64_t sum = 0;
    for (int t = 0; t < EST_LORA_TARGET_COUNT; t++) {
        if (!est_peft_vec_targets_linear(run, t)) continue;
        int64_t din, dout;
        est_linear_shape(&run->model, (est_lora_target)t, &din, &dout);
        sum += linear_params(run, din, dout);
    }
    return sum;
}

/* LN tuning's copy of the final norm; trainable tokens' delta (N, h), one
 * tensor even when the tied head reads it too. */
int64_t est_peft_vec_model_params(const est_run *run) {
    if (run->peft == EST_PEFT_TRAINABLE_TOKENS) return run->vec.tokens * run->model.hidden_size;
    /* TinyLoRA: its vectors are one per group, where the blocks count one
     * per target (block_peft_vec.c holds one per target: the same memory
     * within u x 16 bytes per target) */
    if (run->peft == EST_PEFT_TINYLORA)
        return (est_tinylora_groups(run) - target_count(run) * run->layers_used) * est_tinylora_u(run);
    return run->peft == EST_PEFT_LN_TUNING ? run->model.hidden_size : 0;
}

int64_t est_peft_vec_tensors(const est_run *run) {
    const int64_t L = run->layers_used;
    switch (run->peft) {
    case EST_PEFT_LN_TUNING: return 2 * L + 1;
    case EST_PEFT_TRAINABLE_TOKENS: return 1;
    case EST_PEFT_TINYLORA: return est_tinylora_groups(run);
    case EST_PEFT_ADALORA: return 3 * target_count(run) * L;
    case EST_PEFT_VERA:
    case EST_PEFT_PVERA: return 2 * target_count(run) * L;
    default: return target_count(run) * L;
    }
}

/* VeRA's pair (vera/model.py _find_dim and _init_vera_A_vera_B): vera_A (r,
 * the largest d_in targeted), vera_B (the largest d_out, r). */
void est_vera_buffers(const est_run *run, int64_t *a_elems, int64_t *b_elems) {
    int64_t in = 0, out = 0;
    for (int t = 0; t < EST_LORA_TARGET_COUNT; t++) {
        if (!est_peft_vec_targets_linear(run, t)) continue;
        int64_t din, dout;
        est_linear_shape(&run->model, (est_lora_target)t, &din, &dout);
        if (din > in) in = din;
        if (dout > out) out = dout;
    }
    /* PVeRA's pvera_A has 2r rows: a mean and a log-variance (pvera/model.py 115) */
    const int64_t rows = run->peft == EST_PEFT_PVERA ? 2 * run->vec.rank : run->vec.rank;
    const bool pair = run->peft == EST_PEFT_VERA || run->peft == EST_PEFT_PVERA;
    *a_elems = pair ? rows * in : 0;
    *b_elems = pair ? out * run->vec.rank : 0;
}

/* MiSS's shape rules (miss/layer.py update_layer 92-104): "bat" needs d_in
 * and d_out divisible by r, "mini" d_out divisible by mini_r; the default
 * pads x to a multiple of r (not modelled: refused). */
static int validate_miss(const est_run *run, char *err, size_t errlen) {
    const int64_t r = run->vec.rank;
    for (int t = 0; t < EST_LORA_TARGET_COUNT; t++) {
        if (!est_peft_vec_targets_linear(run, t)) continue;
        int64_t din, dout;
        est_linear_shape(&run->model, (est_lora_target)t, &din, &dout);
        char name[16];
        est_lora_targets_name(EST_LORA_BIT(t), name, sizeof name);
        if (din % r || (run->vec.miss == EST_MISS_BAT && dout % r))
            return ft_errorf(err, errlen, "--peft miss: --peft-rank %lld does not divide %s's %lld x %lld weight "
                                          "(padding x is not modelled; bat needs r x r blocks)",
                             (long long)r, name, (long long)dout, (long long)din);
        if (run->vec.miss == EST_MISS_MINI && (run->vec.mini_r < 1 || dout % run->vec.mini_r))
            return ft_errorf(err, errlen, "--miss-init mini needs --miss-mini-r dividing %s's d_out %lld",
                             name, (long long)dout);
    }
    return 0;
}

int est_peft_vec_validate(const est_run *run, char *err, size_t errlen) {
    if (!est_peft_vec_on(run)) {
        if (run->vec.rank || run->vec.targets || run->vec.miss != EST_MISS_DEFAULT || run->vec.mini_r ||
            run->vec.tokens || run->vec.u || run->vec.tying != 0)
            return ft_errorf(err, errlen, "--peft-rank, --peft-targets, --miss-init, --trainable-tokens and "
                                          "--tinylora-* need their --peft method");
        return 0;
    }
    if (run->peft == EST_PEFT_TRAINABLE_TOKENS) {
        if (run->vec.tokens < 1 || run->vec.tokens > run->model.vocab_size)
            return ft_errorf(err, errlen, "--peft trainable-tokens needs --trainable-tokens N, 1 to the "
                                          "vocabulary's %lld (got %lld)",
                             (long long)run->model.vocab_size, (long long)run->vec.tokens);
        if (run->vec.rank || run->vec.targets)
            return ft_errorf(err, errlen, "--peft trainable-tokens takes no --peft-rank or --peft-targets");
        return 0;
    }
    if (run->vec.tokens) return ft_errorf(err, errlen, "--trainable-tokens needs --peft trainable-tokens");
    if (run->peft == EST_PEFT_LN_TUNING) {
        if (run->model.sandwich_norms || run->model.qk_norm)
            return ft_errorf(err, errlen, "--peft ln-tuning on %s is not modelled (PEFT's default norms are "
                                          "Llama's two per block)", ft_arch_name(run->model.arch));
        if (run->vec.rank || run->vec.targets)
            return ft_errorf(err, errlen, "--peft ln-tuning trains copies of the norms: it takes no "
                                          "--peft-rank or --peft-targets");
        return 0;
    }
    if (run->vec.rank < 1 || run->vec.rank > EST_LORA_MAX_RANK)
        return ft_errorf(err, errlen, "--peft %s needs --peft-rank between 1 and %d (got %lld)",
                         method_name(run->peft), EST_LORA_MAX_RANK, (long long)run->vec.rank);
    if (run->vec.targets & ~EST_LORA_ALL_LINEAR) return ft_errorf(err, errlen, "--peft-targets names no linear layer");
    if (run->peft != EST_PEFT_MISS && (run->vec.miss != EST_MISS_DEFAULT || run->vec.mini_r))
        return ft_errorf(err, errlen, "--miss-init and --miss-mini-r need --peft miss");
    if (run->peft != EST_PEFT_TINYLORA && (run->vec.u || run->vec.tying != 0))
        return ft_errorf(err, errlen, "--tinylora-u and --tinylora-weight-tying need --peft tinylora");
    if (!(run->vec.tying >= 0 && run->vec.tying <= 1) || run->vec.u < 0 || run->vec.u > EST_LORA_MAX_RANK)
        return ft_errorf(err, errlen, "--tinylora-weight-tying must be between 0 and 1, --tinylora-u between 1 "
                                      "and %d", EST_LORA_MAX_RANK);
    if (run->peft == EST_PEFT_MISS) return validate_miss(run, err, errlen);
    return 0;
}

void est_peft_vec_label(const est_run *run, char *buf, size_t n) {
    char targets[64];
    est_lora_targets_name(est_peft_vec_targets(run), targets, sizeof targets);
    if (run->peft == EST_PEFT_LN_TUNING) snprintf(buf, n, "LN tuning (norm copies)");
    else if (run->peft == EST_PEFT_TRAINABLE_TOKENS)
        snprintf(buf, n, "trainable tokens, %lld rows%s", (long long)run->vec.tokens,
                 run->model.tied_embeddings ? " (embedding and tied head)" : "");
    else if (run->peft == EST_PEFT_ADALORA)
        snprintf(buf, n, "AdaLoRA init_r %lld on %s", (long long)run->vec.rank, targets);
    else if (run->peft == EST_PEFT_VERA) snprintf(buf, n, "VeRA r%lld on %s", (long long)run->vec.rank, targets);
    else if (run->peft == EST_PEFT_PVERA) snprintf(buf, n, "PVeRA r%lld on %s", (long long)run->vec.rank, targets);
    else if (run->peft == EST_PEFT_TINYLORA)
        snprintf(buf, n, "TinyLoRA r%lld u%lld on %s, %lld vector%s", (long long)run->vec.rank,
                 (long long)est_tinylora_u(run), targets, (long long)est_tinylora_groups(run),
                 est_tinylora_groups(run) == 1 ? "" : "s");
    else if (run->vec.miss == EST_MISS_MINI)
        snprintf(buf, n, "MiSS mini r%lld x %lld on %s", (long long)run->vec.rank, (long long)run->vec.mini_r,
                 targets);
    else
        snprintf(buf, n, "MiSS%s r%lld on %s", run->vec.miss == EST_MISS_BAT ? " bat" : "", (long long)run->vec.rank,
                 targets);
}
