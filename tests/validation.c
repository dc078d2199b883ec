/* Estimate vs measured on the committed records of real runs
 * (calibrate/records/gpjt-qwen0.5b-rtx3090.jsonl, transcribed from
 * shared/data/gpjt-qwen0.5b): issue 2's acceptance, kept in CI. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "estimate.h"
#include "json_util.h"
#include "record.h"
#include "test_util.h"

#define RECORDS "calibrate/records/gpjt-qwen0.5b-rtx3090.jsonl"
#define MIB (1024.0 * 1024.0)

typedef struct {
    est_record *recs;
    size_t n;
} records;

static records load(void) {
    records r = {0};
    est_gpu_catalog cat;
    char err[256];
    ck_assert_msg(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0, "%s", err);
    size_t len;
    char *text = ft_read_file(test_repo_path(RECORDS), (size_t)1 << 30, &len, err, sizeof err);
    ck_assert_msg(text, "%s", err);
    r.recs = calloc(8192, sizeof *r.recs);
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        ck_assert_uint_lt(r.n, 8192);
        ck_assert_msg(est_record_parse(line, strlen(line), &cat, &r.recs[r.n], err, sizeof err) == 0,
                      "%s", err);
        r.n++;
    }
    free(text);
    est_gpu_catalog_free(&cat);
    return r;
}

static void unload(records *r) {
    for (size_t i = 0; i < r->n; i++) est_record_free(&r->recs[i]);
    free(r->recs);
}

static bool from(const est_record *rec, const char *file_part) {
    return strstr(rec->source, file_part) != NULL;
}

/* Every measured peak within 10% (issue 2), every OOM predicted, every run
 * that ran predicted to fit. */
START_TEST(test_every_record_within_ten_percent) {
    records r = load();
    ck_assert_uint_eq(r.n, 4113); /* 4,109 measured rows + 4 OOM rows */
    est_estimate e;
    est_estimate_init(&e);
    size_t ooms = 0;
    double worst = 0;
    for (size_t i = 0; i < r.n; i++) {
        char err[256];
        ck_assert_msg(est_estimate_run(&r.recs[i].run, &e, err, sizeof err) == 0, "%s", err);
        if (r.recs[i].oom) {
            ooms++;
            /* Out of memory, or at least a warning: the roomy reserved peak
             * exceeds the card and only the allocator's free-and-retry path
             * keeps the simulated step inside it ("tight"). */
            ck_assert_msg(!e.fits || e.tight, "record %zu ran out of memory but is estimated to fit", i);
            continue;
        }
        ck_assert_msg(e.fits, "record %zu ran but is estimated not to fit", i);
        double meas = (double)est_record_peak(&r.recs[i].ranks[0]);
        double rel = ((double)e.peak_allocated_bytes - meas) / meas;
        if (fabs(rel) > fabs(worst)) worst = rel;
        ck_assert_msg(fabs(rel) <= 0.10, "record %zu (seq %lld, batch %lld): %+.1f%%", i,
                      (long long)r.recs[i].run.seq_len, (long long)r.recs[i].run.micro_batch,
                      rel * 100);
    }
    ck_assert_uint_eq(ooms, 4);
    est_estimate_free(&e);
    unload(&r);
}
END_TEST

/* The knee of each sequence sweep: the first length whose measured peak rises
 * above the flat part (set by the optimizer step), and the first whose estimate
 * does. Within 5% of each other. */
START_TEST(test_sequence_sweep_knee) {
    records r = load();
    const char *sweeps[] = {"results-without-env-var", "results-with-env-var"};
    est_estimate e;
    est_estimate_init(&e);
    for (int w = 0; w < 2; w++) {
        int64_t flat_meas = -1, flat_est = -1, knee_meas = -1, knee_est = -1;
        for (size_t i = 0; i < r.n; i++) {
            const est_record *rec = &r.recs[i];
            if (!from(rec, sweeps[w]) || rec->run.seq_len < 2) continue; /* seq 1 is a warm-up */
            char err[256];
            ck_assert(est_estimate_run(&rec->run, &e, err, sizeof err) == 0);
            int64_t meas = est_record_peak(&rec->ranks[0]);
            if (flat_meas < 0) {
                flat_meas = meas;
                flat_est = e.peak_allocated_bytes;
            }
            /* "Rises" = more than 8 MiB above the plateau (the plateau itself
             * moves by a few MiB between runs). */
            if (knee_meas < 0 && meas > flat_meas + 8 * 1048576) knee_meas = rec->run.seq_len;
            if (knee_est < 0 && e.peak_allocated_bytes > flat_est + 8 * 1048576)
                knee_est = rec->run.seq_len;
        }
        ck_assert_int_gt(knee_meas, 0);
        ck_assert_int_gt(knee_est, 0);
        ck_assert_msg(llabs(knee_est - knee_meas) <= knee_meas / 20,
                      "%s: knee estimated at %lld, measured at %lld", sweeps[w],
                      (long long)knee_est, (long long)knee_meas);
    }
    est_estimate_free(&e);
    unload(&r);
}
END_TEST

/* Batch sweeps: the estimate grows by the same amount per sequence as the
 * measurement (within 2%): the per-token terms are right, not just the total. */
START_TEST(test_batch_slope) {
    records r = load();
    est_estimate e;
    est_estimate_init(&e);
    const char *sweeps[] = {"results-with-optimizer-offload", "with-gradient-checkpointing-with-expandable"};
    for (int w = 0; w < 2; w++) {
        double m1 = -1, m2 = -1, e1 = -1, e2 = -1;
        for (size_t i = 0; i < r.n; i++) {
            const est_record *rec = &r.recs[i];
            if (!from(rec, sweeps[w]) || rec->oom) continue;
            char err[256];
            ck_assert(est_estimate_run(&rec->run, &e, err, sizeof err) == 0);
            if (rec->run.micro_batch == 1) {
                m1 = (double)est_record_peak(&rec->ranks[0]);
                e1 = (double)e.peak_allocated_bytes;
            } else if (rec->run.micro_batch == 3) {
                m2 = (double)est_record_peak(&rec->ranks[0]);
                e2 = (double)e.peak_allocated_bytes;
            }
        }
        ck_assert(m1 > 0 && m2 > 0);
        ck_assert_close(e2 - e1, m2 - m1, 0, 0.02);
    }
    est_estimate_free(&e);
    unload(&r);
}
END_TEST

/* The batch sweeps' reserved peaks (issue 18: within 6% each) against what
 * the allocator reserves on the RTX 3090 itself. Batch 3 with checkpointing
 * needs more than the card leaves the allocator on a roomy replay, so PyTorch's
 * free-and-retry path set the measured figure: the estimate compared is the
 * replay under the card's capacity (est_estimate_reserved_on_card), and at
 * least one row must have gone through it. */
START_TEST(test_batch_reserved_on_the_card) {
    records r = load();
    est_estimate e;
    est_estimate_init(&e);
    size_t rows = 0, pressured = 0;
    for (size_t i = 0; i < r.n; i++) {
        const est_record *rec = &r.recs[i];
        if (!from(rec, "batch-size-memory-modeling") || rec->oom) continue;
        char err[256];
        ck_assert(est_estimate_run(&rec->run, &e, err, sizeof err) == 0);
        const double meas = (double)rec->ranks[0].peak_reserved_bytes;
        const double got = (double)est_estimate_reserved_on_card(&e);
        ck_assert_msg(fabs(got - meas) <= 0.06 * meas, "%s b=%lld: reserved %.0f MiB estimated, %.0f measured",
                      rec->source, (long long)rec->run.micro_batch, got / MIB, meas / MIB);
        pressured += e.allocator_pressure;
        rows++;
    }
    ck_assert_uint_eq(rows, 13); /* the 17 batch rows less the 4 that ran out of memory */
    ck_assert_uint_ge(pressured, 1);
    est_estimate_free(&e);
    unload(&r);
}
END_TEST

/* Out of sample: time constants fitted on the two sequence sweeps alone (ZeRO-3,
 * batch 1, no checkpointing) must predict the four batch sweeps (batch 1-5,
 * checkpointing, ZeRO-2 with CPU offload) within their 25% it/s tolerance.
 * Runs the binaries in a scratch data folder; the allocator reserve (fitted on
 * the batch sweeps' near-capacity runs) is taken as committed. */
START_TEST(test_time_fit_out_of_sample) {
    const char *build = test_build_dir();
    char dir[] = "/tmp/ftest-xval-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "set -e; d=%s; b=%s%s; mkdir -p $d/calibrate/profiles; ln -s \"$PWD/models\" $d/models; "
             "grep sequence-length %s > $d/seq.jsonl; grep -v sequence-length %s > $d/batch.jsonl; "
             "FTEST_DATA_DIR=$d $b/ftest fit --out $d/fitted $d/seq.jsonl > $d/fit.log; "
             "cp $d/fitted/deepspeed.json $d/calibrate/profiles/; "
             "FTEST_DATA_DIR=$d $b/ftest check --quiet $d/batch.jsonl > $d/check.log",
             dir, build[0] == '/' ? "" : "$PWD/", build, RECORDS, RECORDS);
    int rc = system(cmd);
    char show[300];
    snprintf(show, sizeof show, "tail -8 %s/check.log; rm -rf %s", dir, dir);
    if (rc != 0) {
        int ignored = system(show);
        (void)ignored;
    } else {
        snprintf(show, sizeof show, "rm -rf %s", dir);
        ck_assert_int_eq(system(show), 0);
    }
    ck_assert_msg(rc == 0, "fitted on the sequence sweeps, the batch sweeps fail their check");
}
END_TEST

Suite *suite_validation(void);
Suite *suite_validation(void) {
    Suite *s = suite_create("validation");
    TCase *tc = tcase_create("gpjt-qwen0.5b");
    tcase_set_timeout(tc, 180);
    tcase_add_test(tc, test_every_record_within_ten_percent);
    tcase_add_test(tc, test_sequence_sweep_knee);
    tcase_add_test(tc, test_batch_slope);
    tcase_add_test(tc, test_batch_reserved_on_the_card);
    tcase_add_test(tc, test_time_fit_out_of_sample);
    suite_add_tcase(s, tc);
    return s;
}
