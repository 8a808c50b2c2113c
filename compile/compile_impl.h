/* What a gp_program holds, and the compile it shares with the text API (text/lm.c plans a model's
 * graph in process): a source and its parameters into a checked graph. */
#ifndef GP_COMPILE_COMPILE_IMPL_H
#define GP_COMPILE_COMPILE_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "family/gguf_params.h"
#include "gplan/compile.h"
#include "ir/diag.h"
#include "ir/ir.h"

/* A GGUF file's part in compiling: read once for every compile of one source. */
typedef struct {
    gp_gguf_params params; /* its metadata as parameters */
    gp_gguf_weights w;     /* its tensors: the weights' dtypes, which the graph used */
} gp_compile_gguf;

void gp_compile_gguf_close(gp_compile_gguf *gg); /* a zeroed one is a no-op */

/* Compiles text[len] (text NULL: the file name) with o's defines, config, devices and GGUF file,
 * which the first call reads into *gg (zeroed before it; the caller closes it after the last
 * compile of the source). check: a GGUF file must hold every weight of the graph, and only them
 * unless o->allow_unused. *params (may be NULL): the resolved parameters, malloc'd (also when a
 * later check refuses the graph). NULL on failure: with err set, or when the compiler reported
 * to d, err "". o->lora_merge and o->diag are gp_program's, not read here. */
gp_graph *gp_compile_graph(const char *name, const char *text, size_t len,
                           const gp_compile_opts *o, gp_compile_gguf *gg, int check,
                           char **params, gp_diag *d, char *err, size_t err_len);

/* The value of name in resolved parameters' text ("a=1 b=2"): an integer, else -1. */
int64_t gp_compile_param(const char *params, const char *name);

struct gp_program {
    gp_graph *g;          /* with lora_merge, the merge graph */
    gp_diag *d;           /* its diagnostics; the graph's source locations point into it */
    char *params;         /* the resolved parameters */
    const char *name;     /* the source's file name (in strs) */
    char *text;           /* [len] a source given as text (copied); NULL: the file */
    size_t len;
    gp_compile_opts o;    /* its defines, config and gguf point into strs */
    char **strs;          /* [n_strs] copies: the defines, then name, config, gguf (or NULL) */
    int n_strs;
    gp_compile_gguf own;  /* the GGUF file's */
    gp_compile_gguf *gg;  /* &own, or the program's it was compiled again from (gp_program_fit) */
};

/* gp_program_define's: o.diag replaced by diag; with borrow the GGUF file is p's (p must outlive
 * the new program). */
gp_program *gp_program_redefine(const gp_program *p, const char *name, int64_t value, FILE *diag,
                                int borrow, char *err, size_t err_len);

#endif
