#include "lora.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fw_registry.h"
#include "json_util.h"
#include "params.h"

static const char *const TARGET_NAMES[EST_LORA_TARGET_COUNT] = {"q", "k", "v", "o",
                                                                 "gate", "up", "down"};

void est_lora_defaults(est_lora *l) {
    l->rank = 0;
    l->alpha = EST_LORA_DEFAULT_ALPHA;
    l->targets = EST_LORA_DEFAULT_TARGETS;
    l->dropout = 0;
}

bool est_lora_on(const est_run *run) { return run->lora.rank > 0; }

bool est_lora_a_grad(const est_run *run) { return run->lora.variant != EST_LORA_FA || run->lora.fa_a_grad; }

bool est_lora_a_stepped(const est_run *run) { return run->lora.variant != EST_LORA_FA; }

bool est_lora_is_a(const char *name) {
    const size_t n = name ? strlen(name) : 0;
    return n >= 6 && !strcmp(name + n - 6, "lora_A");
}

int est_lora_targets_parse(const char *s, uint32_t *out, char *err, size_t errlen) {
    if (!s || !*s) return ft_errorf(err, errlen, "--lora-targets needs a value");
    if (!strcmp(s, "all-linear") || !strcmp(s, "all")) {
        *out = EST_LORA_ALL_LINEAR;
        return 0;
    }
    uint32_t set = 0;
    const char *p = s;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        /* PEFT's module names carry a _proj suffix: accept both spellings. */
        size_t stem = n > 5 && !strncmp(p + n - 5, "_proj", 5) ? n - 5 : n;
        int found = -1;
        for (int t = 0; t < EST_LORA_TARGET_COUNT; t++)
            if (strlen(TARGET_NAMES[t]) == stem && !strncmp(p, TARGET_NAMES[t], stem)) found = t;
        if (found < 0)
            return ft_errorf(err, errlen,
                             "--lora-targets: \"%.*s\" is not one of q, k, v, o, gate, up, down, "
                             "all-linear",
                             (int)(n > 20 ? 20 : n), p);
        set |= EST_LORA_BIT(found);
        if (!end) break;
        p = end + 1;
        if (!*p) return ft_errorf(err, errlen, "--lora-targets: empty name after ','");
    }
    *out = set;
    return 0;
}

const char *est_lora_targets_name(uint32_t targets, char *buf, size_t n) {
    if (n == 0) return buf;
    buf[0] = '\0';
    if (targets == EST_LORA_ALL_LINEAR) {
        ft_strlcpy(buf, "all-linear", n);
        return buf;
    }
    size_t used = 0;
    for (int t = 0; t < EST_LORA_TARGET_COUNT; t++) {
        if (!(targets & EST_LORA_BIT(t))) continue;
        int w = snprintf(buf + used, n - used, "%s%s", used ? "," : "", TARGET_NAMES[t]);
        if (w < 0 || (size_t)w >= n - used) break;
        used += (size_t)w;
    }
    return buf;
}

void est_linear_shape(const ft_model *m, est_lora_target t, int64_t *d_in, int64_t *d_out) {
    const int64_t h = m->hidden_size, f = m->intermediate_size;
    const int64_t q = m->num_heads * m->head_dim, kv = m->num_kv_heads * m->head_dim;
    switch (t) {
    case EST_LORA_Q: *d_in = h; *d_out = q; return;
    case EST_LORA_K:
    case EST_LORA_V: *d_in = h; *d_out = kv; return;
    case EST_LORA_O: *d_in = q; *d_out = h; return;
    case EST_LORA_GATE:
    case EST_LORA_UP: *d_in = h; *d_out = f; return;
    case EST_LORA_DOWN: *d_in = f; *d_out = h; return;
    case EST_LORA_TARGET_COUNT: break;
    }
    *d_in = *d_out = 0;
}

est_lora_input est_linear_input(est_lora_target t) {
    switch (t) {
    case EST_LORA_Q:
    case EST_LORA_K:
    case EST_LORA_V: return EST_LORA_IN_ATTN_NORM;
    case EST_LORA_O: return EST_LORA_IN_ATTN_OUT;
    case EST_LORA_GATE:
    case EST_LORA_UP: return EST_LORA_IN_MLP_NORM;
    default: return EST_LORA_IN_MLP_PRODUCT;
    }
}

int est_lora_target_count(const est_run *run) {
    int n = 0;
    for (int t = 0; t < EST_LORA_TARGET_COUNT; t++) n += (run->lora.targets >> t) & 1u;
    return n;
}

/* PEFT's target names on the fused and expert layers (peft 0.12-0.14
 * check_target_module_exists: a name matches the end of a module's path):
 *  - Phi-3 (modeling_phi3.py): one qkv_proj (h, q + 2 kv) and one gate_up_proj
 *    (h, 2 I); the target bit q stands for qkv_proj, gate for gate_up_proj,
 *    and k, v, up name no module there;
 *  - mixture of experts (transformers 4.40-4.49: each expert's three
 *    nn.Linear, Mixtral's w1/w3/w2, Qwen2/3-MoE's gate/up/down_proj): the
 *    gate, up and down bits target every routed expert's, E adapters of the
 *    expert's shape; Qwen2-MoE's shared expert takes the same names. */
void est_adapter_shape(const ft_model *m, est_lora_target t, int64_t *d_in, int64_t *d_out, int64_t *copies) {
    est_linear_shape(m, t, d_in, d_out);
    *copies = 1;
    if (m->fused_qkv && (t == EST_LORA_K || t == EST_LORA_V)) *d_in = *d_out = 0;
    if (m->fused_qkv && t == EST_LORA_Q) *d_out = (m->num_heads + 2 * m->num_kv_heads) * m->head_dim;
    if (m->fused_gate_up && t == EST_LORA_UP) *d_in = *d_out = 0;
    if (m->fused_gate_up && t == EST_LORA_GATE) *d_out = 2 * m->intermediate_size;
    if (m->num_experts > 0 && t >= EST_LORA_GATE) {
        const int64_t fe = m->moe_intermediate_size;
        if (t == EST_LORA_DOWN) *d_in = fe;
        else *d_out = fe;
        *copies = m->num_experts;
    }
}

/* Mixture of experts beside the routed experts: the shared expert's three
 * Linears by name, and, under all-linear only (every nn.Linear but the LM
 * head), the router (h, E) and the shared expert's (h, 1) gate. */
static int64_t moe_extra_adapters(const est_run *run) {
    const ft_model *m = &run->model;
    const int64_t r = run->lora.rank, h = m->hidden_size, fs = m->shared_expert_intermediate_size;
    int64_t sum = 0;
    if (fs > 0)
        for (int t = EST_LORA_GATE; t <= EST_LORA_DOWN; t++)
            if (run->lora.targets & EST_LORA_BIT(t)) sum += r * (h + fs);
    if (run->lora.targets == EST_LORA_ALL_LINEAR) sum += r * (h + m->num_experts) + (fs > 0 ? r * (h + 1) : 0);
    return sum;
}

int64_t est_lora_block_params(const est_run *run) {
    if (!est_lora_on(run)) return 0;
    int64_t sum = 0;
    for (int t = 0; t < EST_LORA_TARGET_COUNT; t++) {
        if (!(run->lora.targets & EST_LORA_BIT(t))) continue;
        int64_t din, dout, copies;
        est_adapter_shape(&run->model, (est_lora_target)t, &din, &dout, &copies);
        if (din > 0) sum += copies * run->lora.rank * (din + dout); /* A (r, d_in) + B (d_out, r), no bias */
    }
    return sum + (run->model.num_experts > 0 ? moe_extra_adapters(run) : 0);
}

int64_t est_lora_params(const est_run *run) { return run->layers_used * est_lora_block_params(run); }

int64_t est_trainable_params(const est_run *run) {
    if (est_lora_on(run)) return est_lora_params(run);
    est_params p;
    est_count_params(&run->model, run->layers_used, &p);
    return p.total;
}

int64_t est_lora_weight_bytes(const est_run *run) {
    return run->lora.base_dtype && run->precision == EST_PREC_BF16 ? 2 : 4;
}

/* Three regimes, from PEFT's `x = x.to(lora_A.weight.dtype)` with fp32 adapters:
 *  - mixed precision (autocast over a bf16/fp16 base): x.to(fp32) makes a new
 *    tensor, which autocast casts back for A's matmul: A saves that cast copy
 *    (c bytes per element), its own for every adapter; B saves A's output (c);
 *  - pure bf16 (no autocast): A runs in fp32 on the fp32 copy and saves it (4),
 *    B saves A's fp32 output (4);
 *  - fp32: x.to(fp32) returns x itself, so A saves the tensor the base layer
 *    received, shared by adapters reading the same input and by the base when
 *    it saves its input; B saves A's fp32 output.
 * Dropout (p > 0) runs on the copy: native_dropout saves a bool mask (1 byte
 * per element) and A saves the dropout's output, a tensor of its own. */
void est_lora_saved(const est_run *run, const bool base_saves[EST_LORA_IN_COUNT],
                    est_lora_saved_bytes *out) {
    memset(out, 0, sizeof *out);
    if (!est_lora_on(run)) return;
    const int64_t T = est_tokens(run), r = run->lora.rank;
    const int64_t c = est_compute_dtype_bytes(run->precision);
    const bool mixed = est_has_master(run->precision);
    /* FSDP's MixedPrecision gathers the fp32 adapters in the compute dtype and
     * autocast leaves the compute-dtype x alone: A saves x itself, as in fp32. */
    const bool fsdp = est_fw_of(run)->adapters_in_compute_dtype;
    const bool fp32 = run->precision == EST_PREC_FP32 || fsdp;
    const bool dropout = run->lora.dropout > 0;
    const int64_t x_elem = fsdp ? c : 4;    /* the shared x */
    const int64_t a_elem = mixed ? c : 4;   /* A's saved input, bytes per element */
    const int64_t b_elem = mixed ? c : 4;   /* B's saved input */
    bool shared_counted[EST_LORA_IN_COUNT] = {false};
    for (int t = 0; t < EST_LORA_TARGET_COUNT; t++) {
        if (!(run->lora.targets & EST_LORA_BIT(t))) continue;
        int64_t din, dout;
        est_linear_shape(&run->model, (est_lora_target)t, &din, &dout);
        const est_lora_input g = est_linear_input((est_lora_target)t);
        out->b_inputs += T * r * b_elem;
        if (dropout) {
            out->dropout_masks += T * din;
            out->a_inputs += T * din * a_elem;
        } else if (fp32) {
            /* The very tensor the base received: counted once per group, and
             * not at all when the base saves it already. */
            if (!base_saves[g] && !shared_counted[g]) out->a_inputs += T * din * x_elem;
            shared_counted[g] = true;
        } else {
            out->a_inputs += T * din * a_elem;
        }
    }
}

int est_lora_validate(const est_run *run, char *err, size_t errlen) {
    const est_lora *l = &run->lora;
    if (l->rank == 0) {
        if (run->quant != EST_QUANT_NONE)
            return ft_errorf(err, errlen, "--quant %s needs --lora-rank: a quantized base is frozen, "
                                          "only adapters can train",
                             est_quant_name(run->quant));
        return 0;
    }
    if (l->rank < 0 || l->rank > EST_LORA_MAX_RANK)
        return ft_errorf(err, errlen, "--lora-rank must be between 1 and %d (got %lld)",
                         EST_LORA_MAX_RANK, (long long)l->rank);
    if (!(l->alpha > 0) || !isfinite(l->alpha))
        return ft_errorf(err, errlen, "--lora-alpha must be a positive number");
    if (!(l->dropout >= 0 && l->dropout < 1))
        return ft_errorf(err, errlen, "--lora-dropout must be at least 0 and below 1");
    if (l->targets == 0 || (l->targets & ~EST_LORA_ALL_LINEAR))
        return ft_errorf(err, errlen, "--lora-targets names no linear layer");
    const ft_model *m = &run->model;
    if (m->fused_qkv && l->targets != EST_LORA_ALL_LINEAR &&
        (l->targets & (EST_LORA_BIT(EST_LORA_K) | EST_LORA_BIT(EST_LORA_V) | EST_LORA_BIT(EST_LORA_UP))))
        return ft_errorf(err, errlen, "%s has one qkv_proj and one gate_up_proj: target q (qkv_proj) and "
                                      "gate (gate_up_proj), not k, v or up",
                         ft_arch_name(m->arch));
    /* transformers 5.x: the experts are fused 3D parameters (stack.h). */
    if (m->num_experts > 0 && run->stack && run->stack->moe_experts_fused)
        return ft_errorf(err, errlen, "LoRA on %s's experts under transformers %s (stack %s) is not modelled: "
                                      "its experts are fused 3D parameters, not the per-expert Linears of 4.x",
                         ft_arch_name(m->arch), run->stack->transformers, run->stack->name);
    /* Which frameworks model LoRA, and within what limits (fw_registry.c). */
    return est_fw_models(run, EST_FEAT_LORA, NULL, err, errlen);
}
