/* Tests of offset assignment (planner/assign*.c, check.c, csv.c): known answers, the checker on
 * hand-made conflicts, random instances against the checker and a brute-force optimum written
 * here, capacity decisions, heuristics with lists vs the interval tree, and the CSV format. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/assign.h"
#include "planner/assign_internal.h"
#include "planner/csv.h"
#include "tests/testutil.h"

static const char input12[] = "id,lower,upper,size\nb1,0,3,4\nb2,3,9,4\nb3,0,9,4\nb4,9,21,4\nb5,0,21,4\n";

static int64_t peak_of(const gp_buffer *b, size_t n)
{
    int64_t peak = 0;
    for (size_t i = 0; i < n; i++)
        if (b[i].offset + b[i].size > peak)
            peak = b[i].offset + b[i].size;
    return peak;
}

/* ---- known answers ---- */

static void test_input12(void)
{
    gp_csv *c = NULL;
    char err[256];
    CU_ASSERT_EQUAL_FATAL(gp_csv_parse(input12, strlen(input12), "input.12.csv", &c, err, sizeof err), 0);
    CU_ASSERT_EQUAL(c->n, 5);
    CU_ASSERT_EQUAL(gp_assign_lower_bound(c->buf, c->n), 12);
    static const gp_strategy strategies[] = {GP_STRATEGY_AUTO, GP_STRATEGY_EXACT, GP_STRATEGY_GREEDY};
    for (int s = 0; s < 3; s++) {
        gp_assign_opts o = {strategies[s], 5.0, 12};
        gp_assign_result r;
        CU_ASSERT_EQUAL(gp_assign(c->buf, c->n, &o, &r), GP_ASSIGN_OK);
        CU_ASSERT_EQUAL(r.status, GP_ASSIGN_OK);
        CU_ASSERT_EQUAL(r.peak, 12);
        CU_ASSERT_EQUAL(r.lower_bound, 12);
        CU_ASSERT_TRUE(r.optimal);
        CU_ASSERT_EQUAL(gp_assign_check(c->buf, c->n, 12, err, sizeof err), 0);
        CU_ASSERT_EQUAL(peak_of(c->buf, c->n), 12);
    }
    /* Below the lower bound nothing fits. */
    gp_assign_opts o = {GP_STRATEGY_AUTO, 5.0, 11};
    gp_assign_result r;
    CU_ASSERT_EQUAL(gp_assign(c->buf, c->n, &o, &r), GP_ASSIGN_NO_FIT);
    CU_ASSERT_EQUAL(r.status, GP_ASSIGN_NO_FIT);
    CU_ASSERT_EQUAL(gp_assign_check(c->buf, c->n, 0, err, sizeof err), 0); /* best attempt is valid */
    gp_csv_free(c);

    /* The shared copy of the file, when present, is the same problem. */
    const char *path = gp_test_path("../shared/data/minimalloc/input.12.csv");
    if (gp_csv_read(path, &c, err, sizeof err) == 0) {
        CU_ASSERT_EQUAL(c->n, 5);
        gp_assign_opts o2 = {GP_STRATEGY_AUTO, 5.0, 12};
        CU_ASSERT_EQUAL(gp_assign(c->buf, c->n, &o2, &r), GP_ASSIGN_OK);
        CU_ASSERT_EQUAL(gp_assign_check(c->buf, c->n, 12, err, sizeof err), 0);
        gp_csv_free(c);
    }
}

static void test_lower_bound(void)
{
    /* Half-open: [0,2) and [2,4) never live together. */
    gp_buffer touch[] = {{0, 2, 10, 0}, {2, 4, 7, 0}};
    CU_ASSERT_EQUAL(gp_assign_lower_bound(touch, 2), 10);
    gp_buffer over[] = {{0, 3, 10, 0}, {2, 4, 7, 0}, {3, 5, 1, 0}};
    CU_ASSERT_EQUAL(gp_assign_lower_bound(over, 3), 17);
    CU_ASSERT_EQUAL(gp_assign_lower_bound(NULL, 0), 0);
    /* Touching lifespans share an address: peak equals the larger size. */
    gp_assign_result r;
    CU_ASSERT_EQUAL(gp_assign(touch, 2, NULL, &r), GP_ASSIGN_OK);
    CU_ASSERT_EQUAL(r.peak, 10);
    CU_ASSERT_TRUE(r.optimal);
}

static void test_edge_inputs(void)
{
    gp_assign_result r;
    CU_ASSERT_EQUAL(gp_assign(NULL, 0, NULL, &r), GP_ASSIGN_OK);
    CU_ASSERT_EQUAL(r.peak, 0);
    CU_ASSERT_EQUAL(r.lower_bound, 0);

    gp_buffer zero[] = {{0, 1, 0, 0}};
    CU_ASSERT_EQUAL(gp_assign(zero, 1, NULL, &r), GP_ASSIGN_ERROR);
    gp_buffer neg[] = {{0, 1, -5, 0}};
    CU_ASSERT_EQUAL(gp_assign(neg, 1, NULL, &r), GP_ASSIGN_ERROR);
    gp_buffer empty[] = {{3, 3, 5, 0}};
    CU_ASSERT_EQUAL(gp_assign(empty, 1, NULL, &r), GP_ASSIGN_ERROR);
    gp_buffer backwards[] = {{4, 3, 5, 0}};
    CU_ASSERT_EQUAL(gp_assign(backwards, 1, NULL, &r), GP_ASSIGN_ERROR);
    gp_assign_opts badcap = {GP_STRATEGY_AUTO, 1.0, -1};
    gp_buffer one[] = {{0, 1, 1, 0}};
    CU_ASSERT_EQUAL(gp_assign(one, 1, &badcap, &r), GP_ASSIGN_ERROR);

    /* Size 1 and duplicate lifespans: all overlap, so they stack. */
    gp_buffer dup[] = {{5, 9, 1, 0}, {5, 9, 1, 0}, {5, 9, 1, 0}, {5, 9, 1, 0}};
    char why[256];
    CU_ASSERT_EQUAL(gp_assign(dup, 4, NULL, &r), GP_ASSIGN_OK);
    CU_ASSERT_EQUAL(r.peak, 4);
    CU_ASSERT_EQUAL(gp_assign_check(dup, 4, 4, why, sizeof why), 0);

    /* Huge sizes: fine while the total stays in range, an error when it overflows. */
    int64_t big = INT64_MAX / 8;
    gp_buffer huge[] = {{0, 2, big, 0}, {1, 3, big, 0}, {2, 4, big, 0}};
    CU_ASSERT_EQUAL(gp_assign(huge, 3, NULL, &r), GP_ASSIGN_OK);
    CU_ASSERT_EQUAL(r.peak, 2 * big);
    CU_ASSERT_EQUAL(gp_assign_check(huge, 3, 0, why, sizeof why), 0);
    gp_buffer too_big[] = {{0, 2, INT64_MAX / 2, 0}, {5, 6, INT64_MAX / 2, 0}};
    CU_ASSERT_EQUAL(gp_assign(too_big, 2, NULL, &r), GP_ASSIGN_ERROR);

    /* Negative times are just times. */
    gp_buffer negt[] = {{-10, -5, 3, 0}, {-6, 0, 4, 0}};
    CU_ASSERT_EQUAL(gp_assign(negt, 2, NULL, &r), GP_ASSIGN_OK);
    CU_ASSERT_EQUAL(r.peak, 7);
}

/* ---- the checker ---- */

static void test_checker(void)
{
    char why[256];
    gp_buffer ok[] = {{0, 4, 8, 0}, {0, 4, 8, 8}};
    CU_ASSERT_EQUAL(gp_assign_check(ok, 2, 0, why, sizeof why), 0);
    CU_ASSERT_EQUAL(gp_assign_check(ok, 2, 16, why, sizeof why), 0);
    CU_ASSERT_EQUAL(gp_assign_check(ok, 2, 15, why, sizeof why), -1); /* above capacity */
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "capacity"));

    gp_buffer overlap[] = {{0, 4, 8, 0}, {3, 6, 8, 7}};
    CU_ASSERT_EQUAL(gp_assign_check(overlap, 2, 0, why, sizeof why), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "overlap"));
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "buffers 0 and 1"));

    /* Touching in time is no conflict (half-open lifespans). */
    gp_buffer ttime[] = {{0, 4, 8, 0}, {4, 6, 8, 0}};
    CU_ASSERT_EQUAL(gp_assign_check(ttime, 2, 0, why, sizeof why), 0);
    /* Touching in space is no conflict either. */
    gp_buffer tspace[] = {{0, 4, 8, 0}, {2, 6, 8, 8}, {3, 5, 2, 16}};
    CU_ASSERT_EQUAL(gp_assign_check(tspace, 3, 0, why, sizeof why), 0);
    /* One byte of overlap is. */
    tspace[2].offset = 15;
    CU_ASSERT_EQUAL(gp_assign_check(tspace, 3, 0, why, sizeof why), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "buffers 1 and 2"));

    /* Contained: a small buffer inside a big one, with many between them in offset order. */
    gp_buffer nested[] = {{0, 10, 100, 0}, {20, 30, 5, 10}, {20, 30, 5, 20}, {5, 6, 1, 50}};
    CU_ASSERT_EQUAL(gp_assign_check(nested, 4, 0, why, sizeof why), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "buffers 0 and 3"));

    /* Same offset, disjoint times: fine; same offset, shared time: conflict. */
    gp_buffer same[] = {{0, 1, 4, 0}, {1, 2, 4, 0}, {2, 3, 4, 0}};
    CU_ASSERT_EQUAL(gp_assign_check(same, 3, 0, why, sizeof why), 0);
    same[2].lower = 1;
    CU_ASSERT_EQUAL(gp_assign_check(same, 3, 0, why, sizeof why), -1);

    gp_buffer negoff[] = {{0, 1, 4, -1}};
    CU_ASSERT_EQUAL(gp_assign_check(negoff, 1, 0, why, sizeof why), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "negative offset"));
    gp_buffer badsize[] = {{0, 1, 0, 0}};
    CU_ASSERT_EQUAL(gp_assign_check(badsize, 1, 0, why, sizeof why), -1);
    gp_buffer badlife[] = {{1, 1, 4, 0}};
    CU_ASSERT_EQUAL(gp_assign_check(badlife, 1, 0, why, sizeof why), -1);
    gp_buffer wrap[] = {{0, 1, INT64_MAX, 1}};
    CU_ASSERT_EQUAL(gp_assign_check(wrap, 1, 0, why, sizeof why), -1);
    CU_ASSERT_EQUAL(gp_assign_check(NULL, 0, 0, why, sizeof why), 0);
    CU_ASSERT_EQUAL(gp_assign_check(overlap, 2, 0, NULL, 0), -1);
}

/* The checker against an O(n^2) pairwise scan, on random (mostly invalid) placements. */
static void test_checker_random(void)
{
    uint64_t seed = 99;
    char why[256];
    for (int round = 0; round < 500; round++) {
        int n = 1 + (int)(gp_test_rand(&seed) % 12);
        gp_buffer b[12];
        for (int i = 0; i < n; i++) {
            int64_t lo = (int64_t)(gp_test_rand(&seed) % 10);
            b[i] = (gp_buffer){lo, lo + 1 + (int64_t)(gp_test_rand(&seed) % 5),
                               1 + (int64_t)(gp_test_rand(&seed) % 6), (int64_t)(gp_test_rand(&seed) % 30)};
        }
        int conflict = 0;
        for (int i = 0; i < n; i++)
            for (int j = i + 1; j < n; j++)
                if (b[i].lower < b[j].upper && b[j].lower < b[i].upper &&
                    b[i].offset < b[j].offset + b[j].size && b[j].offset < b[i].offset + b[i].size)
                    conflict = 1;
        CU_ASSERT_EQUAL(gp_assign_check(b, (size_t)n, 0, why, sizeof why), conflict ? -1 : 0);
    }
}

/* ---- random instances ---- */

static int random_instance(uint64_t *seed, gp_buffer *b, int max_n, int64_t max_time, int64_t max_size)
{
    int n = 1 + (int)(gp_test_rand(seed) % (uint64_t)max_n);
    for (int i = 0; i < n; i++) {
        int64_t lo = (int64_t)(gp_test_rand(seed) % (uint64_t)max_time);
        int64_t len = 1 + (int64_t)(gp_test_rand(seed) % (uint64_t)(max_time / 2 + 1));
        b[i] = (gp_buffer){lo, lo + len, 1 + (int64_t)(gp_test_rand(seed) % (uint64_t)max_size), -1};
    }
    return n;
}

static void test_random_valid(void)
{
    uint64_t seed = 12345;
    static const gp_strategy strategies[] = {GP_STRATEGY_GREEDY, GP_STRATEGY_AUTO, GP_STRATEGY_EXACT};
    char why[256];
    for (int round = 0; round < 300; round++) {
        gp_buffer src[60], b[60];
        int n = random_instance(&seed, src, 60, 40, round % 2 ? 1000 : 9);
        int64_t lb = gp_assign_lower_bound(src, (size_t)n);
        for (int s = 0; s < 3; s++) {
            memcpy(b, src, sizeof b);
            gp_assign_opts o = {strategies[s], 0.05, 0};
            gp_assign_result r;
            CU_ASSERT_EQUAL(gp_assign(b, (size_t)n, &o, &r), GP_ASSIGN_OK);
            CU_ASSERT_EQUAL(gp_assign_check(b, (size_t)n, 0, why, sizeof why), 0);
            CU_ASSERT_EQUAL(r.lower_bound, lb);
            CU_ASSERT_TRUE(r.peak >= lb);
            CU_ASSERT_EQUAL(r.peak, peak_of(b, (size_t)n));
            CU_ASSERT_TRUE(r.method[0] != '\0');
            /* The answer fits its own peak as a capacity. */
            memcpy(b, src, sizeof b);
            gp_assign_opts oc = {strategies[s], 0.05, r.peak};
            CU_ASSERT_EQUAL(gp_assign(b, (size_t)n, &oc, &r), GP_ASSIGN_OK);
            CU_ASSERT_EQUAL(gp_assign_check(b, (size_t)n, oc.capacity, why, sizeof why), 0);
        }
    }
}

/* Deterministic: the same input gives the same offsets. */
static void test_deterministic(void)
{
    uint64_t seed = 777;
    for (int round = 0; round < 20; round++) {
        gp_buffer a[60], b[60];
        int n = random_instance(&seed, a, 60, 30, 100);
        memcpy(b, a, sizeof a);
        gp_assign_opts o = {GP_STRATEGY_GREEDY, 0, 0};
        gp_assign_result ra, rb;
        gp_assign(a, (size_t)n, &o, &ra);
        gp_assign(b, (size_t)n, &o, &rb);
        for (int i = 0; i < n; i++)
            CU_ASSERT_EQUAL(a[i].offset, b[i].offset);
        CU_ASSERT_STRING_EQUAL(ra.method, rb.method);
    }
}

/* The heuristics give the same offsets through overlap lists and through the interval tree. */
static void test_tree_matches_lists(void)
{
    uint64_t seed = 4242;
    for (int round = 0; round < 60; round++) {
        gp_buffer b[300];
        int n = random_instance(&seed, b, 300, round % 3 ? 200 : 20, round % 2 ? 50 : 100000);
        gp_aprob p;
        CU_ASSERT_EQUAL_FATAL(gp_aprob_init(&p, b, (size_t)n), 0);
        CU_ASSERT_PTR_NOT_NULL(p.adj);
        int64_t lists[300], tree[300];
        for (int o = 0; o < GP_GREEDY_ORDERS; o++) {
            CU_ASSERT_EQUAL(gp_greedy_run(&p, o, NULL, 0, lists), 0);
            CU_ASSERT_EQUAL(gp_greedy_run(&p, o, NULL, 1, tree), 0);
            int same = 1;
            for (int i = 0; i < n; i++)
                same &= lists[i] == tree[i];
            CU_ASSERT_TRUE(same);
        }
        gp_aprob_release(&p);
    }
}

/* Ruin and recreate keeps a valid placement (no two buffers overlapping in time and bytes, every
 * buffer placed), never raises the peak nor goes below the lower bound, reports the peak it
 * leaves, and lowers the peak of greedy placements that sit above the bound. */
static void test_improve_invariants(void)
{
    uint64_t seed = 90210;
    char why[256];
    int lowered = 0, above = 0;
    for (int round = 0; round < 40; round++) {
        gp_buffer b[400];
        int n = random_instance(&seed, b, 400, round % 2 ? 300 : 60, round % 3 ? 1000 : 64);
        gp_aprob p;
        CU_ASSERT_EQUAL_FATAL(gp_aprob_init(&p, b, (size_t)n), 0);
        int64_t off[400];
        CU_ASSERT_EQUAL_FATAL(gp_greedy_run(&p, 1, NULL, 0, off), 0);
        for (int q = 0; q < p.np; q++) {
            int64_t before = 0;
            for (int k = p.part_start[q]; k < p.part_start[q + 1]; k++) {
                int i = p.part_buf[k];
                if (off[i] + b[i].size > before)
                    before = off[i] + b[i].size;
            }
            if (before <= p.part_lb[q])
                continue;
            above++;
            gp_improve_stats st;
            CU_ASSERT_EQUAL(gp_improve_run(&p, q, p.part_lb[q], gp_assign_now() + 5.0, 400,
                                           (uint64_t)round + 1, off, &st), 0);
            int64_t after = 0;
            for (int k = p.part_start[q]; k < p.part_start[q + 1]; k++) {
                int i = p.part_buf[k];
                CU_ASSERT_TRUE(off[i] >= 0);
                if (off[i] + b[i].size > after)
                    after = off[i] + b[i].size;
            }
            CU_ASSERT_EQUAL(st.start_peak, before);
            CU_ASSERT_EQUAL(st.peak, after);
            CU_ASSERT_TRUE(after <= before);
            CU_ASSERT_TRUE(after >= p.part_lb[q]);
            CU_ASSERT_TRUE(st.moves <= 400);
            lowered += after < before;
        }
        for (int i = 0; i < n; i++)
            b[i].offset = off[i];
        CU_ASSERT_EQUAL(gp_assign_check(b, (size_t)n, 0, why, sizeof why), 0);
        gp_aprob_release(&p);
    }
    CU_ASSERT_TRUE(above >= 10);
    CU_ASSERT_TRUE(lowered * 2 >= above);
}

/* Completing a partial placement places every buffer left out, moves none of the others, and
 * leaves no two buffers overlapping. */
static void test_improve_complete(void)
{
    uint64_t seed = 1701;
    char why[256];
    for (int round = 0; round < 40; round++) {
        gp_buffer b[300];
        int n = random_instance(&seed, b, 300, round % 2 ? 200 : 30, round % 3 ? 1000 : 16);
        gp_aprob p;
        CU_ASSERT_EQUAL_FATAL(gp_aprob_init(&p, b, (size_t)n), 0);
        int64_t off[300], kept[300];
        CU_ASSERT_EQUAL_FATAL(gp_greedy_run(&p, round % GP_GREEDY_ORDERS, NULL, 0, off), 0);
        for (int i = 0; i < n; i++) {
            if (gp_test_rand(&seed) % 3 == 0)
                off[i] = -1;
            kept[i] = off[i];
        }
        for (int q = 0; q < p.np; q++)
            CU_ASSERT_EQUAL(gp_improve_complete(&p, q, off), 0);
        int moved = 0, unplaced = 0;
        for (int i = 0; i < n; i++) {
            moved += kept[i] >= 0 && off[i] != kept[i];
            unplaced += off[i] < 0;
            b[i].offset = off[i];
        }
        CU_ASSERT_EQUAL(moved, 0);
        CU_ASSERT_EQUAL(unplaced, 0);
        CU_ASSERT_EQUAL(gp_assign_check(b, (size_t)n, 0, why, sizeof why), 0);
        gp_aprob_release(&p);
    }
}

/* AUTO on a large instance whose heuristics stop above the bound: valid, no worse than the
 * heuristics (better on a quiet machine; under a loaded CI run the 1 s limit may not reach a
 * better answer), and the time to the final peak within the time spent. */
static void test_auto_large(void)
{
    enum { N = 6000 };
    gp_buffer *src = malloc(N * sizeof *src), *b = malloc(N * sizeof *b);
    CU_ASSERT_PTR_NOT_NULL_FATAL(src);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    uint64_t seed = 5150;
    for (int i = 0; i < N; i++) {
        int64_t t = i / 2, r = (int64_t)(gp_test_rand(&seed) % 100);
        int64_t life = r < 70 ? 1 + (int64_t)(gp_test_rand(&seed) % 4)
                       : r < 95 ? 4 + (int64_t)(gp_test_rand(&seed) % 60)
                                : 50 + (int64_t)(gp_test_rand(&seed) % 1500);
        int64_t size = (int64_t)1 << (8 + gp_test_rand(&seed) % 12);
        src[i] = (gp_buffer){t, t + life, size + (int64_t)(gp_test_rand(&seed) % 4096), -1};
    }
    char why[256];
    memcpy(b, src, N * sizeof *b);
    gp_assign_opts g = {GP_STRATEGY_GREEDY, 0, 0};
    gp_assign_result rg, ra;
    CU_ASSERT_EQUAL(gp_assign(b, N, &g, &rg), GP_ASSIGN_OK);
    memcpy(b, src, N * sizeof *b);
    gp_assign_opts a = {GP_STRATEGY_AUTO, 1.0, 0};
    CU_ASSERT_EQUAL(gp_assign(b, N, &a, &ra), GP_ASSIGN_OK);
    CU_ASSERT_EQUAL(gp_assign_check(b, N, 0, why, sizeof why), 0);
    CU_ASSERT_EQUAL(ra.peak, peak_of(b, N));
    CU_ASSERT_TRUE(rg.peak > rg.lower_bound);
    /* no worse (how much better depends on the machine's load within the time limit) */
    CU_ASSERT_TRUE(ra.peak <= rg.peak);
    CU_ASSERT_TRUE(ra.peak >= ra.lower_bound);
    CU_ASSERT_TRUE(ra.seconds_best >= 0 && ra.seconds_best <= ra.seconds);
    CU_ASSERT_TRUE(ra.seconds < 10.0);
    /* Deciding the heuristics' peak as a capacity (reachable whatever the load): met, valid. */
    int64_t cap = rg.peak;
    memcpy(b, src, N * sizeof *b);
    gp_assign_opts c = {GP_STRATEGY_AUTO, 1.0, cap};
    CU_ASSERT_EQUAL(gp_assign(b, N, &c, &ra), GP_ASSIGN_OK);
    CU_ASSERT_TRUE(ra.peak <= cap);
    CU_ASSERT_EQUAL(gp_assign_check(b, N, cap, why, sizeof why), 0);
    free(src);
    free(b);
}

/* ---- brute force, independent of the assigner ---- */

/* Lowest offset for b[i] clear of the placed buffers that share time with it. */
static int64_t lowest_fit(const gp_buffer *b, const int *placed, int np, int i)
{
    int64_t off = 0;
    for (;;) {
        int moved = 0;
        for (int k = 0; k < np; k++) {
            const gp_buffer *x = &b[placed[k]];
            if (x->lower < b[i].upper && b[i].lower < x->upper && x->offset < off + b[i].size &&
                off < x->offset + x->size) {
                off = x->offset + x->size;
                moved = 1;
            }
        }
        if (!moved)
            return off;
    }
}

/* The optimum: the best over all placement orders of placing each buffer as low as it fits (an
 * optimal solution sorted by offset is reproduced, or beaten, by its own order). */
static int64_t brute_force(gp_buffer *b, int n)
{
    int perm[8], placed[8];
    for (int i = 0; i < n; i++)
        perm[i] = i;
    int64_t best = INT64_MAX;
    for (;;) {
        int64_t peak = 0;
        for (int k = 0; k < n && peak < best; k++) {
            b[perm[k]].offset = lowest_fit(b, placed, k, perm[k]);
            placed[k] = perm[k];
            if (b[perm[k]].offset + b[perm[k]].size > peak)
                peak = b[perm[k]].offset + b[perm[k]].size;
        }
        if (peak < best)
            best = peak;
        /* next permutation */
        int i = n - 2;
        while (i >= 0 && perm[i] > perm[i + 1])
            i--;
        if (i < 0)
            break;
        int j = n - 1;
        while (perm[j] < perm[i])
            j--;
        int t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
        for (int a = i + 1, z = n - 1; a < z; a++, z--) {
            t = perm[a];
            perm[a] = perm[z];
            perm[z] = t;
        }
    }
    return best;
}

static void test_exact_vs_brute_force(void)
{
    uint64_t seed = 2024;
    char why[256];
    int greedy_worse = 0;
    for (int round = 0; round < 600; round++) {
        gp_buffer src[7], b[7];
        /* 4-7 buffers crowded into 4 steps, sizes that pack badly. */
        static const int64_t sizes[] = {2, 3, 5, 7, 1, 4};
        int n = 4 + (int)(gp_test_rand(&seed) % 4);
        for (int i = 0; i < n; i++) {
            int64_t lo = (int64_t)(gp_test_rand(&seed) % 4);
            src[i] = (gp_buffer){lo, lo + 1 + (int64_t)(gp_test_rand(&seed) % (uint64_t)(4 - lo)),
                                 sizes[gp_test_rand(&seed) % (round % 2 ? 4 : 6)], -1};
        }
        memcpy(b, src, sizeof b);
        int64_t opt = brute_force(b, n);
        int64_t lb = gp_assign_lower_bound(src, (size_t)n);
        CU_ASSERT_TRUE(opt >= lb);

        memcpy(b, src, sizeof b);
        gp_assign_opts g = {GP_STRATEGY_GREEDY, 5.0, 0};
        gp_assign_result r;
        CU_ASSERT_EQUAL(gp_assign(b, (size_t)n, &g, &r), GP_ASSIGN_OK);
        CU_ASSERT_TRUE(r.peak >= opt);
        greedy_worse += r.peak > opt;

        memcpy(b, src, sizeof b);
        gp_assign_opts o = {GP_STRATEGY_EXACT, 5.0, 0};
        CU_ASSERT_EQUAL(gp_assign(b, (size_t)n, &o, &r), GP_ASSIGN_OK);
        CU_ASSERT_EQUAL(r.peak, opt);
        CU_ASSERT_TRUE(r.optimal);
        CU_ASSERT_EQUAL(gp_assign_check(b, (size_t)n, 0, why, sizeof why), 0);

        memcpy(b, src, sizeof b);
        gp_assign_opts a = {GP_STRATEGY_AUTO, 5.0, 0};
        CU_ASSERT_EQUAL(gp_assign(b, (size_t)n, &a, &r), GP_ASSIGN_OK);
        CU_ASSERT_EQUAL(r.peak, opt);
        /* The proven bound: never above the optimum, the optimum once proven. */
        CU_ASSERT_TRUE(r.proven_bound >= lb && r.proven_bound <= opt);
        if (r.optimal)
            CU_ASSERT_EQUAL(r.proven_bound, opt);

        /* Decisions: fits at the optimum, not one byte below. */
        memcpy(b, src, sizeof b);
        gp_assign_opts fit = {GP_STRATEGY_AUTO, 5.0, opt};
        CU_ASSERT_EQUAL(gp_assign(b, (size_t)n, &fit, &r), GP_ASSIGN_OK);
        CU_ASSERT_EQUAL(gp_assign_check(b, (size_t)n, opt, why, sizeof why), 0);
        if (opt > 1) {
            memcpy(b, src, sizeof b);
            gp_assign_opts below = {GP_STRATEGY_EXACT, 5.0, opt - 1};
            CU_ASSERT_EQUAL(gp_assign(b, (size_t)n, &below, &r), GP_ASSIGN_NO_FIT);
            CU_ASSERT_EQUAL(r.proven_bound, opt);
            CU_ASSERT_EQUAL(gp_assign_check(b, (size_t)n, 0, why, sizeof why), 0);
        }
    }
    /* The search must have had work to do: instances where the heuristics miss the optimum.
     * (Random instances this small practically always reach the lower bound.) */
    CU_ASSERT_TRUE(greedy_worse > 0);
}

/* An instance whose optimum (12) is above the largest live sum (11): the search proves it, and
 * the proven bound says so, minimizing and deciding. */
static void test_proven_bound(void)
{
    static const gp_buffer src[] = {{0, 6, 1, -1}, {0, 3, 4, -1}, {5, 6, 5, -1},
                                    {1, 5, 1, -1}, {4, 6, 5, -1}, {2, 4, 3, -1},
                                    {2, 5, 1, -1}, {3, 5, 3, -1}, {0, 1, 5, -1}};
    enum { N = sizeof src / sizeof *src };
    gp_buffer b[N];
    char why[256];
    memcpy(b, src, sizeof b);
    gp_assign_opts o = {GP_STRATEGY_AUTO, 5.0, 0};
    gp_assign_result r;
    CU_ASSERT_EQUAL(gp_assign(b, N, &o, &r), GP_ASSIGN_OK);
    CU_ASSERT_EQUAL(r.lower_bound, 11);
    CU_ASSERT_EQUAL(r.peak, 12);
    CU_ASSERT_TRUE(r.optimal);
    CU_ASSERT_EQUAL(r.proven_bound, 12);
    CU_ASSERT_EQUAL(gp_assign_check(b, N, 12, why, sizeof why), 0);
    memcpy(b, src, sizeof b);
    gp_assign_opts c = {GP_STRATEGY_EXACT, 5.0, 11};
    CU_ASSERT_EQUAL(gp_assign(b, N, &c, &r), GP_ASSIGN_NO_FIT);
    CU_ASSERT_EQUAL(r.proven_bound, 12);
    memcpy(b, src, sizeof b);
    gp_assign_opts g = {GP_STRATEGY_GREEDY, 5.0, 0};
    CU_ASSERT_EQUAL(gp_assign(b, N, &g, &r), GP_ASSIGN_OK);
    CU_ASSERT_EQUAL(r.proven_bound, r.optimal ? r.peak : 11);
}

/* Larger instances at a capacity the heuristics miss but a known packing meets: buffers cut from
 * a full rectangle of time x bytes, so the optimum equals the lower bound. */
static void test_exact_packs_tight(void)
{
    uint64_t seed = 31337;
    char why[256];
    int solved = 0;
    for (int round = 0; round < 30; round++) {
        gp_buffer b[64];
        int n = 0;
        const int64_t cap = 64, T = 16;
        /* Split [0, cap) into rows; split each row's time into random pieces. */
        for (int64_t off = 0; off < cap && n < 60;) {
            int64_t h = 1 + (int64_t)(gp_test_rand(&seed) % 12);
            if (off + h > cap)
                h = cap - off;
            for (int64_t t = 0; t < T && n < 64;) {
                int64_t len = 1 + (int64_t)(gp_test_rand(&seed) % 8);
                if (t + len > T || n == 63)
                    len = T - t;
                b[n++] = (gp_buffer){t, t + len, h, -1};
                t += len;
            }
            off += h;
            if (n >= 60 && off < cap) {
                b[n++] = (gp_buffer){0, T, cap - off, -1};
                off = cap;
            }
        }
        CU_ASSERT_EQUAL(gp_assign_lower_bound(b, (size_t)n), cap);
        gp_assign_opts o = {GP_STRATEGY_AUTO, 10.0, cap};
        gp_assign_result r;
        gp_assign_status st = gp_assign(b, (size_t)n, &o, &r);
        CU_ASSERT_TRUE(st == GP_ASSIGN_OK || st == GP_ASSIGN_NO_FIT);
        solved += st == GP_ASSIGN_OK;
        CU_ASSERT_EQUAL(gp_assign_check(b, (size_t)n, st == GP_ASSIGN_OK ? cap : 0, why, sizeof why), 0);
    }
    CU_ASSERT_EQUAL(solved, 30);
}

/* ---- CSV ---- */

static void test_csv_round_trip(void)
{
    const char *text = "id,lower,upper,size\r\nfirst,0,3,4\r\nsecond,3,9,4\r\nx y,-2,9,9223372036854775807\r\n";
    gp_csv *c = NULL, *d = NULL;
    char err[256];
    CU_ASSERT_EQUAL_FATAL(gp_csv_parse(text, strlen(text), "t.csv", &c, err, sizeof err), 0);
    CU_ASSERT_EQUAL(c->n, 3);
    CU_ASSERT_FALSE(c->has_offsets);
    CU_ASSERT_STRING_EQUAL(c->ids[2], "x y");
    CU_ASSERT_EQUAL(c->buf[2].lower, -2);
    CU_ASSERT_EQUAL(c->buf[2].size, INT64_MAX);
    for (size_t i = 0; i < c->n; i++)
        c->buf[i].offset = 10 * (int64_t)i;
    const char *path = gp_test_tmpfile(".csv");
    char saved[4096];
    snprintf(saved, sizeof saved, "%s", path);
    CU_ASSERT_EQUAL(gp_csv_write(saved, c, err, sizeof err), 0);
    char *back = gp_test_read_file(saved, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(back);
    CU_ASSERT_STRING_EQUAL(back, "id,lower,upper,size,offset\nfirst,0,3,4,0\nsecond,3,9,4,10\n"
                                 "x y,-2,9,9223372036854775807,20\n");
    free(back);
    CU_ASSERT_EQUAL_FATAL(gp_csv_read(saved, &d, err, sizeof err), 0);
    CU_ASSERT_TRUE(d->has_offsets);
    CU_ASSERT_EQUAL(d->n, c->n);
    for (size_t i = 0; i < c->n && i < d->n; i++) {
        CU_ASSERT_STRING_EQUAL(d->ids[i], c->ids[i]);
        CU_ASSERT_EQUAL(d->buf[i].lower, c->buf[i].lower);
        CU_ASSERT_EQUAL(d->buf[i].upper, c->buf[i].upper);
        CU_ASSERT_EQUAL(d->buf[i].size, c->buf[i].size);
        CU_ASSERT_EQUAL(d->buf[i].offset, c->buf[i].offset);
    }
    gp_csv_free(c);
    gp_csv_free(d);
    remove(saved);

    /* Columns in another order; a header alone is an empty problem; no final newline is fine. */
    const char *shuffled = "size,upper,lower,id\n4,3,0,a\n5,6,2,b";
    CU_ASSERT_EQUAL_FATAL(gp_csv_parse(shuffled, strlen(shuffled), "s.csv", &c, err, sizeof err), 0);
    CU_ASSERT_EQUAL(c->n, 2);
    CU_ASSERT_EQUAL(c->buf[1].size, 5);
    CU_ASSERT_EQUAL(c->buf[1].upper, 6);
    CU_ASSERT_EQUAL(c->buf[1].lower, 2);
    gp_csv_free(c);
    const char *header = "id,lower,upper,size\n";
    CU_ASSERT_EQUAL_FATAL(gp_csv_parse(header, strlen(header), "h.csv", &c, err, sizeof err), 0);
    CU_ASSERT_EQUAL(c->n, 0);
    gp_csv_free(c);
    gp_csv_free(NULL);
}

static void test_csv_errors(void)
{
    static const struct {
        const char *text;
        const char *message;
    } cases[] = {
        {"",
         "bad.csv:1:1: error: missing header line id,lower,upper,size"},
        {"\n0,1,2,3\n",
         "bad.csv:1:1: error: missing header line id,lower,upper,size\n\n^"},
        {"id,lower,upper,bytes\n",
         "bad.csv:1:16: error: unknown column 'bytes' in the header; expected id,lower,upper,size[,offset]\nid,lower,upper,bytes\n               ^"},
        {"id,lower,upper,size,lower\n",
         "bad.csv:1:21: error: column 'lower' appears twice\nid,lower,upper,size,lower\n                    ^"},
        {"id,lower,upper\n",
         "bad.csv:1:15: error: the header has no 'size' column\nid,lower,upper\n              ^"},
        {"id,lower,upper,size\na,0,1\n",
         "bad.csv:2:6: error: 3 fields, the header has 4\na,0,1\n     ^"},
        {"id,lower,upper,size\na,0,1,2,3\n",
         "bad.csv:2:9: error: 5 fields, the header has 4\na,0,1,2,3\n        ^"},
        {"id,lower,upper,size\na,0,1,2\nb,x,1,2\n",
         "bad.csv:3:3: error: lower 'x' is not a 64-bit integer\nb,x,1,2\n  ^"},
        {"id,lower,upper,size\na,0,1,12a\n",
         "bad.csv:2:7: error: size '12a' is not a 64-bit integer\na,0,1,12a\n      ^"},
        {"id,lower,upper,size\na,0,1,\n",
         "bad.csv:2:7: error: size '' is not a 64-bit integer\na,0,1,\n      ^"},
        {"id,lower,upper,size\na,0, 1,2\n",
         "bad.csv:2:5: error: upper ' 1' is not a 64-bit integer\na,0, 1,2\n    ^"},
        {"id,lower,upper,size\na,0,1,99999999999999999999\n",
         "bad.csv:2:7: error: size '99999999999999999999' is not a 64-bit integer\na,0,1,99999999999999999999\n      ^"},
        {"id,lower,upper,size\na,5,5,2\n",
         "bad.csv:2:3: error: empty lifespan: lower 5 >= upper 5\na,5,5,2\n  ^"},
        {"id,lower,upper,size\na,0,1,0\n",
         "bad.csv:2:7: error: size 0 is not positive\na,0,1,0\n      ^"},
        {"id,lower,upper,size\na,0,1,-4\n",
         "bad.csv:2:7: error: size -4 is not positive\na,0,1,-4\n      ^"},
        {"id,lower,upper,size,offset\na,0,1,4,-1\n",
         "bad.csv:2:9: error: offset -1 is negative\na,0,1,4,-1\n        ^"},
        {"id,lower,upper,size\n,0,1,4\n",
         "bad.csv:2:1: error: empty id\n,0,1,4\n^"},
        {"id,lower,upper,size\na,0,1,4\nb,0,1,4\na,2,3,4\n",
         "bad.csv:4:1: error: duplicate id 'a', first on line 2\na,2,3,4\n^"},
        {"id,lower,upper,size\na,0,1,4\n\nb,0,1,4\n",
         "bad.csv:3:1: error: empty line\n\n^"},
        {"id,lower,upper,size\na,0,1,4\n\n\n",
         "bad.csv:3:1: error: empty line\n\n^"},
        {"a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q\n",
         "bad.csv:1:33: error: more than 16 columns in the header\na,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q\n                                ^"},
        {"id,lower,upper,size\na,0,1,4,,,,,,,,,,,,,,,,,,\n",
         "bad.csv:2:9: error: 22 fields, the header has 4\na,0,1,4,,,,,,,,,,,,,,,,,,\n        ^"},
    };
    char err[1024];
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        gp_csv *c = (gp_csv *)1;
        int rc = gp_csv_parse(cases[k].text, strlen(cases[k].text), "bad.csv", &c, err, sizeof err);
        CU_ASSERT_EQUAL(rc, -1);
        CU_ASSERT_PTR_NULL(c);
        CU_ASSERT_STRING_EQUAL(err, cases[k].message);
        if (strcmp(err, cases[k].message) != 0)
            fprintf(stderr, "\ncase %zu: got '%s'\n", k, err);
    }
    /* A NUL byte inside the text. */
    const char nul[] = "id,lower,upper,size\na,0,1,4\nb,0\0,1,4\n";
    gp_csv *c = NULL;
    CU_ASSERT_EQUAL(gp_csv_parse(nul, sizeof nul - 1, "bad.csv", &c, err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err, "bad.csv:3:4: error: NUL byte (is this a binary file?)"); /* the line is not quoted */
    /* An err too small for the quoted line and its caret: the message alone. */
    char small[64];
    const char *xl = "id,lower,upper,size\na,0,1,2\nb,x,1,2\n";
    CU_ASSERT_EQUAL(gp_csv_parse(xl, strlen(xl), "bad.csv", &c, small, sizeof small), -1);
    CU_ASSERT_STRING_EQUAL(small, "bad.csv:3:3: error: lower 'x' is not a 64-bit integer");
    /* A missing file. */
    CU_ASSERT_EQUAL(gp_csv_read("/nonexistent/dir/x.csv", &c, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "/nonexistent/dir/x.csv: cannot read ("));
    /* Random damage never crashes and never leaks (run under ASan). */
    uint64_t seed = 5;
    for (int round = 0; round < 2000; round++) {
        char buf[128];
        size_t len = strlen(input12);
        memcpy(buf, input12, len);
        int edits = 1 + (int)(gp_test_rand(&seed) % 4);
        for (int k = 0; k < edits; k++)
            buf[gp_test_rand(&seed) % len] = ",\n0-9x\r"[gp_test_rand(&seed) % 7];
        len = (size_t)(gp_test_rand(&seed) % (len + 1));
        c = NULL;
        if (gp_csv_parse(buf, len, "fuzz.csv", &c, err, sizeof err) == 0) {
            CU_ASSERT_PTR_NOT_NULL(c);
            gp_csv_free(c);
        } else {
            CU_ASSERT_PTR_NULL(c);
            CU_ASSERT_EQUAL(strncmp(err, "fuzz.csv:", 9), 0);
        }
    }
}

static void test_buffers_main(void)
{
    char in[4096], out[4096], log[4096], err[256];
    snprintf(in, sizeof in, "%s", gp_test_tmpfile(".csv"));
    snprintf(out, sizeof out, "%s", gp_test_tmpfile(".csv"));
    snprintf(log, sizeof log, "%s", gp_test_tmpfile(".log"));
    CU_ASSERT_EQUAL_FATAL(gp_test_write_file(in, input12, strlen(input12)), 0);

    FILE *lf = fopen(log, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(lf);
    CU_ASSERT_EQUAL(gp_buffers_solve(in, out, 12, 5.0, GP_STRATEGY_AUTO, lf), 0);
    fclose(lf);
    char *text = gp_test_read_file(log, NULL);
    CU_ASSERT_PTR_NOT_NULL(text);
    CU_ASSERT_PTR_NOT_NULL(text ? strstr(text, "5 buffers, lower bound 12, peak 12 (1.0000x, optimal)") : NULL);
    free(text);
    gp_csv *c = NULL;
    CU_ASSERT_EQUAL_FATAL(gp_csv_read(out, &c, err, sizeof err), 0);
    CU_ASSERT_TRUE(c->has_offsets);
    CU_ASSERT_EQUAL(c->n, 5);
    CU_ASSERT_STRING_EQUAL(c->ids[0], "b1");
    CU_ASSERT_EQUAL(gp_assign_check(c->buf, c->n, 12, err, sizeof err), 0);
    gp_csv_free(c);
    remove(out);

    /* Minimize (no capacity). */
    lf = fopen(log, "w");
    CU_ASSERT_EQUAL(gp_buffers_solve(in, out, 0, 1.0, GP_STRATEGY_GREEDY, lf), 0);
    fclose(lf);
    remove(out);

    /* No fit below the lower bound: status 3, no output. */
    lf = fopen(log, "w");
    CU_ASSERT_EQUAL(gp_buffers_solve(in, out, 11, 1.0, GP_STRATEGY_AUTO, lf), 3);
    fclose(lf);
    FILE *o = fopen(out, "r");
    CU_ASSERT_PTR_NULL(o);
    if (o)
        fclose(o);

    /* Bad input: status 1 with the CSV message. */
    const char *bad = "id,lower,upper,size\na,3,1,4\n";
    CU_ASSERT_EQUAL_FATAL(gp_test_write_file(in, bad, strlen(bad)), 0);
    lf = fopen(log, "w");
    CU_ASSERT_EQUAL(gp_buffers_solve(in, out, 0, 1.0, GP_STRATEGY_AUTO, lf), 1);
    fclose(lf);
    text = gp_test_read_file(log, NULL);
    CU_ASSERT_PTR_NOT_NULL(text ? strstr(text, ":2:3: error: empty lifespan: lower 3 >= upper 1\na,3,1,4\n  ^\n") : NULL);
    free(text);
    lf = fopen(log, "w");
    CU_ASSERT_EQUAL(gp_buffers_solve("/nonexistent/x.csv", out, 0, 1.0, GP_STRATEGY_AUTO, lf), 1);
    fclose(lf);
    remove(in);
    remove(log);
}

void gp_suite_assign(void)
{
    static const gp_test_case tests[] = {
        {"input.12 fits at 12", test_input12},
        {"lower bound", test_lower_bound},
        {"edge inputs", test_edge_inputs},
        {"checker catches conflicts", test_checker},
        {"checker vs pairwise scan", test_checker_random},
        {"random instances are valid", test_random_valid},
        {"deterministic", test_deterministic},
        {"tree matches lists", test_tree_matches_lists},
        {"ruin and recreate keeps invariants", test_improve_invariants},
        {"completing a partial placement", test_improve_complete},
        {"auto on a large instance", test_auto_large},
        {"exact equals brute force", test_exact_vs_brute_force},
        {"exact packs tight instances", test_exact_packs_tight},
        {"proven bound above the live peak", test_proven_bound},
        {"csv round trip", test_csv_round_trip},
        {"csv errors", test_csv_errors},
        {"buffers main", test_buffers_main},
    };
    gp_test_add_suite("assign", NULL, NULL, tests, GP_TEST_COUNT(tests));
}
