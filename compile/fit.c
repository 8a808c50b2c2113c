/* Memory budgets (gplan-compile --memory, --fit): a budget's text, the parameter that grows a
 * program's memory, and the search for its largest value whose plan fits. */
#include "compile/compile_impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "family/family.h"

int gp_budget_parse(const char *s, char *dev, size_t dev_len, int64_t *bytes, char *err,
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

const char *gp_program_fit_param(const gp_program *p, int64_t *limit)
{
    const gp_family *fam = gp_family_by_name(p->g->name);
    const char *param = NULL;
    int64_t hi = 0;
    if (gp_program_param(p, "n_seq") > 0)
        param = gp_program_param(p, "kv_pool") > 0 ? "kv_pool" : "n_seq";
    else if (fam && fam->ctx_param && (hi = gp_program_param(p, fam->ctx_param)) > 0)
        param = fam->ctx_param;
    if (limit)
        *limit = param && hi > 0 ? hi : 0;
    return param;
}

typedef struct {
    const gp_program *p;
    const char *param;
    gp_plan_opts po;  /* the caller's, with the heuristics alone */
    int64_t budget;
} fit_ctx;

/* 1 when the plan at v fits, 0 when not, -1 when it cannot be built; *m its bytes. The program
 * compiled again reads the GGUF file of c->p (no diagnostics printed: the message says which
 * value failed). */
static int probe(const fit_ctx *c, int64_t v, gp_plan_memory *m, char *err, size_t err_len)
{
    char e[4096];
    gp_plan *plan = NULL;
    gp_program *q = gp_program_redefine(c->p, c->param, v, NULL, 1, e, sizeof e);
    int rc = q && gp_program_plan(q, &c->po, &plan, e, sizeof e) == 0 ? 0 : -1;
    gp_program_free(q);
    if (rc) {
        snprintf(err, err_len, "%s: with %s=%lld: %.*s", c->p->name, c->param, (long long)v,
                 (int)strcspn(e, "\n"), e);
        return -1;
    }
    gp_plan_memory_of(plan, m);
    gp_plan_free(plan);
    return m->total <= c->budget;
}

int gp_program_fit(const gp_program *p, const char *param, int64_t hi, const gp_plan_opts *o,
                   int64_t budget, int64_t *best, gp_plan_memory *bm, char *err, size_t err_len)
{
    fit_ctx c = {p, param, o ? *o : gp_plan_defaults(), budget};
    c.po.strategy = GP_STRATEGY_GREEDY;
    gp_plan_memory m = {0};
    int r = probe(&c, 1, &m, err, err_len);
    if (r <= 0) {
        *bm = m;
        return r;
    }
    int64_t lo = 1; /* fits */
    *bm = m;
    if (hi <= 0) { /* no limit: double until one does not fit */
        for (hi = 2;; hi *= 2) {
            if (hi > ((int64_t)1 << 30)) {
                *best = lo;
                return 1;
            }
            r = probe(&c, hi, &m, err, err_len);
            if (r < 0)
                return -1;
            if (!r)
                break;
            lo = hi;
            *bm = m;
        }
    } else {
        r = probe(&c, hi, &m, err, err_len);
        if (r < 0)
            return -1;
        if (r) {
            *best = hi;
            *bm = m;
            return 1;
        }
    }
    while (hi - lo > 1) { /* lo fits, hi does not */
        int64_t mid = lo + (hi - lo) / 2;
        r = probe(&c, mid, &m, err, err_len);
        if (r < 0)
            return -1;
        if (r) {
            lo = mid;
            *bm = m;
        } else {
            hi = mid;
        }
    }
    *best = lo;
    return 1;
}
