/* The graph language front end: compiles a *.gplan source into an IR graph (ir/ir.h).
 * The language is described in docs/language.md. */
#ifndef GP_DSL_DSL_H
#define GP_DSL_DSL_H

#include <stddef.h>
#include "ir/diag.h"
#include "ir/ir.h"

typedef struct {
    const char **defines;    /* n_defines "NAME=VALUE" parameter overrides (-D); later ones win */
    int n_defines;
    const char *config_path; /* a Hugging Face config.json whose keys override parameters, or NULL */
    char **params_out;       /* if not NULL: receives the resolved parameters as text,
                                "n_layer=12 n_embd=768 ..." (malloc'd, caller frees; NULL on error) */
    int devices;             /* the builtin `devices` (tensor parallelism); <= 0 means 1 */
    const char *const *file_params; /* n_file_params "NAME=VALUE" values read from a checkpoint's
                                       metadata (gplan-compile --gguf): they set the parameters
                                       the graph declares (others are ignored), after the config
                                       file and before -D */
    int n_file_params;
    /* If not NULL: the dtype a weight gets, given its checkpoint name and declared dtype (e.g. the
     * dtype of the tensor in a GGUF file: gplan-compile --gguf). */
    gp_dtype (*weight_dtype)(void *ctx, const char *checkpoint_name, gp_dtype declared);
    void *weight_dtype_ctx;
} gp_dsl_opts;

/* Compiles the graph in `path`. Overrides from the config file apply first, then -D ones.
 * Returns the graph (free with gp_graph_free), or NULL when any error was reported to d
 * (an unreadable file is reported as `PATH: error: cannot open: REASON`). opts may be NULL. */
gp_graph *gp_dsl_compile_file(const char *path, const gp_dsl_opts *opts, gp_diag *d);

/* The same for a source text in memory; `name` is the file name used in messages. */
gp_graph *gp_dsl_compile_string(const char *name, const char *text, size_t len,
                                const gp_dsl_opts *opts, gp_diag *d);

#endif
