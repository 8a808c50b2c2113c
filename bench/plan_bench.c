/* plan-bench: the whole planner (liveness, in-place, workspaces, assignment, check) on the example
 * models and a Llama-7B shape: arena against its lower bound and no reuse, the in-place saving,
 * and planning time (best of repeated builds). Usage: plan-bench [REPEATS] (default 50). */
#include <stdint.h>
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
static void row(const char *label, const char *file, const char **defs, int n_defs,
                unsigned backends, int repeats)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/examples/%s", GP_SOURCE_DIR, file);
    gp_diag *d = gp_diag_new(stderr);
    gp_dsl_opts o = {.defines = defs, .n_defines = n_defs};
    gp_graph *g = d ? gp_dsl_compile_file(path, &o, d) : NULL;
    gp_plan *p = NULL, *q = NULL;
    gp_plan_opts po = {.backends = backends};
    if (!g || gp_plan_build(g, &po, &p, d)) {
        printf("%-32s failed (see above)\n", label);
        goto done;
    }
    gp_plan_opts no_inplace = {.no_inplace = 1, .backends = backends};
    if (gp_plan_build(g, &no_inplace, &q, d)) {
        printf("%-32s failed without in-place\n", label);
        goto done;
    }
    double best = 1e30;
    for (int i = 0; i < repeats; i++) {
        gp_plan *r = NULL;
        double t0 = now_ms();
        int rc = gp_plan_build(g, &po, &r, d);
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
    printf("%-32s %6d %6d %10.2f %10.2f %7.4f %10.2f %10.2f %6d %9.1f %9.3f  %s\n", label,
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

/* A synthetic graph of about n tensors, built with the IR API: 8 shape classes [64, 64 << k];
 * each node adds the latest tensor of its class to an earlier one of that class, or applies gelu.
 * The earlier one is among the last 8 (a skip connection within a block) except for one node in
 * `long_per` (per mille), which reaches up to 500 back (a long skip: U-Net, encoder states).
 * Deterministic (xorshift). */
static gp_graph *synthetic_graph(int n, int long_per)
{
    gp_graph *g = gp_graph_new("synthetic");
    gp_diag *d = gp_diag_new(stderr);
    int (*cls)[512] = calloc(8, sizeof *cls); /* [8][512] ring of recent tensors per class */
    int cnt[8] = {0};
    uint64_t r = 88172645463325252ull;
    gp_attrs a = {{0}, {0}};
    for (int k = 0; k < 8; k++) {
        gp_dim sh[2] = {{64, -1}, {(int64_t)64 << k, -1}};
        char name[16];
        snprintf(name, sizeof name, "in%d", k);
        cls[k][0] = gp_graph_add_tensor(g, d, name, GP_TENSOR_INPUT, GP_F32, 2, sh, NULL,
                                        (gp_loc){0});
        cnt[k] = 1;
    }
    while (g->n_tensors < n) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        int k = (int)(r % 8);
        int last = cls[k][(cnt[k] - 1) % 512];
        int reach = (int)((r >> 20) % 1000) < long_per ? 500 : 8;
        int back = cnt[k] < reach ? cnt[k] : reach;
        int other = cls[k][(cnt[k] - 1 - (int)((r >> 8) % (uint64_t)back)) % 512];
        int in[2] = {last, other};
        int out = (r >> 40) % 4 ? gp_graph_add_node(g, d, GP_OP_ADD, in, 2, &a, NULL, 0, GP_F32,
                                                   NULL, (gp_loc){0})
                                : gp_graph_add_node(g, d, GP_OP_GELU, in, 1, &a, NULL, 0, GP_F32,
                                                   NULL, (gp_loc){0});
        if (out < 0)
            break;
        cls[k][cnt[k]++ % 512] = out;
    }
    free(cls);
    gp_diag_free(d);
    return g;
}

static void synthetic_row(int n, int long_per, int repeats)
{
    double t0 = now_ms();
    gp_graph *g = synthetic_graph(n, long_per);
    double build_ms = now_ms() - t0;
    gp_diag *d = gp_diag_new(stderr);
    gp_plan_opts o = {.strategy = GP_STRATEGY_GREEDY};
    double best = 1e30;
    gp_plan *p = NULL;
    for (int i = 0; i < repeats; i++) {
        gp_plan_free(p);
        p = NULL;
        t0 = now_ms();
        if (gp_plan_build(g, &o, &p, d))
            break;
        double t = now_ms() - t0;
        if (t < best)
            best = t;
    }
    if (p)
        printf("synthetic %-6d tensors, %5.1f%% long skips: %6d nodes  arena %.2f MiB  LB %.2f MiB  ratio %.4f  "
               "graph built in %.1f ms  planned (greedy) in %.1f ms  %s\n",
               p->n_tensors, long_per / 10.0, p->n_nodes, mib(p->regions[GP_REGION_ARENA].size),
               mib(p->lower_bound),
               (double)p->regions[GP_REGION_ARENA].size / (double)p->lower_bound, build_ms, best,
               p->method);
    else
        printf("synthetic %d: planning failed\n", n);
    gp_plan_free(p);
    gp_graph_free(g);
    gp_diag_free(d);
}

/* The model shapes the issue names, each at several context lengths. */
typedef struct {
    const char *label;
    const char *file;
    const char *defs[10];
    const char *ctx_param; /* the parameter holding the context length */
} shape;

static const shape shapes[] = {
    {"gpt2-117M", "gpt2.gplan", {0}, "n_positions"},
    {"gpt2-345M", "gpt2.gplan", {"n_layer=24", "n_embd=1024", "n_head=16"}, "n_positions"},
    {"gpt2-774M", "gpt2.gplan", {"n_layer=36", "n_embd=1280", "n_head=20"}, "n_positions"},
    {"gpt2-1558M", "gpt2.gplan", {"n_layer=48", "n_embd=1600", "n_head=25"}, "n_positions"},
    {"llama-7B", "llama.gplan",
     {"num_hidden_layers=32", "hidden_size=4096", "intermediate_size=11008",
      "num_attention_heads=32", "num_key_value_heads=32", "wtype=f16", "kv_type=f16"},
     "max_position_embeddings"},
    {"llama-70B", "llama.gplan",
     {"num_hidden_layers=80", "hidden_size=8192", "intermediate_size=28672",
      "num_attention_heads=64", "num_key_value_heads=8", "wtype=f16", "kv_type=f16"},
     "max_position_embeddings"},
};

int main(int argc, char **argv)
{
    int repeats = argc > 1 ? atoi(argv[1]) : 20;
    if (repeats < 1)
        repeats = 1;
    printf("%-32s %6s %6s %10s %10s %7s %10s %10s %6s %9s %9s  %s\n", "model", "tensors", "nodes",
           "arena MiB", "LB MiB", "ratio", "naive MiB", "no-inpl", "inpl", "extras KiB",
           "plan ms", "method");
    synthetic_row(10000, 10, repeats < 5 ? repeats : 5);
    synthetic_row(100000, 10, repeats < 3 ? repeats : 3);
    synthetic_row(10000, 1000, 1);  /* every skip long: a dense worst case */
    synthetic_row(100000, 1000, 1);
    row("tiny", "tiny.gplan", NULL, 0, 0, repeats);
    row("tinyllama T<=512", "llama.gplan", NULL, 0, 0, repeats);
    static const int ctx[] = {2048, 8192, 32768};
    static const char *batch[] = {"n_batch=512", "n_batch=1"};
    /* Workspaces for every backend (the default), then for the CPU alone: without cuBLAS's
     * 32 MiB workspace the peak is set by the model's own tensors. */
    static const unsigned backends[] = {0, GP_BACKEND_BIT(GP_BACKEND_CPU)};
    for (size_t k = 0; k < 2; k++)
    for (size_t m = 0; m < sizeof shapes / sizeof shapes[0]; m++)
        for (size_t c = 0; c < sizeof ctx / sizeof ctx[0]; c++)
            for (size_t b = 0; b < 2; b++) {
                const char *defs[12];
                char ctxdef[64], label[64];
                int n = 0;
                while (n < 10 && shapes[m].defs[n])
                    defs[n] = shapes[m].defs[n], n++;
                snprintf(ctxdef, sizeof ctxdef, "%s=%d", shapes[m].ctx_param, ctx[c]);
                defs[n++] = ctxdef;
                defs[n++] = batch[b];
                snprintf(label, sizeof label, "%s ctx %d T<=%s%s", shapes[m].label, ctx[c],
                         b ? "1" : "512", k ? " cpu" : "");
                row(label, shapes[m].file, defs, n, backends[k], repeats);
            }
    return 0;
}
