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

Suite *suite_docs(void);
Suite *suite_docs(void) {
    Suite *s = suite_create("docs");
    TCase *tc = tcase_create("validation");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_validation_tables_current);
    suite_add_tcase(s, tc);
    return s;
}
