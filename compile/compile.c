/* gp_program: a graph compiled from its source and parameters (dsl/), checked against a GGUF
 * file's tensors (family/gguf_params.c), printed, and planned (planner/); and the compile the text
 * API shares (compile_impl.h). */
#include "compile/compile_impl.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dsl/dsl.h"
#include "planner/lora_merge.h"
#include "planner/planner.h"
#include "weights/filemap.h"

gp_compile_opts gp_compile_defaults(void)
{
    gp_compile_opts o;
    memset(&o, 0, sizeof o);
    return o;
}

gp_plan_opts gp_plan_defaults(void)
{
    gp_plan_opts o;
    memset(&o, 0, sizeof o);
    return o;
}

int gp_compile_check_file(const char *path, char *err, size_t err_len)
{
    struct stat st;
    if (!path || stat(path, &st))
        return 0;
    return gp_file_check(path, err, err_len);
}

/* ---- the shared compile ---- */

void gp_compile_gguf_close(gp_compile_gguf *gg)
{
    gp_gguf_weights_close(&gg->w);
    gp_gguf_params_free(&gg->params);
}

gp_graph *gp_compile_graph(const char *name, const char *text, size_t len,
                           const gp_compile_opts *o, gp_compile_gguf *gg, int check,
                           char **params, gp_diag *d, char *err, size_t err_len)
{
    gp_errf(err, err_len, "%s", "");
    gp_dsl_opts dopts = {.defines = (const char **)o->defines, .n_defines = o->n_defines,
                         .config_path = o->config, .params_out = params,
                         .devices = o->devices};
    if (o->gguf) {
        if (!gg->w.w && (gp_gguf_params_read(o->gguf, &gg->params, err, err_len) ||
                         gp_gguf_weights_open(&gg->w, o->gguf, err, err_len))) {
            gp_compile_gguf_close(gg);
            return NULL;
        }
        dopts.file_params = (const char *const *)gg->params.text;
        dopts.n_file_params = gg->params.n;
        dopts.weight_dtype = gp_gguf_weight_dtype;
        dopts.weight_dtype_ctx = &gg->w;
    }
    gp_graph *g = text ? gp_dsl_compile_string(name, text, len, &dopts, d)
                       : gp_dsl_compile_file(name, &dopts, d);
    if (g && check && gg->w.w &&
        ((!o->allow_unused && gp_gguf_weights_unused(&gg->w, o->gguf, err, err_len)) ||
         gp_gguf_weights_missing(&gg->w, g, o->gguf, err, err_len))) {
        gp_graph_free(g);
        g = NULL;
    }
    return g;
}

int64_t gp_compile_param(const char *params, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = params; p && *p; p += strcspn(p, " "), p += *p == ' ') {
        if (strncmp(p, name, n) == 0 && p[n] == '=') {
            char *end;
            long long v = strtoll(p + n + 1, &end, 10);
            return end != p + n + 1 && (*end == ' ' || !*end) ? v : -1;
        }
    }
    return -1;
}

/* ---- programs ---- */

void gp_program_free(gp_program *p)
{
    if (!p)
        return;
    gp_graph_free(p->g);
    gp_diag_free(p->d); /* after the graph, whose locations point into it */
    gp_compile_gguf_close(&p->own);
    for (int i = 0; p->strs && i < p->n_strs; i++)
        free(p->strs[i]);
    free(p->strs);
    free(p->params);
    free(p->text);
    free(p);
}

/* A program of name's source (text[len], or the file when text is NULL) with o's options, their
 * strings copied, and define `extra` after o's (or NULL); nothing compiled. NULL: out of memory. */
static gp_program *program_new(const char *name, const char *text, size_t len,
                               const gp_compile_opts *o, const char *extra)
{
    gp_program *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    int n = o->n_defines + (extra != NULL), bad = 0;
    p->strs = calloc((size_t)n + 3, sizeof *p->strs);
    for (int i = 0; p->strs && i < n + 3; i++, p->n_strs++) {
        const char *s = i < o->n_defines ? o->defines[i]
                        : i < n          ? extra
                        : i == n         ? name
                        : i == n + 1     ? o->config
                                         : o->gguf;
        bad |= s && !(p->strs[i] = strdup(s));
    }
    if (text && (p->text = malloc(len + 1))) {
        memcpy(p->text, text, len);
        p->text[len] = '\0';
        p->len = len;
    }
    p->d = gp_diag_new(o->diag);
    p->gg = &p->own;
    if (bad || !p->strs || (text && !p->text) || !p->d) {
        gp_program_free(p);
        return NULL;
    }
    p->o = *o;
    p->o.defines = (const char *const *)p->strs;
    p->o.n_defines = n;
    p->name = p->strs[n];
    p->o.config = p->strs[n + 1];
    p->o.gguf = p->strs[n + 2];
    return p;
}

/* The diagnostics reported from byte `from` of p's text on, into err without the last newline;
 * err "" when they were printed. */
static void diag_err(const gp_program *p, size_t from, char *err, size_t err_len)
{
    const char *t = gp_diag_text(p->d) + from;
    size_t n = strlen(t);
    n -= n && t[n - 1] == '\n';
    gp_errf(err, err_len, "%.*s", p->o.diag ? 0 : (int)n, t);
}

/* Compiles p's source into p->g. 0, or -1 with err. */
static int program_build(gp_program *p, int check, char *err, size_t err_len)
{
    p->g = gp_compile_graph(p->name, p->text, p->len, &p->o, p->gg, check, &p->params, p->d, err,
                            err_len);
    if (p->g && p->o.lora_merge) {
        gp_graph *mg = gp_lora_merge_graph(p->g, p->d);
        gp_graph_free(p->g);
        p->g = mg;
    }
    if (!p->g && !(err_len && *err))
        diag_err(p, 0, err, err_len);
    return p->g ? 0 : -1;
}

static gp_program *program_open(const char *name, const char *text, size_t len,
                                const gp_compile_opts *o, char *err, size_t err_len)
{
    gp_compile_opts defaults = gp_compile_defaults();
    if (!o)
        o = &defaults;
    if (!name) {
        gp_errf(err, err_len, "gp_program_compile: no path");
        return NULL;
    }
    if ((!text && gp_compile_check_file(name, err, err_len)) ||
        gp_compile_check_file(o->config, err, err_len))
        return NULL;
    gp_program *p = program_new(name, text, len, o, NULL);
    if (!p)
        gp_errf(err, err_len, "out of memory");
    if (p && program_build(p, 1, err, err_len)) {
        gp_program_free(p);
        return NULL;
    }
    return p;
}

gp_program *gp_program_compile(const char *path, const gp_compile_opts *o, char *err,
                               size_t err_len)
{
    return program_open(path, NULL, 0, o, err, err_len);
}

gp_program *gp_program_compile_text(const char *name, const char *text, size_t len,
                                    const gp_compile_opts *o, char *err, size_t err_len)
{
    return program_open(name, text ? text : "", text ? len : 0, o, err, err_len);
}

gp_program *gp_program_redefine(const gp_program *p, const char *name, int64_t value, FILE *diag,
                                int borrow, char *err, size_t err_len)
{
    char def[256];
    snprintf(def, sizeof def, "%s=%lld", name, (long long)value);
    gp_compile_opts o = p->o;
    o.diag = diag;
    gp_program *q = program_new(p->name, p->text, p->len, &o, def);
    if (!q) {
        gp_errf(err, err_len, "out of memory");
        return NULL;
    }
    if (borrow)
        q->gg = p->gg;
    if (program_build(q, 0, err, err_len)) {
        gp_program_free(q);
        return NULL;
    }
    return q;
}

gp_program *gp_program_define(const gp_program *p, const char *name, int64_t value, char *err,
                              size_t err_len)
{
    return gp_program_redefine(p, name, value, p->o.diag, 0, err, err_len);
}

const char *gp_program_name(const gp_program *p)
{
    return p->g->name;
}

const char *gp_program_params(const gp_program *p)
{
    return p->params ? p->params : "";
}

int64_t gp_program_param(const gp_program *p, const char *name)
{
    return gp_compile_param(p->params, name);
}

void gp_program_summary_print(const gp_program *p, FILE *out)
{
    const gp_graph *g = p->g;
    int by_kind[GP_TENSOR_KIND_COUNT] = {0};
    int64_t weight_bytes = 0;
    for (int i = 0; i < g->n_tensors; i++) {
        by_kind[g->tensors[i].kind]++;
        if (g->tensors[i].kind == GP_TENSOR_WEIGHT)
            weight_bytes += gp_tensor_nbytes(&g->tensors[i]);
    }
    fprintf(out, "%s: params %s; tensors", g->name,
            p->params && *p->params ? p->params : "(none)");
    for (int k = 0; k < GP_TENSOR_KIND_COUNT; k++)
        fprintf(out, "%s %d %s", k ? "," : "", by_kind[k], gp_tensor_kind_name((gp_tensor_kind)k));
    fprintf(out, "; %d nodes; %d weights, %lld bytes\n", g->n_nodes, by_kind[GP_TENSOR_WEIGHT],
            (long long)weight_bytes);
}

void gp_program_ir_print(const gp_program *p, FILE *out)
{
    gp_graph_print(p->g, out);
}

int gp_program_plan(const gp_program *p, const gp_plan_opts *o, gp_plan **out, char *err,
                    size_t err_len)
{
    size_t from = strlen(gp_diag_text(p->d));
    if (gp_plan_build(p->g, o, out, p->d) == 0)
        return 0;
    diag_err(p, from, err, err_len);
    return -1;
}
