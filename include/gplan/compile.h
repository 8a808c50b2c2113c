/* gplan's compiler API: a graph written in the gplan language (docs/language.md) and its
 * parameters (-D defines, a Hugging Face config.json, a GGUF file's metadata and weight dtypes)
 * compiled into a checked program, planned into a plan (<gplan/plan.h>; written as a plan file for
 * <gplan/gplan.h>'s gp_model_load); the largest context that fits a memory budget; MiniMalloc's
 * bare offset problem. Library libgplan, installed as <gplan/compile.h>; gplan-compile is a thin
 * main over it, and <gplan/text.h> compiles a model's graph with the same code. A program that
 * only compiles links no kernel.
 *
 *     char err[4096];
 *     const char *defs[] = {"n_layer=2"};
 *     gp_compile_opts o = gp_compile_defaults();
 *     o.defines = defs;
 *     o.n_defines = 1;
 *     gp_program *g = gp_program_compile("examples/gpt2.gplan", &o, err, sizeof err);
 *     gp_plan *p = NULL;
 *     if (!g || gp_program_plan(g, NULL, &p, err, sizeof err) ||
 *         gp_plan_write(p, "gpt2.plan", err, sizeof err))
 *         fprintf(stderr, "%s\n", err);
 *     gp_plan_free(p);
 *     gp_program_free(g);
 *
 * Errors: NULL or -1 with the message in err, as <gplan/text.h>'s: a file's ("x.gguf: bad GGUF
 * file (...)"), or the compiler's diagnostics, each `FILE:LINE:COL: error: MESSAGE` then the source
 * line and a caret under the column (docs/errors.md), as many as err holds, without the last
 * newline. With gp_compile_opts.diag set, the diagnostics are printed there instead, whole and as
 * they are found (a tool's stderr), and err is "" after them: every error is told once.
 * A program is read-only once compiled: threads may plan one at once.
 */
#ifndef GPLAN_COMPILE_H
#define GPLAN_COMPILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "plan.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gp_program gp_program; /* a compiled graph: the IR, shapes checked, its parameters */

/* ---- compiling ---- */

/* The parameters apply in this order, a later one winning: the graph's defaults, config, the GGUF
 * file's metadata, defines. */
typedef struct {
    const char *const *defines; /* [n_defines] "NAME=VALUE" (gplan-compile -D); later ones win */
    int n_defines;
    const char *config;  /* a Hugging Face config.json: its keys set the parameters of their names */
    const char *gguf;    /* a GGUF file: parameters from its metadata (the architectures of
                            docs/gguf.md) and every weight's dtype as the file stores it; the
                            file must hold every weight of the graph with its shape, and no
                            tensor the graph leaves unused unless allow_unused */
    int allow_unused;
    int devices;         /* the graph's builtin `devices` (tensor parallelism); <= 0: 1 */
    int lora_merge;      /* the graph's LoRA merge graph instead (needs -D lora_r=R: docs/lora.md) */
    FILE *diag;          /* where diagnostics are printed as they are found; NULL: in err */
} gp_compile_opts;

/* Every field 0 / NULL. */
gp_compile_opts gp_compile_defaults(void);

/* Compiles the graph in the file path. o may be NULL. A path or config that exists but is no
 * regular file is refused first (gp_compile_check_file). NULL with err. */
gp_program *gp_program_compile(const char *path, const gp_compile_opts *o, char *err,
                               size_t err_len);
/* The same for a source text in memory (copied); name stands for the file in messages. */
gp_program *gp_program_compile_text(const char *name, const char *text, size_t len,
                                    const gp_compile_opts *o, char *err, size_t err_len);
/* The program compiled again from its source and options with one more define NAME=VALUE (that
 * wins); the GGUF file is read again but its tensors are not checked again, so that a context
 * other than the file's can be planned. NULL with err. */
gp_program *gp_program_define(const gp_program *p, const char *name, int64_t value, char *err,
                              size_t err_len);
void gp_program_free(gp_program *p); /* NULL is a no-op */

/* 0 when path is a regular file or does not exist (then the compiler's reader says so); -1 with
 * err ("PATH: cannot open (not a regular file: a FIFO)") for a folder, a FIFO, a device: the
 * compiler refuses them before opening (a FIFO would block). For a tool that tells such input
 * apart from the compiler's errors. */
int gp_compile_check_file(const char *path, char *err, size_t err_len);

/* The graph's name (`graph NAME` of its source; with lora_merge, NAME_lora_merge). */
const char *gp_program_name(const gp_program *p);
/* The parameters as resolved, "n_layer=12 n_embd=768 ..." ("" for a graph of none). */
const char *gp_program_params(const gp_program *p);
/* Parameter name's value when it is an integer, else -1 (absent, a dtype, a number). */
int64_t gp_program_param(const gp_program *p, const char *name);
/* gplan-compile --check's line: "gpt2: params n_layer=12 ...; tensors 2 input, ...; 512 nodes;
 * 148 weights, 497759232 bytes". */
void gp_program_summary_print(const gp_program *p, FILE *out);
/* The IR: tensors, then the nodes in schedule order (gplan-compile --emit-ir). */
void gp_program_ir_print(const gp_program *p, FILE *out);

/* ---- planning ---- */

/* Every field 0 is its default. */
typedef struct {
    gp_strategy strategy; /* for the arena's offsets; default GP_STRATEGY_AUTO */
    double time_limit;    /* seconds for the exact search; <= 0: 10 */
    int64_t alignment;    /* bytes, a power of two up to GP_PLAN_MAX_ALIGNMENT; 0: 256 */
    int n_devices;        /* tensor-parallel devices (data pointers per extras record); 0: 1 */
    int no_inplace;       /* 1: never write an output into an input's storage (for comparisons) */
    unsigned backends;    /* GP_BACKEND_BIT()s the workspaces are sized for; 0: all of them */
} gp_plan_opts;

/* Every field 0. */
gp_plan_opts gp_plan_defaults(void);

/* Plans every tensor's memory: liveness over the schedule, in-place reuse, op workspaces, extras
 * records, the arena's offsets (checked by an independent overlap checker). o may be NULL (the
 * defaults). 0 and *out (gp_plan_free), or -1 with err (bad options, a graph too large). */
int gp_program_plan(const gp_program *p, const gp_plan_opts *o, gp_plan **out, char *err,
                    size_t err_len);

/* ---- memory budgets (gplan-compile --memory, --fit) ---- */

/* "cuda=8GiB" or "cpu=512MiB" (B, KiB, MiB, GiB, TiB; K, M, G, T the same, any case; or bare
 * bytes) into the device's name (dev[dev_len]) and *bytes. 0, or -1 with err. */
int gp_budget_parse(const char *s, char *dev, size_t dev_len, int64_t *bytes, char *err,
                    size_t err_len);
/* The parameter a budget grows: kv_pool for a graph of -D n_seq=N and -D kv_pool=P, n_seq for
 * one of n_seq > 0, else its family's context parameter (max_position_embeddings, n_positions,
 * ...) when it has an integer value here, *limit (may be NULL) then that value, else 0; NULL
 * when the graph has none of them. */
const char *gp_program_fit_param(const gp_program *p, int64_t *limit);
/* The largest value v in [1, limit] of param (limit <= 0: none, v at most 2^30) whose plan fits
 * budget bytes on one device (gp_plan_memory.total): the program compiled again with param=v
 * (gp_program_define) and planned with o's options and the heuristics alone (an exact search
 * only lowers the arena, so what fits here fits there); plans grow with v, so a bisection.
 * 1 with *best and its bytes in *m; 0 when not even v = 1 fits (*m: its bytes); -1 with err
 * ("x.gplan: with n_ctx=64: " and the first line of the compiler's message). */
int gp_program_fit(const gp_program *p, const char *param, int64_t limit, const gp_plan_opts *o,
                   int64_t budget, int64_t *best, gp_plan_memory *m, char *err, size_t err_len);

/* ---- the bare offset problem (gplan-compile --buffers) ---- */

/* Reads MiniMalloc's CSV (a header naming the columns id, lower, upper, size in any order, then a
 * buffer a line, live over [lower, upper)) from in_csv, assigns offsets (capacity 0: minimize the
 * peak; else fit in capacity bytes), checks the answer independently, writes the rows with an
 * added offset column to out_csv and prints a line of figures to log (NULL: stderr), where its
 * errors go too. Returns an exit status: 0 written, 1 bad input, 2 I/O or internal error, 3 a
 * capacity was given and no placement within it was found in time (out_csv not written). */
int gp_buffers_solve(const char *in_csv, const char *out_csv, int64_t capacity, double time_limit,
                     gp_strategy strategy, FILE *log);

#ifdef __cplusplus
}
#endif

#endif
