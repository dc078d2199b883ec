#include "report.h"

#include <math.h>
#include <string.h>

#include "constants.h"
#include "deepspeed_estimator.h"
#include "fp8.h"
#include "fw_registry.h"
#include "hf_modeling.h"
#include "lora.h"
#include "peft.h"
#include "peft_vec.h"
#include "peft_delta.h"
#include "liger.h"
#include "objective.h"
#include "params.h"
#include "report_settings.h"
#include "trainable.h"


void est_print_run(FILE *out, const est_run *r) {
    est_params p;
    est_count_params(&r->model, r->layers_used, &p);
    char strat[96];
    fprintf(out, "%s: %.2f B parameters, %lld layers, vocabulary %lld\n", r->model.name,
            (double)p.total / 1e9, (long long)r->layers_used, (long long)r->model.vocab_size);
    fprintf(out, "%lld x %s%s, %s\n", (long long)est_run_world(r), r->gpu.display,
            r->nodes > 1 ? " (multi-node)" : "", est_fw_describe(r, strat, sizeof strat));
    fprintf(out, "micro-batch %lld x seq %lld, grad-accum %lld, %s%s%s, %s attention, %s loss, %s%s\n",
            (long long)r->micro_batch, (long long)r->seq_len, (long long)r->grad_accum,
            est_precision_name(r->precision), r->fp8 ? " + fp8 linears " : "", r->fp8 ? est_fp8_name(r->fp8) : "",
            est_attention_name(r->attention), est_loss_name(r->loss), est_optimizer_name(r->optimizer),
            r->expandable_segments ? ", expandable segments" : "");
    if (r->ds.replaced_optimizer >= 0)
        fprintf(out, "optimizer: DeepSpeedCPUAdam in place of %s (accelerate replaces the script's optimizer "
                     "under ZeRO-Offload; \"zero_force_ds_cpu_optimizer\": false keeps it)\n",
                est_optimizer_name((est_optimizer)r->ds.replaced_optimizer));
    char obj[200];
    if (est_objective_describe(r, obj, sizeof obj)[0]) fprintf(out, "objective: %s\n", obj);
    char lk[160];
    if (r->liger) fprintf(out, "Liger kernels: %s\n", est_liger_name(r->liger, lk, sizeof lk));
    const est_fw_info *fw = est_fw_of(r);
    if (fw->torch_stack)
        fprintf(out, "stack %s: torch %s, transformers %s, deepspeed %s, accelerate %s%s\n",
                r->stack->name, r->stack->torch, r->stack->transformers, r->stack->deepspeed,
                r->stack->accelerate, fw->build_note(r));
    /* Where the numbers come from (docs/reliability.md): $FTEST_DATA_DIR or a
     * ./models can replace the catalogs, so the output says which are in force. */
    char prof[1024], origin[1024];
    est_constants_profiles_in_force(est_framework_name(r->framework), prof, sizeof prof);
    fprintf(out, "data: %s; profiles: %s\n", est_data_origin(origin, sizeof origin), prof);
    if (r->settings_from[0]) fprintf(out, "from %s (flags given win)\n", r->settings_from);
    est_print_settings_unused(out, r);
    if (r->weights_note[0]) fprintf(out, "weights (headers only): %s\n", r->weights_note);
    if (r->model.num_experts > 0)
        fprintf(out, "mixture of experts: %lld experts per layer, top-%lld: %.2f B parameters active per "
                     "token, all experts resident\n",
                (long long)r->model.num_experts, (long long)r->model.experts_per_token,
                (double)p.active / 1e9);
    est_print_peft(out, r, p.total);
    if (est_lora_on(r)) {
        char targets[64];
        char saved[40] = "";
        if (r->modules_to_save) {
            char names[32];
            snprintf(saved, sizeof saved, " + %s", est_save_name(r->modules_to_save, names, sizeof names));
        }
        const double trainable = (double)(est_peft_trainable_params(r) + est_save_params(r));
        fprintf(out, "%s r=%lld alpha=%g on %s%s: %.2f M trainable (%.3f%%), base frozen in %s%s\n",
                r->lora.variant == EST_LORA_PLAIN ? "LoRA" : est_lora_variant_name(r->lora.variant),
                (long long)r->lora.rank, r->lora.alpha,
                est_lora_targets_name(r->lora.targets, targets, sizeof targets), saved,
                trainable / 1e6, 100.0 * trainable / (double)p.total,
                r->quant == EST_QUANT_NONE ? (est_compute_dtype_bytes(r->precision) == 4 ? "fp32" : "the compute dtype")
                                           : est_quant_name(r->quant),
                r->lora.dropout > 0 ? ", adapter dropout" : "");
    }
    est_print_trainable(out, r);
}

/* Partial training (trainable.h): what the patterns leave trainable. */
void est_print_trainable(FILE *out, const est_run *r) {
    if (r->trainable.n == 0) return;
    int64_t trained = 0, total = 0;
    char err[160];
    if (est_trainable_count(r, &trained, &total, err, sizeof err)) return;
    if (trained == 0) {
        fprintf(out, "partial training: no parameter matches the %d pattern%s (names under PEFT start with "
                     "base_model.model.): every parameter is frozen, adapters included; the step computes "
                     "gradients of activations only and trains nothing\n",
                r->trainable.n, r->trainable.n == 1 ? "" : "s");
        return;
    }
    fprintf(out, "partial training: %.2f M of %.2f M parameters train (%.3f%%), those matching %d pattern%s; "
                 "the rest frozen%s\n",
            (double)trained / 1e6, (double)total / 1e6, 100.0 * (double)trained / (double)total, r->trainable.n,
            r->trainable.n == 1 ? "" : "s", est_peft_on(r) ? ", adapters included" : "");
}

/* IA3 and prompt tuning (peft.h), the loop and the lengths, in the run header. */
void est_print_peft(FILE *out, const est_run *r, int64_t total) {
    char targets[64];
    const double n = (double)est_peft_trainable_params(r);
    if (r->peft == EST_PEFT_IA3)
        fprintf(out, "IA3 on %s: %.3f M trainable (%.4f%%), base frozen\n",
                est_lora_targets_name(r->ia3_targets, targets, sizeof targets), n / 1e6, 100 * n / (double)total);
    if (est_peft_vec_on(r)) {
        char label[96];
        est_peft_vec_label(r, label, sizeof label);
        fprintf(out, "%s: %.3f M trainable (%.4f%%), base frozen\n", label, n / 1e6, 100 * n / (double)total);
    } else if (est_pdelta_on(r)) {
        char label[96];
        est_pdelta_label(r, label, sizeof label);
        fprintf(out, "%s: %.3f M trainable (%.4f%%), base frozen, a weight built per Linear per call\n", label,
                n / 1e6, 100 * n / (double)total);
    }
    if (r->peft == EST_PEFT_PROMPT_TUNING)
        fprintf(out, "prompt tuning, %lld virtual tokens: %.3f M trainable, every sequence %lld positions long\n",
                (long long)r->virtual_tokens, n / 1e6, (long long)est_model_positions(r));
    if (r->peft == EST_PEFT_P_TUNING)
        fprintf(out, "P-tuning, %lld virtual tokens from an MLP encoder of width %lld: %.3f M trainable, every "
                     "sequence %lld positions long\n",
                (long long)r->virtual_tokens, (long long)r->encoder_hidden, n / 1e6,
                (long long)est_model_positions(r));
    if (r->peft == EST_PEFT_ADAPTION_PROMPT)
        fprintf(out, "adaption prompt, %lld adapter tokens in each of %lld layers: %.3f M trainable (bf16, as "
                     "q_proj)\n",
                (long long)r->adapter_len, (long long)r->layers_used, n / 1e6);
    if (r->peft == EST_PEFT_PREFIX_TUNING)
        fprintf(out, "prefix tuning, %lld virtual tokens: %.3f M trainable, every attention over %lld + %lld keys\n",
                (long long)r->virtual_tokens, n / 1e6, (long long)r->virtual_tokens, (long long)r->seq_len);
    if (r->train_loop == EST_LOOP_PLAIN)
        fprintf(out, "plain training loop: outputs held to the next forward, zero_grad first%s\n",
                r->empty_cache_steps > 0 ? ", empty_cache between steps" : "");
    if (r->seq_mean > 0 && r->seq_tokens_mean > 0)
        fprintf(out, "dynamic padding: the longest batch %lld tokens per sequence (memory), the mean of the "
                     "longest rank's %.1f (time), of one rank's %.1f (tokens)\n",
                (long long)r->seq_len, r->seq_mean, r->seq_tokens_mean);
    else if (r->seq_mean > 0)
        fprintf(out, "dynamic padding: the longest batch %lld tokens per sequence (memory), the mean %.1f (time)\n",
                (long long)r->seq_len, r->seq_mean);
}

void est_print_verdict(FILE *out, const est_estimate *e) {
    char b1[32], b2[32];
    switch (est_verdict_of(e)) {
    case EST_VERDICT_FITS:
        fprintf(out, "verdict: fits\n");
        break;
    case EST_VERDICT_TIGHT: {
        bool gpu = (double)(e->capacity_bytes - e->device_used_bytes) <
                   e->tight_margin_frac * (double)e->capacity_bytes;
        int64_t room = gpu ? e->capacity_bytes - e->device_used_bytes
                           : e->host_ram_bytes - e->host_peak_per_node_bytes;
        fprintf(out, "verdict: fits, but tight: %s of %s left, under the %.4g%% margin "
                     "(--tight-margin)\n",
                est_fmt_bytes(room, b1, sizeof b1), gpu ? "GPU memory" : "host RAM",
                e->tight_margin_frac * 100);
        break;
    }
    case EST_VERDICT_NO_FIT_GPU:
        fprintf(out, "verdict: DOES NOT FIT: GPU memory: %s on the device, the GPU has %s\n",
                est_fmt_bytes(e->device_used_bytes, b1, sizeof b1),
                est_fmt_bytes(e->capacity_bytes, b2, sizeof b2));
        break;
    case EST_VERDICT_NO_FIT_HOST:
        fprintf(out, "verdict: DOES NOT FIT: host RAM: %s per node %s, the node has %s (--host-ram)\n",
                est_fmt_bytes(e->host_peak_per_node_bytes, b1, sizeof b1),
                e->host_train_per_node_bytes >= e->host_load_per_node_bytes ? "during training"
                                                                            : "while loading",
                est_fmt_bytes(e->host_ram_bytes, b2, sizeof b2));
        break;
    }
}

void est_print_estimate(FILE *out, const est_run *r, const est_estimate *e) {
    char b1[32], b2[32], b3[32];
    const est_phase *peak = &e->tl.phases[e->peak_index];
    fprintf(out, "\npeak per GPU: %s allocated, %s reserved, %s on the device",
            est_fmt_bytes(e->peak_allocated_bytes, b1, sizeof b1),
            est_fmt_bytes(e->peak_reserved_bytes, b2, sizeof b2),
            est_fmt_bytes(e->device_used_bytes, b3, sizeof b3));
    if (e->capacity_bytes > 0) {
        fprintf(out, " of %s: %s", est_fmt_bytes(e->capacity_bytes, b1, sizeof b1),
                e->device_fits ? "fits" : "DOES NOT FIT");
        int64_t room = e->capacity_bytes - e->device_used_bytes;
        fprintf(out, " (%s %s)\n", est_fmt_bytes(room < 0 ? -room : room, b2, sizeof b2),
                room < 0 ? "short" : "to spare");
    } else {
        fputc('\n', out);
    }
    fprintf(out, "peak moment:  %s\n", peak->label);
    if (est_run_world(r) > 1) {
        fprintf(out, "ranks:        %lld alike in what they allocate", (long long)est_run_world(r));
        if (e->rank_spread_bytes > 0)
            fprintf(out, "; this is the largest, the smallest may hold %s less (pending frees)",
                    est_fmt_bytes(e->rank_spread_bytes, b1, sizeof b1));
        fputc('\n', out);
    }
    fputc('\n', out);
    fprintf(out, "  %-12s %12s %12s\n", "category", "at peak", "own max");
    for (int c = 0; c < EST_CAT_COUNT; c++) {
        int64_t own = c < EST_CAT_ALLOCATED_COUNT ? e->category_peak[c] : e->breakdown[c];
        if (!e->breakdown[c] && !own) continue;
        fprintf(out, "  %-12s %12s %12s\n", est_category_names[c],
                est_fmt_bytes(e->breakdown[c], b1, sizeof b1), est_fmt_bytes(own, b2, sizeof b2));
    }
    if (e->cpu_bytes <= 0 && e->cpu_load_bytes <= 0 && e->host_ram_bytes > 0) {
        fprintf(out, "\nhost RAM per node: no model copy or offloaded state modelled; the node has %s\n",
                est_fmt_bytes(e->host_ram_bytes, b3, sizeof b3));
    } else if (e->cpu_bytes > 0 || e->cpu_load_bytes > 0) {
        int64_t g = r->gpus_per_node;
        fprintf(out, "\nhost RAM per node: %s while loading (%lld process%s)",
                est_fmt_bytes(e->host_load_per_node_bytes, b1, sizeof b1), (long long)g,
                g > 1 ? "es" : "");
        if (e->cpu_bytes > 0)
            fprintf(out, ", %s during training (offload)",
                    est_fmt_bytes(e->host_train_per_node_bytes, b2, sizeof b2));
        if (e->host_ram_bytes > 0)
            fprintf(out, "; the node has %s%s: %s", est_fmt_bytes(e->host_ram_bytes, b3, sizeof b3),
                    r->host_ram_bytes > 0 ? "" : " (assumed; set --host-ram)",
                    e->host_fits ? "fits" : "DOES NOT FIT");
        fputc('\n', out);
    }
    est_print_verdict(out, e);
    if (e->deepspeed_function)
        fprintf(out, "\nDeepSpeed's %s says %s per GPU:\n"
                     "  model states only (no activations, logits, buckets or step transients).\n",
                e->deepspeed_function, est_fmt_bytes(e->deepspeed_bytes, b1, sizeof b1));
    else if (e->deepspeed_not_comparable)
        fprintf(out, "\nDeepSpeed's own estimators (estimate_zero2/zero3_model_states_mem_needs) assume full\n"
                     "  fine-tuning with AdamW in mixed precision; not shown, since %s.\n",
                e->deepspeed_not_comparable);
    est_print_time(out, r, e); /* report_time.c */
}

void est_print_alternatives(FILE *out, const est_alternative *alts, size_t n, int recommended) {
    char b1[32], b2[32];
    fprintf(out, "\n  %-28s %11s %11s %6s %8s  ", "strategy", "peak/GPU", "device", "fits", "s/step");
    for (size_t g = 0; g < EST_FIT_GPU_COUNT; g++)
        if (n > 0 && alts[0].gpu_known[g]) fprintf(out, " %7s", est_fit_gpu_labels[g]);
    fputc('\n', out);
    for (size_t i = 0; i < n; i++) {
        const est_alternative *a = &alts[i];
        fprintf(out, "%c %-28s ", (int)i == recommended ? '>' : ' ', a->strategy.label);
        if (!a->valid) {
            fprintf(out, "n/a: %s\n", a->why);
            continue;
        }
        char st[16] = "-";
        if (a->step_time_s > 0) snprintf(st, sizeof st, "%.3g", a->step_time_s);
        fprintf(out, "%11s %11s %6s %8s  ", est_fmt_bytes(a->peak_allocated_bytes, b1, sizeof b1),
                est_fmt_bytes(a->device_used_bytes, b2, sizeof b2),
                a->tight ? "tight" : a->fits ? "yes" : "no", st);
        for (size_t g = 0; g < EST_FIT_GPU_COUNT; g++)
            if (a->gpu_known[g]) fprintf(out, " %7s", a->tight_on[g] ? "tight" : a->fits_on[g] ? "yes" : "-");
        fputc('\n', out);
    }
    fprintf(out, "  (device = allocated + allocator reserve + CUDA context; the GPU columns say\n"
                 "   whether the strategy fits on the same number of that GPU instead; tight: it\n"
                 "   fits with less room than the --tight-margin)\n");
}
