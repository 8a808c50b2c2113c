/* Throughput of the CPU kernels that dominate inference: matmul against a Linear weight (decode and
 * prefill shapes, f32 and f16 weights), attention over a KV cache, and the thread pool's overhead.
 * Usage: bench_cpu_kernels [threads] [matmul|attention] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/cpu_kernels.h"
#include "cpu/threadpool.h"
#include "ir/f16.h"

typedef struct {
    gp_op op;
    gp_attrs at;
    gp_ktensor out, in[4];
    int n_in;
    void *ws;
    size_t ws_size;
} node;

static void node_fn(void *ctx, int ith, int nth)
{
    node *n = ctx;
    gp_cpu_compute(n->op, &n->at, &n->out, n->in, n->n_in, n->ws, n->ws_size, ith, nth);
}

static void noop_fn(void *ctx, int ith, int nth)
{
    (void)ctx, (void)ith, (void)nth;
}

/* 100 barriers: the cost of the runtime's barrier between two nodes. */
static void barrier_fn(void *ctx, int ith, int nth)
{
    (void)ith, (void)nth;
    for (int i = 0; i < 100; i++)
        gp_threadpool_barrier(ctx);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A contiguous tensor of random values in [-1, 1]. */
static gp_ktensor tensor(gp_dtype t, int ndim, const int64_t *ne)
{
    gp_ktensor k = {0};
    k.dtype = t;
    k.ndim = ndim;
    int64_t es = (int64_t)gp_dtype_size(t), count = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        k.ne[d] = ne[d];
        k.nb[d] = es * count;
        count *= ne[d];
    }
    k.data = malloc((size_t)(es * count));
    for (int64_t i = 0; i < count; i++) {
        float v = (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
        if (t == GP_F32)
            ((float *)k.data)[i] = v;
        else if (t == GP_F16)
            ((uint16_t *)k.data)[i] = gp_f32_to_f16(v);
        else if (t == GP_I32)
            ((int32_t *)k.data)[i] = 0;
        else
            ((uint16_t *)k.data)[i] = gp_f32_to_bf16(v);
    }
    return k;
}

/* Seconds per run of n through the pool (best of a few batches). */
static double time_node(gp_threadpool *pool, node *n)
{
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        int iters = 0;
        double t0 = now(), t;
        do {
            gp_threadpool_run(pool, node_fn, n);
            iters++;
            t = now() - t0;
        } while (t < 0.2);
        if (t / iters < best)
            best = t / iters;
    }
    return best;
}

static void bench_matmul(gp_threadpool *pool, int64_t M, int64_t K, int64_t N, gp_dtype wt)
{
    node n = {.op = GP_OP_MATMUL, .n_in = 2};
    n.at.i[GP_MATMUL_TB] = 1; /* x [M, K] times W [N, K]^T */
    n.in[0] = tensor(GP_F32, 2, (int64_t[]){M, K});
    n.in[1] = tensor(wt, 2, (int64_t[]){N, K});
    n.out = tensor(GP_F32, 2, (int64_t[]){M, N});
    double s = time_node(pool, &n);
    printf("matmul M %5lld K %5lld N %5lld W %-4s %9.3f ms %7.2f GFLOP/s %7.2f GB/s of W\n",
           (long long)M, (long long)K, (long long)N, gp_dtype_name(wt), s * 1e3,
           2.0 * (double)(M * K * N) / s * 1e-9,
           (double)(N * K) * (double)gp_dtype_size(wt) / s * 1e-9);
    free(n.in[0].data);
    free(n.in[1].data);
    free(n.out.data);
}

static void bench_attention(gp_threadpool *pool, int64_t T, int64_t H, int64_t G, int64_t D,
                            int64_t S, int nth)
{
    node n = {.op = GP_OP_ATTENTION, .n_in = 4};
    n.at.f[GP_ATTENTION_SCALE] = 0.125;
    n.in[0] = tensor(GP_F32, 3, (int64_t[]){T, H, D});
    n.in[1] = tensor(GP_F16, 3, (int64_t[]){S, G, D});
    n.in[2] = tensor(GP_F16, 3, (int64_t[]){S, G, D});
    n.in[3] = tensor(GP_I32, 1, (int64_t[]){T});
    for (int64_t t = 0; t < T; t++)
        ((int32_t *)n.in[3].data)[t] = (int32_t)(S - T + t);
    n.out = tensor(GP_F32, 3, (int64_t[]){T, H, D});
    n.ws_size = gp_cpu_workspace_bytes(n.op, NULL, &n.out, n.in, 4, nth);
    n.ws = malloc(n.ws_size);
    double s = time_node(pool, &n);
    printf("attention T %4lld H %3lld G %3lld D %4lld S %5lld f16 cache %9.3f ms\n", (long long)T,
           (long long)H, (long long)G, (long long)D, (long long)S, s * 1e3);
    for (int i = 0; i < 4; i++)
        free(n.in[i].data);
    free(n.out.data);
    free(n.ws);
}

int main(int argc, char **argv)
{
    int nth = argc > 1 ? atoi(argv[1]) : 1;
    gp_threadpool *pool = gp_threadpool_new(nth);
    if (!pool) {
        fprintf(stderr, "bench_cpu_kernels: cannot start %d threads\n", nth);
        return 1;
    }
    printf("threads %d\n", nth);
    int iters = 20000;
    double t0 = now();
    for (int i = 0; i < iters; i++)
        gp_threadpool_run(pool, noop_fn, NULL);
    printf("empty run %.2f us\n", (now() - t0) / iters * 1e6);
    t0 = now();
    for (int i = 0; i < 200; i++)
        gp_threadpool_run(pool, barrier_fn, pool);
    printf("barrier %.2f us\n", (now() - t0) / (200 * 100) * 1e6);

    const char *only = argc > 2 ? argv[2] : "";
    if (strcmp(only, "attention") != 0) {
        bench_matmul(pool, 1, 4096, 4096, GP_F16);
        bench_matmul(pool, 1, 4096, 4096, GP_F32);
        bench_matmul(pool, 1, 4096, 4096, GP_BF16);
        bench_matmul(pool, 1, 2048, 5632, GP_F16); /* TinyLlama's FFN, decode */
        bench_matmul(pool, 1, 2048, 65536, GP_F16); /* 256 MiB: from memory, not a cache */
        bench_matmul(pool, 1, 768, 50257, GP_F16);  /* GPT-2 LM head */
        bench_matmul(pool, 128, 1024, 1024, GP_F32);
        bench_matmul(pool, 128, 1024, 1024, GP_F16);
        bench_matmul(pool, 128, 2048, 5632, GP_F16); /* TinyLlama's FFN, prompt of 128 */
        bench_matmul(pool, 512, 768, 3072, GP_F32);
    }
    if (strcmp(only, "matmul") == 0) {
        gp_threadpool_free(pool);
        return 0;
    }
    bench_attention(pool, 1, 32, 8, 128, 2048, nth);
    bench_attention(pool, 128, 12, 12, 64, 512, nth);
    gp_threadpool_free(pool);
    return 0;
}
