/* Tests of tensor parallelism on CUDA (suite "cuda_tp"): all-reduces (the P2P kernel and NCCL) from
 * one thread per device inside graph captures, replayed, and their failures; GPT-2 and Llama
 * compiled for 1 and 2 devices giving the same logits (same random weights) with no allocation
 * during evals. With fewer than 2 GPUs, or a build
 * without NCCL, the suite registers no test and says so: skipped, not passed. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>
#include <cuda_runtime_api.h>

#include "cuda/cuda_comm.h"
#include "cuda/cuda_kernels.h"
#include "dsl/dsl.h"
#include "planner/planner.h"
#include "runtime/backend.h"
#include "ir/f16.h"
#include "gplan/gplan.h"
#include "tests/testmodel.h"
#include "tests/testutil.h"

/* ---- the communicator alone: two ranks, two threads ---- */

/* Element counts per dtype (es bytes each): one element, 3000 (not a multiple of any chunk size),
 * the largest P2P all-reduce (GP_AR_P2P_MAX bytes) and one element past it (NCCL). */
static size_t test_count(int k, size_t es)
{
    const size_t c[4] = {1, 3000, GP_AR_P2P_MAX / es, GP_AR_P2P_MAX / es + 1};
    return c[k];
}
enum { N_COUNTS = 4 };

typedef struct {
    gp_cuda_comm *comm;
    int rank;
    gp_dtype dt;
    size_t count;
    int fail_before_launch; /* the failure test: this rank fails instead of launching */
    int stay_away;          /* the timeout test: this rank neither launches nor fails */
    int rc;
    char err[256];
    float *got_in, *got_out; /* [count] the in-place and out-of-place sums, read back */
} rank_job;

static void put(void *p, gp_dtype dt, size_t i, float v)
{
    if (dt == GP_F32) {
        ((float *)p)[i] = v;
    } else {
        uint16_t h = dt == GP_F16 ? gp_f32_to_f16(v) : gp_f32_to_bf16(v);
        ((uint16_t *)p)[i] = h;
    }
}

static float get(const void *p, gp_dtype dt, size_t i)
{
    if (dt == GP_F32)
        return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return dt == GP_F16 ? gp_f16_to_f32(h) : gp_bf16_to_f32(h);
}

/* Rank r's term of element i: small integers, exact in every dtype and in their sums. */
static float term(int r, size_t i)
{
    return (float)((int)(i % 17) - 8) * (float)(r + 1);
}

/* GPLAN_ALLREDUCE for the next comm_new: "nccl", or NULL (the default: P2P where possible). */
static void set_mode(const char *mode)
{
    if (mode)
        setenv("GPLAN_ALLREDUCE", mode, 1);
    else
        unsetenv("GPLAN_ALLREDUCE");
}

/* A communicator over devices 0 and 1 in `mode`, or NULL (reported). */
static gp_cuda_comm *new_comm(const char *mode)
{
    const int devs[2] = {0, 1};
    void *comm = NULL;
    char err[512];
    set_mode(mode);
    int rc = gp_cuda_comm_new(2, devs, &comm, err, sizeof err);
    set_mode(NULL);
    if (rc)
        fprintf(stderr, "\n  comm_new (%s): %s\n", mode ? mode : "default", err);
    return rc ? NULL : comm;
}

/* 1 when devices 0 and 1 can access each other's memory: the default mode must then use P2P. */
static int peers_ok(void)
{
    int a = 0, b = 0;
    if (cudaDeviceCanAccessPeer(&a, 0, 1) != cudaSuccess ||
        cudaDeviceCanAccessPeer(&b, 1, 0) != cudaSuccess)
        cudaGetLastError();
    return a && b;
}

/* One rank: x [count] and y [count] on its device; a graph that sums x into y and x in place,
 * captured thread-locally as the backend does, launched once, waited for with gp_cuda_comm_wait. */
static void *rank_main(void *arg)
{
    rank_job *j = arg;
    size_t es = gp_dtype_size(j->dt), bytes = es * j->count;
    unsigned char *host = malloc(bytes);
    void *x = NULL, *y = NULL;
    cudaStream_t s = NULL;
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    j->rc = -1;
    if (!host || cudaSetDevice(j->rank) != cudaSuccess || cudaStreamCreate(&s) != cudaSuccess ||
        cudaMalloc(&x, bytes) != cudaSuccess || cudaMalloc(&y, bytes) != cudaSuccess) {
        snprintf(j->err, sizeof j->err, "rank %d: setup failed", j->rank);
        goto done;
    }
    for (size_t i = 0; i < j->count; i++)
        put(host, j->dt, i, term(j->rank, i));
    cudaMemcpy(x, host, bytes, cudaMemcpyHostToDevice);
    cudaMemset(y, 0, bytes);
    if (j->stay_away) {
        snprintf(j->err, sizeof j->err, "rank %d stayed away on purpose", j->rank);
        goto done;
    }
    if (j->fail_before_launch) {
        gp_cuda_comm_fail(j->comm, j->rank);
        snprintf(j->err, sizeof j->err, "rank %d failed on purpose", j->rank);
        goto done;
    }
    if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
        goto done;
    int r1 = gp_cuda_comm_all_reduce(j->comm, j->rank, x, y, j->count, j->dt, s, j->err,
                                     sizeof j->err);
    int r2 = r1 ? -1 : gp_cuda_comm_all_reduce(j->comm, j->rank, x, x, j->count, j->dt, s, j->err,
                                               sizeof j->err);
    cudaError_t e = cudaStreamEndCapture(s, &g);
    if (r1 || r2 || e != cudaSuccess || cudaGraphInstantiate(&ge, g, 0) != cudaSuccess ||
        cudaGraphLaunch(ge, s) != cudaSuccess) {
        if (!j->err[0])
            snprintf(j->err, sizeof j->err, "rank %d: capture or launch failed", j->rank);
        goto done;
    }
    if (gp_cuda_comm_wait(j->comm, j->rank, s, j->err, sizeof j->err))
        goto done;
    cudaMemcpy(host, x, bytes, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < j->count; i++)
        j->got_in[i] = get(host, j->dt, i);
    cudaMemcpy(host, y, bytes, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < j->count; i++)
        j->got_out[i] = get(host, j->dt, i);
    j->rc = 0;
done:
    if (ge)
        cudaGraphExecDestroy(ge);
    if (g)
        cudaGraphDestroy(g);
    if (s)
        cudaStreamSynchronize(s);
    cudaFree(x);
    cudaFree(y);
    if (s)
        cudaStreamDestroy(s);
    cudaGetLastError();
    free(host);
    return NULL;
}

/* Runs both ranks at once on comm: count elements of dt; rank fail_rank fails before launching,
 * rank away_rank stays away (-1: none). The results stay in jobs[r].got_* (free_jobs). */
static void run_ranks(gp_cuda_comm *comm, rank_job *jobs, gp_dtype dt, size_t count,
                      int fail_rank, int away_rank)
{
    pthread_t th[2];
    for (int r = 0; r < 2; r++) {
        memset(&jobs[r], 0, sizeof jobs[r]);
        jobs[r].comm = comm;
        jobs[r].rank = r;
        jobs[r].dt = dt;
        jobs[r].count = count;
        jobs[r].fail_before_launch = r == fail_rank;
        jobs[r].stay_away = r == away_rank;
        jobs[r].got_in = calloc(count, sizeof(float));
        jobs[r].got_out = calloc(count, sizeof(float));
        pthread_create(&th[r], NULL, rank_main, &jobs[r]);
    }
    for (int r = 0; r < 2; r++)
        pthread_join(th[r], NULL);
}

static void free_jobs(rank_job *jobs)
{
    for (int r = 0; r < 2; r++) {
        free(jobs[r].got_in);
        free(jobs[r].got_out);
    }
}

/* Every dtype at every test count on one communicator in `mode`, in place and out of place, exact;
 * p2p: whether counts up to GP_AR_P2P_MAX bytes must take the P2P kernel. */
static void all_reduce_sums(const char *mode, int p2p)
{
    const gp_dtype dts[3] = {GP_F32, GP_F16, GP_BF16};
    gp_cuda_comm *comm = new_comm(mode);
    CU_ASSERT_PTR_NOT_NULL_FATAL(comm);
    rank_job jobs[2];
    for (int d = 0; d < 3; d++)
        for (int k = 0; k < N_COUNTS; k++) {
            size_t es = gp_dtype_size(dts[d]), count = test_count(k, es);
            CU_ASSERT_EQUAL(gp_cuda_comm_uses_p2p(comm, count * es),
                            p2p && count * es <= GP_AR_P2P_MAX);
            run_ranks(comm, jobs, dts[d], count, -1, -1);
            for (int r = 0; r < 2; r++) {
                if (jobs[r].rc)
                    fprintf(stderr, "\n  %s %s x %zu, rank %d: %s\n", mode ? mode : "p2p",
                            gp_dtype_name(dts[d]), count, r, jobs[r].err);
                CU_ASSERT_EQUAL(jobs[r].rc, 0);
                size_t bad = 0;
                for (size_t i = 0; i < count && !jobs[r].rc; i++) {
                    float want = term(0, i) + term(1, i);
                    bad += jobs[r].got_out[i] != want || jobs[r].got_in[i] != want;
                }
                CU_ASSERT_EQUAL(bad, 0);
            }
            free_jobs(jobs);
        }
    gp_cuda_comm_free(comm);
}

static void test_all_reduce_p2p(void)
{
    if (!peers_ok())
        fprintf(stderr, "\n  devices 0 and 1 cannot access each other: NCCL serves these\n");
    all_reduce_sums(NULL, peers_ok());
}

static void test_all_reduce_nccl(void)
{
    all_reduce_sums("nccl", 0);
}

/* ---- one graph of three all-reduces replayed many times ---- */

enum { REPLAYS = 1000, RP_A = GP_AR_P2P_MAX / 4, RP_B = 3000, RP_C = 1000 };

typedef struct {
    gp_cuda_comm *comm;
    int rank;
    int rc;
    char err[256];
    float *pin_in, *pin_x, *pin_y; /* pinned [RP_A]: a replay's input, its x and y read back */
    int filled;                    /* replays whose input the graph's first node wrote */
    int checked;                   /* replays whose results its last node checked */
    long bad;                      /* wrong elements over all replays */
} replay_job;

/* Rank r's term of element i in replay k: small integers, changing with every replay. */
static float rterm(int r, size_t i, int k)
{
    return (float)((int)((i * 7 + (size_t)k * 13 + (size_t)r * 5) % 31) - 15);
}

/* The graph's first node (a host node): replay j->filled's input. */
static void CUDART_CB replay_fill(void *arg)
{
    replay_job *j = arg;
    for (size_t i = 0; i < RP_A; i++)
        j->pin_in[i] = rterm(j->rank, i, j->filled);
    j->filled++;
}

/* The graph's last node: y = x summed (RP_A), then y's first RP_B summed again in place; x's
 * first RP_C summed in place. */
static void CUDART_CB replay_check(void *arg)
{
    replay_job *j = arg;
    int k = j->checked++;
    for (size_t i = 0; i < RP_A; i++) {
        float sum = rterm(0, i, k) + rterm(1, i, k);
        float want_y = i < RP_B ? 2 * sum : sum, want_x = i < RP_C ? sum : rterm(j->rank, i, k);
        j->bad += j->pin_y[i] != want_y;
        j->bad += j->pin_x[i] != want_x;
    }
}

static void *replay_main(void *arg)
{
    replay_job *j = arg;
    const size_t bytes = sizeof(float) * RP_A;
    float *x = NULL, *y = NULL;
    cudaStream_t s = NULL;
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    j->rc = -1;
    if (cudaSetDevice(j->rank) != cudaSuccess || cudaStreamCreate(&s) != cudaSuccess ||
        cudaMalloc((void **)&x, bytes) != cudaSuccess ||
        cudaMalloc((void **)&y, bytes) != cudaSuccess ||
        cudaMallocHost((void **)&j->pin_in, bytes) != cudaSuccess ||
        cudaMallocHost((void **)&j->pin_x, bytes) != cudaSuccess ||
        cudaMallocHost((void **)&j->pin_y, bytes) != cudaSuccess) {
        snprintf(j->err, sizeof j->err, "rank %d: setup failed", j->rank);
        goto done;
    }
    if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
        goto done;
    int r = cudaLaunchHostFunc(s, replay_fill, j) != cudaSuccess ||
            cudaMemcpyAsync(x, j->pin_in, bytes, cudaMemcpyHostToDevice, s) != cudaSuccess;
    r = r || gp_cuda_comm_all_reduce(j->comm, j->rank, x, y, RP_A, GP_F32, s, j->err,
                                     sizeof j->err);
    r = r || gp_cuda_comm_all_reduce(j->comm, j->rank, y, y, RP_B, GP_F32, s, j->err,
                                     sizeof j->err);
    r = r || gp_cuda_comm_all_reduce(j->comm, j->rank, x, x, RP_C, GP_F32, s, j->err,
                                     sizeof j->err);
    r = r || cudaMemcpyAsync(j->pin_x, x, bytes, cudaMemcpyDeviceToHost, s) != cudaSuccess ||
        cudaMemcpyAsync(j->pin_y, y, bytes, cudaMemcpyDeviceToHost, s) != cudaSuccess ||
        cudaLaunchHostFunc(s, replay_check, j) != cudaSuccess;
    cudaError_t e = cudaStreamEndCapture(s, &g);
    if (r || e != cudaSuccess || cudaGraphInstantiate(&ge, g, 0) != cudaSuccess) {
        if (!j->err[0])
            snprintf(j->err, sizeof j->err, "rank %d: capture failed", j->rank);
        goto done;
    }
    for (int k = 0; k < REPLAYS; k++)
        if (cudaGraphLaunch(ge, s) != cudaSuccess) {
            snprintf(j->err, sizeof j->err, "rank %d: replay %d: launch failed", j->rank, k);
            gp_cuda_comm_fail(j->comm, j->rank);
            goto done;
        }
    if (gp_cuda_comm_wait(j->comm, j->rank, s, j->err, sizeof j->err))
        goto done;
    j->rc = 0;
done:
    if (s)
        cudaStreamSynchronize(s);
    if (ge)
        cudaGraphExecDestroy(ge);
    if (g)
        cudaGraphDestroy(g);
    cudaFree(x);
    cudaFree(y);
    cudaFreeHost(j->pin_in);
    cudaFreeHost(j->pin_x);
    cudaFreeHost(j->pin_y);
    if (s)
        cudaStreamDestroy(s);
    cudaGetLastError();
    return NULL;
}

/* Three all-reduces (the largest P2P size out of place, two smaller ones in place) captured once
 * and replayed REPLAYS times, each replay's inputs written by the graph's first node: every
 * replay's sums must be exact (epochs, parities and receive rows reused across replays). */
static void replays(const char *mode)
{
    gp_cuda_comm *comm = new_comm(mode);
    CU_ASSERT_PTR_NOT_NULL_FATAL(comm);
    static replay_job jobs[2];
    pthread_t th[2];
    for (int r = 0; r < 2; r++) {
        memset(&jobs[r], 0, sizeof jobs[r]);
        jobs[r].comm = comm;
        jobs[r].rank = r;
        pthread_create(&th[r], NULL, replay_main, &jobs[r]);
    }
    for (int r = 0; r < 2; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < 2; r++) {
        if (jobs[r].rc)
            fprintf(stderr, "\n  replays (%s), rank %d: %s\n", mode ? mode : "p2p", r, jobs[r].err);
        CU_ASSERT_EQUAL(jobs[r].rc, 0);
        CU_ASSERT_EQUAL(jobs[r].filled, REPLAYS);
        CU_ASSERT_EQUAL(jobs[r].checked, REPLAYS);
        CU_ASSERT_EQUAL(jobs[r].bad, 0);
    }
    gp_cuda_comm_free(comm);
}

static void test_replays_p2p(void)
{
    replays(NULL);
}

static void test_replays_nccl(void)
{
    replays("nccl");
}

/* ---- failures ---- */

/* Rank 1 fails before launching; rank 0, already waiting in its all-reduce, must return an error
 * instead of waiting forever. mode NULL (P2P): the abort word ends rank 0's kernel; with a 5 s
 * time limit a broken abort fails the test (another message) instead of hanging it. NCCL: opt-in
 * (GPLAN_TEST_TP_FAILURE=1), since if the stop did not work the test would hang. */
static void failure_stops_waits(const char *mode)
{
    setenv("GPLAN_ALLREDUCE_TIMEOUT_MS", "5000", 1);
    gp_cuda_comm *comm = new_comm(mode);
    unsetenv("GPLAN_ALLREDUCE_TIMEOUT_MS");
    CU_ASSERT_PTR_NOT_NULL_FATAL(comm);
    rank_job jobs[2];
    run_ranks(comm, jobs, GP_F32, 3000, 1, -1);
    CU_ASSERT_EQUAL(jobs[1].rc, -1);
    CU_ASSERT_EQUAL(jobs[0].rc, -1);
    if (!strstr(jobs[0].err, "rank 1 failed"))
        fprintf(stderr, "\n  rank 0: %s\n", jobs[0].err);
    CU_ASSERT_PTR_NOT_NULL(strstr(jobs[0].err, "rank 1 failed"));
    CU_ASSERT_EQUAL(gp_cuda_comm_failed(comm), 1);
    free_jobs(jobs);
    gp_cuda_comm_free(comm);
}

static void test_failure_p2p(void)
{
    failure_stops_waits(NULL);
}

static void test_failure_nccl(void)
{
    failure_stops_waits("nccl");
}

/* Rank 1 neither launches nor reports a failure (a stuck thread): rank 0's P2P all-reduce gives
 * up after its time limit (300 ms here), and its wait says why; the communicator is failed. */
static void test_timeout_p2p(void)
{
    setenv("GPLAN_ALLREDUCE_TIMEOUT_MS", "300", 1);
    gp_cuda_comm *comm = new_comm(NULL);
    unsetenv("GPLAN_ALLREDUCE_TIMEOUT_MS");
    CU_ASSERT_PTR_NOT_NULL_FATAL(comm);
    rank_job jobs[2];
    run_ranks(comm, jobs, GP_F32, 3000, -1, 1);
    CU_ASSERT_EQUAL(jobs[0].rc, -1);
    if (strcmp(jobs[0].err, "cuda: rank 0: a P2P all-reduce waited 0.3 s for rank 1 and gave up"))
        fprintf(stderr, "\n  rank 0: %s\n", jobs[0].err);
    CU_ASSERT_STRING_EQUAL(jobs[0].err,
                           "cuda: rank 0: a P2P all-reduce waited 0.3 s for rank 1 and gave up");
    CU_ASSERT_EQUAL(gp_cuda_comm_failed(comm), 0);
    free_jobs(jobs);
    gp_cuda_comm_free(comm);
}

/* ---- an all-reduce with the norm after it in its kernel ---- */

enum { NORM_N = 4096 };

typedef struct {
    gp_cuda_comm *comm;
    int rank, is_ln, count;  /* count <= NORM_N elements summed */
    int n;                   /* the norm's row (count, or not: the norm is not taken) */
    int rc, done[2];         /* norm_done of the two launches */
    char err[256];
    float sum[NORM_N], h[NORM_N];
} norm_job;

/* Rank r's term of element i, not an integer: the sum is rounded as the kernel rounds it. */
static float nterm(int r, int i)
{
    return (float)((i * 37 + r * 11) % 101 - 50) * 0.0173f * (float)(r + 1);
}

static float nweight(int i, int bias)
{
    float v = bias ? 0.01f * (float)(i % 13) : 0.5f + 0.001f * (float)(i % 7);
    return gp_f16_to_f32(gp_f32_to_f16(v)); /* as stored in f16 */
}

/* Twice (the second launch reuses what the first left): sum = all-reduce of x, h = norm(sum). */
static void *norm_rank_main(void *arg)
{
    norm_job *j = arg;
    float *x = NULL, *y = NULL, *h = NULL;
    uint16_t *w = NULL, *b = NULL, hw[NORM_N], hb[NORM_N];
    cudaStream_t s = NULL;
    float hx[NORM_N];
    j->rc = -1;
    if (cudaSetDevice(j->rank) != cudaSuccess || cudaStreamCreate(&s) != cudaSuccess ||
        cudaMalloc((void **)&x, sizeof hx) != cudaSuccess ||
        cudaMalloc((void **)&y, sizeof hx) != cudaSuccess ||
        cudaMalloc((void **)&h, sizeof hx) != cudaSuccess ||
        cudaMalloc((void **)&w, sizeof hw) != cudaSuccess ||
        cudaMalloc((void **)&b, sizeof hb) != cudaSuccess) {
        snprintf(j->err, sizeof j->err, "rank %d: setup failed", j->rank);
        goto done;
    }
    for (int i = 0; i < NORM_N; i++) {
        hx[i] = nterm(j->rank, i);
        hw[i] = gp_f32_to_f16(nweight(i, 0));
        hb[i] = gp_f32_to_f16(nweight(i, 1));
    }
    cudaMemcpy(x, hx, sizeof hx, cudaMemcpyHostToDevice);
    cudaMemcpy(w, hw, sizeof hw, cudaMemcpyHostToDevice);
    cudaMemcpy(b, hb, sizeof hb, cudaMemcpyHostToDevice);
    cudaMemset(h, 0xff, sizeof hx);
    gp_cuda_ar_norm nm = {j->is_ln, 1e-5f, w, j->is_ln ? b : NULL, GP_F16, GP_F16, h, GP_F32,
                          (size_t)j->n};
    for (int k = 0; k < 2; k++) {
        /* The second after other work (a memset): its epochs may be read before its wait. */
        if (k == 1)
            cudaMemsetAsync(h, 0xff, sizeof hx, s);
        if (gp_cuda_comm_all_reduce_norm(j->comm, j->rank, x, y, (size_t)j->count, GP_F32, s, &nm,
                                         k, &j->done[k], j->err, sizeof j->err))
            goto done;
    }
    if (gp_cuda_comm_wait(j->comm, j->rank, s, j->err, sizeof j->err))
        goto done;
    cudaMemcpy(j->sum, y, sizeof hx, cudaMemcpyDeviceToHost);
    cudaMemcpy(j->h, h, sizeof hx, cudaMemcpyDeviceToHost);
    j->rc = 0;
done:
    if (s)
        cudaStreamSynchronize(s);
    cudaFree(x);
    cudaFree(y);
    cudaFree(h);
    cudaFree(w);
    cudaFree(b);
    if (s)
        cudaStreamDestroy(s);
    cudaGetLastError();
    return NULL;
}

/* rms_norm and layer_norm with a bias after a P2P all-reduce of one row, against the CPU, and of
 * a row that leaves the last threads part of a chunk; a norm for another row length is left to
 * the caller (norm_done 0, the output untouched). */
static void test_all_reduce_norm(void)
{
    if (!peers_ok())
        return; /* the norm rides only on the P2P kernel */
    gp_cuda_comm *comm = new_comm(NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(comm);
    static norm_job jobs[2];
    for (int c = 0; c < 4; c++) {
        int is_ln = c % 2 == 1, count = c == 3 ? 1001 : NORM_N;
        int n = c == 2 ? NORM_N / 2 : count;
        pthread_t th[2];
        for (int r = 0; r < 2; r++) {
            memset(&jobs[r], 0, sizeof jobs[r]);
            jobs[r].comm = comm;
            jobs[r].rank = r;
            jobs[r].is_ln = is_ln;
            jobs[r].count = count;
            jobs[r].n = n;
            pthread_create(&th[r], NULL, norm_rank_main, &jobs[r]);
        }
        for (int r = 0; r < 2; r++)
            pthread_join(th[r], NULL);
        /* The CPU: the sum in rank order in f32, the norm in double. */
        float sum[NORM_N];
        double mean = 0, var = 0;
        for (int i = 0; i < count; i++) {
            sum[i] = nterm(0, i) + nterm(1, i);
            mean += sum[i];
        }
        mean = is_ln ? mean / count : 0.0;
        for (int i = 0; i < count; i++)
            var += (sum[i] - mean) * (sum[i] - mean);
        double inv = 1.0 / sqrt(var / count + 1e-5), num = 0, den = 0;
        for (int r = 0; r < 2; r++) {
            if (jobs[r].rc)
                fprintf(stderr, "\n  all-reduce + norm, case %d: %s\n", c, jobs[r].err);
            CU_ASSERT_EQUAL(jobs[r].rc, 0);
            CU_ASSERT_EQUAL(jobs[r].done[0], n == count);
            CU_ASSERT_EQUAL(jobs[r].done[1], n == count);
            CU_ASSERT_EQUAL(memcmp(jobs[r].sum, sum, sizeof(float) * (size_t)count), 0);
            int untouched = 1;
            for (int i = 0; i < count && n == count; i++) {
                double want = (sum[i] - mean) * inv * nweight(i, 0) + (is_ln ? nweight(i, 1) : 0);
                num += (jobs[r].h[i] - want) * (jobs[r].h[i] - want);
                den += want * want;
            }
            /* Past the row, or everywhere without the norm: h as it was set, NaN. */
            for (int i = 0; i < NORM_N; i++)
                untouched &= isnan(jobs[r].h[i]) == (i >= count || n != count);
            CU_ASSERT(untouched);
        }
        if (n == count) {
            double e = sqrt(num / den);
            if (!(e <= 1e-5))
                fprintf(stderr, "\n  all-reduce + norm, case %d: error %.3g\n", c, e);
            CU_ASSERT(e <= 1e-5);
        }
    }
    gp_cuda_comm_free(comm);
}

static void test_comm_refusals(void)
{
    int n = 0;
    cudaGetDeviceCount(&n);
    int devs[GP_PLAN_MAX_DEVICES + 1];
    for (int i = 0; i <= GP_PLAN_MAX_DEVICES; i++)
        devs[i] = i;
    char err[256], want[256];
    void *c = (void *)devs;
    CU_ASSERT_EQUAL(gp_cuda_comm_new(n + 1, devs, &c, err, sizeof err), -1);
    CU_ASSERT_PTR_NULL(c);
    snprintf(want, sizeof want, "cuda: the plan needs %d devices, %d visible", n + 1, n);
    CU_ASSERT_STRING_EQUAL(err, want);
    devs[1] = 0;
    CU_ASSERT_EQUAL(gp_cuda_comm_new(2, devs, &c, err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err, "cuda: device 0 given to ranks 0 and 1");
    devs[1] = n;
    CU_ASSERT_EQUAL(gp_cuda_comm_new(2, devs, &c, err, sizeof err), -1);
    snprintf(want, sizeof want, "cuda: rank 1: device %d out of range (%d visible)", n, n);
    CU_ASSERT_STRING_EQUAL(err, want);
    devs[1] = 1;
    setenv("GPLAN_ALLREDUCE", "shm", 1);
    CU_ASSERT_EQUAL(gp_cuda_comm_new(2, devs, &c, err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err, "cuda: GPLAN_ALLREDUCE=shm: expected p2p or nccl");
    unsetenv("GPLAN_ALLREDUCE");
    setenv("GPLAN_ALLREDUCE_BLOCK_BYTES", "3000", 1);
    CU_ASSERT_EQUAL(gp_cuda_comm_new(2, devs, &c, err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err, "cuda: GPLAN_ALLREDUCE_BLOCK_BYTES=3000: expected a power of two "
                                "in [512, 16384]");
    unsetenv("GPLAN_ALLREDUCE_BLOCK_BYTES");
    CU_ASSERT_PTR_NULL(c);
}

/* ---- whole models: 1 device vs 2 devices ---- */

/* `path` compiled for `devices` with the given -D overrides, random weights (seed 7). */
static gp_model *tp_model(const char *path, const char *const *defs, int n_defs, int devices)
{
    gp_test_model_opts o = {defs, n_defs, NULL, devices, 7};
    return gp_test_model(path, &o, NULL);
}

/* n tokens at positions start.. on s; the logits [n, V] into out. */
static int tp_step(gp_session *s, int n, int start, float *out, int64_t V)
{
    return gp_test_eval_tokens(s, n, start, 131, out, V);
}

static void tp_parity(const char *path, const char *const *defs, int n_defs, double tol)
{
    gp_model *m1 = tp_model(path, defs, n_defs, 1), *m2 = tp_model(path, defs, n_defs, 2);
    CU_ASSERT_PTR_NOT_NULL(m1);
    CU_ASSERT_PTR_NOT_NULL(m2);
    char err[1024];
    gp_session_opts o = {"cuda", 1, 0};
    gp_session *s1 = m1 ? gp_session_new(m1, &o, err, sizeof err) : NULL;
    if (m1 && !s1)
        fprintf(stderr, "\n  1-device session: %s\n", err);
    gp_session *s2 = m2 ? gp_session_new(m2, &o, err, sizeof err) : NULL;
    if (m2 && !s2)
        fprintf(stderr, "\n  2-device session: %s\n", err);
    CU_ASSERT_PTR_NOT_NULL(s1);
    CU_ASSERT_PTR_NOT_NULL(s2);
    if (s1 && s2) {
        gp_model_info i1, i2;
        gp_model_get_info(m1, &i1);
        gp_model_get_info(m2, &i2);
        CU_ASSERT_EQUAL(i1.vocab, i2.vocab);
        /* each device holds less than the whole model (the split weights are halved) */
        CU_ASSERT(i2.region_bytes[GP_REGION_WEIGHTS] < i1.region_bytes[GP_REGION_WEIGHTS]);
        /* and half the KV cache (up to the regions' alignment) */
        CU_ASSERT(i2.region_bytes[GP_REGION_STATE] * 2 <= i1.region_bytes[GP_REGION_STATE] + 1024);
        int64_t V = i1.vocab;
        float *l1 = malloc(sizeof(float) * 64 * (size_t)V), *l2 = malloc(sizeof(float) * 64 * (size_t)V);
        /* A 5-token prompt (padded to bucket 8), 4 decode steps, 3 tokens (bucket 4), then a
         * reset and the prompt again. */
        const int plan[][2] = {{5, 0}, {1, 5}, {1, 6}, {1, 7}, {1, 8}, {3, 9}, {5, 0}};
        for (size_t i = 0; i < sizeof plan / sizeof plan[0]; i++) {
            if (i == 6) {
                CU_ASSERT_EQUAL(gp_session_reset(s1), 0);
                CU_ASSERT_EQUAL(gp_session_reset(s2), 0);
            }
            int n = plan[i][0];
            CU_ASSERT_EQUAL_FATAL(tp_step(s1, n, plan[i][1], l1, V), 0);
            CU_ASSERT_EQUAL_FATAL(tp_step(s2, n, plan[i][1], l2, V), 0);
            double e = gp_test_rel_err(l2, l1, (size_t)n * (size_t)V, GP_TEST_MAX);
            if (!(e <= tol))
                fprintf(stderr, "\n  %s step %zu: 2-device logits differ by %.3g > %.3g\n", path,
                        i, e, tol);
            CU_ASSERT(e <= tol);
        }
        CU_ASSERT_EQUAL(gp_session_backend_allocs(s1), 0);
        CU_ASSERT_EQUAL(gp_session_backend_allocs(s2), 0);
        free(l1);
        free(l2);
    }
    gp_session_free(s2);
    gp_session_free(s1);
    gp_model_free(m2);
    gp_model_free(m1);
}

static const char *const gpt2_small[] = {"n_layer=2", "n_embd=128", "n_head=4", "vocab_size=512",
                                         "n_positions=64", "wtype=f32", "kv_type=f32"};
static const char *const llama_small[] = {
    "num_hidden_layers=2", "hidden_size=128",       "intermediate_size=256",
    "num_attention_heads=4", "num_key_value_heads=2", "vocab_size=512",
    "max_position_embeddings=64", "n_batch=64",     "wtype=f32",
    "kv_type=f32"};

/* The same overrides with f16 weights and KV cache. */
static void with_f16(const char *const *defs, int n, const char **out)
{
    for (int i = 0; i < n; i++)
        out[i] = !strcmp(defs[i], "wtype=f32") ? "wtype=f16"
                 : !strcmp(defs[i], "kv_type=f32") ? "kv_type=f16" : defs[i];
}

static void test_gpt2_f32(void)
{
    tp_parity("examples/gpt2.gplan", gpt2_small, 7, 1e-4);
}

static void test_gpt2_f16(void)
{
    const char *d[7];
    with_f16(gpt2_small, 7, d);
    tp_parity("examples/gpt2.gplan", d, 7, 1e-2);
}

static void test_llama_f32(void)
{
    tp_parity("examples/llama.gplan", llama_small, 10, 1e-4);
}

static void test_llama_f16(void)
{
    const char *d[10];
    with_f16(llama_small, 10, d);
    tp_parity("examples/llama.gplan", d, 10, 1e-2);
}

void gp_suite_cuda_tp(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) {
        cudaGetLastError();
        char why[64];
        snprintf(why, sizeof why, "needs 2 GPUs, %d visible", n);
        gp_test_skip("cuda_tp", why);
        return;
    }
    void *c = NULL;
    char err[256];
    const int devs[2] = {0, 1};
    if (gp_cuda_comm_new(2, devs, &c, err, sizeof err) && strstr(err, "without NCCL")) {
        gp_test_skip("cuda_tp", err);
        return;
    }
    gp_cuda_comm_free(c);
    static const gp_test_case tests[] = {
        {"comm_new refuses missing and repeated devices, bad switches", test_comm_refusals},
        {"all-reduce over P2P: f32/f16/bf16, 1 to 256 KiB + 1, captured", test_all_reduce_p2p},
        {"all-reduce over NCCL: f32/f16/bf16, 1 to 256 KiB + 1, captured", test_all_reduce_nccl},
        {"P2P: 3 all-reduces in a graph replayed 1000 times", test_replays_p2p},
        {"P2P: the norm after an all-reduce in its kernel (rms, layer norm)", test_all_reduce_norm},
        {"NCCL: 3 all-reduces in a graph replayed 1000 times", test_replays_nccl},
    };
    CU_pSuite s = gp_test_add_suite("cuda_tp", NULL, NULL, tests, GP_TEST_COUNT(tests));
    if (peers_ok()) {
        CU_add_test(s, "P2P: a failed rank stops the other's wait", test_failure_p2p);
        CU_add_test(s, "P2P: a rank that never comes: the other times out", test_timeout_p2p);
    }
    CU_add_test(s, "gpt2 f32: 2 devices vs 1, no eval allocations", test_gpt2_f32);
    CU_add_test(s, "gpt2 f16: 2 devices vs 1", test_gpt2_f16);
    CU_add_test(s, "llama f32: 2 devices vs 1, no eval allocations", test_llama_f32);
    CU_add_test(s, "llama f16: 2 devices vs 1", test_llama_f16);
    const char *f = getenv("GPLAN_TEST_TP_FAILURE");
    if (f && *f == '1')
        CU_add_test(s, "NCCL: a failed rank stops the other's wait", test_failure_nccl);
}
