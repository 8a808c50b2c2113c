/* The one test driver: registers every suite (or those named on the command line), runs them and
 * exits non-zero when any assertion failed. CU_basic_run_tests alone reports no failures. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <CUnit/Basic.h>
#include "tests/driver.h"
#include "tests/testutil.h"

static int wanted(const char *name, int argc, char **argv)
{
    if (argc < 2)
        return 1;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return 1;
    return 0;
}

int main(int argc, char **argv)
{
    if (CU_initialize_registry() != CUE_SUCCESS) {
        fprintf(stderr, "gplan_tests: %s\n", CU_get_error_msg());
        return 2;
    }
    int n = 0;
    for (const gp_suite_entry *s = gp_suites; s->name; s++)
        if (wanted(s->name, argc, argv)) {
            s->add();
            n++;
        }
    if (n == 0) {
        fprintf(stderr, "gplan_tests: no suite matches\n");
        CU_cleanup_registry();
        return 2;
    }
    if (gp_test_skipped_count() == n) {
        CU_cleanup_registry();
        return GP_TEST_SKIPPED;
    }
    /* GPLAN_TEST_VERBOSE=1: each test's name as it starts (which one hangs, on a device) */
    const char *verbose = getenv("GPLAN_TEST_VERBOSE");
    CU_basic_set_mode(verbose && *verbose == '1' ? CU_BRM_VERBOSE : CU_BRM_NORMAL);
    /* GPLAN_TEST_ONLY=TEXT: only the tests whose names contain TEXT (one kernel's tests under a
     * slow tool such as compute-sanitizer) */
    const char *only = getenv("GPLAN_TEST_ONLY");
    unsigned failed = 0, failed_suites = 0, failed_tests = 0, ran = 0;
    if (only && *only) {
        for (CU_pSuite s = CU_get_registry()->pSuite; s; s = s->pNext)
            for (CU_pTest t = s->pTest; t; t = t->pNext)
                if (strstr(t->pName, only)) { /* each run's counts are its own: add them up */
                    CU_basic_run_test(s, t);
                    failed += CU_get_number_of_failures();
                    failed_suites += CU_get_number_of_suites_failed();
                    failed_tests += CU_get_number_of_tests_failed();
                    ran++;
                }
        printf("gplan_tests: %u tests with \"%s\" in their names\n", ran, only);
    } else {
        CU_basic_run_tests();
        failed = CU_get_number_of_failures();
        failed_suites = CU_get_number_of_suites_failed();
        failed_tests = CU_get_number_of_tests_failed();
    }
    CU_cleanup_registry();
    /* Every test removes the temporaries it made (gp_test_tmpfile): a run that leaves one fails. */
    int left = gp_test_tmp_leftovers();
    if (left)
        fprintf(stderr, "gplan_tests: %d temporary file%s left in the build tree (removed now)\n",
                left, left == 1 ? "" : "s");
    if (failed || failed_suites || failed_tests || left) {
        fprintf(stderr, "gplan_tests: %u failed assertions, %u failed tests, %u suites failed to set up\n",
                failed, failed_tests, failed_suites);
        return 1;
    }
    return 0;
}
