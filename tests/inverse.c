/* Inverse queries checked the independent way: estimate at the answer (it
 * fits) and one past it (it does not), for several models, GPUs and
 * strategies; the CLI glue's text and JSON. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "commands.h"
#include "estimate.h"
#include "inverse.h"
#include "options.h"
#include "test_util.h"

static est_gpu_catalog cat;

static void setup(void) {
    char err[256];
    ck_assert_msg(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0, "%s", err);
}

static void teardown(void) { est_gpu_catalog_free(&cat); }

static est_run make_run(const char *model, const char *gpu, int64_t gpus, int zero,
                        est_checkpointing ckpt) {
    ft_model m;
    char err[256];
    ck_assert_msg(ft_model_load(model, &m, err, sizeof err) == 0, "%s", err);
    const est_gpu *g = est_gpu_find(&cat, gpu);
    ck_assert_ptr_nonnull(g);
    est_run r;
    est_run_defaults(&r, &m, g);
    r.gpus_per_node = gpus;
    r.zero_stage = zero;
    r.checkpointing = ckpt;
    if (zero == 0) r.framework = EST_FW_HF;
    return r;
}

/* Fits with the run's tight margin to spare: what the searches answer
 * (issue 20, item 15). */
static bool fits(const est_run *r) {
    est_estimate e;
    est_estimate_init(&e);
    e.tight_margin_frac = r->tight_margin_frac;
    char err[256];
    ck_assert_msg(est_estimate_run(r, &e, err, sizeof err) == 0, "%s", err);
    bool ok = e.fits && !e.tight;
    est_estimate_free(&e);
    return ok;
}

/* A run whose value is too large to estimate at all counts as not fitting. */
static bool fits_or_invalid(const est_run *r) {
    est_estimate e;
    est_estimate_init(&e);
    e.tight_margin_frac = r->tight_margin_frac;
    bool ok = est_estimate_run(r, &e, NULL, 0) == 0 && e.fits && !e.tight;
    est_estimate_free(&e);
    return ok;
}

static const struct {
    const char *model, *gpu;
    int64_t gpus;
    int zero;
    est_checkpointing ckpt;
} CASES[] = {
    {"llama3-8b", "h100-80gb", 8, 3, EST_CKPT_NONE},
    {"llama3-8b", "h100-80gb", 8, 3, EST_CKPT_FULL},
    {"llama3-8b", "a100-40gb", 8, 3, EST_CKPT_FULL},
    {"qwen1.5-0.5b", "rtx3090-24gb", 1, 3, EST_CKPT_NONE},
    {"qwen2.5-0.5b", "a10-24gb", 1, 0, EST_CKPT_FULL},
    {"mistral-7b", "h200-141gb", 4, 1, EST_CKPT_NONE},
};

START_TEST(test_max_batch_is_the_edge) {
    char err[256];
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        est_run r = make_run(CASES[i].model, CASES[i].gpu, CASES[i].gpus, CASES[i].zero, CASES[i].ckpt);
        est_answer a;
        ck_assert_msg(est_answer_question(&r, EST_Q_MAX_BATCH, 8, &a, err, sizeof err) == 0, "%s", err);
        ck_assert_msg(a.value >= 1, "%s on %s: nothing fits", CASES[i].model, CASES[i].gpu);
        r.micro_batch = a.value;
        ck_assert_msg(fits(&r), "%s: batch %lld should fit", CASES[i].model, (long long)a.value);
        r.micro_batch = a.value + 1;
        ck_assert_msg(!fits_or_invalid(&r), "%s: batch %lld should not fit", CASES[i].model,
                      (long long)(a.value + 1));
        /* one more micro-batch is tight, needs more than the card, or runs out
         * inside it under the allocator's pressure path */
        ck_assert(a.next_tight || a.next_used_bytes >= a.used_bytes);
        ck_assert_int_le(a.used_bytes, r.gpu.memory_bytes);
        ck_assert(a.step_time_s > 0);
        /* A bisection: a few dozen estimates, not one per batch size. */
        ck_assert_int_le(a.estimates, 40);
    }
}
END_TEST

START_TEST(test_max_seq_is_the_edge) {
    char err[256];
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        est_run r = make_run(CASES[i].model, CASES[i].gpu, CASES[i].gpus, CASES[i].zero, CASES[i].ckpt);
        est_answer a;
        ck_assert_msg(est_answer_question(&r, EST_Q_MAX_SEQ, 8, &a, err, sizeof err) == 0, "%s", err);
        ck_assert_msg(a.value >= 1, "%s on %s: nothing fits", CASES[i].model, CASES[i].gpu);
        r.seq_len = a.value;
        ck_assert(fits(&r));
        if (a.value < r.model.max_position) {
            r.seq_len = a.value + 1;
            ck_assert_msg(!fits_or_invalid(&r), "%s: seq %lld should not fit", CASES[i].model,
                          (long long)(a.value + 1));
        } else {
            ck_assert_int_eq(a.value, a.limit); /* capped at the model's maximum */
        }
    }
}
END_TEST

START_TEST(test_min_gpus_is_the_edge) {
    char err[256];
    /* 70B with ZeRO-3 and checkpointing: more than one node of H100s. */
    est_run r = make_run("llama3-70b", "h100-80gb", 1, 3, EST_CKPT_FULL);
    r.seq_len = 4096;
    est_answer a;
    ck_assert_msg(est_answer_question(&r, EST_Q_MIN_GPUS, 8, &a, err, sizeof err) == 0, "%s", err);
    ck_assert_int_gt(a.value, 8);
    ck_assert_int_eq(a.value % 8, 0);
    ck_assert_int_eq(a.gpus_per_node * a.nodes, a.value);
    r.gpus_per_node = 8;
    r.nodes = a.nodes;
    ck_assert(fits(&r));
    r.nodes = a.nodes - 1;
    ck_assert(!fits(&r));
    /* 8B with ZeRO-3 fits within a node: the fewest GPUs is the first count that fits. */
    est_run s = make_run("llama3-8b", "a100-40gb", 1, 3, EST_CKPT_FULL);
    ck_assert_msg(est_answer_question(&s, EST_Q_MIN_GPUS, 8, &a, err, sizeof err) == 0, "%s", err);
    ck_assert_int_ge(a.value, 1);
    ck_assert_int_le(a.value, 8);
    for (int64_t g = 1; g < a.value; g++) {
        s.gpus_per_node = g;
        ck_assert_msg(!fits(&s), "%lld GPUs already fit", (long long)g);
    }
    s.gpus_per_node = a.value;
    ck_assert(fits(&s));
    /* DDP never shards: if one GPU cannot hold 70B, no count can. */
    est_run d = make_run("llama3-70b", "h100-80gb", 1, 0, EST_CKPT_FULL);
    ck_assert_msg(est_answer_question(&d, EST_Q_MIN_GPUS, 8, &a, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(a.value, 0);
}
END_TEST

START_TEST(test_nothing_fits_and_bad_runs) {
    char err[256] = "";
    est_run r = make_run("llama3-70b", "a10-24gb", 1, 0, EST_CKPT_NONE);
    est_answer a;
    ck_assert_int_eq(est_answer_question(&r, EST_Q_MAX_BATCH, 8, &a, err, sizeof err), 0);
    ck_assert_int_eq(a.value, 0);
    ck_assert_int_gt(a.used_bytes, r.gpu.memory_bytes);
    /* A contradictory run is an error, not an answer. */
    r.framework = EST_FW_HF;
    r.zero_stage = 2;
    ck_assert_int_eq(est_answer_question(&r, EST_Q_MAX_SEQ, 8, &a, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "ZeRO") != NULL, "%s", err);
}
END_TEST

/* The CLI's JSON: best answer and one row per usual strategy. */
START_TEST(test_command_json) {
    char *argv[] = {"ftest", "--model", "llama3-8b", "--gpus", "8", "--max-batch", "--json", NULL};
    est_cli cli;
    char err[256];
    ck_assert_msg(est_cli_parse(7, argv, &cli, err, sizeof err) == 0, "%s", err);
    est_run r = make_run("llama3-8b", "h100-80gb", 8, 0, EST_CKPT_NONE);
    r.framework = EST_FW_DEEPSPEED;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_int_eq(est_inverse_command(&cli, &r, f, err, sizeof err), 0);
    fclose(f);
    cJSON *root = cJSON_Parse(buf);
    ck_assert_msg(root != NULL, "not JSON: %.200s", buf);
    ck_assert_str_eq(cJSON_GetObjectItem(root, "question")->valuestring, "max_batch");
    const cJSON *best = cJSON_GetObjectItem(root, "best");
    int64_t ans = (int64_t)cJSON_GetObjectItem(best, "answer")->valuedouble;
    const cJSON *rows = cJSON_GetObjectItem(root, "strategies");
    ck_assert_int_ge(cJSON_GetArraySize(rows), 10);
    const cJSON *row;
    cJSON_ArrayForEach(row, rows) {
        const cJSON *v = cJSON_GetObjectItem(row, "answer");
        ck_assert_int_le((int64_t)v->valuedouble, ans); /* the best is the largest */
    }
    cJSON_Delete(root);
    free(buf);
}
END_TEST

Suite *suite_inverse(void);
Suite *suite_inverse(void) {
    Suite *s = suite_create("inverse");
    TCase *tc = tcase_create("queries");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_max_batch_is_the_edge);
    tcase_add_test(tc, test_max_seq_is_the_edge);
    tcase_add_test(tc, test_min_gpus_is_the_edge);
    tcase_add_test(tc, test_nothing_fits_and_bad_runs);
    tcase_add_test(tc, test_command_json);
    suite_add_tcase(s, tc);
    return s;
}
