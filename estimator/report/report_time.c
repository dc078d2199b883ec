/* The step time in the text and JSON reports: read from the estimate (the time
 * ledger, estimator/ledger/timing.c, priced it); nothing here computes physics. */
#include <math.h>
#include <string.h>

#include <cJSON.h>

#include "report.h"

/* "0.234 s", "12.3 ms", "45 us" */
static const char *fmt_s(double s, char *buf, size_t n) {
    if (s >= 1 || s == 0) snprintf(buf, n, "%.3g s", s);
    else if (s >= 1e-3) snprintf(buf, n, "%.3g ms", s * 1e3);
    else snprintf(buf, n, "%.3g us", s * 1e6);
    return buf;
}

/* "3.2 h", "45 min", "2.1 days" */
static const char *fmt_h(double h, char *buf, size_t n) {
    if (h < 1) snprintf(buf, n, "%.0f min", h * 60);
    else if (h < 48) snprintf(buf, n, "%.1f h", h);
    else snprintf(buf, n, "%.1f days", h / 24);
    return buf;
}

void est_print_time(FILE *out, const est_run *run, const est_estimate *e) {
    if (!(e->step_time_s > 0)) {
        if (e->time.why[0]) fprintf(out, "\nstep time: not modelled: %s\n", e->time.why);
        return;
    }
    const est_time_detail t = e->time;
    char a[32], b[32], c[32], d[32];
    const double W = (double)est_run_world(run);
    fprintf(out, "\nstep time: %s (%.3g it/s), %.0f tokens/s per GPU, %.0f in total, MFU %.1f%%\n",
            fmt_s(e->step_time_s, a, sizeof a), e->it_per_s, e->tokens_per_s / W, e->tokens_per_s,
            100 * e->mfu);
    fprintf(out, "  %lld x micro-batch %s (device %s, host %s), optimizer %s\n",
            (long long)run->grad_accum, fmt_s(t.microbatch_s, a, sizeof a),
            fmt_s(t.gpu_microbatch_s, b, sizeof b),
            fmt_s(t.host_microbatch_s, c, sizeof c),
            fmt_s(t.optimizer_s + t.cpu_optimizer_s, d, sizeof d));
    if (t.comm_bound_s > 0)
        fprintf(out, "  collectives %s on the wire; waiting for them adds %s (ZeRO-3 gathers and "
                     "reduce-scatters per module)\n",
                fmt_s(t.comm_s, a, sizeof a), fmt_s(t.comm_bound_s, b, sizeof b));
    else if (t.comm_s > 0)
        fprintf(out, "  collectives %s on the wire, %s not hidden behind compute\n",
                fmt_s(t.comm_s, a, sizeof a), fmt_s(t.comm_exposed_s, b, sizeof b));
    if (t.pcie_s > 0 || t.cpu_optimizer_s > 0)
        fprintf(out, "  offload: PCIe %s, CPU optimizer %s\n", fmt_s(t.pcie_s, a, sizeof a),
                fmt_s(t.cpu_optimizer_s, b, sizeof b));
    fprintf(out, "  1B tokens take %s on %s %lld %s\n", fmt_h(est_hours_for_tokens(e, 1e9), a, sizeof a),
            W == 1 ? "this" : "these", (long long)W, est_gpus_word(W));
}

void est_print_tokens_time(FILE *out, const est_run *run, const est_estimate *e, double tokens) {
    if (!(e->tokens_per_s > 0)) return;
    char a[32];
    double per_step = (double)run->micro_batch * (double)run->seq_len * (double)run->grad_accum *
                      (double)est_run_dp(run); /* a TP group shares one batch */
    char t1[32], t2[32];
    const int64_t W = est_run_world(run);
    fprintf(out, "  %s tokens take %s (%.0f steps of %s tokens) on %s %lld %s\n",
            est_fmt_count(tokens, t1, sizeof t1), fmt_h(est_hours_for_tokens(e, tokens), a, sizeof a),
            ceil(tokens / per_step), est_fmt_count(per_step, t2, sizeof t2), W == 1 ? "this" : "these",
            (long long)W, est_gpus_word(W));
}

static cJSON *part_json(const est_time_part *p) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "flops", p->flops);
    cJSON_AddNumberToObject(o, "hbm_bytes", p->hbm_bytes);
    cJSON_AddNumberToObject(o, "kernels", p->kernels);
    cJSON_AddNumberToObject(o, "gpu_s", p->gpu_s);
    cJSON_AddNumberToObject(o, "host_s", p->host_s);
    cJSON_AddNumberToObject(o, "comm_s", p->comm_s);
    return o;
}

void *est_time_json(const est_run *run, const est_estimate *e) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    const est_time_detail t = e->time;
    cJSON_AddBoolToObject(o, "modelled", t.modelled);
    cJSON_AddNumberToObject(o, "step_time_s", e->step_time_s);
    cJSON_AddNumberToObject(o, "it_per_s", e->it_per_s);
    cJSON_AddNumberToObject(o, "tokens_per_s", e->tokens_per_s);
    cJSON_AddNumberToObject(o, "tokens_per_s_per_gpu", t.tokens_per_s_per_gpu);
    cJSON_AddNumberToObject(o, "tokens_per_step", t.tokens_per_step);
    cJSON_AddNumberToObject(o, "mfu", e->mfu);
    cJSON_AddNumberToObject(o, "hours_per_billion_tokens", est_hours_for_tokens(e, 1e9));
    cJSON_AddNumberToObject(o, "peak_flops", t.peak_flops);
    cJSON_AddNumberToObject(o, "matmul_params", (double)t.matmul_params);
    cJSON_AddNumberToObject(o, "model_flops_per_step", t.model_flops);
    cJSON_AddNumberToObject(o, "executed_flops_per_step", t.executed_flops);
    cJSON_AddNumberToObject(o, "microbatch_s", t.microbatch_s);
    cJSON_AddNumberToObject(o, "gpu_microbatch_s", t.gpu_microbatch_s);
    cJSON_AddNumberToObject(o, "comm_bytes", t.comm_bytes);
    cJSON_AddNumberToObject(o, "comm_s", t.comm_s);
    cJSON_AddNumberToObject(o, "comm_exposed_s", t.comm_exposed_s);
    cJSON_AddNumberToObject(o, "comm_bound_s", t.comm_bound_s);
    cJSON_AddNumberToObject(o, "optimizer_s", t.optimizer_s);
    cJSON_AddNumberToObject(o, "pcie_bytes", t.pcie_bytes);
    cJSON_AddNumberToObject(o, "pcie_s", t.pcie_s);
    cJSON_AddNumberToObject(o, "cpu_optimizer_s", t.cpu_optimizer_s);
    cJSON *u = cJSON_AddObjectToObject(o, "units");
    cJSON_AddItemToObject(u, "embedding_forward", part_json(&t.embed_fwd));
    cJSON_AddItemToObject(u, "block_forward", part_json(&t.block_fwd));
    cJSON_AddItemToObject(u, "head_and_loss_forward", part_json(&t.head_fwd));
    cJSON_AddItemToObject(u, "loss_backward", part_json(&t.loss_bwd));
    cJSON_AddItemToObject(u, "head_backward", part_json(&t.head_bwd));
    cJSON_AddItemToObject(u, "block_backward", part_json(&t.block_bwd));
    cJSON_AddItemToObject(u, "embedding_backward", part_json(&t.embed_bwd));
    return o;
}
