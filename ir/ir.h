/* The graph IR: tensors, nodes and the schedule, built by the language front end (dsl/) and read by
 * the planner. Shape and dtype inference runs as each node is added, and its errors point at the
 * node's source location. */
#ifndef GP_IR_IR_H
#define GP_IR_IR_H

#include "ir/core.h"
#include "ir/diag.h"

/* One dim: a constant, or a symbolic dim (sym >= 0) whose size is chosen per eval up to its bound. */
typedef struct {
    int64_t size; /* the constant size, or the symbolic dim's upper bound */
    int sym;      /* -1 for a constant, else an index into gp_graph.syms */
} gp_dim;

typedef struct {
    char *name;    /* e.g. "T" */
    int64_t bound; /* planned size: every eval uses at most this */
    gp_loc loc;
} gp_sym;

typedef struct {
    char *name;           /* unique in the graph */
    gp_tensor_kind kind;
    gp_dtype dtype;
    int ndim;             /* 0..GP_MAX_DIMS; 0 is a scalar */
    gp_dim shape[GP_MAX_DIMS];   /* outermost first */
    int64_t stride[GP_MAX_DIMS]; /* in elements, at the bounds; contiguous unless a view */
    int view_src;         /* views: the tensor viewed (maybe a view itself); else -1 */
    int64_t view_offset;  /* views: byte offset into view_src's storage */
    char *weight_name;    /* weights: checkpoint name, e.g. "transformer.h.0.attn.c_attn.weight" */
    gp_split split;       /* weights of a tensor-parallel graph: the cut; else groups = 0 */
    int producer;         /* the node computing it, or -1 (inputs, weights, state) */
    gp_loc loc;
} gp_tensor;

typedef struct {
    gp_op op;
    int n_inputs;
    int inputs[GP_MAX_INPUTS]; /* tensor ids */
    int output;                /* tensor id */
    gp_attrs attrs;
    gp_loc loc;
} gp_node;

/* Nodes are kept in the order they were added, which is a valid schedule (topological order):
 * a node can only use tensors that exist when it is added. */
typedef struct {
    char *name;
    gp_tensor *tensors;
    int n_tensors, cap_tensors;
    gp_node *nodes;
    int n_nodes, cap_nodes;
    gp_sym *syms;
    int n_syms, cap_syms;
    int *name_index;      /* [name_slots] open-addressing hash of tensor names: id + 1, 0 empty */
    int name_slots;       /* a power of two, or 0 when the index is absent (lookups then scan) */
} gp_graph;

gp_graph *gp_graph_new(const char *name);
void gp_graph_free(gp_graph *g);

/* Adds a symbolic dim; returns its index, or -1 when the name is taken. */
int gp_graph_add_sym(gp_graph *g, const char *name, int64_t bound, gp_loc loc);

/* Adds a leaf tensor (input, output, weight or state) with contiguous strides; returns its id, or -1
 * after reporting an error to d (duplicate name, bad rank or size). weight_name may be NULL. */
int gp_graph_add_tensor(gp_graph *g, gp_diag *d, const char *name, gp_tensor_kind kind,
                        gp_dtype dtype, int ndim, const gp_dim *shape, const char *weight_name,
                        gp_loc loc);

/* Adds a node, inferring its output's shape and dtype. The output is named `name` (made unique
 * when NULL or taken). `shape`/`ndim` give the output shape for ops that need one (reshape, view);
 * `dtype` is used by cast only. Returns the output tensor id, or -1 after reporting to d an error
 * that names the op, the inputs and the expected and actual shapes. */
int gp_graph_add_node(gp_graph *g, gp_diag *d, gp_op op, const int *inputs, int n_inputs,
                      const gp_attrs *attrs, const gp_dim *shape, int ndim, gp_dtype dtype,
                      const char *name, gp_loc loc);

/* Makes `value_id` the graph output `name` with the declared dtype and shape. An intermediate
 * of that dtype and shape becomes the output itself (renamed, kind OUTPUT); anything else (a view,
 * an input, another dtype) is copied by a cont or cast node named `name`. Returns the output's
 * tensor id, or -1 after reporting a shape or dtype mismatch (expected vs actual) to d. */
int gp_graph_make_output(gp_graph *g, gp_diag *d, int value_id, const char *name, gp_dtype dtype,
                         int ndim, const gp_dim *shape, gp_loc loc);

int gp_graph_find_tensor(const gp_graph *g, const char *name); /* id or -1 */

/* Bytes of a tensor's own storage at its bounds (views: their extent in the base). */
int64_t gp_tensor_nbytes(const gp_tensor *t);
int gp_tensor_is_contiguous(const gp_tensor *t);

/* Prints the IR as text: symbolic dims, then tensors, then nodes in schedule order. */
void gp_graph_print(const gp_graph *g, FILE *out);

#endif
