#include "objective.h"

#include <stdio.h>
#include <string.h>

#include "fw_registry.h"
#include "json_util.h"
#include "lora.h"

/* Index = est_rl. */
static const char *const RL_NAMES[] = {"none", "dpo", "orpo", "kto"};

const char *est_rl_name(est_rl r) {
    return (int)r >= 0 && (size_t)r < sizeof RL_NAMES / sizeof RL_NAMES[0] ? RL_NAMES[r] : "?";
}

int est_rl_parse(const char *s, est_rl *out, char *err, size_t errlen) {
    int v;
    if (ft_parse_choice("--rl", RL_NAMES, (int)(sizeof RL_NAMES / sizeof RL_NAMES[0]), s, &v, err, errlen) < 0)
        return -1;
    *out = (est_rl)v;
    return 0;
}

int est_save_parse(const char *s, uint32_t *out, char *err, size_t errlen) {
    if (!s || !*s) return ft_errorf(err, errlen, "--modules-to-save needs a value");
    uint32_t bits = 0;
    for (const char *p = s; *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        /* PEFT matches a name against the end of each module's path
         * (peft 0.14 utils/other.py _set_trainable: key.endswith(name)). */
        if ((n == 12 && !strncmp(p, "embed_tokens", n)) || (n == 5 && !strncmp(p, "embed", n)))
            bits |= EST_SAVE_EMBED;
        else if ((n == 7 && !strncmp(p, "lm_head", n)) || (n == 4 && !strncmp(p, "head", n)))
            bits |= EST_SAVE_HEAD;
        else
            return ft_errorf(err, errlen, "--modules-to-save: \"%.*s\" is not embed_tokens or lm_head",
                             (int)(n > 24 ? 24 : n), p);
        if (!end) break;
        p = end + 1;
        if (!*p) return ft_errorf(err, errlen, "--modules-to-save: empty name after ','");
    }
    *out = bits;
    return 0;
}

const char *est_save_name(uint32_t bits, char *buf, size_t n) {
    snprintf(buf, n, "%s%s%s", bits & EST_SAVE_EMBED ? "embed_tokens" : "",
             (bits & EST_SAVE_EMBED) && (bits & EST_SAVE_HEAD) ? "," : "",
             bits & EST_SAVE_HEAD ? "lm_head" : "");
    return buf;
}

int64_t est_policy_rows(const est_run *run) {
    return run->rl == EST_RL_DPO || run->rl == EST_RL_ORPO ? 2 * run->micro_batch : run->micro_batch;
}

bool est_rl_reference_forward(const est_run *run) {
    return (run->rl == EST_RL_DPO || run->rl == EST_RL_KTO) && !run->rl_precomputed_ref;
}

bool est_rl_reference_copy(const est_run *run) {
    return est_rl_reference_forward(run) && !est_lora_on(run);
}

int64_t est_save_params(const est_run *run) {
    if (!est_lora_on(run)) return 0;
    const int64_t vh = run->model.vocab_size * run->model.hidden_size;
    return ((run->modules_to_save & EST_SAVE_EMBED) ? vh : 0) + ((run->modules_to_save & EST_SAVE_HEAD) ? vh : 0);
}

const char *est_objective_describe(const est_run *run, char *buf, size_t n) {
    size_t used = 0;
    buf[0] = '\0';
    if (run->rl != EST_RL_NONE) {
        const char *ref = !est_rl_reference_forward(run) ? (run->rl == EST_RL_ORPO ? "no reference model"
                                                                                  : "reference log-probs precomputed")
                          : est_lora_on(run) ? "reference: the base, adapters disabled, under no_grad"
                                             : "reference: a frozen copy, under no_grad";
        int w = snprintf(buf, n, "%s (TRL): %lld rows per micro-batch%s; %s", run->rl == EST_RL_DPO ? "DPO"
                         : run->rl == EST_RL_ORPO ? "ORPO" : "KTO", (long long)est_policy_rows(run),
                         est_policy_rows(run) > run->micro_batch ? " (chosen and rejected)" : "", ref);
        used = w > 0 && (size_t)w < n ? (size_t)w : strlen(buf);
    }
    if (run->packed) {
        int w = run->packed_sample_len > 0
                    ? snprintf(buf + used, n - used, "%spacked rows, samples of %lld tokens (length-weighted)",
                               used ? "; " : "", (long long)run->packed_sample_len)
                    : snprintf(buf + used, n - used, "%spacked rows (attention taken at one sample per row)",
                               used ? "; " : "");
        used = w > 0 && (size_t)w < n - used ? used + (size_t)w : strlen(buf);
    }
    if (run->ckpt_non_reentrant && run->checkpointing == EST_CKPT_FULL) {
        int w = snprintf(buf + used, n - used, "%snon-reentrant checkpoints", used ? "; " : "");
        used = w > 0 && (size_t)w < n - used ? used + (size_t)w : strlen(buf);
    }
    if (run->ckpt_every > 1 && est_run_ckpt_wraps(run)) {
        int w = snprintf(buf + used, n - used, "%sone block in %lld checkpointed", used ? "; " : "",
                         (long long)run->ckpt_every);
        used = w > 0 && (size_t)w < n - used ? used + (size_t)w : strlen(buf);
    }
    if (run->compiled)
        snprintf(buf + used, n - used, "%storch.compile (inductor; AOTAutograd's min-cut partition)",
                 used ? "; " : "");
    return buf;
}

/* TRL's trainers on the seams that model them. */
static int validate_rl(const est_run *run, char *err, size_t errlen) {
    if (run->rl == EST_RL_NONE) {
        if (run->rl_precomputed_ref) return ft_errorf(err, errlen, "--precomputed-ref needs --rl dpo or kto");
        return 0;
    }
    if (run->rl_precomputed_ref && run->rl == EST_RL_ORPO)
        return ft_errorf(err, errlen, "ORPO has no reference model (--precomputed-ref applies to dpo and kto)");
    if (run->packed) return ft_errorf(err, errlen, "preference training with packed sequences is not modelled "
                                                    "(axolotl refuses it too)");
    return est_fw_models(run, EST_FEAT_RL, est_rl_name(run->rl), err, errlen);
}

int est_objective_validate(const est_run *run, char *err, size_t errlen) {
    if (validate_rl(run, err, errlen) < 0) return -1;
    if (run->modules_to_save & ~(EST_SAVE_EMBED | EST_SAVE_HEAD))
        return ft_errorf(err, errlen, "--modules-to-save names no module");
    if (run->modules_to_save && !est_lora_on(run))
        return ft_errorf(err, errlen, "--modules-to-save is PEFT's: it needs --lora-rank");
    if (run->modules_to_save && est_fw_models(run, EST_FEAT_MODULES_TO_SAVE, NULL, err, errlen) < 0)
        return -1;
    if (run->packed_sample_len != 0 && !run->packed)
        return ft_errorf(err, errlen, "--packed-sample-len needs --packing");
    if (run->packed_sample_len < 0 || run->packed_sample_len > run->seq_len)
        return ft_errorf(err, errlen, "--packed-sample-len must be between 1 and --seq (%lld)",
                         (long long)run->seq_len);
    if (run->packed && run->attention != EST_ATTN_FLASH && !run->packed_flex)
        return ft_errorf(err, errlen, "packing is modelled with flash attention (varlen by position_ids); "
                                      "with eager or sdpa it needs a block-causal mask, not modelled");
    if (run->packed && run->padding_mask)
        return ft_errorf(err, errlen, "packed rows carry no padding mask (--packing with --padding-mask)");
    if (run->ckpt_non_reentrant && run->checkpointing != EST_CKPT_FULL)
        return ft_errorf(err, errlen, "--non-reentrant applies to --checkpointing full");
    if (run->ckpt_non_reentrant && est_fw_models(run, EST_FEAT_NON_REENTRANT, NULL, err, errlen) < 0)
        return -1;
    return 0;
}
