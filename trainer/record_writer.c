#include "record_writer.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cJSON.h>

#include "file_io.h"
#include "json_util.h"

static cJSON *categories(const int64_t v[TR_CAT_COUNT]) {
    cJSON *o = cJSON_CreateObject();
    for (int c = 0; c < TR_CAT_COUNT; c++) cJSON_AddNumberToObject(o, tr_category_names[c], (double)v[c]);
    return o;
}

void tr_record_run_id(char *buf, size_t n) {
    static unsigned counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(buf, n, "%lld-%ld-%09ld-%u", (long long)getpid(), (long)ts.tv_sec, ts.tv_nsec, counter++);
}

/* A shipped model is named; a config file given by path is embedded whole
 * ("model_config"), so the record checks anywhere, never naming a path that
 * only meant something where ftrain ran. */
static int add_model(cJSON *c, const tr_config *cfg, char *err, size_t errlen) {
    const char *arg = cfg->model_arg[0] ? cfg->model_arg : cfg->model.name;
    if (!strchr(arg, '/') && !strstr(arg, ".json")) {
        cJSON_AddStringToObject(c, "model", arg);
        return 0;
    }
    size_t len = 0;
    char *text = ft_read_file(arg, (size_t)1 << 20, &len, err, errlen);
    if (!text) return -1;
    cJSON *mc = ft_json_parse(text, len, "model config", err, errlen);
    free(text);
    if (!mc) return -1;
    cJSON_AddStringToObject(c, "model", cfg->model.name);
    cJSON_AddItemToObject(c, "model_config", mc);
    return 0;
}

/* schema, source, date, framework, hardware, run_id, final. */
static void add_header(cJSON *root, const tr_config *cfg, const tr_record_meta *meta) {
    char date[16] = "";
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(date, sizeof date, "%Y-%m-%d", &tm);
    cJSON_AddStringToObject(root, "schema", "ftest.record/1");
    cJSON_AddStringToObject(root, "source", "ftrain " TR_VERSION " (cpu backend)");
    cJSON_AddStringToObject(root, "date", date);
    cJSON_AddStringToObject(root, "framework", "ftrain");

    cJSON *hw = cJSON_AddObjectToObject(root, "hardware");
    cJSON_AddStringToObject(hw, "gpu", "cpu");
    cJSON_AddNumberToObject(hw, "gpus_per_node", cfg->ranks);
    cJSON_AddNumberToObject(hw, "nodes", 1);

    if (meta && meta->run_id) cJSON_AddStringToObject(root, "run_id", meta->run_id);
    cJSON_AddBoolToObject(root, "final", !meta || meta->final);
}

/* The run's configuration, the model named or embedded. 0, or -1 with err. */
static int add_config(cJSON *root, const tr_config *cfg, char *err, size_t errlen) {
    cJSON *c = cJSON_AddObjectToObject(root, "config");
    if (add_model(c, cfg, err, errlen) < 0) return -1;
    cJSON_AddNumberToObject(c, "layers", (double)cfg->layers);
    cJSON_AddNumberToObject(c, "micro_batch", (double)cfg->micro_batch);
    cJSON_AddNumberToObject(c, "grad_accum", (double)cfg->grad_accum);
    cJSON_AddNumberToObject(c, "seq_len", (double)cfg->seq_len);
    cJSON_AddStringToObject(c, "precision", ft_precision_name(cfg->precision));
    cJSON_AddNumberToObject(c, "zero", cfg->zero_stage);
    cJSON_AddStringToObject(c, "offload", ft_offload_name(cfg->offload));
    cJSON_AddStringToObject(c, "checkpointing", ft_checkpointing_name(cfg->checkpointing));
    cJSON_AddStringToObject(c, "attention", ft_attention_name(cfg->attention));
    cJSON_AddStringToObject(c, "loss", ft_loss_name(cfg->loss));
    cJSON_AddStringToObject(c, "optimizer", ft_optimizer_name(cfg->optimizer));
    cJSON_AddBoolToObject(c, "expandable_segments", 0);
    cJSON_AddNumberToObject(c, "steps", (double)cfg->steps);
    cJSON_AddNumberToObject(c, "seed", (double)cfg->seed);
    cJSON_AddStringToObject(c, "data", cfg->data_path[0] ? cfg->data_path : "synthetic");
    cJSON_AddStringToObject(c, "init", cfg->init_path[0] ? cfg->init_path : "seeded");
    return 0;
}

/* One rank's memory: peaks, the phase of the peak and its categories. */
static cJSON *rank_json(int k, const tr_rank_stats *st) {
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "rank", k);
    cJSON_AddNumberToObject(r, "peak_allocated_bytes", (double)st->peak_total);
    cJSON_AddNumberToObject(r, "peak_reserved_bytes", (double)st->reserved);
    cJSON_AddNullToObject(r, "device_used_bytes");
    cJSON_AddStringToObject(r, "peak_phase", st->peak_phase);
    cJSON_AddItemToObject(r, "at_peak_bytes", categories(st->at_peak));
    cJSON_AddItemToObject(r, "category_peak_bytes", categories(st->peak));
    cJSON_AddNumberToObject(r, "host_peak_bytes", (double)st->host_peak_total);
    return r;
}

/* What the run measured: OOM, steps, and without an OOM each rank's memory,
 * host memory, speed and the first and last loss. */
static void add_measured(cJSON *root, const tr_result *res, const tr_record_meta *meta) {
    cJSON *m = cJSON_AddObjectToObject(root, "measured");
    cJSON_AddBoolToObject(m, "oom", res->oom);
    cJSON_AddNumberToObject(m, "steps_done", (double)res->steps_done);
    if (meta && meta->stopped) cJSON_AddStringToObject(m, "stopped", meta->stopped);
    if (res->oom) return;
    cJSON *ranks = cJSON_AddArrayToObject(m, "ranks");
    for (int k = 0; k < res->ranks; k++) cJSON_AddItemToArray(ranks, rank_json(k, &res->rank[k]));
    /* Host (offload) memory of rank 0, the figure the estimator's cpu_bytes predicts. */
    cJSON_AddNumberToObject(m, "cpu_peak_bytes", (double)res->rank[0].host_peak_total);
    cJSON_AddNumberToObject(m, "step_time_s", res->step_time_s);
    /* Of it, the time the busiest rank's thread waited for a CPU (the machine's
     * other work): the step on cores of its own took about step_time_s - this. */
    if (res->cpu_wait_s >= 0) cJSON_AddNumberToObject(m, "cpu_wait_s", res->cpu_wait_s);
    cJSON_AddNumberToObject(m, "tokens_per_s", res->tokens_per_s);
    cJSON_AddNumberToObject(m, "it_per_s", res->it_per_s);
    /* JSON has no NaN: a non-finite loss is written as null ("stopped" says why). */
    if (res->steps_done > 0 && res->loss) {
        double first = res->loss[0], last = res->loss[res->steps_done - 1];
        if (isfinite(first)) cJSON_AddNumberToObject(m, "loss_first", first);
        else cJSON_AddNullToObject(m, "loss_first");
        if (isfinite(last)) cJSON_AddNumberToObject(m, "loss_last", last);
        else cJSON_AddNullToObject(m, "loss_last");
    }
}

char *tr_record_json(const tr_config *cfg, const tr_result *res, const tr_record_meta *meta, char *err,
                     size_t errlen) {
    cJSON *root = cJSON_CreateObject();
    add_header(root, cfg, meta);
    if (add_config(root, cfg, err, errlen) < 0) {
        cJSON_Delete(root);
        return NULL;
    }
    add_measured(root, res, meta);
    cJSON *tol = cJSON_AddObjectToObject(root, "tolerance");
    cJSON_AddNumberToObject(tol, "category_abs_bytes", 0);
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return text;
}

int tr_record_append(const char *path, const tr_config *cfg, const tr_result *res,
                     const tr_record_meta *meta, char *note, size_t notelen, char *err, size_t errlen) {
    if (note && notelen) note[0] = '\0';
    if (err && errlen) err[0] = '\0';
    char *line = tr_record_json(cfg, res, meta, err, errlen);
    if (!line) {
        if (err && errlen && !err[0]) ft_errorf(err, errlen, "out of memory writing the record");
        return -1;
    }
    ft_append_info info;
    int rc = ft_append_line(path, line, strlen(line), &info, err, errlen);
    free(line);
    if (rc == 0 && note && notelen) {
        if (info.dropped_bytes)
            snprintf(note, notelen, "%s ended in a %lld-byte partial record (an interrupted writer's); "
                     "removed it before appending", path, (long long)info.dropped_bytes);
        else if (info.terminated)
            snprintf(note, notelen, "%s ended without a newline; added one before appending", path);
    }
    return rc;
}
