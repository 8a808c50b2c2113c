/* Small helpers shared by the test suites. */
#define _XOPEN_SOURCE 700 /* nftw */
#include "tests/testutil.h"

#include <CUnit/CUnit.h>
#include <dirent.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ir/core.h"

const char *gp_test_path(const char *rel)
{
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", GP_SOURCE_DIR, rel);
    return buf;
}

const char *gp_test_tmpfile(const char *suffix)
{
    static char buf[4096];
    static unsigned counter;
    snprintf(buf, sizeof buf, "%s/tests/tmp-%ld-%u%s", GP_BINARY_DIR, (long)getpid(), counter++,
             suffix ? suffix : "");
    return buf;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* Calls visit(path) on each build/tests/tmp-PID-* of this process; returns the count. */
static int each_tmp(void (*visit)(const char *path))
{
    char dir[4096], prefix[64], path[8192];
    snprintf(dir, sizeof dir, "%s/tests", GP_BINARY_DIR);
    snprintf(prefix, sizeof prefix, "tmp-%ld-", (long)getpid());
    DIR *dp = opendir(dir);
    if (!dp)
        return 0;
    int n = 0;
    /* Removing entries while reading the folder may hide others from readdir: collect, then act. */
    char **names = NULL;
    struct dirent *e;
    while ((e = readdir(dp)) != NULL) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0)
            continue;
        char **nn = realloc(names, (size_t)(n + 1) * sizeof *nn);
        if (!nn)
            break;
        names = nn;
        names[n] = strdup(e->d_name);
        if (names[n])
            n++;
    }
    closedir(dp);
    for (int k = 0; k < n; k++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[k]);
        if (visit)
            visit(path);
        nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
        free(names[k]);
    }
    free(names);
    return n;
}

int gp_test_tmp_remove_all(void)
{
    return each_tmp(NULL);
}

static void report_left(const char *path)
{
    fprintf(stderr, "gplan_tests: a test left %s behind\n", path);
}

int gp_test_tmp_leftovers(void)
{
    return each_tmp(report_left);
}

char *gp_test_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t n;
    char *buf = gp_read_stream(f, &n);
    fclose(f);
    if (buf && len)
        *len = n;
    return buf;
}

int gp_test_write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t put = fwrite(data, 1, len, f);
    int rc = fclose(f);
    return (put == len && rc == 0) ? 0 : -1;
}

uint64_t gp_test_rand(uint64_t *state)
{
    uint64_t x = *state ? *state : 0x9E3779B97F4A7C15ull;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545F4914F6CDD1Dull;
}

void gp_test_uniform(float *x, size_t n, float lo, float hi, uint64_t *state)
{
    for (size_t i = 0; i < n; i++) {
        float u = (float)((double)(gp_test_rand(state) >> 11) * 0x1p-53);
        x[i] = lo + (hi - lo) * u;
    }
}

void gp_test_normal(float *x, size_t n, float sd, uint64_t *state)
{
    for (size_t i = 0; i < n; i++) {
        double u = (double)(gp_test_rand(state) >> 11) * 0x1p-53 + 0x1p-60; /* never 0: log */
        double v = (double)(gp_test_rand(state) >> 11) * 0x1p-53;
        x[i] = (float)(sqrt(-2 * log(u)) * cos(6.283185307179586 * v)) * sd;
    }
}

double gp_test_rel_err(const float *got, const float *want, size_t n, int kind)
{
    double num = 0, den = 0; /* MAX: the largest |got - want| and |want|; L2: sums of squares */
    for (size_t i = 0; i < n; i++) {
        if (got[i] != got[i] || want[i] != want[i])
            return INFINITY;
        double d = fabs((double)got[i] - want[i]), w = fabs((double)want[i]);
        if (kind == GP_TEST_L2) {
            num += d * d;
            den += w * w;
        } else {
            num = d > num ? d : num;
            den = w > den ? w : den;
        }
    }
    if (den == 0)
        return num == 0 ? 0 : INFINITY;
    return kind == GP_TEST_L2 ? sqrt(num / den) : num / den;
}

static int skipped;

struct CU_Suite *gp_test_add_suite(const char *name, int (*init)(void), int (*cleanup)(void),
                                   const gp_test_case *tests, size_t n)
{
    CU_pSuite s = CU_add_suite(name, init, cleanup);
    for (size_t i = 0; s && i < n; i++)
        CU_add_test(s, tests[i].name, tests[i].fn);
    return s;
}

void gp_test_skip(const char *suite, const char *why)
{
    printf("%s: skipped (%s)\n", suite, why);
    skipped++;
}

int gp_test_skipped_count(void)
{
    return skipped;
}
