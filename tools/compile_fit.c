/* gplan-compile's memory budgets (tools/compile_fit.h). */
#include "tools/compile_fit.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void fit_bytes_of(const gp_plan *p, fit_bytes *b)
{
    b->weights = p->regions[GP_REGION_WEIGHTS].size;
    b->state = p->regions[GP_REGION_STATE].size;
    b->arena = p->regions[GP_REGION_ARENA].size;
    b->io = p->regions[GP_REGION_IO].size;
    b->extras = p->regions[GP_REGION_EXTRAS].size;
    b->total = b->weights + b->state + b->arena + b->io + b->extras;
}

int fit_parse_budget(const char *s, char *dev, size_t dev_len, int64_t *bytes, char *err,
                     size_t err_len)
{
    static const struct {
        const char *name;
        int shift;
    } units[] = {{"", 0},   {"B", 0},    {"K", 10},   {"KiB", 10}, {"M", 20}, {"MiB", 20},
                 {"G", 30}, {"GiB", 30}, {"T", 40},   {"TiB", 40}};
    const char *eq = strchr(s, '=');
    size_t n = eq ? (size_t)(eq - s) : 0;
    if (!eq || !((n == 3 && strncmp(s, "cpu", 3) == 0) || (n == 4 && strncmp(s, "cuda", 4) == 0))) {
        snprintf(err, err_len, "'%s': a budget is DEVICE=SIZE, DEVICE cpu or cuda (cuda=8GiB)", s);
        return -1;
    }
    snprintf(dev, dev_len, "%.*s", (int)n, s);
    const char *num = eq + 1;
    char *end;
    errno = 0;
    double v = strtod(num, &end);
    if (end == num || errno || !(v > 0)) {
        snprintf(err, err_len, "'%s': the size must be a positive number with an optional unit "
                               "(B, KiB, MiB, GiB, TiB)", s);
        return -1;
    }
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcasecmp(end, units[i].name) != 0)
            continue;
        double b = v * (double)((int64_t)1 << units[i].shift);
        if (b < 1 || b > 9.0e18) {
            snprintf(err, err_len, "'%s': the size is out of range", s);
            return -1;
        }
        *bytes = (int64_t)b;
        return 0;
    }
    snprintf(err, err_len, "'%s': unknown unit '%s' (B, KiB, MiB, GiB, TiB)", s, end);
    return -1;
}

/* 1 when the plan at v fits, 0 when not, -1 when it cannot be built; *b its bytes. */
static int probe(fit_build_fn build, void *ctx, int64_t v, int64_t budget, fit_bytes *b,
                 char *err, size_t err_len)
{
    gp_plan *p = NULL;
    if (build(ctx, v, &p, err, err_len) != 0)
        return -1;
    fit_bytes_of(p, b);
    gp_plan_free(p);
    return b->total <= budget;
}

int fit_search(fit_build_fn build, void *ctx, int64_t hi, int64_t budget, int64_t *best,
               fit_bytes *bb, char *err, size_t err_len)
{
    fit_bytes b;
    int r = probe(build, ctx, 1, budget, &b, err, err_len);
    if (r <= 0) {
        *bb = b;
        return r;
    }
    int64_t lo = 1; /* fits */
    *bb = b;
    if (hi <= 0) { /* no limit: double until one does not fit */
        for (hi = 2;; hi *= 2) {
            if (hi > ((int64_t)1 << 30)) {
                *best = lo;
                return 1;
            }
            r = probe(build, ctx, hi, budget, &b, err, err_len);
            if (r < 0)
                return -1;
            if (!r)
                break;
            lo = hi;
            *bb = b;
        }
    } else {
        r = probe(build, ctx, hi, budget, &b, err, err_len);
        if (r < 0)
            return -1;
        if (r) {
            *best = hi;
            *bb = b;
            return 1;
        }
    }
    while (hi - lo > 1) { /* lo fits, hi does not */
        int64_t mid = lo + (hi - lo) / 2;
        r = probe(build, ctx, mid, budget, &b, err, err_len);
        if (r < 0)
            return -1;
        if (r) {
            lo = mid;
            *bb = b;
        } else {
            hi = mid;
        }
    }
    *best = lo;
    return 1;
}

void fit_bytes_print(const fit_bytes *b, FILE *out)
{
    char h[5][32];
    fprintf(out, "weights %s, state %s, arena %s, io %s, extras %s",
            gp_plan_bytes_text(b->weights, h[0], sizeof h[0]),
            gp_plan_bytes_text(b->state, h[1], sizeof h[1]),
            gp_plan_bytes_text(b->arena, h[2], sizeof h[2]),
            gp_plan_bytes_text(b->io, h[3], sizeof h[3]),
            gp_plan_bytes_text(b->extras, h[4], sizeof h[4]));
}
