/* Builds the LoRA merge graph (planner/lora_merge.h): one matmul, mul and add per adapter target
 * of a model graph, so that merging an adapter is planned like any eval. */
#include "planner/lora_merge.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"

#define NAME_MAX_BYTES 1024

/* One target of the model graph: tensor ids of W, A and B in g; fan: W is [in, out] (Conv1D). */
typedef struct {
    int w, a, b;
    int fan;
    int64_t out, in;
} triple;

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* The first weight of g whose checkpoint name is `name`, or -1. */
static int find_weight(const gp_graph *g, const char *name)
{
    for (int i = 0; i < g->n_tensors; i++) {
        const gp_tensor *t = &g->tensors[i];
        if (t->kind == GP_TENSOR_WEIGHT && t->weight_name && !strcmp(t->weight_name, name))
            return i;
    }
    return -1;
}

/* How g reads weight w: 1 when a matmul takes it as b with tb=1 (Linear [out, in]), 0 with tb=0
 * (Conv1D [in, out]), -1 when no matmul reads it as b. */
static int weight_transposed(const gp_graph *g, int w)
{
    for (int i = 0; i < g->n_nodes; i++) {
        const gp_node *nd = &g->nodes[i];
        if (nd->op == GP_OP_MATMUL && nd->n_inputs == 2 && nd->inputs[1] == w)
            return nd->attrs.i[GP_MATMUL_TB] ? 1 : 0;
    }
    return -1;
}

static int is_2d_const(const gp_tensor *t)
{
    return t->ndim == 2 && t->shape[0].sym < 0 && t->shape[1].sym < 0;
}

/* Fills *tr for the lora_A weight a of g; -1 after reporting to d. */
static int find_triple(const gp_graph *g, gp_diag *d, int a, triple *tr)
{
    const gp_tensor *ta = &g->tensors[a];
    size_t pre = strlen(GP_LORA_PREFIX), suf = strlen(GP_LORA_A_SUFFIX);
    size_t len = strlen(ta->weight_name);
    char module[NAME_MAX_BYTES], name[NAME_MAX_BYTES + 64];
    if (len <= pre + suf || len - pre - suf >= sizeof module) {
        gp_diag_error(d, ta->loc, "LoRA weight '%s' has no module name", ta->weight_name);
        return -1;
    }
    memcpy(module, ta->weight_name + pre, len - pre - suf);
    module[len - pre - suf] = 0;
    snprintf(name, sizeof name, GP_LORA_PREFIX "%s" GP_LORA_B_SUFFIX, module);
    int b = find_weight(g, name);
    if (b < 0) {
        gp_diag_error(d, ta->loc, "LoRA weight '%s' has no matching '%s'", ta->weight_name, name);
        return -1;
    }
    snprintf(name, sizeof name, "%s.weight", module);
    int w = find_weight(g, name);
    if (w < 0) {
        gp_diag_error(d, ta->loc, "LoRA weight '%s' has no base weight '%s'", ta->weight_name,
                      name);
        return -1;
    }
    const gp_tensor *tb = &g->tensors[b], *tw = &g->tensors[w];
    if (!is_2d_const(ta) || !is_2d_const(tb) || !is_2d_const(tw) || tw->dtype == GP_I32) {
        gp_diag_error(d, ta->loc, "LoRA target '%s': W, A and B must be 2-dim float weights of "
                      "constant shape", name);
        return -1;
    }
    int64_t r = ta->shape[0].size;
    int64_t w0 = tw->shape[0].size, w1 = tw->shape[1].size;
    int64_t a_in = ta->shape[1].size, b_out = tb->shape[0].size;
    int linear_fits = w0 == b_out && w1 == a_in, conv_fits = w0 == a_in && w1 == b_out;
    int tr_use = weight_transposed(g, w);
    int fan;
    if (tr_use >= 0)
        fan = !tr_use; /* the layout the model computes with */
    else if (linear_fits != conv_fits)
        fan = conv_fits;
    else {
        gp_diag_error(d, tw->loc, "LoRA target '%s' [%lld, %lld]: no matmul reads it, and its "
                      "layout cannot be told from its shape", name, (long long)w0, (long long)w1);
        return -1;
    }
    if (tb->shape[1].size != r || !(fan ? conv_fits : linear_fits)) {
        gp_diag_error(d, ta->loc, "LoRA target '%s' is %s [%lld, %lld], but A is [%lld, %lld] and "
                      "B [%lld, %lld] (expected A [R, in], B [out, R])", name,
                      fan ? "a Conv1D weight [in, out]" : "a Linear weight [out, in]",
                      (long long)w0, (long long)w1, (long long)r, (long long)a_in,
                      (long long)b_out, (long long)tb->shape[1].size);
        return -1;
    }
    tr->w = w;
    tr->a = a;
    tr->b = b;
    tr->fan = fan;
    tr->out = b_out;
    tr->in = a_in;
    return 0;
}

/* Adds one target's tensors and nodes to mg; -1 after reporting to d. */
static int add_target(gp_graph *mg, gp_diag *d, const gp_graph *g, const triple *tr, int scale)
{
    const gp_tensor *tw = &g->tensors[tr->w], *ta = &g->tensors[tr->a], *tb = &g->tensors[tr->b];
    char module[NAME_MAX_BYTES], name[NAME_MAX_BYTES + 16];
    snprintf(module, sizeof module, "%.*s", (int)(strlen(tw->weight_name) - strlen(".weight")),
             tw->weight_name);
    gp_dim wshape[2] = {{tw->shape[0].size, -1}, {tw->shape[1].size, -1}};
    gp_dim ashape[2] = {{ta->shape[0].size, -1}, {ta->shape[1].size, -1}};
    gp_dim bshape[2] = {{tb->shape[0].size, -1}, {tb->shape[1].size, -1}};
    int w = gp_graph_add_tensor(mg, d, tw->weight_name, GP_TENSOR_WEIGHT, tw->dtype, 2, wshape,
                                tw->weight_name, tw->loc);
    int a = gp_graph_add_tensor(mg, d, ta->weight_name, GP_TENSOR_INPUT, GP_F32, 2, ashape, NULL,
                                ta->loc);
    int b = gp_graph_add_tensor(mg, d, tb->weight_name, GP_TENSOR_INPUT, GP_F32, 2, bshape, NULL,
                                tb->loc);
    if (w < 0 || a < 0 || b < 0)
        return -1;
    gp_attrs at;
    memset(&at, 0, sizeof at);
    int in[2];
    if (tr->fan) { /* delta [in, out] = A^T [in, R] B^T [R, out] */
        in[0] = a;
        in[1] = b;
        at.i[GP_MATMUL_TA] = at.i[GP_MATMUL_TB] = 1;
    } else { /* delta [out, in] = B [out, R] A [R, in] */
        in[0] = b;
        in[1] = a;
    }
    snprintf(name, sizeof name, "%s.delta", module);
    int delta = gp_graph_add_node(mg, d, GP_OP_MATMUL, in, 2, &at, NULL, 0, GP_F32, name, tw->loc);
    if (delta < 0)
        return -1;
    memset(&at, 0, sizeof at);
    in[0] = delta;
    in[1] = scale;
    snprintf(name, sizeof name, "%s.scaled", module);
    int scaled = gp_graph_add_node(mg, d, GP_OP_MUL, in, 2, &at, NULL, 0, GP_F32, name, tw->loc);
    if (scaled < 0)
        return -1;
    in[0] = w;
    in[1] = scaled;
    snprintf(name, sizeof name, "%s.merged", module);
    int sum = gp_graph_add_node(mg, d, GP_OP_ADD, in, 2, &at, NULL, 0, tw->dtype, NULL, tw->loc);
    if (sum < 0)
        return -1;
    return gp_graph_make_output(mg, d, sum, name, tw->dtype, 2, wshape, tw->loc) < 0 ? -1 : 0;
}

gp_graph *gp_lora_merge_graph(const gp_graph *g, gp_diag *d)
{
    gp_loc none = {NULL, 0, 0};
    if (!g) {
        gp_diag_error(d, none, "no graph to build a LoRA merge from");
        return NULL;
    }
    char gname[NAME_MAX_BYTES];
    snprintf(gname, sizeof gname, "%s_lora_merge", g->name);
    gp_graph *mg = gp_graph_new(gname);
    if (!mg) {
        gp_diag_error(d, none, "out of memory");
        return NULL;
    }
    gp_dim one = {1, -1};
    int scale = gp_graph_add_tensor(mg, d, GP_LORA_SCALE_INPUT, GP_TENSOR_INPUT, GP_F32, 1, &one,
                                    NULL, none);
    int n = 0;
    for (int i = 0; i < g->n_tensors && scale >= 0; i++) {
        const gp_tensor *t = &g->tensors[i];
        if (t->kind != GP_TENSOR_WEIGHT || !t->weight_name || !gp_lora_is_slot(t->weight_name) ||
            !ends_with(t->weight_name, GP_LORA_A_SUFFIX) || find_weight(g, t->weight_name) != i)
            continue; /* not a lora_A, or a second tensor of the same checkpoint name */
        triple tr;
        if (find_triple(g, d, i, &tr) || add_target(mg, d, g, &tr, scale))
            goto fail;
        n++;
    }
    if (scale < 0)
        goto fail;
    if (n == 0) {
        gp_diag_error(d, none, "graph '%s' declares no LoRA weights (%s<module>%s): compile it "
                      "with -D lora_r=R to build its merge graph", g->name, GP_LORA_PREFIX,
                      GP_LORA_A_SUFFIX);
        goto fail;
    }
    return mg;
fail:
    gp_graph_free(mg);
    return NULL;
}
