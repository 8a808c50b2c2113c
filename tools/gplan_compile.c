/* gplan-compile: checks a graph (*.gplan), prints its IR, plans it into a plan file, or solves a bare
 * offset problem from a CSV. A thin main: argument parsing, then calls into <gplan/compile.h>.
 * Exit status: 0 ok, 1 bad input, 2 bad usage, 3 no fit within --capacity. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gplan/compile.h"

#ifndef GP_VERSION
#define GP_VERSION "unknown"
#endif

enum { EXIT_OK = 0, EXIT_INPUT = 1, EXIT_USAGE = 2, EXIT_NOFIT = 3 };

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
    int64_t budget;            /* --memory DEV=SIZE: bytes the plan must fit on DEV; 0: none */
    char budget_dev[8];        /* "cpu" or "cuda" */
    int fit;                   /* --fit: the largest context (or n_seq) within the budget */
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
            "  --memory DEV=SIZE   the plan must fit SIZE on DEV (cpu or cuda; SIZE in B, KiB,\n"
            "                      MiB, GiB or TiB): its weights, state (KV cache), arena, io\n"
            "                      and extras; one that does not is refused with its figures\n"
            "                      (exit status 3); the CUDA runtime's context comes on top.\n"
            "                      Sets --backend DEV. Layers are not placed on the host yet\n"
            "  --fit               with --memory: print the largest context (the family's\n"
            "                      context parameter, at most its value here) whose plan fits,\n"
            "                      or with -D n_seq=N the largest n_seq (with -D kv_pool=P the\n"
            "                      largest kv_pool); -o is optional and writes that plan\n"
            "\n"
            "  -h, --help          print this help and exit\n"
            "  --version           print the version and exit\n"
            "\n"
            "exit status: 0 success, 1 bad input (errors are printed as FILE:LINE:COL: error:\n"
            "MESSAGE), 2 bad usage, 3 no placement within --capacity found in time, or a plan\n"
            "larger than --memory\n");
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
        } else if (!strcmp(a, "--config") || !strcmp(a, "--gguf") || !strcmp(a, "-o")) {
            if (!next)
                return usage_error("%s needs a FILE", a);
            *(a[1] == 'o' ? &o->output : a[2] == 'c' ? &o->config : &o->gguf) = next;
            i++;
        } else if (strcmp(a, "--buffers") == 0) {
            if (have_mode)
                return usage_error("more than one mode given (at '%s')", a);
            if (!next)
                return usage_error("%s needs a FILE", a);
            o->mode = MODE_BUFFERS;
            o->input = next;
            have_mode = 1;
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
        } else if (strcmp(a, "--memory") == 0) {
            char err[256];
            if (!next || gp_budget_parse(next, o->budget_dev, sizeof o->budget_dev, &o->budget,
                                         err, sizeof err) != 0)
                return usage_error("--memory: %s", next ? err : "needs DEVICE=SIZE (cuda=8GiB)");
            i++;
        } else if (strcmp(a, "--fit") == 0) {
            o->fit = 1;
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
    if (o->fit && !o->budget)
        return usage_error("%s", "--fit needs --memory DEV=SIZE");
    if (o->budget && (o->mode != MODE_PLAN || o->plan.n_devices > 1 || o->lora_merge))
        return usage_error("%s", "--memory applies to planning FILE for one device (no --check, "
                                 "--emit-ir, --buffers, --devices or --lora-merge)");
    if (o->budget) {
        unsigned want = GP_BACKEND_BIT(strcmp(o->budget_dev, "cuda") == 0 ? GP_BACKEND_CUDA
                                                                          : GP_BACKEND_CPU);
        if (o->backend_set && o->plan.backends != want)
            return usage_error("--memory %s=...: --backend must be that device", o->budget_dev);
        o->plan.backends = want;
    }
    if ((o->mode == MODE_PLAN || o->mode == MODE_BUFFERS) && !o->output && !o->fit)
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

/* 1 (after saying so on stderr) when p is larger than --memory's budget. */
static int over_budget(const gp_plan *p, const options *o, const char *what)
{
    gp_plan_memory m;
    gp_plan_memory_of(p, &m);
    if (!o->budget || m.total <= o->budget)
        return 0;
    char h[2][32];
    fprintf(stderr, "gplan-compile: %s: the plan%s needs %s on %s (", o->input, what,
            gp_plan_bytes_text(m.total, h[0], sizeof h[0]), o->budget_dev);
    gp_plan_memory_print(&m, stderr);
    fprintf(stderr, "), more than --memory's %s; placing layers on the host is not implemented\n",
            gp_plan_bytes_text(o->budget, h[1], sizeof h[1]));
    return 1;
}

/* An error the library did not print already (its diagnostics go to stderr as they come). */
static int input_error(const char *err)
{
    if (*err)
        fprintf(stderr, "%s\n", err);
    return EXIT_INPUT;
}

/* Plans g and writes the plan file; the summary goes to stdout. */
static int plan_and_write(const gp_program *g, const options *o)
{
    gp_plan *p = NULL;
    char err[1024];
    if (gp_program_plan(g, &o->plan, &p, err, sizeof err) != 0)
        return input_error(err);
    int rc = EXIT_OK;
    if (over_budget(p, o, "")) {
        rc = EXIT_NOFIT;
    } else if (gp_plan_write(p, o->output, err, sizeof err) != 0) {
        fprintf(stderr, "gplan-compile: %s\n", err);
        rc = EXIT_INPUT;
    } else {
        printf("%s -> %s\n", o->input, o->output);
        gp_plan_summary_print(p, stdout);
    }
    gp_plan_free(p);
    return rc;
}

/* --fit: the parameter to grow (kv_pool, n_seq or the family's context), the largest value whose
 * plan fits, printed; with -o, that plan written. */
static int fit_main(const gp_program *g, const options *o)
{
    int64_t hi = 0, best = 0;
    const char *param = gp_program_fit_param(g, &hi);
    if (!param) {
        fprintf(stderr,
                "gplan-compile: %s: --fit grows the context parameter of a known family's graph, "
                "or n_seq (-D n_seq=N); graph '%s' has neither\n",
                o->input, gp_program_name(g));
        return EXIT_INPUT;
    }
    gp_plan_memory m;
    char err[1024], h[2][32];
    int r = gp_program_fit(g, param, hi, &o->plan, o->budget, &best, &m, err, sizeof err);
    if (r < 0) {
        fprintf(stderr, "gplan-compile: %s\n", err);
        return EXIT_INPUT;
    }
    if (r == 0) {
        fprintf(stderr, "gplan-compile: %s: even %s=1 needs %s on %s (", o->input, param,
                gp_plan_bytes_text(m.total, h[0], sizeof h[0]), o->budget_dev);
        gp_plan_memory_print(&m, stderr);
        fprintf(stderr, "), more than --memory's %s; placing layers on the host is not "
                        "implemented\n", gp_plan_bytes_text(o->budget, h[1], sizeof h[1]));
        return EXIT_NOFIT;
    }
    printf("fit: %s=%s: %s=%lld", o->budget_dev, gp_plan_bytes_text(o->budget, h[0], sizeof h[0]),
           param, (long long)best);
    if (hi > 0)
        printf(" (of %lld)", (long long)hi);
    printf(" needs %s: ", gp_plan_bytes_text(m.total, h[1], sizeof h[1]));
    gp_plan_memory_print(&m, stdout);
    printf("\nplacement: every layer on %s\n", o->budget_dev);
    if (!o->output)
        return EXIT_OK;
    gp_program *fg = gp_program_define(g, param, best, err, sizeof err);
    int rc = fg ? plan_and_write(fg, o) : input_error(err);
    gp_program_free(fg);
    return rc;
}

/* An input that exists but is no regular file (a FIFO, a device, a folder) is refused before the
 * compiler opens it: opening a FIFO would block. A missing one gets the reader's own message. */
static int special_file(const char *path)
{
    char err[4200];
    if (!gp_compile_check_file(path, err, sizeof err))
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
        rc = gp_buffers_solve(o.input, o.output, o.capacity, o.plan.time_limit, o.plan.strategy,
                              stdout);
        free(o.defines);
        return rc;
    }

    gp_compile_opts co = gp_compile_defaults();
    co.defines = o.defines;
    co.n_defines = o.n_defines;
    co.config = o.config;
    co.gguf = o.gguf;
    co.allow_unused = o.allow_unused;
    co.devices = o.plan.n_devices;
    co.lora_merge = o.lora_merge;
    co.diag = stderr;
    char err[1024];
    gp_program *g = gp_program_compile(o.input, &co, err, sizeof err);
    rc = g ? EXIT_OK : input_error(err);
    if (g) {
        switch (o.mode) {
        case MODE_CHECK: gp_program_summary_print(g, stdout); break;
        case MODE_EMIT_IR: gp_program_ir_print(g, stdout); break;
        case MODE_PLAN: rc = o.fit ? fit_main(g, &o) : plan_and_write(g, &o); break;
        case MODE_BUFFERS: break; /* handled before compiling */
        }
    }
    if (fflush(stdout) != 0) {
        perror("gplan-compile: stdout");
        rc = EXIT_INPUT;
    }
    gp_program_free(g);
    free(o.defines);
    return rc;
}
