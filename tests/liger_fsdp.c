/* Liger-Kernel's HF Trainer example, FSDP1 on 4 x A100 80GB
 * (../shared/data/liger-hf-example, imported as
 * calibrate/records/liger-hf-example-a100.jsonl): the rows without Liger's
 * kernels, held against the FSDP1 seam at the longest sequence a batch can
 * have.
 *
 * Why the longest: the example pads each batch to its longest sample (at most
 * max_seq_length = 512) and reports torch.cuda.max_memory_allocated() as the
 * maximum over its steps, so the peak it reports is that of its longest
 * padded batch. Their step time needs the mean padded length, which the
 * example does not publish: calibrate/import/liger_alpaca_lengths.py derives
 * it (seq_mean, seq_rank_mean; test_lengths_recomputed checks the importer's
 * figures with the estimator's own E[max]). Their allocated peak needs only
 * the longest batch:
 * - Llama-3-8B ran long enough for some batch of 32 or 48 Alpaca samples to
 *   reach 512 tokens, so the estimate at 512 must match the measured peak
 *   within the chart's pixel uncertainty (peak_memory_uncertainty_bytes, read
 *   from the record) plus 1%; its batch of 64 ran out of memory, so the
 *   estimate must not fit;
 * - for Qwen2-7B and Gemma-7B the longest batch is shorter (Gemma's rows stop
 *   after 20 steps and its tokenizer yields shorter sequences; README of the
 *   data), so the estimate at 512 is an upper bound: it must not be below the
 *   measured peak. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "estimate.h"
#include "record.h"
#include "seq_lengths.h"
#include "test_util.h"

typedef struct tally {
    int matched, bounded, oom_right, rows;
} tally;

/* True for a row of the example itself (4 GPUs) that runs no Liger kernel. */
static bool plain_example_row(const char *line, const est_record *rec) {
    return rec->run.framework == EST_FW_FSDP && rec->run.gpus_per_node == 4 &&
           strstr(line, "\"liger_kernels\"") == NULL && strstr(line, "\"padding\":\"dynamic\"") != NULL;
}

static void check_row(const char *line, const est_record *rec, tally *t) {
    est_estimate e;
    char err[256];
    est_estimate_init(&e);
    ck_assert_msg(est_estimate_run(&rec->run, &e, err, sizeof err) == 0, "%s", err);
    const bool llama = strcmp(rec->run.model.name, "llama3-8b") == 0;
    t->rows++;
    if (rec->oom) {
        /* only Llama's OOM is held: the others' longest batch is unknown */
        if (llama) {
            ck_assert_msg(!e.fits, "Llama-3-8B batch %lld ran out of memory; estimated to fit",
                          (long long)rec->run.micro_batch);
            t->oom_right++;
        }
        est_estimate_free(&e);
        return;
    }
    const double measured = (double)est_record_peak(&rec->ranks[0]);
    const double estimated = (double)e.peak_allocated_bytes;
    ck_assert(measured > 0);
    if (llama) {
        const char *u = strstr(line, "\"peak_memory_uncertainty_bytes\":");
        ck_assert_ptr_nonnull(u);
        const double slack = strtod(u + strlen("\"peak_memory_uncertainty_bytes\":"), NULL) + 0.01 * measured;
        ck_assert_msg(fabs(estimated - measured) <= slack,
                      "Llama-3-8B batch %lld: estimated %.0f MiB, measured %.0f MiB (allowed %.0f MiB)",
                      (long long)rec->run.micro_batch, estimated / 1048576, measured / 1048576, slack / 1048576);
        t->matched++;
    } else {
        ck_assert_msg(estimated >= measured, "%s batch %lld: estimated %.0f MiB at 512, below the measured %.0f MiB",
                      rec->run.model.name, (long long)rec->run.micro_batch, estimated / 1048576,
                      measured / 1048576);
        t->bounded++;
    }
    est_estimate_free(&e);
}

START_TEST(test_liger_rows_without_kernels) {
    char err[256];
    est_gpu_catalog cat;
    ck_assert_msg(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0, "%s", err);
    size_t len;
    char *text = test_slurp(test_repo_path("calibrate/records/liger-hf-example-a100.jsonl"), &len);
    ck_assert_ptr_nonnull(text);
    tally t = {0};
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        est_record rec;
        if (est_record_parse(line, strlen(line), &cat, &rec, err, sizeof err) < 0) continue;
        if (plain_example_row(line, &rec)) check_row(line, &rec, &t);
        est_record_free(&rec);
    }
    free(text);
    est_gpu_catalog_free(&cat);
    /* The data's README: Llama-3-8B batches 32 and 48 ran, 64 ran out; Qwen2-7B
     * 32 ran, 48 and 64 ran out; Gemma-7B 32 ran without Liger. */
    ck_assert_int_eq(t.matched, 2);
    ck_assert_int_eq(t.oom_right, 1);
    ck_assert_int_eq(t.bounded, 2);
}
END_TEST

/* One model's sample lengths from the importer's histogram file, each rounded
 * up to the collator's multiple of 16 (E[ceil16(max)] = E[max of ceil16]). */
static void padded_hist(const cJSON *lengths, est_seq_hist *h) {
    size_t cap = 64, n = 0;
    char *text = malloc(cap);
    ck_assert_ptr_nonnull(text);
    const cJSON *pair;
    cJSON_ArrayForEach(pair, lengths) {
        const int len = cJSON_GetArrayItem(pair, 0)->valueint, count = cJSON_GetArrayItem(pair, 1)->valueint;
        char line[48];
        const int w = snprintf(line, sizeof line, "%d %d\n", (len + 15) / 16 * 16, count);
        if (n + (size_t)w + 1 > cap) {
            cap = 2 * (n + (size_t)w + 1);
            text = realloc(text, cap);
            ck_assert_ptr_nonnull(text);
        }
        memcpy(text + n, line, (size_t)w + 1);
        n += (size_t)w;
    }
    char err[160];
    ck_assert_msg(est_seq_lengths_parse(text, n, h, err, sizeof err) == 0, "%s", err);
    free(text);
}

/* Each row's seq_rank_mean (E[longest of B], one rank) and seq_mean (E[longest
 * of 4B], the ranks FULL_SHARD makes wait for each other) against the
 * estimator's E[max] for random batches (seq_lengths.c) over the committed
 * histogram: two implementations of the expectation, within the records'
 * rounding to 0.1 token. */
START_TEST(test_lengths_recomputed) {
    size_t len;
    char *lengths = test_slurp(test_repo_path("calibrate/import/liger_alpaca_lengths.json"), &len);
    ck_assert_ptr_nonnull(lengths);
    cJSON *root = cJSON_Parse(lengths);
    ck_assert_ptr_nonnull(root);
    const cJSON *hists = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(root, "samples"), "cleaned"),
                                             "histograms");
    ck_assert_ptr_nonnull(hists);
    char *text = test_slurp(test_repo_path("calibrate/records/liger-hf-example-a100.jsonl"), &len);
    int rows = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *rec = cJSON_Parse(line);
        const cJSON *cfg = cJSON_GetObjectItem(rec, "config");
        const cJSON *rank = cJSON_GetObjectItem(cfg, "seq_rank_mean");
        if (rank) {
            const char *model = cJSON_GetObjectItem(cfg, "model")->valuestring;
            const int64_t b = cJSON_GetObjectItem(cfg, "micro_batch")->valueint;
            est_seq_hist h = {0};
            padded_hist(cJSON_GetObjectItem(cJSON_GetObjectItem(hists, model), "lengths"), &h);
            ck_assert_double_eq_tol(est_seq_padded_mean(&h, b, EST_BATCHING_RANDOM, 512), rank->valuedouble, 0.051);
            ck_assert_double_eq_tol(est_seq_padded_mean(&h, 4 * b, EST_BATCHING_RANDOM, 512),
                                    cJSON_GetObjectItem(cfg, "seq_mean")->valuedouble, 0.051);
            ck_assert_double_lt(rank->valuedouble, cJSON_GetObjectItem(cfg, "seq_mean")->valuedouble);
            est_seq_hist_free(&h);
            rows++;
        }
        cJSON_Delete(rec);
    }
    ck_assert_int_eq(rows, 16); /* every row of the 4-GPU example, out-of-memory ones too */
    free(text);
    cJSON_Delete(root);
    free(lengths);
}
END_TEST

Suite *suite_liger_fsdp(void);
Suite *suite_liger_fsdp(void) {
    Suite *s = suite_create("liger_fsdp");
    TCase *tc = tcase_create("rows");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_liger_rows_without_kernels);
    tcase_add_test(tc, test_lengths_recomputed);
    suite_add_tcase(s, tc);
    return s;
}
