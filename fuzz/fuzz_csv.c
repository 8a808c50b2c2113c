/* Fuzz target: MiniMalloc CSV text through gp_csv_parse, then the parsed buffers through the
 * greedy assigner and the independent checker (what `gplan-compile --buffers` does). */
#include <string.h>

#include "fuzz/fuzz.h"
#include "planner/csv.h"

/* The heuristics are about n log n; more buffers only slow the fuzzer down. */
enum { ASSIGN_MAX_BUFFERS = 2000 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gp_csv *c = NULL;
    char err[512];
    int rc = gp_csv_parse((const char *)data, size, "fuzz.csv", &c, err, sizeof err);
    GP_FUZZ_CHECK((rc == 0) == (c != NULL));
    GP_FUZZ_CHECK(rc == 0 || strstr(err, "fuzz.csv:") == err);
    if (!c)
        return 0;
    for (size_t i = 0; i < c->n; i++)
        GP_FUZZ_CHECK(c->buf[i].lower < c->buf[i].upper && c->buf[i].size > 0 && c->ids[i][0]);
    if (c->has_offsets) /* the given offsets, checked as they are: any answer, no crash */
        (void)gp_assign_check(c->buf, c->n, 0, err, sizeof err);
    if (c->n <= ASSIGN_MAX_BUFFERS) {
        gp_assign_opts o = {GP_STRATEGY_GREEDY, 0, 0};
        gp_assign_result r;
        gp_assign_status st = gp_assign(c->buf, c->n, &o, &r);
        if (st == GP_ASSIGN_OK) {
            if (gp_assign_check(c->buf, c->n, 0, err, sizeof err) != 0) {
                fprintf(stderr, "%s\n", err);
                GP_FUZZ_CHECK(!"the greedy answer fails the checker");
            }
            GP_FUZZ_CHECK(r.peak >= r.lower_bound);
            GP_FUZZ_CHECK(r.lower_bound == gp_assign_lower_bound(c->buf, c->n));
        }
    }
    gp_csv_free(c);
    return 0;
}
