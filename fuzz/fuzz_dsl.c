/* Fuzz target: graph source text through the whole compiler (scanner, parser, lowering, shape
 * checks), then the planner and a plan file round trip for the graphs that compile. */
#include <string.h>

#include "dsl/dsl.h"
#include "fuzz/fuzz.h"
#include "planner/planner.h"

/* Planning is linear in nodes but a 100000-iteration loop is legal; keep each input fast. */
enum { PLAN_MAX_NODES = 5000 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gp_diag *d = gp_diag_new(NULL);
    GP_FUZZ_CHECK(d != NULL);
    gp_graph *g = gp_dsl_compile_string("fuzz.gplan", (const char *)data, size, NULL, d);
    /* A graph comes back exactly when no error was reported. */
    GP_FUZZ_CHECK((g != NULL) == (gp_diag_count(d) == 0));
    gp_plan *p = NULL;
    gp_plan_opts o = {.strategy = GP_STRATEGY_GREEDY};
    if (g && g->n_nodes <= PLAN_MAX_NODES && gp_plan_build(g, &o, &p, d) == 0) {
        /* What the planner writes, the loader must accept, and writing it again gives the same bytes. */
        char err[512];
        unsigned char *b1 = NULL, *b2 = NULL;
        size_t n1 = 0, n2 = 0;
        gp_plan *q = NULL;
        GP_FUZZ_CHECK(gp_plan_write_mem(p, &b1, &n1, err, sizeof err) == 0);
        if (gp_plan_load_mem(b1, n1, "fuzz.plan", &q, err, sizeof err) != 0) {
            fprintf(stderr, "%s\n", err);
            GP_FUZZ_CHECK(!"the loader refuses a plan the planner wrote");
        }
        GP_FUZZ_CHECK(gp_plan_write_mem(q, &b2, &n2, err, sizeof err) == 0);
        GP_FUZZ_CHECK(n1 == n2 && memcmp(b1, b2, n1) == 0);
        free(b1);
        free(b2);
        gp_plan_free(q);
        gp_plan_free(p);
    }
    gp_graph_free(g);
    gp_diag_free(d);
    return 0;
}
