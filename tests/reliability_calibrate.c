/* `ftest calibrate` loses nothing and claims nothing it did not do (issue 20,
 * items 3, 6, 7 and 9), as harnesses bounded in time: its scratch files are
 * private (links planted at the names it used to take are not followed) and
 * gone after a kill once the next sweep runs; a point that failed is not
 * "done"; output that cannot be written is an error; three sweeps running at
 * once into one --out run each point once. */
#include <check.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cJSON.h>

#include "test_util.h"

static char scratch[128];

static void setup(void) {
    snprintf(scratch, sizeof scratch, "/tmp/ftest-relcal-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(scratch));
}

static void teardown(void) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", scratch);
    if (system(cmd) != 0) {}
}

typedef struct {
    int status;
    char out[1 << 16];
    char err[1 << 14];
} run_result;

/* Runs `sh -c BODY` in the scratch folder with $FT (ftest), $FR (ftrain) and
 * TMPDIR=scratch/tmp; at most 120 s. */
static run_result *sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static run_result *sh(const char *fmt, ...) {
    static run_result r;
    memset(&r, 0, sizeof r);
    char body[3000], cmd[4600], bin[PATH_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    ck_assert_ptr_nonnull(realpath(test_build_dir(), bin));
    snprintf(cmd, sizeof cmd, "cd %s && mkdir -p tmp && FT=%s/ftest FR=%s/ftrain TMPDIR=%s/tmp timeout 120 sh -c '%s' "
             ">%s/.out 2>%s/.err", scratch, bin, bin, scratch, body, scratch, scratch);
    int st = system(cmd);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    char p[256];
    snprintf(p, sizeof p, "%s/.out", scratch);
    FILE *f = fopen(p, "r");
    if (f) r.out[fread(r.out, 1, sizeof r.out - 1, f)] = '\0', fclose(f);
    snprintf(p, sizeof p, "%s/.err", scratch);
    f = fopen(p, "r");
    if (f) r.err[fread(r.err, 1, sizeof r.err - 1, f)] = '\0', fclose(f);
    return &r;
}

/* A runner that sleeps `delay` seconds, then is ftrain. */
static void slow_ftrain(const char *delay) {
    run_result *r = sh("printf \"#!/bin/sh\\nsleep %s\\nexec \\\"\\$FR\\\" \\\"\\$@\\\"\\n\" > slow && chmod +x slow", delay);
    ck_assert_int_eq(r->status, 0);
}

/* How often each calibrate.key occurs in scratch/NAME; returns the line
 * count and the largest count of one key in *most. */
static int census(const char *name, int *most) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s", scratch, name);
    size_t len;
    char *text = test_slurp(p, &len);
    char keys[64][300];
    int counts[64] = {0}, nkeys = 0, lines = 0;
    for (char *s = strtok(text, "\n"); s; s = strtok(NULL, "\n"), lines++) {
        cJSON *j = cJSON_Parse(s);
        ck_assert_msg(j != NULL, "line %d is not JSON", lines + 1);
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "calibrate"), "key");
        ck_assert(cJSON_IsString(k));
        int i = 0;
        while (i < nkeys && strcmp(keys[i], k->valuestring)) i++;
        if (i == nkeys) snprintf(keys[nkeys++], sizeof keys[0], "%s", k->valuestring);
        counts[i]++;
        cJSON_Delete(j);
    }
    free(text);
    *most = 0;
    for (int i = 0; i < nkeys; i++)
        if (counts[i] > *most) *most = counts[i];
    return lines;
}

/* Item 6: a runner that fails every point (before: "no records", exit 0, and
 * a rerun with a working ftrain said "already done" and measured nothing). */
START_TEST(test_failed_points_are_not_done) {
    run_result *r = sh("$FT calibrate --out r.jsonl --ftrain /bin/false --seq 16,32 --steps 1");
    ck_assert_msg(r->status == 1, "exit %d: %s", r->status, r->err);
    ck_assert_msg(strstr(r->err, "2 points failed") && strstr(r->err, "rerun"), "%s", r->err);
    r = sh("$FT calibrate --out r.jsonl --seq 16,32 --steps 1 --no-fit && wc -l < r.jsonl");
    ck_assert_msg(r->status == 0, "exit %d: %s", r->status, r->err);
    ck_assert_msg(atoi(r->out) == 2, "the rerun measured %s points: %s", r->out, r->err);
    ck_assert_ptr_null(strstr(r->err, "failed (first"));
}
END_TEST

/* Item 7: standard output that cannot be written is exit 2 for calibrate too. */
START_TEST(test_calibrate_checks_stdout) {
    run_result *r = sh("$FT calibrate --help > /dev/full");
    ck_assert_int_eq(r->status, 2);
    ck_assert_msg(strstr(r->err, "cannot write"), "%s", r->err);
    r = sh("$FT calibrate --out r.jsonl --seq 16 --steps 1 > /dev/full");
    ck_assert_msg(r->status == 2, "exit %d: %s", r->status, r->err);
    r = sh("$FT calibrate --out r.jsonl --seq 16 --steps 1 --dry-run > /dev/full");
    ck_assert_int_eq(r->status, 2);
}
END_TEST

/* Item 3, planted links: links at every name the sweep used to take
 * ($TMPDIR/ftest-calibrate-PID.log and .record, for the next 3000 PIDs) point
 * at a file of ours; the sweep never opens them (before: the .log was opened
 * with O_TRUNC through the link and the file emptied). */
START_TEST(test_scratch_files_ignore_planted_links) {
    run_result *r = sh("echo precious > victim && p=$(cat /proc/sys/kernel/ns_last_pid) && i=1 && "
                       "while [ $i -le 3000 ]; do n=$((p + i)); ln -s ../victim tmp/ftest-calibrate-$n.log; "
                       "ln -s ../victim tmp/ftest-calibrate-$n.record; i=$((i + 1)); done && "
                       "$FT calibrate --out r.jsonl --seq 16,32 --steps 1 --no-fit && cat victim");
    ck_assert_msg(r->status == 0, "exit %d: %s", r->status, r->err);
    ck_assert_str_eq(r->out, "precious\n");
}
END_TEST

/* Item 3, kills: a sweep killed with SIGKILL leaves its scratch folder (it
 * cannot remove it); the next sweep removes those of every sweep that is gone,
 * so after five kills one is left (the last one's), and after a sweep that
 * ends, none (before: 102 files were left after 79 kills, and stayed). */
START_TEST(test_scratch_files_swept_after_kill) {
    slow_ftrain("5");
    run_result *r = sh("k=0; while [ $k -lt 5 ]; do "
                       "$FT calibrate --out r.jsonl --ftrain ./slow --seq 16 --steps 1 --no-fit 2>/dev/null & p=$!; "
                       "n=0; while ! ls tmp | grep -q \"^ftest-calibrate-$p-\" && [ $n -lt 400 ]; do sleep 0.01; n=$((n+1)); done; "
                       "kill -9 $p; wait $p 2>/dev/null; k=$((k+1)); done; ls tmp | grep -c ftest-calibrate");
    ck_assert_msg(atoi(r->out) == 1, "killed sweeps left %s scratch entries: %s", r->out, r->err);
    r = sh("$FT calibrate --out r.jsonl --seq 16 --steps 1 --no-fit && ls -A tmp | wc -l && wc -l < r.jsonl");
    ck_assert_msg(r->status == 0, "exit %d: %s", r->status, r->err);
    ck_assert_msg(!strcmp(r->out, "0\n1\n"), "left behind / records: %s", r->out);
}
END_TEST

/* Item 9: three sweeps started together into one --out run each of the 8
 * points once (before: the done set was read only at the start, and 16 of
 * 24 lines were duplicates). */
START_TEST(test_concurrent_sweeps_run_each_point_once) {
    slow_ftrain("0.3");
    run_result *r = sh("for k in 1 2 3; do $FT calibrate --out r.jsonl --ftrain ./slow --seq 16,24,32,40 "
                       "--batch 1,2 --steps 1 --no-fit > o$k 2> e$k & done; wait; cat e1 e2 e3; ls -A");
    ck_assert_msg(r->status == 0, "exit %d", r->status);
    int most;
    int lines = census("r.jsonl", &most);
    ck_assert_msg(lines == 8 && most == 1, "%d lines, a point recorded %d times: %s", lines, most, r->out);
    ck_assert_msg(!strstr(r->out, "r.jsonl.claims"), "the claims file was left: %s", r->out);
}
END_TEST

Suite *suite_reliability_calibrate(void);
Suite *suite_reliability_calibrate(void) {
    Suite *s = suite_create("reliability_calibrate");
    const struct {
        const char *name;
        const TTest *test;
    } cases[] = {
        {"failed_not_done", test_failed_points_are_not_done},
        {"stdout", test_calibrate_checks_stdout},
        {"planted_links", test_scratch_files_ignore_planted_links},
        {"kill_sweep", test_scratch_files_swept_after_kill},
        {"concurrent", test_concurrent_sweeps_run_each_point_once},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        TCase *tc = tcase_create(cases[i].name);
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, 150);
        tcase_add_test(tc, cases[i].test);
        suite_add_tcase(s, tc);
    }
    return s;
}
