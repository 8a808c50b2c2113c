/* The CPU backend: the plan's arena and state regions allocated once, weights used in place from the
 * host, the session's io block as the io region; one thread-pool run per eval walks every node with
 * a barrier after each (and one inside a node of two phases, gp_cpu_two_phase). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend.h"
#include "runtime/comm.h"
#include "runtime/cpu_kernels.h"
#include "runtime/cpu_internal.h"
#include "runtime/threadpool.h"

#define GP_CPU_MAX_THREADS 256

typedef struct {
    const gp_plan *p;
    unsigned char *arena;         /* [regions[ARENA].size] intermediates and workspaces */
    unsigned char *state;         /* [regions[STATE].size] KV cache, zeroed at creation */
    unsigned char *io;            /* the session's io block */
    const unsigned char *extras;  /* this eval's records, set before each run */
    gp_threadpool *pool;
    int slot;                     /* this backend's slot in the extras records */
    gp_host_comm *comm;           /* tensor parallelism: the ranks' communicator, else NULL */
    int failed;                   /* this eval: a collective was aborted */
} cpu_ctx;

static void *alloc_region(const gp_plan_region *r)
{
    size_t align = r->alignment < 64 ? 64 : (size_t)r->alignment;
    size_t size = ((size_t)r->size + align - 1) / align * align;
    void *p = NULL;
    if (posix_memalign(&p, align, size ? size : align))
        return NULL;
    memset(p, 0, size ? size : align);
    return p;
}

static void cpu_destroy(void *vctx)
{
    cpu_ctx *c = vctx;
    if (!c)
        return;
    gp_threadpool_free(c->pool);
    free(c->arena);
    free(c->state);
    free(c);
}

static int cpu_create(const gp_backend_init *init, void **out, char *err, size_t err_len)
{
    const gp_plan *p = init->plan;
    *out = NULL;
    if (init->n_threads < 1 || init->n_threads > GP_CPU_MAX_THREADS) {
        snprintf(err, err_len, "cpu: %d threads, expected 1..%d", init->n_threads,
                 GP_CPU_MAX_THREADS);
        return -1;
    }
    cpu_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, err_len, "cpu: out of memory");
        return -1;
    }
    c->p = p;
    c->io = init->io;
    c->slot = init->slot;
    c->comm = init->n_ranks > 1 ? init->comm : NULL;
    c->arena = alloc_region(&p->regions[GP_REGION_ARENA]);
    c->state = alloc_region(&p->regions[GP_REGION_STATE]);
    if (!c->arena || !c->state) {
        snprintf(err, err_len, "cpu: cannot allocate the arena (%lld bytes) and state (%lld bytes)",
                 (long long)p->regions[GP_REGION_ARENA].size,
                 (long long)p->regions[GP_REGION_STATE].size);
        cpu_destroy(c);
        return -1;
    }
    c->pool = gp_threadpool_new(init->n_threads);
    if (!c->pool) {
        snprintf(err, err_len, "cpu: cannot start %d threads", init->n_threads);
        cpu_destroy(c);
        return -1;
    }
    for (int i = 0; i < p->n_tensors; i++) {
        const gp_plan_tensor *t = &p->tensors[i];
        if (t->view_src >= 0)
            continue;
        const unsigned char *base = NULL;
        switch (t->region) {
        case GP_REGION_ARENA: base = c->arena + t->offset; break;
        case GP_REGION_STATE: base = c->state + t->offset; break;
        case GP_REGION_IO: base = c->io + t->offset; break;
        case GP_REGION_WEIGHTS: base = init->weight_data[i]; break;
        default: break;
        }
        if (!base && t->size > 0) {
            snprintf(err, err_len, "cpu: tensor %s has no storage (weights not bound?)", t->name);
            cpu_destroy(c);
            return -1;
        }
        gp_extras_set_data(init->extras, p, i, init->slot, (uint64_t)(uintptr_t)base);
    }
    *out = c;
    return 0;
}

static void ktensor_of(const cpu_ctx *c, int id, gp_ktensor *k)
{
    gp_extras_view v;
    gp_extras_read(c->extras, c->p, id, c->slot, &v);
    k->data = (void *)(uintptr_t)v.data;
    k->dtype = c->p->tensors[id].dtype;
    k->ndim = c->p->tensors[id].ndim;
    memcpy(k->ne, v.ne, sizeof k->ne);
    memcpy(k->nb, v.nb, sizeof k->nb);
}

/* Runs on every pool thread: all nodes in order, each thread its share, a barrier after each node
 * that computes (views have nothing to compute: their records are already set). */
static void run_nodes(void *vctx, int ith, int nth)
{
    cpu_ctx *c = vctx;
    const gp_plan *p = c->p;
    for (int k = 0; k < p->n_nodes; k++) {
        const gp_plan_node *nd = &p->nodes[k];
        if (gp_op_get(nd->op)->is_view && nd->op != GP_OP_STORE)
            continue;
        gp_ktensor out, in[GP_MAX_INPUTS];
        ktensor_of(c, nd->output, &out);
        for (int i = 0; i < nd->n_inputs; i++)
            ktensor_of(c, nd->inputs[i], &in[i]);
        void *ws = NULL;
        size_t ws_size = 0;
        if (nd->workspace >= 0) {
            const gp_plan_tensor *w = &p->tensors[nd->workspace];
            ws = c->arena + w->offset;
            ws_size = (size_t)w->size;
        }
        int n_in = gp_cpu_device_inputs(nd->op, nd->n_inputs, c->slot);
        if (gp_cpu_two_phase(nd->op, &out, in, n_in, ws, ws_size)) {
            gp_cpu_compute_phase(nd->op, &out, in, n_in, ws, ws_size, ith, nth, 0);
            gp_threadpool_barrier(c->pool);
            gp_cpu_compute_phase(nd->op, &out, in, n_in, ws, ws_size, ith, nth, 1);
        } else {
            gp_cpu_compute(nd->op, &nd->attrs, &out, in, n_in, ws, ws_size, ith, nth);
        }
        gp_threadpool_barrier(c->pool);
        if (nd->op == GP_OP_ALL_REDUCE && c->comm) {
            /* Thread 0 sums over the devices while this device's other threads wait. */
            if (ith == 0 && gp_host_comm_all_reduce(c->comm, c->slot, out.data,
                                                    gp_ktensor_numel(&out), out.dtype))
                c->failed = 1;
            gp_threadpool_barrier(c->pool);
        }
    }
}

static int cpu_eval(void *vctx, const unsigned char *extras, char *err, size_t err_len)
{
    (void)err;
    (void)err_len;
    cpu_ctx *c = vctx;
    c->extras = extras;
    c->failed = 0;
    gp_threadpool_run(c->pool, run_nodes, c);
    if (c->failed) {
        snprintf(err, err_len, "cpu: all_reduce aborted (another device failed)");
        return -1;
    }
    return 0;
}

static int cpu_reset_state(void *vctx, char *err, size_t err_len)
{
    (void)err;
    (void)err_len;
    cpu_ctx *c = vctx;
    memset(c->state, 0, (size_t)c->p->regions[GP_REGION_STATE].size);
    return 0;
}

/* Everything is allocated in cpu_create; an eval allocates nothing. */
static int64_t cpu_alloc_count(void *vctx)
{
    (void)vctx;
    return 0;
}

const gp_backend_ops gp_backend_cpu = {
    "cpu", cpu_create, cpu_eval, cpu_reset_state, cpu_alloc_count, cpu_destroy,
    gp_host_comm_create, gp_host_comm_destroy, NULL, /* weights read in place */
};
