/* The documents that quote the program stay true: docs/validation.md's tables
 * are exactly what `ftest check --markdown` prints for the committed records. */
#include <check.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_records.h"
#include "json_util.h"
#include "test_util.h"

START_TEST(test_validation_tables_current) {
    est_gpu_catalog cat;
    char err[256];
    ck_assert_msg(est_gpu_catalog_load(NULL, &cat, err, sizeof err) == 0, "%s", err);
    glob_t g;
    ck_assert_int_eq(glob(test_repo_path("calibrate/records/*.jsonl"), 0, NULL, &g), 0);
    char *gen = NULL;
    size_t gen_len = 0;
    FILE *f = open_memstream(&gen, &gen_len);
    est_check_options opt = {.markdown = true};
    est_check_totals tot = {0};
    for (size_t i = 0; i < g.gl_pathc; i++)
        ck_assert_msg(est_check_file(g.gl_pathv[i], &cat, &opt, f, &tot, err, sizeof err) == 0, "%s", err);
    fclose(f);
    globfree(&g);
    est_gpu_catalog_free(&cat);

    size_t len;
    char *doc = ft_read_file(test_repo_path("docs/validation.md"), 1 << 24, &len, err, sizeof err);
    ck_assert_msg(doc, "%s", err);
    char *begin = strstr(doc, "<!-- BEGIN GENERATED");
    char *end = strstr(doc, "<!-- END GENERATED");
    ck_assert(begin && end && end > begin);
    begin = strchr(begin, '\n') + 1;
    *end = '\0';
    ck_assert_msg(strcmp(begin, gen) == 0,
                  "docs/validation.md is stale: run `make validation` and commit it");
    free(doc);
    free(gen);
}
END_TEST

/* The text between "<!-- BEGIN tag" (the rest of that line excluded) and
 * "<!-- END tag" in `path`; caller frees. */
static char *block(const char *path, const char *tag) {
    char err[256], begin_tag[64], end_tag[64];
    size_t len;
    char *doc = ft_read_file(test_repo_path(path), 1 << 24, &len, err, sizeof err);
    ck_assert_msg(doc, "%s", err);
    snprintf(begin_tag, sizeof begin_tag, "<!-- BEGIN %s", tag);
    snprintf(end_tag, sizeof end_tag, "<!-- END %s", tag);
    char *b = strstr(doc, begin_tag), *e = strstr(doc, end_tag);
    ck_assert_msg(b && e && e > b, "%s lacks the %s block", path, tag);
    b = strchr(b, '\n') + 1;
    *e = '\0';
    char *out = strdup(b);
    free(doc);
    return out;
}

static char *command_output(const char *args) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s/ftest %s", test_build_dir(), args);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    char *buf = calloc(1, 1 << 20);
    size_t n = fread(buf, 1, (1 << 20) - 1, p);
    buf[n] = '\0';
    pclose(p);
    return buf;
}

/* README's worked example is the real output of the main job. */
START_TEST(test_readme_example_current) {
    const char *args = "--model llama3-8b --gpus 8 --seq 2048";
    char *got = block("README.md", "EXAMPLE");
    char *out = command_output(args);
    char *want = malloc(strlen(out) + 256);
    sprintf(want, "```\n$ ftest %s\n%s```\n", args, out);
    ck_assert_msg(strcmp(got, want) == 0, "README.md's example is stale: run `make readme`");
    free(got);
    free(out);
    free(want);
}
END_TEST

START_TEST(test_readme_usage_current) {
    char *got = block("README.md", "USAGE");
    char *out = command_output("--help");
    char *want = malloc(strlen(out) + 16);
    sprintf(want, "```\n%s```\n", out);
    ck_assert_msg(strcmp(got, want) == 0, "README.md's usage is stale: run `make readme`");
    free(got);
    free(out);
    free(want);
}
END_TEST

Suite *suite_docs(void);
Suite *suite_docs(void) {
    Suite *s = suite_create("docs");
    TCase *tc = tcase_create("validation");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_validation_tables_current);
    tcase_add_test(tc, test_readme_example_current);
    tcase_add_test(tc, test_readme_usage_current);
    suite_add_tcase(s, tc);
    return s;
}
