/* The CPU device of the time ledger (cpu_device.h). */
#include "cpu_device.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "json_util.h"
#include "model_config.h"

const char *const est_cpu_kernel_names[EST_CPU_KERNELS] = {
    NULL,          "rmsnorm_fwd", "rmsnorm_bwd", "rope_fwd", "rope_bwd", "swiglu_fwd", "swiglu_bwd", "add",
    "embedding_fwd", "embedding_bwd", "ce_fwd", "ce_bwd", "sumsq", "zero", "adamw", "sgd", "convert"};

bool est_cpu_device_run(const est_run *run) { return !strcmp(run->gpu.name, "cpu"); }

/* An array of exactly `n` numbers in [lo, hi] into out. */
static int series_of(const cJSON *root, const char *key, int n, double lo, double hi, double *out, char *err,
                     size_t errlen) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n)
        return ft_errorf(err, errlen, "cpu device profile: %s must hold %d numbers", key, n);
    for (int i = 0; i < n; i++) {
        const cJSON *v = cJSON_GetArrayItem(a, i);
        if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi))
            return ft_errorf(err, errlen, "cpu device profile: %s[%d] is out of range", key, i);
        out[i] = v->valuedouble;
    }
    return 0;
}

/* The attention series: lengths rising, every rate positive. */
static int attention_of(const cJSON *root, est_cpu_device *out, char *err, size_t errlen) {
    static const char *const keys[6] = {
        "attention_fwd_fp32_flops_per_s", "attention_bwd_fp32_flops_per_s", "attention_fwd_bf16_flops_per_s",
        "attention_bwd_bf16_flops_per_s", "eager_attention_fp32_flops_per_s", "eager_attention_bf16_flops_per_s"};
    double *dst[6] = {out->attn_fwd_flops_per_s[0], out->attn_bwd_flops_per_s[0], out->attn_fwd_flops_per_s[1],
                      out->attn_bwd_flops_per_s[1], out->eager_flops_per_s[0], out->eager_flops_per_s[1]};
    if (series_of(root, "attention_seq", EST_CPU_SEQS, 1, 1e9, out->seq, err, errlen) < 0) return -1;
    for (int i = 1; i < EST_CPU_SEQS; i++)
        if (!(out->seq[i] > out->seq[i - 1]))
            return ft_errorf(err, errlen, "cpu device profile: attention_seq must rise");
    for (int k = 0; k < 6; k++)
        if (series_of(root, keys[k], EST_CPU_SEQS, 1e3, 1e16, dst[k], err, errlen) < 0) return -1;
    return 0;
}

/* barrier_work_s (rising from 0) and barrier_meet_s_by_ranks: for 2..8
 * threads, one time per work interval; barrier_halt_wake_s. */
static int meets_of(const cJSON *root, est_cpu_device *out, char *err, size_t errlen) {
    if (series_of(root, "barrier_work_s", EST_CPU_WORKS, 0, 1, out->meet_work_s, err, errlen) < 0) return -1;
    for (int w = 1; w < EST_CPU_WORKS; w++)
        if (!(out->meet_work_s[w] > out->meet_work_s[w - 1]))
            return ft_errorf(err, errlen, "cpu device profile: barrier_work_s must rise");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, "barrier_meet_s_by_ranks");
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != 7)
        return ft_errorf(err, errlen, "cpu device profile: barrier_meet_s_by_ranks must hold 7 rows (2-8 ranks)");
    for (int n = 2; n <= 8; n++) {
        const cJSON *row = cJSON_GetArrayItem(a, n - 2);
        if (!cJSON_IsArray(row) || cJSON_GetArraySize(row) != EST_CPU_WORKS)
            return ft_errorf(err, errlen, "cpu device profile: barrier_meet_s_by_ranks[%d] must hold %d times", n - 2,
                             EST_CPU_WORKS);
        for (int w = 0; w < EST_CPU_WORKS; w++) {
            const cJSON *v = cJSON_GetArrayItem(row, w);
            if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble < 1))
                return ft_errorf(err, errlen, "cpu device profile: barrier_meet_s_by_ranks[%d][%d] is not a time",
                                 n - 2, w);
            out->meet_s[n][w] = v->valuedouble;
        }
    }
    if (ft_json_double(root, "barrier_halt_wake_s", 0, 1, &out->halt_wake_s, err, errlen) != 1)
        return err[0] ? -1 : ft_errorf(err, errlen, "cpu device profile: barrier_halt_wake_s is missing");
    return 0;
}

/* kernel_elems_per_s: every kernel of est_cpu_kernel_names, [fp32, bf16]. */
static int kernels_of(const cJSON *root, est_cpu_device *out, char *err, size_t errlen) {
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, "kernel_elems_per_s");
    if (!cJSON_IsObject(o)) return ft_errorf(err, errlen, "cpu device profile: kernel_elems_per_s is missing");
    for (int k = 1; k < EST_CPU_KERNELS; k++)
        if (series_of(o, est_cpu_kernel_names[k], 2, 1e3, 1e14, out->kernel_elems_per_s[k], err, errlen) < 0)
            return -1;
    return 0;
}

int est_cpu_device_parse(const char *text, size_t len, est_cpu_device *out, char *err,
                         size_t errlen) {
    memset(out, 0, sizeof *out);
    cJSON *root = ft_json_parse(text, len, "cpu device profile", err, errlen);
    if (!root) return -1;
    char schema[64] = "", date[40] = "";
    int rc = -1;
    if (ft_json_string(root, "schema", schema, sizeof schema, err, errlen) != 1 ||
        strcmp(schema, "ftest.cpu-device/1")) {
        ft_errorf(err, errlen, "cpu device profile: schema must be \"ftest.cpu-device/1\"");
        goto done;
    }
    /* Every rate is required: a missing one would price its ops at zero time. */
    if (ft_json_double(root, "gemm_fp32_flops_per_s", 1e6, 1e16, &out->gemm_fp32_flops_per_s, err, errlen) != 1 ||
        ft_json_double(root, "gemm_bf16_flops_per_s", 1e6, 1e16, &out->gemm_bf16_flops_per_s, err, errlen) != 1 ||
        ft_json_double(root, "memory_bytes_per_s", 1e6, 1e14, &out->memory_bytes_per_s, err, errlen) != 1 ||
        ft_json_double(root, "op_dispatch_s", 0, 1, &out->op_dispatch_s, err, errlen) != 1 ||
        ft_json_double(root, "threads", 1, 1 << 20, &out->threads, err, errlen) != 1) {
        if (!err[0]) ft_errorf(err, errlen, "cpu device profile: a rate is missing");
        goto done;
    }
    if (ft_json_double(root, "gemm_fp32_flops_per_s_1t", 1e6, 1e16, &out->gemm_fp32_flops_per_s_1t, err, errlen) != 1 ||
        ft_json_double(root, "gemm_bf16_flops_per_s_1t", 1e6, 1e16, &out->gemm_bf16_flops_per_s_1t, err, errlen) != 1 ||
        ft_json_double(root, "memory_bytes_per_s_1t", 1e6, 1e14, &out->memory_bytes_per_s_1t, err, errlen) != 1 ||
        attention_of(root, out, err, errlen) < 0 ||
        meets_of(root, out, err, errlen) < 0 || kernels_of(root, out, err, errlen) < 0) {
        if (!err[0]) ft_errorf(err, errlen, "cpu device profile: a one-thread rate is missing");
        goto done;
    }
    if (ft_json_string(root, "date", date, sizeof date, err, errlen) < 0) goto done;
    snprintf(out->source, sizeof out->source, "calibrate/host/cpu-ftrain.json (measured %s)",
             date[0] ? date : "undated");
    rc = 0;
done:
    cJSON_Delete(root);
    return rc;
}

static est_cpu_device loaded;
static bool loaded_ok;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void) {
    char path[4096], err[256] = "";
    const char *p = ft_data_path("calibrate/host/cpu-ftrain.json", path, sizeof path);
    size_t len = 0;
    char *text = p ? ft_read_file(p, 1 << 16, &len, err, sizeof err) : NULL;
    if (text) loaded_ok = est_cpu_device_parse(text, len, &loaded, err, sizeof err) == 0;
    free(text);
}

const est_cpu_device *est_cpu_device_get(void) {
    pthread_once(&once, load);
    return loaded_ok ? &loaded : NULL;
}

est_cpu_device est_cpu_device_team(const est_cpu_device *d, int64_t ranks) {
    est_cpu_device t = *d;
    if (ranks >= 2 && (double)ranks >= d->threads / 2) { /* each rank a team of one */
        t.gemm_fp32_flops_per_s = d->gemm_fp32_flops_per_s_1t;
        t.gemm_bf16_flops_per_s = d->gemm_bf16_flops_per_s_1t;
        t.memory_bytes_per_s = d->memory_bytes_per_s_1t;
    }
    return t;
}

double est_cpu_rank_share(const est_cpu_device *d, double ranks) {
    return ranks > d->threads ? ranks / d->threads : 1;
}

/* Meetings per optimizer step (docs/trainer.md, "Ranks and ZeRO"; units:
 * the embedding, the L blocks, the head). A reduce-scatter or all-gather
 * meets twice, an all-reduce three times. */
static double meets_per_step(const est_run *run) {
    const double L = (double)run->layers_used, U = L + 2, GA = (double)run->grad_accum;
    const double tied = run->model.tied_embeddings ? 1 : 0;
    double m = 2 + 3; /* the driver's two barriers; the gradient norm's all-reduce */
    switch (run->zero_stage) {
    case 0: m += 3; break;                          /* all-reduce of the gradients */
    case 1: m += 2 * U + 2 * U; break;              /* reduce-scatter, then all-gather, per unit */
    case 2: m += GA * 2 * U + 2 * U; break;         /* a bucket per unit per micro-batch */
    default: /* gathers: forward (embedding, blocks), loss (head, tied embedding),
                backward (blocks); a bucket per unit per micro-batch */
        m += GA * (2 * (2 * L + 2 + tied) + 2 * U);
        break;
    }
    return m;
}

/* One meeting of n threads after `work_s` each, on busy cores: linear between
 * the measured intervals, the last one's beyond them. */
static double meet_at(const est_cpu_device *d, int n, double work_s) {
    const double *m = d->meet_s[n], *w = d->meet_work_s;
    if (!(work_s > w[0])) return m[0];
    for (int i = 1; i < EST_CPU_WORKS; i++)
        if (work_s <= w[i]) return m[i - 1] + (m[i] - m[i - 1]) * (work_s - w[i - 1]) / (w[i] - w[i - 1]);
    return m[EST_CPU_WORKS - 1];
}

double est_cpu_sync_s(const est_cpu_device *d, const est_run *run, double compute_s) {
    const int64_t W = est_run_world(run);
    if (W <= 1) return 0;
    const int n = W < 8 ? (int)W : 8;
    const double meets = meets_per_step(run);
    const double work_s = compute_s / est_cpu_rank_share(d, (double)W) / meets;
    return meets * (meet_at(d, n, work_s) + d->halt_wake_s);
}

double est_cpu_rate_at(const est_cpu_device *d, const double *r, double seq) {
    if (!(seq > d->seq[0])) return r[0];
    for (int i = 1; i < EST_CPU_SEQS; i++)
        if (seq <= d->seq[i]) {
            const double t = log(seq / d->seq[i - 1]) / log(d->seq[i] / d->seq[i - 1]);
            return exp(log(r[i - 1]) + t * (log(r[i]) - log(r[i - 1])));
        }
    return r[EST_CPU_SEQS - 1];
}

double est_cpu_event_s(const est_cpu_device *d, const est_event *e, bool fp32, double seq,
                       double bwd_ratio, double *flops, double *bytes) {
    const double bw = d->memory_bytes_per_s;
    const int t = fp32 ? 0 : 1;
    switch (e->kind) {
    case EST_EV_GEMM: {
        const double f = e->u.gemm.count * 2.0 * e->u.gemm.M * e->u.gemm.K * e->u.gemm.N;
        const bool f32 = e->u.gemm.elem_bytes >= 4;
        double rate = f32 ? d->gemm_fp32_flops_per_s : d->gemm_bf16_flops_per_s;
        if (e->u.gemm.count > e->u.gemm.kernels) /* eager attention's per-head products */
            rate = est_cpu_rate_at(d, d->eager_flops_per_s[f32 ? 0 : 1], seq);
        *flops += f;
        return f / rate + e->u.gemm.kernels * d->op_dispatch_s;
    }
    case EST_EV_MEMORY_OP: {
        *bytes += e->u.op.bytes;
        const int k = e->u.op.cpu_kernel;
        if (k > EST_CPU_K_NONE && k < EST_CPU_KERNELS) /* ftrain's own kernel, at its measured rate */
            return e->u.op.elems / d->kernel_elems_per_s[k][t];
        return e->u.op.bytes / bw + e->u.op.kernels * d->op_dispatch_s;
    }
    case EST_EV_ATTENTION: {
        const double f = e->u.attn.flops; /* the forward's */
        *flops += e->u.attn.backward ? bwd_ratio * f : f;
        *bytes += e->u.attn.bytes;
        const double *r = e->u.attn.backward ? d->attn_bwd_flops_per_s[t] : d->attn_fwd_flops_per_s[t];
        return f / est_cpu_rate_at(d, r, seq);
    }
    case EST_EV_PCIE: /* offload copies and the host optimizer: host memory traffic */
    case EST_EV_HOST_MEMORY:
        *bytes += e->u.transfer.bytes;
        return e->u.transfer.bytes / bw;
    default: return 0;
    }
}
