#include "record_writer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cJSON.h>

#include "json_util.h"

static cJSON *categories(const int64_t v[TR_CAT_COUNT]) {
    cJSON *o = cJSON_CreateObject();
    for (int c = 0; c < TR_CAT_COUNT; c++) cJSON_AddNumberToObject(o, tr_category_names[c], (double)v[c]);
    return o;
}

char *tr_record_json(const tr_config *cfg, const tr_result *res) {
    cJSON *root = cJSON_CreateObject();
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

    cJSON *c = cJSON_AddObjectToObject(root, "config");
    cJSON_AddStringToObject(c, "model", cfg->model_arg[0] ? cfg->model_arg : cfg->model.name);
    cJSON_AddNumberToObject(c, "layers", (double)cfg->layers);
    cJSON_AddNumberToObject(c, "micro_batch", (double)cfg->micro_batch);
    cJSON_AddNumberToObject(c, "grad_accum", (double)cfg->grad_accum);
    cJSON_AddNumberToObject(c, "seq_len", (double)cfg->seq_len);
    cJSON_AddStringToObject(c, "precision", tr_precision_name(cfg->precision));
    cJSON_AddNumberToObject(c, "zero", cfg->zero_stage);
    cJSON_AddStringToObject(c, "offload", tr_offload_name(cfg->offload));
    cJSON_AddStringToObject(c, "checkpointing", tr_ckpt_name(cfg->checkpointing));
    cJSON_AddStringToObject(c, "attention", tr_attention_name(cfg->attention));
    cJSON_AddStringToObject(c, "loss", tr_loss_name(cfg->loss));
    cJSON_AddStringToObject(c, "optimizer", tr_optimizer_name(cfg->optimizer));
    cJSON_AddBoolToObject(c, "expandable_segments", 0);
    cJSON_AddNumberToObject(c, "steps", (double)cfg->steps);
    cJSON_AddNumberToObject(c, "seed", (double)cfg->seed);
    cJSON_AddStringToObject(c, "data", cfg->data_path[0] ? cfg->data_path : "synthetic");
    cJSON_AddStringToObject(c, "init", cfg->init_path[0] ? cfg->init_path : "seeded");

    cJSON *m = cJSON_AddObjectToObject(root, "measured");
    cJSON_AddBoolToObject(m, "oom", res->oom);
    if (!res->oom) {
        cJSON *ranks = cJSON_AddArrayToObject(m, "ranks");
        for (int k = 0; k < res->ranks; k++) {
            const tr_rank_stats *st = &res->rank[k];
            cJSON *r = cJSON_CreateObject();
            cJSON_AddNumberToObject(r, "rank", k);
            cJSON_AddNumberToObject(r, "peak_allocated_bytes", (double)st->peak_total);
            cJSON_AddNumberToObject(r, "peak_reserved_bytes", (double)st->reserved);
            cJSON_AddNullToObject(r, "device_used_bytes");
            cJSON_AddStringToObject(r, "peak_phase", st->peak_phase);
            cJSON_AddItemToObject(r, "at_peak_bytes", categories(st->at_peak));
            cJSON_AddItemToObject(r, "category_peak_bytes", categories(st->peak));
            cJSON_AddNumberToObject(r, "host_peak_bytes", (double)st->host_peak_total);
            cJSON_AddItemToArray(ranks, r);
        }
        /* Host (offload) memory of rank 0, the figure the estimator's cpu_bytes predicts. */
        cJSON_AddNumberToObject(m, "cpu_peak_bytes", (double)res->rank[0].host_peak_total);
        cJSON_AddNumberToObject(m, "step_time_s", res->step_time_s);
        cJSON_AddNumberToObject(m, "tokens_per_s", res->tokens_per_s);
        cJSON_AddNumberToObject(m, "it_per_s", res->it_per_s);
        if (res->steps > 0 && res->loss) {
            cJSON_AddNumberToObject(m, "loss_first", res->loss[0]);
            cJSON_AddNumberToObject(m, "loss_last", res->loss[res->steps - 1]);
        }
    }
    cJSON *tol = cJSON_AddObjectToObject(root, "tolerance");
    cJSON_AddNumberToObject(tol, "category_abs_bytes", 0);
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return text;
}

int tr_record_append(const char *path, const tr_config *cfg, const tr_result *res, char *err,
                     size_t errlen) {
    char *line = tr_record_json(cfg, res);
    if (!line) return ft_errorf(err, errlen, "out of memory writing the record");
    FILE *f = fopen(path, "a");
    if (!f) {
        ft_errorf(err, errlen, "cannot open record file %s: %s", path, strerror(errno));
        free(line);
        return -1;
    }
    int ok = fputs(line, f) >= 0 && fputc('\n', f) != EOF && fflush(f) == 0 && fsync(fileno(f)) == 0;
    free(line);
    if (fclose(f) || !ok) return ft_errorf(err, errlen, "cannot write record file %s", path);
    return 0;
}
