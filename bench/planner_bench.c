/* planner-bench: offset assignment on MiniMalloc's challenging instances, every real trace in
 * the data folder's traces/ (minimized, 10 s), and synthetic graph-like instances; prints a line
 * per instance as it finishes and one table at the end: lower bound, greedy and final peaks over
 * it, fit, the time to reach the final peak and the total time.
 * Usage: planner-bench [DATA_DIR] [FILTER] (DATA_DIR empty or absent: ../shared/data, else
 * ../../shared/data, next to the source tree; FILTER: only instances whose name contains it).
 * To add a row, call bench_row() with a name, the buffers and the options (see main). */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/assign.h"
#include "planner/csv.h"

#ifndef GP_SOURCE_DIR
#define GP_SOURCE_DIR "."
#endif

enum { MAX_ROWS = 128 };

typedef struct {
    char name[48];
    size_t n;
    int64_t lb;
    double greedy, final; /* peak / lower bound */
    double bound;         /* proven bound / lower bound */
    char fits[8];
    double greedy_s, best_s, total_s;
    char method[32];
    int valid;
} row;

static row rows[MAX_ROWS];
static int nrows;
static const char *filter;

static void print_header(void)
{
    printf("%-24s %7s %15s %9s %9s %8s %5s %8s %8s %8s  %s\n", "instance", "n", "lower bound",
           "greedy/LB", "final/LB", "bound/LB", "fits", "greedy s", "to best", "total s", "method");
}

static void print_row(const row *w)
{
    printf("%-24s %7zu %15lld %9.4f %9.4f %8.4f %5s %8.3f %8.3f %8.3f  %s%s\n", w->name, w->n,
           (long long)w->lb, w->greedy, w->final, w->bound, w->fits, w->greedy_s, w->best_s,
           w->total_s, w->method, w->valid ? "" : "  INVALID ANSWER");
    fflush(stdout);
}

/* One row: the heuristics alone, then the given strategy with capacity and time limit. Every
 * answer goes through the independent checker. */
static void bench_row(const char *name, const gp_buffer *src, size_t n, int64_t capacity,
                      gp_strategy strategy, double limit)
{
    if (filter && !strstr(name, filter))
        return;
    gp_buffer *b = malloc((n ? n : 1) * sizeof *b);
    if (!b) {
        printf("%-24s out of memory\n", name);
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
    int ok = st != GP_ASSIGN_ERROR && gp_assign_check(b, n, capacity, why, sizeof why) == 0;
    if (st == GP_ASSIGN_NO_FIT)
        ok = gp_assign_check(b, n, 0, why, sizeof why) == 0;
    double lb = r.lower_bound > 0 ? (double)r.lower_bound : 1.0;
    row w;
    memset(&w, 0, sizeof w);
    snprintf(w.name, sizeof w.name, "%s", name);
    w.n = n;
    w.lb = r.lower_bound;
    w.greedy = (double)rg.peak / lb;
    w.final = (double)r.peak / lb;
    w.bound = (double)r.proven_bound / lb;
    snprintf(w.fits, sizeof w.fits, "%s",
             capacity > 0 ? (st == GP_ASSIGN_OK ? "yes" : "NO") : (r.optimal ? "opt" : "-"));
    w.greedy_s = rg.seconds;
    w.best_s = r.seconds_best;
    w.total_s = r.seconds;
    snprintf(w.method, sizeof w.method, "%s", r.method);
    w.valid = ok && ok_g;
    print_row(&w);
    if (!w.valid)
        printf("    %s\n", why);
    if (nrows < MAX_ROWS)
        rows[nrows++] = w;
    free(b);
}

static void csv_row(const char *dir, const char *file, const char *name, int64_t capacity,
                    gp_strategy strategy, double limit)
{
    if (filter && !strstr(name, filter))
        return;
    char path[8400], err[512];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    gp_csv *c = NULL;
    if (gp_csv_read(path, &c, err, sizeof err) != 0) {
        printf("%-24s skipped: %s\n", name, err);
        return;
    }
    bench_row(name, c->buf, c->n, capacity, strategy, limit);
    gp_csv_free(c);
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every *.csv under DIR/traces, in name order: minimized within 10 s each. */
static void trace_rows(const char *dir)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/traces", dir);
    DIR *d = opendir(path);
    if (!d) {
        printf("%-24s skipped: cannot open %s\n", "traces", path);
        return;
    }
    char *names[256];
    int nn = 0;
    struct dirent *e;
    while ((e = readdir(d)) && nn < 256) {
        size_t len = strlen(e->d_name);
        if (len > 4 && strcmp(e->d_name + len - 4, ".csv") == 0) {
            names[nn] = malloc(len + 1);
            if (!names[nn])
                break;
            memcpy(names[nn++], e->d_name, len + 1);
        }
    }
    closedir(d);
    qsort(names, (size_t)nn, sizeof *names, name_cmp);
    for (int k = 0; k < nn; k++) {
        char file[4200], name[48];
        snprintf(file, sizeof file, "traces/%s", names[k]);
        snprintf(name, sizeof name, "%.*s", (int)(strlen(names[k]) - 4), names[k]);
        csv_row(dir, file, name, 0, GP_STRATEGY_AUTO, 10.0);
        free(names[k]);
    }
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

/* Graph-like instances, two tensors per step, 256-byte aligned. Default: 87% are read by the next
 * 1-3 steps, 12.8% are skip connections living 5-44 steps, 0.2% live 100-2099 steps (masks,
 * rotary tables); sizes from 4 KiB to 48 MiB. Heavy, a harder mix like compiler traces with
 * sharded tensors: 70% live 1-4 steps, 25% 4-63, 5% 50-3049; sizes log-uniform over 1 KiB - 8 GiB
 * (the largest ~6% of the peak). */
static gp_buffer *synthetic(size_t n, uint64_t seed, int heavy)
{
    gp_buffer *b = malloc(n * sizeof *b);
    if (!b)
        return NULL;
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        int64_t t = (int64_t)(i / 2), life, size;
        uint64_t r = rng(&s) % 1000;
        if (!heavy) {
            life = r < 870 ? 1 + (int64_t)(rng(&s) % 3)
                   : r < 998 ? 5 + (int64_t)(rng(&s) % 40)
                             : 100 + (int64_t)(rng(&s) % 2000);
            uint64_t z = rng(&s) % 100;
            size = z < 60 ? 4096 + (int64_t)(rng(&s) % 65536)
                   : z < 95 ? 1048576 + (int64_t)(rng(&s) % 4194304)
                            : 16777216 + (int64_t)(rng(&s) % 33554432);
        } else {
            life = r < 700 ? 1 + (int64_t)(rng(&s) % 4)
                   : r < 950 ? 4 + (int64_t)(rng(&s) % 60)
                             : 50 + (int64_t)(rng(&s) % 3000);
            size = (int64_t)pow(2.0, 10.0 + 23.0 * (double)(rng(&s) % 100000) / 100000.0);
        }
        b[i] = (gp_buffer){t, t + life, (size + 255) / 256 * 256, 0};
    }
    return b;
}

static void synthetic_row(const char *kind, size_t n, uint64_t seed, double limit)
{
    char name[64];
    snprintf(name, sizeof name, "synthetic%s-%.1fk", kind, (double)n / 1000.0);
    if (filter && !strstr(name, filter))
        return;
    gp_buffer *b = synthetic(n, seed, kind[0] != 0);
    if (!b) {
        printf("%-24s out of memory\n", name);
        return;
    }
    bench_row(name, b, n, 0, GP_STRATEGY_AUTO, limit);
    free(b);
}

int main(int argc, char **argv)
{
    char dir[4096];
    if (argc > 1 && argv[1][0]) {
        snprintf(dir, sizeof dir, "%s", argv[1]);
    } else {
        /* The data sits beside the checkout, or beside the folder of worktrees. */
        snprintf(dir, sizeof dir, "%s", GP_SOURCE_DIR "/../shared/data");
        DIR *d = opendir(dir);
        if (d)
            closedir(d);
        else
            snprintf(dir, sizeof dir, "%s", GP_SOURCE_DIR "/../../shared/data");
    }
    filter = argc > 2 ? argv[2] : NULL;
    print_header();
    static const char *const mm[] = {"A", "C", "E", "G", "I", "K"};
    double mm_total = 0;
    for (size_t k = 0; k < sizeof mm / sizeof *mm; k++) {
        char file[64], name[64];
        snprintf(file, sizeof file, "minimalloc/%s.1048576.csv", mm[k]);
        snprintf(name, sizeof name, "minimalloc-%s", mm[k]);
        int before = nrows;
        csv_row(dir, file, name, 1048576, GP_STRATEGY_AUTO, 10.0);
        if (nrows > before)
            mm_total += rows[nrows - 1].total_s;
    }
    csv_row(dir, "minimalloc/input.12.csv", "minimalloc-input.12", 12, GP_STRATEGY_AUTO, 10.0);
    trace_rows(dir);
    synthetic_row("", 10000, 0x1234567 + 10000, 10.0);
    synthetic_row("", 100000, 0x1234567 + 100000, 10.0);
    synthetic_row("-heavy", 18700, 3, 10.0);
    synthetic_row("-heavy", 28500, 7, 10.0);

    printf("\nSummary (bound: proven by the exact search, at least the lower bound; to best:\n"
           "seconds until the final peak was first reached)\n");
    print_header();
    for (int k = 0; k < nrows; k++)
        print_row(&rows[k]);
    if (mm_total > 0)
        printf("MiniMalloc challenging instances, total time: %.3f s\n", mm_total);
    return 0;
}
