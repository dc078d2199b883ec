/* The design's one hard boundary (shared/DESIGN.md): the estimator never uses
 * the trainer's sizing or allocation code and the trainer never uses the
 * estimator's memory or time model; they share only the model-config reader
 * (estimator/model_config.h), its JSON helpers (estimator/json_util.h) and the
 * file handling (estimator/file_io.h: safe inputs, atomic outputs, whole
 * appended records; docs/reliability.md).
 * The linker enforces the calls; this checks the includes, which the linker
 * cannot see (types, inline functions, macros). */
#include <check.h>
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

/* Does `dir` hold a header named `name`? */
static bool has_header(const char *dir, const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", test_repo_path(dir), name);
    FILE *f = fopen(path, "r");
    if (f) fclose(f);
    return f != NULL;
}

/* Every `#include "x.h"` of the .c/.h files in `dir` must be its own folder's
 * header or one of `allowed`, and never a header of `other`. */
static void check_folder(const char *dir, const char *other, const char *const *allowed) {
    DIR *d = opendir(test_repo_path(dir));
    ck_assert_ptr_nonnull(d);
    struct dirent *e;
    int files = 0;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n < 3 || (strcmp(e->d_name + n - 2, ".c") && strcmp(e->d_name + n - 2, ".h"))) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", test_repo_path(dir), e->d_name);
        FILE *f = fopen(path, "r");
        ck_assert_ptr_nonnull(f);
        files++;
        char line[512];
        while (fgets(line, sizeof line, f)) {
            char inc[256];
            if (sscanf(line, " #include \"%255[^\"]\"", inc) != 1) continue;
            bool ok = false;
            for (const char *const *a = allowed; *a; a++) ok |= !strcmp(inc, *a);
            if (!ok && has_header(other, inc))
                ck_abort_msg("%s/%s includes %s, a header of %s/", dir, e->d_name, inc, other);
            if (!ok) ck_assert_msg(has_header(dir, inc), "%s/%s includes %s from nowhere known", dir,
                                   e->d_name, inc);
        }
        fclose(f);
    }
    closedir(d);
    ck_assert_int_gt(files, 5);
}

START_TEST(test_trainer_uses_only_the_shared_reader) {
    const char *const allowed[] = {"model_config.h", "json_util.h", "file_io.h", NULL};
    check_folder("trainer", "estimator", allowed);
}
END_TEST

START_TEST(test_estimator_never_includes_trainer) {
    const char *const allowed[] = {"fit.h", "calibrate.h", NULL}; /* calibrate/ is the estimator's side */
    check_folder("estimator", "trainer", allowed);
}
END_TEST

Suite *suite_boundary(void);
Suite *suite_boundary(void) {
    Suite *s = suite_create("boundary");
    TCase *tc = tcase_create("includes");
    tcase_add_test(tc, test_trainer_uses_only_the_shared_reader);
    tcase_add_test(tc, test_estimator_never_includes_trainer);
    suite_add_tcase(s, tc);
    return s;
}
