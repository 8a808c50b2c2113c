/* NCCL for tensor-parallel CUDA sessions (cuda/cuda_comm.h): the communicators of one session's
 * devices, created together in this process (ncclCommInitAll), warmed up at creation, and the
 * failure protocol that keeps one rank's error from leaving the others in a collective forever. */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_comm.h"
#include "runtime/plan.h"

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

/* Every rank sums warm_counts[k] floats (buffers of WARM_MAX each), in one group from this thread;
 * the one-element sum of 1.0 from every rank must come back as n. */
static int warm_up(gp_cuda_comm *c, char *err, size_t err_len)
{
    float *buf[GP_PLAN_MAX_DEVICES] = {0};
    cudaStream_t st[GP_PLAN_MAX_DEVICES] = {0};
    int rc = -1;
    cudaError_t e = cudaSuccess;
    const float one = 1.0f;
    for (int r = 0; r < c->n && e == cudaSuccess; r++) {
        e = cudaSetDevice(c->devices[r]);
        if (e == cudaSuccess)
            e = cudaStreamCreateWithFlags(&st[r], cudaStreamNonBlocking);
        if (e == cudaSuccess)
            e = cudaMalloc((void **)&buf[r], sizeof(float) * WARM_MAX);
        if (e == cudaSuccess)
            e = cudaMemset(buf[r], 0, sizeof(float) * WARM_MAX);
        if (e == cudaSuccess)
            e = cudaMemcpy(buf[r], &one, sizeof one, cudaMemcpyHostToDevice);
    }
    if (e != cudaSuccess) {
        snprintf(err, err_len, "cuda: NCCL warm-up buffers: %s", cudaGetErrorString(e));
        goto done;
    }
    for (size_t k = 0; k < sizeof warm_counts / sizeof warm_counts[0]; k++) {
        ncclResult_t nr = ncclGroupStart();
        for (int r = 0; r < c->n && nr == ncclSuccess; r++)
            nr = ncclAllReduce(buf[r], buf[r], warm_counts[k], ncclFloat, ncclSum, c->comms[r],
                               st[r]);
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
                    e = cudaStreamSynchronize(st[r]);
                if (e == cudaSuccess)
                    e = cudaMemcpy(&got, buf[r], sizeof got, cudaMemcpyDeviceToHost);
                if (e == cudaSuccess && got != (float)c->n) {
                    snprintf(err, err_len, "cuda: NCCL warm-up: rank %d summed %g, expected %d", r,
                             (double)got, c->n);
                    goto done;
                }
            }
        }
    }
    for (int r = 0; r < c->n && e == cudaSuccess; r++) {
        e = cudaSetDevice(c->devices[r]);
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(st[r]);
    }
    if (e != cudaSuccess) {
        snprintf(err, err_len, "cuda: NCCL warm-up: %s", cudaGetErrorString(e));
        goto done;
    }
    rc = 0;
done:
    for (int r = 0; r < c->n; r++) {
        if (cudaSetDevice(c->devices[r]) != cudaSuccess)
            continue;
        if (buf[r])
            cudaFree(buf[r]);
        if (st[r])
            cudaStreamDestroy(st[r]);
    }
    cudaGetLastError();
    return rc;
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
    gp_cuda_comm *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, err_len, "cuda: out of memory");
        return -1;
    }
    c->n = n;
    c->failed_rank = -1;
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
    for (int r = 0; r < c->n; r++)
        if (c->comms[r] && c->stopped[r] != 2)
            ncclCommDestroy(c->comms[r]);
    free(c);
}

int gp_cuda_comm_all_reduce(gp_cuda_comm *c, int rank, const void *in, void *out, size_t count,
                            gp_dtype dt, cudaStream_t s, char *err, size_t err_len)
{
    ncclDataType_t t = dt == GP_F32 ? ncclFloat : dt == GP_F16 ? ncclHalf : ncclBfloat16;
    if (!gp_cuda_comm_dtype_ok(dt) || rank < 0 || rank >= c->n) {
        snprintf(err, err_len, "all_reduce: dtype %s or rank %d not supported", gp_dtype_name(dt),
                 rank);
        return -1;
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

void gp_cuda_comm_fail(gp_cuda_comm *c, int rank)
{
    int none = -1;
    __atomic_compare_exchange_n(&c->failed_rank, &none, rank, 0, __ATOMIC_ACQ_REL,
                                __ATOMIC_ACQUIRE);
    stop_rank(c, rank);
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
            return 0;
        if (e != cudaErrorNotReady) {
            snprintf(err, err_len, "cuda: rank %d: %s", rank, cudaGetErrorString(e));
            gp_cuda_comm_fail(c, rank);
            cudaStreamSynchronize(s);
            return -1;
        }
        int f = gp_cuda_comm_failed(c);
        if (f >= 0) {
            stop_rank(c, rank);
            cudaStreamSynchronize(s);
            cudaGetLastError();
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

int gp_cuda_comm_all_reduce(gp_cuda_comm *c, int rank, const void *in, void *out, size_t count,
                            gp_dtype dt, cudaStream_t s, char *err, size_t err_len)
{
    (void)c, (void)rank, (void)in, (void)out, (void)count, (void)dt, (void)s;
    snprintf(err, err_len, "cuda: built without NCCL");
    return -1;
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
