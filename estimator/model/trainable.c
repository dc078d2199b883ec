/* Partial training (trainable.h): the parameters' Hugging Face names, the
 * patterns matched over them, and what each module trains. */
#include "trainable.h"

#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block.h"
#include "json_util.h"
#include "lora.h"
#include "peft.h"

/* A module parameter's name as the builders write it ("q_proj.weight",
 * "q_proj.lora_A", "input_layernorm", "router", "shared_expert.gate_proj")
 * split into the module path and the tensor's leaf. */
typedef struct split_name {
    char stem[EST_MOD_NAME];
    const char *leaf; /* weight, bias, lora_A, lora_B, lora_magnitude, ia3_l */
} split_name;

static void split(const char *name, split_name *out) {
    static const char *const LEAVES[] = {"weight", "bias", "lora_A", "lora_B", "lora_magnitude", "ia3_l"};
    ft_strlcpy(out->stem, name, sizeof out->stem);
    out->leaf = "weight";
    const char *dot = strrchr(name, '.');
    if (!dot) return;
    for (size_t i = 0; i < sizeof LEAVES / sizeof *LEAVES; i++)
        if (!strcmp(dot + 1, LEAVES[i])) {
            out->stem[dot - name] = '\0';
            out->leaf = LEAVES[i];
            return;
        }
}

/* A routed expert's Linear: Mixtral's w1 (gate), w3 (up), w2 (down) in
 * block_sparse_moe.experts.E; Qwen2-MoE's and Qwen3-MoE's mlp.experts.E.*_proj. */
static int expert_path(const ft_model *md, const char *stem, int64_t e, char *out, size_t n) {
    const bool mixtral = md->arch == FT_ARCH_MIXTRAL;
    const char *w = !strcmp(stem, "gate_proj") ? "w1" : !strcmp(stem, "up_proj") ? "w3" : "w2";
    int k = mixtral ? snprintf(out, n, "block_sparse_moe.experts.%lld.%s", (long long)e, w)
                    : snprintf(out, n, "mlp.experts.%lld.%s", (long long)e, stem);
    return k < 0 || (size_t)k >= n ? -1 : 0;
}

/* transformers 5.x's fused experts (block_moe.c: "experts.gate_up_proj",
 * "experts.down_proj"): a 3-D nn.Parameter of MixtralExperts (5.23.0), named
 * mlp.experts.gate_up_proj with no leaf; the router is mlp.gate.weight. */
static bool fused_expert(const char *stem) { return !strncmp(stem, "experts.", 8); }

/* The module path of a block parameter's stem inside model.layers.i. */
static int block_path(const est_run *run, const char *stem, int64_t e, char *out, size_t n) {
    const ft_model *md = &run->model;
    const bool v5 = run->stack && run->stack->moe_experts_fused;
    if (fused_expert(stem)) return snprintf(out, n, "mlp.%s", stem) < (int)n ? 0 : -1;
    static const char *const ATTN[] = {"q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj", "q_norm", "k_norm"};
    static const char *const MLP[] = {"gate_proj", "up_proj", "down_proj", "gate_up_proj"};
    for (size_t i = 0; i < sizeof ATTN / sizeof *ATTN; i++)
        if (!strcmp(stem, ATTN[i])) return snprintf(out, n, "self_attn.%s", stem) < (int)n ? 0 : -1;
    for (size_t i = 0; i < sizeof MLP / sizeof *MLP; i++)
        if (!strcmp(stem, MLP[i]))
            return md->num_experts > 0 ? expert_path(md, stem, e, out, n)
                                       : (snprintf(out, n, "mlp.%s", stem) < (int)n ? 0 : -1);
    if (!strcmp(stem, "router"))
        return snprintf(out, n, "%s", md->arch == FT_ARCH_MIXTRAL && !v5 ? "block_sparse_moe.gate" : "mlp.gate") < (int)n
                   ? 0 : -1;
    if (!strncmp(stem, "shared_expert", 13)) return snprintf(out, n, "mlp.%s", stem) < (int)n ? 0 : -1;
    return snprintf(out, n, "%s", stem) < (int)n ? 0 : -1; /* the norms */
}

/* The path of an embedding or head parameter (PEFT's modules_to_save copy
 * lives in the wrapper: <module>.modules_to_save.default, its frozen
 * original in <module>.original_module; prompt tuning's encoder sits on the
 * PeftModel itself). */
static int end_path(const est_module *m, const char *stem, char *out, size_t n) {
    const bool copy = !strncmp(stem, "modules_to_save.", 16);
    const char *own = copy ? stem + 16 : stem;
    const char *home = !strcmp(own, "norm") ? "model.norm"
                       : !strcmp(own, "lm_head") ? "lm_head"
                       : !strncmp(own, "prompt_encoder", 14) ? "prompt_encoder.default.embedding"
                                                              : "model.embed_tokens";
    char wrapper[EST_MOD_NAME + 16];
    snprintf(wrapper, sizeof wrapper, "modules_to_save.%s", own);
    bool wrapped = false;
    for (int q = 0; q < m->n_params && !copy; q++) wrapped |= !strcmp(m->params[q].name, wrapper);
    const int k = snprintf(out, n, "%s%s", home, copy ? ".modules_to_save.default" : wrapped ? ".original_module" : "");
    return k < 0 || (size_t)k >= n ? -1 : 0;
}

/* Is the Linear at `stem` wrapped by a PEFT tuner layer (an adapter of it is
 * among the module's parameters)? Its own weight is then base_layer.weight. */
static bool tuned(const est_module *m, const char *stem) {
    const size_t len = strlen(stem);
    for (int q = 0; q < m->n_params; q++) {
        const char *nm = m->params[q].name;
        if (!strncmp(nm, stem, len) && nm[len] == '.' &&
            (!strcmp(nm + len + 1, "lora_A") || !strcmp(nm + len + 1, "ia3_l")))
            return true;
    }
    return false;
}

static const char *leaf_name(const char *leaf) {
    return !strcmp(leaf, "lora_A") ? "lora_A.default.weight"
           : !strcmp(leaf, "lora_B") ? "lora_B.default.weight"
           : !strcmp(leaf, "lora_magnitude") ? "lora_magnitude_vector.default.weight"
           : !strcmp(leaf, "ia3_l") ? "ia3_l.default"
                                    : leaf;
}

int est_param_hf_name(const est_run *run, const est_module *m, int p, int64_t layer, int64_t expert,
                      char *out, size_t n) {
    split_name sp;
    split(m->params[p].name, &sp);
    char path[128];
    int rc = m->kind == EST_MODULE_BLOCK ? block_path(run, sp.stem, expert, path, sizeof path)
                                         : end_path(m, sp.stem, path, sizeof path);
    if (rc) return -1;
    const bool peft = est_peft_on(run);
    const bool base = !strcmp(sp.leaf, "weight") || !strcmp(sp.leaf, "bias");
    const char *wrap = peft && base && m->kind == EST_MODULE_BLOCK && tuned(m, sp.stem) ? "base_layer." : "";
    char layer_part[48] = "";
    if (m->kind == EST_MODULE_BLOCK) snprintf(layer_part, sizeof layer_part, "model.layers.%lld.", (long long)layer);
    const bool outside = !strncmp(path, "prompt_encoder", 14); /* on the PeftModel itself */
    const bool leafless = m->kind == EST_MODULE_BLOCK && fused_expert(sp.stem); /* a bare nn.Parameter */
    const int k = snprintf(out, n, "%s%s%s%s%s%s", peft && !outside ? "base_model.model." : "", layer_part, path,
                           leafless ? "" : ".", wrap, leafless ? "" : leaf_name(sp.leaf));
    return k < 0 || (size_t)k >= n ? -1 : 0;
}

/* The run's patterns, compiled, with how many names each matched. */
typedef struct patterns {
    regex_t re[EST_TRAINABLE_MAX];
    int n;
    int64_t hits[EST_TRAINABLE_MAX];
} patterns;

static void patterns_free(patterns *ps) {
    for (int i = 0; i < ps->n; i++) regfree(&ps->re[i]);
    ps->n = 0;
}

/* Python's re has classes and groups POSIX lacks: refused rather than read
 * as something else (glibc reads \d as a plain d). */
static int python_only(const char *p, char *err, size_t errlen) {
    for (const char *c = p; *c; c++) {
        if (c[0] == '\\' && c[1] && strchr("dDwWsSbBAZ", c[1]))
            return ft_errorf(err, errlen, "uses \\%c, which POSIX regular expressions lack (write [0-9] "
                                          "for \\d)", c[1]);
        if (c[0] == '(' && c[1] == '?')
            return ft_errorf(err, errlen, "uses Python's (?...) group, which POSIX regular expressions lack");
    }
    return 0;
}

/* glibc's regcomp copies a repeated subexpression once per repetition, and
 * again for every stacked operator (a++++ doubles it each time): a
 * 96-character pattern could ask for gigabytes. Refused: a repetition
 * operator right after another (Python's re calls it "multiple repeat"),
 * and bounds {m,n} whose product exceeds 1000. Bracket expressions and
 * escaped characters are literal. */
static int repetition_bounded(const char *p, char *err, size_t errlen) {
    double product = 1;
    bool in_bracket = false, after_repeat = false;
    for (const char *c = p; *c; c++) {
        if (in_bracket) {
            if (*c == ']' && c[-1] != '[' && !(c[-1] == '^' && c[-2] == '[')) in_bracket = false;
            continue;
        }
        const bool repeat = *c == '*' || *c == '+' || *c == '?' || *c == '{';
        if (repeat && after_repeat)
            return ft_errorf(err, errlen, "stacks one repetition operator on another");
        after_repeat = false;
        if (*c == '\\' && c[1]) {
            c++;
        } else if (*c == '[') {
            in_bracket = true;
        } else if (*c == '{') {
            const char *close = strchr(c, '}');
            if (!close) return 0; /* regcomp says what is wrong */
            const char *comma = memchr(c, ',', (size_t)(close - c));
            const double lo = atof(c + 1), hi = comma && comma + 1 < close ? atof(comma + 1) : lo;
            product *= hi > lo ? hi : lo > 1 ? lo : 1;
            if (product > 1000)
                return ft_errorf(err, errlen, "repeats more than 1000 times in all ({m,n} bounds multiply)");
            c = close;
            after_repeat = true;
        } else {
            after_repeat = *c == '*' || *c == '+' || *c == '?';
        }
    }
    return 0;
}

int est_trainable_pattern_check(const char *pattern, char *err, size_t errlen) {
    if (python_only(pattern, err, errlen) || repetition_bounded(pattern, err, errlen)) return -1;
    regex_t re;
    const int rc = regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB);
    if (rc) {
        char why[128];
        regerror(rc, &re, why, sizeof why);
        return ft_errorf(err, errlen, "is not a regular expression: %s", why);
    }
    regfree(&re);
    return 0;
}

static int compile(const est_trainable *t, patterns *ps, char *err, size_t errlen) {
    memset(ps, 0, sizeof *ps);
    for (int i = 0; i < t->n && i < EST_TRAINABLE_MAX; i++) {
        char why[200];
        if (est_trainable_pattern_check(t->pattern[i], why, sizeof why) ||
            regcomp(&ps->re[i], t->pattern[i], REG_EXTENDED | REG_NOSUB)) {
            patterns_free(ps);
            return ft_errorf(err, errlen, "--trainable pattern \"%s\" %s", t->pattern[i], why);
        }
        ps->n = i + 1;
    }
    return 0;
}

static bool matches(patterns *ps, const char *name) {
    bool any = false;
    for (int i = 0; i < ps->n; i++)
        if (regexec(&ps->re[i], name, 0, NULL, 0) == 0) {
            ps->hits[i]++;
            any = true;
        }
    return any;
}

/* bitsandbytes holds a quantized base weight as uint8 (Params4bit/Int8Params):
 * it cannot require grad. */
static bool quantized(const est_run *run, const est_module *m, int p) {
    return run->quant != EST_QUANT_NONE && m->kind == EST_MODULE_BLOCK && m->params[p].kind == EST_PK_LINEAR_WEIGHT;
}

/* The parameters of module m (block `layer`) that a pattern matches. */
static int module_mask(const est_run *run, const est_module *m, int64_t layer, patterns *ps, uint64_t *mask,
                       char *err, size_t errlen) {
    *mask = 0;
    char name[192];
    for (int p = 0; p < m->n_params && p < 64; p++) {
        if (m->params[p].tied) continue; /* not in named_parameters(): the embedding's */
        const int64_t E = m->params[p].copies;
        int64_t hit = 0;
        for (int64_t e = 0; e < E; e++) {
            if (est_param_hf_name(run, m, p, layer, e, name, sizeof name))
                return ft_errorf(err, errlen, "internal: parameter %s's name is too long", m->params[p].name);
            hit += matches(ps, name);
        }
        if (hit == 0) continue;
        if (hit < E)
            return ft_errorf(err, errlen, "--trainable matches %lld of the %lld experts of %s: training some "
                                          "experts of a layer is not modelled",
                             (long long)hit, (long long)E, name);
        if (quantized(run, m, p))
            return ft_errorf(err, errlen, "--trainable matches %s, a quantized base weight (bitsandbytes "
                                          "stores it as uint8, which cannot require grad)", name);
        *mask |= UINT64_C(1) << p;
    }
    return 0;
}

static void count(const est_module *m, uint64_t mask, int64_t copies, est_train_plan *plan) {
    for (int p = 0; p < m->n_params; p++) {
        const est_mparam *q = &m->params[p];
        if (q->tied) continue;
        const int64_t e = q->rows * q->cols * q->copies * copies;
        plan->total_elems += e;
        if ((mask >> p) & 1) plan->trainable_elems += e;
    }
}

/* What requires grad, module by module: a block's input does once anything
 * before it trains or the embedding's output is made to require grad (PEFT
 * under checkpointing, or --trainable's input_grads); reentrant checkpointing
 * gives a block whose input needs none no gradient at all
 * (torch/utils/checkpoint.py CheckpointFunction: its output requires grad only
 * through its inputs). */
static int grad_chain(const est_run *run, est_train_plan *plan, char *err, size_t errlen) {
    plan->embed_in_grad = run->trainable.input_grads;
    bool before = plan->embed_in_grad || plan->embed_mask != 0 ||
                  (est_peft_on(run) && run->checkpointing == EST_CKPT_FULL);
    for (int64_t i = 0; i < plan->L; i++) {
        plan->block_in_grad[i] = before;
        if (!plan->block_mask[i]) continue;
        if (!before && run->checkpointing == EST_CKPT_FULL && !run->ckpt_non_reentrant)
            return ft_errorf(err, errlen, "--trainable with reentrant checkpointing: layer %lld trains but its "
                                          "input needs no gradient, so torch's reentrant checkpoint gives its "
                                          "parameters none (use --non-reentrant)", (long long)i);
        before = true;
    }
    plan->head_in_grad = before;
    if (!before && plan->head_mask == 0)
        return ft_errorf(err, errlen, "--trainable leaves nothing that trains or needs a gradient: the loss has "
                                      "no gradient (loss.backward() fails)");
    return 0;
}

static int unmatched(const est_run *run, const patterns *ps, const est_module *block, char *err, size_t errlen) {
    for (int i = 0; i < ps->n; i++) {
        if (ps->hits[i] > 0 || run->trainable.lenient) continue;
        char example[192] = "";
        if (block->n_params > 0) est_param_hf_name(run, block, 0, 0, 0, example, sizeof example);
        return ft_errorf(err, errlen, "--trainable pattern \"%s\" matches no parameter (names look like %s)",
                         run->trainable.pattern[i], example);
    }
    return 0;
}

static int plan_masks(const est_run *run, const est_module *embed, const est_module *block,
                      const est_module *head, est_train_plan *plan, patterns *ps, char *err, size_t errlen) {
    if (module_mask(run, embed, -1, ps, &plan->embed_mask, err, errlen)) return -1;
    for (int64_t i = 0; i < plan->L; i++)
        if (module_mask(run, block, i, ps, &plan->block_mask[i], err, errlen)) return -1;
    if (module_mask(run, head, plan->L, ps, &plan->head_mask, err, errlen)) return -1;
    for (int p = 0; p < head->n_params; p++) /* a tied head trains with the embedding */
        if (head->params[p].tied && (plan->embed_mask & 1)) plan->head_mask |= UINT64_C(1) << p;
    if (unmatched(run, ps, block, err, errlen)) return -1;
    count(embed, plan->embed_mask, 1, plan);
    count(head, plan->head_mask, 1, plan);
    for (int64_t i = 0; i < plan->L; i++) count(block, plan->block_mask[i], 1, plan);
    return grad_chain(run, plan, err, errlen);
}

int est_train_plan_make(const est_run *run, const est_module *embed, const est_module *block,
                        const est_module *head, est_train_plan *plan, char *err, size_t errlen) {
    memset(plan, 0, sizeof *plan);
    plan->L = run->layers_used;
    if (embed->n_params > 64 || block->n_params > 64 || head->n_params > 64)
        return ft_errorf(err, errlen, "internal: a module has more parameters than --trainable's masks hold");
    plan->block_mask = calloc((size_t)plan->L + 1, sizeof *plan->block_mask);
    plan->block_in_grad = calloc((size_t)plan->L + 1, sizeof *plan->block_in_grad);
    if (!plan->block_mask || !plan->block_in_grad) {
        est_train_plan_free(plan);
        return ft_errorf(err, errlen, "out of memory");
    }
    patterns ps;
    if (compile(&run->trainable, &ps, err, errlen)) {
        est_train_plan_free(plan);
        return -1;
    }
    const int rc = plan_masks(run, embed, block, head, plan, &ps, err, errlen);
    patterns_free(&ps);
    if (rc) est_train_plan_free(plan);
    return rc;
}

void est_train_plan_free(est_train_plan *plan) {
    free(plan->block_mask);
    free(plan->block_in_grad);
    plan->block_mask = NULL;
    plan->block_in_grad = NULL;
}

void est_train_plan_regime(const est_train_plan *plan, int64_t i, est_regime *g) {
    g->masked = true;
    if (i < 0) {
        g->train_mask = plan->embed_mask;
        g->in_grad = plan->embed_in_grad;
    } else if (i >= plan->L) {
        g->train_mask = plan->head_mask;
        g->in_grad = plan->head_in_grad;
    } else {
        g->train_mask = plan->block_mask[i];
        g->in_grad = plan->block_in_grad[i];
    }
}

int est_trainable_count(const est_run *run, int64_t *trainable, int64_t *total, char *err, size_t errlen) {
    est_module *m = malloc(3 * sizeof *m);
    if (!m) return ft_errorf(err, errlen, "out of memory");
    /* names and shapes only: any regime builds the same parameters */
    const est_regime g = {.act = 2, .resid = 2, .weight = 2, .adapter = 4, .train_base = !est_peft_on(run)};
    int rc = est_module_embedding(run, &g, &m[0], err, errlen) || est_module_block(run, &g, false, &m[1], err, errlen) ||
             est_module_head(run, &g, &m[2], err, errlen) ? -1 : 0;
    est_train_plan plan;
    if (rc == 0) rc = est_train_plan_make(run, &m[0], &m[1], &m[2], &plan, err, errlen);
    if (rc == 0) {
        if (trainable) *trainable = plan.trainable_elems;
        if (total) *total = plan.total_elems;
        est_train_plan_free(&plan);
    }
    free(m);
    return rc;
}
