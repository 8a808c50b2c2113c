/* Tests of the sampler (suite "sample"): each filter on known values and against a plain
 * sort-everything reference, the penalty's arithmetic, seeds, the drawn distribution (a chi-square
 * bound) and no allocation per pick. */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gplan/gplan.h"
#include "runtime/sample.h"
#include "tests/alloc/alloc_count.h"
#include "tests/testutil.h"

static gp_sampler *make(int64_t vocab, double temp, int64_t k, double p, double min_p)
{
    char err[256];
    gp_sampler_opts o = gp_sampler_defaults();
    o.temp = temp;
    o.top_k = k;
    o.top_p = p;
    o.min_p = min_p;
    gp_sampler *s = gp_sampler_new(vocab, &o, err, sizeof err);
    if (!s)
        fprintf(stderr, "\n%s\n", err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    return s;
}

/* Logits whose softmax at temperature 1 is p[0, n). */
static void logits_of(const double *p, int n, float *out)
{
    for (int i = 0; i < n; i++)
        out[i] = (float)log(p[i]);
}

static void test_greedy_and_top_k1(void)
{
    float l[1000];
    uint64_t rng = 7;
    for (int round = 0; round < 20; round++) {
        gp_test_uniform(l, 1000, -5.0f, 5.0f, &rng);
        int64_t want = gp_argmax(l, 1000);
        gp_sampler *g = make(1000, 0, 0, 1, 0), *k1 = make(1000, 1.5, 1, 1, 0);
        CU_ASSERT_TRUE(gp_sampler_is_greedy(g));
        CU_ASSERT_FALSE(gp_sampler_is_greedy(k1));
        for (int t = 0; t < 10; t++) {
            CU_ASSERT_EQUAL(gp_sampler_sample(g, l), want);
            CU_ASSERT_EQUAL(gp_sampler_sample(k1, l), want);
        }
        gp_sampler_free(g);
        gp_sampler_free(k1);
    }
    /* Ties go to the lower id, NaN never wins. */
    float t[4] = {NAN, 1, 3, 3};
    gp_sampler *k1 = make(4, 1, 1, 1, 0);
    CU_ASSERT_EQUAL(gp_sampler_sample(k1, t), 2);
    gp_sampler_free(k1);
}

static void test_top_p_known(void)
{
    const double p[4] = {0.4, 0.3, 0.2, 0.1};
    float l[4];
    logits_of(p, 4, l);
    const struct {
        double top_p;
        int64_t n;
    } cases[] = {{0.35, 1}, {0.65, 2}, {0.75, 3}, {0.95, 4}, {1.0, 4}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        gp_sampler *s = make(4, 1, 0, cases[c].top_p, 0);
        const int32_t *ids;
        const float *pr;
        int64_t n = gp_sampler_candidates(s, l, &ids, &pr);
        CU_ASSERT_EQUAL(n, cases[c].n);
        double kept = 0;
        for (int64_t i = 0; i < cases[c].n; i++)
            kept += p[i];
        for (int64_t i = 0; i < n && i < cases[c].n; i++) {
            CU_ASSERT_EQUAL(ids[i], i);
            CU_ASSERT_DOUBLE_EQUAL(pr[i], p[i] / kept, 1e-6);
        }
        gp_sampler_free(s);
    }
    /* Uniform over 5000: needs a selection past the first 256. */
    static float u[5000];
    for (int i = 0; i < 5000; i++)
        u[i] = 0.25f;
    gp_sampler *s = make(5000, 0.7, 0, 0.5001, 0);
    const int32_t *ids;
    const float *pr;
    CU_ASSERT_EQUAL(gp_sampler_candidates(s, u, &ids, &pr), 2501);
    CU_ASSERT_EQUAL(ids[0], 0);
    CU_ASSERT_EQUAL(ids[2500], 2500);
    gp_sampler_free(s);
}

static void test_min_p_known(void)
{
    const double p[5] = {0.05, 0.5, 0.3, 0.1, 0.05};
    float l[5];
    logits_of(p, 5, l);
    /* threshold 0.21 * 0.5 = 0.105: ids 1, 2 stay; 0.19 * 0.5 = 0.095: id 3 too. */
    const struct {
        double min_p;
        int64_t n;
    } cases[] = {{0.21, 2}, {0.19, 3}, {0.9, 1}, {0.05, 5}};
    const int32_t order[5] = {1, 2, 3, 0, 4};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        gp_sampler *s = make(5, 1, 0, 1, cases[c].min_p);
        const int32_t *ids;
        const float *pr;
        int64_t n = gp_sampler_candidates(s, l, &ids, &pr);
        CU_ASSERT_EQUAL(n, cases[c].n);
        for (int64_t i = 0; i < n && i < cases[c].n; i++)
            CU_ASSERT_EQUAL(ids[i], order[i]);
        gp_sampler_free(s);
    }
}

/* The reference: sort every id, then the filters one after the other as plainly as possible. */
typedef struct {
    float z;
    int32_t id;
} zid;

static int by_z(const void *a, const void *b)
{
    const zid *x = a, *y = b;
    if (x->z != y->z)
        return x->z > y->z ? -1 : 1;
    return x->id - y->id;
}

static int64_t reference(const float *l, int64_t V, double temp, int64_t k, double top_p,
                         double min_p, zid *all)
{
    for (int64_t i = 0; i < V; i++)
        all[i] = (zid){l[i], (int32_t)i};
    qsort(all, (size_t)V, sizeof *all, by_z);
    /* The weights as the sampler computes them (float), summed in double. */
    float m = all[0].z, inv_t = (float)(1.0 / temp);
    int64_t n = k > 0 && k < V ? k : V;
    double mass = 0;
    for (int64_t i = 0; i < n; i++)
        mass += expf((all[i].z - m) * inv_t);
    double cum = 0;
    for (int64_t i = 0; i < n && top_p < 1; i++) {
        cum += expf((all[i].z - m) * inv_t);
        if (cum >= top_p * mass) {
            n = i + 1;
            break;
        }
    }
    for (int64_t i = 1; i < n; i++)
        if (expf((all[i].z - m) * inv_t) < (float)min_p) {
            n = i;
            break;
        }
    return n;
}

static void test_against_reference(void)
{
    enum { V = 3000 };
    static float l[V];
    static zid all[V];
    uint64_t rng = 99;
    const double temps[] = {0.3, 1, 2.5};
    const int64_t ks[] = {0, 1, 5, 40, 2999, 3000, 5000};
    const double ps[] = {1, 0.9, 0.5, 0.05};
    const double mins[] = {0, 0.05, 0.3};
    int checked = 0, bad = 0;
    for (int round = 0; round < 3; round++) {
        /* some peaked rows, some flat ones */
        float half = round == 0 ? 0.5f : round == 1 ? 4.0f : 15.0f;
        gp_test_uniform(l, V, -half, half, &rng);
        for (size_t a = 0; a < 3; a++)
            for (size_t b = 0; b < sizeof ks / sizeof ks[0]; b++)
                for (size_t c = 0; c < 4; c++)
                    for (size_t d = 0; d < 3; d++) {
                        gp_sampler *s = make(V, temps[a], ks[b], ps[c], mins[d]);
                        const int32_t *ids;
                        const float *pr;
                        int64_t n = gp_sampler_candidates(s, l, &ids, &pr);
                        int64_t want = reference(l, V, temps[a], ks[b], ps[c], mins[d], all);
                        int ok = n == want;
                        double sum = 0;
                        for (int64_t i = 0; ok && i < n; i++) {
                            ok = ids[i] == all[i].id;
                            sum += pr[i];
                        }
                        ok = ok && fabs(sum - 1) < 1e-4;
                        if (!ok && bad++ < 5)
                            fprintf(stderr, "\ntemp %g k %lld p %g min %g: %lld, want %lld\n",
                                    temps[a], (long long)ks[b], ps[c], mins[d], (long long)n,
                                    (long long)want);
                        CU_ASSERT_TRUE(ok);
                        checked++;
                        gp_sampler_free(s);
                    }
    }
    CU_ASSERT_EQUAL(checked, 3 * 3 * 7 * 4 * 3);
}

static void test_penalty(void)
{
    char err[256];
    gp_sampler_opts o = gp_sampler_defaults();
    o.temp = 1;
    o.repeat_penalty = 2;
    o.repeat_last_n = 3;
    gp_sampler *s = gp_sampler_new(4, &o, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    const float l[4] = {2, -1, 0.5f, 3};
    /* Window of 3 after accepting 3, 0, 1, 1: ids 0 and 1 (once each, though 1 came twice). */
    gp_sampler_accept(s, 3);
    gp_sampler_accept(s, 0);
    gp_sampler_accept(s, 1);
    gp_sampler_accept(s, 1);
    const float want_z[4] = {1, -2, 0.5f, 3};
    double mass = 0;
    for (int i = 0; i < 4; i++)
        mass += exp(want_z[i]);
    const int32_t *ids;
    const float *pr;
    CU_ASSERT_EQUAL_FATAL(gp_sampler_candidates(s, l, &ids, &pr), 4);
    const int32_t order[4] = {3, 0, 2, 1};
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL(ids[i], order[i]);
        CU_ASSERT_DOUBLE_EQUAL(pr[i], exp(want_z[order[i]]) / mass, 1e-6);
    }
    /* Greedy with the penalty: 3's logit halves to 1.5 once 3 is in the window; 0's to 1. */
    gp_sampler_free(s);
    o.temp = 0;
    s = gp_sampler_new(4, &o, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_TRUE(gp_sampler_is_greedy(s));
    CU_ASSERT_EQUAL(gp_sampler_sample(s, l), 3);
    gp_sampler_accept(s, 3);
    CU_ASSERT_FALSE(gp_sampler_is_greedy(s));
    const float l2[4] = {1.6f, -1, 0.5f, 3};
    CU_ASSERT_EQUAL(gp_sampler_sample(s, l2), 0); /* 1.6 > 3 / 2 */
    gp_sampler_accept(s, 0);
    CU_ASSERT_EQUAL(gp_sampler_sample(s, l2), 3); /* 1.6 / 2 < 1.5 */
    gp_sampler_reset(s);
    CU_ASSERT_TRUE(gp_sampler_is_greedy(s));
    gp_sampler_free(s);
}

static void draw_ids(double temp, int64_t k, uint64_t seed, int32_t *out, int n, const float *l,
                     int64_t V)
{
    char err[256];
    gp_sampler_opts o = gp_sampler_defaults();
    o.temp = temp;
    o.top_k = k;
    o.seed = seed;
    gp_sampler *s = gp_sampler_new(V, &o, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    for (int i = 0; i < n; i++)
        out[i] = gp_sampler_sample(s, l);
    gp_sampler_free(s);
}

static void test_seed(void)
{
    float l[300];
    uint64_t rng = 5;
    gp_test_uniform(l, 300, 0.0f, 1.0f, &rng);
    int32_t a[64], b[64], c[64];
    draw_ids(1, 0, 42, a, 64, l, 300);
    draw_ids(1, 0, 42, b, 64, l, 300);
    draw_ids(1, 0, 43, c, 64, l, 300);
    CU_ASSERT_EQUAL(memcmp(a, b, sizeof a), 0);
    CU_ASSERT_NOT_EQUAL(memcmp(a, c, sizeof a), 0);
    draw_ids(1, 50, 42, a, 64, l, 300);
    draw_ids(1, 50, 42, b, 64, l, 300);
    CU_ASSERT_EQUAL(memcmp(a, b, sizeof a), 0);
}

/* gp_sampler_set: another sampler's options in place give that sampler's draws; bad options and a
 * repeat window over the sampler's capacity are refused, the old options kept. */
static void test_set(void)
{
    float l[300];
    uint64_t rng = 9;
    gp_test_uniform(l, 300, 0.0f, 4.0f, &rng);
    char err[128];
    gp_sampler_opts a = gp_sampler_defaults(), b = a;
    b.temp = 0.8;
    b.top_k = 40;
    b.repeat_penalty = 1.3;
    b.seed = 77;
    gp_sampler *sa = gp_sampler_new(300, &a, err, sizeof err), *sb = gp_sampler_new(300, &b, err, sizeof err);
    CU_ASSERT_FATAL(sa && sb);
    gp_sampler_accept(sa, 5);
    CU_ASSERT_EQUAL(gp_sampler_set(sa, &b, err, sizeof err), 0);
    int same = 1;
    for (int i = 0; i < 64; i++) {
        int32_t x = gp_sampler_sample(sa, l), y = gp_sampler_sample(sb, l);
        same &= x == y;
        gp_sampler_accept(sa, x);
        gp_sampler_accept(sb, y);
    }
    CU_ASSERT(same);
    gp_sampler_opts bad = b;
    bad.top_p = 0;
    CU_ASSERT_EQUAL(gp_sampler_set(sa, &bad, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "top-p") != NULL);
    bad = b;
    bad.repeat_last_n = GP_SAMPLER_MIN_HIST + 1;
    CU_ASSERT_EQUAL(gp_sampler_set(sa, &bad, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "repeat-last-n") != NULL);
    gp_sampler_free(sa);
    gp_sampler_free(sb);
}

/* Chi-square of n draws against the expected probabilities; df = the count of nonzero ones - 1.
 * Bound: the 99.99th percentile for df <= 7 is under 30. */
static void chi_square(gp_sampler *s, const float *l, int64_t V, const double *expect, int n)
{
    int counts[16] = {0};
    for (int i = 0; i < n; i++) {
        int32_t id = gp_sampler_sample(s, l);
        CU_ASSERT_FATAL(id >= 0 && id < V);
        counts[id]++;
    }
    double chi = 0;
    for (int64_t i = 0; i < V; i++) {
        if (expect[i] == 0) {
            CU_ASSERT_EQUAL(counts[i], 0);
            continue;
        }
        double e = expect[i] * n;
        chi += (counts[i] - e) * (counts[i] - e) / e;
    }
    if (chi >= 30)
        fprintf(stderr, "\nchi-square %g\n", chi);
    CU_ASSERT(chi < 30);
}

static void test_distribution(void)
{
    const double p[6] = {0.35, 0.25, 0.2, 0.1, 0.07, 0.03};
    float l[6];
    logits_of(p, 6, l);
    /* Every id (the path without selection). */
    gp_sampler *s = make(6, 1, 0, 1, 0);
    chi_square(s, l, 6, p, 60000);
    gp_sampler_free(s);
    /* Top-3: renormalized over 0.8. */
    const double k3[6] = {0.35 / 0.8, 0.25 / 0.8, 0.2 / 0.8, 0, 0, 0};
    s = make(6, 1, 3, 1, 0);
    chi_square(s, l, 6, k3, 60000);
    gp_sampler_free(s);
    /* Temperature 2: probabilities proportional to sqrt(p). */
    double t2[6], sum = 0;
    for (int i = 0; i < 6; i++)
        sum += t2[i] = sqrt(p[i]);
    for (int i = 0; i < 6; i++)
        t2[i] /= sum;
    s = make(6, 2, 0, 0.999, 0); /* top-p so close to 1 that it keeps all: the sorted path */
    chi_square(s, l, 6, t2, 60000);
    gp_sampler_free(s);
}

static void test_no_alloc(void)
{
    enum { V = 4096 };
    static float l[V];
    uint64_t rng = 3;
    gp_test_uniform(l, V, 0.0f, 6.0f, &rng);
    char err[256];
    gp_sampler_opts o = gp_sampler_defaults();
    o.temp = 0.8;
    o.repeat_penalty = 1.3;
    o.repeat_last_n = 32;
    gp_sampler *all[4];
    all[0] = gp_sampler_new(V, &o, err, sizeof err);
    o.top_k = 40;
    o.top_p = 0.9;
    all[1] = gp_sampler_new(V, &o, err, sizeof err);
    o.top_k = 0;
    o.min_p = 0.05;
    all[2] = gp_sampler_new(V, &o, err, sizeof err);
    o.temp = 0;
    all[3] = gp_sampler_new(V, &o, err, sizeof err);
    for (int i = 0; i < 4; i++)
        CU_ASSERT_PTR_NOT_NULL_FATAL(all[i]);
    int64_t seen = 0;
    gp_alloc_count_start();
    for (int t = 0; t < 200; t++)
        for (int i = 0; i < 4; i++) {
            int32_t id = gp_sampler_sample(all[i], l);
            seen += id >= 0 && id < V;
            gp_sampler_accept(all[i], id);
        }
    int64_t allocs = gp_alloc_count_stop();
    CU_ASSERT_EQUAL(allocs, 0);
    CU_ASSERT_EQUAL(seen, 800);
    for (int i = 0; i < 4; i++)
        gp_sampler_free(all[i]);
}

static void test_bad_options(void)
{
    char err[256];
    const struct {
        int field;
        double value;
        const char *msg;
    } cases[] = {
        {0, -1, "sampler: temperature must be a number >= 0"},
        {1, -1, "sampler: top-k must be >= 0"},
        {2, 0, "sampler: top-p must be in (0, 1]"},
        {2, 1.5, "sampler: top-p must be in (0, 1]"},
        {3, -0.1, "sampler: min-p must be in [0, 1]"},
        {4, 0, "sampler: repeat penalty must be a number > 0"},
        {5, -2, "sampler: repeat-last-n must be in [0, 2^31)"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        gp_sampler_opts o = gp_sampler_defaults();
        switch (cases[c].field) {
        case 0: o.temp = cases[c].value; break;
        case 1: o.top_k = (int64_t)cases[c].value; break;
        case 2: o.top_p = cases[c].value; break;
        case 3: o.min_p = cases[c].value; break;
        case 4: o.repeat_penalty = cases[c].value; break;
        default: o.repeat_last_n = (int64_t)cases[c].value; break;
        }
        err[0] = '\0';
        CU_ASSERT_PTR_NULL(gp_sampler_new(10, &o, err, sizeof err));
        CU_ASSERT_STRING_EQUAL(err, cases[c].msg);
    }
    CU_ASSERT_PTR_NULL(gp_sampler_new(0, NULL, err, sizeof err));
    CU_ASSERT_STRING_EQUAL(err, "sampler: vocabulary size outside [1, 2^31)");
    gp_sampler_free(NULL);
    /* A temperature so small that 1 / temp overflows a float: the argmax. */
    float tiny[4] = {0.5f, 2, -1, 1.5f};
    gp_sampler *cold = make(4, 1e-40, 0, 1, 0);
    for (int i = 0; i < 10; i++)
        CU_ASSERT_EQUAL(gp_sampler_sample(cold, tiny), 1);
    gp_sampler_free(cold);
    /* All -inf: still an id in range. */
    float l[3] = {-INFINITY, -INFINITY, -INFINITY};
    gp_sampler *s = make(3, 1, 0, 0.5, 0.1);
    int32_t id = gp_sampler_sample(s, l);
    CU_ASSERT(id >= 0 && id < 3);
    gp_sampler_free(s);
}

void gp_suite_sample(void)
{
    static const gp_test_case tests[] = {
        {"greedy and top-k 1 are the argmax", test_greedy_and_top_k1},
        {"options set in place: the draws of a new sampler", test_set},
        {"top-p keeps the smallest prefix with the mass", test_top_p_known},
        {"min-p against the most likely", test_min_p_known},
        {"filters equal a sort-everything reference", test_against_reference},
        {"repetition penalty over the last n ids", test_penalty},
        {"same seed, same ids", test_seed},
        {"drawn distribution (chi-square)", test_distribution},
        {"no allocation per pick", test_no_alloc},
        {"bad options", test_bad_options},
    };
    gp_test_add_suite("sample", NULL, NULL, tests, GP_TEST_COUNT(tests));
}
