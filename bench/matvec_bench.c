/* Microbenchmark of the decode matrix-vector product at GPT-2 1558M shapes (f16 weights, f32 x):
 * gplan's version-2 kernels (weights loaded before the PDL wait, and not) and cuBLAS,
 * each as a CUDA graph of back-to-back products over enough weight copies that L2 holds none, plus
 * the device copy rate for reference. usage: matvec_bench [REPS]   (bench/gpu.sh runs it)
 * Prints "MV shape variant us_per_product GB_per_s" lines and "COPY GB/s". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "cuda/cuda_kernels.h"
#include "bench/cuda_check.h"

typedef struct {
    const char *name;
    int64_t K, N;
    int nk; /* 1: weights [N, K] (Linear, lm head), 0: [K, N] (GPT-2 Conv1D) */
} shape;

static gp_cu_tensor tensor2(void *p, gp_dtype t, int64_t r, int64_t c)
{
    gp_cu_tensor x;
    memset(&x, 0, sizeof x);
    int64_t es = (int64_t)gp_dtype_size(t);
    x.data = p;
    x.dtype = t;
    x.ndim = 2;
    x.ne[0] = r;
    x.ne[1] = c;
    x.nb[0] = c * es;
    x.nb[1] = es;
    for (int d = 0; d < GP_MAX_DIMS; d++)
        x.sym[d] = -1;
    return x;
}

/* Mean microseconds per product over reps products (a graph of them, launched twice first). */
static double time_products(gp_cu_ctx *c, const shape *s, char *w, int copies, size_t wbytes,
                            float *x, float *out, void *ws, size_t ws_size, int reps)
{
    gp_attrs am;
    memset(&am, 0, sizeof am);
    am.i[GP_MATMUL_TB] = s->nk;
    gp_cu_tensor in[2], o = tensor2(out, GP_F32, 1, s->N);
    in[0] = tensor2(x, GP_F32, 1, s->K);
    cudaGraph_t g;
    cudaGraphExec_t ge;
    for (int r = 0; r <= reps; r++) { /* eager first: loads the kernels, sets cuBLAS up */
        char *wr = w + (size_t)(r % copies) * wbytes;
        in[1] = s->nk ? tensor2(wr, GP_F16, s->N, s->K) : tensor2(wr, GP_F16, s->K, s->N);
        int fused = 0, used = 0;
        if (r == reps)
            break;
        if (gp_cuda_matmul_fused(c, &am, &o, in, ws, ws_size, NULL, NULL, &fused, &used)) {
            fprintf(stderr, "matvec_bench: %s\n", c->err);
            exit(1);
        }
    }
    CK(cudaStreamSynchronize(c->stream));
    CK(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal));
    for (int r = 0; r < reps; r++) {
        char *wr = w + (size_t)(r % copies) * wbytes;
        in[1] = s->nk ? tensor2(wr, GP_F16, s->N, s->K) : tensor2(wr, GP_F16, s->K, s->N);
        int fused = 0, used = 0;
        if (gp_cuda_matmul_fused(c, &am, &o, in, ws, ws_size, NULL, NULL, &fused, &used)) {
            fprintf(stderr, "matvec_bench: %s\n", c->err);
            exit(1);
        }
    }
    CK(cudaStreamEndCapture(c->stream, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaGraphLaunch(ge, c->stream));
    CK(cudaGraphLaunch(ge, c->stream));
    CK(cudaEventRecord(e0, c->stream));
    CK(cudaGraphLaunch(ge, c->stream));
    CK(cudaEventRecord(e1, c->stream));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    return ms * 1000.0 / reps;
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 60;
    if (reps < 1)
        reps = 60;
    const shape shapes[] = {
        {"qkv K1600 N4800 [K,N]", 1600, 4800, 0}, {"c_proj K1600 N1600 [K,N]", 1600, 1600, 0},
        {"fc K1600 N6400 [K,N]", 1600, 6400, 0},  {"proj K6400 N1600 [K,N]", 6400, 1600, 0},
        {"lm_head K1600 N50257 [N,K]", 1600, 50257, 1}, {"linear K1600 N6400 [N,K]", 1600, 6400, 1},
    };
    gp_cu_ctx c;
    memset(&c, 0, sizeof c);
    CK(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking));
    if (cublasCreate(&c.blas) != CUBLAS_STATUS_SUCCESS || cublasSetStream(c.blas, c.stream))
        return fprintf(stderr, "matvec_bench: cublas setup failed\n"), 1;
    unsigned *counters = NULL;
    CK(cudaMalloc((void **)&counters, sizeof(unsigned) * GP_CU_COUNTERS));
    CK(cudaMemset(counters, 0, sizeof(unsigned) * GP_CU_COUNTERS));
    c.d_counters = counters;
    c.n_counters = GP_CU_COUNTERS;
    int dev = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&c.n_sm, cudaDevAttrMultiProcessorCount, dev));
    size_t ws_size = (size_t)32 << 20, pool = (size_t)768 << 20;
    void *ws = NULL;
    float *x = NULL, *out = NULL;
    char *w = NULL;
    CK(cudaMalloc(&ws, ws_size));
    CK(cudaMalloc((void **)&x, 6400 * sizeof(float)));
    CK(cudaMalloc((void **)&out, 50257 * sizeof(float)));
    CK(cudaMalloc((void **)&w, pool));
    CK(cudaMemset(w, 0x2a, pool)); /* f16 0x2a2a: about 0.045 */
    CK(cudaMemset(x, 0, 6400 * sizeof(float)));

    /* The copy rate: read and write of 384 MiB each. */
    {
        cudaEvent_t e0, e1;
        CK(cudaEventCreate(&e0));
        CK(cudaEventCreate(&e1));
        size_t half = pool / 2;
        CK(cudaMemcpyAsync(w + half, w, half, cudaMemcpyDeviceToDevice, c.stream));
        CK(cudaEventRecord(e0, c.stream));
        for (int r = 0; r < 5; r++)
            CK(cudaMemcpyAsync(w + half, w, half, cudaMemcpyDeviceToDevice, c.stream));
        CK(cudaEventRecord(e1, c.stream));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        printf("COPY %.0f GB/s (read + write)\n", 5.0 * 2.0 * (double)half / (ms * 1e-3) / 1e9);
        CK(cudaMemset(w, 0x2a, pool));
    }
    const struct {
        const char *name;
        int no_matvec, early, bps, pdl;
    } vs[] = {
        {"v2", 0, 1, 4, 1},      {"v2-no-early", 0, 0, 4, 1}, {"v2-bps2", 0, 1, 2, 1},
        {"v2-bps8", 0, 1, 8, 1}, {"v2-no-pdl", 0, 1, 4, 0},   {"cublas", 1, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const shape *s = &shapes[i];
        size_t wbytes = (size_t)(s->K * s->N * 2 + 255) / 256 * 256;
        int copies = (int)(pool / wbytes);
        if (copies < 1)
            return fprintf(stderr, "matvec_bench: pool too small\n"), 1;
        for (size_t v = 0; v < sizeof vs / sizeof vs[0]; v++) {
            if (s->nk && vs[v].bps != 4 && !vs[v].no_matvec)
                continue; /* blocks per multiprocessor: the [K, N] split only */
            c.no_matvec = vs[v].no_matvec;
            c.mv_bps = vs[v].bps;
            c.pdl = vs[v].pdl;
            c.const_lo = vs[v].early ? w : NULL;
            c.const_hi = vs[v].early ? w + pool : NULL;
            double us = time_products(&c, s, w, copies, wbytes, x, out, ws, ws_size, reps);
            printf("MV %-28s %-12s %8.2f us %7.0f GB/s\n", s->name, vs[v].name, us,
                   (double)(s->K * s->N * 2) / (us * 1e-6) / 1e9);
        }
    }
    cudaFree(w);
    cudaFree(ws);
    cudaFree(x);
    cudaFree(out);
    cudaFree(counters);
    cublasDestroy(c.blas);
    cudaStreamDestroy(c.stream);
    return 0;
}
