/* Helpers shared by the Check suites. */
#ifndef FTEST_TEST_UTIL_H
#define FTEST_TEST_UTIL_H

#include <check.h>
#include <math.h>
#include <stddef.h>

#include "estimate.h"
#include "run.h"

/* |got - want| <= abs_tol + rel_tol * |want|, with both numbers in the message. */
#define ck_assert_close(got, want, abs_tol, rel_tol)                                   \
    do {                                                                               \
        double g_ = (double)(got), w_ = (double)(want);                                \
        ck_assert_msg(isfinite(g_) && fabs(g_ - w_) <= (abs_tol) + (rel_tol) * fabs(w_), \
                      "%s = %.9g, want %.9g (abs %.3g + rel %.3g)", #got, g_, w_,      \
                      (double)(abs_tol), (double)(rel_tol));                           \
    } while (0)

/* Directory of the repository's data (models/, calibrate/), for tests that read it. */
const char *test_repo_path(const char *relative);

/* The folder holding the binaries (ftest, ftrain): $FTEST_BUILD, else the
 * folder of this test runner (make puts run_tests, ftrain and ftest side by
 * side in $(BUILD), whatever BUILD is). */
const char *test_build_dir(void);

/* The whole file at path, NUL-terminated (the test fails when it cannot be
 * read); *len gets its length when len is not NULL. Caller frees. */
char *test_slurp(const char *path, size_t *len);

/* What a command printed and how it ended: stdout (cut at 4 MiB), stderr (cut at
 * 4 KiB), its exit status (-1 when a signal ended it) and how many lines stderr has. */
typedef struct {
    int status;
    char out[1 << 22];
    char err[4096];
    int err_lines;
} test_cmd_result;

/* Runs `cmd` through the shell, capturing both streams. The result is one
 * static buffer: the next call overwrites it. */
test_cmd_result *test_shell(const char *cmd);

/* A run with est_run_defaults for a shipped model on a catalog GPU (the test
 * fails when either is unknown). */
/* A catalog GPU by name (a copy; the catalog is freed). */
est_gpu test_gpu(const char *name);
est_run test_run_of(const char *model, const char *gpu);

/* Llama-3.2-3B on one L40S as PEFT's method comparison ran it (the records of
 * peft-metamathqa-l40s): the HF path in pure bf16, batch 4 x 768 (T = 3072),
 * stack 2026-07, PEFT's plain loop, method `peft`. */
est_run test_peft_l40s_run(est_peft peft);

/* Writes `text` to a new file /tmp/ftest-<stem>-XXXXXX and returns its path
 * (static: the next call reuses it). */
const char *test_write_temp(const char *stem, const char *text);

/* Estimates a record's run and holds its reserved peak on the card, its
 * after-step memory and its it/s to the record's own tolerances. */
struct est_record;
void test_record_within_tolerance(const struct est_record *rec);

/* est_estimate_init and est_estimate_run, failing the test on an error. */
void test_estimate(const est_run *run, est_estimate *e);

/* The timeline's row labelled `label` (the test fails without one). */
const est_phase *test_row(const est_estimate *e, const char *label);

/* Parses argv as the ftest command line and builds its run, as the CLI does
 * (a parse error fails the test); returns est_cli_build_run's status. */
int test_cli_build(int argc, char *argv[], est_run *run, char *err, size_t errlen);
/* The same where the command line itself may be refused: -1 with its message
 * for a parse error too. */
int test_cli_try(int argc, char *const argv[], est_run *run, char *err, size_t errlen);

/* test_shell on the ftest beside this test runner, with `args`. */
test_cmd_result *test_ftest(const char *args);

/* Replays st's events through the simulated allocator (torch's defaults) up
 * to the n-th empty_cache(): the bytes reserved just after it (-1: no such
 * call), and in *peak the reserved peak before it. */
int64_t test_reserved_after_empty_cache(const est_step *st, int n, int64_t *peak);
/* The same replay up to the moment `label`: the bytes reserved there. */
int64_t test_reserved_at(const est_step *st, const char *label);

#endif
