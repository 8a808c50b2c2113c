/* The all-reduces of tensor-parallel CUDA sessions (cuda/cuda_comm.h): the NCCL communicators of
 * one session's devices, created together in this process (ncclCommInitAll), the P2P one-shot
 * kernel's buffers (cuda_allreduce.cu), both warmed up at creation, and the failure protocol that
 * keeps one rank's error from leaving the others in a collective forever.
 *
 * P2P is set up when every pair of the n <= GP_AR_P2P_RANKS devices can access each other and
 * GPLAN_ALLREDUCE is not "nccl"; all-reduces of at most GP_AR_P2P_MAX bytes then take it. It owns,
 * allocated once here and freed in gp_cuda_comm_free: per rank on its device a receive buffer
 * [n][2][GP_AR_P2P_MAX], flags [n][GP_AR_BLOCKS] and epoch counters [GP_AR_BLOCKS]; one
 * host-mapped pinned block [1 + n] shared by the ranks (abort word, then each rank's status).
 * Failures: gp_cuda_comm_fail sets the abort word, which ends the kernels' waits on every device;
 * a kernel that waited past its time limit sets it too, and writes its status, which
 * gp_cuda_comm_wait turns into an error. NCCL's all-reduces are stopped by revoking or aborting
 * the communicator (stop_rank). */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_comm.h"
#include "plan/plan.h"

#if GPLAN_HAVE_NCCL

#include <dlfcn.h>
#include <nccl.h>

struct gp_cuda_comm {
    int n;
    int devices[GP_PLAN_MAX_DEVICES]; /* [n] rank r's device ordinal */
    ncclComm_t comms[GP_PLAN_MAX_DEVICES]; /* [n] */
    int stopped[GP_PLAN_MAX_DEVICES]; /* [n] 1: revoked, 2: aborted (freed); each written only by
                                         its rank's thread, and by comm_free after every eval */
    int failed_rank;                  /* atomic: the first rank that failed, or -1 */
    /* The P2P all-reduce; p2p 0: NCCL serves every all-reduce. */
    int p2p;
    int pdl;                          /* its launches may overlap the kernel before them
                                         (GPLAN_CUDA_PDL) */
    double timeout_s;                 /* its wait for a peer */
    unsigned char *recv[GP_AR_P2P_RANKS];       /* [n] on rank r's device: [n][2][GP_AR_P2P_MAX] */
    unsigned long long *flags[GP_AR_P2P_RANKS]; /* [n] on rank r's device: [n][GP_AR_BLOCKS] */
    unsigned long long *seq[GP_AR_P2P_RANKS];   /* [n] on rank r's device: [GP_AR_BLOCKS] */
    unsigned *ctrl;                   /* host-mapped pinned [1 + n]: abort (0, or 1 + the rank that
                                         stopped the all-reduces), then rank r's status word */
    gp_cuda_ar_peers peers[GP_AR_P2P_RANKS]; /* [n] rank r's kernel parameters */
};

/* Element counts of the warm-up all-reduces: sizes that pick each protocol NCCL may choose for
 * the plans' all-reduces (one row to a long prompt's activations), so every kernel is loaded. */
static const size_t warm_counts[] = {1, 4096, (size_t)1 << 18, (size_t)1 << 21};
enum { WARM_MAX = 1 << 21 };

static void nccl_msg(char *err, size_t err_len, const char *what, ncclResult_t r, ncclComm_t c)
{
    const char *last = ncclGetLastError(c);
    snprintf(err, err_len, "cuda: %s: %s%s%s", what, ncclGetErrorString(r),
             last && *last ? ": " : "", last && *last ? last : "");
}

int gp_cuda_comm_dtype_ok(gp_dtype dt)
{
    return dt == GP_F32 || dt == GP_F16 || dt == GP_BF16;
}

int gp_cuda_comm_device(const gp_cuda_comm *c, int rank)
{
    return rank >= 0 && rank < c->n ? c->devices[rank] : -1;
}

/* Waits for every rank's stream st[r] on its device; the first error. */
static cudaError_t sync_ranks(const gp_cuda_comm *c, cudaStream_t *st)
{
    cudaError_t e = cudaSuccess;
    for (int r = 0; r < c->n && e == cudaSuccess; r++) {
        e = cudaSetDevice(c->devices[r]);
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(st[r]);
    }
    return e;
}

/* What a warm-up uses on each rank: a non-blocking stream and two zeroed device buffers. */
typedef struct {
    cudaStream_t st[GP_PLAN_MAX_DEVICES];
    void *a[GP_PLAN_MAX_DEVICES], *b[GP_PLAN_MAX_DEVICES];
} scratch;

/* Makes s's streams and buffers of `bytes` each (b only when two) on every rank's device; s must be
 * zeroed before. What was made is freed by scratch_free, whatever this returns. */
static cudaError_t scratch_new(const gp_cuda_comm *c, scratch *s, size_t bytes, int two)
{
    cudaError_t e = cudaSuccess;
    for (int r = 0; r < c->n && e == cudaSuccess; r++) {
        e = cudaSetDevice(c->devices[r]);
        if (e == cudaSuccess)
            e = cudaStreamCreateWithFlags(&s->st[r], cudaStreamNonBlocking);
        if (e == cudaSuccess)
            e = cudaMalloc(&s->a[r], bytes);
        if (e == cudaSuccess)
            e = cudaMemset(s->a[r], 0, bytes);
        if (e == cudaSuccess && two)
            e = cudaMalloc(&s->b[r], bytes);
        if (e == cudaSuccess && two)
            e = cudaMemset(s->b[r], 0, bytes);
    }
    return e;
}

static void scratch_free(const gp_cuda_comm *c, scratch *s)
{
    for (int r = 0; r < c->n; r++) {
        if (cudaSetDevice(c->devices[r]) != cudaSuccess)
            continue;
        cudaFree(s->a[r]);
        cudaFree(s->b[r]);
        if (s->st[r])
            cudaStreamDestroy(s->st[r]);
    }
    cudaGetLastError();
}

/* Every rank sums warm_counts[k] floats (buffers of WARM_MAX each), in one group from this thread;
 * the one-element sum of 1.0 from every rank must come back as n. */
static int warm_up(gp_cuda_comm *c, char *err, size_t err_len)
{
    scratch s;
    memset(&s, 0, sizeof s);
    int rc = -1;
    const float one = 1.0f;
    cudaError_t e = scratch_new(c, &s, sizeof(float) * WARM_MAX, 0);
    for (int r = 0; r < c->n && e == cudaSuccess; r++) {
        e = cudaSetDevice(c->devices[r]);
        if (e == cudaSuccess)
            e = cudaMemcpy(s.a[r], &one, sizeof one, cudaMemcpyHostToDevice);
    }
    if (e != cudaSuccess) {
        snprintf(err, err_len, "cuda: NCCL warm-up buffers: %s", cudaGetErrorString(e));
        goto done;
    }
    for (size_t k = 0; k < sizeof warm_counts / sizeof warm_counts[0]; k++) {
        ncclResult_t nr = ncclGroupStart();
        for (int r = 0; r < c->n && nr == ncclSuccess; r++)
            nr = ncclAllReduce(s.a[r], s.a[r], warm_counts[k], ncclFloat, ncclSum, c->comms[r],
                               s.st[r]);
        ncclResult_t ne = ncclGroupEnd();
        if (nr != ncclSuccess || ne != ncclSuccess) {
            nccl_msg(err, err_len, "NCCL warm-up all-reduce", nr != ncclSuccess ? nr : ne,
                     c->comms[0]);
            goto done;
        }
        if (k == 0) {
            /* Checked before the larger sums overwrite element 0. */
            for (int r = 0; r < c->n && e == cudaSuccess; r++) {
                float got = 0;
                e = cudaSetDevice(c->devices[r]);
                if (e == cudaSuccess)
                    e = cudaStreamSynchronize(s.st[r]);
                if (e == cudaSuccess)
                    e = cudaMemcpy(&got, s.a[r], sizeof got, cudaMemcpyDeviceToHost);
                if (e == cudaSuccess && got != (float)c->n) {
                    snprintf(err, err_len, "cuda: NCCL warm-up: rank %d summed %g, expected %d", r,
                             (double)got, c->n);
                    goto done;
                }
            }
        }
    }
    if (e == cudaSuccess)
        e = sync_ranks(c, s.st);
    if (e != cudaSuccess) {
        snprintf(err, err_len, "cuda: NCCL warm-up: %s", cudaGetErrorString(e));
        goto done;
    }
    rc = 0;
done:
    scratch_free(c, &s);
    return rc;
}

/* The P2P switches from the environment (cuda/cuda_comm.h): 0, or -1 with err for a bad value. */
static int read_p2p_env(int *want, unsigned *block_bytes, double *timeout_s, char *err,
                        size_t err_len)
{
    const char *m = getenv("GPLAN_ALLREDUCE"), *bb = getenv("GPLAN_ALLREDUCE_BLOCK_BYTES"),
               *to = getenv("GPLAN_ALLREDUCE_TIMEOUT_MS");
    *want = !(m && !strcmp(m, "nccl"));
    if (m && *m && strcmp(m, "nccl") && strcmp(m, "p2p")) {
        snprintf(err, err_len, "cuda: GPLAN_ALLREDUCE=%s: expected p2p or nccl", m);
        return -1;
    }
    /* 4 KiB per block: the size that measured best for small and mid-sized messages
     * (bench/allreduce_bench, bench/multi-gpu-notes.md). */
    *block_bytes = 4096;
    if (bb && *bb) {
        char *end = NULL;
        unsigned long v = strtoul(bb, &end, 10);
        if (*end || v < 512 || v > GP_AR_SLOT || (v & (v - 1))) {
            snprintf(err, err_len, "cuda: GPLAN_ALLREDUCE_BLOCK_BYTES=%s: expected a power of two "
                     "in [512, %d]", bb, GP_AR_SLOT);
            return -1;
        }
        *block_bytes = (unsigned)v;
    }
    *timeout_s = 10.0;
    if (to && *to) {
        char *end = NULL;
        long v = strtol(to, &end, 10);
        if (*end || v < 1 || v > 3600L * 1000) {
            snprintf(err, err_len, "cuda: GPLAN_ALLREDUCE_TIMEOUT_MS=%s: expected 1 to 3600000",
                     to);
            return -1;
        }
        *timeout_s = (double)v / 1000.0;
    }
    return 0;
}

/* 1 when every pair of the ranks' devices can access each other, with peer access now enabled
 * both ways; 0 when some pair cannot (P2P is then not used). */
static int enable_peers(const gp_cuda_comm *c)
{
    for (int r = 0; r < c->n; r++)
        for (int q = 0; q < c->n; q++) {
            int ok = 0;
            if (q != r && (cudaDeviceCanAccessPeer(&ok, c->devices[r], c->devices[q]) != cudaSuccess
                           || !ok)) {
                cudaGetLastError();
                return 0;
            }
        }
    for (int r = 0; r < c->n; r++) {
        if (cudaSetDevice(c->devices[r]) != cudaSuccess)
            return 0;
        for (int q = 0; q < c->n; q++) {
            cudaError_t e = q == r ? cudaSuccess : cudaDeviceEnablePeerAccess(c->devices[q], 0);
            if (e == cudaErrorPeerAccessAlreadyEnabled) /* NCCL, or another session, did it */
                cudaGetLastError();
            else if (e != cudaSuccess) {
                cudaGetLastError();
                return 0;
            }
        }
    }
    return 1;
}

/* Every rank sums GP_AR_P2P_MAX bytes of f32 r + 1 over P2P, from this thread (the launches do not
 * wait), after one f16 and one bf16 sum that only load their kernels' first launch; each rank must
 * get n (n + 1) / 2 everywhere and report no timeout. */
static int p2p_warm_up(gp_cuda_comm *c, char *err, size_t err_len)
{
    enum { COUNT = GP_AR_P2P_MAX / sizeof(float) };
    scratch s; /* a: each rank's term, b: its sum */
    memset(&s, 0, sizeof s);
    float *host = malloc(GP_AR_P2P_MAX);
    int rc = -1;
    cudaError_t e = host ? scratch_new(c, &s, GP_AR_P2P_MAX, 1) : cudaErrorMemoryAllocation;
    for (int r = 0; r < c->n && e == cudaSuccess; r++) {
        for (size_t i = 0; i < COUNT; i++)
            host[i] = (float)(r + 1);
        e = cudaSetDevice(c->devices[r]);
        if (e == cudaSuccess)
            e = cudaMemcpy(s.a[r], host, GP_AR_P2P_MAX, cudaMemcpyHostToDevice);
    }
    const gp_dtype dts[3] = {GP_F16, GP_BF16, GP_F32};
    for (int k = 0; k < 3 && e == cudaSuccess; k++)
        for (int r = 0; r < c->n && e == cudaSuccess; r++) {
            e = cudaSetDevice(c->devices[r]);
            if (e == cudaSuccess)
                e = (cudaError_t)gp_cuda_ar_launch(&c->peers[r], s.a[r], s.b[r],
                                                   dts[k] == GP_F32 ? COUNT : 1, dts[k], s.st[r],
                                                   0, NULL, 0);
        }
    if (e == cudaSuccess)
        e = sync_ranks(c, s.st);
    if (e != cudaSuccess) {
        snprintf(err, err_len, "cuda: P2P all-reduce warm-up: %s", cudaGetErrorString(e));
        goto done;
    }
    const float want = (float)(c->n * (c->n + 1) / 2);
    for (int r = 0; r < c->n; r++) {
        size_t bad = 0;
        unsigned status = __atomic_load_n(&c->ctrl[1 + r], __ATOMIC_ACQUIRE);
        e = cudaSetDevice(c->devices[r]);
        if (e == cudaSuccess)
            e = cudaMemcpy(host, s.b[r], GP_AR_P2P_MAX, cudaMemcpyDeviceToHost);
        for (size_t i = 0; i < COUNT && e == cudaSuccess; i++)
            bad += host[i] != want;
        if (e != cudaSuccess || status || bad) {
            snprintf(err, err_len, "cuda: P2P all-reduce warm-up, rank %d: %s (status %u, %zu of "
                     "%d sums wrong); GPLAN_ALLREDUCE=nccl avoids it", r,
                     e != cudaSuccess ? cudaGetErrorString(e) : "wrong result", status, bad,
                     (int)COUNT);
            goto done;
        }
    }
    rc = 0;
done:
    scratch_free(c, &s);
    free(host);
    return rc;
}

/* Sets up the P2P all-reduce where `want` (the environment) and the devices allow (else c->p2p
 * stays 0), block_bytes per block: 0, or -1 with err (what comm_free frees is recorded in c as it
 * is allocated). */
static int setup_p2p(gp_cuda_comm *c, int want, unsigned block_bytes, char *err, size_t err_len)
{
    const char *pdl = getenv("GPLAN_CUDA_PDL");
    c->pdl = !(pdl && *pdl == '0');
    if (!want || c->n < 2 || c->n > GP_AR_P2P_RANKS || !enable_peers(c))
        return 0;
    const size_t recv_bytes = (size_t)c->n * 2 * GP_AR_P2P_MAX;
    const size_t flag_bytes = sizeof(unsigned long long) * (size_t)c->n * GP_AR_BLOCKS;
    const size_t seq_bytes = sizeof(unsigned long long) * GP_AR_BLOCKS;
    cudaError_t e = cudaHostAlloc((void **)&c->ctrl, sizeof(unsigned) * (size_t)(1 + c->n),
                                  cudaHostAllocMapped | cudaHostAllocPortable);
    if (e != cudaSuccess)
        c->ctrl = NULL;
    else
        memset(c->ctrl, 0, sizeof(unsigned) * (size_t)(1 + c->n));
    unsigned *dctrl[GP_AR_P2P_RANKS] = {0};
    for (int r = 0; r < c->n && e == cudaSuccess; r++) {
        e = cudaSetDevice(c->devices[r]);
        if (e == cudaSuccess && (e = cudaMalloc((void **)&c->recv[r], recv_bytes)) != cudaSuccess)
            c->recv[r] = NULL;
        if (e == cudaSuccess && (e = cudaMalloc((void **)&c->flags[r], flag_bytes)) != cudaSuccess)
            c->flags[r] = NULL;
        if (e == cudaSuccess && (e = cudaMalloc((void **)&c->seq[r], seq_bytes)) != cudaSuccess)
            c->seq[r] = NULL;
        if (e == cudaSuccess)
            e = cudaMemset(c->flags[r], 0, flag_bytes);
        if (e == cudaSuccess)
            e = cudaMemset(c->seq[r], 0, seq_bytes);
        if (e == cudaSuccess)
            e = cudaHostGetDevicePointer((void **)&dctrl[r], c->ctrl, 0);
        if (e == cudaSuccess)
            e = (cudaError_t)gp_cuda_ar_load();
        if (e == cudaSuccess)
            e = cudaDeviceSynchronize();
    }
    if (e != cudaSuccess) {
        snprintf(err, err_len, "cuda: P2P all-reduce buffers: %s", cudaGetErrorString(e));
        cudaGetLastError();
        return -1;
    }
    for (int r = 0; r < c->n; r++) {
        gp_cuda_ar_peers *p = &c->peers[r];
        memset(p, 0, sizeof *p);
        memcpy(p->recv, c->recv, sizeof p->recv);
        memcpy(p->flags, c->flags, sizeof p->flags);
        p->seq = c->seq[r];
        p->abort = dctrl[r];
        p->status = dctrl[r] + 1 + r;
        p->n = c->n;
        p->rank = r;
        p->block_bytes = block_bytes;
        p->timeout_ns = (unsigned long long)(c->timeout_s * 1e9);
    }
    c->p2p = 1;
    return p2p_warm_up(c, err, err_len);
}

int gp_cuda_comm_new(int n, const int *devices, void **out, char *err, size_t err_len)
{
    *out = NULL;
    if (n < 1 || n > GP_PLAN_MAX_DEVICES || !devices) {
        snprintf(err, err_len, "cuda: %d devices: outside [1, %d]", n, GP_PLAN_MAX_DEVICES);
        return -1;
    }
    int visible = 0;
    if (cudaGetDeviceCount(&visible) != cudaSuccess) {
        cudaGetLastError();
        visible = 0;
    }
    if (visible < n) {
        snprintf(err, err_len, "cuda: the plan needs %d devices, %d visible", n, visible);
        return -1;
    }
    for (int r = 0; r < n; r++) {
        if (devices[r] < 0 || devices[r] >= visible) {
            snprintf(err, err_len, "cuda: rank %d: device %d out of range (%d visible)", r,
                     devices[r], visible);
            return -1;
        }
        for (int q = 0; q < r; q++)
            if (devices[q] == devices[r]) {
                snprintf(err, err_len, "cuda: device %d given to ranks %d and %d", devices[r], q, r);
                return -1;
            }
    }
    int want_p2p = 1;
    unsigned block_bytes = 0;
    double timeout_s = 0;
    if (read_p2p_env(&want_p2p, &block_bytes, &timeout_s, err, err_len))
        return -1;
    gp_cuda_comm *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, err_len, "cuda: out of memory");
        return -1;
    }
    c->n = n;
    c->failed_rank = -1;
    c->timeout_s = timeout_s;
    memcpy(c->devices, devices, sizeof(int) * (size_t)n);
    /* Every connection at creation: a connection made lazily inside a graph capture would need
     * the other ranks to take part at that moment. NVLink SHARP (multicast) stays off unless the
     * caller asks for it: small all-reduces gain little, and it ties up the host's switches. */
    setenv("NCCL_RUNTIME_CONNECT", "0", 0);
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    int prev = 0;
    if (cudaGetDevice(&prev) != cudaSuccess)
        prev = -1;
    ncclResult_t nr = ncclCommInitAll(c->comms, n, devices);
    if (nr != ncclSuccess) {
        nccl_msg(err, err_len, "ncclCommInitAll", nr, NULL);
        free(c);
        if (prev >= 0)
            cudaSetDevice(prev);
        return -1;
    }
    int rc = warm_up(c, err, err_len);
    if (!rc)
        rc = setup_p2p(c, want_p2p, block_bytes, err, err_len);
    if (prev >= 0)
        cudaSetDevice(prev);
    if (rc) {
        gp_cuda_comm_free(c);
        return -1;
    }
    *out = c;
    return 0;
}

void gp_cuda_comm_free(void *comm)
{
    gp_cuda_comm *c = comm;
    if (!c)
        return;
    int prev = 0;
    if (cudaGetDevice(&prev) != cudaSuccess)
        prev = -1;
    if (c->ctrl) /* no P2P kernel may still wait (none should run: every eval has returned) */
        __atomic_store_n(&c->ctrl[0], (unsigned)c->n + 1, __ATOMIC_RELEASE);
    for (int r = 0; r < c->n && r < GP_AR_P2P_RANKS; r++) {
        if (!c->recv[r] && !c->flags[r] && !c->seq[r])
            continue;
        if (cudaSetDevice(c->devices[r]) != cudaSuccess)
            continue;
        cudaDeviceSynchronize();
        cudaFree(c->recv[r]);
        cudaFree(c->flags[r]);
        cudaFree(c->seq[r]);
    }
    if (c->ctrl)
        cudaFreeHost(c->ctrl);
    for (int r = 0; r < c->n; r++)
        if (c->comms[r] && c->stopped[r] != 2)
            ncclCommDestroy(c->comms[r]);
    cudaGetLastError();
    if (prev >= 0)
        cudaSetDevice(prev);
    free(c);
}

int gp_cuda_comm_uses_p2p(const gp_cuda_comm *c, size_t bytes)
{
    return c->p2p && bytes <= GP_AR_P2P_MAX;
}

int gp_cuda_comm_all_reduce(gp_cuda_comm *c, int rank, const void *in, void *out, size_t count,
                            gp_dtype dt, cudaStream_t s, char *err, size_t err_len)
{
    int done;
    return gp_cuda_comm_all_reduce_norm(c, rank, in, out, count, dt, s, NULL, 0, &done, err,
                                        err_len);
}

int gp_cuda_comm_all_reduce_norm(gp_cuda_comm *c, int rank, const void *in, void *out, size_t count,
                                 gp_dtype dt, cudaStream_t s, const gp_cuda_ar_norm *norm,
                                 int not_after, int *norm_done, char *err, size_t err_len)
{
    *norm_done = 0;
    ncclDataType_t t = dt == GP_F32 ? ncclFloat : dt == GP_F16 ? ncclHalf : ncclBfloat16;
    if (!gp_cuda_comm_dtype_ok(dt) || rank < 0 || rank >= c->n) {
        snprintf(err, err_len, "all_reduce: dtype %s or rank %d not supported", gp_dtype_name(dt),
                 rank);
        return -1;
    }
    size_t bytes = count * gp_dtype_size(dt);
    if (gp_cuda_comm_uses_p2p(c, bytes)) {
        int e = gp_cuda_ar_launch(&c->peers[rank], in, out, count, dt, s, c->pdl, norm,
                                  not_after);
        if (e != cudaSuccess) {
            cudaGetLastError();
            snprintf(err, err_len, "cuda: P2P all-reduce (rank %d, %zu bytes): %s", rank, bytes,
                     cudaGetErrorString((cudaError_t)e));
            return -1;
        }
        *norm_done = norm && gp_cuda_ar_norm_ok(norm, count, dt);
        return 0;
    }
    ncclResult_t r = ncclAllReduce(in, out, count, t, ncclSum, c->comms[rank], s);
    if (r != ncclSuccess) {
        nccl_msg(err, err_len, "ncclAllReduce", r, c->comms[rank]);
        return -1;
    }
    return 0;
}

/* Stops rank's communicator so its pending collectives return: ncclCommRevoke where this NCCL has
 * it (the communicator stays valid for ncclCommDestroy after the graphs that use it are gone),
 * else ncclCommAbort (which frees it). */
static void stop_rank(gp_cuda_comm *c, int rank)
{
    if (c->stopped[rank])
        return;
    typedef ncclResult_t (*revoke_fn)(ncclComm_t, int);
    void *f = dlsym(RTLD_DEFAULT, "ncclCommRevoke");
    revoke_fn revoke = NULL;
    memcpy(&revoke, &f, sizeof revoke);
    if (revoke && revoke(c->comms[rank], 0) == ncclSuccess) {
        c->stopped[rank] = 1;
        return;
    }
    ncclCommAbort(c->comms[rank]);
    c->stopped[rank] = 2;
}

/* Marks `who` as the first rank that failed (unless one is already) and ends every P2P wait. */
static void mark_failed(gp_cuda_comm *c, int who)
{
    int none = -1;
    __atomic_compare_exchange_n(&c->failed_rank, &none, who, 0, __ATOMIC_ACQ_REL,
                                __ATOMIC_ACQUIRE);
    unsigned zero = 0;
    if (c->ctrl)
        __atomic_compare_exchange_n(&c->ctrl[0], &zero, (unsigned)who + 1, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE);
}

void gp_cuda_comm_fail(gp_cuda_comm *c, int rank)
{
    mark_failed(c, rank);
    stop_rank(c, rank);
}

/* The P2P abort word: 0, or 1 + the rank whose failure (or kernel's time limit) set it. */
static unsigned p2p_abort(const gp_cuda_comm *c)
{
    return c->ctrl ? __atomic_load_n(&c->ctrl[0], __ATOMIC_ACQUIRE) : 0;
}

/* After rank's stream has finished: 0, or -1 with err when one of its P2P all-reduces stopped
 * waiting (its sums are garbage); the communicator is then marked failed. */
static int p2p_status(gp_cuda_comm *c, int rank, char *err, size_t err_len)
{
    unsigned st = c->ctrl ? __atomic_load_n(&c->ctrl[1 + rank], __ATOMIC_ACQUIRE) : GP_AR_OK;
    if (st == GP_AR_OK)
        return 0;
    int f = gp_cuda_comm_failed(c);
    unsigned who = p2p_abort(c);
    if ((st & 0xff) == GP_AR_TIMEOUT)
        snprintf(err, err_len,
                 "cuda: rank %d: a P2P all-reduce waited %g s for rank %u and gave up", rank,
                 c->timeout_s, st >> 8);
    else if (f >= 0)
        snprintf(err, err_len, "cuda: rank %d stopped its collectives: rank %d failed", rank, f);
    else
        snprintf(err, err_len, "cuda: rank %d stopped its collectives: rank %u's all-reduce timed "
                 "out", rank, who ? who - 1 : 0);
    gp_cuda_comm_fail(c, rank);
    return -1;
}

int gp_cuda_comm_failed(const gp_cuda_comm *c)
{
    return __atomic_load_n(&c->failed_rank, __ATOMIC_ACQUIRE);
}

int gp_cuda_comm_wait(gp_cuda_comm *c, int rank, cudaStream_t s, char *err, size_t err_len)
{
    for (unsigned i = 0;; i++) {
        cudaError_t e = cudaStreamQuery(s);
        if (e == cudaSuccess)
            return p2p_status(c, rank, err, err_len);
        if (e != cudaErrorNotReady) {
            snprintf(err, err_len, "cuda: rank %d: %s", rank, cudaGetErrorString(e));
            gp_cuda_comm_fail(c, rank);
            cudaStreamSynchronize(s);
            return -1;
        }
        int f = gp_cuda_comm_failed(c);
        unsigned who = p2p_abort(c);
        if (f < 0 && who) {
            /* A P2P kernel gave up waiting (its rank is told by its status word): NCCL's
             * collectives queued behind it may wait for a rank that is not coming. */
            mark_failed(c, (int)who - 1);
            f = gp_cuda_comm_failed(c);
        }
        if (f >= 0) {
            stop_rank(c, rank);
            cudaStreamSynchronize(s);
            cudaGetLastError();
            if (p2p_status(c, rank, err, err_len)) /* this rank's own time-out, if it was one */
                return -1;
            snprintf(err, err_len, "cuda: rank %d stopped its collectives: rank %d failed", rank, f);
            return -1;
        }
        if ((i & 1023) == 1023) {
            ncclResult_t a = ncclSuccess;
            if (ncclCommGetAsyncError(c->comms[rank], &a) == ncclSuccess && a != ncclSuccess &&
                a != ncclInProgress) {
                nccl_msg(err, err_len, "NCCL error during the eval", a, c->comms[rank]);
                gp_cuda_comm_fail(c, rank);
                cudaStreamSynchronize(s);
                cudaGetLastError();
                return -1;
            }
        }
        sched_yield();
    }
}

int gp_cuda_comm_register(gp_cuda_comm *c, int rank, void *p, size_t n, void **handle, char *err,
                          size_t err_len)
{
    *handle = NULL;
    ncclResult_t r = ncclCommRegister(c->comms[rank], p, n, handle);
    if (r != ncclSuccess) {
        *handle = NULL;
        nccl_msg(err, err_len, "ncclCommRegister", r, c->comms[rank]);
        return -1;
    }
    return 0;
}

void gp_cuda_comm_deregister(gp_cuda_comm *c, int rank, void *handle)
{
    if (c && handle && c->stopped[rank] != 2)
        ncclCommDeregister(c->comms[rank], handle);
}

#else /* no NCCL: one device only */

struct gp_cuda_comm {
    int unused;
};

int gp_cuda_comm_new(int n, const int *devices, void **out, char *err, size_t err_len)
{
    (void)devices;
    *out = NULL;
    snprintf(err, err_len, "cuda: built without NCCL (the plan needs %d devices)", n);
    return -1;
}

void gp_cuda_comm_free(void *comm)
{
    (void)comm;
}

int gp_cuda_comm_dtype_ok(gp_dtype dt)
{
    return dt == GP_F32 || dt == GP_F16 || dt == GP_BF16;
}

int gp_cuda_comm_uses_p2p(const gp_cuda_comm *c, size_t bytes)
{
    (void)c, (void)bytes;
    return 0;
}

int gp_cuda_comm_all_reduce(gp_cuda_comm *c, int rank, const void *in, void *out, size_t count,
                            gp_dtype dt, cudaStream_t s, char *err, size_t err_len)
{
    (void)c, (void)rank, (void)in, (void)out, (void)count, (void)dt, (void)s;
    snprintf(err, err_len, "cuda: built without NCCL");
    return -1;
}

int gp_cuda_comm_all_reduce_norm(gp_cuda_comm *c, int rank, const void *in, void *out, size_t count,
                                 gp_dtype dt, cudaStream_t s, const gp_cuda_ar_norm *norm,
                                 int not_after, int *norm_done, char *err, size_t err_len)
{
    (void)norm;
    *norm_done = 0;
    return gp_cuda_comm_all_reduce(c, rank, in, out, count, dt, s, err, err_len);
}

int gp_cuda_comm_wait(gp_cuda_comm *c, int rank, cudaStream_t s, char *err, size_t err_len)
{
    (void)c, (void)rank, (void)err, (void)err_len;
    return cudaStreamSynchronize(s) == cudaSuccess ? 0 : -1;
}

void gp_cuda_comm_fail(gp_cuda_comm *c, int rank)
{
    (void)c, (void)rank;
}

int gp_cuda_comm_failed(const gp_cuda_comm *c)
{
    (void)c;
    return -1;
}

int gp_cuda_comm_device(const gp_cuda_comm *c, int rank)
{
    (void)c, (void)rank;
    return -1;
}

int gp_cuda_comm_register(gp_cuda_comm *c, int rank, void *p, size_t n, void **handle, char *err,
                          size_t err_len)
{
    (void)c, (void)rank, (void)p, (void)n;
    *handle = NULL;
    snprintf(err, err_len, "cuda: built without NCCL");
    return -1;
}

void gp_cuda_comm_deregister(gp_cuda_comm *c, int rank, void *handle)
{
    (void)c, (void)rank, (void)handle;
}

#endif
