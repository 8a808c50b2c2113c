/*
 * What one dependency between two launches costs on this GPU. A one-token eval is a chain of
 * dependent launches (dozens for GPT-2 117M, hundreds for 1558M), each waiting for all of the one
 * before: this measures that wait alone. A chain of N kernels of B blocks (256 threads), each block
 * reading one word the kernel before wrote and writing one, is captured in a graph and replayed;
 * us per hop = replay time / N. How a kernel waits for the one before:
 *
 *   plain   stream order (the next kernel launches when the one before has finished)
 *   pdl     programmatic dependent launch: launched early, griddepcontrol.wait (what gplan does)
 *   count   launched early (PDL), then polls a counter that each block of the kernel before adds
 *           to (release) after its store, until it reaches B (acquire); no griddepcontrol.wait
 *   count8  the same over 8 counters (block b adds to counter b % 8), polled by 8 threads
 *   flags   the same with a flag per block (a plain release store, no atomics), each thread
 *           polling B / 256 of them
 *
 * The counters, flags and words of a replay are zeroed by memsets at the start of the graph, and
 * the last kernel's word must be N after the replays (one more per kernel). A kernel
 * launched early never waits for anything but the kernel before's counter: PDL launches it only
 * once every block of that kernel has started, so the blocks it waits for are resident.
 *
 * usage: hop_bench [N] [REPLAYS]   prints "HOP variant blocks us_per_hop" lines.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_internal.cuh"
#include "bench/cuda_check.h"

enum { PLAIN, PDL, COUNT, COUNT8, FLAGS, VARIANTS };
static const char *const names[VARIANTS] = {"plain", "pdl", "count", "count8", "flags"};
enum { THREADS = 256, MAX_B = 1024 };

__device__ __forceinline__ unsigned ld_acquire(const unsigned *p)
{
    unsigned v = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
#endif
    return v;
}

__device__ __forceinline__ void add_release(unsigned *p)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(p) : "memory");
#endif
}

__device__ __forceinline__ void st_release(unsigned *p, unsigned v)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
    asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
#endif
}

/*
 * Kernel i of the chain: waits for kernel i - 1 as `variant` says, reads a word it wrote, writes
 * its own. buf [N + 1][MAX_B]; sync: the counters or flags, [N + 1][MAX_B] (row i: kernel i's).
 */
__global__ void __launch_bounds__(THREADS) k_hop(int variant, int i, unsigned *buf, unsigned *sync)
{
    unsigned B = gridDim.x, b = blockIdx.x;
    if (variant == PDL) {
        pdl_wait();
        pdl_trigger();
    } else if (variant != PLAIN) {
        pdl_trigger();
        const unsigned *prev = sync + (size_t)(i - 1) * MAX_B;
        if (i > 0 && variant == COUNT && threadIdx.x == 0)
            while (ld_acquire(prev) < B)
                ;
        if (i > 0 && variant == COUNT8 && threadIdx.x < 8) {
            unsigned want = B / 8 + (threadIdx.x < B % 8);
            while (ld_acquire(prev + threadIdx.x) < want)
                ;
        }
        if (i > 0 && variant == FLAGS)
            for (unsigned k = threadIdx.x; k < B; k += blockDim.x)
                while (ld_acquire(prev + k) == 0)
                    ;
        __syncthreads();
    }
    __shared__ unsigned got;
    if (threadIdx.x == 0)
        got = i > 0 ? __ldcg(buf + (size_t)(i - 1) * MAX_B + (b * 7) % B) : 0;
    __syncthreads();
    if (threadIdx.x == 0) {
        __stcg(buf + (size_t)i * MAX_B + b, got + 1);
        unsigned *own = sync + (size_t)i * MAX_B;
        if (variant == COUNT)
            add_release(own);
        else if (variant == COUNT8)
            add_release(own + b % 8);
        else if (variant == FLAGS)
            st_release(own + b, 1);
    }
}

/* us per hop of a chain of n kernels of B blocks, over `replays` graph replays. */
static double chain_us(int variant, unsigned B, int n, int replays, unsigned *buf, unsigned *sync,
                       cudaStream_t s)
{
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    CK(cudaMemsetAsync(sync, 0, sizeof(unsigned) * (size_t)(n + 1) * MAX_B, s));
    CK(cudaMemsetAsync(buf, 0, sizeof(unsigned) * (size_t)(n + 1) * MAX_B, s));
    for (int i = 0; i < n; i++)
        CK(gp_cu_launch_on(s, variant != PLAIN && i > 0, k_hop, dim3(B), dim3(THREADS), 0,
                           variant, i, buf, sync));
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    for (int r = 0; r < 5; r++)
        CK(cudaGraphLaunch(ge, s));
    cudaEvent_t a, z;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&z));
    CK(cudaEventRecord(a, s));
    for (int r = 0; r < replays; r++)
        CK(cudaGraphLaunch(ge, s));
    CK(cudaEventRecord(z, s));
    CK(cudaEventSynchronize(z));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, z));
    /* every block of the last kernel saw the chain: its word is n (one more per kernel) */
    unsigned last = 0;
    CK(cudaMemcpy(&last, buf + (size_t)(n - 1) * MAX_B, sizeof last, cudaMemcpyDeviceToHost));
    if (last != (unsigned)n) {
        fprintf(stderr, "hop_bench: %s, %u blocks: the chain's last word is %u, not %d\n",
                names[variant], B, last, n);
        exit(1);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(z);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    return ms * 1000.0 / replays / n;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 200, replays = argc > 2 ? atoi(argv[2]) : 50;
    if (n < 2 || replays < 1) {
        fprintf(stderr, "usage: hop_bench [N >= 2] [REPLAYS >= 1]\n");
        return 2;
    }
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    unsigned *buf, *sync;
    CK(cudaMalloc((void **)&buf, sizeof(unsigned) * (size_t)(n + 1) * MAX_B));
    CK(cudaMalloc((void **)&sync, sizeof(unsigned) * (size_t)(n + 1) * MAX_B));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const unsigned blocks[] = {1, (unsigned)sms, 2u * (unsigned)sms, 3u * (unsigned)sms,
                               4u * (unsigned)sms};
    printf("# hop_bench: %d kernels a chain, %d replays, %d multiprocessors, %d threads a block\n",
           n, replays, sms, THREADS);
    for (size_t k = 0; k < sizeof blocks / sizeof blocks[0]; k++)
        for (int v = 0; v < VARIANTS; v++) {
            if (blocks[k] > MAX_B)
                continue;
            printf("HOP %-7s %4u %8.3f\n", names[v], blocks[k],
                   chain_us(v, blocks[k], n, replays, buf, sync, s));
            fflush(stdout);
        }
    cudaFree(buf);
    cudaFree(sync);
    cudaStreamDestroy(s);
    return 0;
}
