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

/* The tests' one float generator, on gp_test_rand. gp_test_uniform: n floats lo + (hi - lo) u, u
 * 53 random bits over 2^53 rounded to a float, in float arithmetic: in [lo, hi) (hi only by that
 * rounding). gp_test_normal: n floats of mean 0 and standard deviation sd (Box-Muller: two draws
 * each, its cosine branch, then times sd in float). */
void gp_test_uniform(float *x, size_t n, float lo, float hi, uint64_t *state);
void gp_test_normal(float *x, size_t n, float sd, uint64_t *state);

/* got's error against want over n floats, relative to want: GP_TEST_MAX max |got - want| / max
 * |want|, GP_TEST_L2 ||got - want||_2 / ||want||_2. INFINITY when either holds a NaN (an unwritten
 * or broken value never passes); with want all zeros, 0 when got is too and INFINITY otherwise. */
enum { GP_TEST_MAX, GP_TEST_L2 };
double gp_test_rel_err(const float *got, const float *want, size_t n, int kind);

/* One test of a suite, for gp_test_add_suite. */
typedef struct {
    const char *name;
    void (*fn)(void);
} gp_test_case;

/* Registers the CUnit suite name (init and cleanup may be NULL) with its tests[n] in order; the
 * suite (NULL when the registry refused it), for tests added on conditions. */
struct CU_Suite *gp_test_add_suite(const char *name, int (*init)(void), int (*cleanup)(void),
                                   const gp_test_case *tests, size_t n);
#define GP_TEST_COUNT(tests) (sizeof(tests) / sizeof((tests)[0]))

/* Called by a suite's registration function instead of adding tests when what it needs is absent
 * (a GPU): prints "NAME: skipped (WHY)". When every suite the driver was asked to run skipped, the
 * driver exits with GP_TEST_SKIPPED, which ctest reports as skipped, never as passed. */
#define GP_TEST_SKIPPED 77
void gp_test_skip(const char *suite, const char *why);
int gp_test_skipped_count(void);

#endif
