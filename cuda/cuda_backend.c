/* The CUDA backend (gp_backend_cuda, runtime/backend.h): one device allocation per region made at
 * creation, the weights uploaded once, a cuBLAS handle working in the planned workspace, and each
 * eval replayed from a CUDA graph captured at creation per bucket of the token count.
 * Fusions planned at creation: conts read in place, elementwise ops in the matvec's epilogue, a
 * norm computed in the matvec after it (or an rms_norm in the group after it), the K and V stores
 * in one launch, one-row matmuls of the same x in one launch (q, k and v; gate and up with their
 * swiglu), a one-token attention with its ropes and K/V cache stores in one launch
 * (plan_decode_attention; "attnfuse") and its q, k and v computed in it (plan_qkv_attention;
 * "qkvatt"), the norm after a P2P all-reduce in its kernel, those attentions' rope angles once
 * per eval (plan_rope_tables), two lookups and their add in one launch (plan_embed_add), a layer
 * norm folded into the [K, N] product after it (plan_folds; "fold"), products adding their splits
 * with atomics into a residual ("atomic") or into an output the matmul before zeroed
 * (plan_accumulate; "accum"), early triggers (plan_trig), the copies of an eval's inputs and
 * outputs merged ("copies"). The quoted names, and "all" (every fusion planned here off), are
 * the entries of GPLAN_CUDA_DISABLE that tests compare against the CPU; docs/cuda.md lists every
 * switch.
 * Tensor-parallel plans: one instance per rank, each on its device and called from its own thread;
 * all_reduce nodes are the one-shot P2P kernel (up to 256 KiB) or NCCL all-reduces
 * (cuda/cuda_comm.h) captured in the graphs with the rest; GPLAN_NCCL_REGISTER=1 registers the
 * arena with NCCL at creation (off by default: see register_arena). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "cuda/cuda_backend.h"
#include "cuda/cuda_comm.h"
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
} cu_node;

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
    int64_t trig_bytes;             /* plan_trig: the least weights of the next launch for an
                                       early trigger (-1: none) */
} cuda_be;

/* GPLAN_CUDA_DISABLE's entries, a bit each in the order of read_switches' names; FUSE_PLANS
 * ("all" only) is every other fusion planned at creation. */
enum { FUSE_ATTN = 1, FUSE_QKVATT = 2, FUSE_TILES = 4, FUSE_TENSOR = 8, FUSE_ATOMIC = 16,
       FUSE_FOLD = 32, FUSE_ACCUM = 64, FUSE_ATTTYPED = 128, FUSE_KCTYPED = 256,
       FUSE_OPTYPED = 512, FUSE_COPIES = 1024, FUSE_ATTHEAD = 2048, FUSE_PLANS = 4096 };

/* A rope table's floats: cos and sin of up to 128 pairs (the attention's D <= 256). */
enum { ROPE_TAB_FLOATS = 256 };

/* Where the rope tables start in the param block (after the counters). */
static size_t param_tabs_at(void)
{
    return sizeof(unsigned) * GP_CU_COUNTERS;
}

/* 1 when `name` is an item of the comma list `list`. */
static int in_list(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; p && *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, name, n))
            return 1;
        p = e ? e + 1 : NULL;
    }
    return 0;
}

/* The switches read from the environment at creation (docs/cuda.md, "Switches"); what the kernels
 * do by default was measured on an H200 (bench/gpu-notes.md). */
static void read_switches(cuda_be *b)
{
    static const char *const names[] = {"attnfuse", "qkvatt", "tiles", "tensor", "atomic",
                                        "fold", "accum", "atttyped", "kctyped", "optyped",
                                        "copies", "atthead"};
    const char *off = getenv("GPLAN_CUDA_DISABLE");
    for (unsigned i = 0; i < sizeof names / sizeof names[0]; i++)
        if (in_list(off, names[i]))
            b->disable |= 1u << i;
    if (in_list(off, "all"))
        b->disable = ~0u;
    const char *pdl = getenv("GPLAN_CUDA_PDL");
    b->kc.pdl = !(pdl && *pdl == '0');
    b->kc.att_combine = 1;
    b->kc.epi_early = 1;
    b->kc.epi_const = 1;
    b->kc.norm_early = 1;
    b->kc.mv_pairs = 1;
    b->kc.att_tiles = !(b->disable & FUSE_TILES);
    b->kc.att_generic = !!(b->disable & FUSE_ATTTYPED);
    b->kc.kc_generic = !!(b->disable & FUSE_KCTYPED);
    b->kc.ops_generic = !!(b->disable & FUSE_OPTYPED);
    b->kc.att_mma = !(b->disable & (FUSE_TILES | FUSE_TENSOR));
    b->kc.blas_epi = 1;
    /* One-token attentions of head dims <= 64: their splits in a cluster of 16 where the device
     * can (tenth session: -0.04 ms a token on GPT-2 1558M, +0.13 on Llama-7B's heads of 128). */
    b->kc.att_cluster_small = gp_cuda_attention_cluster_ok(16) ? 16 : 0;
    /* [K, N] matvecs combining their splits in clusters of up to 16 where the device can. */
    (void)gp_cuda_matvec_cluster_ok(16, b->kc.mv_cluster_fit); /* fit[C] > 0: C is taken */
    b->kc.mv_cluster = b->kc.mv_cluster_fit[16] > 0 ? 16 : 0;
    b->kc.clusters = b->kc.mv_cluster_fit[8] > 0;
    /* Those adding into a residual in place with atomics ("atomic"; fourteenth session): at most
     * 16 splits, 8 for rows of N <= 1024 (GPT-2 117M's c_proj and proj, -3% against 16). */
    b->kc.mv_add = b->disable & FUSE_ATOMIC ? 0 : 16;
    b->kc.mv_add_narrow = 8;
    b->kc.kv_prefetch = 1;
    b->kc.kv_regs = 1;
    /* Late triggers (seventh and eleventh sessions): the norm's, and the attention's on one
     * device (on two, Llama-7B +0.02 to +0.04 ms a token). */
    b->kc.late = GP_LATE_NORM | (b->n_ranks == 1 ? GP_LATE_ATT : 0);
    /* Early triggers (twentieth session): GPT-2 1558M 1.244 -> 1.197 ms a token at 8 MiB, 117M
     * (whose products are under 8 MiB) 0.204 -> 0.217 with every matmul. GPLAN_CUDA_TRIG=n MiB,
     * or "none". */
    const char *tg = getenv("GPLAN_CUDA_TRIG");
    b->trig_bytes = !tg ? (int64_t)8 << 20 : !strcmp(tg, "none") ? -1 : (int64_t)atoi(tg) << 20;
}

/* Time inside the backend's evals, process-wide (cuda/cuda_backend.h). */
static double stat_seconds;
static int64_t stat_evals;

void gp_cuda_eval_stats(double *seconds, int64_t *evals)
{
    *seconds = stat_seconds;
    *evals = stat_evals;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

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

/* ---- one eval's work, enqueued on the stream (run directly or captured into a graph) ---- */

/* Elements of k at the launch sizes. */
static size_t launch_numel(const cuda_be *b, const gp_cu_tensor *k)
{
    int64_t n = 1;
    for (int d = 0; d < k->ndim; d++)
        n *= k->sym[d] >= 0 ? b->launch[k->sym[d]] : k->ne[d];
    return (size_t)n;
}

/* An all_reduce node over the ranks (the P2P kernel or NCCL), on the planned (contiguous, checked
 * at creation) buffers; rows a padded launch adds are summed too, and nothing reads them.
 * all_reduce(x, y): device 0 adds y to its term first (in out), unless the matmul before it
 * already did (added: its epilogue wrote x + y into out). With a norm planned after it
 * (plan_ar_norms), *norm_done says whether the kernel computed it. */
static int all_reduce(cuda_be *b, const cu_node *cn, const gp_plan_node *nd, int added,
                      int *norm_done)
{
    const void *src = cn->in[0].data;
    if (nd->n_inputs > 1 && b->rank == 0 && !added) {
        if (gp_cuda_compute(&b->kc, GP_OP_ADD, &nd->attrs, &cn->out, cn->in, 2, NULL, 0))
            return -1;
        src = cn->out.data;
    } else if (added) {
        src = cn->out.data;
    }
    /* Something launched since the last all-reduce: this one may read its epochs early. */
    int not_after = b->kc.launches != b->ar_at;
    b->ar_at = ++b->kc.launches;
    return gp_cuda_comm_all_reduce_norm(b->comm, b->rank, src, cn->out.data,
                                        launch_numel(b, &cn->out), cn->out.dtype, b->stream,
                                        cn->has_arnorm ? &cn->arnorm : NULL, not_after, norm_done,
                                        b->kc.err, sizeof b->kc.err);
}

/* attnfuse: node cn is an attention whose fused launch serves this launch (one token). */
static int decode_now(const cuda_be *b, const cu_node *cn)
{
    return cn->dec_on && (cn->dec_tsym < 0 || b->launch[cn->dec_tsym] == 1);
}

/* 1 when this launch runs a one-token attention that reads the rope tables. */
static int rope_tabs_now(const cuda_be *b)
{
    for (int i = 0; i < b->p->n_nodes; i++) {
        const cu_node *cn = &b->nodes[i];
        if (decode_now(b, cn) && (cn->dec.tab_q || cn->dec.tab_k))
            return 1;
    }
    return 0;
}

/* Matmul node m (its epilogue fused when it serves; pre: the norm before it, as
 * gp_cuda_matmul_fused takes it) with the requests of accumulated outputs around it
 * (plan_accumulate): it zeroes a later matmul's output, adds into its own zeroed output, or reads
 * its x as gelu(x). 0, or -1 with the context's error. */
static int matmul_node(cuda_be *b, int m, const gp_cu_prenorm *pre, int *fused, int *pre_used)
{
    cu_node *mn = &b->nodes[m];
    gp_cu_ctx *c = &b->kc;
    if (mn->zero_for >= 0) {
        const gp_cu_tensor *t = &b->nodes[mn->zero_for].epi.out;
        c->zero_p = (float *)t->data;
        c->zero_n = t->ne[t->ndim - 1]; /* one row: the matvec kernels take it with one row */
    }
    c->trig_early = mn->trig;
    c->acc = mn->acc && mn->zeroed;
    c->acc_gelu = c->acc && mn->gelu_to >= 0;
    c->x_gelu = b->gelu_for == m;
    int r = gp_cuda_matmul_fused(c, &b->p->nodes[m].attrs, &mn->out, mn->in, mn->ws,
                                 mn->ws_size, &mn->epi, pre, fused, pre_used);
    if (mn->zero_for >= 0)
        b->nodes[mn->zero_for].zeroed = !r && c->zero_done;
    if (!r && c->x_gelu && !pre) {
        snprintf(c->err, sizeof c->err, "matmul: gelu(x) not applied");
        r = -1;
    }
    if (c->x_gelu == 0 && b->gelu_for == m)
        b->gelu_for = -1;
    if (c->acc_gelu_done)
        b->gelu_for = mn->gelu_to;
    c->zero_p = NULL;
    c->zero_n = 0;
    c->trig_early = 0;
    c->acc = c->acc_gelu = c->x_gelu = 0;
    c->zero_done = c->acc_done = c->acc_gelu_done = 0;
    return r;
}

/* Group g, whose first matmul is node first, in one launch when it serves (one row): *ran is 1,
 * *i (the node being enqueued, whose event is recorded) becomes the last node the launch ran, and
 * the events of the nodes after it up to that one are recorded; else *ran is 0. 0, or -1. */
static int run_group(cuda_be *b, const gp_cu_group *g, int first, int *i, int *ran)
{
    if (gp_cuda_matvec_group(&b->kc, g, ran))
        return -1;
    if (!*ran)
        return 0;
    int last = first + g->n - 1 + g->glu;
    for (int k = *i + 1; b->ev && k <= last; k++)
        cudaEventRecord(b->ev[k], b->stream);
    *i = last;
    return 0;
}

/* ---- Copies ----
 * A copy in a graph costs more than its bytes: each is a node the copy engine runs after the one
 * before it. So, with "copies" on, an eval's sizes and inputs go to the device in one copy: the
 * sizes sit in the header right before the io region's device base, the inputs at the start of
 * the region (the planner's order), and be_eval stages both in pin_in. The outputs come back in
 * one copy per run of them whose gaps are each a tensor's unused rows (GPT-2's next, then its
 * logits, in one), or, in one-token evals, with none: the argmax kernel writes them to the host
 * (plan_argmax_copy). Off: a copy per size block and per tensor, from and into the io block. */

/* Bytes of a run's gap a merged copy may carry: at PCIe rates, ~0.3 us. The most bytes an
 * argmax writes to the host as it reads them (plan_argmax_copy): for a 512-token prompt's 103 MB
 * of logits, a copy after it is faster (H200: 3.93 against 4.70 ms a prompt). */
enum { COPY_GAP = 16384, ARGMAX_COPY_MAX = 524288 };

/* Copies enqueued by evals, every session: all of them, and those carrying more than one
 * transfer. */
static atomic_llong all_copies, merged_copies;

int64_t gp_cuda_copies_count(int merged)
{
    return atomic_load(merged ? &merged_copies : &all_copies);
}

/* cudaMemcpyAsync on b's stream, counted. */
static cudaError_t copy(cuda_be *b, void *dst, const void *src, size_t n, enum cudaMemcpyKind k,
                        int merged)
{
    atomic_fetch_add(&all_copies, 1);
    if (merged)
        atomic_fetch_add(&merged_copies, 1);
    return cudaMemcpyAsync(dst, src, n, k, b->stream);
}

static size_t used_bytes(const gp_plan_tensor *t, const int64_t *syms)
{
    return (size_t)(numel_at(t, syms) * (int64_t)gp_dtype_size(t->dtype));
}

/* Tensor t's bytes in the io region, padding included. */
static int64_t io_extent(const gp_plan *p, const gp_plan_tensor *t)
{
    int64_t a = p->regions[GP_REGION_IO].alignment > 0 ? p->regions[GP_REGION_IO].alignment : 1;
    return (t->size + a - 1) / a * a;
}

/* The inputs at launch sizes `at`, copied into pin_in where the one copy carries them. */
static void stage_inputs(cuda_be *b, const int64_t *at)
{
    for (int k = 0; k < b->n_io_in; k++) {
        const gp_plan_tensor *t = &b->p->tensors[b->io_in[k]];
        memcpy(b->pin_in + b->io_hdr + t->offset, b->host_io + t->offset, used_bytes(t, at));
    }
}

/* The sizes and the inputs: with in_span, one copy of pin_in's bytes from the sizes to the last
 * input's last used byte; else a copy of the sizes and one per input. */
static int copy_inputs(cuda_be *b, const unsigned char *hio, char *err, size_t err_len)
{
    size_t nsym = sizeof(int64_t) * (size_t)b->p->n_syms, end = 0;
    for (int k = 0; k < b->n_io_in; k++) {
        const gp_plan_tensor *t = &b->p->tensors[b->io_in[k]];
        size_t used = used_bytes(t, b->launch);
        if (!b->in_span)
            CU_TRY(copy(b, b->dev[GP_REGION_IO] + t->offset, hio + t->offset, used,
                        cudaMemcpyHostToDevice, 0));
        else if ((size_t)t->offset + used > end)
            end = (size_t)t->offset + used;
    }
    if (nsym + end > 0)
        CU_TRY(copy(b, b->dev[GP_REGION_IO] - nsym, b->pin_syms, nsym + end,
                    cudaMemcpyHostToDevice, end > 0 && (nsym > 0 || b->n_io_in > 1)));
    return 0;
fail:
    return -1;
}

/* 1 when output `id` reaches the host without a copy: argmax_copy's input or output. */
static int on_host(const cuda_be *b, int id)
{
    const gp_plan_node *nd = b->argmax_now ? &b->p->nodes[b->argmax_copy] : NULL;
    return nd && (id == nd->inputs[0] || id == nd->output);
}

/* 1 when io_out[k] may join the copy of io_out[k - 1] whose bytes end at `end`: both in io, it
 * copied, and the gap between them io_out[k - 1]'s unused rows and padding, COPY_GAP at most. */
static int joins_copy(const cuda_be *b, int k, size_t end)
{
    const gp_plan_tensor *prev = &b->p->tensors[b->io_out[k - 1]];
    const gp_plan_tensor *u = &b->p->tensors[b->io_out[k]];
    return !(b->disable & FUSE_COPIES) && !on_host(b, b->io_out[k]) &&
           prev->region == GP_REGION_IO && u->region == GP_REGION_IO && (size_t)u->offset >= end &&
           (size_t)u->offset - end <= COPY_GAP && u->offset <= prev->offset + io_extent(b->p, prev);
}

/* Rank 0's outputs (runtime/backend.h, "Several devices": the others' are the same bytes, so
 * they stay on their devices), by offset: a run of them in one copy when "copies" is on. */
static int copy_outputs(cuda_be *b, unsigned char *hio, char *err, size_t err_len)
{
    for (int k = 0, n; k < b->n_io_out && b->rank == 0; k += n) {
        const gp_plan_tensor *t = &b->p->tensors[b->io_out[k]];
        n = 1;
        if (on_host(b, b->io_out[k]))
            continue;
        size_t start = (size_t)t->offset, end = start + used_bytes(t, b->launch);
        for (; k + n < b->n_io_out && joins_copy(b, k + n, end); n++) {
            const gp_plan_tensor *u = &b->p->tensors[b->io_out[k + n]];
            end = (size_t)u->offset + used_bytes(u, b->launch);
        }
        CU_TRY(copy(b, hio + start, tensor_addr(b, t), end - start, cudaMemcpyDeviceToHost,
                    n > 1));
    }
    return 0;
fail:
    return -1;
}

/* io_in (the inputs, in tensor order), io_out (the outputs, by region and offset), and, with
 * "copies" on, in_span when the inputs are io's first bytes with no other tensor among them. */
static int plan_copies(cuda_be *b, char *err, size_t err_len)
{
    const gp_plan *p = b->p;
    int64_t end = 0, covered = 0, first = -1;
    b->io_in = malloc(sizeof(int) * (size_t)(p->n_tensors + 1));
    b->io_out = malloc(sizeof(int) * (size_t)(p->n_tensors + 1));
    if (!b->io_in || !b->io_out) {
        snprintf(err, err_len, "cuda: out of memory");
        return -1;
    }
    for (int i = 0; i < p->n_tensors; i++) {
        const gp_plan_tensor *t = &p->tensors[i];
        if (t->kind == GP_TENSOR_INPUT && t->view_src < 0 && t->size > 0) {
            b->io_in[b->n_io_in++] = i;
            end = t->offset + io_extent(p, t) > end ? t->offset + io_extent(p, t) : end;
            covered += io_extent(p, t);
            first = first < 0 || t->offset < first ? t->offset : first;
        } else if (t->kind == GP_TENSOR_OUTPUT && t->size > 0) {
            int k = b->n_io_out++; /* insertion sort by region, then offset */
            for (; k > 0; k--) {
                const gp_plan_tensor *u = &p->tensors[b->io_out[k - 1]];
                if (u->region < t->region || (u->region == t->region && u->offset <= t->offset))
                    break;
                b->io_out[k] = b->io_out[k - 1];
            }
            b->io_out[k] = i;
        }
    }
    /* The inputs' extents, starting at 0 and adding up to end, leave no room in [0, end) for
     * another tensor when io tensors do not overlap (the planner's plans); in any plan, the one
     * copy writes only bytes of the device's io region. */
    b->in_span = !(b->disable & FUSE_COPIES) && first == 0 && covered == end ? end : 0;
    return 0;
}

/* One eval at launch sizes b->launch onto b's stream; long_ctx: a one-token eval past head_rows,
 * whose attentions run split (atthead off). */
static int enqueue_eval(cuda_be *b, int long_ctx, char *err, size_t err_len)
{
    const gp_plan *p = b->p;
    unsigned char *hio = b->io_registered ? b->host_io : b->pin_io;
    b->kc.att_head = !(b->disable & FUSE_ATTHEAD) && !long_ctx;
    if (copy_inputs(b, hio, err, err_len))
        return -1;
    b->argmax_now = b->argmax_copy >= 0 &&
                    used_bytes(&p->tensors[p->nodes[b->argmax_copy].inputs[0]], b->launch) <=
                        ARGMAX_COPY_MAX;
    if (b->n_rope_tabs && rope_tabs_now(b) &&
        gp_cuda_rope_tables(&b->kc, b->rope_tabs, b->n_rope_tabs)) {
        snprintf(err, err_len, "cuda: %s", b->kc.err);
        return -1;
    }
    b->gelu_for = -1;
    for (int i = 0; i < p->n_nodes; i++)
        b->nodes[i].zeroed = 0;
    for (int i = 0; i < p->n_nodes; i++) {
        const gp_plan_node *nd = &p->nodes[i];
        cu_node *cn = &b->nodes[i];
        int r = 0, fused = 0, pre_used = 0, norm_done = 0;
        if (b->ev)
            cudaEventRecord(b->ev[i], b->stream);
        if (cn->dec_att && decode_now(b, &b->nodes[cn->dec_att - 1]))
            continue; /* attnfuse: that attention's one-token launch runs it */
        if (cn->skip)
            continue;
        if (cn->prenorm) {
            /* The matmul after this norm computes it when its matrix-vector kernel serves. */
            cu_node *mn = &b->nodes[i + 1];
            const gp_plan_node *mm = &p->nodes[i + 1];
            r = matmul_node(b, i + 1, &cn->pre, &fused, &pre_used);
            if (!r && pre_used) {
                if (b->ev)
                    cudaEventRecord(b->ev[i + 1], b->stream);
                i++; /* now at the matmul, which ran */
                nd = mm;
                cn = mn;
                goto ran;
            }
        }
        if (cn->grpnorm) {
            /* The group after this rms_norm computes it when the group's launch serves. */
            gp_cu_group g = b->nodes[i + 1].grp;
            int ran = 0;
            g.has_norm = 1;
            g.norm = cn->pre;
            r = run_group(b, &g, i + 1, &i, &ran);
            if (!r && ran)
                continue;
        }
        if (!r && cn->grp.n > 1) {
            /* Matmuls of the same x (and their swiglu) in one launch when they have one row. */
            int ran = 0;
            r = run_group(b, &cn->grp, i, &i, &ran);
            if (!r && ran)
                continue;
        }
        if (!r && nd->op == GP_OP_ALL_REDUCE && b->comm && !b->warming)
            r = all_reduce(b, cn, nd, 0, &norm_done);
        else if (!r && decode_now(b, cn)) {
            b->kc.trig_early = cn->trig;
            r = gp_cuda_attention_decode(&b->kc, &cn->dec, &cn->out, cn->ws, cn->ws_size);
            b->kc.trig_early = 0;
        }
        else if (!r && cn->pair >= 0)
            r = gp_cuda_store2(&b->kc, cn->in, b->nodes[cn->pair].in);
        else if (!r && cn->embadd) {
            const cu_node *g0 = &b->nodes[i - 2], *g1 = &b->nodes[i - 1];
            r = gp_cuda_get_rows_add(&b->kc, &cn->out, &g0->in[0], &g0->in[1], &g1->in[0],
                                     &g1->in[1]);
        }
        else if (!r && i == b->argmax_copy && b->argmax_now) {
            gp_cu_tensor o = cn->out;
            o.data = b->hio_dev + p->tensors[nd->output].offset;
            r = gp_cuda_argmax_copy(&b->kc, &o, &cn->in[0],
                                    b->hio_dev + p->tensors[nd->inputs[0]].offset);
        } else if (!r && nd->op == GP_OP_MATMUL && cn->epi.n > 0)
            r = matmul_node(b, i, NULL, &fused, NULL);
        else if (!r)
            r = gp_cuda_compute(&b->kc, nd->op, &nd->attrs, &cn->out, cn->in, nd->n_inputs, cn->ws,
                                cn->ws_size);
    ran:
        if (fused) {
            for (int k = 1; b->ev && k <= cn->epi.n; k++)
                cudaEventRecord(b->ev[i + k], b->stream);

            i += cn->epi.n; /* those nodes ran inside the matmul's kernel */
            /* An all_reduce(x, y) ending the epilogue: its + y ran there, the sum over devices
             * has not. */
            if (!r && p->nodes[i].op == GP_OP_ALL_REDUCE && b->comm && !b->warming)
                r = all_reduce(b, &b->nodes[i], &p->nodes[i], 1, &norm_done);
        }
        if (norm_done) { /* the norm after the all-reduce ran in its kernel */
            i++;
            if (b->ev)
                cudaEventRecord(b->ev[i], b->stream);
        }
        if (r) {
            snprintf(err, err_len, "cuda: node %d (%s -> %s, line %d): %s", i,
                     gp_op_get(nd->op)->name, p->tensors[nd->output].name, nd->line, b->kc.err);
            return -1;
        }
    }
    if (b->ev)
        cudaEventRecord(b->ev[p->n_nodes], b->stream);
    return copy_outputs(b, hio, err, err_len);
}

/* Captures one eval at launch sizes `top` (for the plan's one symbolic dim) into cg (long_ctx as
 * enqueue_eval's). */
static int capture(cuda_be *b, cu_graph *cg, int64_t top, int long_ctx, char *err,
                   size_t err_len)
{
    cudaGraph_t g = NULL;
    if (b->p->n_syms)
        b->launch[0] = top;
    CU_TRY(cudaStreamBeginCapture(b->stream, cudaStreamCaptureModeThreadLocal));
    int r = enqueue_eval(b, long_ctx, err, err_len);
    cudaError_t e = cudaStreamEndCapture(b->stream, &g);
    if (r)
        goto fail;
    CU_TRY(e);
    CU_TRY(cudaGraphInstantiate(&cg->exec, g, 0));
    /* What the first launch would do (the driver allocates host memory there for graphs holding
     * NCCL's kernels), now: measured on 2 H200s, 2-3 host allocations in the first evals without. */
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

/* Byte ranges of two tensors (at the bounds) overlap: same region and intersecting spans. */
static int overlaps(const gp_plan_tensor *a, const gp_plan_tensor *b)
{
    return a->region == b->region && a->size > 0 && b->size > 0 && a->offset < b->offset + b->size &&
           b->offset < a->offset + a->size;
}

/* Plans each matmul's epilogue: the elementwise nodes right after it (add or mul with one other
 * operand, gelu) that consume only the previous result, which nothing else reads. The final output
 * must not overlap what the matmul kernel reads (a, b, the workspace), since other blocks may still
 * read those while one writes; an operand may be the output itself (in place), else disjoint. */
static void plan_epilogues(cuda_be *b, const int *uses)
{
    const gp_plan *p = b->p;
    for (int i = 0; i < p->n_nodes; i++) {
        const gp_plan_node *mm = &p->nodes[i];
        if (mm->op != GP_OP_MATMUL)
            continue;
        gp_cu_epilogue *e = &b->nodes[i].epi;
        int prev = mm->output, n = 0;
        int other[GP_CU_MAX_EPI];
        for (int j = i + 1; j < p->n_nodes && n < GP_CU_MAX_EPI; j++) {
            const gp_plan_node *nd = &p->nodes[j];
            const gp_plan_tensor *pt = &p->tensors[prev], *ot = &p->tensors[nd->output];
            if (uses[prev] != 1 || pt->kind != GP_TENSOR_INTERMEDIATE || pt->view_src >= 0 ||
                ot->ndim != pt->ndim || ot->view_src >= 0)
                break;
            int same = 1;
            for (int d = 0; d < pt->ndim; d++)
                same &= ot->dims[d] == pt->dims[d] && ot->sym[d] == pt->sym[d];
            if (!same)
                break;
            if (nd->op == GP_OP_GELU && nd->inputs[0] == prev) {
                other[n] = -1;
            } else if ((nd->op == GP_OP_ADD || nd->op == GP_OP_MUL) && nd->n_inputs == 2 &&
                       (nd->inputs[0] == prev) != (nd->inputs[1] == prev)) {
                other[n] = nd->inputs[nd->inputs[0] == prev ? 1 : 0];
            } else if (nd->op == GP_OP_ALL_REDUCE && nd->n_inputs == 2 && b->rank == 0 &&
                       nd->inputs[0] == prev && nd->inputs[1] != prev) {
                /* Device 0's + y of all_reduce(x, y); the node's all-reduce still runs after
                 * the matmul (enqueue_eval), so nothing may follow it in the epilogue. */
                other[n] = nd->inputs[1];
                e->op[n++] = GP_OP_ADD;
                break;
            } else {
                break;
            }
            e->op[n] = nd->op;
            n++;
            prev = nd->output;
        }
        /* Drop trailing ops until the final output is safe to write from inside the kernel. */
        for (; n > 0; n--) {
            const gp_plan_tensor *out = &p->tensors[p->nodes[i + n].output];
            int ok = !overlaps(out, &p->tensors[mm->inputs[0]]) &&
                     !overlaps(out, &p->tensors[mm->inputs[1]]) &&
                     (mm->workspace < 0 || !overlaps(out, &p->tensors[mm->workspace]));
            for (int k = 0; k < n && ok; k++) {
                if (other[k] < 0)
                    continue;
                const gp_plan_tensor *o = &p->tensors[other[k]];
                ok = !overlaps(out, o) || (o->offset == out->offset && o->region == out->region &&
                                           o->dtype == out->dtype);
            }
            if (ok)
                break;
        }
        e->n = n;
        for (int k = 0; k < n; k++)
            if (other[k] >= 0)
                tensor_of(b, other[k], &e->other[k]);
        if (n)
            tensor_of(b, p->nodes[i + n].output, &e->out);
    }
}

/* The view's root tensor (the one that owns the bytes). */
static const gp_plan_tensor *root_of(const gp_plan *p, int id)
{
    while (p->tensors[id].view_src >= 0)
        id = p->tensors[id].view_src;
    return &p->tensors[id];
}

/*
 * embadd. An add of two lookups that only it reads (GPT-2's token and position embeddings) runs
 * as one launch (gp_cuda_get_rows_add): one kernel and one wait for the kernel before, instead
 * of three. Taken when both lookups read a weight table by an input's i32 ids (nothing in the
 * eval writes either), their rows and the sum are f32 of the same shape (the same bits as the
 * three launches), and the lookups are the two nodes right before the add.
 */
static void plan_embed_add(cuda_be *b, const int *uses)
{
    const gp_plan *p = b->p;
    for (int i = 2; i < p->n_nodes; i++) {
        const gp_plan_node *nd = &p->nodes[i];
        if (nd->op != GP_OP_ADD || nd->n_inputs != 2)
            continue;
        int ok = 1;
        const gp_plan_tensor *ot = &p->tensors[nd->output];
        for (int k = 0; k < 2 && ok; k++) {
            int j = i - 2 + k, in = nd->inputs[k];
            const gp_plan_node *g = &p->nodes[j];
            const gp_plan_tensor *gt = &p->tensors[in];
            ok = g->op == GP_OP_GET_ROWS && g->output == in && uses[in] == 1 &&
                 gt->kind == GP_TENSOR_INTERMEDIATE && gt->view_src < 0 && gt->dtype == GP_F32 &&
                 root_of(p, g->inputs[0])->kind == GP_TENSOR_WEIGHT &&
                 root_of(p, g->inputs[1])->kind == GP_TENSOR_INPUT &&
                 p->tensors[g->inputs[1]].dtype == GP_I32 && gt->ndim == 2 && ot->ndim == 2 &&
                 ot->dtype == GP_F32 && b->nodes[j].pair < 0 && !b->nodes[j].skip;
            for (int d = 0; d < 2 && ok; d++)
                ok = gt->dims[d] == ot->dims[d] && gt->sym[d] == ot->sym[d];
        }
        if (!ok || nd->inputs[0] == nd->inputs[1])
            continue;
        b->nodes[i].embadd = 1;
        b->nodes[i - 2].skip = b->nodes[i - 1].skip = 1;
    }
}

/*
 * copies, on rank 0: an argmax of an output into an output (GPT-2's next = argmax(logits)) runs
 * a kernel that writes both into the host's io block as it goes (gp_cuda_argmax_copy), through
 * the block's device address, so neither is copied back after it: the logits reach the host
 * while the argmax reads them, not in a copy of 201 KB after it (one of its two extra costs;
 * the other is a copy node's own). Taken for f32 rows, at launch sizes of at most
 * ARGMAX_COPY_MAX bytes of them (one-token evals).
 */
static void plan_argmax_copy(cuda_be *b)
{
    const gp_plan *p = b->p;
    unsigned char *hio = b->io_registered ? b->host_io : b->pin_io;
    void *dev = NULL;
    b->argmax_copy = -1;
    if (b->rank != 0 || (b->disable & FUSE_COPIES) ||
        cudaHostGetDevicePointer(&dev, hio, 0) != cudaSuccess) {
        cudaGetLastError();
        return;
    }
    for (int i = 0; i < p->n_nodes; i++) {
        const gp_plan_node *nd = &p->nodes[i];
        if (nd->op != GP_OP_ARGMAX)
            continue;
        const gp_plan_tensor *x = &p->tensors[nd->inputs[0]], *o = &p->tensors[nd->output];
        int ok = x->kind == GP_TENSOR_OUTPUT && o->kind == GP_TENSOR_OUTPUT &&
                 x->view_src < 0 && o->view_src < 0 && x->region == GP_REGION_IO &&
                 o->region == GP_REGION_IO && x->dtype == GP_F32;
        if (ok) {
            b->argmax_copy = i;
            b->hio_dev = dev;
            return;
        }
    }
}

/*
 * cont(x) whose output is read only through reshapes that split its last dim (q, k and v of a fused
 * projection: reshape(cont(slice(qkv)), T, H, D)) needs no copy: its readers can read x with
 * composed strides, when x's last dim is contiguous and nothing planned over x's bytes is written
 * until the last reader has run. Those reshapes get descriptors into x; the cont is skipped.
 */
static void plan_cont_elision(cuda_be *b, const int *uses)
{
    const gp_plan *p = b->p;
    for (int i = 0; i < p->n_nodes; i++) {
        const gp_plan_node *nd = &p->nodes[i];
        if (nd->op != GP_OP_CONT)
            continue;
        const gp_plan_tensor *c = &p->tensors[nd->output], *x = &p->tensors[nd->inputs[0]];
        int nd_ = c->ndim, ok = c->kind == GP_TENSOR_INTERMEDIATE && c->view_src < 0 && nd_ >= 1 &&
                               nd_ <= 2 && x->ndim == nd_ && x->dtype == c->dtype &&
                               x->stride[nd_ - 1] == 1 && uses[nd->output] > 0;
        for (int d = 0; d < nd_ && ok; d++)
            ok = x->dims[d] == c->dims[d] && x->sym[d] == c->sym[d];
        int last = i, nviews = 0;
        for (int j = i + 1; j < p->n_nodes && ok; j++) {
            const gp_plan_node *r = &p->nodes[j];
            for (int k = 0; k < r->n_inputs && ok; k++) {
                if (r->inputs[k] != nd->output)
                    continue;
                const gp_plan_tensor *v = &p->tensors[r->output];
                ok = r->op == GP_OP_RESHAPE && v->ndim == nd_ + 1 && v->kind == GP_TENSOR_VIEW &&
                     v->dims[nd_ - 1] * v->dims[nd_] == c->dims[nd_ - 1];
                for (int d = 0; d < nd_ - 1 && ok; d++)
                    ok = v->dims[d] == c->dims[d] && v->sym[d] == c->sym[d];
                /* the view's readers: any kernel (they all take strides), or a store's source
                 * (read by the store's kernel, which takes strides too), but no further view */
                for (int q = j + 1; q < p->n_nodes && ok; q++)
                    for (int m = 0; m < p->nodes[q].n_inputs && ok; m++)
                        if (p->nodes[q].inputs[m] == r->output) {
                            ok = !gp_op_get(p->nodes[q].op)->is_view ||
                                 (p->nodes[q].op == GP_OP_STORE && m == 2);
                            last = q > last ? q : last;
                        }
                nviews++;
            }
        }
        if (!ok || nviews == 0 || nviews != uses[nd->output])
            continue;
        /* Nothing that starts living after the cont may share x's bytes until the last reader. */
        const gp_plan_tensor *xr = root_of(p, nd->inputs[0]);
        for (int t = 0; t < p->n_tensors && ok; t++) {
            const gp_plan_tensor *o = &p->tensors[t];
            if (o->view_src < 0 && o != xr && o->first > i - 1 && o->first <= last && overlaps(o, xr))
                ok = 0;
        }
        if (!ok)
            continue;
        gp_cu_tensor xs;
        tensor_of(b, nd->inputs[0], &xs);
        int64_t es = (int64_t)gp_dtype_size(c->dtype);
        for (int j = i + 1; j < p->n_nodes; j++) {
            const gp_plan_node *r = &p->nodes[j];
            if (r->op != GP_OP_RESHAPE || r->inputs[0] != nd->output)
                continue;
            const gp_plan_tensor *v = &p->tensors[r->output];
            gp_cu_tensor *a = &b->alias[r->output];
            *a = xs;
            a->ndim = nd_ + 1;
            a->ne[nd_ - 1] = v->dims[nd_ - 1];
            a->ne[nd_] = v->dims[nd_];
            a->sym[nd_ - 1] = v->sym[nd_ - 1];
            a->sym[nd_] = v->sym[nd_];
            a->nb[nd_ - 1] = v->dims[nd_] * es;
            a->nb[nd_] = es;
        }
        b->nodes[i].skip = 1;
    }
}

/*
 * Pairs each store with the next kernel node when that is a store too, with only views between:
 * the two (a layer's K and V cache writes) run in one launch at the first one's place. The later
 * store's inputs are ready there (views compute nothing), and it must not write what the first
 * reads or writes: different destination roots, and its source not the first one's destination.
 */
static void plan_store_pairs(cuda_be *b)
{
    const gp_plan *p = b->p;
    for (int i = 0; i < p->n_nodes; i++) {
        const gp_plan_node *a = &p->nodes[i];
        if (a->op != GP_OP_STORE || b->nodes[i].skip || b->nodes[i].pair >= 0)
            continue;
        int j = i + 1;
        while (j < p->n_nodes && gp_op_get(p->nodes[j].op)->is_view && p->nodes[j].op != GP_OP_STORE)
            j++;
        if (j >= p->n_nodes || p->nodes[j].op != GP_OP_STORE)
            continue;
        const gp_plan_node *c = &p->nodes[j];
        const gp_plan_tensor *sa = &p->tensors[a->inputs[2]], *sc = &p->tensors[c->inputs[2]];
        int ok = c->inputs[1] == a->inputs[1] && sa->ndim == sc->ndim && sa->ndim >= 1 &&
                 sa->sym[0] == sc->sym[0] && sa->dims[0] == sc->dims[0] &&
                 root_of(p, c->inputs[0]) != root_of(p, a->inputs[0]) &&
                 root_of(p, c->inputs[2]) != root_of(p, a->inputs[0]) &&
                 root_of(p, a->inputs[2]) != root_of(p, c->inputs[0]);
        if (!ok)
            continue;
        b->nodes[i].pair = j;
        b->nodes[j].skip = 1;
    }
}

/*
 * An rms_norm right before the group at node i + 1 whose output only the group's n matmuls read
 * (Llama's attention and FFN norms): the group's launch may compute it (gp_cu_group.has_norm),
 * reading the norm's input, which nothing the group writes may overlap. Only for groups of up to
 * NORM_GROUP_MAX_BYTES of weights: the products get slower per byte with the norm inside (fewer
 * blocks per multiprocessor, more work per element), which pays only where the norm's own launch
 * weighs more. Measured on an H200 (bench/gpu-notes.md, fifth session): Llama-7B's groups on two
 * GPUs (48 and 86 MiB) -0.10 ms per token; on one GPU (96 and 172 MiB) +0.08 ms.
 */
enum { NORM_GROUP_MAX_BYTES = 90 << 20 };

static void plan_group_norm(cuda_be *b, const int *uses, int i, int n)
{
    const gp_plan *p = b->p;
    const gp_plan_node *nd = &p->nodes[i];
    const gp_cu_group *g = &b->nodes[i + 1].grp;
    if (nd->op != GP_OP_RMS_NORM || nd->output != p->nodes[i + 1].inputs[0] ||
        uses[nd->output] != n || b->nodes[i].skip || b->nodes[i].tailed || b->nodes[i].prenorm)
        return;
    int64_t bytes = 0;
    for (int s = 0; s < n; s++) /* weights: no symbolic dims */
        bytes += (int64_t)(launch_numel(b, &g->w[s]) * gp_dtype_size(g->w[s].dtype));
    if (bytes > NORM_GROUP_MAX_BYTES)
        return;
    const gp_plan_tensor *h = &p->tensors[nd->output], *x = &p->tensors[nd->inputs[0]];
    const gp_plan_tensor *xr = root_of(p, nd->inputs[0]);
    if (h->kind != GP_TENSOR_INTERMEDIATE || h->view_src >= 0 || x->dtype != GP_F32)
        return;
    for (int s = 0; s < n; s++)
        if (overlaps(&p->tensors[p->nodes[i + 1 + s].output], xr))
            return;
    if (g->glu && overlaps(&p->tensors[p->nodes[i + 1 + n].output], xr))
        return;
    cu_node *cn = &b->nodes[i];
    cn->grpnorm = 1;
    memset(&cn->pre, 0, sizeof cn->pre);
    cn->pre.eps = (float)nd->attrs.f[0];
    tensor_of(b, nd->inputs[0], &cn->pre.x);
    tensor_of(b, nd->inputs[1], &cn->pre.w);
}

/*
 * Runs of matmuls right after each other that multiply the same x (not transposed) by different
 * weights, with no epilogue: a layer's q, k and v projections, or a SwiGLU's gate and up. When the
 * node after a pair is swiglu(first, second) (or swiglu(second, first)) and the two products have no
 * other reader, it joins (glu) and the products themselves are never written. Every output must be
 * disjoint from x (all blocks read x while others write).
 */
static void plan_matvec_groups(cuda_be *b, const int *uses)
{
    const gp_plan *p = b->p;
    for (int i = 0; i < p->n_nodes; i++) {
        const gp_plan_node *a = &p->nodes[i];
        if (a->op != GP_OP_MATMUL || a->attrs.i[0] != 0 || b->nodes[i].epi.n > 0 ||
            b->nodes[i].skip || (i > 0 && b->nodes[i - 1].prenorm))
            continue;
        const gp_plan_tensor *xr = root_of(p, a->inputs[0]);
        int n = 0;
        while (n < GP_CU_MAX_GROUP && i + n < p->n_nodes) {
            const gp_plan_node *m = &p->nodes[i + n];
            if (m->op != GP_OP_MATMUL || m->inputs[0] != a->inputs[0] || m->attrs.i[0] != 0 ||
                b->nodes[i + n].epi.n > 0 || b->nodes[i + n].skip ||
                overlaps(&p->tensors[m->output], xr))
                break;
            n++;
        }
        if (n < 2)
            continue;
        gp_cu_group *g = &b->nodes[i].grp;
        memset(g, 0, sizeof *g);
        const gp_plan_node *sw = i + 2 < p->n_nodes ? &p->nodes[i + 2] : NULL;
        int o0 = a->output, o1 = p->nodes[i + 1].output;
        if (n == 2 && sw && sw->op == GP_OP_SWIGLU && uses[o0] == 1 && uses[o1] == 1 &&
            ((sw->inputs[0] == o0 && sw->inputs[1] == o1) ||
             (sw->inputs[0] == o1 && sw->inputs[1] == o0)) &&
            !overlaps(&p->tensors[sw->output], xr)) {
            int first = sw->inputs[0] == o0 ? i : i + 1; /* the product silu is applied to */
            g->glu = 1;
            g->w[0] = b->nodes[first].in[1];
            g->tb[0] = p->nodes[first].attrs.i[1] != 0;
            g->w[1] = b->nodes[2 * i + 1 - first].in[1];
            g->tb[1] = p->nodes[2 * i + 1 - first].attrs.i[1] != 0;
            g->out[0] = b->nodes[i + 2].out;
        } else {
            for (int s = 0; s < n; s++) {
                g->w[s] = b->nodes[i + s].in[1];
                g->tb[s] = p->nodes[i + s].attrs.i[1] != 0;
                g->out[s] = b->nodes[i + s].out;
            }
        }
        g->n = n;
        g->x = b->nodes[i].in[0];
        if (i > 0)
            plan_group_norm(b, uses, i - 1, n);
        i += n - 1;
    }
}

/*
 * Norms right after an all_reduce that read its sum (Llama's rms_norm after each tensor-parallel
 * residual add): the P2P all-reduce kernel computes them when the sum is one f32 row that one
 * block can hold (gp_cuda_comm_all_reduce_norm). Weights contiguous [N]; the output disjoint from
 * the sum.
 */
static void plan_ar_norms(cuda_be *b)
{
    const gp_plan *p = b->p;
    for (int i = 0; b->comm && i + 1 < p->n_nodes; i++) {
        const gp_plan_node *ar = &p->nodes[i], *nd = &p->nodes[i + 1];
        if (ar->op != GP_OP_ALL_REDUCE || (nd->op != GP_OP_LAYER_NORM && nd->op != GP_OP_RMS_NORM) ||
            nd->inputs[0] != ar->output || b->nodes[i + 1].skip || b->nodes[i + 1].tailed)
            continue;
        const gp_plan_tensor *x = &p->tensors[ar->output], *h = &p->tensors[nd->output];
        const gp_plan_tensor *w = &p->tensors[nd->inputs[1]];
        const gp_plan_tensor *bias = nd->op == GP_OP_LAYER_NORM && nd->n_inputs > 2
                                         ? &p->tensors[nd->inputs[2]] : NULL;
        if (x->dtype != GP_F32 || x->view_src >= 0 || h->view_src >= 0 || overlaps(h, x) ||
            w->ndim != 1 || (bias && bias->ndim != 1) || h->ndim < 1 || x->ndim < 1 ||
            h->stride[h->ndim - 1] != 1 || w->dims[0] != x->dims[x->ndim - 1] ||
            (bias && bias->dims[0] != w->dims[0]))
            continue;
        gp_cuda_ar_norm *an = &b->nodes[i].arnorm;
        an->is_ln = nd->op == GP_OP_LAYER_NORM;
        an->eps = (float)nd->attrs.f[0];
        an->w = tensor_addr(b, w);
        an->w_dt = w->dtype;
        an->b = bias ? tensor_addr(b, bias) : NULL;
        an->b_dt = bias ? bias->dtype : GP_F32;
        an->out = tensor_addr(b, h);
        an->out_dt = h->dtype;
        an->n = (size_t)w->dims[0];
        /* A row the kernel cannot take whole, or an all-reduce NCCL serves, keeps its norm node,
         * which the group or the matvec after it may then compute. */
        if (!gp_cuda_ar_norm_ok(an, an->n, GP_F32) ||
            !gp_cuda_comm_uses_p2p(b->comm, an->n * sizeof(float))) {
            memset(an, 0, sizeof *an);
            continue;
        }
        b->nodes[i].has_arnorm = 1;
        b->nodes[i + 1].tailed = 1;
    }
}

/*
 * Norms whose only reader is the matmul right after them, as its first operand (not transposed):
 * that matmul's matrix-vector kernel can normalize x itself. What the matmul writes (its output,
 * or its epilogue's) must not overlap x, which every block reads.
 */
static void plan_prenorms(cuda_be *b, const int *uses)
{
    const gp_plan *p = b->p;
    for (int i = 0; i + 1 < p->n_nodes; i++) {
        const gp_plan_node *nd = &p->nodes[i], *mm = &p->nodes[i + 1];
        if ((nd->op != GP_OP_LAYER_NORM && nd->op != GP_OP_RMS_NORM) || mm->op != GP_OP_MATMUL)
            continue;
        const gp_plan_tensor *h = &p->tensors[nd->output], *x = &p->tensors[nd->inputs[0]];
        if (h->kind != GP_TENSOR_INTERMEDIATE || h->view_src >= 0 || uses[nd->output] != 1 ||
            b->nodes[i].tailed ||
            mm->inputs[0] != nd->output || mm->attrs.i[0] != 0 || b->nodes[i + 1].skip)
            continue;
        const gp_plan_tensor *xr = root_of(p, nd->inputs[0]);
        int last_out = p->nodes[i + 1 + b->nodes[i + 1].epi.n].output;
        if (overlaps(&p->tensors[mm->output], xr) || overlaps(&p->tensors[last_out], xr) ||
            x->dtype != GP_F32)
            continue;
        cu_node *cn = &b->nodes[i];
        cn->prenorm = 1;
        cn->pre.is_ln = nd->op == GP_OP_LAYER_NORM;
        cn->pre.eps = (float)nd->attrs.f[0];
        tensor_of(b, nd->inputs[0], &cn->pre.x);
        tensor_of(b, nd->inputs[1], &cn->pre.w);
        if (cn->pre.is_ln && nd->n_inputs > 2)
            tensor_of(b, nd->inputs[2], &cn->pre.b);
    }
}

/*
 * The layer norms planned into the matmul after them whose weights, and the matmul's, are the
 * model's: folded (gp_cuda_fold), so that the one-row product sums x while it reduces the norm's
 * statistics. Enqueues their constants (2 N floats each) one after the other from dst on and sets
 * each norm's pre.fold; dst NULL: nothing enqueued. Returns the floats they take, or -1 with
 * b->kc.err set.
 */
static int64_t fold_all(cuda_be *b, float *dst)
{
    const gp_plan *p = b->p;
    int64_t at = 0;
    for (int i = 0; i + 1 < p->n_nodes; i++) {
        const gp_plan_node *nd = &p->nodes[i], *mm = &p->nodes[i + 1];
        cu_node *cn = &b->nodes[i];
        if (!cn->prenorm || !cn->pre.is_ln ||
            root_of(p, mm->inputs[1])->kind != GP_TENSOR_WEIGHT ||
            root_of(p, nd->inputs[1])->kind != GP_TENSOR_WEIGHT ||
            (nd->n_inputs > 2 && root_of(p, nd->inputs[2])->kind != GP_TENSOR_WEIGHT))
            continue;
        int64_t n = gp_cuda_fold(&b->kc, &cn->pre, &mm->attrs, &b->nodes[i + 1].in[1],
                                 dst ? dst + at : NULL);
        if (n < 0)
            return -1;
        if (dst && n > 0)
            cn->pre.fold = dst + at;
        at += n;
    }
    return at;
}

/* fold_all at creation, into one allocation of its own, done before the first eval. 0, or -1
 * with err set. Reloaded weights (be_reload_weights) are LoRA slots, which no folded product
 * reads: a slot's A reads a norm that the base matmul reads too, so that norm is no prenorm. */
static int plan_folds(cuda_be *b, char *err, size_t err_len)
{
    b->kc.stream = b->stream; /* not yet set: the constants must be there before the first eval */
    int64_t n = fold_all(b, NULL);
    if (n <= 0) {
        if (n < 0)
            snprintf(err, err_len, "cuda: %s", b->kc.err);
        return n < 0 ? -1 : 0;
    }
    cudaError_t e = be_malloc(b, (void **)&b->dfold, (size_t)n * sizeof(float));
    if (e == cudaSuccess && fold_all(b, b->dfold) < 0) {
        snprintf(err, err_len, "cuda: %s", b->kc.err);
        return -1;
    }
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(b->stream);
    if (e != cudaSuccess) {
        snprintf(err, err_len, "cuda: %s", cudaGetErrorString(e));
        return -1;
    }
    return 0;
}

/* The first step from which tensor t's bytes are its own or those of the tensors it is written
 * over in place (their lifetimes, docs/plan-format.md). */
static int bytes_first(const gp_plan *p, int t)
{
    int first = p->tensors[t].first;
    for (int n = 0; p->tensors[t].inplace_of >= 0 && n < p->n_tensors; n++) {
        t = p->tensors[t].inplace_of;
        if (p->tensors[t].first < first)
            first = p->tensors[t].first;
    }
    return first;
}

/*
 * Accumulated outputs (docs/plan-format.md): a one-row product of a folded layer norm whose
 * epilogue adds only (maybe ending in a gelu) may add its splits into its output with atomics
 * (k_matvec_kc's add) when the matmul launched before it has zeroed those bytes after its wait.
 * That is safe when the plan keeps the bytes the output is written to from that launch's first
 * step on (gplan-compile does, for CUDA): nothing else lies there meanwhile. A trailing gelu is
 * then left to the only reader of the output, a matmul reading it as x (matmul_node). One device
 * only (tensor-parallel plans are not measured with it).
 */
static void plan_accumulate(cuda_be *b, const int *uses)
{
    const gp_plan *p = b->p;
    for (int i = 0; i < p->n_nodes; i++) {
        b->nodes[i].zero_for = b->nodes[i].gelu_to = -1;
        b->nodes[i].acc = 0;
    }
    if ((b->disable & FUSE_ACCUM) || p->n_devices > 1 || b->kc.mv_add < 2)
        return;
    for (int j = 1; j < p->n_nodes; j++) {
        cu_node *cj = &b->nodes[j];
        const gp_cu_epilogue *e = &cj->epi;
        if (p->nodes[j].op != GP_OP_MATMUL || !b->nodes[j - 1].prenorm ||
            !b->nodes[j - 1].pre.fold || e->n < 1 || cj->skip || cj->dec_att ||
            cj->grp.n > 1)
            continue;
        int n = e->n, gelu = e->op[n - 1] == GP_OP_GELU, ok = 1;
        for (int k = 0; k < n - gelu; k++)
            ok &= e->op[k] == GP_OP_ADD;
        /* the matmul launched before it, which zeroes its output */
        int i = j - 2;
        while (i >= 0 && p->nodes[i].op != GP_OP_MATMUL)
            i--;
        if (!ok || i < 0 || b->nodes[i].skip || b->nodes[i].dec_att || b->nodes[i].grp.n > 1 ||
            b->nodes[i].epi.n < 1 || b->nodes[i].zero_for >= 0)
            continue;
        int out = p->nodes[j + n].output, from = i > 0 && b->nodes[i - 1].prenorm ? i - 1 : i;
        if (p->tensors[out].kind != GP_TENSOR_INTERMEDIATE || bytes_first(p, out) > from)
            continue;
        /* A node before the zeroing that an attention after it runs (attnfuse) reads its sources
         * past their planned last step, maybe over these bytes. */
        for (int s = 0; s < from && ok; s++)
            ok = !b->nodes[s].dec_att || b->nodes[s].dec_att - 1 < from;
        if (!ok)
            continue;
        int k = -1; /* with gelu: the matmul that reads out as its x */
        for (int s = j + n + 1; gelu && s < p->n_nodes && k < 0; s++)
            for (int q = 0; q < p->nodes[s].n_inputs; q++)
                if (p->nodes[s].inputs[q] == out)
                    k = s;
        if (gelu && (k < 0 || uses[out] != 1 || p->nodes[k].op != GP_OP_MATMUL ||
                     p->nodes[k].inputs[0] != out || p->nodes[k].attrs.i[0] ||
                     b->nodes[k].epi.n < 1 || b->nodes[k].skip || b->nodes[k].dec_att ||
                     b->nodes[k].grp.n > 1))
            continue;
        b->nodes[i].zero_for = j;
        cj->acc = 1;
        cj->gelu_to = k;
    }
}

/* ---- attnfuse: a one-token attention with its ropes and K/V cache stores in one launch ---- */

typedef struct {
    uintptr_t lo, hi; /* device bytes [lo, hi); lo == hi: none */
} dev_span;

/* The bytes t spans in a one-token launch: its dims of symbol tsym at 1, the others at their
 * bounds. */
static dev_span span_one_token(const gp_cu_tensor *t, int tsym)
{
    dev_span s = {0, 0};
    int64_t lo = 0, hi = 0;
    if (!t->data)
        return s;
    for (int d = 0; d < t->ndim; d++) {
        int64_t n = t->sym[d] >= 0 && t->sym[d] == tsym ? 1 : t->ne[d];
        if (n <= 0)
            return s;
        int64_t off = (n - 1) * t->nb[d];
        if (off < 0)
            lo += off;
        else
            hi += off;
    }
    s.lo = (uintptr_t)t->data + (uintptr_t)lo; /* lo <= 0: wraps to the lower address */
    s.hi = (uintptr_t)t->data + (uintptr_t)hi + gp_dtype_size(t->dtype);
    return s;
}

static int spans_meet(dev_span a, dev_span b)
{
    return a.lo < a.hi && b.lo < b.hi && a.lo < b.hi && b.lo < a.hi;
}

/* The tensor that owns the bytes tensor id reads: its root, or for the reshape of an elided cont
 * the root of the cont's input. -1 when unknown. */
static int bytes_root(const cuda_be *b, int id)
{
    const gp_plan *p = b->p;
    if (b->alias[id].ndim > 0) {
        int c = p->tensors[id].view_src, n = c >= 0 ? p->tensors[c].producer : -1;
        if (n < 0)
            return -1;
        id = p->nodes[n].inputs[0];
    }
    return (int)(root_of(p, id) - p->tensors);
}

/* The step whose node wrote the bytes tensor id reads (bytes_root's producer), or -1 (an input, a
 * state or a weight). */
static int bytes_step(const cuda_be *b, int id)
{
    int r = bytes_root(b, id);
    return r < 0 ? b->p->n_nodes /* unknown: nothing may run before the reader */
                 : b->p->tensors[r].producer;
}

/* 1 when node j is among the n nodes of list (the nodes a fused launch absorbed). */
static int listed(const int *list, int n, int j)
{
    for (int k = 0; k < n; k++)
        if (list[k] == j)
            return 1;
    return 0;
}

/* What node j may write in a one-token launch, as spans (at most 4): its output (a store: its
 * destination; a fused attention: also its caches), its workspace. Views and elided conts write
 * nothing. Other fusions only move a write to an earlier step or drop it, so this is a superset
 * of what runs at step j or later. */
static int node_writes(const cuda_be *b, int j, int tsym, dev_span *w)
{
    const gp_plan_node *nd = &b->p->nodes[j];
    const cu_node *cn = &b->nodes[j];
    int n = 0;
    if (nd->op == GP_OP_STORE)
        w[n++] = span_one_token(&cn->in[0], tsym);
    else if (!gp_op_get(nd->op)->is_view && !(nd->op == GP_OP_CONT && cn->skip))
        w[n++] = span_one_token(&cn->out, tsym);
    if (cn->dec_on) {
        w[n++] = span_one_token(&cn->dec.k_cache, tsym);
        w[n++] = span_one_token(&cn->dec.v_cache, tsym);
    }
    if (cn->ws && cn->ws_size) {
        w[n].lo = (uintptr_t)cn->ws;
        w[n++].hi = (uintptr_t)cn->ws + cn->ws_size;
    }
    return n;
}

/* A rope at pos whose output (tensor id) only its one reader reads: *r its attributes, *node the
 * rope, *src its input. */
static int rope_source(const cuda_be *b, const int *uses, int id, int pos, gp_cu_rope *r, int *node,
                       int *src)
{
    const gp_plan *p = b->p;
    const gp_plan_tensor *t = &p->tensors[id];
    int n = t->producer;
    if (n < 0 || p->nodes[n].op != GP_OP_ROPE || p->nodes[n].inputs[1] != pos || uses[id] != 1 ||
        t->kind != GP_TENSOR_INTERMEDIATE || t->view_src >= 0 || b->nodes[n].dec_att)
        return 0;
    const gp_plan_node *nd = &p->nodes[n];
    r->on = 1;
    r->interleaved = nd->attrs.i[0] == 1;
    r->n = nd->attrs.i[1];
    r->theta = nd->attrs.f[0];
    r->dtype = t->dtype;
    *node = n;
    *src = nd->inputs[0];
    return 1;
}

/* Tensor id = reshape(c) [T, H, D] with c = cont(x [T, H * D]) not elided, each read only by its
 * one reader: *d is x seen as [T, H, D] (the cont need not run), *node the cont, *src x. */
static int cont_source(const cuda_be *b, const int *uses, int id, gp_cu_tensor *d, int *node,
                       int *src)
{
    const gp_plan *p = b->p;
    const gp_plan_tensor *v = &p->tensors[id];
    int r = v->producer;
    if (r < 0 || p->nodes[r].op != GP_OP_RESHAPE || uses[id] != 1 || v->ndim != 3 ||
        v->sym[1] >= 0 || v->sym[2] >= 0 || b->alias[id].ndim > 0)
        return 0;
    int c = p->nodes[r].inputs[0], n = p->tensors[c].producer;
    const gp_plan_tensor *ct = &p->tensors[c];
    if (n < 0 || p->nodes[n].op != GP_OP_CONT || b->nodes[n].skip || b->nodes[n].dec_att ||
        uses[c] != 1 || ct->kind != GP_TENSOR_INTERMEDIATE || ct->view_src >= 0)
        return 0;
    const gp_cu_tensor *x = &b->nodes[n].in[0];
    if (x->ndim != 2 || x->dtype != ct->dtype || x->ne[0] != v->dims[0] || x->sym[0] != v->sym[0] ||
        x->sym[1] >= 0 || x->ne[1] != v->dims[1] * v->dims[2])
        return 0;
    *d = *x;
    d->ndim = 3;
    d->ne[1] = v->dims[1];
    d->ne[2] = v->dims[2];
    d->sym[1] = d->sym[2] = -1;
    d->nb[1] = v->dims[2] * x->nb[1];
    d->nb[2] = x->nb[1];
    *node = n;
    *src = p->nodes[n].inputs[0];
    return 1;
}

/* An operand of the fused attention, *t for tensor *id: the input of the rope (at pos) that makes
 * it when rope is not NULL and there is one, else the source of the cont that makes it, else as it
 * is. *id becomes the tensor read, and the absorbed node is appended to absorbed. */
static void absorb_source(const cuda_be *b, const int *uses, int pos, int *id, gp_cu_tensor *t,
                          gp_cu_rope *rope, int *absorbed, int *n_abs)
{
    int node;
    if (rope && rope_source(b, uses, *id, pos, rope, &node, id))
        *t = b->nodes[node].in[0];
    else if (!cont_source(b, uses, *id, t, &node, id))
        return;
    absorbed[(*n_abs)++] = node;
}

static int same_desc(const gp_cu_tensor *a, const gp_cu_tensor *b)
{
    if (a->data != b->data || a->dtype != b->dtype || a->ndim != b->ndim)
        return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->ne[d] != b->ne[d] || a->nb[d] != b->nb[d] || a->sym[d] != b->sym[d])
            return 0;
    return 1;
}

/* t's first dim is the launch's token dim: symbol tsym, or a fixed 1. */
static int token_dim(const gp_cu_tensor *t, int tsym)
{
    return t->ndim >= 1 && (t->sym[0] >= 0 ? t->sym[0] == tsym : t->ne[0] == 1);
}

/* The output writes over q exactly: element (h, d) of both at one address, elements of one size
 * that share no bytes. Safe: head h's output is written (by its last split block, or by the
 * combine kernel after the launch) only after every block of head h has read q[h] into registers
 * (before its counter increment), and only head h's blocks read q[h]. */
static int over_q_exactly(const gp_cu_tensor *q, const gp_cu_tensor *o)
{
    int64_t es = (int64_t)gp_dtype_size(q->dtype);
    return q->data == o->data && q->ndim == 3 && o->ndim == 3 &&
           es == (int64_t)gp_dtype_size(o->dtype) && q->ne[1] == o->ne[1] && q->ne[2] == o->ne[2] &&
           q->nb[1] == o->nb[1] && q->nb[2] == o->nb[2] && q->nb[2] >= es &&
           q->nb[1] >= q->ne[2] * q->nb[2];
}

/* The caches' dtype when "atthead" runs the one-token attention d into out in one block a head
 * (gp_cuda_attention_head_kv), else -1: then qkvatt is not planned. Measured (H200,
 * bench/gpu-notes.md, nineteenth session): GPT-2 117M 0.208 ms a token with c_attn launched
 * before the attention's block a head, 0.233 with qkvatt's clusters. */
static int head_kv(const cuda_be *b, const gp_cu_decode_att *d, const gp_cu_tensor *out)
{
    return b->disable & FUSE_ATTHEAD ? -1 : gp_cuda_attention_head_kv(d, out);
}

/* head_pos and head_rows: where the one-token attentions that atthead takes read their
 * position (one i32 input for all of them, else none: head_pos -1), and the fewest rows any of
 * them loads early. */
static void plan_head_pos(cuda_be *b)
{
    b->head_pos = -1;
    b->head_rows = 0;
    for (int i = 0; i < b->p->n_nodes; i++) {
        const gp_cu_decode_att *d = &b->nodes[i].dec;
        int kv = b->nodes[i].dec_on ? head_kv(b, d, &b->nodes[i].out) : -1;
        if (kv < 0)
            continue;
        int64_t at = (const unsigned char *)d->pos.data - b->dev[GP_REGION_IO];
        int rows = gp_cuda_attention_head_rows(kv);
        if (at < 0 || at + 4 > b->p->regions[GP_REGION_IO].size ||
            (b->head_rows && at != b->head_pos)) {
            b->head_pos = -1;
            return;
        }
        b->head_pos = at;
        b->head_rows = b->head_rows && b->head_rows < rows ? b->head_rows : rows;
    }
}

/* The node of the launch after node i's: past its epilogue, views, skipped nodes, nodes an
 * attention runs and norms the matmul after them computes (p->n_nodes: none). */
static int next_launch(const cuda_be *b, int i)
{
    const gp_plan *p = b->p;
    int j = i + 1 + (p->nodes[i].op == GP_OP_MATMUL ? b->nodes[i].epi.n : 0);
    while (j < p->n_nodes && (gp_op_get(p->nodes[j].op)->is_view || b->nodes[j].skip ||
                              b->nodes[j].dec_att || b->nodes[j].prenorm))
        j++;
    return j;
}

/*
 * Early triggers. A matmul's [K, N] kernel lets the next kernel start at its own start, not after
 * its PDL wait, when that next launch is a matmul of at least trig_bytes of weights (GPT-2
 * 1558M's c_proj, c_fc and mlp.c_proj; 117M's products are smaller): that launch's blocks then
 * take the room this one leaves and load their first weights while the attention before runs,
 * or this product does. Its own wait still waits for this kernel, which waited for the one
 * before. An attention whose next launch is such a matmul (1558M's, before c_proj) does the same
 * in one block a head: c_proj's weights then load while c_attn ends, and c_fc's during the
 * attention. GPLAN_CUDA_TRIG=n sets the threshold (MiB), "none" none.
 */
static void plan_trig(cuda_be *b)
{
    const gp_plan *p = b->p;
    for (int i = p->n_nodes - 1; i >= 0; i--) { /* from the end: an attention reads j's */
        int j = next_launch(b, i);
        b->nodes[i].trig = 0;
        if (b->trig_bytes < 0 || j >= p->n_nodes || p->nodes[j].op != GP_OP_MATMUL)
            continue;
        const gp_plan_tensor *w = &p->tensors[p->nodes[j].inputs[1]];
        if (p->nodes[i].op == GP_OP_MATMUL)
            b->nodes[i].trig = w->kind == GP_TENSOR_WEIGHT && w->size >= b->trig_bytes;
        else if (p->nodes[i].op == GP_OP_ATTENTION)
            b->nodes[i].trig = b->nodes[j].trig;
    }
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
    if (b->head_pos < 0 || (b->p->n_syms == 1 && b->pin_syms[0] != 1))
        return 0;
    memcpy(&pos, b->host_io + b->head_pos, 4);
    return pos >= b->head_rows;
}

/*
 * qkvatt. The fused one-token attention a (d, its sources' tensors src: q, k, v) whose q, k and v
 * are columns of one tensor qkv = norm(x) @ w + bias that nothing else reads (GPT-2's c_attn: a
 * matmul with its prenorm and a bias epilogue, planned before) computes them itself, head by head
 * (gp_cuda_qkv_attention_ok): the norm, the matmul and the epilogue are absorbed too. Memory: x
 * may not be written from the norm's step to the attention (absorbed nodes write nothing), nor
 * by the launch itself.
 */
static void plan_qkv_attention(cuda_be *b, int a, gp_cu_decode_att *d, const int *src,
                               int *absorbed, int *n_abs, int tsym)
{
    const gp_plan *p = b->p;
    int qkv = bytes_root(b, src[0]);
    if (qkv < 0)
        return;
    const gp_plan_tensor *root = &p->tensors[qkv];
    int e = root->producer, mm = e - 1, nn = e - 2;
    if ((b->disable & (FUSE_QKVATT | FUSE_PLANS)) ||
        head_kv(b, d, &b->nodes[a].out) >= 0 || bytes_root(b, src[1]) != qkv ||
        bytes_root(b, src[2]) != qkv ||
        root->kind != GP_TENSOR_INTERMEDIATE || nn < 0 || p->nodes[mm].op != GP_OP_MATMUL ||
        p->nodes[e].output != qkv || !b->nodes[nn].prenorm || b->nodes[mm].epi.n != 1 ||
        b->nodes[mm].epi.op[0] != GP_OP_ADD ||
        p->nodes[mm].attrs.i[0] || p->nodes[mm].attrs.i[1] || b->nodes[nn].dec_att ||
        b->nodes[mm].dec_att || b->nodes[e].dec_att)
        return;
    /* q, k and v: f32 columns [0, C), [C, 2C), [2C, 3C) of qkv's one row, heads of 64. */
    const gp_cu_tensor *qt = &b->nodes[e].out, *sv[3] = {&d->q, &d->k, &d->v};
    int64_t H = d->q.ndim == 3 ? d->q.ne[1] : 0, C = H * 64;
    int ok = qt->dtype == GP_F32 && qt->ndim == 2 && qt->ne[1] == 3 * C && qt->nb[1] == 4;
    for (int i = 0; i < 3 && ok; i++)
        ok = sv[i]->dtype == GP_F32 && sv[i]->ndim == 3 && sv[i]->ne[1] == H &&
             sv[i]->ne[2] == 64 && sv[i]->nb[1] == 64 * 4 && sv[i]->nb[2] == 4 &&
             (char *)sv[i]->data == (char *)qt->data + i * C * 4;
    /* Nothing but the absorbed nodes and the attention reads qkv's bytes (views and elided
     * conts compute nothing). */
    for (int j = 0; j < p->n_nodes && ok; j++) {
        int none = gp_op_get(p->nodes[j].op)->is_view ||
                   (p->nodes[j].op == GP_OP_CONT && b->nodes[j].skip); /* computes nothing */
        if (j == a || j == e || none || listed(absorbed, *n_abs, j))
            continue;
        for (int k = 0; k < p->nodes[j].n_inputs && ok; k++)
            ok = bytes_root(b, p->nodes[j].inputs[k]) != qkv;
    }
    if (!ok)
        return;
    gp_cu_decode_att t = *d;
    t.has_qkv = 1;
    t.qkv_w = b->nodes[mm].in[1];
    t.qkv_b = b->nodes[mm].epi.other[0];
    t.qkv_norm = b->nodes[nn].pre;
    if (!gp_cuda_qkv_attention_ok(&b->kc, &t, &b->nodes[a].out))
        return;
    /* x: not written from the norm's step on (absorbed nodes, views and elided conts write
     * nothing), nor by the launch (its output, caches, workspace). */
    dev_span xs = span_one_token(&t.qkv_norm.x, tsym), w[4];
    for (int j = nn; j <= a && ok; j++) {
        int skipped = j == nn || j == mm || j == e || listed(absorbed, *n_abs, j);
        int n = skipped ? 0 : node_writes(b, j, tsym, w); /* a: output, workspace */
        if (j == a) {
            ok = !spans_meet(span_one_token(&t.k_cache, tsym), xs) &&
                 !spans_meet(span_one_token(&t.v_cache, tsym), xs);
        }
        for (int k = 0; k < n && ok; k++)
            ok = !spans_meet(w[k], xs);
    }
    if (!ok)
        return;
    *d = t;
    absorbed[(*n_abs)++] = nn;
    absorbed[(*n_abs)++] = mm;
    absorbed[(*n_abs)++] = e;
}

/*
 * attnfuse. An attention whose k and v are store outputs (at its pos) that nothing else reads
 * runs, in one-token launches, as one gp_cuda_attention_decode launch that also does the stores;
 * with them, when read only there: ropes (at its pos) before the stores or q, and a cont whose
 * reshape is q, k or v (GPT-2's q: read straight from qkv). Those nodes are skipped in one-token
 * launches only; launches of more tokens run them as before.
 * Memory, at one token's extents (device addresses): the launch reads q, k and v's sources, pos
 * and the caches, so (1) nothing that runs between the step that wrote a source's bytes and the
 * attention may write them (the skipped nodes write nothing); (2) what the launch writes (its
 * output, its split partials, the two cache rows) overlaps nothing it reads, except the output
 * laid exactly over q (over_q_exactly); (3) nothing between the stores and the attention reads the
 * caches (it would see the old rows). When a check fails, the nodes run unfused. The split
 * partials go to the attention's own workspace, which the planner keeps live from the first node
 * fused here (docs/plan-format.md, Workspaces), so it lies over none of the sources; in a plan
 * from an older compiler it may, and then the nodes run unfused too.
 */
static void plan_decode_attention(cuda_be *b, const int *uses)
{
    const gp_plan *p = b->p;
    for (int a = 0; a < p->n_nodes; a++) {
        const gp_plan_node *at = &p->nodes[a];
        cu_node *an = &b->nodes[a];
        if (at->op != GP_OP_ATTENTION || at->n_inputs != 4 || an->skip)
            continue;
        int pos = at->inputs[3], ik = at->inputs[1], iv = at->inputs[2];
        int sk = p->tensors[ik].producer, sv = p->tensors[iv].producer;
        if (sk < 0 || sv < 0 || sk == sv || p->nodes[sk].op != GP_OP_STORE ||
            p->nodes[sv].op != GP_OP_STORE || p->nodes[sk].inputs[1] != pos ||
            p->nodes[sv].inputs[1] != pos || uses[ik] != 1 || uses[iv] != 1 ||
            b->nodes[sk].dec_att || b->nodes[sv].dec_att)
            continue;
        /* A pair of stores runs in one launch: only with each other. */
        int ok = (b->nodes[sk].pair < 0 || b->nodes[sk].pair == sv) &&
                 (b->nodes[sv].pair < 0 || b->nodes[sv].pair == sk);
        for (int j = 0; j < p->n_nodes && ok; j++)
            ok = !((b->nodes[j].pair == sk || b->nodes[j].pair == sv) && j != sk && j != sv);
        if (!ok)
            continue;
        int tsym = an->in[0].ndim == 3 && an->in[0].sym[0] >= 0 ? an->in[0].sym[0] : -1;
        gp_cu_decode_att d;
        memset(&d, 0, sizeof d);
        int absorbed[8] = {sk, sv, -1, -1, -1, -1, -1, -1}, n_abs = 2;
        /* The sources and the tensors whose bytes they are: q, k, v, pos, k cache, v cache. */
        int src[6] = {at->inputs[0], p->nodes[sk].inputs[2], p->nodes[sv].inputs[2], pos,
                      p->nodes[sk].inputs[0], p->nodes[sv].inputs[0]};
        d.q = an->in[0];
        d.k = b->nodes[sk].in[2];
        d.v = b->nodes[sv].in[2];
        absorb_source(b, uses, pos, &src[0], &d.q, &d.rope_q, absorbed, &n_abs);
        absorb_source(b, uses, pos, &src[1], &d.k, &d.rope_k, absorbed, &n_abs);
        absorb_source(b, uses, pos, &src[2], &d.v, NULL, absorbed, &n_abs);
        d.pos = an->in[3];
        d.k_cache = b->nodes[sk].in[0];
        d.v_cache = b->nodes[sv].in[0];
        d.scale = at->attrs.f[0];
        d.pos_const = root_of(p, pos)->kind == GP_TENSOR_INPUT;
        /* Shapes: one token in every operand at once; caches as the attention reads them. */
        const gp_cu_tensor *ops[5] = {&d.q, &d.k, &d.v, &d.pos, &an->out};
        for (int i = 0; i < 5 && ok; i++)
            ok = token_dim(ops[i], tsym);
        if (!ok || !same_desc(&d.k_cache, &an->in[1]) || !same_desc(&d.v_cache, &an->in[2]) ||
            (tsym < 0 && an->in[0].ne[0] != 1) || !gp_cuda_attention_decode_ok(&d, &an->out))
            continue;
        /* Memory (1): nothing written between a source's writer and the attention. */
        const gp_cu_tensor *reads[6] = {&d.q, &d.k, &d.v, &d.pos, &d.k_cache, &d.v_cache};
        dev_span rs[6], w[4];
        for (int i = 0; i < 6; i++)
            rs[i] = span_one_token(reads[i], tsym);
        for (int i = 0; i < 6 && ok; i++)
            for (int j = bytes_step(b, src[i]) + 1; j < a && ok; j++) {
                int skipped = listed(absorbed, n_abs, j);
                for (int k = skipped ? 0 : node_writes(b, j, tsym, w); k > 0 && ok; k--)
                    ok = !spans_meet(w[k - 1], rs[i]);
            }
        /* (2) What the launch writes against what it reads. */
        dev_span os = span_one_token(&an->out, tsym), ws = {0, 0};
        if (an->ws && an->ws_size) {
            ws.lo = (uintptr_t)an->ws;
            ws.hi = ws.lo + an->ws_size;
        }
        int own_ws = 1;
        for (int i = 0; i < 6 && ok; i++) {
            ok = (!spans_meet(os, rs[i]) || (i == 0 && over_q_exactly(&d.q, &an->out))) &&
                 (i >= 4 || (!spans_meet(rs[4], rs[i]) && !spans_meet(rs[5], rs[i])));
            own_ws &= !spans_meet(ws, rs[i]);
        }
        ok = ok && !spans_meet(rs[4], rs[5]);
        /* (3) No kernel between the first store and the attention reads the caches. */
        for (int j = (sk < sv ? sk : sv) + 1; j < a && ok; j++) {
            const gp_plan_node *nd = &p->nodes[j];
            if (j == sk || j == sv || (gp_op_get(nd->op)->is_view && nd->op != GP_OP_STORE))
                continue;
            for (int k = 0; k < nd->n_inputs && ok; k++) {
                dev_span s = span_one_token(&b->nodes[j].in[k], tsym);
                ok = !spans_meet(s, rs[4]) && !spans_meet(s, rs[5]);
            }
        }
        if (!ok || !own_ws)
            continue;
        plan_qkv_attention(b, a, &d, src, absorbed, &n_abs, tsym);
        an->dec = d;
        an->dec_on = 1;
        an->dec_tsym = tsym;
        for (int k = 0; k < n_abs; k++)
            b->nodes[absorbed[k]].dec_att = a + 1;
    }
}

/*
 * ropetab. The one-token attentions' rope angles depend only on the position and the rope (every
 * layer's are the same), yet each block of each attention computed them: pow, cos and sin in
 * double on its critical path. Instead, one launch before the first node makes a table per
 * distinct (pos, theta, n) in the param block (gp_cuda_rope_tables: the same bits), and the
 * attentions read their angles from it with their other loads. At most GP_CU_ROPE_TABS tables;
 * ropes past them, or wider than a table, keep computing their own.
 */
static void plan_rope_tables(cuda_be *b, float *tabs)
{
    b->n_rope_tabs = 0;
    if (b->disable & FUSE_PLANS)
        return; /* plan_decode_attention left every table pointer NULL */
    for (int i = 0; i < b->p->n_nodes; i++) {
        cu_node *cn = &b->nodes[i];
        for (int k = 0; k < 2 && cn->dec_on; k++) {
            const gp_cu_rope *r = k ? &cn->dec.rope_k : &cn->dec.rope_q;
            if (!r->on || r->n > ROPE_TAB_FLOATS)
                continue;
            int j = 0;
            for (; j < b->n_rope_tabs; j++) {
                const gp_cu_rope_tab *t = &b->rope_tabs[j];
                if (t->rope.theta == r->theta && t->rope.n == r->n &&
                    t->pos.data == cn->dec.pos.data)
                    break;
            }
            if (j == GP_CU_ROPE_TABS)
                continue;
            if (j == b->n_rope_tabs) {
                b->rope_tabs[j].rope = *r;
                b->rope_tabs[j].pos = cn->dec.pos;
                b->rope_tabs[j].out = tabs + (size_t)j * ROPE_TAB_FLOATS;
                b->n_rope_tabs++;
            }
            *(k ? &cn->dec.tab_k : &cn->dec.tab_q) = b->rope_tabs[j].out;
        }
    }
}

/* all_reduce nodes go to NCCL as flat arrays: input and output contiguous at every size (packed
 * strides, only the first dim symbolic), one dtype NCCL sums, the same shape, and the output
 * either the input's bytes (in place) or disjoint from them. */
static int check_all_reduces(const cuda_be *b, char *err, size_t err_len)
{
    const gp_plan *p = b->p;
    for (int i = 0; i < p->n_nodes; i++) {
        const gp_plan_node *nd = &p->nodes[i];
        if (nd->op != GP_OP_ALL_REDUCE)
            continue;
        const cu_node *cn = &b->nodes[i];
        const gp_cu_tensor *x = &cn->in[0], *o = &cn->out;
        const char *why = NULL;
        const gp_cu_tensor *y = nd->n_inputs > 1 ? &cn->in[1] : x;
        if (!gp_cuda_comm_dtype_ok(o->dtype) || x->dtype != o->dtype || y->dtype != o->dtype)
            why = "needs f32, f16 or bf16 inputs of the output's dtype";
        for (int t = 0; t < 3 && !why; t++) {
            const gp_cu_tensor *k = t == 0 ? x : t == 1 ? y : o;
            int64_t packed = (int64_t)gp_dtype_size(k->dtype);
            if (k->ndim != o->ndim)
                why = "input and output shapes differ";
            for (int d = k->ndim - 1; d >= 0 && !why; d--) {
                if (k->ne[d] != o->ne[d] || k->sym[d] != o->sym[d])
                    why = "input and output shapes differ";
                else if ((k->ne[d] > 1 && k->nb[d] != packed) || (d > 0 && k->sym[d] >= 0))
                    why = "input and output must be contiguous, only the first dim symbolic";
                packed *= k->ne[d];
            }
        }
        if (!why && x->data != o->data) {
            size_t bytes = (size_t)gp_dtype_size(o->dtype);
            for (int d = 0; d < o->ndim; d++)
                bytes *= (size_t)o->ne[d];
            const unsigned char *xa = x->data, *oa = o->data;
            if (!xa || !oa || (xa < oa + bytes && oa < xa + bytes))
                why = "the output overlaps the input without being it";
        }
        if (why) {
            snprintf(err, err_len, "cuda: node %d (all_reduce -> %s, line %d): %s", i,
                     p->tensors[nd->output].name, nd->line, why);
            return -1;
        }
    }
    return 0;
}

/*
 * GPLAN_NCCL_REGISTER=1: registers the arena (where every all_reduce buffer lives) with NCCL, for
 * zero-copy transfers; the outcome goes to stderr. Off by default and untested on hardware: NCCL's
 * documentation asks for memory from its own allocator (ncclMemAlloc, cuMem*) and the arena comes
 * from cudaMalloc; and NCCL requires every rank or none to pass registered buffers, which a
 * refusal on one rank only would break. Unregistered, the all-reduces copy through NCCL's buffers.
 */
static void register_arena(cuda_be *b)
{
    const char *env = getenv("GPLAN_NCCL_REGISTER");
    char msg[256];
    if (!b->comm || !(env && *env == '1') || b->p->regions[GP_REGION_ARENA].size <= 0)
        return;
    int r = gp_cuda_comm_register(b->comm, b->rank, b->dev[GP_REGION_ARENA],
                                  (size_t)b->p->regions[GP_REGION_ARENA].size, &b->nccl_reg, msg,
                                  sizeof msg);
    fprintf(stderr, "cuda: rank %d: arena (%lld bytes) %s%s\n", b->rank,
            (long long)b->p->regions[GP_REGION_ARENA].size,
            r ? "not registered with NCCL: " : "registered with NCCL", r ? msg : "");
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
    if (init->n_ranks > 1 && (!init->comm || init->rank < 0 || init->rank >= init->n_ranks ||
                              init->n_ranks != p->n_devices)) {
        snprintf(err, err_len, "cuda: rank %d of %d (plan for %d devices) without a communicator",
                 init->rank, init->n_ranks, p->n_devices);
        return -1;
    }
    if (init->n_ranks > 1 && gp_cuda_comm_device(init->comm, init->rank) != init->device) {
        snprintf(err, err_len, "cuda: rank %d runs on device %d, its communicator on device %d",
                 init->rank, init->device, gp_cuda_comm_device(init->comm, init->rank));
        return -1;
    }
    cuda_be *b = calloc(1, sizeof *b);
    if (!b) {
        snprintf(err, err_len, "cuda: out of memory");
        return -1;
    }
    b->p = p;
    b->argmax_copy = -1;
    b->slot = init->slot;
    b->weight_data = init->weight_data;
    b->device = init->device;
    b->n_ranks = init->n_ranks > 1 ? init->n_ranks : 1;
    b->rank = b->n_ranks > 1 ? init->rank : 0;
    b->comm = b->n_ranks > 1 ? init->comm : NULL;
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

    /* One allocation per region, aligned up to the plan's alignment (cudaMalloc gives 256); the
     * io region's has the sizes' header in front ("Copies"). */
    b->io_hdr = (sizeof(int64_t) * (size_t)p->n_syms + 255) / 256 * 256;
    for (int r = 0; r < GP_REGION_COUNT; r++) {
        if (r == GP_REGION_EXTRAS)
            continue;
        int64_t al = p->regions[r].alignment > 256 ? p->regions[r].alignment : 0;
        size_t hdr = r == GP_REGION_IO ? b->io_hdr : 0;
        CU_TRY(be_malloc(b, &b->raw[r], (size_t)(p->regions[r].size + al) + hdr));
        uintptr_t a = (uintptr_t)b->raw[r] + hdr;
        b->dev[r] = (unsigned char *)(al ? (a + (uintptr_t)al - 1) & ~((uintptr_t)al - 1) : a);
    }
    /* The arena too starts zeroed, so rows a padded launch reads are finite at first. */
    CU_TRY(cudaMemset(b->dev[GP_REGION_STATE], 0, (size_t)p->regions[GP_REGION_STATE].size));
    CU_TRY(cudaMemset(b->dev[GP_REGION_ARENA], 0, (size_t)p->regions[GP_REGION_ARENA].size));
    CU_TRY(cudaMemset(b->dev[GP_REGION_IO], 0, (size_t)p->regions[GP_REGION_IO].size));
    /* The param block: split-K counters (zero between launches), rope tables. */
    size_t psz = param_tabs_at() + sizeof(float) * GP_CU_ROPE_TABS * ROPE_TAB_FLOATS;
    CU_TRY(be_malloc(b, &b->dparam, psz));
    CU_TRY(cudaMemset(b->dparam, 0, psz));
    /* Inputs and outputs move straight from and to the session's io block, page-locked here. */
    size_t io_size = (size_t)p->regions[GP_REGION_IO].size;
    if (io_size && cudaHostRegister(b->host_io, io_size, cudaHostRegisterDefault) == cudaSuccess) {
        b->io_registered = 1;
    } else {
        cudaGetLastError();
        CU_TRY(be_host_alloc(b, (void **)&b->pin_io, io_size));
    }

    read_switches(b);
    if (plan_copies(b, err, err_len))
        goto fail;
    CU_TRY(be_host_alloc(b, (void **)&b->pin_in, b->io_hdr + (size_t)b->in_span));
    memset(b->pin_in, 0, b->io_hdr + (size_t)b->in_span);
    b->pin_syms = (int64_t *)(b->pin_in + b->io_hdr) - p->n_syms;

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
    /* Readers of each tensor; conts that need no copy; then every node's descriptors. */
    int *uses = calloc((size_t)p->n_tensors + 1, sizeof *uses);
    b->alias = calloc((size_t)p->n_tensors + 1, sizeof *b->alias);
    if (!uses || !b->alias) {
        free(uses);
        snprintf(err, err_len, "cuda: out of memory");
        goto fail;
    }
    for (int i = 0; i < p->n_nodes; i++)
        for (int j = 0; j < p->nodes[i].n_inputs; j++)
            uses[p->nodes[i].inputs[j]]++;
    for (int i = 0; i < p->n_nodes; i++)
        b->nodes[i].pair = -1;
    if (!(b->disable & FUSE_PLANS))
        plan_cont_elision(b, uses);
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

    if (!(b->disable & FUSE_PLANS)) {
        plan_epilogues(b, uses);
        plan_ar_norms(b);
        plan_prenorms(b, uses);
    }
    if (!(b->disable & FUSE_FOLD) && plan_folds(b, err, err_len)) {
        free(uses);
        goto fail;
    }
    if (!(b->disable & FUSE_PLANS)) {
        plan_store_pairs(b);
        plan_matvec_groups(b, uses);
    }
    if (!(b->disable & FUSE_ATTN))
        plan_decode_attention(b, uses);
    if (!(b->disable & FUSE_PLANS))
        plan_embed_add(b, uses);
    plan_argmax_copy(b);
    plan_rope_tables(b, (float *)((char *)b->dparam + param_tabs_at()));
    plan_accumulate(b, uses);
    plan_head_pos(b);
    plan_trig(b);
    free(uses);
    if (check_all_reduces(b, err, err_len))
        goto fail;
    register_arena(b);

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
    b->kc.d_syms = (const int64_t *)b->dev[GP_REGION_IO] - p->n_syms;
    b->kc.h_syms = b->launch;
    b->kc.n_syms = p->n_syms;
    b->kc.d_counters = (unsigned *)b->dparam;
    b->kc.n_counters = GP_CU_COUNTERS;
    int dev = 0, nsm = 0;
    if (cudaGetDevice(&dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess)
        b->kc.n_sm = nsm;
    /* Nothing writes the weights during evals: the matvecs load them before the PDL wait. */
    b->kc.const_lo = b->dev[GP_REGION_WEIGHTS];
    b->kc.const_hi = b->dev[GP_REGION_WEIGHTS] + p->regions[GP_REGION_WEIGHTS].size;

    /* Warm-up: one eager eval at the smallest and one at the largest sizes loads every kernel and
     * lets cuBLAS set itself up outside of any capture; the state is zeroed again after. Index
     * inputs may hold anything here: the kernels skip out-of-range ones. all_reduce only copies
     * (b->warming): the other ranks may not be created yet, and NCCL was warmed up with them. */
    b->warming = 1;
    /* one token, at most tokens, then with head_pos one token of the long-context attention */
    for (int w = 0; w < (b->head_pos >= 0 ? 3 : 2); w++) {
        for (int s = 0; s < p->n_syms; s++)
            b->launch[s] = b->pin_syms[s] = w == 1 ? p->syms[s].bound : 1;
        if (enqueue_eval(b, w == 2, err, err_len))
            goto fail;
        CU_TRY(cudaStreamSynchronize(b->stream));
    }
    b->warming = 0;
    CU_TRY(cudaMemset(b->dev[GP_REGION_STATE], 0, (size_t)p->regions[GP_REGION_STATE].size));

    /* Graphs: one per power-of-two bucket of the token count, captured now so that an eval only
     * replays. Plans with several symbolic dims run eagerly (launches at each eval's sizes). */
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
    int64_t launches1 = -1;
    b->buckets = bucket_safe(p);
    if (!(env && *env == '0') && p->n_syms <= 1) {
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
                    launches1 = b->kc.launches - l0;
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
    env = getenv("GPLAN_CUDA_VERBOSE");
    if (env && *env == '1') {
        /* What the fusions did, once at creation (for benchmarks). */
        int elided = 0, pairs = 0, norms = 0, epis = 0, groups = 0, arnorms = 0;
        int attns = 0, embadds = 0, qkvs = 0;
        for (int i = 0; i < p->n_nodes; i++) {
            elided += p->nodes[i].op == GP_OP_CONT && b->nodes[i].skip;
            pairs += b->nodes[i].pair >= 0;
            norms += b->nodes[i].prenorm + b->nodes[i].grpnorm;
            epis += b->nodes[i].epi.n > 0;
            groups += b->nodes[i].grp.n > 0;
            arnorms += b->nodes[i].has_arnorm;
            attns += b->nodes[i].dec_on;
            qkvs += b->nodes[i].dec_on && b->nodes[i].dec.has_qkv;
            embadds += b->nodes[i].embadd;
        }
        fprintf(stderr, "cuda: %d nodes: %d conts elided, %d store pairs, %d norms for matvecs, "
                "%d matmul epilogues, %d matmul groups, %d norms in all-reduces, "
                "%d one-token attentions fused (%d computing their q, k and v), %d lookup adds, "
                "pdl %d; %lld launches in the one-token graph\n",
                p->n_nodes, elided, pairs, norms, epis, groups, arnorms, attns, qkvs, embadds,
                b->kc.pdl, (long long)launches1);
        if (b->kc.mv_cluster > 1) {
            fprintf(stderr, "cuda: [K, N] matvec clusters of up to %d, fitting at once:",
                    b->kc.mv_cluster);
            for (int c = 2; c <= b->kc.mv_cluster; c++)
                fprintf(stderr, " %d", b->kc.mv_cluster_fit[c]);
            fprintf(stderr, "\n");
        }
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
    double t0 = now_s();
    const gp_plan *p = b->p;
    /* Each rank's thread drives its own device. */
    CU_TRY(cudaSetDevice(b->device));
    if (b->comm && gp_cuda_comm_failed(b->comm) >= 0) {
        snprintf(err, err_len, "cuda: rank %d: the session's collectives were stopped after rank %d "
                 "failed; create a new session", b->rank, gp_cuda_comm_failed(b->comm));
        return -1;
    }
    /* This eval's sizes, from the extras records the session wrote. Every check before the launch
     * reads what every rank reads alike, so when one rank returns here, all do, and no rank is
     * left in a collective. */
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
    int long_ctx = long_now(b);
    if (g && long_ctx && b->has_long1 && g == &b->graphs[0]) {
        g = &b->long1;
        atomic_fetch_add(&long_evals, 1);
    }
    if (b->in_span)
        stage_inputs(b, g ? &g->top : b->pin_syms); /* at the sizes the copy has */
    if (g) {
        cudaError_t e = cudaGraphLaunch(g->exec, b->stream);
        if (e != cudaSuccess) {
            snprintf(err, err_len, "cuda: rank %d: cudaGraphLaunch: %s", b->rank,
                     cudaGetErrorString(e));
            goto launch_failed;
        }
    } else {
        for (int s = 0; s < p->n_syms; s++)
            b->launch[s] = b->pin_syms[s];
        if (enqueue_eval(b, long_ctx, err, err_len))
            goto launch_failed;
    }
    /* Several ranks: a wait that gives up when another rank fails (cuda/cuda_comm.h). */
    if (b->comm) {
        if (gp_cuda_comm_wait(b->comm, b->rank, b->stream, err, err_len))
            return -1;
    } else {
        CU_TRY(cudaStreamSynchronize(b->stream));
    }
    if (b->ev && p->n_syms == 1 && b->pin_syms[0] == 1) {
        for (int i = 0; i < p->n_nodes; i++) {
            float ms = 0;
            if (cudaEventElapsedTime(&ms, b->ev[i], b->ev[i + 1]) == cudaSuccess) {
                b->prof_ms[p->nodes[i].op] += ms;
                b->prof_n[p->nodes[i].op]++;
            }
        }
        b->prof_evals++;
    }
    if (!b->io_registered)
        memcpy(b->host_io, b->pin_io, (size_t)p->regions[GP_REGION_IO].size);
    if (b->rank == 0) { /* rank 0 only: the ranks' evals run at once */
        stat_seconds += now_s() - t0;
        stat_evals++;
    }
    return 0;
launch_failed:
    /* Work may be queued, collectives among it: the other ranks must not wait for this one. */
    if (b->comm)
        gp_cuda_comm_fail(b->comm, b->rank);
    cudaStreamSynchronize(b->stream);
    cudaGetLastError();
    return -1;
fail:
    return -1;
}

/* Uploads weights ids[0..n) again into their places (a LoRA adapter bound into its slots between
 * evals): the graphs keep their addresses, so nothing is captured again. Ordered on the stream
 * before the next eval's work. */
static int be_reload_weights(void *ctx, const int *ids, int n, char *err, size_t err_len)
{
    cuda_be *b = ctx;
    CU_TRY(cudaSetDevice(b->device));
    for (int k = 0; k < n; k++) {
        const gp_plan_tensor *t = &b->p->tensors[ids[k]];
        size_t bytes = (size_t)(numel_at(t, NULL) * (int64_t)gp_dtype_size(t->dtype));
        CU_TRY(cudaMemcpyAsync(tensor_addr(b, t), b->weight_data[ids[k]], bytes,
                               cudaMemcpyHostToDevice, b->stream));
    }
    CU_TRY(cudaStreamSynchronize(b->stream)); /* the host bytes may change again after return */
    return 0;
fail:
    return -1;
}

static int be_reset_state(void *ctx, char *err, size_t err_len)
{
    cuda_be *b = ctx;
    CU_TRY(cudaSetDevice(b->device));
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
    cudaSetDevice(b->device);
    if (b->stream)
        cudaStreamSynchronize(b->stream);
    gp_cuda_comm_deregister(b->comm, b->rank, b->nccl_reg);
    if (b->ev && b->prof_evals) {
        /* The profile is what GPLAN_CUDA_PROFILE asks for: printed once, at the end. */
        fprintf(stderr, "cuda profile: GPU ms per one-token eval, by op (%lld evals)\n",
                (long long)b->prof_evals);
        for (int op = 0; op < GP_OP_COUNT; op++)
            if (b->prof_n[op])
                fprintf(stderr, "cuda profile: %-12s %8.4f ms  %5lld nodes/eval\n",
                        gp_op_get((gp_op)op)->name, b->prof_ms[op] / (double)b->prof_evals,
                        (long long)(b->prof_n[op] / b->prof_evals));
    }
    for (int i = 0; b->ev && i <= b->p->n_nodes; i++)
        cudaEventDestroy(b->ev[i]);
    free(b->ev);
    for (int i = 0; i < b->n_graphs; i++)
        cudaGraphExecDestroy(b->graphs[i].exec);
    if (b->has_long1)
        cudaGraphExecDestroy(b->long1.exec);
    if (b->blas)
        cublasDestroy(b->blas);
    if (b->io_registered)
        cudaHostUnregister(b->host_io);
    cudaFreeHost(b->pin_io);
    cudaFreeHost(b->pin_in);
    free(b->io_in);
    free(b->io_out);
    cudaFree(b->dparam);
    cudaFree(b->dfold);
    for (int r = 0; r < GP_REGION_COUNT; r++)
        cudaFree(b->raw[r]);
    if (b->stream)
        cudaStreamDestroy(b->stream);
    cudaGetLastError();
    free(b->nodes);
    free(b->alias);
    free(b->launch);
    free(b->sym_tensor);
    free(b->sym_dim);
    free(b);
}

const gp_backend_ops gp_backend_cuda = {
    "cuda", be_create, be_eval, be_reset_state, be_alloc_count, be_destroy,
    gp_cuda_comm_new, gp_cuda_comm_free, be_reload_weights,
};
