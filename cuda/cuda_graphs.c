/* The CUDA backend's graphs: the warm-up evals at creation, one graph captured per power-of-two
 * bucket of the token count (and one for one-token evals past the rows the block-a-head
 * attention loads early), and the choice of the graph an eval replays. The token count is the
 * plan's first symbolic dim; graphs pin any other at 1 (a language model's rows of logits, R:
 * the last token's by default), and evals at other sizes of those run eagerly. */
#include <stdatomic.h>
#include <stdlib.h>

#include "cuda/cuda_backend.h"
#include "cuda/cuda_be.h"

/* Captures one eval at launch sizes `top` for the plan's first symbolic dim, 1 for the others,
 * into cg (long_ctx as gp_cuda_be_enqueue's). */
static int capture(cuda_be *b, cu_graph *cg, int64_t top, int long_ctx, char *err,
                   size_t err_len)
{
    cudaGraph_t g = NULL;
    for (int s = 0; s < b->p->n_syms; s++)
        b->launch[s] = s ? 1 : top;
    CU_TRY(cudaStreamBeginCapture(b->stream, cudaStreamCaptureModeThreadLocal));
    int r = gp_cuda_be_enqueue(b, long_ctx, err, err_len);
    cudaError_t e = cudaStreamEndCapture(b->stream, &g);
    if (r)
        goto fail;
    CU_TRY(e);
    CU_TRY(cudaGraphInstantiate(&cg->exec, g, 0));
    /* What the first launch would do (the driver allocates host memory there for graphs holding
     * NCCL's kernels), now, so that no eval allocates. */
    CU_TRY(cudaGraphUpload(cg->exec, b->stream));
    cg->top = top;
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
        if (a->ndim >= 2 && a->sym[a->ndim - (nd->attrs.i[GP_MATMUL_TA] ? 2 : 1)] >= 0)
            return 0;
    }
    return 1;
}

/* One-token evals that replayed long1, every session. */
static atomic_llong long_evals;

int64_t gp_cuda_long_evals(void)
{
    return atomic_load(&long_evals);
}

/* 1 when this eval is one token at a position past head_rows: the long-context graph's. */
static int long_now(const cuda_be *b)
{
    int32_t pos;
    if (b->head_pos < 0 || (b->p->n_syms >= 1 && b->pin_syms[0] != 1))
        return 0;
    memcpy(&pos, b->host_io + b->head_pos, 4);
    return pos >= b->head_rows;
}

/* The graph whose launch sizes serve the sizes `exact`, or NULL: run eagerly. */
static cu_graph *serving(cuda_be *b, const int64_t *exact)
{
    if (b->p->n_syms == 0)
        return b->n_graphs ? &b->graphs[0] : NULL;
    for (int s = 1; s < b->p->n_syms; s++)
        if (exact[s] != 1)
            return NULL; /* the graphs pin every dim but the first at 1 */
    for (int i = 0; i < b->n_graphs; i++) {
        int64_t top = b->graphs[i].top;
        if (b->buckets ? top >= exact[0] : top == exact[0])
            return &b->graphs[i]; /* the smallest: graphs are in increasing order */
    }
    return NULL;
}

/* The graph for this eval (cuda_be.h): the smallest serving its sizes, or long1 for a one-token
 * eval past head_rows. */
cu_graph *gp_cuda_be_pick_graph(cuda_be *b, int *long_ctx)
{
    cu_graph *g = serving(b, b->pin_syms);
    *long_ctx = long_now(b);
    if (g && *long_ctx && b->has_long1 && g == &b->graphs[0]) {
        g = &b->long1;
        atomic_fetch_add(&long_evals, 1);
    }
    return g;
}

/* Warm-up, then the graphs (cuda_be.h). */
int gp_cuda_be_graphs(cuda_be *b, int64_t *launches1, char *err, size_t err_len)
{
    const gp_plan *p = b->p;
    *launches1 = -1;
    /* Warm-up: one eager eval at the smallest and one at the largest sizes loads every kernel and
     * lets cuBLAS set itself up outside of any capture; the state is zeroed again after. Index
     * inputs may hold anything here: the kernels skip out-of-range ones. all_reduce only copies
     * (b->warming): the other ranks may not be created yet, and NCCL was warmed up with them. */
    b->warming = 1;
    /* one token, at most tokens, then with head_pos one token of the long-context attention */
    for (int w = 0; w < (b->head_pos >= 0 ? 3 : 2); w++) {
        for (int s = 0; s < p->n_syms; s++)
            b->launch[s] = b->pin_syms[s] = w == 1 ? p->syms[s].bound : 1;
        if (gp_cuda_be_enqueue(b, w == 2, err, err_len))
            goto fail;
        CU_TRY(cudaStreamSynchronize(b->stream));
    }
    b->warming = 0;
    CU_TRY(cudaMemset(b->dev[GP_REGION_STATE], 0, (size_t)p->regions[GP_REGION_STATE].size));

    /* Graphs: one per power-of-two bucket of the token count (the first symbolic dim; the others
     * at 1), captured now so that an eval only replays. Evals at other sizes of the other dims
     * run eagerly (launches at each eval's sizes). */
    const char *env = getenv("GPLAN_CUDA_PROFILE");
    if (env && *env == '1') {
        /* Profiling: eager evals with an event before each node (no graphs). */
        b->ev = calloc((size_t)p->n_nodes + 1, sizeof *b->ev);
        if (!b->ev) {
            snprintf(err, err_len, "cuda: out of memory");
            goto fail;
        }
        for (int i = 0; i <= p->n_nodes; i++)
            CU_TRY(cudaEventCreate(&b->ev[i]));
    }
    env = b->ev ? "0" : getenv("GPLAN_CUDA_GRAPHS");
    b->buckets = bucket_safe(p);
    if (!(env && *env == '0')) {
        if (p->n_syms == 0) {
            if (capture(b, &b->graphs[b->n_graphs], 0, 0, err, err_len))
                goto fail;
            b->n_graphs++;
        } else {
            int64_t bound = p->syms[0].bound;
            for (int64_t top = 1; b->n_graphs < MAX_GRAPHS; top *= 2) {
                int64_t t = top < bound ? top : bound;
                int64_t l0 = b->kc.launches;
                if (capture(b, &b->graphs[b->n_graphs], t, 0, err, err_len))
                    goto fail;
                b->n_graphs++;
                if (top == 1)
                    *launches1 = b->kc.launches - l0;
                if (t == bound || !b->buckets)
                    break; /* not bucket-safe: only the one-token graph (exact) */
            }
        }
        if (b->head_pos >= 0 && (p->n_syms == 0 || b->graphs[0].top == 1)) {
            if (capture(b, &b->long1, p->n_syms ? 1 : 0, 1, err, err_len))
                goto fail;
            b->has_long1 = 1;
        }
        CU_TRY(cudaStreamSynchronize(b->stream));
    }
    return 0;
fail:
    return -1;
}
