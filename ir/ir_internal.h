/* Helpers shared by the files of gp_ir (graph.c, shape.c, print.c); not part of the public API. */
#ifndef GP_IR_INTERNAL_H
#define GP_IR_INTERNAL_H

#include "ir/ir.h"

#define GP_SHAPE_STR 256
#define GP_MAX_BYTES ((int64_t)1 << 62)

/* Formats a shape as `[T, 768]` (symbolic dims by name) into buf; returns buf. */
const char *gp_ir_shape_str(const gp_graph *g, int ndim, const gp_dim *shape,
                            char buf[GP_SHAPE_STR]);

/* Two dims are equal when both are the same constant or the same symbolic dim. */
int gp_ir_dim_eq(gp_dim a, gp_dim b);

/* Checks a shape from the caller (rank, sizes > 0, known syms, element count and byte size within
 * 2^62) and copies it into out with symbolic sizes set to their bounds. Reports to d as
 * "WHAT: ..." and returns -1 on error. */
int gp_ir_check_shape(const gp_graph *g, gp_diag *d, gp_loc loc, const char *what, gp_dtype dtype,
                      int ndim, const gp_dim *shape, gp_dim *out);

/* Row-major strides in elements for shape at its bounds. */
void gp_ir_contiguous_strides(int ndim, const gp_dim *shape, int64_t *stride);

/* Appends a tensor (t is copied; t->name is ignored) named `name`, made unique; returns its id or -1
 * when out of memory. */
int gp_ir_push_tensor(gp_graph *g, const gp_tensor *t, const char *name);

/* Appends a node; returns its index or -1 when out of memory. */
int gp_ir_push_node(gp_graph *g, const gp_node *n);

/* A name not used by any tensor: `name`, else `name.1`, `name.2`, ...; `t<id>` when name is NULL.
 * The caller frees. */
char *gp_ir_unique_name(const gp_graph *g, const char *name);

/* Rebuilds the tensor-name hash index (after a rename). */
void gp_ir_reindex(gp_graph *g);

#endif
