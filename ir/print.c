/* A readable text dump of the IR (gplan-compile --emit-ir): symbolic dims, tensors, then nodes in
 * schedule order with their attributes, output shape and source location. */
#include "ir/ir_internal.h"

/* The attributes that matter for op, as ` key=value` pairs. */
static void print_attrs(const gp_node *n, int out_ndim, FILE *out)
{
    const gp_attrs *a = &n->attrs;
    switch (n->op) {
    case GP_OP_MATMUL:
        if (a->i[0])
            fprintf(out, " ta=1");
        if (a->i[1])
            fprintf(out, " tb=1");
        break;
    case GP_OP_SCALE:
        fprintf(out, " s=%g", a->f[0]);
        if (a->f[1])
            fprintf(out, " softcap=%g", a->f[1]);
        break;
    case GP_OP_LAYER_NORM: fprintf(out, " eps=%g", a->f[0]); break;
    case GP_OP_RMS_NORM:
        fprintf(out, " eps=%g", a->f[0]);
        if (a->f[1])
            fprintf(out, " offset=%g", a->f[1]);
        break;
    case GP_OP_SOFTMAX:
        fprintf(out, " scale=%g", a->f[0]);
        if (a->i[0])
            fprintf(out, " causal=1");
        break;
    case GP_OP_ROPE:
        fprintf(out, " mode=%lld n=%lld theta=%g", (long long)a->i[0], (long long)a->i[1],
                a->f[0]);
        if (a->i[2] == GP_ROPE_LINEAR)
            fprintf(out, " linear(factor=%g)", a->f[1]);
        if (a->i[2] == GP_ROPE_LONGROPE)
            fprintf(out, " longrope(attn_factor=%g)", a->f[1]);
        if (a->i[2] > 0) {
            float lo, hi;
            gp_rope_factors(a, &lo, &hi);
            fprintf(out, " llama3(factor=%g low=%g high=%g orig=%lld)", a->f[1], (double)lo,
                    (double)hi, (long long)a->i[2]);
        }
        break;
    case GP_OP_PERMUTE:
        fprintf(out, " axes=(");
        for (int k = 0; k < out_ndim; k++)
            fprintf(out, "%s%lld", k ? ", " : "", (long long)a->i[k]);
        fprintf(out, ")");
        break;
    case GP_OP_SLICE:
        fprintf(out, " axis=%lld start=%lld len=%lld", (long long)a->i[0], (long long)a->i[1],
                (long long)a->i[2]);
        break;
    case GP_OP_VIEW: fprintf(out, " offset=%lld", (long long)a->i[0]); break;
    case GP_OP_CONCAT: fprintf(out, " axis=%lld", (long long)a->i[0]); break;
    case GP_OP_ATTENTION:
        fprintf(out, " scale=%g", a->f[0]);
        if (a->i[0])
            fprintf(out, " window=%lld", (long long)a->i[0]);
        if (a->i[1])
            fprintf(out, " ring=1");
        if (a->f[1])
            fprintf(out, " softcap=%g", a->f[1]);
        break;
    case GP_OP_STORE:
        if (a->i[0])
            fprintf(out, " ring=1");
        break;
    default: break;
    }
}

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
        print_attrs(n, t->ndim, out);
        fprintf(out, " -> %s %s", gp_ir_shape_str(g, t->ndim, t->shape, s),
                gp_dtype_name(t->dtype));
        if (n->loc.file && n->loc.line > 0)
            fprintf(out, "   # %s:%d", n->loc.file, n->loc.line);
        fprintf(out, "\n");
    }
}
