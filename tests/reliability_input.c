/* Inputs are what they say, round 2 (issue 20): JSON read as the tools that
 * run the file read it (duplicate keys), deep JSON and huge numbers named for
 * what they are, record lines that cannot blow up memory, a data folder found
 * only where ftest put it, an HF cache that cannot hang a run. Each test fails
 * on the behaviour the issue found. */
#include <check.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cJSON.h>

#include "check_records.h"
#include "ds_config.h"
#include "gpu.h"
#include "json_util.h"
#include "model_config.h"
#include "run.h"
#include "test_util.h"

static char scratch[128];

static void setup(void) {
    snprintf(scratch, sizeof scratch, "/tmp/ftest-relin-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(scratch));
}

static void teardown(void) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", scratch);
    if (system(cmd) != 0) {}
}

/* `ftest ARGS` run in the scratch folder. */
static test_cmd_result *ft_in_scratch(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static test_cmd_result *ft_in_scratch(const char *fmt, ...) {
    char args[2048], cmd[4096], bin[PATH_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    ck_assert_ptr_nonnull(realpath(test_build_dir(), bin));
    snprintf(cmd, sizeof cmd, "cd %s && %s/ftest %s", scratch, bin, args);
    return test_shell(cmd);
}

/* A repository path made absolute (one of four rotating buffers). */
static const char *abs_repo(const char *rel) {
    static char buf[4][PATH_MAX];
    static int k;
    char *b = buf[k++ % 4];
    ck_assert_msg(realpath(test_repo_path(rel), b) != NULL, "no %s", rel);
    return b;
}

/* The folder of the binaries, absolute. */
static const char *abs_build(void) {
    static char bin[PATH_MAX];
    ck_assert_ptr_nonnull(realpath(test_build_dir(), bin));
    return bin;
}

static void write_text(const char *name, const char *text) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s", scratch, name);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

/* ---- item 5: duplicate keys --------------------------------------------------- */

/* Python's json keeps the last value of a repeated key: json.loads(
 * '{"a":1,"a":2}') == {'a': 2}, and json.loads('{"x":{"s":0,"s":3},"x":{"s":5}}')
 * == {'x': {'s': 5}}. Transformers' config.json and the HF Trainer's DeepSpeed
 * dict are read with it, so ftest's readers agree. */
START_TEST(test_duplicate_keys_last_wins) {
    char err[256];
    const char *t1 = "{\"a\":1,\"b\":7,\"a\":2}";
    cJSON *j = ft_json_parse(t1, strlen(t1), "t1", err, sizeof err);
    ck_assert_ptr_nonnull(j);
    ck_assert_int_eq(cJSON_GetArraySize(j), 2);
    ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(j, "a")->valueint, 2);
    cJSON_Delete(j);
    const char *t2 = "{\"x\":{\"s\":0,\"s\":3},\"y\":[{\"k\":1,\"k\":4}],\"x\":{\"s\":5}}";
    j = ft_json_parse(t2, strlen(t2), "t2", err, sizeof err);
    ck_assert_ptr_nonnull(j);
    ck_assert_int_eq(cJSON_GetArraySize(j), 2);
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, "x");
    ck_assert_int_eq(cJSON_GetArraySize(x), 1);
    ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(x, "s")->valueint, 5);
    const cJSON *k = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "y"), 0);
    ck_assert_int_eq(cJSON_GetArraySize(k), 1);
    ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(k, "k")->valueint, 4);
    cJSON_Delete(j);
    /* A config.json giving num_hidden_layers twice: Transformers builds the
     * last (16 -> 3 here), and so does ftest (before: the first, 16). */
    char *text = test_slurp(test_repo_path("models/llama3.2-1b.json"), NULL);
    char *close = strrchr(text, '}');
    ck_assert_ptr_nonnull(close);
    *close = '\0';
    size_t n = strlen(text) + 64;
    char *dup = malloc(n);
    snprintf(dup, n, "%s, \"num_hidden_layers\": 3}", text);
    ft_model m;
    ck_assert_msg(ft_model_parse(dup, strlen(dup), "dup", &m, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(m.num_layers, 3);
    free(dup);
    free(text);
}
END_TEST

/* A DeepSpeed config giving a key twice is refused by name: DeepSpeed's own
 * loader refuses it while the HF Trainer takes the last, so the file runs as
 * ZeRO-0 or ZeRO-3 or not at all depending on the launcher (before: ftest
 * took the first, ZeRO-0, and said nothing). */
START_TEST(test_deepspeed_duplicate_keys_refused) {
    est_run r = test_run_of("llama3-8b", "h100-80gb");
    char err[512];
    const char *cfg = "{\"zero_optimization\":{\"stage\":0,\"stage\":3}}";
    ck_assert(est_ds_config_apply(cfg, strlen(cfg), &r, err, sizeof err) == -1);
    ck_assert_msg(strstr(err, "\"zero_optimization.stage\" twice"), "%s", err);
    const char *ok = "{\"zero_optimization\":{\"stage\":3}}";
    ck_assert_msg(est_ds_config_apply(ok, strlen(ok), &r, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(r.zero_stage, 3);
    write_text("ds.json", cfg);
    test_cmd_result *res = ft_in_scratch("--model llama3-8b --gpus 8 --deepspeed-config %s", "ds.json");
    ck_assert_int_eq(res->status, 2);
    ck_assert_int_eq(res->err_lines, 1);
    ck_assert_msg(strstr(res->err, "zero_optimization.stage") && strstr(res->err, "keep one"), "%s", res->err);
}
END_TEST

/* ---- item 21: messages that say what is wrong ---------------------------------- */

START_TEST(test_messages_name_the_problem) {
    /* Valid JSON nested 1200 deep: too deep, not "not valid JSON". */
    size_t depth = 1200;
    char *deep = malloc(2 * depth + 1);
    for (size_t i = 0; i < depth; i++) deep[i] = '[', deep[2 * depth - 1 - i] = ']';
    deep[2 * depth] = '\0';
    char err[256];
    ck_assert_ptr_null(ft_json_parse(deep, 2 * depth, "deep", err, sizeof err));
    ck_assert_msg(strstr(err, "deeper than 1000 levels") && !strstr(err, "not valid JSON"), "%s", err);
    free(deep);
    /* Broken JSON is still called broken. */
    ck_assert_ptr_null(ft_json_parse("[[1,", 4, "broken", err, sizeof err));
    ck_assert_msg(strstr(err, "not valid JSON"), "%s", err);
    /* 2^63 - 1 is an integer, out of range (before: "must be an integer"). */
    write_text("ax.yml", "base_model: meta-llama/Meta-Llama-3-8B\nsequence_len: 9223372036854775807\n");
    test_cmd_result *r = ft_in_scratch("--model llama3-8b --axolotl %s", "ax.yml");
    ck_assert_int_eq(r->status, 2);
    ck_assert_msg(strstr(r->err, "sequence_len") && strstr(r->err, "out of range") &&
                  !strstr(r->err, "must be an integer"), "%s", r->err);
    /* A sweep STEP of 0 is named as the STEP (before: "--seq must be between 1..."). */
    r = test_ftest("sweep --model llama3-8b --seq 512:1024:0");
    ck_assert_int_eq(r->status, 2);
    ck_assert_msg(strstr(r->err, "STEP"), "%s", r->err);
    r = test_ftest("sweep --model llama3-8b --batch 0:4");
    ck_assert_msg(r->status == 2 && strstr(r->err, "START"), "%s", r->err);
}
END_TEST

/* ---- item 8: fit reads whole records or nothing ---------------------------------- */

/* A file that is not records, given to fit beside good ones: one line on
 * stderr naming FILE:LINE, exit 2, nothing written (before: "skipping
 * garbage.jsonl:1" on standard output, exit 0, as if it were fine). */
START_TEST(test_fit_refuses_unreadable_lines) {
    write_text("garbage.jsonl", "garbage\n");
    test_cmd_result *r = ft_in_scratch("fit --out o %s garbage.jsonl",
                                       abs_repo("calibrate/records/gpjt-qwen0.5b-rtx3090.jsonl"));
    ck_assert_msg(r->status == 2, "exit %d: %s", r->status, r->out);
    ck_assert_int_eq(r->err_lines, 1);
    ck_assert_msg(strstr(r->err, "garbage.jsonl:1") && strstr(r->err, "nothing written"), "%s", r->err);
    ck_assert_msg(!strstr(r->out, "skipping"), "%s", r->out);
    char p[256];
    snprintf(p, sizeof p, "%s/o", scratch);
    ck_assert_msg(access(p, F_OK) != 0, "a refused fit created its --out");
}
END_TEST

/* ---- item 11: a huge record line costs a bounded buffer ------------------------- */

/* VmHWM (peak resident set) of this process, in KiB. */
static long hwm_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    ck_assert_ptr_nonnull(f);
    char line[256];
    long kib = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) kib = atol(line + 6);
    fclose(f);
    return kib;
}

/* How much est_check_file (what `ftest check` runs) raises the peak RSS on
 * scratch/FILE, in KiB: measured in a child, which starts with the peak at
 * its current RSS (a fork copies no high-water mark). */
static long check_growth_kib(const char *file) {
    int pipefd[2];
    ck_assert_int_eq(pipe(pipefd), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        est_gpu_catalog cat;
        char err[256], p[256];
        if (est_gpu_catalog_load(NULL, &cat, err, sizeof err) < 0) _exit(3);
        snprintf(p, sizeof p, "%s/%s", scratch, file);
        FILE *devnull = fopen("/dev/null", "w");
        est_check_options opt = {.diag = devnull};
        est_check_totals tot = {0};
        long before = hwm_kib();
        est_check_file(p, &cat, &opt, devnull, &tot, err, sizeof err);
        long growth = hwm_kib() - before;
        _exit(write(pipefd[1], &growth, sizeof growth) == sizeof growth ? 0 : 4);
    }
    close(pipefd[1]);
    long growth = -1;
    ck_assert_int_eq(read(pipefd[0], &growth, sizeof growth), (ssize_t)sizeof growth);
    close(pipefd[0]);
    int st;
    waitpid(pid, &st, 0);
    return growth;
}

/* The growth allowed: 40 MiB; under AddressSanitizer (make asan) its shadow
 * memory and the quarantine that keeps freed buffers (the line buffer's
 * doublings) add about as much again, so 120 MiB. Either is far below the
 * gigabyte the old reader took. */
#if defined(__SANITIZE_ADDRESS__)
#define RSS_BOUND_KIB (120L * 1024)
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RSS_BOUND_KIB (120L * 1024)
#endif
#endif
#ifndef RSS_BOUND_KIB
#define RSS_BOUND_KIB (40L * 1024)
#endif

/* A line of `values` zeros as one JSON array, then a good record. */
static void huge_line(const char *name, size_t values) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s", scratch, name);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputc('[', f);
    for (size_t i = 0; i < values; i++) fputs(i ? ",0" : "0", f);
    fputs("]\n", f);
    char *good = test_slurp(test_repo_path("calibrate/records/ftrain-cpu.jsonl"), NULL);
    *(strchr(good, '\n') + 1) = '\0';
    fputs(good, f);
    free(good);
    ck_assert_int_eq(fclose(f), 0);
}

/* A 24 MiB line (over the 16 MiB a record may take) and a 4 MiB one holding
 * two million values (over the million): each is one ERROR, the record after
 * it is still checked, and checking raises the peak RSS by less than 40 MiB
 * (the 16 MiB line buffer and one record; before: the
 * file was read whole and the line parsed, cJSON keeping about 80 bytes per
 * value: a 250 MB line took 10 GB and 44 s). */
START_TEST(test_huge_record_lines_bounded) {
    const struct {
        const char *name;
        size_t values;
        const char *why;
    } cases[] = {{"long.jsonl", (size_t)12 << 20, "over the 16 MiB"}, {"many.jsonl", 2000000, "JSON values"}};
    for (int i = 0; i < 2; i++) {
        huge_line(cases[i].name, cases[i].values);
        long kib = check_growth_kib(cases[i].name);
        ck_assert_msg(kib >= 0 && kib < RSS_BOUND_KIB, "%s: the peak RSS grew by %ld KiB", cases[i].name, kib);
        test_cmd_result *r = ft_in_scratch("check %s", cases[i].name);
        ck_assert_msg(r->status == 2, "%s: exit %d", cases[i].name, r->status);
        ck_assert_msg(strstr(r->err, cases[i].name) && strstr(r->err, ":1: ") && strstr(r->err, cases[i].why),
                      "%s", r->err);
        ck_assert_msg(strstr(r->out, "2 records, 0 outside tolerance, 1 unreadable"), "%s", r->out);
    }
}
END_TEST

/* ---- item 4: the data folder is ftest's, not any folder named models ---------- */

/* A copy of the binary beside (one and two folders below) a folder holding an
 * edited models/ (llama3-8b with 3 layers): the copy reads the shipped data,
 * 32 layers (before: it took the edited copy, 3 layers, and called it
 * "shipped"). Run from that folder, it reads ./models and says so. */
START_TEST(test_data_folder_not_any_models) {
    char bin[PATH_MAX];
    ck_assert_ptr_nonnull(realpath(test_build_dir(), bin));
    char cmd[3000];
    snprintf(cmd, sizeof cmd, "cd %s && mkdir -p kx a/b && cp %s/ftest kx/ && cp %s/ftest a/b/ && cp -r %s models && "
             "sed -i 's/\"num_hidden_layers\": 32/\"num_hidden_layers\": 3/' models/llama3-8b.json && "
             "grep -q '\"num_hidden_layers\": 3,' models/llama3-8b.json",
             scratch, bin, bin, abs_repo("models"));
    ck_assert_int_eq(system(cmd), 0);
    const char *copies[] = {"kx/ftest", "a/b/ftest"};
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd, "cd / && env -u FTEST_DATA_DIR %s/%s --model llama3-8b --gpus 8", scratch, copies[i]);
        test_cmd_result *r = test_shell(cmd);
        ck_assert_msg(r->status == 0, "%s: exit %d: %s", copies[i], r->status, r->err);
        ck_assert_msg(strstr(r->out, "32 layers") && strstr(r->out, "data: shipped"), "%s read: %.300s", copies[i],
                      r->out);
    }
    snprintf(cmd, sizeof cmd, "cd %s && env -u FTEST_DATA_DIR ./kx/ftest --model llama3-8b --gpus 8", scratch);
    test_cmd_result *r = test_shell(cmd);
    ck_assert_msg(strstr(r->out, "3 layers") && strstr(r->out, "data: ./models of the working directory"),
                  "%.300s", r->out);
}
END_TEST

/* ---- item 10: the HF cache cannot hang a run -------------------------------------- */

/* An HF cache folder for ORG/NAME (as given) with a snapshot holding
 * tiny-llama's config; refs/main a FIFO when fifo, else the commit. */
static void cache_repo(const char *folder, bool fifo) {
    char cmd[2000];
    snprintf(cmd, sizeof cmd, "cd %s && mkdir -p hub/%s/refs hub/%s/snapshots/abc123 && cp %s hub/%s/snapshots/abc123/config.json && "
             "%s hub/%s/refs/main", scratch, folder, folder, abs_repo("models/tiny-llama.json"),
             folder, fifo ? "mkfifo" : "echo abc123 >", folder);
    ck_assert_int_eq(system(cmd), 0);
}

/* refs/main a FIFO: refused at once in one line (before: ftest waited on it
 * forever). Names are matched without regard to case, as the Hub does, unless
 * two folders differ only in case. */
START_TEST(test_hf_cache_fifo_and_case) {
    cache_repo("models--o--m", true);
    test_cmd_result *r;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "cd %s && HF_HUB_CACHE=%s/hub timeout 20 %s/ftest --model o/m", scratch, scratch,
             abs_build());
    r = test_shell(cmd);
    ck_assert_msg(r->status == 2, "exit %d (124: it hung)", r->status);
    ck_assert_int_eq(r->err_lines, 1);
    ck_assert_msg(strstr(r->err, "refs/main") && strstr(r->err, "not a regular file"), "%s", r->err);
    cache_repo("models--Some-Org--Tiny-Llama", false);
    snprintf(cmd, sizeof cmd, "cd %s && HF_HUB_CACHE=%s/hub timeout 20 %s/ftest --model some-org/tiny-llama", scratch,
             scratch, abs_build());
    r = test_shell(cmd);
    ck_assert_msg(r->status == 0 && strstr(r->out, "tiny-llama"), "exit %d: %s", r->status, r->err);
    cache_repo("models--some-org--tiny-llama", false);
    snprintf(cmd, sizeof cmd, "cd %s && HF_HUB_CACHE=%s/hub timeout 20 %s/ftest --model Some-ORG/tiny-llama",
             scratch, scratch, abs_build());
    r = test_shell(cmd);
    ck_assert_msg(r->status == 2 && strstr(r->err, "differ only in case"), "exit %d: %s", r->status, r->err);
}
END_TEST

Suite *suite_reliability_input(void);
Suite *suite_reliability_input(void) {
    Suite *s = suite_create("reliability_input");
    const struct {
        const char *name;
        const TTest *test;
    } cases[] = {
        {"duplicate_keys", test_duplicate_keys_last_wins},
        {"deepspeed_duplicates", test_deepspeed_duplicate_keys_refused},
        {"messages", test_messages_name_the_problem},
        {"fit_unreadable", test_fit_refuses_unreadable_lines},
        {"huge_lines", test_huge_record_lines_bounded},
        {"data_folder", test_data_folder_not_any_models},
        {"hf_cache", test_hf_cache_fifo_and_case},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        TCase *tc = tcase_create(cases[i].name);
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, cases[i].test);
        suite_add_tcase(s, tc);
    }
    return s;
}
