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
#include <stdlib.h>

#include "cuda/cuda_backend.h"
#include "cuda/cuda_be.h"

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

/* The switches read from the environment at creation (docs/cuda.md, "Switches"); the defaults
 * are what measured best (bench/gpu-notes.md). */
static void read_switches(cuda_be *b)
{
    static const char *const names[] = {"attnfuse", "qkvatt", "tiles", "tensor", "atomic",
                                        "fold", "accum", "atttyped", "kctyped", "optyped",
                                        "copies", "atthead", "lora"};
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
     * can (it pays for heads of 64, not of 128). */
    b->kc.att_cluster_small = gp_cuda_attention_cluster_ok(16) ? 16 : 0;
    /* [K, N] matvecs combining their splits in clusters of up to 16 where the device can. */
    (void)gp_cuda_matvec_cluster_ok(16, b->kc.mv_cluster_fit); /* fit[C] > 0: C is taken */
    b->kc.mv_cluster = b->kc.mv_cluster_fit[16] > 0 ? 16 : 0;
    b->kc.clusters = b->kc.mv_cluster_fit[8] > 0;
    /* Those adding into a residual in place with atomics ("atomic"): at most 16 splits, 8 for
     * rows of N <= 1024 (GPT-2 117M's c_proj and proj), where 8 measured faster. */
    b->kc.mv_add = b->disable & FUSE_ATOMIC ? 0 : 16;
    b->kc.mv_add_narrow = 8;
    b->kc.kv_prefetch = 1;
    b->kc.kv_regs = 1;
    /* Late triggers: the norm's, and the attention's on one device only (on two it is
     * slower). */
    b->kc.late = GP_LATE_NORM | (b->n_ranks == 1 ? GP_LATE_ATT : 0);
    /* Early triggers for products past 8 MiB of weights: they pay for large products (GPT-2
     * 1558M's) and cost small ones (117M's, all under 8 MiB). GPLAN_CUDA_TRIG=n MiB, or "none". */
    const char *tg = getenv("GPLAN_CUDA_TRIG");
    b->trig_bytes = !tg ? (int64_t)8 << 20 : !strcmp(tg, "none") ? -1 : (int64_t)atoi(tg) << 20;
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

/* What the CPU computes and the CUDA kernels do not (docs/moe.md, gpt-oss): rope's YaRN
 * scaling, attention's sinks, moe's clamped SwiGLU and expert biases. Refused, never computed
 * as something else. */
static int check_cpu_only(const gp_plan *p, char *err, size_t err_len)
{
    for (int i = 0; i < p->n_nodes; i++) {
        const gp_plan_node *nd = &p->nodes[i];
        const char *what = NULL;
        if (nd->op == GP_OP_ROPE && nd->attrs.i[GP_ROPE_SCALING] == GP_ROPE_YARN)
            what = "rope's yarn scaling";
        else if (nd->op == GP_OP_ATTENTION && nd->attrs.i[GP_ATTENTION_SINKS])
            what = "attention's sinks";
        else if (nd->op == GP_OP_MOE && nd->attrs.i[GP_MOE_ACT] != GP_MOE_SILU)
            what = "moe's act other than silu";
        else if (nd->op == GP_OP_MOE && nd->n_inputs > 5)
            what = "moe's expert biases";
        if (what) {
            snprintf(err, err_len, "cuda: node %d (%s -> %s, line %d): %s is not supported on "
                     "CUDA yet (the CPU backend runs it)", i, gp_op_get(nd->op)->name,
                     p->tensors[nd->output].name, nd->line, what);
            return -1;
        }
    }
    return 0;
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
    if (check_cpu_only(p, err, err_len))
        return -1;
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
    if (gp_cuda_be_plan_copies(b, err, err_len))
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
        size_t n = gp_dtype_row_bytes(t->dtype, numel_at(t, NULL)); /* quantized: the blocks */
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
    if (gp_cuda_be_plan(b, err, err_len))
        goto fail;
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

    int64_t launches1 = -1;
    if (gp_cuda_be_graphs(b, &launches1, err, err_len))
        goto fail;
    const char *env = getenv("GPLAN_CUDA_VERBOSE");
    if (env && *env == '1') {
        /* What the fusions did, once at creation (for benchmarks). */
        int elided = 0, pairs = 0, norms = 0, epis = 0, groups = 0, arnorms = 0;
        int attns = 0, embadds = 0, qkvs = 0, accs = 0;
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
            accs += b->nodes[i].acc;
        }
        fprintf(stderr, "cuda: %d nodes: %d conts elided, %d store pairs, %d norms for matvecs, "
                "%d matmul epilogues (%d adding into zeroed outputs), %d matmul groups, "
                "%d norms in all-reduces, "
                "%d one-token attentions fused (%d computing their q, k and v), %d lookup adds, "
                "%d LoRA branches merged, pdl %d; %lld launches in the one-token graph\n",
                p->n_nodes, elided, pairs, norms, epis, accs, groups, arnorms, attns, qkvs, embadds,
                b->n_lora, b->kc.pdl, (long long)launches1);
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

/* Uploads weights ids[0..n) again into their places (a LoRA adapter bound into its slots between
 * evals), and merges the branches reading them into their products again: the graphs keep their
 * addresses, so nothing is captured again. Ordered on the stream before the next eval's work. */
static int be_reload_weights(void *ctx, const int *ids, int n, char *err, size_t err_len)
{
    cuda_be *b = ctx;
    CU_TRY(cudaSetDevice(b->device));
    for (int k = 0; k < n; k++) {
        const gp_plan_tensor *t = &b->p->tensors[ids[k]];
        size_t bytes = gp_dtype_row_bytes(t->dtype, numel_at(t, NULL));
        CU_TRY(cudaMemcpyAsync(tensor_addr(b, t), b->weight_data[ids[k]], bytes,
                               cudaMemcpyHostToDevice, b->stream));
    }
    /* A new adapter's branches merged into their products' weights again (plan_lora). */
    if (gp_cuda_be_lora_remerge(b, ids, n, err, err_len))
        return -1;
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
    free(b->lora);
    free(b->alias);
    free(b->launch);
    free(b->sym_tensor);
    free(b->sym_dim);
    free(b);
}

const gp_backend_ops gp_backend_cuda = {
    "cuda", be_create, gp_cuda_be_eval, be_reset_state, be_alloc_count, be_destroy,
    gp_cuda_comm_new, gp_cuda_comm_free, be_reload_weights,
};
