/* A readable text dump of the IR (gplan-compile --emit-ir): symbolic dims, tensors, then nodes in
 * schedule order with their attributes, output shape and source location. */
#include "ir/ir_internal.h"

static void print_strides(const gp_tensor *t, FILE *out)
{
    fprintf(out, "[");
    for (int i = 0; i < t->ndim; i++)
        fprintf(out, "%s%lld", i ? ", " : "", (long long)t->stride[i]);
    fprintf(out, "]");
}

void gp_graph_print(const gp_graph *g, FILE *out)
{
    if (!g || !out)
        return;
    char s[GP_SHAPE_STR];
    fprintf(out, "graph %s\n", g->name);
    for (int i = 0; i < g->n_syms; i++)
        fprintf(out, "sym %s <= %lld\n", g->syms[i].name, (long long)g->syms[i].bound);
    for (int i = 0; i < g->n_tensors; i++) {
        const gp_tensor *t = &g->tensors[i];
        fprintf(out, "tensor %%%d %s: %s %s %s", i, t->name, gp_tensor_kind_name(t->kind),
                gp_dtype_name(t->dtype), gp_ir_shape_str(g, t->ndim, t->shape, s));
        if (t->kind == GP_TENSOR_VIEW) {
            fprintf(out, " of %%%d +%lld stride ", t->view_src, (long long)t->view_offset);
            print_strides(t, out);
        }
        if (t->weight_name)
            fprintf(out, " = \"%s\"", t->weight_name);
        fprintf(out, "\n");
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const gp_node *n = &g->nodes[i];
        const gp_tensor *t = &g->tensors[n->output];
        const gp_op_info *info = gp_op_get(n->op);
        fprintf(out, "%%%d = %s(", n->output, info ? info->name : "?");
        for (int k = 0; k < n->n_inputs; k++)
            fprintf(out, "%s%%%d", k ? ", " : "", n->inputs[k]);
        fprintf(out, ")");
        gp_attrs_print(n->op, &n->attrs, t->ndim, out);
        fprintf(out, " -> %s %s", gp_ir_shape_str(g, t->ndim, t->shape, s),
                gp_dtype_name(t->dtype));
        if (n->loc.file && n->loc.line > 0)
            fprintf(out, "   # %s:%d", n->loc.file, n->loc.line);
        fprintf(out, "\n");
    }
}
