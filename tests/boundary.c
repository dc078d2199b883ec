/* The design's one hard boundary (shared/DESIGN.md): the estimator never uses
 * the trainer's sizing or allocation code and the trainer never uses the
 * estimator's memory or time model; they share only the model-config reader
 * (common/model_config.h), its JSON helpers (common/json_util.h) and the
 * file handling (common/file_io.h: safe inputs, atomic outputs, whole
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

/* Does the tree under `dir` (relative to the repository) hold a header named
 * `name`? Subfolders count: the build gives every folder its own -I, so a
 * header is found by name wherever it sits. */
static bool has_header(const char *dir, const char *name) {
    DIR *d = opendir(test_repo_path(dir));
    if (!d) return false; /* common/ before the folder layout of issue 12 */
    bool found = false;
    struct dirent *e;
    while (!found && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char sub[1024];
        snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name);
        if (!strcmp(e->d_name, name)) found = true;
        else if (!strchr(e->d_name, '.')) found = has_header(sub, name); /* a folder */
    }
    closedir(d);
    return found;
}

/* Every `#include "x.h"` of the .c/.h files under `dir` (recursively) must be
 * a header of `dir`'s own tree, of the shared tree `shared` (common/), or one
 * of `allowed`, and never a header of `other`. Returns how many files it read. */
static int check_folder(const char *dir, const char *shared, const char *other, const char *const *allowed) {
    DIR *d = opendir(test_repo_path(dir));
    ck_assert_ptr_nonnull(d);
    struct dirent *e;
    int files = 0;
    const char *top = strchr(dir, '/') ? NULL : dir; /* the tree's top folder, for has_header */
    char top_buf[256];
    if (!top) {
        snprintf(top_buf, sizeof top_buf, "%.*s", (int)(strchr(dir, '/') - dir), dir);
        top = top_buf;
    }
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        char rel[1024];
        snprintf(rel, sizeof rel, "%s/%s", dir, e->d_name);
        if (e->d_name[0] == '.') continue;
        if (!strchr(e->d_name, '.')) { /* a folder */
            files += check_folder(rel, shared, other, allowed);
            continue;
        }
        if (n < 3 || (strcmp(e->d_name + n - 2, ".c") && strcmp(e->d_name + n - 2, ".h"))) continue;
        FILE *f = fopen(test_repo_path(rel), "r");
        ck_assert_ptr_nonnull(f);
        files++;
        char line[512];
        while (fgets(line, sizeof line, f)) {
            char inc[256];
            if (sscanf(line, " #include \"%255[^\"]\"", inc) != 1) continue;
            bool ok = false;
            for (const char *const *a = allowed; *a; a++) ok |= !strcmp(inc, *a);
            if (!ok && has_header(other, inc))
                ck_abort_msg("%s includes %s, a header of %s/", rel, inc, other);
            if (!ok) ck_assert_msg(has_header(top, inc) || has_header(shared, inc),
                                   "%s includes %s from nowhere known", rel, inc);
        }
        fclose(f);
    }
    closedir(d);
    return files;
}

START_TEST(test_trainer_uses_only_the_shared_reader) {
    /* Today these live in estimator/; after the folder layout of issue 12, in common/. */
    const char *const allowed[] = {"model_config.h", "json_util.h", "file_io.h", NULL};
    ck_assert_int_gt(check_folder("trainer", "common", "estimator", allowed), 5);
}
END_TEST

START_TEST(test_estimator_never_includes_trainer) {
    const char *const allowed[] = {"fit.h", "calibrate.h", NULL}; /* calibrate/ is the estimator's side */
    ck_assert_int_gt(check_folder("estimator", "common", "trainer", allowed), 5);
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
