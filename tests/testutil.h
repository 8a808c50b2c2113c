/* Small helpers shared by the test suites. */
#ifndef GP_TESTS_TESTUTIL_H
#define GP_TESTS_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

/* Path of a file in the source tree, e.g. gp_test_path("examples/gpt2.gplan"); a static buffer. */
const char *gp_test_path(const char *rel);

/* A fresh temporary file path under the build tree (unique per call): build/tests/tmp-PID-N.SUFFIX,
 * in a static buffer. The test that asks for one removes it (or a folder made there) when done. */
const char *gp_test_tmpfile(const char *suffix);

/* Removes everything under build/tests whose name starts with this process's tmp-PID- (files, and
 * folders with what they hold); returns how many were removed. For a suite's cleanup function when
 * its tests share temporaries (adapter folders, plan files). */
int gp_test_tmp_remove_all(void);

/* The driver's check at exit: prints each tmp-PID-* this process left under build/tests, removes
 * them, and returns how many there were (a run that leaves any fails). */
int gp_test_tmp_leftovers(void);

/* Reads a whole file; the caller frees; NULL on error. *len may be NULL. */
char *gp_test_read_file(const char *path, size_t *len);

/* Writes len bytes to path; 0 on success. */
int gp_test_write_file(const char *path, const void *data, size_t len);

/* A deterministic PRNG for property tests (xorshift64*). */
uint64_t gp_test_rand(uint64_t *state);

/* Called by a suite's registration function instead of adding tests when what it needs is absent
 * (a GPU): prints "NAME: skipped (WHY)". When every suite the driver was asked to run skipped, the
 * driver exits with GP_TEST_SKIPPED, which ctest reports as skipped, never as passed. */
#define GP_TEST_SKIPPED 77
void gp_test_skip(const char *suite, const char *why);
int gp_test_skipped_count(void);

#endif
