/* The CUDA backend's internal header: a session's state (cuda_be; cu_node per plan node) and what
 * its phases share: cuda_backend.c (creation, weights, the ops table), cuda_plan.c (the fusions
 * planned at creation), cuda_copies.c (an eval's copies), cuda_eval.c (an eval's launches and
 * gp_cuda_be_eval) and cuda_graphs.c (warm-up, capture, and which graph an eval replays). */
#ifndef GP_CUDA_BE_H
#define GP_CUDA_BE_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "cuda/cuda_comm.h"
#include "cuda/cuda_kernels.h"
#include "runtime/backend.h"

enum { MAX_GRAPHS = 24 }; /* the most graphs a session captures */

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
    gp_cu_epilogue epi;              /* matmuls: the next epi.n nodes, fused when one row */
    int skip;                        /* a cont whose readers read its source instead, or a store
                                        run by an earlier store's launch */
    int pair;                        /* a store: the later store run in the same launch, or -1 */
    int prenorm;                     /* a norm: the next node's matmul may compute it (pre) */
    int grpnorm;                     /* an rms_norm: the next node's group may compute it (pre) */
    gp_cu_prenorm pre;
    gp_cu_group grp;                 /* a matmul: grp.n > 0 when it and the next grp.n - 1 matmuls
                                        of its x (and, glu, their swiglu) run in one launch when
                                        one row */
    int tailed;                      /* a norm the all_reduce before it computes (its arnorm) */
    int has_arnorm;                  /* an all_reduce: the norm after it, in its kernel */
    gp_cuda_ar_norm arnorm;
    int dec_att;                     /* a rope, cont or store that attention node dec_att - 1 runs
                                        in its one-token launches (attnfuse); else 0 */
    int embadd;                      /* an add of the two lookups right before it, which its
                                        launch runs (embadd: gp_cuda_get_rows_add) */
    int dec_on;                      /* an attention: one-token launches run dec instead */
    int dec_tsym;                    /* its token dim's symbol, or -1 (fixed at 1) */
    gp_cu_decode_att dec;
    /* accumulated outputs (plan_accumulate): a matmul whose one-row launch zeroes the output of
     * matmul zero_for (else -1); one that may add its splits into its zeroed output (acc), left
     * zeroed by this enqueue's launch of the earlier one (zeroed), its trailing gelu then left
     * to matmul gelu_to, which reads its output (else -1) */
    int zero_for, acc, zeroed, gelu_to;
    int trig;                        /* a matmul or attention whose launch lets the next
                                        start at once (plan_trig) */
    int epi_end;                     /* a matmul: the last node its fused epilogue runs (the
                                        node itself without one); LoRA nodes may lie between */
    int lora;                        /* a node of a LoRA branch merged into its product's
                                        weights (plan_lora): it never runs (skip is set too) */
} cu_node;

/* A LoRA branch merged into the product it belongs to (plan_lora): weight w (read only by that
 * product, x op(w) with op(w) [in, out]) holds w + a^T b^T on the device; a [r, in], b [out, r]
 * the adapter's slots, all tensor ids. */
typedef struct {
    int w, a, b, tb;
    int64_t in, out, r;
} cu_lora;

typedef struct {
    int64_t top;          /* the bucket's largest token count (0: a plan with no symbolic dim) */
    cudaGraphExec_t exec; /* one whole eval: param and input copies, kernels, output copies */
} cu_graph;

typedef struct {
    const gp_plan *p;
    int slot;
    int device;                     /* CUDA ordinal, made current on every entry point */
    int rank, n_ranks;              /* tensor parallelism: this instance's rank among n_ranks */
    gp_cuda_comm *comm;             /* shared by the ranks; NULL on one device */
    int warming;                    /* eager warm-up evals at creation: all_reduce is local, since
                                       the other ranks may not exist yet */
    void *nccl_reg;                 /* the arena's NCCL registration, or NULL */
    unsigned char *host_io;         /* the session's io block */
    int io_registered;              /* host_io is page-locked (cudaHostRegister) */
    unsigned char *pin_io;          /* else: a pinned staging copy of it */
    void *raw[GP_REGION_COUNT];     /* the regions' allocations */
    unsigned char *dev[GP_REGION_COUNT]; /* their bases, aligned as the plan asks */
    void *dparam;                   /* device: unsigned counters, then the rope tables' floats
                                       [GP_CU_ROPE_TABS][ROPE_TAB_FLOATS] */
    gp_cu_rope_tab rope_tabs[GP_CU_ROPE_TABS]; /* made at the start of one-token evals */
    int n_rope_tabs;
    size_t io_hdr;                  /* bytes in front of the io region's device base; this eval's
                                       sizes (int64 [n_syms]) are its last (kc.d_syms) */
    unsigned char *pin_in;          /* pinned host [io_hdr + in_span]: the header, then the inputs
                                       staged for the one copy that carries both ("copies") */
    int64_t in_span;                /* io bytes [0, in_span) hold every input and nothing else;
                                       0 when they do not, or "copies" is off (their copies are
                                       one by one) */
    int64_t *pin_syms;              /* pin_in's [n_syms] sizes, right before its inputs */
    int *io_in, n_io_in;            /* the inputs (roots with bytes), in tensor order */
    int *io_out, n_io_out;          /* the outputs, by region and offset */
    int argmax_copy;                /* the argmax node whose kernel may write its input and output
                                       (both outputs) to the host io block, or -1 ("copies") */
    int argmax_now;                 /* while enqueuing: it does, at these launch sizes */
    unsigned char *hio_dev;         /* then: the device's address of that block */
    int64_t *launch;                /* host [n_syms]: sizes launches are made for */
    int *sym_tensor, *sym_dim;      /* [n_syms]: where each size is read from the extras */
    cu_node *nodes;                 /* [n_nodes] */
    gp_cu_tensor *alias;            /* [n_tensors]: descriptors replacing a view's (ndim 0: none) */
    cudaStream_t stream;
    cublasHandle_t blas;
    gp_cu_ctx kc;
    int64_t ar_at;                  /* kc.launches right after the last all-reduce's launch */
    cu_graph graphs[MAX_GRAPHS];
    int n_graphs;
    /* atthead: the one-token attentions run in one block a head up to position head_rows - 1
     * of their pos input (io bytes at head_pos; -1: no such attention, or several pos inputs),
     * and from head_rows on split in clusters: from graph long1 (has_long1), captured with
     * att_head off */
    int64_t head_pos;
    int head_rows, has_long1;
    cu_graph long1;
    int buckets;                    /* 1: pad the token count to a power of two (cuBLAS safe) */
    int created;                    /* create has returned: allocations now count */
    cudaEvent_t *ev;                /* GPLAN_CUDA_PROFILE=1: [n_nodes + 1] events (eager evals) */
    double prof_ms[GP_OP_COUNT];    /* one-token evals: GPU time per op */
    int64_t prof_n[GP_OP_COUNT], prof_evals;
    int64_t allocs;                 /* allocations made after create returned (0 by design) */
    unsigned disable;               /* FUSE_* bits switched off */
    const void *const *weight_data; /* [n_tensors] the host weights uploaded at creation */
    int gelu_for;                   /* while enqueuing: the matmul node that reads its x as
                                       gelu(x) (plan_accumulate), or -1 */
    float *dfold;                   /* the folded layer norms' constants (plan_folds), or NULL */
    cu_lora *lora;                  /* [n_lora] the LoRA branches merged (plan_lora) */
    int n_lora;
    int64_t trig_bytes;             /* plan_trig: the least weights of the next launch for an
                                       early trigger (-1: none) */
} cuda_be;

/* GPLAN_CUDA_DISABLE's entries, a bit each in the order of read_switches' names (cuda_backend.c);
 * FUSE_PLANS ("all" only) is every other fusion planned at creation. */
enum { FUSE_ATTN = 1, FUSE_QKVATT = 2, FUSE_TILES = 4, FUSE_TENSOR = 8, FUSE_ATOMIC = 16,
       FUSE_FOLD = 32, FUSE_ACCUM = 64, FUSE_ATTTYPED = 128, FUSE_KCTYPED = 256,
       FUSE_OPTYPED = 512, FUSE_COPIES = 1024, FUSE_ATTHEAD = 2048, FUSE_LORA = 4096,
       FUSE_PLANS = 8192 };

/* A rope table's floats: cos and sin of up to 128 pairs (the attention's D <= 256). */
enum { ROPE_TAB_FLOATS = 256 };

/* Where the rope tables start in the param block (after the counters). */
static inline size_t param_tabs_at(void)
{
    return sizeof(unsigned) * GP_CU_COUNTERS;
}

/* Allocations, counted once the session is created. */
static inline cudaError_t be_malloc(cuda_be *b, void **p, size_t n)
{
    if (b->created)
        b->allocs++;
    return cudaMalloc(p, n ? n : 1);
}

static inline cudaError_t be_host_alloc(cuda_be *b, void **p, size_t n)
{
    if (b->created)
        b->allocs++;
    return cudaHostAlloc(p, n ? n : 1, cudaHostAllocDefault);
}

static inline int64_t numel_at(const gp_plan_tensor *t, const int64_t *syms)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->sym[d] >= 0 && syms ? syms[t->sym[d]] : t->dims[d];
    return n;
}

static inline void *tensor_addr(const cuda_be *b, const gp_plan_tensor *t)
{
    if (t->size <= 0 || t->region >= GP_REGION_EXTRAS)
        return NULL;
    return b->dev[t->region] + t->offset;
}

static inline void tensor_of(const cuda_be *b, int id, gp_cu_tensor *k)
{
    const gp_plan_tensor *t = &b->p->tensors[id];
    if (b->alias && b->alias[id].ndim > 0) {
        *k = b->alias[id];
        return;
    }
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

/* Elements of k at the launch sizes. */
static inline size_t launch_numel(const cuda_be *b, const gp_cu_tensor *k)
{
    int64_t n = 1;
    for (int d = 0; d < k->ndim; d++)
        n *= k->sym[d] >= 0 ? b->launch[k->sym[d]] : k->ne[d];
    return (size_t)n;
}

/* cuda_plan.c: 0 when every op of p has a CUDA kernel; else -1 with err naming the first node
 * that has none (moe). */
int gp_cuda_be_check_ops(const gp_plan *p, char *err, size_t err_len);

/* cuda_plan.c: every fusion planned at creation, in the order they depend on each other, from
 * the plan and the switches (b->disable); also the nodes' descriptors. 0, or -1 with err. */
int gp_cuda_be_plan(cuda_be *b, char *err, size_t err_len);

/* cuda_plan.c, after adapter slots were uploaded again (ids[0..n)): every merged LoRA branch
 * reading one of them gets its product's weight from the host again and the branch merged in,
 * and the folded norms' constants are computed again from the weights. 0, or -1 with err. */
int gp_cuda_be_lora_remerge(cuda_be *b, const int *ids, int n, char *err, size_t err_len);

/* cuda_copies.c (see "Copies" there): the io tensors' lists and in_span, at creation; the
 * inputs staged in pin_in for the sizes at; the copies of one eval; and whether its final argmax
 * writes its input and output to the host itself at these launch sizes. */
int gp_cuda_be_plan_copies(cuda_be *b, char *err, size_t err_len);
void gp_cuda_be_stage_inputs(cuda_be *b, const int64_t *at);
int gp_cuda_be_copy_inputs(cuda_be *b, const unsigned char *hio, char *err, size_t err_len);
int gp_cuda_be_copy_outputs(cuda_be *b, unsigned char *hio, char *err, size_t err_len);
int gp_cuda_be_argmax_direct(const cuda_be *b);

/* cuda_eval.c: one eval at launch sizes b->launch onto b's stream (run eagerly or captured);
 * long_ctx: a one-token eval past head_rows, whose attentions run split (atthead off). 0, or -1
 * with err. */
int gp_cuda_be_enqueue(cuda_be *b, int long_ctx, char *err, size_t err_len);
/* The ops table's eval (runtime/backend.h). */
int gp_cuda_be_eval(void *ctx, const unsigned char *extras, char *err, size_t err_len);

/* cuda_graphs.c: the warm-up evals and the graphs captured at creation (*launches1: the kernels
 * of the one-token graph, or -1); 0, or -1 with err. Then, per eval, the graph that serves the
 * sizes in pin_syms (NULL: run eagerly), *long_ctx set as gp_cuda_be_enqueue takes it. */
int gp_cuda_be_graphs(cuda_be *b, int64_t *launches1, char *err, size_t err_len);
cu_graph *gp_cuda_be_pick_graph(cuda_be *b, int *long_ctx);

#endif
