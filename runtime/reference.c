/* The reference executor: the same kernels as the CPU backend, but every tensor in its own allocation
 * (the plan's offsets and in-place reuse ignored) and one thread. Tests compare the planned CPU
 * backend with it bit for bit: any overlap the planner got wrong changes the planned result. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_kernels.h"
#include "runtime/backend.h"
#include "runtime/comm.h"

typedef struct {
    const gp_plan *p;
    int slot;
    gp_host_comm *comm;       /* tensor parallelism: the ranks' communicator, else NULL */
    unsigned char *host_io;   /* the session's io block */
    unsigned char **own;      /* [n_tensors] each tensor's own bytes (size of its plan size); NULL
                                 for views and weights (weights are read in place from the host) */
} ref_ctx;

static void ref_destroy(void *vctx)
{
    ref_ctx *c = vctx;
    if (!c)
        return;
    if (c->own)
        for (int i = 0; i < c->p->n_tensors; i++)
            free(c->own[i]);
    free(c->own);
    free(c);
}

static int ref_create(const gp_backend_init *init, void **out, char *err, size_t err_len)
{
    const gp_plan *p = init->plan;
    *out = NULL;
    ref_ctx *c = calloc(1, sizeof *c);
    if (!c || !(c->own = calloc((size_t)p->n_tensors + 1, sizeof *c->own))) {
        snprintf(err, err_len, "reference: out of memory");
        ref_destroy(c);
        return -1;
    }
    c->p = p;
    c->slot = init->slot;
    c->comm = init->n_ranks > 1 ? init->comm : NULL;
    c->host_io = init->io;
    for (int i = 0; i < p->n_tensors; i++) {
        const gp_plan_tensor *t = &p->tensors[i];
        if (t->view_src >= 0)
            continue;
        const void *addr;
        if (t->region == GP_REGION_WEIGHTS) {
            addr = init->weight_data[i];
            if (!addr && t->size > 0) {
                snprintf(err, err_len, "reference: weight %s has no data", t->name);
                ref_destroy(c);
                return -1;
            }
        } else {
            /* Zeroed: the state starts at zero, and nothing else may depend on initial bytes. */
            c->own[i] = calloc(1, t->size > 0 ? (size_t)t->size : 1);
            if (!c->own[i]) {
                snprintf(err, err_len, "reference: cannot allocate %s (%lld bytes)", t->name,
                         (long long)t->size);
                ref_destroy(c);
                return -1;
            }
            addr = c->own[i];
        }
        gp_extras_set_data(init->extras, p, i, init->slot, (uint64_t)(uintptr_t)addr);
    }
    *out = c;
    return 0;
}

static void ktensor_of(const ref_ctx *c, const unsigned char *extras, int id, gp_ktensor *k)
{
    gp_extras_view v;
    gp_extras_read(extras, c->p, id, c->slot, &v);
    k->data = (void *)(uintptr_t)v.data;
    k->dtype = c->p->tensors[id].dtype;
    k->ndim = c->p->tensors[id].ndim;
    memcpy(k->ne, v.ne, sizeof k->ne);
    memcpy(k->nb, v.nb, sizeof k->nb);
}

/* Copies every INPUT (to_own = 1) from the host io block, or every OUTPUT back to it. */
static void copy_io(ref_ctx *c, const unsigned char *extras, gp_tensor_kind kind, int to_own)
{
    const gp_plan *p = c->p;
    for (int i = 0; i < p->n_tensors; i++) {
        const gp_plan_tensor *t = &p->tensors[i];
        if (t->kind != kind || t->view_src >= 0)
            continue;
        gp_extras_view v;
        gp_extras_read(extras, p, i, c->slot, &v);
        size_t n = (size_t)gp_extras_packed_bytes(t, &v);
        if (to_own)
            memcpy(c->own[i], c->host_io + t->offset, n);
        else
            memcpy(c->host_io + t->offset, c->own[i], n);
    }
}

static int ref_eval(void *vctx, const unsigned char *extras, char *err, size_t err_len)
{
    (void)err;
    (void)err_len;
    ref_ctx *c = vctx;
    const gp_plan *p = c->p;
    copy_io(c, extras, GP_TENSOR_INPUT, 1);
    for (int k = 0; k < p->n_nodes; k++) {
        const gp_plan_node *nd = &p->nodes[k];
        if (gp_op_get(nd->op)->is_view && nd->op != GP_OP_STORE)
            continue;
        gp_ktensor out, in[GP_MAX_INPUTS];
        ktensor_of(c, extras, nd->output, &out);
        for (int i = 0; i < nd->n_inputs; i++)
            ktensor_of(c, extras, nd->inputs[i], &in[i]);
        void *ws = NULL;
        size_t ws_size = 0;
        if (nd->workspace >= 0) {
            ws = c->own[nd->workspace];
            ws_size = (size_t)p->tensors[nd->workspace].size;
        }
        gp_cpu_compute(nd->op, &nd->attrs, &out, in,
                       gp_cpu_device_inputs(nd->op, nd->n_inputs, c->slot), ws, ws_size, 0, 1);
        if (nd->op == GP_OP_ALL_REDUCE && c->comm &&
            gp_host_comm_all_reduce(c->comm, c->slot, out.data, gp_ktensor_numel(&out),
                                    out.dtype)) {
            snprintf(err, err_len, "reference: all_reduce aborted (another device failed)");
            return -1;
        }
    }
    copy_io(c, extras, GP_TENSOR_OUTPUT, 0);
    return 0;
}

static int ref_reset_state(void *vctx, char *err, size_t err_len)
{
    (void)err;
    (void)err_len;
    ref_ctx *c = vctx;
    for (int i = 0; i < c->p->n_tensors; i++)
        if (c->p->tensors[i].region == GP_REGION_STATE && c->own[i])
            memset(c->own[i], 0, (size_t)c->p->tensors[i].size);
    return 0;
}

const gp_backend_ops gp_backend_reference = {
    "reference", ref_create, ref_eval, ref_reset_state,
    NULL, /* no alloc_count: everything is allocated in ref_create */
    ref_destroy, gp_host_comm_create, gp_host_comm_destroy, NULL, /* weights read in place */
};
