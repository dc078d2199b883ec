/* Calibration: the probe's record writer (its Python unittest on fixtures, run
 * here so `make test` runs it; skipped with a note when python3 is absent) and
 * ftest's reader of what it writes; `ftest calibrate`'s sweep, which loses no
 * finished point and duplicates none when killed with SIGKILL and rerun. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cJSON.h>

#include "file_io.h"
#include "calibrate_grid.h"
#include "json_util.h"
#include "record.h"
#include "check_records.h"
#include "model_config.h"
#include "model/params.h"
#include "test_util.h"

static bool have_python3(void) {
    return system("command -v python3 > /dev/null 2>&1") == 0;
}

/* Python's unittest over the test_*.py files of `dir`; its output is shown
 * only when it fails. Skipped (true) without python3. */
static bool python_unittests_pass(const char *dir, const char *what) {
    if (!have_python3()) {
        fprintf(stderr, "calibrate: python3 absent, %s's unittest is skipped\n", what);
        return true;
    }
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cd %s && python3 -B -m unittest discover -s %s -p 'test_*.py' "
             "> /tmp/ftest-unittest.$$ 2>&1; rc=$?; "
             "if [ $rc != 0 ]; then cat /tmp/ftest-unittest.$$; fi; "
             "rm -f /tmp/ftest-unittest.$$; exit $rc",
             test_repo_path("."), dir);
    int rc = system(cmd);
    return WIFEXITED(rc) && WEXITSTATUS(rc) == 0;
}

START_TEST(test_probe_record_writer_unittest) {
    ck_assert_msg(python_unittests_pass("calibrate/probes", "the probe writer"), "the probe writer's unittest failed");
}
END_TEST

/* `make ftrain-cpu-remeasure` (calibrate/host/ftrain_records.py and
 * profile_diff.py): their unittests, the flags of every committed ftrain CPU
 * record against the generator's lines, the resuming run with a stand-in
 * ftrain, the median pick, the profile comparison by hand; skipped without
 * python3. */
START_TEST(test_ftrain_records_unittest) {
    ck_assert_msg(python_unittests_pass("calibrate/host", "ftrain_records.py"), "ftrain_records.py's unittest failed");
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

/* The per-step keys (docs/records.md, "Per step"): the hand-written fixture
 * with every one reads, a record without them (measured_hf) still reads with
 * each absent, and malformed ones are refused with a message. */
static int parse_fixture_edited(const char *name, const char *key, const char *json_value,
                                bool in_rank, est_record *rec, char *err, size_t errlen) {
    char rel[128];
    snprintf(rel, sizeof rel, "calibrate/probes/fixtures/%s.expected.json", name);
    size_t len = 0;
    char *text = test_slurp(test_repo_path(rel), &len);
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    ck_assert_ptr_nonnull(root);
    if (key) {
        cJSON *meas = cJSON_GetObjectItemCaseSensitive(root, "measured");
        cJSON *at = in_rank ? cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(meas, "ranks"), 0)
                            : !strcmp(key, "repeat_of") ? root : meas;
        cJSON *v = cJSON_Parse(json_value);
        ck_assert_ptr_nonnull(v);
        if (cJSON_GetObjectItemCaseSensitive(at, key)) cJSON_ReplaceItemInObject(at, key, v);
        else cJSON_AddItemToObject(at, key, v);
    }
    char *line = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    est_gpu_catalog cat;
    ck_assert(est_gpu_catalog_load(NULL, &cat, err, errlen) == 0);
    int rc = est_record_parse(line, strlen(line), &cat, rec, err, errlen);
    est_gpu_catalog_free(&cat);
    free(line);
    return rc;
}

START_TEST(test_probe_step_keys) {
    est_record rec;
    char err[256];
    ck_assert_msg(parse_fixture_edited("measured_ds_fp16_steps", NULL, NULL, false, &rec, err,
                                       sizeof err) == 0, "%s", err);
    ck_assert_int_eq(rec.steps.times, 5);
    ck_assert_int_eq(rec.steps.warmup, 2);
    /* steps 3-5: 0.25, 0.26, 0.25 -> sorted 0.25 0.25 0.26: median 0.25, spread 0.25-0.26 */
    ck_assert_double_eq_tol(rec.steps.steady_median_s, 0.25, 1e-15);
    ck_assert_double_eq_tol(rec.steps.steady_min_s, 0.25, 1e-15);
    ck_assert_double_eq_tol(rec.steps.steady_max_s, 0.26, 1e-15);
    ck_assert_int_eq(rec.steps.overflow_steps, 5);
    ck_assert_int_eq(rec.steps.overflowed, 1);
    ck_assert_int_eq(rec.steps.padded_steps, 5);
    ck_assert_int_eq(rec.steps.padded, 0);
    ck_assert_int_eq(rec.ranks[0].memory_steps, 3);
    ck_assert_str_eq(rec.repeat_of, "");
    ck_assert(rec.final);
    ck_assert_double_eq_tol(rec.it_per_s, 4.0, 1e-12);
    est_record_free(&rec);

    /* Without them (an older record): read, each absent. */
    ck_assert_msg(parse_fixture_edited("measured_hf", NULL, NULL, false, &rec, err, sizeof err) == 0,
                  "%s", err);
    ck_assert_int_eq(rec.steps.times, 0);
    ck_assert(isnan(rec.steps.steady_median_s));
    ck_assert_int_eq(rec.steps.overflow_steps, -1);
    ck_assert_int_eq(rec.steps.padded_steps, -1);
    ck_assert_int_eq(rec.ranks[0].memory_steps, 0);
    est_record_free(&rec);

    /* Another list under the same warm-up: one steady step left. */
    ck_assert(parse_fixture_edited("measured_ds_fp16_steps", "step_times_s", "[9, 0.5, 0.3]",
                                   false, &rec, err, sizeof err) == 0);
    ck_assert_int_eq(rec.steps.warmup, 2);
    ck_assert_double_eq_tol(rec.steps.steady_median_s, 0.3, 1e-15);
    est_record_free(&rec);
    /* An even count of steady steps (0.4 0.25 0.26 0.25): the mean of the middle two. */
    ck_assert(parse_fixture_edited("measured_ds_fp16_steps", "warmup_steps", "1", false, &rec, err,
                                   sizeof err) == 0);
    ck_assert_double_eq_tol(rec.steps.steady_median_s, (0.25 + 0.26) / 2, 1e-15);
    est_record_free(&rec);

    /* A repeat is read with the point it repeats. */
    ck_assert(parse_fixture_edited("measured_ds_fp16_steps", "repeat_of", "\"probe/x\"", false, &rec,
                                   err, sizeof err) == 0);
    ck_assert_str_eq(rec.repeat_of, "probe/x");
    est_record_free(&rec);

    static const struct { const char *key, *value; bool in_rank; const char *says; } bad[] = {
        {"warmup_steps", "5", false, "leaves none"},
        {"warmup_steps", "-1", false, "warmup_steps"},
        {"step_times_s", "[]", false, "empty"},
        {"step_times_s", "[0.1, 0, 0.2, 0.3]", false, "positive seconds"},
        {"step_times_s", "0.25", false, "must be an array"},
        {"step_overflow", "[true, 1]", false, "true or false"},
        {"step_padded", "{}", false, "must be an array"},
        {"memory_by_step", "[{\"step\": 2}, {\"step\": 2}]", true, "does not follow"},
        {"memory_by_step", "[{\"step\": 1, \"reserved_bytes\": 1.5}]", true, "integer"},
        {"memory_by_step", "[{\"step\": 0}]", true, "out of range"},
        {"memory_by_step", "[3]", true, "must hold objects"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = 0;
        ck_assert_msg(parse_fixture_edited("measured_ds_fp16_steps", bad[i].key, bad[i].value,
                                           bad[i].in_rank, &rec, err, sizeof err) < 0,
                      "%s = %s was read", bad[i].key, bad[i].value);
        ck_assert_msg(strstr(err, bad[i].says), "%s = %s: \"%s\" lacks \"%s\"", bad[i].key,
                      bad[i].value, err, bad[i].says);
    }
    /* warmup_steps without step_times_s */
    ck_assert(parse_fixture_edited("measured_hf", "warmup_steps", "1", false, &rec, err,
                                   sizeof err) < 0);
    ck_assert(strstr(err, "needs step_times_s"));
}
END_TEST

/* ---- the sweep ---- */

/* The absolute path of a built binary. */
static void binary(const char *name, char *out, size_t n) {
    char rel[1024];
    snprintf(rel, sizeof rel, "%s/%s", test_build_dir(), name);
    ck_assert_msg(realpath(rel, out) != NULL, "no %s", rel);
    (void)n;
}

/* A scratch folder and an ftrain that first sleeps `delay` seconds. */
static void scratch(char *dir, const char *delay, char *wrapper, size_t n) {
    strcpy(dir, "/tmp/ftest-cal-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char ftrain[PATH_MAX];
    binary("ftrain", ftrain, sizeof ftrain);
    snprintf(wrapper, n, "%s/slow-ftrain", dir);
    FILE *f = fopen(wrapper, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "#!/bin/sh\nsleep %s\nexec '%s' \"$@\"\n", delay, ftrain);
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_int_eq(chmod(wrapper, 0755), 0);
}

static void remove_dir(const char *dir) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static size_t count_lines(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = 0;
    int c;
    while ((c = fgetc(f)) != EOF) n += c == '\n';
    fclose(f);
    return n;
}

/* Every line of a records file parses; returns the count and fills seen[seq
 * index][batch index] with how often each grid point occurs. */
static size_t census(const char *path, const int64_t *seqs, int ns, const int64_t *batches, int nb,
                     int seen[8][8]) {
    memset(seen, 0, sizeof(int[8][8]));
    size_t len = 0;
    char *text = test_slurp(path, &len);
    size_t n = 0;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        ck_assert_msg(next != NULL, "a last line without its newline");
        *next++ = '\0';
        cJSON *j = cJSON_Parse(line);
        ck_assert_msg(j != NULL, "line %zu is not JSON", n + 1);
        const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(j, "config");
        int64_t seq = (int64_t)cJSON_GetObjectItemCaseSensitive(cfg, "seq_len")->valuedouble;
        int64_t batch = (int64_t)cJSON_GetObjectItemCaseSensitive(cfg, "micro_batch")->valuedouble;
        const cJSON *key = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "calibrate"), "key");
        ck_assert_msg(cJSON_IsString(key), "line %zu has no calibrate.key", n + 1);
        for (int a = 0; a < ns; a++)
            for (int b = 0; b < nb; b++) seen[a][b] += seqs[a] == seq && batches[b] == batch;
        cJSON_Delete(j);
        n++;
    }
    free(text);
    return n;
}

static pid_t spawn(char *const argv[]) {
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 1);
        dup2(fd, 2);
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

static int run_wait(char *const argv[]) {
    int status = 0;
    pid_t pid = spawn(argv);
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Issue 10's acceptance: a sweep killed with SIGKILL midway and rerun holds
 * exactly the full set of records, each once, and the lines written before the
 * kill unchanged. */
START_TEST(test_sigkill_midway_then_rerun) {
    char dir[64], wrapper[256], ftest[PATH_MAX], out[300];
    scratch(dir, "0.4", wrapper, sizeof wrapper);
    binary("ftest", ftest, sizeof ftest);
    snprintf(out, sizeof out, "%s/r.jsonl", dir);
    char *slow[] = {ftest, "calibrate", "--out", out, "--ftrain", wrapper, "--seq", "16,32,48",
                    "--batch", "1,2", "--steps", "1", "--no-fit", NULL};
    pid_t pid = spawn(slow);
    size_t before = 0;
    for (int i = 0; i < 4000 && (before = count_lines(out)) < 2; i++) {
        struct timespec nap = {0, 5 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    ck_assert_int_eq(kill(pid, SIGKILL), 0);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    before = count_lines(out);
    ck_assert_msg(before >= 2 && before < 6, "killed after %zu of 6 points: not midway", before);
    size_t len0 = 0;
    char *first = test_slurp(out, &len0);

    char *fast[] = {ftest, "calibrate", "--out", out, "--seq", "16,32,48", "--batch", "1,2",
                    "--steps", "1", "--no-fit", NULL};
    ck_assert_int_eq(run_wait(fast), 0);
    const int64_t seqs[] = {16, 32, 48}, batches[] = {1, 2};
    int seen[8][8];
    ck_assert_int_eq(census(out, seqs, 3, batches, 2, seen), 6);
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 2; b++)
            ck_assert_msg(seen[a][b] == 1, "seq %lld batch %lld recorded %d times",
                          (long long)seqs[a], (long long)batches[b], seen[a][b]);
    size_t len1 = 0;
    char *all = test_slurp(out, &len1);
    ck_assert(len1 > len0 && memcmp(first, all, len0) == 0);
    free(first);
    free(all);
    /* A third run finds nothing to do. */
    ck_assert_int_eq(run_wait(fast), 0);
    ck_assert_int_eq(count_lines(out), 6);
    remove_dir(dir);
}
END_TEST

/* A point past its time limit is an outcome (FILE.outcomes), not a record, and
 * a rerun does not start it again. */
START_TEST(test_timeout_is_an_outcome) {
    char dir[64], wrapper[256], ftest[PATH_MAX], out[300], outcomes[320];
    scratch(dir, "30", wrapper, sizeof wrapper);
    binary("ftest", ftest, sizeof ftest);
    snprintf(out, sizeof out, "%s/r.jsonl", dir);
    snprintf(outcomes, sizeof outcomes, "%s.outcomes", out);
    char *argv[] = {ftest, "calibrate", "--out", out, "--ftrain", wrapper, "--seq", "16",
                    "--timeout-s", "0.3", "--steps", "1", "--no-fit", NULL};
    ck_assert_int_eq(run_wait(argv), 0);
    ck_assert_int_eq(count_lines(out), 0);
    ck_assert_int_eq(count_lines(outcomes), 1);
    char *text = test_slurp(outcomes, NULL);
    cJSON *j = cJSON_Parse(text);
    free(text);
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(j, "outcome")->valuestring, "timeout");
    ck_assert(strstr(cJSON_GetObjectItemCaseSensitive(j, "key")->valuestring, "seq=16"));
    cJSON_Delete(j);
    ck_assert_int_eq(run_wait(argv), 0);
    ck_assert_int_eq(count_lines(outcomes), 1);
    remove_dir(dir);
}
END_TEST

/* --budget-minutes: no point starts that would end past the budget. With 0.4 s
 * points and a 0.01-minute (0.6 s) budget, the second point's expected end
 * (0.4 + 0.4 s) is already past it: one point runs, five are left. */
START_TEST(test_budget_stops_the_sweep) {
    char dir[64], wrapper[256], ftest[PATH_MAX], out[300];
    scratch(dir, "0.4", wrapper, sizeof wrapper);
    binary("ftest", ftest, sizeof ftest);
    snprintf(out, sizeof out, "%s/r.jsonl", dir);
    char *argv[] = {ftest, "calibrate", "--out", out, "--ftrain", wrapper, "--seq", "16,32,48",
                    "--batch", "1,2", "--budget-minutes", "0.01", "--steps", "1", "--no-fit", NULL};
    ck_assert_int_eq(run_wait(argv), 0);
    ck_assert_int_eq(count_lines(out), 1);
    remove_dir(dir);
}
END_TEST

/* --layers K on a 6-block model: the depth-4 record extrapolates from depths 2
 * and 4 to 6 blocks; a full-depth run of the same point is the measurement it
 * must match (ftrain's memory is linear in depth at a fixed peak phase). */
START_TEST(test_layers_extrapolation_matches_full_depth) {
    char dir[64], wrapper[256], ftest[PATH_MAX], out[300], full[300], model[300];
    scratch(dir, "0", wrapper, sizeof wrapper);
    binary("ftest", ftest, sizeof ftest);
    snprintf(out, sizeof out, "%s/r.jsonl", dir);
    snprintf(full, sizeof full, "%s/full.jsonl", dir);
    snprintf(model, sizeof model, "%s/six.json", dir);
    FILE *f = fopen(model, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"vocab_size\":64,"
          "\"hidden_size\":32,\"intermediate_size\":64,\"num_hidden_layers\":6,"
          "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"max_position_embeddings\":128,"
          "\"rms_norm_eps\":1e-5,\"tie_word_embeddings\":false}\n", f);
    ck_assert_int_eq(fclose(f), 0);
    char *trunc[] = {ftest, "calibrate", "--out", out, "--model", model, "--seq", "32",
                     "--layers", "4", "--steps", "1", "--no-fit", NULL};
    ck_assert_int_eq(run_wait(trunc), 0);
    char *whole[] = {ftest, "calibrate", "--out", full, "--model", model, "--seq", "32",
                     "--steps", "1", "--no-fit", NULL};
    ck_assert_int_eq(run_wait(whole), 0);
    ck_assert_int_eq(count_lines(out), 2);
    char *text = test_slurp(out, NULL);
    char *second = strchr(text, '\n') + 1;
    cJSON *deep = cJSON_Parse(second);
    free(text);
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(deep, "calibrate"), "extrapolation");
    ck_assert_msg(x != NULL, "the depth-4 record states no extrapolation");
    ck_assert_int_eq((int)cJSON_GetObjectItemCaseSensitive(x, "full_layers")->valuedouble, 6);
    ck_assert(strstr(cJSON_GetObjectItemCaseSensitive(x, "rule")->valuestring, "linear in depth"));
    double predicted = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(x, "ranks"), 0), "full_depth_peak_bytes")->valuedouble;
    cJSON_Delete(deep);
    text = test_slurp(full, NULL);
    cJSON *meas = cJSON_Parse(text);
    free(text);
    double measured = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(meas, "measured"), "ranks"), 0),
        "peak_allocated_bytes")->valuedouble;
    cJSON_Delete(meas);
    ck_assert_close(predicted, measured, 0, 0.01);
    remove_dir(dir);
}
END_TEST

/* --refine 2 after a coarse grid of seq 16 and 64: the midpoints of the worst
 * point's gaps are added (40 lies between 16 and 64), once. */
START_TEST(test_refine_adds_midpoints) {
    char dir[64], wrapper[256], ftest[PATH_MAX], out[300];
    scratch(dir, "0", wrapper, sizeof wrapper);
    binary("ftest", ftest, sizeof ftest);
    snprintf(out, sizeof out, "%s/r.jsonl", dir);
    char *argv[] = {ftest, "calibrate", "--out", out, "--seq", "16,64", "--batch", "1,3",
                    "--refine", "2", "--steps", "1", "--no-fit", NULL};
    ck_assert_int_eq(run_wait(argv), 0);
    ck_assert_int_eq(count_lines(out), 6);
    char *text = test_slurp(out, NULL);
    ck_assert_msg(strstr(text, "seq=40 ") || strstr(text, "batch=2 "), "no midpoint added");
    free(text);
    ck_assert_int_eq(run_wait(argv), 0); /* nothing new: the midpoints are done */
    ck_assert_int_eq(count_lines(out), 6);
    remove_dir(dir);
}
END_TEST

/* The append: whole lines, a killed writer's fragment dropped, a whole record
 * without its newline kept. */
START_TEST(test_append_repairs_the_tail) {
    char path[] = "/tmp/ftest-append-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    const char *frag = "{\"a\":1}\n{\"b\":";
    ck_assert_int_eq(write(fd, frag, strlen(frag)), (ssize_t)strlen(frag));
    close(fd);
    char err[256];
    ft_append_info info;
    ck_assert_msg(ft_append_line(path, "{\"c\":3}", 7, &info, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(info.dropped_bytes, 5); /* {"b": */
    char *text = test_slurp(path, NULL);
    ck_assert_str_eq(text, "{\"a\":1}\n{\"c\":3}\n");
    free(text);
    FILE *f = fopen(path, "a");
    fputs("{\"d\":4}", f);
    fclose(f);
    ck_assert_msg(ft_append_line(path, "{\"e\":5}", 7, &info, err, sizeof err) == 0, "%s", err);
    ck_assert(info.terminated);
    text = test_slurp(path, NULL);
    ck_assert_str_eq(text, "{\"a\":1}\n{\"c\":3}\n{\"d\":4}\n{\"e\":5}\n");
    free(text);
    ck_assert(ft_append_line(path, "x\ny", 3, NULL, err, sizeof err) < 0);
    unlink(path);
    ck_assert(ft_append_line("/nonexistent-dir/x", "{}", 2, NULL, err, sizeof err) < 0);
    ck_assert(strstr(err, "/nonexistent-dir/x") != NULL);
}
END_TEST

/* The grid: the product of the lists, keys all different, the shallow depth
 * before the deep one; lists and ranges parsed strictly. */
START_TEST(test_grid_plan_and_lists) {
    cal_grid g;
    memset(&g, 0, sizeof g);
    strcpy(g.runner, "ftrain");
    g.nmodels = 2;
    strcpy(g.models[0], "tiny-llama");
    strcpy(g.models[1], "tiny-qwen2");
    char err[256];
    g.nseqs = cal_parse_int_list("--seq", "16:64:16", 1, 1 << 20, g.seqs, CAL_MAX_VALUES, err, sizeof err);
    ck_assert_int_eq(g.nseqs, 4);
    ck_assert_int_eq(g.seqs[3], 64);
    g.nbatches = cal_parse_int_list("--batch", "1,2,4", 1, 100, g.batches, CAL_MAX_VALUES, err, sizeof err);
    ck_assert_int_eq(g.nbatches, 3);
    g.nckpts = 2, g.ckpts[0] = EST_CKPT_NONE, g.ckpts[1] = EST_CKPT_FULL;
    g.nzeros = 1, g.nprecisions = 1, g.world = 1, g.layers = 4;
    static cal_point pts[200];
    size_t n = cal_grid_plan(&g, pts, 200);
    ck_assert_int_eq(n, 2 * 4 * 3 * 2 * 2); /* models x seqs x batches x ckpt x 2 depths */
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++) ck_assert_str_ne(pts[i].key, pts[j].key);
    ck_assert_int_eq(pts[0].layers, 2);
    ck_assert_int_eq(pts[1].layers, 4);
    ck_assert_int_eq(cal_grid_plan(&g, pts, 10), n); /* the count even past the cap */
    ck_assert(cal_parse_int_list("--seq", "1,1", 1, 9, g.seqs, 8, err, sizeof err) < 0);
    ck_assert(strstr(err, "twice"));
    ck_assert(cal_parse_int_list("--seq", "8:4", 1, 9, g.seqs, 8, err, sizeof err) < 0);
    ck_assert(cal_parse_int_list("--seq", "1:100", 1, 1000, g.seqs, 8, err, sizeof err) < 0);
    ck_assert(cal_parse_int_list("--seq", "x", 1, 9, g.seqs, 8, err, sizeof err) < 0);
    ck_assert(cal_parse_int_list("--seq", "4,", 1, 9, g.seqs, 8, err, sizeof err) < 0);
}
END_TEST

/* The probe runner's plumbing without PyTorch: a stand-in "python" that writes
 * the record a rank-emulated probe would, from the arguments it is given. An
 * 8-rank point is measured as rank 0 and rank 7 (ranks differ), each a record. */
START_TEST(test_probe_points_emulate_first_and_last_rank) {
    char dir[64], wrapper[256], ftest[PATH_MAX], out[300], fake[300];
    scratch(dir, "0", wrapper, sizeof wrapper);
    binary("ftest", ftest, sizeof ftest);
    snprintf(out, sizeof out, "%s/r.jsonl", dir);
    snprintf(fake, sizeof fake, "%s/fake-python", dir);
    FILE *f = fopen(fake, "w");
    ck_assert_ptr_nonnull(f);
    fputs("#!/bin/sh\n"
          "shift\n" /* the probe's path */
          "while [ $# -gt 0 ]; do case $1 in\n"
          "  --rank) rank=$2; shift 2;; --world) world=$2; shift 2;; --seq) seq=$2; shift 2;;\n"
          "  --record) rec=$2; shift 2;; --mode) mode=$2; shift 2;; *) shift;; esac; done\n"
          "[ \"$mode\" = deepspeed ] || exit 2\n"
          "printf '{\"schema\":\"ftest.record/1\",\"source\":\"stand-in\",\"date\":\"2026-11-23\","
          "\"framework\":\"deepspeed\",\"method\":\"rank-emulated\",\"hardware\":{\"gpu\":\"h100-80gb\","
          "\"gpus_per_node\":%s,\"nodes\":1},\"config\":{\"model\":\"tiny-llama\",\"micro_batch\":1,"
          "\"seq_len\":%s,\"zero\":3},\"measured\":{\"oom\":false,\"ranks\":[{\"rank\":%s,"
          "\"peak_allocated_bytes\":1000}]}}\\n' $world $seq $rank >> $rec\n", f);
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_int_eq(chmod(fake, 0755), 0);
    char *argv[] = {ftest, "calibrate", "--out", out, "--device", "cuda", "--probe", "deepspeed",
                    "--python", fake, "--ranks", "8", "--zero", "3", "--seq", "16,32", "--no-fit", NULL};
    ck_assert_int_eq(run_wait(argv), 0);
    ck_assert_int_eq(count_lines(out), 4);
    char *text = test_slurp(out, NULL);
    ck_assert(strstr(text, "\"rank\":0,") && strstr(text, "\"rank\":7,"));
    ck_assert(strstr(text, "probe:deepspeed gpu=h100-80gb offload=none attention=sdpa zero_init=1 "
                           "model=tiny-llama layers=0 seq=32 batch=2 ckpt=none zero=3 "
                           "prec=bf16-mixed world=8 rank=7"));
    free(text);
    /* Without zero.Init it is another run: the same grid runs again, in full. */
    char *nozi[] = {ftest, "calibrate", "--out", out, "--device", "cuda", "--probe", "deepspeed",
                    "--python", fake, "--ranks", "8", "--zero", "3", "--seq", "16,32", "--no-fit",
                    "--no-zero-init", NULL};
    ck_assert_int_eq(run_wait(nozi), 0);
    ck_assert_int_eq(count_lines(out), 8);
    ck_assert_int_eq(run_wait(nozi), 0);
    ck_assert_int_eq(count_lines(out), 8);
    remove_dir(dir);
}
END_TEST

/* End to end on the CPU as docs/usage.md shows it: records, the fit (which
 * says it has nothing to determine from ftrain's exact records, without
 * failing the run), the check with every record within tolerance. */
START_TEST(test_cpu_sweep_end_to_end) {
    char dir[64], wrapper[256], ftest[PATH_MAX], cmd[2048];
    scratch(dir, "0", wrapper, sizeof wrapper);
    binary("ftest", ftest, sizeof ftest);
    snprintf(cmd, sizeof cmd,
             "'%s' calibrate --out %s/r.jsonl --model tiny-llama,tiny-qwen2 --seq 16,32 --batch 1,2 "
             "--checkpointing none,full --steps 1 > %s/out.txt 2> %s/err.txt",
             ftest, dir, dir, dir);
    int rc = system(cmd);
    ck_assert_msg(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "exit %d", rc);
    char path[300];
    snprintf(path, sizeof path, "%s/r.jsonl", dir);
    ck_assert_int_eq(count_lines(path), 16);
    snprintf(path, sizeof path, "%s/out.txt", dir);
    char *out = test_slurp(path, NULL);
    ck_assert_msg(strstr(out, "check: 16 records, 0 outside tolerance, 0 unreadable"), "%s", out);
    free(out);
    snprintf(path, sizeof path, "%s/err.txt", dir);
    char *err = test_slurp(path, NULL);
    ck_assert_msg(strstr(err, "fit: nothing fitted: the records determine no constant"), "%s", err);
    ck_assert_msg(strstr(err, "sweep: 16 ok"), "%s", err);
    free(err);
    remove_dir(dir);
}
END_TEST

/* The GPU day's records (calibrate/gpu-days/2026-11-26-h200): each markdown row
 * names the plan point it ran, and the 46 records the probe built untied name
 * the untied variant beside the record file, whose parameter count is the
 * shipped model's plus its LM head (Llama-3.2-1B: 1,235,814,400 + 128,256 x
 * 2,048, as the model card and config give). The day ran in two sittings:
 * 67 records from the probe at git f98e336, then 39 from the fixed probe at
 * 1e8b0c0 (calibrate/gpu-days/2026-11-26-h200/probe.jsonl has 106 lines). */
START_TEST(test_gpu_day_records_name_their_points) {
    est_gpu_catalog cat;
    char err[256];
    ck_assert(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0);
    char *out = NULL;
    size_t len = 0;
    FILE *o = open_memstream(&out, &len);
    est_check_options opt = {.markdown = true};
    est_check_totals tot = {0};
    ck_assert_msg(est_check_file(test_repo_path("calibrate/records/probe-h200-2026-11-26.jsonl"), &cat, &opt, o,
                                 &tot, err, sizeof err) == 0, "%s", err);
    fclose(o);
    ck_assert_uint_eq(tot.errors, 0);
    ck_assert_uint_eq(tot.records, 106);
    ck_assert_msg(strstr(out, "| point | seq | batch |"), "%s", out);
    /* the fixed probe's records keep the shipped, tied model */
    ck_assert_msg(strstr(out, "| hf/llama3.2-1b/s2048/b1/expandable-segments | 2048 | 1 |"), "%s", out);
    /* the point's own sequence and batch follow its label */
    ck_assert_msg(strstr(out, "| hf/llama3.2-1b/s512/b1 | 512 | 1 | none |"), "%s", out);
    ck_assert_msg(strstr(out, "| qlora/llama3.2-1b/s2048/b1/quant=int8 | 2048 | 1 |"), "%s", out);
    free(out);
    ft_model m;
    ck_assert_msg(ft_model_load(test_repo_path("calibrate/records/models/llama3.2-1b-untied.json"), &m, err,
                                sizeof err) == 0, "%s", err);
    ck_assert(!m.tied_embeddings);
    est_params p;
    est_count_params(&m, m.num_layers, &p);
    ck_assert_int_eq(p.total, INT64_C(1235814400) + INT64_C(128256) * 2048);
    est_gpu_catalog_free(&cat);
}
END_TEST

/* ftest fit leaves a repeat (repeat_of, ftest_probe.py --repeat-short) out, so
 * that each configuration counts once: the H200 day's records fitted alone and
 * with a repeat of every timed HF record at half its step time give the same
 * profiles; the same copies without repeat_of (the control) move them. */
static void write_with_copies(const char *src, const char *dst, const char *mark) {
    size_t len = 0;
    char *text = test_slurp(test_repo_path(src), &len);
    FILE *f = fopen(dst, "w");
    ck_assert_ptr_nonnull(f);
    fwrite(text, 1, len, f);
    int copies = 0;
    for (char *line = strtok(text, "\n"); line && mark; line = strtok(NULL, "\n")) {
        cJSON *r = cJSON_Parse(line);
        cJSON *m = cJSON_GetObjectItemCaseSensitive(r, "measured");
        cJSON *t = cJSON_GetObjectItemCaseSensitive(m, "step_time_s");
        const cJSON *fw = cJSON_GetObjectItemCaseSensitive(r, "framework");
        if (cJSON_IsNumber(t) && cJSON_IsString(fw) && !strcmp(fw->valuestring, "hf")) {
            cJSON_SetNumberValue(t, t->valuedouble / 2);
            cJSON_SetNumberValue(cJSON_GetObjectItemCaseSensitive(m, "it_per_s"), 1 / t->valuedouble);
            cJSON_DeleteItemFromObject(m, "tokens_per_s");
            cJSON_DeleteItemFromObject(r, "point");
            if (*mark) cJSON_AddStringToObject(r, "repeat_of", mark);
            char *out = cJSON_PrintUnformatted(r);
            fprintf(f, "%s\n", out);
            free(out);
            copies++;
        }
        cJSON_Delete(r);
    }
    fclose(f);
    free(text);
    ck_assert(!mark || copies > 10);
}

static void fit_into(const char *records, const char *out) {
    char ftest[PATH_MAX], cmd[4096];
    binary("ftest", ftest, sizeof ftest);
    snprintf(cmd, sizeof cmd, "%s fit %s --out %s > /dev/null 2>&1", ftest, records, out);
    ck_assert_int_eq(system(cmd), 0);
}

static bool same_profiles(const char *a, const char *b) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "diff -r %s %s > /dev/null 2>&1", a, b);
    return system(cmd) == 0;
}

START_TEST(test_fit_leaves_repeats_out) {
    char dir[] = "/tmp/ftest-rep-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    const char *src = "calibrate/records/probe-h200-2026-11-26.jsonl";
    /* Three folders with the same file name (a profile names its records file),
     * each with the untied variants the records name beside them. */
    const char *names[] = {"plain", "repeats", "control"}, *marks[] = {NULL, "probe/hf-w1/x", ""};
    char recs[3][PATH_MAX + 64], prof[3][PATH_MAX + 64], cmd[2 * PATH_MAX + 64];
    for (int i = 0; i < 3; i++) {
        snprintf(cmd, sizeof cmd, "mkdir %s/%s && cp -r %s %s/%s/", dir, names[i],
                 test_repo_path("calibrate/records/models"), dir, names[i]);
        ck_assert_int_eq(system(cmd), 0);
        snprintf(recs[i], sizeof recs[i], "%s/%s/r.jsonl", dir, names[i]);
        snprintf(prof[i], sizeof prof[i], "%s/%s/p", dir, names[i]);
        write_with_copies(src, recs[i], marks[i]);
        fit_into(recs[i], prof[i]);
    }
    ck_assert_msg(same_profiles(prof[0], prof[1]), "a repeat moved the fit");
    ck_assert_msg(!same_profiles(prof[0], prof[2]), "the control: the copies as records should move it");
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

Suite *suite_calibrate(void);
Suite *suite_calibrate(void) {
    Suite *s = suite_create("calibrate");
    TCase *tc = tcase_create("probe");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_probe_record_writer_unittest);
    tcase_add_test(tc, test_ftrain_records_unittest);
    tcase_add_test(tc, test_probe_fixtures_are_records);
    tcase_add_test(tc, test_probe_step_keys);
    tcase_add_test(tc, test_fit_leaves_repeats_out);
    tcase_add_test(tc, test_gpu_day_records_name_their_points);
    suite_add_tcase(s, tc);
    TCase *sw = tcase_create("sweep");
    tcase_set_timeout(sw, 120);
    tcase_add_test(sw, test_grid_plan_and_lists);
    tcase_add_test(sw, test_append_repairs_the_tail);
    tcase_add_test(sw, test_sigkill_midway_then_rerun);
    tcase_add_test(sw, test_timeout_is_an_outcome);
    tcase_add_test(sw, test_budget_stops_the_sweep);
    tcase_add_test(sw, test_layers_extrapolation_matches_full_depth);
    tcase_add_test(sw, test_refine_adds_midpoints);
    tcase_add_test(sw, test_probe_points_emulate_first_and_last_rank);
    tcase_add_test(sw, test_cpu_sweep_end_to_end);
    suite_add_tcase(s, sw);
    return s;
}
