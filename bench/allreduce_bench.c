/* All-reduce microbenchmark for tensor-parallel decode on 2 GPUs: microseconds per all-reduce of
 * 1 KiB to 256 KiB of f32 over NCCL and over the P2P one-shot kernel (cuda/cuda_allreduce.cu),
 * each as a CUDA graph of 64 all-reduces back to back (a Llama-7B token's count), replayed 200
 * times; the median replay / 64. Every sum is checked. usage: allreduce_bench [BYTES...] (extra
 * P2P columns with GPLAN_ALLREDUCE_BLOCK_BYTES=BYTES per block). Exit status 1 on a wrong sum. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "cuda/cuda_comm.h"

enum { RANKS = 2, PER_GRAPH = 64, REPLAYS = 200, WARM = 5, MAX_COLS = 8 };

typedef struct {
    gp_cuda_comm *comm;
    int rank;
    size_t count;          /* f32 elements per all-reduce */
    double us;             /* rank 0: median replay / PER_GRAPH */
    size_t bad;            /* wrong elements of the sums */
    int rc;
    char err[256];
} job;

/* Rank r's term of element i: small integers, so the sums are exact. */
static float term(int r, size_t i)
{
    return (float)((int)(i % 13) - 6) * (float)(r + 1);
}

static int cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* One rank: the graph x -> y summed PER_GRAPH times, replayed WARM + REPLAYS times with an event
 * before each timed replay; y checked at the end. */
static void *rank_main(void *arg)
{
    job *j = arg;
    size_t bytes = sizeof(float) * j->count;
    float *host = malloc(bytes), *x = NULL, *y = NULL;
    cudaStream_t s = NULL;
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    cudaEvent_t ev[REPLAYS + 1] = {0};
    j->rc = -1;
    if (!host || cudaSetDevice(j->rank) != cudaSuccess ||
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess ||
        cudaMalloc((void **)&x, bytes) != cudaSuccess ||
        cudaMalloc((void **)&y, bytes) != cudaSuccess) {
        snprintf(j->err, sizeof j->err, "rank %d: setup failed", j->rank);
        goto done;
    }
    for (int k = 0; k <= REPLAYS; k++)
        if (cudaEventCreate(&ev[k]) != cudaSuccess) {
            snprintf(j->err, sizeof j->err, "rank %d: cudaEventCreate failed", j->rank);
            goto done;
        }
    for (size_t i = 0; i < j->count; i++)
        host[i] = term(j->rank, i);
    if (cudaMemcpy(x, host, bytes, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemset(y, 0, bytes) != cudaSuccess ||
        cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
        goto done;
    int r = 0;
    for (int k = 0; k < PER_GRAPH && !r; k++)
        r = gp_cuda_comm_all_reduce(j->comm, j->rank, x, y, j->count, GP_F32, s, j->err,
                                    sizeof j->err);
    cudaError_t e = cudaStreamEndCapture(s, &g);
    if (r || e != cudaSuccess || cudaGraphInstantiate(&ge, g, 0) != cudaSuccess) {
        if (!j->err[0])
            snprintf(j->err, sizeof j->err, "rank %d: capture failed", j->rank);
        goto done;
    }
    for (int k = 0; k < WARM + REPLAYS; k++) {
        if (k >= WARM)
            cudaEventRecord(ev[k - WARM], s);
        if (cudaGraphLaunch(ge, s) != cudaSuccess) {
            snprintf(j->err, sizeof j->err, "rank %d: cudaGraphLaunch failed", j->rank);
            gp_cuda_comm_fail(j->comm, j->rank);
            goto done;
        }
    }
    cudaEventRecord(ev[REPLAYS], s);
    if (gp_cuda_comm_wait(j->comm, j->rank, s, j->err, sizeof j->err))
        goto done;
    float ms[REPLAYS];
    for (int k = 0; k < REPLAYS; k++)
        if (cudaEventElapsedTime(&ms[k], ev[k], ev[k + 1]) != cudaSuccess)
            goto done;
    qsort(ms, REPLAYS, sizeof ms[0], cmp_f);
    j->us = 1000.0 * ms[REPLAYS / 2] / PER_GRAPH;
    if (cudaMemcpy(host, y, bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
        goto done;
    for (size_t i = 0; i < j->count; i++)
        j->bad += host[i] != term(0, i) + term(1, i);
    j->rc = 0;
done:
    if (s)
        cudaStreamSynchronize(s);
    for (int k = 0; k <= REPLAYS; k++)
        if (ev[k])
            cudaEventDestroy(ev[k]);
    if (ge)
        cudaGraphExecDestroy(ge);
    if (g)
        cudaGraphDestroy(g);
    cudaFree(x);
    cudaFree(y);
    if (s)
        cudaStreamDestroy(s);
    cudaGetLastError();
    free(host);
    return NULL;
}

/* us per all-reduce of `count` f32 on comm (rank 0's median), or -1 (reported). */
static double measure(gp_cuda_comm *comm, size_t count, int *wrong)
{
    job jobs[RANKS];
    pthread_t th[RANKS];
    for (int r = 0; r < RANKS; r++) {
        memset(&jobs[r], 0, sizeof jobs[r]);
        jobs[r].comm = comm;
        jobs[r].rank = r;
        jobs[r].count = count;
        pthread_create(&th[r], NULL, rank_main, &jobs[r]);
    }
    for (int r = 0; r < RANKS; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < RANKS; r++) {
        if (jobs[r].rc) {
            fprintf(stderr, "allreduce_bench: %zu floats, rank %d: %s\n", count, r, jobs[r].err);
            *wrong = 1;
            return -1;
        }
        if (jobs[r].bad) {
            fprintf(stderr, "allreduce_bench: %zu floats, rank %d: %zu wrong sums\n", count, r,
                    jobs[r].bad);
            *wrong = 1;
        }
    }
    return jobs[0].us;
}

int main(int argc, char **argv)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < RANKS) {
        fprintf(stderr, "allreduce_bench: needs %d GPUs, %d visible\n", RANKS, n);
        return 1;
    }
    /* Columns: NCCL, P2P at the default block size, then P2P at each block size asked for. */
    const char *mode[MAX_COLS] = {"nccl", "p2p"}, *block[MAX_COLS] = {NULL, NULL};
    char title[MAX_COLS][32] = {"NCCL", "P2P"};
    int cols = 2;
    for (int a = 1; a < argc && cols < MAX_COLS; a++, cols++) {
        mode[cols] = "p2p";
        block[cols] = argv[a];
        snprintf(title[cols], sizeof title[cols], "P2P/%s", argv[a]);
    }
    gp_cuda_comm *comm[MAX_COLS] = {0};
    const int devs[RANKS] = {0, 1};
    for (int c = 0; c < cols; c++) {
        char err[512];
        void *cm = NULL;
        setenv("GPLAN_ALLREDUCE", mode[c], 1);
        if (block[c])
            setenv("GPLAN_ALLREDUCE_BLOCK_BYTES", block[c], 1);
        else
            unsetenv("GPLAN_ALLREDUCE_BLOCK_BYTES");
        if (gp_cuda_comm_new(RANKS, devs, &cm, err, sizeof err)) {
            fprintf(stderr, "allreduce_bench: %s: %s\n", title[c], err);
            return 1;
        }
        comm[c] = cm;
        if (c > 0 && !gp_cuda_comm_uses_p2p(comm[c], GP_AR_P2P_MAX)) {
            fprintf(stderr, "allreduce_bench: %s: the devices cannot access each other\n",
                    title[c]);
            return 1;
        }
    }
    printf("us per all-reduce (f32, %d ranks; graph of %d, median of %d replays)\n", RANKS,
           PER_GRAPH, REPLAYS);
    printf("%8s", "KiB");
    for (int c = 0; c < cols; c++)
        printf(" %10s", title[c]);
    printf(" %10s\n", "NCCL/P2P");
    int wrong = 0;
    for (size_t kib = 1; kib <= GP_AR_P2P_MAX / 1024; kib *= 2) {
        double us[MAX_COLS];
        printf("%8zu", kib);
        for (int c = 0; c < cols; c++) {
            us[c] = measure(comm[c], kib * 1024 / sizeof(float), &wrong);
            printf(" %10.2f", us[c]);
        }
        printf(" %10.2f\n", us[1] > 0 ? us[0] / us[1] : 0.0);
        fflush(stdout);
    }
    for (int c = 0; c < cols; c++)
        gp_cuda_comm_free(comm[c]);
    printf("sums: %s\n", wrong ? "WRONG" : "all exact");
    return wrong;
}
