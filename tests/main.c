/* One runner for every Check suite in tests/.
 *
 * Each tests/<area>.c exports `Suite *suite_<area>(void)`; the Makefile greps
 * those names into build/suites.h, so adding a file adds its suite. Select with
 * CK_RUN_SUITE / CK_RUN_CASE or CK_INCLUDE_TAGS / CK_EXCLUDE_TAGS as usual. */
#include <check.h>
#include <stdlib.h>

#define SUITE(fn) Suite *fn(void);
#include "suites.h"
#undef SUITE

int main(void) {
    SRunner *sr = srunner_create(NULL);
#define SUITE(fn) srunner_add_suite(sr, fn());
#include "suites.h"
#undef SUITE
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
