/* planner-bench: offset assignment on MiniMalloc's challenging instances, a large real trace and
 * synthetic graph-like instances; prints lower bound, greedy and final peaks, fit and time.
 * Usage: planner-bench [DATA_DIR] (default: ../shared/data next to the source tree). To add a row,
 * call bench_row() with a name, the buffers and the options (see main). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/assign.h"
#include "planner/csv.h"

#ifndef GP_SOURCE_DIR
#define GP_SOURCE_DIR "."
#endif

static void print_header(void)
{
    printf("%-22s %7s %15s %9s %9s %5s %8s %8s  %s\n", "instance", "n", "lower bound", "greedy/LB",
           "final/LB", "fits", "greedy s", "final s", "method");
}

/* One table row: the heuristics alone, then the given strategy with capacity and time limit.
 * Every answer goes through the independent checker. */
static void bench_row(const char *name, const gp_buffer *src, size_t n, int64_t capacity,
                      gp_strategy strategy, double limit)
{
    gp_buffer *b = malloc((n ? n : 1) * sizeof *b);
    if (!b) {
        printf("%-22s out of memory\n", name);
        return;
    }
    char why[512];
    memcpy(b, src, n * sizeof *b);
    gp_assign_opts g = {GP_STRATEGY_GREEDY, limit, 0};
    gp_assign_result rg;
    gp_assign(b, n, &g, &rg);
    int ok_g = rg.status != GP_ASSIGN_ERROR && gp_assign_check(b, n, 0, why, sizeof why) == 0;
    memcpy(b, src, n * sizeof *b);
    gp_assign_opts o = {strategy, limit, capacity};
    gp_assign_result r;
    gp_assign_status st = gp_assign(b, n, &o, &r);
    int ok = st != GP_ASSIGN_ERROR && gp_assign_check(b, n, 0, why, sizeof why) == 0;
    double lb = r.lower_bound > 0 ? (double)r.lower_bound : 1.0;
    const char *fits = capacity > 0 ? (st == GP_ASSIGN_OK ? "yes" : "NO") : (r.optimal ? "opt" : "-");
    printf("%-22s %7zu %15lld %9.4f %9.4f %5s %8.3f %8.3f  %s%s\n", name, n, (long long)r.lower_bound,
           (double)rg.peak / lb, (double)r.peak / lb, fits, rg.seconds, r.seconds, r.method,
           ok && ok_g ? "" : "  INVALID ANSWER");
    if (!ok || !ok_g)
        printf("    %s\n", why);
    fflush(stdout);
    free(b);
}

static void csv_row(const char *dir, const char *file, const char *name, int64_t capacity,
                    gp_strategy strategy, double limit)
{
    char path[8192], err[512];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    gp_csv *c = NULL;
    if (gp_csv_read(path, &c, err, sizeof err) != 0) {
        printf("%-22s skipped: %s\n", name, err);
        return;
    }
    bench_row(name, c->buf, c->n, capacity, strategy, limit);
    gp_csv_free(c);
}

static uint64_t rng(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

/* A graph-like instance: two tensors per step; 87% are read by the next 1-3 steps, 12.8% are
 * skip connections living 5-44 steps, 0.2% live 100-2099 steps (masks, rotary tables); sizes from
 * 4 KiB to 48 MiB, 256-byte aligned. */
static gp_buffer *synthetic(size_t n, uint64_t seed)
{
    gp_buffer *b = malloc(n * sizeof *b);
    if (!b)
        return NULL;
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        int64_t t = (int64_t)(i / 2);
        uint64_t r = rng(&s) % 1000;
        int64_t life = r < 870 ? 1 + (int64_t)(rng(&s) % 3)
                       : r < 998 ? 5 + (int64_t)(rng(&s) % 40)
                                 : 100 + (int64_t)(rng(&s) % 2000);
        uint64_t z = rng(&s) % 100;
        int64_t size = z < 60 ? 4096 + (int64_t)(rng(&s) % 65536)
                       : z < 95 ? 1048576 + (int64_t)(rng(&s) % 4194304)
                                : 16777216 + (int64_t)(rng(&s) % 33554432);
        b[i] = (gp_buffer){t, t + life, (size + 255) / 256 * 256, 0};
    }
    return b;
}

static void synthetic_row(size_t n, double limit)
{
    char name[64];
    snprintf(name, sizeof name, "synthetic-%zuk", n / 1000);
    gp_buffer *b = synthetic(n, 0x1234567 + n);
    if (!b) {
        printf("%-22s out of memory\n", name);
        return;
    }
    bench_row(name, b, n, 0, GP_STRATEGY_AUTO, limit);
    free(b);
}

int main(int argc, char **argv)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", argc > 1 ? argv[1] : GP_SOURCE_DIR "/../shared/data");
    print_header();
    static const char *const mm[] = {"A", "C", "E", "G", "I", "K"};
    for (size_t k = 0; k < sizeof mm / sizeof *mm; k++) {
        char file[64], name[64];
        snprintf(file, sizeof file, "minimalloc/%s.1048576.csv", mm[k]);
        snprintf(name, sizeof name, "minimalloc-%s", mm[k]);
        csv_row(dir, file, name, 1048576, GP_STRATEGY_AUTO, 10.0);
    }
    csv_row(dir, "minimalloc/input.12.csv", "minimalloc-input.12", 12, GP_STRATEGY_AUTO, 10.0);
    csv_row(dir, "traces/iopddl_Y_1.csv", "iopddl_Y_1", 0, GP_STRATEGY_AUTO, 2.0);
    synthetic_row(10000, 2.0);
    synthetic_row(100000, 2.0);
    return 0;
}
