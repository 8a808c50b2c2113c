/* plan-bench: the whole planner (liveness, in-place, workspaces, assignment, check) on the example
 * models and a Llama-7B shape: arena against its lower bound and no reuse, the in-place saving,
 * and planning time (best of repeated builds). Usage: plan-bench [REPEATS] (default 50). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "dsl/dsl.h"
#include "planner/planner.h"

#ifndef GP_SOURCE_DIR
#define GP_SOURCE_DIR "."
#endif

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static double mib(int64_t b)
{
    return (double)b / (1024.0 * 1024.0);
}

/* One row: a model file with -D overrides. */
static void row(const char *label, const char *file, const char **defs, int n_defs, int repeats)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/examples/%s", GP_SOURCE_DIR, file);
    gp_diag *d = gp_diag_new(stderr);
    gp_dsl_opts o = {.defines = defs, .n_defines = n_defs};
    gp_graph *g = d ? gp_dsl_compile_file(path, &o, d) : NULL;
    gp_plan *p = NULL, *q = NULL;
    if (!g || gp_plan_build(g, NULL, &p, d)) {
        printf("%-22s failed (see above)\n", label);
        goto done;
    }
    gp_plan_opts no_inplace = {.no_inplace = 1};
    if (gp_plan_build(g, &no_inplace, &q, d)) {
        printf("%-22s failed without in-place\n", label);
        goto done;
    }
    double best = 1e30;
    for (int i = 0; i < repeats; i++) {
        gp_plan *r = NULL;
        double t0 = now_ms();
        int rc = gp_plan_build(g, NULL, &r, d);
        double t = now_ms() - t0;
        gp_plan_free(r);
        if (rc)
            break;
        if (t < best)
            best = t;
    }
    int n_inplace = 0;
    for (int i = 0; i < p->n_tensors; i++)
        n_inplace += p->tensors[i].inplace_of >= 0;
    int64_t arena = p->regions[GP_REGION_ARENA].size;
    printf("%-22s %6d %6d %10.2f %10.2f %7.4f %10.2f %10.2f %6d %9.1f %9.3f  %s\n", label,
           p->n_tensors, p->n_nodes, mib(arena), mib(p->lower_bound),
           p->lower_bound ? (double)arena / (double)p->lower_bound : 1.0, mib(p->naive_bytes),
           mib(q->regions[GP_REGION_ARENA].size), n_inplace,
           (double)p->regions[GP_REGION_EXTRAS].size / 1024.0, best, p->method);
done:
    gp_plan_free(p);
    gp_plan_free(q);
    gp_graph_free(g);
    gp_diag_free(d);
}

int main(int argc, char **argv)
{
    int repeats = argc > 1 ? atoi(argv[1]) : 50;
    if (repeats < 1)
        repeats = 1;
    printf("%-22s %6s %6s %10s %10s %7s %10s %10s %6s %9s %9s  %s\n", "model", "tensors", "nodes",
           "arena MiB", "LB MiB", "ratio", "naive MiB", "no-inpl", "inpl", "extras KiB",
           "plan ms", "method");
    row("tiny", "tiny.gplan", NULL, 0, repeats);
    row("gpt2 117M T<=512", "gpt2.gplan", NULL, 0, repeats);
    static const char *gpt2_xl[] = {"n_layer=48", "n_embd=1600", "n_head=25"};
    row("gpt2 1558M T<=512", "gpt2.gplan", gpt2_xl, 3, repeats);
    row("tinyllama T<=512", "llama.gplan", NULL, 0, repeats);
    static const char *l7b[] = {"num_hidden_layers=32", "hidden_size=4096",
                                "intermediate_size=11008", "num_attention_heads=32",
                                "num_key_value_heads=32", "wtype=f16", "kv_type=f16"};
    row("llama-7B T<=512", "llama.gplan", l7b, 7, repeats);
    static const char *l7b_dec[] = {"num_hidden_layers=32", "hidden_size=4096",
                                    "intermediate_size=11008", "num_attention_heads=32",
                                    "num_key_value_heads=32", "wtype=f16", "kv_type=f16",
                                    "n_batch=1"};
    row("llama-7B T<=1", "llama.gplan", l7b_dec, 8, repeats);
    return 0;
}
