/* gplan-compile: checks a graph (*.gplan), prints its IR, and (later) plans it. A thin main:
 * argument parsing, then calls into gp_dsl and gp_ir. Exit status: 0 ok, 1 bad input, 2 bad usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsl/dsl.h"
#include "ir/ir.h"

#ifndef GP_VERSION
#define GP_VERSION "unknown"
#endif

enum { EXIT_OK = 0, EXIT_INPUT = 1, EXIT_USAGE = 2 };

typedef enum {
    MODE_CHECK,   /* --check: compile and print a one-line summary */
    MODE_EMIT_IR, /* --emit-ir: print the IR */
    /* DISPATCH POINT (planner): MODE_PLAN for `-o PLAN` goes here. */
    /* DISPATCH POINT (buffers): MODE_BUFFERS for `--buffers CSV` goes here. */
} mode;

typedef struct {
    mode mode;
    const char *input;         /* the *.gplan file */
    const char **defines;      /* [n_defines] "NAME=VALUE" */
    int n_defines;
    const char *config;        /* --config FILE or NULL */
    /* DISPATCH POINT: options of later modes (output path, strategy, ...) go here. */
} options;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: gplan-compile --check FILE [options]\n"
            "       gplan-compile --emit-ir FILE [options]\n"
            "\n"
            "Compiles a graph written in the gplan language (docs/language.md).\n"
            "\n"
            "modes:\n"
            "  --check FILE        compile FILE and print a one-line summary: graph name,\n"
            "                      parameters, tensors by kind, nodes, weights and their bytes\n"
            "  --emit-ir FILE      compile FILE and print its IR (tensors, then nodes in\n"
            "                      schedule order)\n"
            "\n"
            "options:\n"
            "  -D NAME=VALUE       override graph parameter NAME (repeatable; also -DNAME=VALUE);\n"
            "                      VALUE is an integer, a number or a dtype (f32, f16, bf16, i32),\n"
            "                      as the parameter's default is\n"
            "  --config FILE       override parameters from a Hugging Face config.json: keys\n"
            "                      matching a parameter name apply, others are ignored; -D wins\n"
            "  -h, --help          print this help and exit\n"
            "  --version           print the version and exit\n"
            "\n"
            "exit status: 0 success, 1 bad input (errors are printed as FILE:LINE:COL: error:\n"
            "MESSAGE), 2 bad usage\n");
}

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "gplan-compile: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\ntry 'gplan-compile --help'\n");
    return EXIT_USAGE;
}

/* A -D argument must look like NAME=VALUE with NAME an identifier; its value is checked later
 * against the parameter's kind. */
static int define_ok(const char *d)
{
    const char *eq = strchr(d, '=');
    if (!eq || eq == d)
        return 0;
    for (const char *p = d; p < eq; p++) {
        int alpha = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_';
        if (!alpha && !(p > d && *p >= '0' && *p <= '9'))
            return 0;
    }
    return 1;
}

/* Parses argv into o; returns -1 to continue, or an exit status. */
static int parse_args(int argc, char **argv, options *o)
{
    int have_mode = 0;
    o->defines = calloc((size_t)argc, sizeof *o->defines);
    if (!o->defines)
        return EXIT_INPUT;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return EXIT_OK;
        } else if (strcmp(a, "--version") == 0) {
            printf("gplan-compile %s\n", GP_VERSION);
            return EXIT_OK;
        } else if (strcmp(a, "--check") == 0 || strcmp(a, "--emit-ir") == 0) {
            if (have_mode)
                return usage_error("more than one mode given (at '%s')", a);
            if (!next)
                return usage_error("%s needs a FILE", a);
            o->mode = a[2] == 'c' ? MODE_CHECK : MODE_EMIT_IR;
            o->input = next;
            have_mode = 1;
            i++;
        } else if (strncmp(a, "-D", 2) == 0) {
            const char *d = a[2] ? a + 2 : next;
            if (!d)
                return usage_error("%s needs NAME=VALUE", a);
            if (!define_ok(d))
                return usage_error("malformed -D '%s' (expected NAME=VALUE)", d);
            o->defines[o->n_defines++] = d;
            if (!a[2])
                i++;
        } else if (strcmp(a, "--config") == 0) {
            if (!next)
                return usage_error("%s needs a FILE", a);
            o->config = next;
            i++;
        }
        /* DISPATCH POINT (planner): `-o PLAN` sets MODE_PLAN and the output path here. */
        /* DISPATCH POINT (buffers): `--buffers CSV` sets MODE_BUFFERS here. */
        else if (a[0] == '-') {
            return usage_error("unknown option '%s'", a);
        } else {
            return usage_error("unexpected argument '%s' (give the file after --check or "
                               "--emit-ir)", a);
        }
    }
    if (!have_mode)
        return usage_error("%s", "no mode given (--check or --emit-ir)");
    return -1;
}

/* `gpt2: params n_layer=12 ...; tensors 2 input, ...; 512 nodes; 148 weights, 497759232 bytes` */
static void print_summary(const gp_graph *g, const char *params)
{
    int by_kind[GP_TENSOR_KIND_COUNT] = {0};
    int64_t weight_bytes = 0;
    for (int i = 0; i < g->n_tensors; i++) {
        by_kind[g->tensors[i].kind]++;
        if (g->tensors[i].kind == GP_TENSOR_WEIGHT)
            weight_bytes += gp_tensor_nbytes(&g->tensors[i]);
    }
    printf("%s: params %s; tensors", g->name, params && *params ? params : "(none)");
    for (int k = 0; k < GP_TENSOR_KIND_COUNT; k++)
        printf("%s %d %s", k ? "," : "", by_kind[k], gp_tensor_kind_name((gp_tensor_kind)k));
    printf("; %d nodes; %d weights, %lld bytes\n", g->n_nodes, by_kind[GP_TENSOR_WEIGHT],
           (long long)weight_bytes);
}

int main(int argc, char **argv)
{
    options o;
    memset(&o, 0, sizeof o);
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0) {
        free(o.defines);
        return rc;
    }

    gp_diag *d = gp_diag_new(stderr);
    if (!d) {
        free(o.defines);
        fprintf(stderr, "gplan-compile: out of memory\n");
        return EXIT_INPUT;
    }
    char *params = NULL;
    gp_dsl_opts dopts = {o.defines, o.n_defines, o.config, &params};
    gp_graph *g = gp_dsl_compile_file(o.input, &dopts, d);
    rc = g ? EXIT_OK : EXIT_INPUT;
    if (g) {
        switch (o.mode) {
        case MODE_CHECK: print_summary(g, params); break;
        case MODE_EMIT_IR: gp_graph_print(g, stdout); break;
        /* DISPATCH POINT (planner): case MODE_PLAN: plan g and write the plan file. */
        /* DISPATCH POINT (buffers): MODE_BUFFERS reads a CSV instead of compiling a graph; it
         * belongs before gp_dsl_compile_file. */
        }
    }
    if (fflush(stdout) != 0) {
        perror("gplan-compile: stdout");
        rc = EXIT_INPUT;
    }
    free(params);
    gp_graph_free(g);
    gp_diag_free(d);
    free(o.defines);
    return rc;
}
