#include "record.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ds_config.h"
#include "fsdp_policy.h"
#include "fw_registry.h"
#include "json_util.h"
#include "liger.h"
#include "lora.h"
#include "record_features.h"
#include "record_optim.h"
#include "record_peft.h"

const char *const est_trace_phase_names[EST_TRACE_PHASES] = {"init", "forward", "backward",
                                                              "optimizer"};

int64_t est_record_peak(const est_rank_measure *r) {
    return r->peak_allocated_bytes >= 0 ? r->peak_allocated_bytes : r->peak_active_bytes;
}

void est_record_free(est_record *rec) {
    free(rec->ranks);
    rec->ranks = NULL;
    rec->rank_count = 0;
}

static const cJSON *object(const cJSON *root, const char *key) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    return cJSON_IsObject(it) ? it : NULL;
}

const char *est_record_dir(const char *path, char *buf, size_t n) {
    const char *slash = strrchr(path, '/');
    if (!slash) ft_strlcpy(buf, ".", n);
    else if (slash == path) ft_strlcpy(buf, "/", n);
    else snprintf(buf, n, "%.*s", (int)(slash - path), path);
    return buf;
}

/* spec, a relative path, resolved under base_dir into out; -1 (with message)
 * when it is absolute, has a ".." part, or its real path leaves base_dir. */
static int path_under(const char *spec, const char *base_dir, char *out, size_t n, char *err,
                      size_t errlen) {
    if (spec[0] == '/')
        return ft_errorf(err, errlen, "config.model \"%.80s\" is an absolute path; a record names a shipped "
                         "model or a file beside it", spec);
    for (const char *p = spec; *p;) {
        const char *e = strchr(p, '/');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == 2 && p[0] == '.' && p[1] == '.')
            return ft_errorf(err, errlen, "config.model \"%.80s\" leaves the record file's directory", spec);
        p += len + (e ? 1 : 0);
    }
    char joined[PATH_MAX], real_base[PATH_MAX];
    if ((size_t)snprintf(joined, sizeof joined, "%s/%s", base_dir, spec) >= sizeof joined)
        return ft_errorf(err, errlen, "config.model path is too long");
    if (!realpath(base_dir, real_base) || !realpath(joined, out))
        return ft_errorf(err, errlen, "config.model \"%.80s\": no such file beside the record file", spec);
    size_t bl = strlen(real_base);
    if (strncmp(out, real_base, bl) || (out[bl] != '/' && strcmp(real_base, "/")))
        return ft_errorf(err, errlen, "config.model \"%.80s\" leads out of the record file's directory", spec);
    (void)n;
    return 0;
}

/* A shipped model name, or a path under base_dir (path_under). The last model
 * is cached: record files repeat the same one thousands of times. */
static int load_model(const char *spec, const char *base_dir, ft_model *m, char *err, size_t errlen) {
    static char last_key[PATH_MAX];
    static ft_model last;
    char path[PATH_MAX];
    const char *key = spec;
    bool is_path = strchr(spec, '/') || strstr(spec, ".json");
    if (is_path) {
        if (!base_dir)
            return ft_errorf(err, errlen, "config.model \"%.80s\" is a path; only shipped model names "
                             "are read here", spec);
        if (path_under(spec, base_dir, path, sizeof path, err, errlen) < 0) return -1;
        key = path;
    }
    if (last_key[0] && !strcmp(key, last_key)) {
        *m = last;
        return 0;
    }
    if (ft_model_load(key, m, err, errlen) < 0) return -1;
    ft_strlcpy(last_key, key, sizeof last_key);
    last = *m;
    return 0;
}

static int parse_model(const cJSON *cfg, const char *base_dir, ft_model *m, char *err, size_t errlen) {
    const cJSON *inline_cfg = object(cfg, "model_config");
    if (inline_cfg) {
        char *text = cJSON_PrintUnformatted(inline_cfg);
        if (!text) return ft_errorf(err, errlen, "out of memory");
        char name[FT_NAME_MAX] = "inline";
        ft_json_string(cfg, "model", name, sizeof name, NULL, 0);
        int rc = ft_model_parse(text, strlen(text), name, m, err, errlen);
        free(text);
        return rc;
    }
    char spec[PATH_MAX];
    int r = ft_json_string(cfg, "model", spec, sizeof spec, err, errlen);
    if (r == 0) return ft_errorf(err, errlen, "config lacks \"model\"");
    if (r < 0) return -1;
    return load_model(spec, base_dir, m, err, errlen);
}

/* Reads an enum-valued string field with its parser; absent keeps the default. */
#define ENUM_FIELD(obj, key, parser, dst)                                                   \
    do {                                                                                    \
        char v_[40];                                                                        \
        int r_ = ft_json_string(obj, key, v_, sizeof v_, err, errlen);                      \
        if (r_ < 0) return -1;                                                              \
        if (r_ == 1 && parser(v_, dst, err, errlen) < 0) return -1;                         \
    } while (0)

/* LoRA / QLoRA settings, named as the flags (all optional; absent = full
 * fine-tuning): lora_rank, lora_alpha, lora_targets, lora_dropout, lora_dtype
 * (fp32 | bf16), quant, compute_dtype, double_quant. */
static int parse_lora(const cJSON *cfg, est_run *run, char *err, size_t errlen) {
    if (ft_json_int64(cfg, "lora_rank", 0, EST_LORA_MAX_RANK, &run->lora.rank, err, errlen) < 0 ||
        ft_json_double(cfg, "lora_alpha", 1e-9, 1e9, &run->lora.alpha, err, errlen) < 0 ||
        ft_json_double(cfg, "lora_dropout", 0.0, 0.999999, &run->lora.dropout, err, errlen) < 0 ||
        ft_json_bool(cfg, "double_quant", &run->double_quant, err, errlen) < 0 ||
        ft_json_bool(cfg, "optimizer_in_backward", &run->optimizer_in_backward, err, errlen) < 0 ||
        ft_json_bool(cfg, "activation_offload", &run->activation_offload, err, errlen) < 0)
        return -1;
    char targets[128];
    int r = ft_json_string(cfg, "lora_targets", targets, sizeof targets, err, errlen);
    if (r < 0) return -1;
    if (r == 1 && est_lora_targets_parse(targets, &run->lora.targets, err, errlen) < 0) return -1;
    ENUM_FIELD(cfg, "lora_dtype", est_lora_dtype_parse, &run->lora.base_dtype);
    ENUM_FIELD(cfg, "quant", est_quant_parse, &run->quant);
    ENUM_FIELD(cfg, "compute_dtype", est_compute_dtype_parse, &run->quant_compute);
    return 0;
}

/* FSDP1's prefetch: config.fsdp_backward_prefetch and fsdp_forward_prefetch
 * (the probe's names and values), or a cpu-trace record's config.settings
 * with FullyShardedDataParallel's own (backward_prefetch "BACKWARD_PRE", or
 * null for none). Absent: the HF Trainer's defaults (none, false). */
static int parse_fsdp_prefetch(const cJSON *cfg, est_run *run, char *err, size_t errlen) {
    const cJSON *src = cfg, *settings = cJSON_GetObjectItemCaseSensitive(cfg, "settings");
    const char *bp = "fsdp_backward_prefetch", *fp = "fsdp_forward_prefetch";
    if (cJSON_IsObject(settings) && cJSON_GetObjectItemCaseSensitive(settings, "backward_prefetch")) {
        src = settings;
        bp = "backward_prefetch";
        fp = "forward_prefetch";
    }
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(src, bp);
    if (b && !cJSON_IsNull(b)) {
        if (!cJSON_IsString(b) || !b->valuestring) return ft_errorf(err, errlen, "config: %s must be a string", bp);
        if (est_fsdp_prefetch_parse(b->valuestring, &run->fsdp_backward_prefetch, err, errlen) < 0) return -1;
    }
    return ft_json_bool(src, fp, &run->fsdp_forward_prefetch, err, errlen) < 0 ? -1 : 0;
}

/* Where LoRA's adapters went under FSDP: config.fsdp_lora_wrap ("peft" or
 * "layer") if named; a cpu-trace record's settings mean cpu_truth_setups.py,
 * which wraps the decoder layers alone (transformer_auto_wrap_policy, or
 * fully_shard per layer): "layer". Absent otherwise: PEFT's policy. */
static int parse_fsdp_lora_wrap(const cJSON *cfg, est_run *run, char *err, size_t errlen) {
    if (cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(cfg, "settings"))) run->fsdp_lora_wrap = EST_FSDP_LORA_WRAP_LAYER;
    ENUM_FIELD(cfg, "fsdp_lora_wrap", est_fsdp_lora_wrap_parse, &run->fsdp_lora_wrap);
    return 0;
}

/* Who wrapped the model in FSDP: config.fsdp_wrapper ("accelerate" or
 * "torch") if named; else the script itself where config.probe_mode names one
 * of this project's own FSDP runners, which call FullyShardedDataParallel /
 * fully_shard on the model they built, with no accelerate between
 * (calibrate/probes/probe_run.py run_fsdp and trace_fsdp2: modes "fsdp",
 * "fsdp2", "fsdp2-trace"; cpu_truth_setups.py: "cpu-trace fsdp1", "cpu-trace
 * fsdp2"); else accelerate (the HF Trainer's path). */
static int parse_fsdp_wrapper(const cJSON *cfg, est_run *run, char *err, size_t errlen) {
    static const char *const own[] = {"fsdp", "fsdp2", "fsdp2-trace", "cpu-trace fsdp1", "cpu-trace fsdp2"};
    const cJSON *mode = cJSON_GetObjectItemCaseSensitive(cfg, "probe_mode");
    for (size_t i = 0; cJSON_IsString(mode) && mode->valuestring && i < sizeof own / sizeof own[0]; i++)
        if (!strcmp(mode->valuestring, own[i])) run->fsdp_wrapper = EST_FSDP_BY_SCRIPT;
    ENUM_FIELD(cfg, "fsdp_wrapper", est_fsdp_wrapper_parse, &run->fsdp_wrapper);
    return 0;
}

/* FSDP settings; records without them get the defaults (FSDP1, weights
 * loaded in fp32, reduction in the compute dtype, accelerate wrapping). */
static int parse_fsdp(const cJSON *cfg, est_run *run, char *err, size_t errlen) {
    int64_t fsdp_version = 1;
    if (ft_json_int64(cfg, "fsdp_version", 1, 2, &fsdp_version, err, errlen) < 0) return -1;
    run->fsdp_version = fsdp_version == 2 ? EST_FSDP2 : EST_FSDP1;
    ENUM_FIELD(cfg, "load_dtype", est_load_dtype_parse, &run->load_dtype);
    ENUM_FIELD(cfg, "fsdp_reduce_dtype", est_reduce_dtype_parse, &run->fsdp_reduce);
    if (parse_fsdp_prefetch(cfg, run, err, errlen) < 0 || parse_fsdp_lora_wrap(cfg, run, err, errlen) < 0)
        return -1;
    return parse_fsdp_wrapper(cfg, run, err, errlen);
}

/* A record of the probe's DeepSpeed mode without config.deepspeed ran the
 * config calibrate/probes/probe_run.py ds_config builds: no "optimizer"
 * section, so DeepSpeed wraps the HF Trainer's torch AdamW (its "adamw"
 * maps to adamw_torch, foreach on CUDA); with optimizer offload the record
 * names "optimizer_impl": torch AdamW kept on the host by
 * "zero_force_ds_cpu_optimizer": false, or else DeepSpeedCPUAdam from an
 * "optimizer" section. */
static int probe_deepspeed(const cJSON *cfg, est_run *run) {
    const cJSON *mode = cJSON_GetObjectItemCaseSensitive(cfg, "probe_mode");
    if (!cJSON_IsString(mode) || !mode->valuestring || strcmp(mode->valuestring, "deepspeed")) return 0;
    const cJSON *impl = cJSON_GetObjectItemCaseSensitive(cfg, "optimizer_impl");
    const bool torch_on_host = cJSON_IsString(impl) && impl->valuestring && !strncmp(impl->valuestring, "torch", 5);
    run->ds.client_optimizer = run->offload == EST_OFFLOAD_NONE || torch_on_host;
    run->ds.keep_client_optimizer = torch_on_host;
    return 0;
}

/* config.deepspeed: the DeepSpeed config the run was given (cpu-trace records
 * pin every bucket and ZeRO-3 threshold there), read as --deepspeed-config
 * reads a file, so the estimate uses the run's real settings. */
static int parse_deepspeed(const cJSON *cfg, est_run *run, char *err, size_t errlen) {
    const cJSON *ds = cJSON_GetObjectItemCaseSensitive(cfg, "deepspeed");
    if (!ds || cJSON_IsNull(ds)) return probe_deepspeed(cfg, run);
    if (!cJSON_IsObject(ds)) return ft_errorf(err, errlen, "config.deepspeed must be an object");
    if (est_fw_models(run, EST_FEAT_DEEPSPEED_CONFIG, NULL, err, errlen) < 0) return -1;
    char *text = cJSON_PrintUnformatted(ds);
    if (!text) return ft_errorf(err, errlen, "out of memory");
    int rc = est_ds_config_apply(text, strlen(text), run, err, errlen);
    free(text);
    /* the CPU traces hand deepspeed.initialize one list of parameters
     * (calibrate/probes/cpu_truth_setups.py adamw), not the HF Trainer's two groups */
    const cJSON *mode = cJSON_GetObjectItemCaseSensitive(cfg, "probe_mode");
    if (cJSON_IsString(mode) && mode->valuestring && !strcmp(mode->valuestring, "cpu-trace deepspeed"))
        run->ds.client_one_group = true;
    return rc;
}

/* config.liger_kernels: the Liger-Kernel kernels the run applied (liger.h
 * names; others are named by record_features.c); the fused linear
 * cross-entropy must come with "loss": "chunked". */
static int parse_liger(const cJSON *cfg, est_run *run, char *err, size_t errlen) {
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(cfg, "liger_kernels");
    if (!k || cJSON_IsNull(k)) return 0;
    if (!cJSON_IsArray(k)) return ft_errorf(err, errlen, "config.liger_kernels must be an array of names");
    uint32_t bits = 0;
    for (const cJSON *e = k->child; e; e = e->next) {
        uint32_t one;
        bool all;
        if (!cJSON_IsString(e))
            return ft_errorf(err, errlen, "config.liger_kernels: each entry must be a kernel's name");
        char why[160];
        /* a kernel ftest does not model makes the record not expressible (record_features.c) */
        if (est_liger_parse(e->valuestring, &one, &all, why, sizeof why) == 0 && !all) bits |= one;
    }
    if ((bits & EST_LIGER_FLCE) && run->loss != EST_LOSS_CHUNKED)
        return ft_errorf(err, errlen, "config.liger_kernels names fused_linear_cross_entropy: \"loss\" "
                                      "must be \"chunked\"");
    run->liger = bits & ~EST_LIGER_FLCE;
    return 0;
}

/* hardware.process_group: "nccl" (the default) or "fake", torch's fake
 * backend of a rank emulated on one GPU, which opens no NCCL communicator
 * (docs/records.md). */
static int parse_process_group(const cJSON *hw, est_run *run, char *err, size_t errlen) {
    char pg[16] = "nccl";
    if (ft_json_string(hw, "process_group", pg, sizeof pg, err, errlen) < 0) return -1;
    if (strcmp(pg, "nccl") && strcmp(pg, "fake"))
        return ft_errorf(err, errlen, "hardware.process_group must be \"nccl\" or \"fake\", not \"%s\"", pg);
    run->fake_process_group = !strcmp(pg, "fake");
    return 0;
}

static int parse_config(const cJSON *root, const est_gpu_catalog *cat, const char *base_dir,
                        est_record *rec, char *err, size_t errlen) {
    const cJSON *cfg = object(root, "config");
    const cJSON *hw = object(root, "hardware");
    if (!cfg) return ft_errorf(err, errlen, "record lacks a \"config\" object");
    if (!hw) return ft_errorf(err, errlen, "record lacks a \"hardware\" object");

    ft_model model;
    if (parse_model(cfg, base_dir, &model, err, errlen) < 0) return -1;

    char gpu[EST_GPU_NAME_MAX] = "";
    if (ft_json_string(hw, "gpu", gpu, sizeof gpu, err, errlen) != 1)
        return ft_errorf(err, errlen, "hardware lacks \"gpu\"");
    est_gpu cpu_gpu;
    const est_gpu *g = NULL;
    if (!strcmp(gpu, "cpu")) {
        memset(&cpu_gpu, 0, sizeof cpu_gpu);
        ft_strlcpy(cpu_gpu.name, "cpu", sizeof cpu_gpu.name);
        ft_strlcpy(cpu_gpu.display, "CPU (ftrain reference backend)", sizeof cpu_gpu.display);
        g = &cpu_gpu;
    } else if (!cat || !(g = est_gpu_find(cat, gpu))) {
        return ft_errorf(err, errlen, "unknown GPU \"%s\" in hardware.gpu", gpu);
    }

    est_run *run = &rec->run;
    est_run_defaults(run, &model, g);
    if (ft_json_int64(hw, "gpus_per_node", 1, 1 << 20, &run->gpus_per_node, err, errlen) < 0 ||
        ft_json_int64(hw, "nodes", 1, 1 << 20, &run->nodes, err, errlen) < 0 ||
        parse_process_group(hw, run, err, errlen) < 0)
        return -1;
    ENUM_FIELD(root, "framework", est_framework_parse, &run->framework);
    /* A framework without sdpa ran flash attention (ftrain's records say none). */
    if (!est_fw_has(run, EST_FEAT_SDPA)) run->attention = EST_ATTN_FLASH;
    if (ft_json_int64(cfg, "layers", 1, FT_MAX_LAYERS, &run->layers_used, err, errlen) < 0 ||
        ft_json_int64(cfg, "micro_batch", 1, INT32_MAX, &run->micro_batch, err, errlen) < 0 ||
        ft_json_int64(cfg, "grad_accum", 1, INT32_MAX, &run->grad_accum, err, errlen) < 0 ||
        ft_json_int64(cfg, "seq_len", 1, INT32_MAX, &run->seq_len, err, errlen) < 0)
        return -1;
    int64_t zero = 0;
    if (ft_json_int64(cfg, "zero", 0, 3, &zero, err, errlen) < 0) return -1;
    run->zero_stage = (int)zero;
    ENUM_FIELD(cfg, "precision", est_precision_parse, &run->precision);
    ENUM_FIELD(cfg, "offload", est_offload_parse, &run->offload);
    ENUM_FIELD(cfg, "checkpointing", est_checkpointing_parse, &run->checkpointing);
    ENUM_FIELD(cfg, "attention", est_attention_parse, &run->attention);
    ENUM_FIELD(cfg, "loss", est_loss_parse, &run->loss);
    ENUM_FIELD(cfg, "optimizer", est_optimizer_parse, &run->optimizer);
    if (est_record_adamw_impl(cfg, run, err, errlen) < 0) return -1; /* record_optim.h */
    /* torch.utils.checkpoint's implementation (cpu-trace records name it) */
    const cJSON *impl = cJSON_GetObjectItemCaseSensitive(cfg, "checkpointing_impl");
    if (impl && !cJSON_IsNull(impl)) {
        if (!cJSON_IsString(impl) || (strcmp(impl->valuestring, "reentrant") && strcmp(impl->valuestring, "non-reentrant")))
            return ft_errorf(err, errlen, "config.checkpointing_impl must be \"reentrant\" or \"non-reentrant\"");
        run->ckpt_non_reentrant = !strcmp(impl->valuestring, "non-reentrant");
    }
    if (ft_json_bool(cfg, "expandable_segments", &run->expandable_segments, err, errlen) < 0 ||
        ft_json_bool(cfg, "padding_mask", &run->padding_mask, err, errlen) < 0 ||
        ft_json_bool(cfg, "zero_init", &run->zero_init, err, errlen) < 0)
        return -1;
    /* The stack the record was measured with; records that predate stacks
     * name none and get the default. */
    const cJSON *stack = cJSON_GetObjectItemCaseSensitive(cfg, "stack");
    if (!stack || cJSON_IsNull(stack)) {
        /* no stack named: the one whose versions the record lists, if ftest has it */
        const est_stack *listed = est_stack_of_versions(cJSON_GetObjectItemCaseSensitive(root, "stack"));
        if (listed) run->stack = listed;
    } else {
        if (!cJSON_IsString(stack)) return ft_errorf(err, errlen, "config.stack must be a string");
        if (est_stack_parse(stack->valuestring, &run->stack, err, errlen) < 0) return -1;
    }
    if (parse_fsdp(cfg, run, err, errlen) < 0) return -1;
    if (parse_deepspeed(cfg, run, err, errlen) < 0) return -1;
    if (parse_lora(cfg, run, err, errlen) < 0 || parse_liger(cfg, run, err, errlen) < 0) return -1;
    return est_record_peft_config(cfg, run, err, errlen); /* record_peft.h */
}

static int parse_categories(const cJSON *obj, int64_t out[EST_CAT_ALLOCATED_COUNT], char *err,
                            size_t errlen) {
    for (int c = 0; c < EST_CAT_ALLOCATED_COUNT; c++) {
        out[c] = 0;
        if (ft_json_int64(obj, est_category_names[c], 0, INT64_C(1) << 60, &out[c], err, errlen) < 0)
            return -1;
    }
    return 0;
}

/* An array of per-layer byte counts (null entries: not sampled) into out[]. */
static int parse_layer_bytes(const cJSON *tr, const char *key, int64_t *out, int32_t *layers,
                             char *err, size_t errlen) {
    for (int i = 0; i < EST_TRACE_LAYERS_MAX; i++) out[i] = -1;
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(tr, key);
    if (!a || cJSON_IsNull(a)) return 0;
    if (!cJSON_IsArray(a)) return ft_errorf(err, errlen, "trace.%s must be an array", key);
    int n = cJSON_GetArraySize(a);
    if (n > EST_TRACE_LAYERS_MAX)
        return ft_errorf(err, errlen, "trace.%s has %d layers (at most %d)", key, n,
                         EST_TRACE_LAYERS_MAX);
    int i = 0;
    for (const cJSON *it = a->child; it; it = it->next, i++) {
        if (cJSON_IsNull(it)) continue;
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble > 1e18 ||
            it->valuedouble != (double)(int64_t)it->valuedouble)
            return ft_errorf(err, errlen, "trace.%s[%d] must be whole bytes or null", key, i);
        out[i] = (int64_t)it->valuedouble;
    }
    if (n > *layers) *layers = n;
    return 0;
}

/* measured.ranks[].trace of a cpu-trace record (docs/records.md). */
static int parse_trace(const cJSON *r, est_rank_trace *t, char *err, size_t errlen) {
    memset(t, 0, sizeof *t);
    for (int p = 0; p < EST_TRACE_PHASES; p++) t->phase_peak[p] = -1;
    const cJSON *tr = object(r, "trace");
    for (int i = 0; i < EST_TRACE_LAYERS_MAX; i++)
        t->forward_layer[i] = t->backward_layer[i] = t->backward_layer_peak[i] = -1;
    if (!tr) return 0;
    t->present = true;
    const cJSON *pp = object(tr, "phase_peak_bytes");
    for (int p = 0; pp && p < EST_TRACE_PHASES; p++)
        if (ft_json_int64(pp, est_trace_phase_names[p], 0, INT64_C(1) << 60, &t->phase_peak[p], err,
                          errlen) < 0)
            return -1;
    if (parse_layer_bytes(tr, "forward_layer_bytes", t->forward_layer, &t->layers, err, errlen) < 0 ||
        parse_layer_bytes(tr, "backward_layer_bytes", t->backward_layer, &t->layers, err, errlen) < 0 ||
        parse_layer_bytes(tr, "backward_layer_peak_bytes", t->backward_layer_peak, &t->layers, err,
                          errlen) < 0)
        return -1;
    return 0;
}

static int parse_rank(const cJSON *r, est_rank_measure *m, char *err, size_t errlen) {
    if (!cJSON_IsObject(r)) return ft_errorf(err, errlen, "measured.ranks[] must hold objects");
    const int64_t big = INT64_C(1) << 60;
    m->rank = 0;
    m->peak_allocated_bytes = m->peak_active_bytes = m->peak_reserved_bytes = -1;
    m->device_used_bytes = m->after_step_bytes = -1;
    if (ft_json_int64(r, "rank", 0, 1 << 24, &m->rank, err, errlen) < 0 ||
        ft_json_int64(r, "allocated_after_step_bytes", 0, big, &m->after_step_bytes, err, errlen) < 0 ||
        ft_json_int64(r, "peak_allocated_bytes", 0, big, &m->peak_allocated_bytes, err, errlen) < 0 ||
        ft_json_int64(r, "peak_active_bytes", 0, big, &m->peak_active_bytes, err, errlen) < 0 ||
        ft_json_int64(r, "peak_reserved_bytes", 0, big, &m->peak_reserved_bytes, err, errlen) < 0 ||
        ft_json_int64(r, "device_used_bytes", 0, big, &m->device_used_bytes, err, errlen) < 0 ||
        ft_json_string(r, "peak_phase", m->peak_phase, sizeof m->peak_phase, err, errlen) < 0)
        return -1;
    const cJSON *at = object(r, "at_peak_bytes"), *cp = object(r, "category_peak_bytes");
    m->has_categories = at && cp;
    if (m->has_categories && (parse_categories(at, m->at_peak, err, errlen) < 0 ||
                              parse_categories(cp, m->category_peak, err, errlen) < 0))
        return -1;
    if (parse_trace(r, &m->trace, err, errlen) < 0 ||
        est_record_parse_memory_steps(r, &m->memory_steps, err, errlen) < 0)
        return -1;
    if (est_record_peak(m) < 0 && m->peak_reserved_bytes < 0)
        return ft_errorf(err, errlen, "rank %lld has no peak_allocated_bytes, peak_active_bytes or "
                         "peak_reserved_bytes", (long long)m->rank);
    return 0;
}

static int parse_measured(const cJSON *root, est_record *rec, char *err, size_t errlen) {
    const cJSON *meas = object(root, "measured");
    if (!meas) return ft_errorf(err, errlen, "record lacks a \"measured\" object");
    if (ft_json_bool(meas, "oom", &rec->oom, err, errlen) < 0) return -1;
    rec->cpu_peak_bytes = -1;
    if (ft_json_int64(meas, "cpu_peak_bytes", 0, INT64_C(1) << 60, &rec->cpu_peak_bytes, err,
                      errlen) < 0)
        return -1;
    if (ft_json_double(meas, "step_time_s", 0, 1e9, &rec->step_time_s, err, errlen) < 0 ||
        ft_json_double(meas, "tokens_per_s", 0, 1e15, &rec->tokens_per_s, err, errlen) < 0 ||
        ft_json_double(meas, "it_per_s", 0, 1e9, &rec->it_per_s, err, errlen) < 0 ||
        est_record_parse_steps(meas, &rec->steps, err, errlen) < 0)
        return -1;
    const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(meas, "ranks");
    if (!ranks || cJSON_IsNull(ranks)) {
        if (!rec->oom) return ft_errorf(err, errlen, "measured.ranks is missing (and oom is not true)");
        return 0;
    }
    if (!cJSON_IsArray(ranks)) return ft_errorf(err, errlen, "measured.ranks must be an array");
    int n = cJSON_GetArraySize(ranks);
    if (n < 1 || n > 65536) return ft_errorf(err, errlen, "measured.ranks has %d entries", n);
    rec->ranks = calloc((size_t)n, sizeof *rec->ranks);
    if (!rec->ranks) return ft_errorf(err, errlen, "out of memory");
    rec->rank_count = (size_t)n;
    int i = 0;
    for (const cJSON *r = ranks->child; r; r = r->next, i++)
        if (parse_rank(r, &rec->ranks[i], err, errlen) < 0) return -1;
    return 0;
}

static int parse_tolerance(const cJSON *root, est_record *rec, char *err, size_t errlen) {
    const cJSON *tol = object(root, "tolerance");
    if (!tol) return 0;
    if (ft_json_double(tol, "peak_rel", 0, 10, &rec->tol_peak_rel, err, errlen) < 0 ||
        ft_json_double(tol, "category_abs_bytes", 0, 1e18, &rec->tol_category_abs_bytes, err,
                       errlen) < 0 ||
        ft_json_double(tol, "it_per_s_rel", 0, 10, &rec->tol_it_per_s_rel, err, errlen) < 0 ||
        ft_json_double(tol, "reserved_rel", 0, 10, &rec->tol_reserved_rel, err, errlen) < 0 ||
        ft_json_double(tol, "after_step_rel", 0, 10, &rec->tol_after_step_rel, err, errlen) < 0)
        return -1;
    return 0;
}

/* The method's opening words mark a cpu-trace record; config.probe_mode
 * names its runner's mode (the group it is summarised in). */
static int parse_method(const cJSON *root, est_record *rec, char *err, size_t errlen) {
    static const char prefix[] = "traced without a GPU (cpu-trace)";
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "method");
    rec->cpu_trace = cJSON_IsString(m) && m->valuestring &&
                     !strncmp(m->valuestring, prefix, sizeof prefix - 1);
    static const char emulated[] = "rank-emulated";
    rec->rank_emulated = cJSON_IsString(m) && m->valuestring &&
                         !strncmp(m->valuestring, emulated, sizeof emulated - 1);
    const cJSON *notes = cJSON_GetObjectItemCaseSensitive(root, "notes");
    if (rec->cpu_trace && cJSON_IsString(notes) && notes->valuestring)
        ft_strlcpy(rec->notes, notes->valuestring, sizeof rec->notes);
    const cJSON *point = cJSON_GetObjectItemCaseSensitive(root, "point");
    if (cJSON_IsString(point) && point->valuestring)
        ft_strlcpy(rec->point, point->valuestring, sizeof rec->point);
    if (ft_json_string(root, "repeat_of", rec->repeat_of, sizeof rec->repeat_of, err, errlen) < 0)
        return -1;
    const cJSON *cfg = object(root, "config");
    if (cfg && ft_json_string(cfg, "probe_mode", rec->probe_mode, sizeof rec->probe_mode, err,
                              errlen) < 0)
        return -1;
    return 0;
}

/* ftest_probe.py (run_job) runs a plan's points one after another in one
 * process and notes "gpu_day point P; N bytes allocated at its start" when
 * the allocator was not empty as a point began: what the earlier points left
 * allocated, the cuBLAS workspaces among it. N, or 0 without such a note. */
static int64_t probe_start_bytes(const cJSON *root) {
    static const char tail[] = " bytes allocated at its start";
    const cJSON *notes = cJSON_GetObjectItemCaseSensitive(root, "notes");
    if (!cJSON_IsString(notes) || !notes->valuestring) return 0;
    const char *at = strstr(notes->valuestring, tail);
    if (!at) return 0;
    const char *p = at;
    while (p > notes->valuestring && p[-1] >= '0' && p[-1] <= '9') p--;
    if (p == at || at - p > 15) return 0; /* no digits, or more than a plausible byte count */
    int64_t n = 0;
    for (; p < at; p++) n = n * 10 + (*p - '0');
    return n;
}

/* The probe's runners (calibrate/probes/probe_run.py run_trainer, run_fsdp)
 * call reset_peaks once the model is set up and before training: it empties
 * the allocator's cache (torch.cuda.empty_cache()) and then restarts the
 * peaks. Modes hf, lora, qlora, adam8bit build the model on the device and
 * fsdp, fsdp2 wrap it there before that call; mode deepspeed builds it on the
 * host and DeepSpeed places it inside trainer.train(), after the call, so
 * nothing of its set-up is dropped. Returns true (a step of the parse). */
static bool probe_setup(est_record *rec, const cJSON *root) {
    static const char *const set_up_first[] = {"hf", "lora", "qlora", "adam8bit", "fsdp", "fsdp2"};
    for (size_t i = 0; i < sizeof set_up_first / sizeof set_up_first[0]; i++)
        if (!strcmp(rec->probe_mode, set_up_first[i])) rec->run.empty_cache_at_start = true;
    rec->run.ds.fake_group = rec->rank_emulated || rec->cpu_trace; /* no streams wait on another rank */
    rec->run.allocated_at_start_bytes = probe_start_bytes(root);
    return true;
}

int est_record_parse(const char *line, size_t len, const est_gpu_catalog *cat, est_record *rec,
                     char *err, size_t errlen) {
    return est_record_parse_at(line, len, cat, NULL, rec, err, errlen);
}

/* An upper bound on the JSON values in text[0, len): each value but the
 * first follows a ',' or opens after a '[' or ':'; strings are skipped. */
static size_t values_at_most(const char *text, size_t len) {
    size_t n = 1;
    bool in_string = false;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (in_string) {
            if (c == '\\') i++;
            else if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == ',' || c == '[' || c == ':') {
            n++;
        }
    }
    return n;
}

int est_record_parse_at(const char *line, size_t len, const est_gpu_catalog *cat, const char *base_dir,
                        est_record *rec, char *err, size_t errlen) {
    memset(rec, 0, sizeof *rec);
    rec->final = true;
    rec->step_time_s = rec->tokens_per_s = rec->it_per_s = NAN;
    rec->tol_peak_rel = rec->tol_category_abs_bytes = rec->tol_it_per_s_rel = NAN;
    rec->tol_reserved_rel = rec->tol_after_step_rel = NAN;
    /* Bounded before anything is allocated (record.h). */
    if (len > EST_RECORD_MAX_LINE_BYTES)
        return ft_errorf(err, errlen, "the line is %zu bytes, over the %zu MiB a record may take", len,
                         EST_RECORD_MAX_LINE_BYTES >> 20);
    if (values_at_most(line, len) > EST_RECORD_MAX_VALUES)
        return ft_errorf(err, errlen, "the line holds more than %zu JSON values, more than a record may",
                         EST_RECORD_MAX_VALUES);
    cJSON *root = ft_json_parse(line, len, "record", err, errlen);
    if (!root) return -1;
    int rc = -1;
    char schema[32] = "";
    if (!cJSON_IsObject(root)) {
        ft_errorf(err, errlen, "a record must be a JSON object");
    } else if (ft_json_string(root, "schema", schema, sizeof schema, err, errlen) < 0) {
    } else if (strcmp(schema, "ftest.record/1") != 0) {
        ft_errorf(err, errlen, "schema is \"%s\", expected \"ftest.record/1\"", schema);
    } else if (ft_json_string(root, "source", rec->source, sizeof rec->source, err, errlen) < 0 ||
               ft_json_string(root, "framework", rec->framework, sizeof rec->framework, err,
                              errlen) < 0 ||
               ft_json_bool(root, "final", &rec->final, err, errlen) < 0 ||
               parse_method(root, rec, err, errlen) < 0) {
    } else if (parse_config(root, cat, base_dir, rec, err, errlen) == 0 && probe_setup(rec, root) &&
               parse_measured(root, rec, err, errlen) == 0 &&
               parse_tolerance(root, rec, err, errlen) == 0) {
        rc = 0;
        est_record_features(cJSON_GetObjectItemCaseSensitive(root, "config"), rec->not_expressible,
                            sizeof rec->not_expressible);
    }
    cJSON_Delete(root);
    if (rc < 0) est_record_free(rec);
    return rc;
}
