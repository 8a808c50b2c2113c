/* Graph parameters' overrides: a Hugging Face config.json and -D NAME=VALUE, converted to the kind
 * of each parameter's default (params.c). Internal to dsl/: lower.c binds the results. */
#ifndef GP_DSL_PARAMS_H
#define GP_DSL_PARAMS_H

#include <stdint.h>
#include "dsl/ast.h"
#include "dsl/dsl.h"

/* A compile-time value, as the lowering evaluates it. */
typedef enum { V_ERR, V_INT, V_FLOAT, V_STR, V_DTYPE, V_SYM, V_TENSOR } vkind;

typedef struct {
    vkind k;        /* V_ERR: an error was already reported; stay quiet */
    int64_t i;      /* V_INT; V_DTYPE: the gp_dtype; V_SYM: the sym index; V_TENSOR: the id */
    double f;       /* V_FLOAT */
    const char *s;  /* V_STR: owned by the tree, the options or the config */
} value;

static inline value vint(int64_t i) { return (value){V_INT, i, 0, NULL}; }
static inline value vfloat(double f) { return (value){V_FLOAT, 0, f, NULL}; }

/* The overrides of one compile: the -D texts and the loaded config.json. */
typedef struct gp_dsl_params gp_dsl_params;

/* Checks the -D overrides (NAME=VALUE syntax, NAME a parameter of ag) and loads o->config_path
 * when set; errors go to d. Never returns NULL: what failed to load overrides nothing. o may be
 * NULL. */
gp_dsl_params *gp_dsl_params_new(gp_diag *d, const gp_ast_graph *ag, const gp_dsl_opts *o);
/* The parameter `name` with default def (V_INT, V_FLOAT, V_STR or V_DTYPE): the config's value if
 * it has the key, then the last -D for it; V_ERR after reporting a value that does not fit.
 * A V_STR result points into the options or the config, so it lives until gp_dsl_params_free. */
value gp_dsl_params_resolve(gp_dsl_params *p, const char *name, value def);
void gp_dsl_params_free(gp_dsl_params *p);

#endif
