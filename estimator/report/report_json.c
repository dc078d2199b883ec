/* --json: every term of an estimate, machine-readable. Byte counts are JSON
 * numbers (exact below 2^53, far above any GPU). */
#include <string.h>

#include <cJSON.h>

#include "advice.h"
#include "constants.h"
#include "fp8.h"
#include "hf_modeling.h"
#include "liger.h"
#include "lora.h"
#include "objective.h"
#include "params.h"
#include "report.h"
#include "report_settings.h"
#include "trainable.h"

static cJSON *categories(const int64_t *bytes, int count) {
    cJSON *o = cJSON_CreateObject();
    for (int c = 0; c < count; c++) cJSON_AddNumberToObject(o, est_category_names[c], (double)bytes[c]);
    return o;
}

static cJSON *terms(const est_terms *t) {
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < t->count; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", t->items[i].name);
        cJSON_AddNumberToObject(o, "bytes", (double)t->items[i].bytes);
        cJSON_AddItemToArray(a, o);
    }
    return a;
}

static cJSON *run_json(const est_run *r) {
    est_params p;
    est_count_params(&r->model, r->layers_used, &p);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", r->model.name);
    cJSON_AddNumberToObject(o, "params", (double)p.total);
    cJSON_AddNumberToObject(o, "layers", (double)r->layers_used);
    cJSON_AddStringToObject(o, "gpu", r->gpu.name);
    cJSON_AddNumberToObject(o, "gpus_per_node", (double)r->gpus_per_node);
    cJSON_AddNumberToObject(o, "nodes", (double)r->nodes);
    cJSON_AddNumberToObject(o, "micro_batch", (double)r->micro_batch);
    cJSON_AddNumberToObject(o, "grad_accum", (double)r->grad_accum);
    cJSON_AddNumberToObject(o, "seq_len", (double)r->seq_len);
    cJSON_AddStringToObject(o, "precision", est_precision_name(r->precision));
    if (r->fp8) cJSON_AddStringToObject(o, "fp8", est_fp8_name(r->fp8)); /* only when set */
    if (r->tp > 1) cJSON_AddNumberToObject(o, "tp", (double)r->tp); /* only when set (model/tp.h) */
    cJSON_AddNumberToObject(o, "zero", r->zero_stage);
    cJSON_AddStringToObject(o, "offload", est_offload_name(r->offload));
    cJSON_AddStringToObject(o, "checkpointing", est_checkpointing_name(r->checkpointing));
    cJSON_AddStringToObject(o, "attention", est_attention_name(r->attention));
    cJSON_AddStringToObject(o, "loss", est_loss_name(r->loss));
    char lk[160];
    if (r->liger) cJSON_AddStringToObject(o, "liger", est_liger_name(r->liger, lk, sizeof lk));
    cJSON_AddStringToObject(o, "optimizer", est_optimizer_name(r->optimizer));
    if (r->ds.replaced_optimizer >= 0) /* accelerate's DeepSpeedCPUAdam in its place (ds_config.c) */
        cJSON_AddStringToObject(o, "replaced_optimizer", est_optimizer_name((est_optimizer)r->ds.replaced_optimizer));
    cJSON_AddStringToObject(o, "framework", est_framework_name(r->framework));
    cJSON_AddBoolToObject(o, "expandable_segments", r->expandable_segments);
    cJSON_AddStringToObject(o, "stack", r->stack->name);
    cJSON_AddBoolToObject(o, "zero_init", r->zero_init);
    cJSON_AddStringToObject(o, "rl", est_rl_name(r->rl));
    cJSON_AddBoolToObject(o, "packed", r->packed);
    cJSON_AddNumberToObject(o, "packed_sample_len", (double)r->packed_sample_len);
    cJSON_AddBoolToObject(o, "checkpoint_non_reentrant", r->ckpt_non_reentrant);
    if (est_lora_on(r)) {
        char targets[64];
        cJSON *l = cJSON_AddObjectToObject(o, "lora");
        cJSON_AddNumberToObject(l, "rank", (double)r->lora.rank);
        cJSON_AddNumberToObject(l, "alpha", r->lora.alpha);
        cJSON_AddStringToObject(l, "targets", est_lora_targets_name(r->lora.targets, targets, sizeof targets));
        cJSON_AddNumberToObject(l, "dropout", r->lora.dropout);
        cJSON_AddNumberToObject(l, "trainable_params", (double)(est_lora_params(r) + est_save_params(r)));
        char saved[32];
        cJSON_AddStringToObject(l, "modules_to_save", est_save_name(r->modules_to_save, saved, sizeof saved));
        cJSON_AddStringToObject(l, "quant", est_quant_name(r->quant));
    }
    int64_t trained = 0, total = 0;
    char err[160];
    if (r->trainable.n > 0 && est_trainable_count(r, &trained, &total, err, sizeof err) == 0) {
        cJSON *t = cJSON_AddObjectToObject(o, "trainable");
        cJSON *pats = cJSON_AddArrayToObject(t, "patterns");
        for (int i = 0; i < r->trainable.n; i++) cJSON_AddItemToArray(pats, cJSON_CreateString(r->trainable.pattern[i]));
        cJSON_AddNumberToObject(t, "trainable_params", (double)trained);
        cJSON_AddNumberToObject(t, "total_params", (double)total);
        cJSON_AddBoolToObject(t, "input_requires_grad", r->trainable.input_grads);
    }
    return o;
}

char *est_json_report(const est_run *r, const est_estimate *e, const est_alternative *alts,
                      size_t nalts, int recommended) {
    return est_json_report_advice(r, e, alts, nalts, recommended, NULL);
}

static cJSON *memory_json(const est_run *r, const est_estimate *e) {
    cJSON *mem = cJSON_CreateObject();
    cJSON_AddNumberToObject(mem, "peak_allocated_bytes", (double)e->peak_allocated_bytes);
    cJSON_AddNumberToObject(mem, "peak_reserved_bytes", (double)e->peak_reserved_bytes);
    cJSON_AddNumberToObject(mem, "device_used_bytes", (double)e->device_used_bytes);
    cJSON_AddNumberToObject(mem, "capacity_bytes", (double)e->capacity_bytes);
    cJSON_AddBoolToObject(mem, "fits", e->fits);
    cJSON_AddStringToObject(mem, "peak_moment", e->tl.phases[e->peak_index].label);
    /* One class of rank today (every profile pads shards alike); the smallest
     * rank's figure differs by what may still be pending on it. */
    cJSON *ranks = cJSON_AddArrayToObject(mem, "ranks");
    cJSON *cls = cJSON_CreateObject();
    cJSON_AddNumberToObject(cls, "first_rank", 0);
    cJSON_AddNumberToObject(cls, "count", (double)est_run_world(r));
    cJSON_AddNumberToObject(cls, "peak_allocated_bytes", (double)e->peak_allocated_bytes);
    cJSON_AddNumberToObject(cls, "smallest_peak_allocated_bytes",
                            (double)(e->peak_allocated_bytes - e->rank_spread_bytes));
    cJSON_AddItemToArray(ranks, cls);
    cJSON_AddItemToObject(mem, "at_peak_bytes", categories(e->breakdown, EST_CAT_COUNT));
    cJSON_AddItemToObject(mem, "category_peak_bytes", categories(e->category_peak, EST_CAT_ALLOCATED_COUNT));
    cJSON_AddNumberToObject(mem, "host_bytes", (double)e->cpu_bytes);
    cJSON_AddNumberToObject(mem, "host_load_bytes", (double)e->cpu_load_bytes);
    cJSON_AddNumberToObject(mem, "host_train_per_node_bytes", (double)e->host_train_per_node_bytes);
    cJSON_AddNumberToObject(mem, "host_load_per_node_bytes", (double)e->host_load_per_node_bytes);
    cJSON_AddNumberToObject(mem, "host_peak_per_node_bytes", (double)e->host_peak_per_node_bytes);
    cJSON_AddNumberToObject(mem, "host_ram_bytes", (double)e->host_ram_bytes);
    cJSON_AddBoolToObject(mem, "device_fits", e->device_fits);
    cJSON_AddBoolToObject(mem, "host_fits", e->host_fits);
    return mem;
}

/* The verdict: fits / tight / does_not_fit, what decides it, and what would
 * fit instead (every change estimated again, advice.h). */
static cJSON *verdict_json(const est_estimate *e, const est_advice *advice) {
    est_verdict v = est_verdict_of(e);
    cJSON *vd = cJSON_CreateObject();
    cJSON_AddStringToObject(vd, "result", v == EST_VERDICT_FITS    ? "fits"
                                          : v == EST_VERDICT_TIGHT ? "tight"
                                                                   : "does_not_fit");
    if (v == EST_VERDICT_NO_FIT_GPU || v == EST_VERDICT_NO_FIT_HOST)
        cJSON_AddStringToObject(vd, "reason", est_verdict_name(v));
    else
        cJSON_AddNullToObject(vd, "reason");
    cJSON_AddNumberToObject(vd, "tight_margin_frac", e->tight_margin_frac);
    if (advice) cJSON_AddItemToObject(vd, "advice", (cJSON *)est_advice_json(advice));
    return vd;
}

static cJSON *activations_json(const est_activations *a) {
    cJSON *act = cJSON_CreateObject();
    cJSON_AddItemToObject(act, "block_saved_terms", terms(&a->block_saved));
    cJSON_AddNumberToObject(act, "block_saved_bytes", (double)a->block_saved.total);
    cJSON_AddNumberToObject(act, "block_kept_bytes", (double)a->block_kept_bytes);
    cJSON_AddNumberToObject(act, "block_backward_working_bytes", (double)a->block_backward_working_bytes);
    cJSON_AddNumberToObject(act, "final_norm_saved_bytes", (double)a->final_norm_saved_bytes);
    cJSON_AddItemToObject(act, "logits_forward_terms", terms(&a->logits_forward));
    cJSON_AddItemToObject(act, "logits_backward_terms", terms(&a->logits_backward));
    return act;
}

static cJSON *timeline_json(const est_timeline *tl) {
    cJSON *arr = cJSON_CreateArray();
    for (size_t i = 0; i < tl->count; i++) {
        const est_phase *p = &tl->phases[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "phase", est_phase_names[p->kind]);
        cJSON_AddNumberToObject(o, "layer", p->layer);
        cJSON_AddStringToObject(o, "label", p->label);
        cJSON_AddNumberToObject(o, "allocated_bytes", (double)est_phase_allocated(p));
        cJSON_AddNumberToObject(o, "time_s", p->time_s);
        cJSON_AddNumberToObject(o, "flops", p->flops);
        cJSON_AddItemToObject(o, "bytes", categories(p->bytes, EST_CAT_ALLOCATED_COUNT));
        cJSON_AddItemToArray(arr, o);
    }
    return arr;
}

static cJSON *constants_json(const est_constants *k) {
    cJSON *ks = cJSON_CreateArray();
    for (int i = 0; i < EST_K_COUNT; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", est_constant_name((est_constant_id)i));
        cJSON_AddNumberToObject(o, "value", k->value[i]);
        cJSON_AddStringToObject(o, "unit", est_constant_unit((est_constant_id)i));
        cJSON_AddStringToObject(o, "source", k->source[i]);
        cJSON_AddItemToArray(ks, o);
    }
    return ks;
}

static cJSON *alternatives_json(const est_alternative *alts, size_t nalts, int recommended) {
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < nalts; i++) {
        const est_alternative *x = &alts[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "strategy", x->strategy.label);
        cJSON_AddStringToObject(o, "framework", est_framework_name(x->strategy.framework));
        cJSON_AddNumberToObject(o, "zero", x->strategy.zero);
        cJSON_AddStringToObject(o, "offload", est_offload_name(x->strategy.offload));
        cJSON_AddStringToObject(o, "checkpointing", est_checkpointing_name(x->strategy.checkpointing));
        cJSON_AddBoolToObject(o, "valid", x->valid);
        if (!x->valid) cJSON_AddStringToObject(o, "why", x->why);
        cJSON_AddNumberToObject(o, "peak_allocated_bytes", (double)x->peak_allocated_bytes);
        cJSON_AddNumberToObject(o, "device_used_bytes", (double)x->device_used_bytes);
        cJSON_AddNumberToObject(o, "host_bytes", (double)x->cpu_bytes);
        cJSON_AddBoolToObject(o, "fits", x->fits);
        cJSON_AddNumberToObject(o, "step_time_s", x->step_time_s);
        cJSON_AddNumberToObject(o, "tokens_per_s", x->tokens_per_s);
        cJSON_AddBoolToObject(o, "recommended", (int)i == recommended);
        cJSON_AddItemToArray(a, o);
    }
    return a;
}

char *est_json_report_advice(const est_run *r, const est_estimate *e, const est_alternative *alts,
                             size_t nalts, int recommended, const struct est_advice *advice) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "schema", "ftest.estimate/1");
    cJSON_AddItemToObject(root, "run", run_json(r));
    cJSON *settings = est_settings_json(r); /* report_settings.c: the YAML's unused keys */
    if (settings) cJSON_AddItemToObject(root, "settings", settings);
    /* Where the numbers come from: the data folder and the profiles in force. */
    char prof[1024], origin[1024];
    est_constants_profiles_in_force(est_framework_name(r->framework), prof, sizeof prof);
    cJSON_AddStringToObject(root, "data_dir", ft_data_dir());
    cJSON_AddStringToObject(root, "data_origin", est_data_origin(origin, sizeof origin));
    cJSON_AddStringToObject(root, "profiles", prof);
    cJSON_AddItemToObject(root, "memory", memory_json(r, e));
    cJSON_AddItemToObject(root, "time", (cJSON *)est_time_json(r, e)); /* report_time.c */
    cJSON_AddItemToObject(root, "verdict", verdict_json(e, advice));
    if (e->activations.present) cJSON_AddItemToObject(root, "activations", activations_json(&e->activations));
    cJSON_AddItemToObject(root, "timeline", timeline_json(&e->tl));
    cJSON_AddItemToObject(root, "constants", constants_json(&e->k));
    if (e->deepspeed_function) {
        cJSON *o = cJSON_AddObjectToObject(root, "deepspeed_estimator");
        cJSON_AddStringToObject(o, "function", e->deepspeed_function);
        cJSON_AddNumberToObject(o, "gpu_bytes", (double)e->deepspeed_bytes);
        cJSON_AddStringToObject(o, "note", "model states only");
    } else if (e->deepspeed_not_comparable) {
        cJSON *o = cJSON_AddObjectToObject(root, "deepspeed_estimator");
        cJSON_AddStringToObject(o, "not_shown", e->deepspeed_not_comparable);
    }
    if (alts) cJSON_AddItemToObject(root, "alternatives", alternatives_json(alts, nalts, recommended));
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    return s;
}
