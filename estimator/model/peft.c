#include "peft.h"

#include <stdio.h>
#include <string.h>

#include "fw_registry.h"
#include "json_util.h"
#include "lora.h"
#include "peft_delta.h"
#include "peft_prompt.h"
#include "peft_vec.h"

static const char *const PEFT_NAMES[] = {"lora", "ia3", "prompt-tuning", "prefix-tuning", "p-tuning",
                                          "adaption-prompt", /* peft_prompt.h */
                                          "adalora", "vera", "ln-tuning", "miss", "trainable-tokens",
                                          "pvera", "tinylora", /* peft_vec.h */
                                          "loha", "lokr", "oft", "fourierft", "waveft"}; /* peft_delta.h */
static const char *const VARIANT_NAMES[] = {"lora", "rslora", "dora", "lora-fa"};
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

const char *est_peft_name(est_peft p) {
    return (int)p >= 0 && (int)p < COUNT(PEFT_NAMES) ? PEFT_NAMES[p] : "?";
}

int est_peft_parse(const char *s, est_peft *out, char *err, size_t errlen) {
    int v;
    if (ft_parse_choice("--peft", PEFT_NAMES, COUNT(PEFT_NAMES), s, &v, err, errlen) < 0) return -1;
    *out = (est_peft)v;
    return 0;
}

const char *est_lora_variant_name(est_lora_variant v) {
    return (int)v >= 0 && (int)v < COUNT(VARIANT_NAMES) ? VARIANT_NAMES[v] : "?";
}

int est_lora_variant_parse(const char *s, est_lora_variant *out, char *err, size_t errlen) {
    int v;
    if (ft_parse_choice("--lora-variant", VARIANT_NAMES, COUNT(VARIANT_NAMES), s, &v, err, errlen) < 0)
        return -1;
    *out = (est_lora_variant)v;
    return 0;
}

bool est_peft_other(const est_run *run) { return run->peft != EST_PEFT_LORA; }

bool est_peft_on(const est_run *run) { return est_lora_on(run) || est_peft_other(run); }

void est_ia3_defaults(const ft_model *m, uint32_t *targets, uint32_t *feedforward) {
    const uint32_t first = m->arch == FT_ARCH_QWEN2 ? EST_LORA_BIT(EST_LORA_Q) : EST_LORA_BIT(EST_LORA_K);
    *targets = first | EST_LORA_BIT(EST_LORA_V) | EST_LORA_BIT(EST_LORA_DOWN);
    *feedforward = EST_LORA_BIT(EST_LORA_DOWN);
}

/* One block's PEFT elements; `trainable`: only those that train. LoRA's A
 * and B as est_lora_block_params counts them (fused projections, every
 * expert's copy, routers and shared experts), less LoRA-FA's frozen A, plus
 * DoRA's magnitude vectors. */
static int64_t block_params(const est_run *run, bool trainable) {
    int64_t sum = 0;
    for (int t = 0; t < EST_LORA_TARGET_COUNT; t++) {
        int64_t din, dout;
        est_linear_shape(&run->model, (est_lora_target)t, &din, &dout);
        if (run->peft == EST_PEFT_IA3 && (run->ia3_targets & EST_LORA_BIT(t)))
            sum += (run->ia3_feedforward & EST_LORA_BIT(t)) ? din : dout;
    }
    sum += est_adaption_block_params(run); /* peft_prompt.h */
    sum += est_peft_vec_block_params(run, trainable); /* AdaLoRA, VeRA, LN tuning, MiSS */
    sum += est_pdelta_block_params(run); /* LoHa, LoKr, OFT, FourierFT: every element trains */
    if (!est_lora_on(run)) return sum;
    sum += est_lora_block_params(run);
    for (int t = 0; t < EST_LORA_TARGET_COUNT; t++) {
        if (!(run->lora.targets & EST_LORA_BIT(t))) continue;
        int64_t din, dout, copies;
        est_adapter_shape(&run->model, (est_lora_target)t, &din, &dout, &copies);
        if (din <= 0) continue;
        if (trainable && run->lora.variant == EST_LORA_FA) sum -= copies * run->lora.rank * din;
        if (run->lora.variant == EST_LORA_DORA) sum += copies * dout; /* lora_magnitude_vector */
    }
    return sum;
}

int64_t est_peft_block_params(const est_run *run) { return block_params(run, false); }

static int64_t prompt_params(const est_run *run) {
    if (run->peft != EST_PEFT_PROMPT_TUNING) return est_prompt_learning_params(run); /* peft_prompt.h */
    return run->virtual_tokens * run->model.hidden_size;
}

int64_t est_peft_params(const est_run *run) {
    return run->layers_used * block_params(run, false) + prompt_params(run) + est_peft_vec_model_params(run);
}

int64_t est_peft_trainable_params(const est_run *run) {
    return run->layers_used * block_params(run, true) + prompt_params(run) + est_peft_vec_model_params(run);
}

int64_t est_model_positions(const est_run *run) {
    const bool before = run->peft == EST_PEFT_PROMPT_TUNING || run->peft == EST_PEFT_P_TUNING;
    return run->seq_len + (before ? run->virtual_tokens : 0);
}

/* The method's own settings. */
static int validate_method(const est_run *run, char *err, size_t errlen) {
    if (run->lora.variant != EST_LORA_PLAIN && !est_lora_on(run))
        return ft_errorf(err, errlen, "--lora-variant %s needs --lora-rank",
                         est_lora_variant_name(run->lora.variant));
    if (run->lora.variant == EST_LORA_DORA && run->quant != EST_QUANT_NONE)
        return ft_errorf(err, errlen, "DoRA on a quantized base (its weight dequantized for the norm) "
                                      "is not modelled");
    if (run->peft == EST_PEFT_LORA) return 0;
    if (run->lora.rank > 0)
        return ft_errorf(err, errlen, "--lora-rank trains LoRA adapters; --peft %s trains no adapter "
                                      "matrices (drop one of them)", est_peft_name(run->peft));
    if (run->peft == EST_PEFT_IA3) {
        if (run->ia3_targets == 0 || (run->ia3_targets & ~EST_LORA_ALL_LINEAR))
            return ft_errorf(err, errlen, "--ia3-targets names no linear layer");
        if (run->ia3_feedforward & ~run->ia3_targets)
            return ft_errorf(err, errlen, "--ia3-feedforward must be among --ia3-targets (PEFT "
                                          "requires feedforward_modules to be a subset)");
    }
    if (run->peft == EST_PEFT_PROMPT_TUNING) {
        if (run->virtual_tokens < 1 || run->virtual_tokens > EST_LORA_MAX_RANK)
            return ft_errorf(err, errlen, "--virtual-tokens must be between 1 and %d (got %lld)",
                             EST_LORA_MAX_RANK, (long long)run->virtual_tokens);
        const int64_t maxpos = run->model.max_position;
        if (maxpos > 0 && est_model_positions(run) > maxpos)
            return ft_errorf(err, errlen, "--seq %lld plus %lld virtual tokens is above %s's maximum "
                                          "of %lld positions",
                             (long long)run->seq_len, (long long)run->virtual_tokens, run->model.name,
                             (long long)maxpos);
    }
    if (est_prompt_learning_validate(run, err, errlen) < 0) return -1;
    if (est_pdelta_validate(run, err, errlen) < 0) return -1;
    if (run->quant != EST_QUANT_NONE)
        return ft_errorf(err, errlen, "--peft %s on a quantized base is not modelled", est_peft_name(run->peft));
    if (run->model.fused_qkv || run->model.num_experts > 0)
        return ft_errorf(err, errlen, "--peft %s on %s is not modelled (fused projections and experts)",
                         est_peft_name(run->peft), ft_arch_name(run->model.arch));
    return 0;
}

int est_peft_validate(const est_run *run, char *err, size_t errlen) {
    if (validate_method(run, err, errlen) < 0 || est_peft_vec_validate(run, err, errlen) < 0) return -1;
    const bool variant = run->lora.variant != EST_LORA_PLAIN && run->lora.variant != EST_LORA_RSLORA;
    if (est_peft_other(run) || variant) {
        char subject[64];
        snprintf(subject, sizeof subject, "%s %s", est_peft_other(run) ? "--peft" : "--lora-variant",
                 est_peft_other(run) ? est_peft_name(run->peft) : est_lora_variant_name(run->lora.variant));
        if (est_fw_models(run, EST_FEAT_PEFT_METHOD, subject, err, errlen) < 0) return -1;
    }
    if (run->train_loop == EST_LOOP_PLAIN && est_fw_models(run, EST_FEAT_PLAIN_LOOP, NULL, err, errlen) < 0)
        return -1;
    if (run->empty_cache_steps > 0 && run->train_loop != EST_LOOP_PLAIN)
        return ft_errorf(err, errlen, "--empty-cache-steps is modelled for --train-loop plain (the "
                                      "Trainer's torch_empty_cache_steps empties inside its step)");
    if (run->empty_cache_steps < 0)
        return ft_errorf(err, errlen, "--empty-cache-steps must be 0 or more");
    if (run->seq_mean != 0 && !(run->seq_mean >= 1 && run->seq_mean <= (double)run->seq_len))
        return ft_errorf(err, errlen, "the mean sequence length (%g) must be between 1 and --seq %lld "
                                      "(the longest batch)", run->seq_mean, (long long)run->seq_len);
    if (run->seq_tokens_mean != 0 && !(run->seq_tokens_mean >= 1 && run->seq_tokens_mean <= run->seq_mean))
        return ft_errorf(err, errlen, "one rank's mean sequence length (%g) must be between 1 and the "
                                      "step's (%g)", run->seq_tokens_mean, run->seq_mean);
    return 0;
}
