/* One way for the test suites to get a runnable model from an example graph (tests/testmodel.h). */
#include "tests/testmodel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsl/dsl.h"
#include "planner/planner.h"
#include "tests/testutil.h"

gp_model *gp_test_model(const char *example, const gp_test_model_opts *o, gp_graph **graph_out)
{
    static const gp_test_model_opts none = {0};
    if (!o)
        o = &none;
    char err[1024] = "";
    gp_diag *d = gp_diag_new(NULL);
    gp_dsl_opts dopts = {.defines = (const char **)o->defines,
                        .n_defines = o->n_defines,
                        .config_path = o->config,
                        .devices = o->devices};
    gp_plan_opts popts = {0};
    popts.n_devices = o->devices > 0 ? o->devices : 1;
    gp_graph *g = gp_dsl_compile_file(gp_test_path(example), &dopts, d);
    gp_plan *p = NULL;
    unsigned char *bytes = NULL;
    size_t len = 0;
    gp_model *m = NULL;
    if (g && !gp_plan_build(g, &popts, &p, d) &&
        !gp_plan_write_mem(p, &bytes, &len, err, sizeof err)) {
        m = gp_model_load_mem(bytes, len, example, err, sizeof err);
        if (m && o->seed && gp_model_random_weights(m, o->seed, err, sizeof err)) {
            gp_model_free(m);
            m = NULL;
        }
    }
    if (!m)
        fprintf(stderr, "\n  %s (%d device%s): %s%s\n", example, popts.n_devices,
                popts.n_devices == 1 ? "" : "s", gp_diag_text(d), err);
    free(bytes);
    gp_plan_free(p);
    if (graph_out && m)
        *graph_out = g;
    else
        gp_graph_free(g);
    gp_diag_free(d);
    return m;
}

int gp_test_eval_tokens(gp_session *s, int n, int start, int mult, float *out, int64_t vocab)
{
    int32_t ids[64], pos[64];
    if (n < 1 || n > 64)
        return -1;
    for (int i = 0; i < n; i++) {
        ids[i] = (int32_t)((int64_t)(start + i) * mult % vocab);
        pos[i] = start + i;
    }
    const float *l = NULL;
    /* Every row's logits: a graph with a rows input computes only the last one by default. */
    if (gp_session_set_tokens(s, ids, pos, n) || gp_session_set_rows(s, NULL, n) ||
        gp_session_eval(s) ||
        !(l = gp_session_output(s, "logits", NULL))) {
        fprintf(stderr, "\n  eval: %s\n", gp_session_error(s));
        return -1;
    }
    memcpy(out, l, sizeof(float) * (size_t)n * (size_t)vocab);
    return 0;
}
