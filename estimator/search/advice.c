#include "advice.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "fw_registry.h"
#include "inverse.h"
#include "json_util.h"
#include "format.h"

typedef enum {
    CH_OFFLOAD_OPT,  /* optimizer state and fp32 master on the CPU */
    CH_OFFLOAD_ALL,  /* ZeRO-3: the parameter partition on the CPU as well */
    CH_CKPT,         /* full activation checkpointing */
    CH_PRECISION,    /* one step down in bytes per value */
    CH_ZERO3,        /* shard everything */
    CH_HOST_RAM,     /* a node with the host RAM the run needs */
    CH_TOGGLES,      /* the changes above compose; the two below are searches */
    CH_MORE_GPUS = CH_TOGGLES,
    CH_FEWER_TOKENS,
    CH_COUNT
} change;

static const char *const CHANGE_LABELS[CH_COUNT] = {
    "offload the optimizer to the CPU", "offload parameters too (ZeRO-3)",
    "full activation checkpointing",    "lower precision",
    "ZeRO-3 (shard weights too)",       "more host RAM per node",
    "more GPUs",                        "fewer tokens per micro-batch",
};

/* The same changes as FSDP names them (accelerate's fsdp_config): FSDP has
 * no ZeRO stages; its FULL_SHARD shards what ZeRO-3 does, and its CPU
 * offload moves parameters with their gradients and optimizer state
 * (issue 20, item 17: FSDP runs were told "offload parameters too (ZeRO-3)"). */
static const char *change_label(change ch, est_framework fw) {
    const est_fw_info *info = est_fw_info_of(fw);
    if (ch == CH_OFFLOAD_ALL && info->offload_all_label) return info->offload_all_label;
    if (ch == CH_ZERO3 && info->zero3_label) return info->zero3_label;
    return CHANGE_LABELS[ch];
}

typedef struct ctx {
    const est_run *base;
    double margin;
    est_estimate e;
    est_advice *out;
} ctx;

/* Estimates `run`; true when it fits (the estimate stays in c->e). */
static bool fits(ctx *c, const est_run *run) {
    c->out->tried++;
    c->e.tight_margin_frac = c->margin;
    return est_estimate_run(run, &c->e, NULL, 0) == 0 && c->e.fits;
}

/* HF DDP has no ZeRO and no offload: the same run under DeepSpeed does
 * (the framework's sharded_by, fw_registry.h). */
static void to_deepspeed(est_run *r) { r->framework = est_fw_of(r)->sharded_by; }

/* Whether the framework a run moves to for offload can offload the optimizer
 * without the parameters (FSDP cannot). */
static bool offloads_optimizer_alone(const est_run *r) {
    const est_fw_info *to = est_fw_info_of(est_fw_of(r)->sharded_by);
    return (to->features & (1u << EST_FEAT_OFFLOAD_OPTIMIZER)) != 0;
}

/* Applies one composable change; false when it does not apply to `r`. */
static bool apply(ctx *c, change ch, est_run *r) {
    switch (ch) {
    case CH_OFFLOAD_OPT:
        if (r->offload != EST_OFFLOAD_NONE || !offloads_optimizer_alone(r)) return false;
        to_deepspeed(r);
        if (r->zero_stage == 0) r->zero_stage = 2; /* ZeRO-Offload needs a partitioned optimizer */
        r->offload = EST_OFFLOAD_OPTIMIZER;
        return true;
    case CH_OFFLOAD_ALL:
        if (r->offload == EST_OFFLOAD_OPTIMIZER_PARAMS) return false;
        to_deepspeed(r);
        r->zero_stage = 3;
        r->offload = EST_OFFLOAD_OPTIMIZER_PARAMS;
        return true;
    case CH_CKPT:
        if (r->checkpointing == EST_CKPT_FULL) return false;
        r->checkpointing = EST_CKPT_FULL;
        return true;
    case CH_PRECISION:
        switch (r->precision) {
        case EST_PREC_FP32: r->precision = EST_PREC_BF16_MIXED; return true;
        case EST_PREC_FP16_MIXED: r->precision = EST_PREC_BF16_MIXED; return true;
        case EST_PREC_BF16_MIXED: r->precision = EST_PREC_BF16; return true;
        case EST_PREC_BF16: return false;
        }
        return false;
    case CH_ZERO3:
        if (r->zero_stage == 3) return false;
        to_deepspeed(r);
        r->zero_stage = 3;
        return true;
    case CH_HOST_RAM: {
        /* Whole GiB at or above what the changed run needs per node, with the
         * tight margin to spare. */
        est_estimate *e = &c->e;
        c->out->tried++;
        if (est_estimate_run(r, e, NULL, 0) < 0 || e->host_fits || !e->device_fits) return false;
        double gib = ceil((double)e->host_peak_per_node_bytes / (1 - c->margin) / 1073741824.0);
        r->host_ram_bytes = (int64_t)(gib * 1073741824.0);
        return true;
    }
    default: return false;
    }
}

/* The fewest GPUs that fit, when more than the run has (inverse.h). */
static bool more_gpus(ctx *c, est_run *r) {
    int64_t world = est_run_world(r);
    int64_t node = r->gpus_per_node > EST_MIN_GPUS_NODE_SIZE ? r->gpus_per_node : EST_MIN_GPUS_NODE_SIZE;
    est_answer a;
    char msg[256];
    if (est_answer_question(r, EST_Q_MIN_GPUS, node, &a, msg, sizeof msg) < 0) return false;
    c->out->tried += (size_t)a.estimates;
    if (a.value <= world) return false;
    r->gpus_per_node = a.gpus_per_node;
    r->nodes = a.nodes;
    return true;
}

/* Fewer tokens per micro-batch: the largest smaller micro-batch that fits,
 * with the accumulation raised to keep the tokens per optimizer step; at
 * micro-batch 1, the longest sequence that fits (that changes the data). */
static bool fewer_tokens(ctx *c, est_run *r) {
    const int64_t mb = r->micro_batch, ga = r->grad_accum;
    if (mb > 1) {
        int64_t lo = 0, hi = mb; /* lo fits (0: none yet), hi does not */
        while (hi > lo + 1) {
            int64_t b = lo + (hi - lo) / 2;
            est_run t = *r;
            t.micro_batch = b;
            t.grad_accum = (mb * ga + b - 1) / b;
            if (t.grad_accum > EST_MAX_ACCUM) t.grad_accum = EST_MAX_ACCUM;
            if (fits(c, &t)) lo = b;
            else hi = b;
        }
        if (lo > 0) {
            r->micro_batch = lo;
            r->grad_accum = (mb * ga + lo - 1) / lo;
            if (r->grad_accum > EST_MAX_ACCUM) r->grad_accum = EST_MAX_ACCUM;
            return true;
        }
        r->micro_batch = 1; /* then shorter sequences at micro-batch 1 */
        r->grad_accum = mb * ga > EST_MAX_ACCUM ? EST_MAX_ACCUM : mb * ga;
    }
    est_answer a;
    char msg[256];
    if (est_answer_question(r, EST_Q_MAX_SEQ, 1, &a, msg, sizeof msg) < 0) return false;
    c->out->tried += (size_t)a.estimates;
    if (a.value <= 0 || a.value >= r->seq_len) return false;
    r->seq_len = a.value;
    return true;
}

/* The flags that turn `base` into `r`. */
static void flags_of(const est_run *base, const est_run *r, char *buf, size_t n) {
    size_t used = 0;
    buf[0] = '\0';
#define ADD(...)                                                                   \
    do {                                                                           \
        if (used < n) {                                                            \
            int k = snprintf(buf + used, n - used, __VA_ARGS__);                   \
            if (k > 0) used += (size_t)k < n - used ? (size_t)k : n - used - 1;    \
        }                                                                          \
    } while (0)
    if (r->framework != base->framework) ADD(" --framework %s", est_framework_name(r->framework));
    if (r->zero_stage != base->zero_stage) ADD(" --zero %d", r->zero_stage);
    if (r->offload != base->offload) ADD(" --offload %s", est_offload_name(r->offload));
    if (r->checkpointing != base->checkpointing)
        ADD(" --checkpointing %s", est_checkpointing_name(r->checkpointing));
    if (r->precision != base->precision) ADD(" --precision %s", est_precision_name(r->precision));
    if (r->micro_batch != base->micro_batch) ADD(" --batch %lld", (long long)r->micro_batch);
    if (r->grad_accum != base->grad_accum) ADD(" --grad-accum %lld", (long long)r->grad_accum);
    if (r->seq_len != base->seq_len) ADD(" --seq %lld", (long long)r->seq_len);
    if (r->gpus_per_node != base->gpus_per_node) ADD(" --gpus %lld", (long long)r->gpus_per_node);
    if (r->nodes != base->nodes) ADD(" --nodes %lld", (long long)r->nodes);
    if (r->host_ram_bytes != base->host_ram_bytes)
        ADD(" --host-ram %.0f", (double)r->host_ram_bytes / 1073741824.0);
#undef ADD
    if (buf[0] == ' ') memmove(buf, buf + 1, strlen(buf));
}

/* Keeps `r` (already estimated to fit, estimate in c->e) unless the same
 * flags are listed already. */
static void keep(ctx *c, const est_run *r, const char *label) {
    est_advice *a = c->out;
    char flags[96];
    flags_of(c->base, r, flags, sizeof flags);
    for (size_t i = 0; i < a->count; i++)
        if (!strcmp(a->items[i].flags, flags)) return;
    if (a->count == EST_ADVICE_MAX) return;
    est_advice_item *it = &a->items[a->count++];
    memset(it, 0, sizeof *it);
    ft_strlcpy(it->change, label, sizeof it->change);
    ft_strlcpy(it->flags, flags, sizeof it->flags);
    it->peak_allocated_bytes = c->e.peak_allocated_bytes;
    it->device_used_bytes = c->e.device_used_bytes;
    it->host_peak_per_node_bytes = c->e.host_peak_per_node_bytes;
    it->gpus = est_run_world(r);
    it->step_time_s = c->e.step_time_s;
    it->tokens_per_s = c->e.tokens_per_s;
    it->gpu_s_per_token = c->e.tokens_per_s > 0 ? (double)it->gpus / c->e.tokens_per_s : 0;
    it->tight = c->e.tight;
}

/* The run with change `ch` applied to `r`; false when it does not apply. */
static bool change_run(ctx *c, change ch, est_run *r) {
    if (ch == CH_MORE_GPUS) return more_gpus(c, r);
    if (ch == CH_FEWER_TOKENS) return fewer_tokens(c, r);
    return apply(c, ch, r);
}

static int cmp_item(const void *pa, const void *pb) {
    const est_advice_item *a = pa, *b = pb;
    bool ta = a->gpu_s_per_token > 0, tb = b->gpu_s_per_token > 0;
    if (ta != tb) return ta ? -1 : 1;
    if (ta && a->gpu_s_per_token != b->gpu_s_per_token)
        return a->gpu_s_per_token < b->gpu_s_per_token ? -1 : 1;
    if (a->device_used_bytes != b->device_used_bytes)
        return a->device_used_bytes < b->device_used_bytes ? -1 : 1;
    return 0;
}

int est_advise(const est_run *run, double tight_margin_frac, est_advice *out, char *err,
               size_t errlen) {
    memset(out, 0, sizeof *out);
    ctx c = {.base = run, .margin = tight_margin_frac, .out = out};
    est_estimate_init(&c.e);
    if (fits(&c, run)) { /* nothing to advise */
        est_estimate_free(&c.e);
        return 0;
    }
    bool single_fits[CH_COUNT] = {false};
    for (int ch = 0; ch < CH_COUNT; ch++) {
        est_run r = *run;
        if (!change_run(&c, (change)ch, &r)) continue;
        if (!fits(&c, &r)) continue;
        single_fits[ch] = true;
        keep(&c, &r, change_label((change)ch, run->framework));
    }
    /* Too few single changes: two composable ones, then more GPUs on top of
     * one. A pair whose parts fit alone adds nothing. */
    if (out->count < 3) {
        for (int a = 0; a < CH_HOST_RAM; a++)
            for (int b = a + 1; b <= CH_MORE_GPUS; b++) {
                if (single_fits[a] || single_fits[b]) continue;
                est_run r = *run;
                if (!apply(&c, (change)a, &r) || !change_run(&c, (change)b, &r)) continue;
                if (!fits(&c, &r)) continue;
                char label[192];
                snprintf(label, sizeof label, "%s + %s", change_label((change)a, run->framework),
                         change_label((change)b, run->framework));
                keep(&c, &r, label);
            }
    }
    /* Still too few: two of the GPU-side changes, then host RAM or more GPUs
     * (a run can need both its GPUs relieved and its node grown). */
    if (out->count < 3) {
        for (int a = 0; a < CH_HOST_RAM; a++)
            for (int b = a + 1; b < CH_HOST_RAM; b++)
                for (int z = CH_HOST_RAM; z <= CH_MORE_GPUS; z++) {
                    if (single_fits[a] || single_fits[b] || single_fits[z]) continue;
                    est_run r = *run;
                    if (!apply(&c, (change)a, &r) || !apply(&c, (change)b, &r) ||
                        !change_run(&c, (change)z, &r))
                        continue;
                    if (!fits(&c, &r)) continue;
                    char label[192];
                    snprintf(label, sizeof label, "%s + %s + %s", change_label((change)a, run->framework),
                             change_label((change)b, run->framework), change_label((change)z, run->framework));
                    keep(&c, &r, label);
                }
    }
    est_estimate_free(&c.e);
    if (out->count > 1) qsort(out->items, out->count, sizeof out->items[0], cmp_item);
    (void)err;
    (void)errlen;
    return 0;
}

void est_print_advice(FILE *out, const est_advice *a) {
    char b1[32], b2[32];
    if (a->count == 0) {
        fprintf(out, "\nwhat would fit: none of the changes tried (%zu estimates: offload, "
                     "checkpointing, precision, ZeRO-3, fewer tokens, more GPUs, host RAM)\n",
                a->tried);
        return;
    }
    fprintf(out, "\nwhat would fit (each change estimated again; cheapest first, by GPU-seconds "
                 "per token):\n");
    for (size_t i = 0; i < a->count && i < EST_ADVICE_SHOWN; i++) {
        const est_advice_item *it = &a->items[i];
        fprintf(out, "  %s: %s\n    peak %s allocated, %s on the device", it->change, it->flags,
                est_fmt_bytes(it->peak_allocated_bytes, b1, sizeof b1),
                est_fmt_bytes(it->device_used_bytes, b2, sizeof b2));
        if (it->host_peak_per_node_bytes > 0)
            fprintf(out, ", host %s per node", est_fmt_bytes(it->host_peak_per_node_bytes, b1, sizeof b1));
        if (it->step_time_s > 0)
            fprintf(out, ", %.3g s/step, %.0f tokens/s on %lld GPU%s", it->step_time_s,
                    it->tokens_per_s, (long long)it->gpus, it->gpus > 1 ? "s" : "");
        fprintf(out, "%s\n", it->tight ? " (tight)" : "");
    }
}

void *est_advice_json(const est_advice *a) {
    cJSON *arr = cJSON_CreateArray();
    if (!arr) return NULL;
    for (size_t i = 0; i < a->count; i++) {
        const est_advice_item *it = &a->items[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "change", it->change);
        cJSON_AddStringToObject(o, "flags", it->flags);
        cJSON_AddNumberToObject(o, "peak_allocated_bytes", (double)it->peak_allocated_bytes);
        cJSON_AddNumberToObject(o, "device_used_bytes", (double)it->device_used_bytes);
        cJSON_AddNumberToObject(o, "host_peak_per_node_bytes", (double)it->host_peak_per_node_bytes);
        cJSON_AddNumberToObject(o, "gpus", (double)it->gpus);
        cJSON_AddNumberToObject(o, "step_time_s", it->step_time_s);
        cJSON_AddNumberToObject(o, "tokens_per_s", it->tokens_per_s);
        cJSON_AddNumberToObject(o, "gpu_s_per_token", it->gpu_s_per_token);
        cJSON_AddBoolToObject(o, "tight", it->tight);
        cJSON_AddItemToArray(arr, o);
    }
    return arr;
}
