/* The CUDA backend (gp_backend_cuda, runtime/backend.h): one device allocation per region made at
 * creation, the weights uploaded once, a cuBLAS handle working in the planned workspace, and each
 * eval replayed from a CUDA graph captured at creation per bucket of the token count. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "cuda/cuda_kernels.h"
#include "runtime/backend.h"

#define MAX_GRAPHS 24

/* Every CUDA call goes through this: on failure, the statement and CUDA's message go to err. */
#define CU_TRY(call)                                                                               \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            snprintf(err, err_len, "cuda: %s: %s", #call, cudaGetErrorString(e_));                \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

typedef struct {
    gp_cu_tensor out;                /* the node's output as the kernels see it */
    gp_cu_tensor in[GP_MAX_INPUTS];  /* [n_inputs] */
    void *ws;                        /* its planned workspace on the device, or NULL */
    size_t ws_size;
} cu_node;

typedef struct {
    int64_t top;          /* the bucket's largest token count (0: a plan with no symbolic dim) */
    cudaGraphExec_t exec; /* one whole eval: param and input copies, kernels, output copies */
} cu_graph;

typedef struct {
    const gp_plan *p;
    int slot;
    unsigned char *host_io;         /* the session's io block */
    int io_registered;              /* host_io is page-locked (cudaHostRegister) */
    unsigned char *pin_io;          /* else: a pinned staging copy of it */
    void *raw[GP_REGION_COUNT];     /* the regions' allocations */
    unsigned char *dev[GP_REGION_COUNT]; /* their bases, aligned as the plan asks */
    void *dparam;                   /* device: int64 syms [n_syms], then unsigned counters */
    int64_t *pin_syms;              /* pinned host [n_syms]: this eval's sizes, copied in each eval */
    int64_t *launch;                /* host [n_syms]: sizes launches are made for */
    int *sym_tensor, *sym_dim;      /* [n_syms]: where each size is read from the extras */
    cu_node *nodes;                 /* [n_nodes] */
    cudaStream_t stream;
    cublasHandle_t blas;
    gp_cu_ctx kc;
    cu_graph graphs[MAX_GRAPHS];
    int n_graphs;
    int buckets;                    /* 1: pad the token count to a power of two (cuBLAS safe) */
    int created;                    /* create has returned: allocations now count */
    int64_t allocs;                 /* allocations made after create returned (0 by design) */
} cuda_be;

/* ---- allocations, counted once the session is created ---- */

static cudaError_t be_malloc(cuda_be *b, void **p, size_t n)
{
    if (b->created)
        b->allocs++;
    return cudaMalloc(p, n ? n : 1);
}

static cudaError_t be_host_alloc(cuda_be *b, void **p, size_t n)
{
    if (b->created)
        b->allocs++;
    return cudaHostAlloc(p, n ? n : 1, cudaHostAllocDefault);
}

static int64_t numel_at(const gp_plan_tensor *t, const int64_t *syms)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->sym[d] >= 0 && syms ? syms[t->sym[d]] : t->dims[d];
    return n;
}

static void *tensor_addr(const cuda_be *b, const gp_plan_tensor *t)
{
    if (t->size <= 0 || t->region >= GP_REGION_EXTRAS)
        return NULL;
    return b->dev[t->region] + t->offset;
}

static void tensor_of(const cuda_be *b, int id, gp_cu_tensor *k)
{
    const gp_plan_tensor *t = &b->p->tensors[id];
    memset(k, 0, sizeof *k);
    k->data = tensor_addr(b, t);
    k->dtype = t->dtype;
    k->ndim = t->ndim;
    for (int d = 0; d < GP_MAX_DIMS; d++) {
        k->ne[d] = d < t->ndim ? t->dims[d] : 1;
        k->sym[d] = d < t->ndim ? t->sym[d] : -1;
        k->nb[d] = d < t->ndim ? t->stride[d] * (int64_t)gp_dtype_size(t->dtype) : 0;
    }
}

/* ---- one eval's work, enqueued on the stream (run directly or captured into a graph) ---- */

static int enqueue_eval(cuda_be *b, char *err, size_t err_len)
{
    const gp_plan *p = b->p;
    unsigned char *hio = b->io_registered ? b->host_io : b->pin_io;
    if (p->n_syms)
        CU_TRY(cudaMemcpyAsync(b->dparam, b->pin_syms, sizeof(int64_t) * p->n_syms,
                               cudaMemcpyHostToDevice, b->stream));
    for (int i = 0; i < p->n_tensors; i++) {
        const gp_plan_tensor *t = &p->tensors[i];
        if (t->kind != GP_TENSOR_INPUT || t->view_src >= 0 || t->size <= 0)
            continue;
        size_t n = (size_t)(numel_at(t, b->launch) * (int64_t)gp_dtype_size(t->dtype));
        CU_TRY(cudaMemcpyAsync(b->dev[GP_REGION_IO] + t->offset, hio + t->offset, n,
                               cudaMemcpyHostToDevice, b->stream));
    }
    for (int i = 0; i < p->n_nodes; i++) {
        const gp_plan_node *nd = &p->nodes[i];
        cu_node *cn = &b->nodes[i];
        if (gp_cuda_compute(&b->kc, nd->op, &nd->attrs, &cn->out, cn->in, nd->n_inputs, cn->ws,
                            cn->ws_size)) {
            snprintf(err, err_len, "cuda: node %d (%s -> %s, line %d): %s", i,
                     gp_op_get(nd->op)->name, p->tensors[nd->output].name, nd->line, b->kc.err);
            return -1;
        }
    }
    for (int i = 0; i < p->n_tensors; i++) {
        const gp_plan_tensor *t = &p->tensors[i];
        if (t->kind != GP_TENSOR_OUTPUT || t->size <= 0)
            continue;
        size_t n = (size_t)(numel_at(t, b->launch) * (int64_t)gp_dtype_size(t->dtype));
        CU_TRY(cudaMemcpyAsync(hio + t->offset, tensor_addr(b, t), n, cudaMemcpyDeviceToHost,
                               b->stream));
    }
    return 0;
fail:
    return -1;
}

/* Captures one eval at launch sizes `top` (for the plan's one symbolic dim) into a graph. */
static int capture(cuda_be *b, int64_t top, char *err, size_t err_len)
{
    cudaGraph_t g = NULL;
    if (b->p->n_syms)
        b->launch[0] = top;
    CU_TRY(cudaStreamBeginCapture(b->stream, cudaStreamCaptureModeThreadLocal));
    int r = enqueue_eval(b, err, err_len);
    cudaError_t e = cudaStreamEndCapture(b->stream, &g);
    if (r)
        goto fail;
    CU_TRY(e);
    cu_graph *cg = &b->graphs[b->n_graphs];
    CU_TRY(cudaGraphInstantiate(&cg->exec, g, 0));
    cg->top = top;
    b->n_graphs++;
    cudaGraphDestroy(g);
    return 0;
fail:
    if (g)
        cudaGraphDestroy(g);
    return -1;
}

/* 1 when launches may be made for more tokens than the eval has: every kernel reads the token
 * count from the param block, and cuBLAS (which cannot) only gets it as rows (M, batch, N), never
 * as the contracted K, so padded rows compute garbage that nothing reads. */
static int bucket_safe(const gp_plan *p)
{
    for (int i = 0; i < p->n_nodes; i++) {
        const gp_plan_node *nd = &p->nodes[i];
        if (nd->op != GP_OP_MATMUL)
            continue;
        const gp_plan_tensor *a = &p->tensors[nd->inputs[0]];
        if (a->ndim >= 2 && a->sym[a->ndim - (nd->attrs.i[0] ? 2 : 1)] >= 0)
            return 0;
    }
    return 1;
}

/* io tensors are copied packed at their runtime shape: only their first dim may be symbolic. */
static int check_io(const gp_plan *p, char *err, size_t err_len)
{
    for (int i = 0; i < p->n_tensors; i++) {
        const gp_plan_tensor *t = &p->tensors[i];
        if (t->kind != GP_TENSOR_INPUT && t->kind != GP_TENSOR_OUTPUT)
            continue;
        int64_t packed = 1;
        for (int d = t->ndim - 1; d >= 0; d--) {
            if (d > 0 && t->sym[d] >= 0) {
                snprintf(err, err_len, "cuda: io tensor %s: only its first dim may be symbolic",
                         t->name);
                return -1;
            }
            if (t->dims[d] > 1 && t->stride[d] != packed) {
                snprintf(err, err_len, "cuda: io tensor %s is not contiguous", t->name);
                return -1;
            }
            packed *= t->dims[d];
        }
    }
    return 0;
}

static void be_destroy(void *ctx);

static int be_create(const gp_backend_init *init, void **out, char *err, size_t err_len)
{
    const gp_plan *p = init->plan;
    int ndev = 0;
    *out = NULL;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        cudaGetLastError();
        snprintf(err, err_len, "cuda: no CUDA device");
        return -1;
    }
    if (init->device < 0 || init->device >= ndev) {
        snprintf(err, err_len, "cuda: device %d out of range (%d devices)", init->device, ndev);
        return -1;
    }
    if (check_io(p, err, err_len))
        return -1;
    cuda_be *b = calloc(1, sizeof *b);
    if (!b) {
        snprintf(err, err_len, "cuda: out of memory");
        return -1;
    }
    b->p = p;
    b->slot = init->slot;
    b->host_io = init->io;
    b->nodes = calloc((size_t)p->n_nodes + 1, sizeof *b->nodes);
    b->launch = calloc((size_t)p->n_syms + 1, sizeof *b->launch);
    b->sym_tensor = calloc((size_t)p->n_syms + 1, sizeof *b->sym_tensor);
    b->sym_dim = calloc((size_t)p->n_syms + 1, sizeof *b->sym_dim);
    if (!b->nodes || !b->launch || !b->sym_tensor || !b->sym_dim) {
        snprintf(err, err_len, "cuda: out of memory");
        goto fail;
    }
    CU_TRY(cudaSetDevice(init->device));
    CU_TRY(cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking));

    /* One allocation per region, aligned up to the plan's alignment (cudaMalloc gives 256). */
    for (int r = 0; r < GP_REGION_COUNT; r++) {
        if (r == GP_REGION_EXTRAS)
            continue;
        int64_t al = p->regions[r].alignment > 256 ? p->regions[r].alignment : 0;
        CU_TRY(be_malloc(b, &b->raw[r], (size_t)(p->regions[r].size + al)));
        uintptr_t a = (uintptr_t)b->raw[r];
        b->dev[r] = (unsigned char *)(al ? (a + (uintptr_t)al - 1) & ~((uintptr_t)al - 1) : a);
    }
    /* The arena too starts zeroed, so rows a padded launch reads are finite at first. */
    CU_TRY(cudaMemset(b->dev[GP_REGION_STATE], 0, (size_t)p->regions[GP_REGION_STATE].size));
    CU_TRY(cudaMemset(b->dev[GP_REGION_ARENA], 0, (size_t)p->regions[GP_REGION_ARENA].size));
    CU_TRY(cudaMemset(b->dev[GP_REGION_IO], 0, (size_t)p->regions[GP_REGION_IO].size));
    /* The param block: sizes, then split-K counters (zero between launches). */
    size_t psz = sizeof(int64_t) * (size_t)(p->n_syms + 1) + sizeof(unsigned) * GP_CU_COUNTERS;
    CU_TRY(be_malloc(b, &b->dparam, psz));
    CU_TRY(cudaMemset(b->dparam, 0, psz));
    CU_TRY(be_host_alloc(b, (void **)&b->pin_syms, sizeof(int64_t) * (size_t)(p->n_syms + 1)));
    /* Inputs and outputs move straight from and to the session's io block, page-locked here. */
    size_t io_size = (size_t)p->regions[GP_REGION_IO].size;
    if (io_size && cudaHostRegister(b->host_io, io_size, cudaHostRegisterDefault) == cudaSuccess) {
        b->io_registered = 1;
    } else {
        cudaGetLastError();
        CU_TRY(be_host_alloc(b, (void **)&b->pin_io, io_size));
    }

    /* Weights, once. */
    for (int i = 0; i < p->n_tensors; i++) {
        const gp_plan_tensor *t = &p->tensors[i];
        if (t->kind != GP_TENSOR_WEIGHT || t->view_src >= 0 || t->size <= 0)
            continue;
        if (!init->weight_data || !init->weight_data[i]) {
            snprintf(err, err_len, "cuda: weight %s has no host data", t->name);
            goto fail;
        }
        size_t n = (size_t)(numel_at(t, NULL) * (int64_t)gp_dtype_size(t->dtype));
        CU_TRY(cudaMemcpy(tensor_addr(b, t), init->weight_data[i], n, cudaMemcpyHostToDevice));
    }
    /* Device addresses of every tensor that is not a view, in this backend's extras slot. */
    for (int i = 0; i < p->n_tensors; i++) {
        const gp_plan_tensor *t = &p->tensors[i];
        if (t->view_src >= 0)
            continue;
        uint64_t a = (uint64_t)(uintptr_t)tensor_addr(b, t);
        memcpy(init->extras + t->extras_offset + GP_EXTRAS_DATA_OFF(p->n_devices) + 8 * init->slot,
               &a, 8);
    }
    /* Where each symbolic dim's size is read from at eval: a tensor that has it. */
    for (int s = 0; s < p->n_syms; s++) {
        b->sym_tensor[s] = -1;
        for (int i = 0; i < p->n_tensors && b->sym_tensor[s] < 0; i++)
            for (int d = 0; d < p->tensors[i].ndim; d++)
                if (p->tensors[i].sym[d] == s) {
                    b->sym_tensor[s] = i;
                    b->sym_dim[s] = d;
                    break;
                }
        b->launch[s] = p->syms[s].bound;
    }
    for (int i = 0; i < p->n_nodes; i++) {
        const gp_plan_node *nd = &p->nodes[i];
        tensor_of(b, nd->output, &b->nodes[i].out);
        for (int j = 0; j < nd->n_inputs; j++)
            tensor_of(b, nd->inputs[j], &b->nodes[i].in[j]);
        if (nd->workspace >= 0) {
            const gp_plan_tensor *w = &p->tensors[nd->workspace];
            b->nodes[i].ws = tensor_addr(b, w);
            b->nodes[i].ws_size = b->nodes[i].ws ? (size_t)w->size : 0;
        }
    }

    /* cuBLAS: created here, on our stream, working only in planned workspaces (set per node). */
    if (cublasCreate(&b->blas) != CUBLAS_STATUS_SUCCESS) {
        b->blas = NULL;
        snprintf(err, err_len, "cuda: cublasCreate failed");
        goto fail;
    }
    if (cublasSetStream(b->blas, b->stream) != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, err_len, "cuda: cublasSetStream failed");
        goto fail;
    }
    for (int i = 0; i < p->n_nodes; i++)
        if (p->nodes[i].op == GP_OP_MATMUL && b->nodes[i].ws) {
            if (cublasSetWorkspace(b->blas, b->nodes[i].ws, b->nodes[i].ws_size) !=
                CUBLAS_STATUS_SUCCESS) {
                snprintf(err, err_len, "cuda: cublasSetWorkspace failed");
                goto fail;
            }
            b->kc.blas_ws = b->nodes[i].ws;
            b->kc.blas_ws_size = b->nodes[i].ws_size;
            break;
        }
    b->kc.stream = b->stream;
    b->kc.blas = b->blas;
    b->kc.d_syms = (const int64_t *)b->dparam;
    b->kc.h_syms = b->launch;
    b->kc.n_syms = p->n_syms;
    b->kc.d_counters = (unsigned *)((char *)b->dparam + sizeof(int64_t) * (size_t)(p->n_syms + 1));
    b->kc.n_counters = GP_CU_COUNTERS;
    const char *env = getenv("GPLAN_CUDA_NO_MATVEC");
    b->kc.no_matvec = env && *env == '1';

    /* Graphs: one per power-of-two bucket of the token count, captured now so that an eval only
     * replays. Plans with several symbolic dims run eagerly (launches at each eval's sizes). */
    env = getenv("GPLAN_CUDA_GRAPHS");
    b->buckets = bucket_safe(p);
    if (!(env && *env == '0') && p->n_syms <= 1) {
        if (p->n_syms == 0) {
            if (capture(b, 0, err, err_len))
                goto fail;
        } else {
            int64_t bound = p->syms[0].bound;
            for (int64_t top = 1; b->n_graphs < MAX_GRAPHS; top *= 2) {
                int64_t t = top < bound ? top : bound;
                if (capture(b, t, err, err_len))
                    goto fail;
                if (t == bound || !b->buckets)
                    break; /* not bucket-safe: only the one-token graph (exact) */
            }
        }
        CU_TRY(cudaStreamSynchronize(b->stream));
    }
    b->created = 1;
    *out = b;
    return 0;
fail:
    be_destroy(b);
    return -1;
}

/* The graph whose launch sizes serve this eval's sizes, or NULL: run eagerly. */
static cu_graph *pick_graph(cuda_be *b, const int64_t *exact)
{
    if (b->p->n_syms == 0)
        return b->n_graphs ? &b->graphs[0] : NULL;
    if (b->p->n_syms > 1)
        return NULL;
    for (int i = 0; i < b->n_graphs; i++) {
        int64_t top = b->graphs[i].top;
        if (b->buckets ? top >= exact[0] : top == exact[0])
            return &b->graphs[i]; /* the smallest: graphs are in increasing order */
    }
    return NULL;
}

static int be_eval(void *ctx, const unsigned char *extras, char *err, size_t err_len)
{
    cuda_be *b = ctx;
    const gp_plan *p = b->p;
    /* This eval's sizes, from the extras records the session wrote. */
    for (int s = 0; s < p->n_syms; s++) {
        int64_t v = p->syms[s].bound;
        if (b->sym_tensor[s] >= 0) {
            const gp_plan_tensor *t = &p->tensors[b->sym_tensor[s]];
            memcpy(&v, extras + t->extras_offset + GP_EXTRAS_NE_OFF(p->n_devices) + 8 * b->sym_dim[s],
                   8);
        }
        if (v < 1 || v > p->syms[s].bound) {
            snprintf(err, err_len, "cuda: dim %s = %lld out of range [1, %lld]", p->syms[s].name,
                     (long long)v, (long long)p->syms[s].bound);
            return -1;
        }
        b->pin_syms[s] = v;
    }
    if (!b->io_registered)
        memcpy(b->pin_io, b->host_io, (size_t)p->regions[GP_REGION_IO].size);
    cu_graph *g = pick_graph(b, b->pin_syms);
    if (g) {
        CU_TRY(cudaGraphLaunch(g->exec, b->stream));
    } else {
        for (int s = 0; s < p->n_syms; s++)
            b->launch[s] = b->pin_syms[s];
        if (enqueue_eval(b, err, err_len)) {
            cudaStreamSynchronize(b->stream);
            return -1;
        }
    }
    CU_TRY(cudaStreamSynchronize(b->stream));
    if (!b->io_registered)
        memcpy(b->host_io, b->pin_io, (size_t)p->regions[GP_REGION_IO].size);
    return 0;
fail:
    return -1;
}

static int be_reset_state(void *ctx, char *err, size_t err_len)
{
    cuda_be *b = ctx;
    CU_TRY(cudaMemsetAsync(b->dev[GP_REGION_STATE], 0, (size_t)b->p->regions[GP_REGION_STATE].size,
                           b->stream));
    CU_TRY(cudaStreamSynchronize(b->stream));
    return 0;
fail:
    return -1;
}

static int64_t be_alloc_count(void *ctx)
{
    return ctx ? ((cuda_be *)ctx)->allocs : 0;
}

static void be_destroy(void *ctx)
{
    cuda_be *b = ctx;
    if (!b)
        return;
    if (b->stream)
        cudaStreamSynchronize(b->stream);
    for (int i = 0; i < b->n_graphs; i++)
        cudaGraphExecDestroy(b->graphs[i].exec);
    if (b->blas)
        cublasDestroy(b->blas);
    if (b->io_registered)
        cudaHostUnregister(b->host_io);
    cudaFreeHost(b->pin_io);
    cudaFreeHost(b->pin_syms);
    cudaFree(b->dparam);
    for (int r = 0; r < GP_REGION_COUNT; r++)
        cudaFree(b->raw[r]);
    if (b->stream)
        cudaStreamDestroy(b->stream);
    cudaGetLastError();
    free(b->nodes);
    free(b->launch);
    free(b->sym_tensor);
    free(b->sym_dim);
    free(b);
}

const gp_backend_ops gp_backend_cuda = {
    "cuda", be_create, be_eval, be_reset_state, be_alloc_count, be_destroy,
};
