/* Op workspaces: the one place their sizes are computed (formulas in plan/plan.h, GP_WS_*), used
 * by the planner to size them and by sessions to refuse a plan sized for another backend. */
#include <stdio.h>

#include "cpu/moe.h" /* gp_moe_ws (inline) */
#include "plan/plan.h"

const char *gp_backend_name(gp_backend b)
{
    switch (b) {
    case GP_BACKEND_CPU: return "cpu";
    case GP_BACKEND_CUDA: return "cuda";
    default: return "?";
    }
}

int64_t gp_workspace_bytes(gp_op op, gp_backend backend, int64_t t, int64_t h, int64_t d,
                           int64_t s)
{
    switch (op) {
    case GP_OP_MATMUL:
        return backend == GP_BACKEND_CUDA ? GP_WS_CUBLAS_BYTES : 0;
    case GP_OP_ATTENTION:
        if (backend == GP_BACKEND_CUDA) {
            if (t > GP_WS_ATTN_SPLIT_MAX_T)
                t = GP_WS_ATTN_SPLIT_MAX_T;
            return (int64_t)GP_WS_ATTN_SPLITS * t * h * (d + 2) * 4;
        }
        return (int64_t)GP_WS_CPU_MAX_THREADS * s * 4;
    default:
        return 0;
    }
}

int64_t gp_plan_workspace_min(const gp_plan *p, int i, gp_backend backend)
{
    const gp_plan_node *nd = &p->nodes[i];
    if (nd->op == GP_OP_MOE) { /* the CPU's layout, at the bounds; CUDA has no moe kernel */
        const gp_plan_tensor *x = &p->tensors[nd->inputs[0]], *r = &p->tensors[nd->inputs[1]];
        const gp_plan_tensor *g = &p->tensors[nd->inputs[2]];
        if (backend != GP_BACKEND_CPU || x->ndim != 2 || r->ndim != 2 || g->ndim != 3)
            return 0;
        return gp_moe_ws(x->dims[0], x->dims[1], r->dims[0], nd->attrs.i[GP_MOE_TOP_K],
                         g->dims[1], gp_dtype_is_quant(g->dtype))
            .total;
    }
    if (nd->op != GP_OP_ATTENTION)
        return gp_workspace_bytes(nd->op, backend, 0, 0, 0, 0);
    const gp_plan_tensor *q = &p->tensors[nd->inputs[0]]; /* [T, H, D] */
    const gp_plan_tensor *k = &p->tensors[nd->inputs[1]]; /* [S, G, D] */
    if (q->ndim != 3 || k->ndim != 3)
        return 0;
    int64_t s = k->dims[0]; /* the rows a query scores: a ragged batch's, its sequence's */
    if (nd->n_inputs == 6 && p->tensors[nd->inputs[5]].ndim == 2)
        s = p->tensors[nd->inputs[5]].dims[1] * nd->attrs.i[GP_ATTENTION_BLOCK];
    if (backend == GP_BACKEND_CPU)
        return s * 4; /* one thread's scores */
    return gp_workspace_bytes(nd->op, backend, q->dims[0], q->dims[1], q->dims[2], s);
}

int gp_plan_check_workspaces(const gp_plan *p, gp_backend backend, char *err, size_t err_len)
{
    for (int i = 0; i < p->n_nodes; i++) {
        int64_t need = gp_plan_workspace_min(p, i, backend);
        int w = p->nodes[i].workspace;
        int64_t have = w >= 0 ? p->tensors[w].size : 0;
        if (have < need) {
            snprintf(err, err_len,
                     "%s: node %d (%s) has a workspace of %lld bytes, the %s backend needs %lld: "
                     "the plan was built for another backend (gplan-compile --backend %s or any)",
                     p->graph_name ? p->graph_name : "plan", i, gp_op_get(p->nodes[i].op)->name,
                     (long long)have, gp_backend_name(backend), (long long)need,
                     gp_backend_name(backend));
            return -1;
        }
    }
    return 0;
}
