/* gplan-compile: checks a graph (*.gplan), prints its IR, plans it into a plan file, or solves a bare
 * offset problem from a CSV. A thin main: argument parsing, then calls into gp_dsl, gp_ir and
 * gp_planner. Exit status: 0 ok, 1 bad input, 2 bad usage, 3 no fit within --capacity. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dsl/dsl.h"
#include "family/gguf_params.h"
#include "ir/ir.h"
#include "planner/csv.h"
#include "planner/lora_merge.h"
#include "planner/planner.h"
#include "weights/filemap.h"

#ifndef GP_VERSION
#define GP_VERSION "unknown"
#endif

enum { EXIT_OK = 0, EXIT_INPUT = 1, EXIT_USAGE = 2 };

typedef enum {
    MODE_CHECK,   /* --check: compile and print a one-line summary */
    MODE_EMIT_IR, /* --emit-ir: print the IR */
    MODE_PLAN,    /* FILE -o PLAN: compile, plan and write the plan file */
    MODE_BUFFERS, /* --buffers CSV -o SOLUTION: the bare offset problem */
} mode;

typedef struct {
    mode mode;
    const char *input;         /* the *.gplan file */
    const char **defines;      /* [n_defines] "NAME=VALUE" */
    int n_defines;
    const char *config;        /* --config FILE or NULL */
    const char *gguf;          /* --gguf FILE or NULL */
    const char *output;        /* -o: the plan file, or the solution CSV */
    gp_plan_opts plan;         /* --strategy, --time-limit, --alignment, --devices */
    int64_t capacity;          /* --capacity for --buffers; 0: minimize */
    int lora_merge;            /* --lora-merge: the graph's LoRA merge graph instead of the graph */
    int backend_set;           /* --backend was given */
    int allow_unused;          /* --allow-unused: a --gguf file's tensors need not all be used */
} options;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: gplan-compile --check FILE [options]\n"
            "       gplan-compile --emit-ir FILE [options]\n"
            "       gplan-compile FILE -o PLAN [options] [planning options]\n"
            "       gplan-compile --buffers PROBLEM.csv -o SOLUTION.csv [--capacity BYTES]\n"
            "                     [--strategy S] [--time-limit SECONDS]\n"
            "\n"
            "Compiles a graph written in the gplan language (docs/language.md).\n"
            "\n"
            "modes:\n"
            "  --check FILE        compile FILE and print a one-line summary: graph name,\n"
            "                      parameters, tensors by kind, nodes, weights and their bytes\n"
            "  --emit-ir FILE      compile FILE and print its IR (tensors, then nodes in\n"
            "                      schedule order)\n"
            "  FILE -o PLAN        compile FILE, plan every tensor's memory and write the plan\n"
            "                      file PLAN (docs/plan-format.md); prints a summary: tensors,\n"
            "                      nodes, arena bytes against the lower bound, naive bytes,\n"
            "                      extras bytes, planning time\n"
            "  --buffers CSV       solve a bare offset problem in MiniMalloc's CSV format\n"
            "                      (id,lower,upper,size; lifespan [lower, upper)) and write the\n"
            "                      rows with an added offset column to the -o file\n"
            "\n"
            "options:\n"
            "  -D NAME=VALUE       override graph parameter NAME (repeatable; also -DNAME=VALUE);\n"
            "                      VALUE is an integer, a number or a dtype (f32, f16, bf16, i32),\n"
            "                      as the parameter's default is\n"
            "  --config FILE       override parameters from a Hugging Face config.json: keys\n"
            "                      matching a parameter name apply, others are ignored; -D wins\n"
            "  --gguf FILE         parameters from a GGUF file's metadata (llama, qwen2, qwen3,\n"
            "                      gpt2, gemma2, gemma3, phi3; named as the config.json keys)\n"
            "                      and llama.cpp's layout (rope_mode, conv1d_transposed,\n"
            "                      norm_offset), and every weight's dtype as the file stores it\n"
            "                      (q4_0, q8_0, ...); -D wins (docs/gguf.md). A file with\n"
            "                      tensors the graph does not use is refused\n"
            "  --allow-unused      with --gguf: allow that (a part of a file, on purpose)\n"
            "  --lora-merge        compile, print or plan the graph's LoRA merge graph instead\n"
            "                      (needs -D lora_r=R): per adapter target W += lora_scale * B A,\n"
            "                      planned for the CPU; gplan-run --lora-merge-plan runs it\n"
            "                      (docs/lora.md)\n"
            "\n"
            "planning options:\n"
            "  -o FILE             the plan file (or, with --buffers, the solution CSV)\n"
            "  --strategy S        auto (default: heuristics, then an exact search while above\n"
            "                      the lower bound), greedy (heuristics only) or exact\n"
            "  --time-limit S      seconds for the exact search (default 10)\n"
            "  --alignment N       arena alignment in bytes, a power of two (default 256)\n"
            "  --devices N         tensor-parallel devices: sets the graph's `devices`, cuts split\n"
            "                      weights, one pointer per device in each tensor record (default 1)\n"
            "  --backend B         size op workspaces for cpu, cuda or any (default any: one\n"
            "                      plan serves both; cpu leaves out cuBLAS's 32 MiB workspace)\n"
            "  --capacity BYTES    with --buffers: the answer must fit in BYTES (exit status 3\n"
            "                      when no fit is found in time); without it, minimize\n"
            "\n"
            "  -h, --help          print this help and exit\n"
            "  --version           print the version and exit\n"
            "\n"
            "exit status: 0 success, 1 bad input (errors are printed as FILE:LINE:COL: error:\n"
            "MESSAGE), 2 bad usage, 3 no placement within --capacity found in time\n");
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

/* Parses a non-negative integer or number flag value; 0 on success. */
static int parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int parse_seconds(const char *s, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v > 0) || v > 1e6)
        return -1;
    *out = v;
    return 0;
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
        } else if (strcmp(a, "--lora-merge") == 0) {
            o->lora_merge = 1;
        } else if (strcmp(a, "--allow-unused") == 0) {
            o->allow_unused = 1;
        } else if (strcmp(a, "--config") == 0) {
            if (!next)
                return usage_error("%s needs a FILE", a);
            o->config = next;
            i++;
        } else if (strcmp(a, "--gguf") == 0) {
            if (!next)
                return usage_error("%s needs a FILE", a);
            o->gguf = next;
            i++;
        }
        else if (strcmp(a, "--buffers") == 0) {
            if (have_mode)
                return usage_error("more than one mode given (at '%s')", a);
            if (!next)
                return usage_error("%s needs a FILE", a);
            o->mode = MODE_BUFFERS;
            o->input = next;
            have_mode = 1;
            i++;
        } else if (strcmp(a, "-o") == 0) {
            if (!next)
                return usage_error("%s needs a FILE", a);
            o->output = next;
            i++;
        } else if (strcmp(a, "--strategy") == 0) {
            if (!next)
                return usage_error("%s needs auto, greedy or exact", a);
            if (strcmp(next, "auto") == 0)
                o->plan.strategy = GP_STRATEGY_AUTO;
            else if (strcmp(next, "greedy") == 0)
                o->plan.strategy = GP_STRATEGY_GREEDY;
            else if (strcmp(next, "exact") == 0)
                o->plan.strategy = GP_STRATEGY_EXACT;
            else
                return usage_error("unknown strategy '%s' (auto, greedy or exact)", next);
            i++;
        } else if (strcmp(a, "--time-limit") == 0) {
            if (!next || parse_seconds(next, &o->plan.time_limit) != 0)
                return usage_error("%s needs a positive number of seconds", a);
            i++;
        } else if (strcmp(a, "--alignment") == 0) {
            int64_t v;
            if (!next || parse_int(next, 1, GP_PLAN_MAX_ALIGNMENT, &v) != 0 || (v & (v - 1)))
                return usage_error("%s needs a power of two up to 1048576", a);
            o->plan.alignment = v;
            i++;
        } else if (strcmp(a, "--devices") == 0) {
            int64_t v;
            if (!next || parse_int(next, 1, GP_PLAN_MAX_DEVICES, &v) != 0)
                return usage_error("%s needs a device count from 1 to 64", a);
            o->plan.n_devices = (int)v;
            i++;
        } else if (strcmp(a, "--backend") == 0) {
            if (!next)
                return usage_error("%s needs cpu, cuda or any", a);
            if (strcmp(next, "cpu") == 0)
                o->plan.backends = GP_BACKEND_BIT(GP_BACKEND_CPU);
            else if (strcmp(next, "cuda") == 0)
                o->plan.backends = GP_BACKEND_BIT(GP_BACKEND_CUDA);
            else if (strcmp(next, "any") == 0)
                o->plan.backends = GP_BACKENDS_ALL;
            else
                return usage_error("unknown backend '%s' (cpu, cuda or any)", next);
            o->backend_set = 1;
            i++;
        } else if (strcmp(a, "--capacity") == 0) {
            if (!next || parse_int(next, 1, INT64_MAX, &o->capacity) != 0)
                return usage_error("%s needs a positive number of bytes", a);
            i++;
        } else if (a[0] == '-') {
            return usage_error("unknown option '%s'", a);
        } else if (!have_mode) {
            o->mode = MODE_PLAN;
            o->input = a;
            have_mode = 1;
        } else {
            return usage_error("unexpected argument '%s'", a);
        }
    }
    if (!have_mode)
        return usage_error("%s", "no input given (FILE -o PLAN, --check FILE, --emit-ir FILE "
                                 "or --buffers CSV)");
    if ((o->mode == MODE_PLAN || o->mode == MODE_BUFFERS) && !o->output)
        return usage_error("%s", "-o FILE is required to plan");
    if (o->mode != MODE_BUFFERS && o->capacity)
        return usage_error("%s", "--capacity applies to --buffers only");
    if (o->lora_merge && (o->mode == MODE_BUFFERS || o->plan.n_devices > 1 ||
                          (o->backend_set && o->plan.backends != GP_BACKEND_BIT(GP_BACKEND_CPU))))
        return usage_error("%s", "--lora-merge makes a CPU plan of one device (no --buffers, "
                                 "--devices or --backend other than cpu)");
    if (o->lora_merge) /* the merge runs on the CPU kernels: no cuBLAS workspace */
        o->plan.backends = GP_BACKEND_BIT(GP_BACKEND_CPU);
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

/* Plans g and writes the plan file; the summary goes to stdout. */
static int plan_and_write(const gp_graph *g, const options *o, gp_diag *d)
{
    gp_plan *p = NULL;
    if (gp_plan_build(g, &o->plan, &p, d) != 0)
        return EXIT_INPUT;
    char err[512];
    int rc = EXIT_OK;
    if (gp_plan_write(p, o->output, err, sizeof err) != 0) {
        fprintf(stderr, "gplan-compile: %s\n", err);
        rc = EXIT_INPUT;
    } else {
        printf("%s -> %s\n", o->input, o->output);
        gp_plan_summary_print(p, stdout);
    }
    gp_plan_free(p);
    return rc;
}

/* An input that exists but is no regular file (a FIFO, a device, a folder) is refused before the
 * compiler opens it: opening a FIFO would block. A missing one gets the reader's own message. */
static int special_file(const char *path)
{
    char err[4200];
    struct stat st;
    if (!path || stat(path, &st) || !gp_file_check(path, err, sizeof err))
        return 0;
    fprintf(stderr, "gplan-compile: %s\n", err);
    return 1;
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
    if (special_file(o.input) || special_file(o.config)) {
        free(o.defines);
        return EXIT_INPUT;
    }

    if (o.mode == MODE_BUFFERS) {
        rc = gp_buffers_main(o.input, o.output, o.capacity, o.plan.time_limit, o.plan.strategy,
                             stdout);
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
    gp_dsl_opts dopts = {.defines = o.defines, .n_defines = o.n_defines, .config_path = o.config,
                         .params_out = &params, .devices = o.plan.n_devices};
    gp_gguf_params gparams = {{0}, 0};
    gp_gguf_weights gw = {0};
    char err[1024];
    if (o.gguf) {
        if (gp_gguf_params_read(o.gguf, &gparams, err, sizeof err) ||
            gp_gguf_weights_open(&gw, o.gguf, err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            gp_gguf_params_free(&gparams);
            gp_diag_free(d);
            free(o.defines);
            return EXIT_INPUT;
        }
        dopts.file_params = (const char *const *)gparams.text;
        dopts.n_file_params = gparams.n;
        dopts.weight_dtype = gp_gguf_weight_dtype;
        dopts.weight_dtype_ctx = &gw;
    }
    gp_graph *g = gp_dsl_compile_file(o.input, &dopts, d);
    if (g && o.gguf &&
        ((!o.allow_unused && gp_gguf_weights_unused(&gw, o.gguf, err, sizeof err)) ||
         gp_gguf_weights_missing(&gw, g, o.gguf, err, sizeof err))) {
        fprintf(stderr, "%s\n", err);
        gp_graph_free(g);
        g = NULL;
    }
    gp_gguf_weights_close(&gw);
    gp_gguf_params_free(&gparams);
    if (g && o.lora_merge) {
        gp_graph *mg = gp_lora_merge_graph(g, d);
        gp_graph_free(g);
        g = mg;
    }
    rc = g ? EXIT_OK : EXIT_INPUT;
    if (g) {
        switch (o.mode) {
        case MODE_CHECK: print_summary(g, params); break;
        case MODE_EMIT_IR: gp_graph_print(g, stdout); break;
        case MODE_PLAN: rc = plan_and_write(g, &o, d); break;
        case MODE_BUFFERS: break; /* handled before compiling */
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
