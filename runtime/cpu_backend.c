/* The CPU backend: the plan's arena and state regions allocated once, weights used in place from the
 * host, the session's io block as the io region; one thread-pool run per eval walks every node with
 * a barrier after each (and between the phases of a node that has several, gp_cpu_phases). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_kernels.h"
#include "cpu/cpu_internal.h"
#include "cpu/threadpool.h"
#include "runtime/backend.h"
#include "runtime/comm.h"

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
    unsigned char *fuse;          /* [n_nodes] nodes after this matmul its epilogue computes */
    atomic_llong *next;           /* [n_nodes] float matmuls' shared item counters, 0 at an eval */
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

/* ---- fusion: a float matmul and the elementwise nodes right after it ----
 * A matmul [M, N] (f32) followed by nodes that each take the previous one's output as their only
 * reader: add of a bias [N] or of a residual [M, N] (add, or all_reduce on one device), or a unary
 * activation, all f32. The matmul's rows get those steps before they are stored into the last
 * node's output (cpu/cpu_internal.h, gp_mm_epilogue): the same operations, one pass and one
 * barrier instead of one per node. Whether an eval may fuse is checked on its tensors (shapes,
 * and no written byte another thread still reads); if not, the nodes run one by one. */

/* Readers of each tensor among the nodes' inputs. */
static int *count_uses(const gp_plan *p)
{
    int *uses = calloc((size_t)p->n_tensors + 1, sizeof *uses);
    if (!uses)
        return NULL;
    for (int k = 0; k < p->n_nodes; k++)
        for (int i = 0; i < p->nodes[k].n_inputs; i++)
            if (p->nodes[k].inputs[i] >= 0)
                uses[p->nodes[k].inputs[i]]++;
    return uses;
}

static int same_dims(const gp_plan_tensor *a, const gp_plan_tensor *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->dims[d] != b->dims[d] || a->sym[d] != b->sym[d])
            return 0;
    return 1;
}

/* The epilogue step node k + 1 + s would be for tensor `cur` (-1: none); *other: its tensor. */
static int epi_step(const cpu_ctx *c, const int *uses, int cur, int nk, int *other)
{
    const gp_plan *p = c->p;
    const gp_plan_tensor *t = &p->tensors[cur];
    if (nk >= p->n_nodes || t->kind != GP_TENSOR_INTERMEDIATE || t->view_src >= 0 || uses[cur] != 1)
        return -1;
    const gp_plan_node *nx = &p->nodes[nk];
    const gp_plan_tensor *o = &p->tensors[nx->output];
    if (o->dtype != GP_F32 || !same_dims(o, t))
        return -1;
    if ((nx->op == GP_OP_GELU || nx->op == GP_OP_GELU_ERF || nx->op == GP_OP_SILU) &&
        nx->n_inputs == 1 && nx->inputs[0] == cur)
        return GP_EPI_UNARY;
    int add = nx->op == GP_OP_ADD || (nx->op == GP_OP_ALL_REDUCE && !c->comm);
    if (!add || nx->n_inputs != 2 || (nx->inputs[0] == cur) == (nx->inputs[1] == cur))
        return -1;
    *other = nx->inputs[nx->inputs[0] == cur ? 1 : 0];
    const gp_plan_tensor *y = &p->tensors[*other];
    if (y->dtype != GP_F32)
        return -1;
    if (y->ndim == 1 && y->dims[0] == t->dims[1] && y->sym[0] == t->sym[1])
        return GP_EPI_BIAS;
    return same_dims(y, t) ? GP_EPI_RESIDUAL : -1;
}

/* c->fuse[k]: how many nodes after matmul node k its epilogue can take (0: none). */
static int plan_fusion(cpu_ctx *c)
{
    const gp_plan *p = c->p;
    c->fuse = calloc((size_t)p->n_nodes + 1, 1);
    int *uses = count_uses(p);
    if (!c->fuse || !uses) {
        free(uses);
        return -1;
    }
    for (int k = 0; k < p->n_nodes; k++) {
        const gp_plan_node *nd = &p->nodes[k];
        const gp_plan_tensor *o = &p->tensors[nd->output];
        if (nd->op != GP_OP_MATMUL || nd->n_inputs != 2 || o->dtype != GP_F32 || o->ndim != 2 ||
            gp_dtype_is_quant(p->tensors[nd->inputs[1]].dtype))
            continue;
        int cur = nd->output, n = 0, other;
        while (n < GP_EPI_MAX && epi_step(c, uses, cur, k + 1 + n, &other) >= 0) {
            cur = p->nodes[k + 1 + n].output;
            n++;
        }
        c->fuse[k] = (unsigned char)n;
    }
    free(uses);
    return 0;
}

/* Bytes [lo, hi) that t's elements span (strides are never negative). */
static void span(const gp_ktensor *t, uintptr_t *lo, uintptr_t *hi)
{
    int64_t ext = (int64_t)gp_dtype_size(t->dtype);
    for (int d = 0; d < t->ndim; d++) {
        if (t->ne[d] == 0)
            ext = 0;
        if (ext)
            ext += (t->ne[d] - 1) * t->nb[d];
    }
    *lo = (uintptr_t)t->data;
    *hi = *lo + (uintptr_t)ext;
}

static int overlap(const gp_ktensor *a, const gp_ktensor *b)
{
    uintptr_t a0, a1, b0, b1;
    span(a, &a0, &a1);
    span(b, &b0, &b1);
    return a0 < b1 && b0 < a1;
}

static void ktensor_of(const cpu_ctx *c, int id, gp_ktensor *k);

/* This eval's epilogue for matmul node k and the output it writes (the last fused node's);
 * 0 when the eval's tensors do not allow it. */
static int epi_setup(const cpu_ctx *c, int k, const gp_ktensor *in, gp_mm_epilogue *e,
                     gp_ktensor *fout)
{
    const gp_plan *p = c->p;
    int n = c->fuse[k], cur = p->nodes[k].output;
    gp_ktensor mo, y[GP_EPI_MAX];
    ktensor_of(c, cur, &mo);
    ktensor_of(c, p->nodes[k + n].output, fout);
    if (fout->ndim != 2 || fout->ne[0] != mo.ne[0] || fout->ne[1] != mo.ne[1] ||
        overlap(fout, &in[0]) || overlap(fout, &in[1]))
        return 0;
    e->n = n;
    for (int s = 0; s < n; s++) {
        const gp_plan_node *nx = &p->nodes[k + 1 + s];
        if (nx->n_inputs == 1) {
            e->s[s].kind = GP_EPI_UNARY;
            e->s[s].op = nx->op;
            e->s[s].at = &nx->attrs;
            e->s[s].t = NULL;
            e->s[s].ld = 0;
        } else {
            ktensor_of(c, nx->inputs[nx->inputs[0] == cur ? 1 : 0], &y[s]);
            e->s[s].t = y[s].data;
            if (y[s].ndim == 1) {
                if (y[s].ne[0] != mo.ne[1] || y[s].nb[0] != 4 || overlap(fout, &y[s]))
                    return 0;
                e->s[s].kind = GP_EPI_BIAS;
                e->s[s].ld = 0;
            } else {
                /* The residual may be the output itself (an in-place add), element for element. */
                int same = y[s].data == fout->data && y[s].nb[0] == fout->nb[0] &&
                           y[s].nb[1] == fout->nb[1];
                if (y[s].ne[0] != mo.ne[0] || y[s].ne[1] != mo.ne[1] || y[s].nb[1] != 4 ||
                    y[s].nb[0] % 4 != 0 || (!same && overlap(fout, &y[s])))
                    return 0;
                e->s[s].kind = GP_EPI_RESIDUAL;
                e->s[s].ld = y[s].nb[0] / 4;
            }
        }
        cur = nx->output;
    }
    return 1;
}

/* Reads one byte of every 4 KiB of a weight, so that mapped weights (a GGUF or safetensors file)
 * have their pages in this process's page tables before the first eval, which would otherwise
 * take every page fault itself. */
static void touch_pages(const unsigned char *p, int64_t size)
{
    volatile unsigned char sink = 0;
    for (int64_t off = 0; off < size; off += 4096)
        sink ^= ((const volatile unsigned char *)p)[off];
    (void)sink;
}

static void cpu_destroy(void *vctx)
{
    cpu_ctx *c = vctx;
    if (!c)
        return;
    gp_threadpool_free(c->pool);
    free(c->fuse);
    free(c->next);
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
    c->next = calloc((size_t)p->n_nodes + 1, sizeof *c->next);
    if (!c->next || plan_fusion(c)) {
        snprintf(err, err_len, "cpu: out of memory");
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
        case GP_REGION_WEIGHTS:
            base = init->weight_data[i];
            if (base)
                touch_pages(base, t->size);
            break;
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
        if (c->fuse[k]) {
            gp_mm_epilogue e;
            gp_ktensor fout;
            if (epi_setup(c, k, in, &e, &fout)) {
                gp_cpu_matmul_epi(&nd->attrs, &fout, in, &e, &c->next[k], ith, nth);
                gp_threadpool_barrier(c->pool);
                k += c->fuse[k];
                continue;
            }
        }
        void *ws = NULL;
        size_t ws_size = 0;
        if (nd->workspace >= 0) {
            const gp_plan_tensor *w = &p->tensors[nd->workspace];
            ws = c->arena + w->offset;
            ws_size = (size_t)w->size;
        }
        int n_in = gp_cpu_device_inputs(nd->op, nd->n_inputs, c->slot), phases;
        if (nd->op == GP_OP_MATMUL && !gp_dtype_is_quant(in[1].dtype)) {
            gp_cpu_matmul_epi(&nd->attrs, &out, in, NULL, &c->next[k], ith, nth);
        } else if ((phases = gp_cpu_phases(nd->op, &out, in, n_in, ws, ws_size)) > 1) {
            for (int ph = 0; ph < phases; ph++) {
                if (ph)
                    gp_threadpool_barrier(c->pool);
                gp_cpu_compute_phase(nd->op, &nd->attrs, &out, in, n_in, ws, ws_size, ith, nth,
                                     ph);
            }
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
    for (int k = 0; k < c->p->n_nodes; k++) /* published to the workers by the run's start */
        atomic_store_explicit(&c->next[k], 0, memory_order_relaxed);
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

const gp_backend_ops gp_backend_cpu = {
    "cpu", cpu_create, cpu_eval, cpu_reset_state,
    NULL, /* no alloc_count: everything is allocated in cpu_create, an eval allocates nothing */
    cpu_destroy, gp_host_comm_create, gp_host_comm_destroy, NULL, /* weights read in place */
};
