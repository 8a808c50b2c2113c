/* The GPU's read bandwidth, the bound of the one-token products on quantized weights (test_cuda's
 * quant speed table, bench/gpu_gguf.sh): blocks stream a buffer once in 16-byte loads, four in
 * flight a thread, grid-strided over as many blocks as are resident, and keep an xor of what they
 * read (so the loads are not dropped). Per size: the mean of 20 back-to-back launches after 3
 * (the speed table's way), in us and GB/s. Sizes: the speed table's products (q4_k 4096 x 4096
 * and 14336 x 4096; q8_0 4096 x 14336), and 1 GiB. Usage: read_bw */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

__global__ void __launch_bounds__(512) k_read(const uint4 *p, size_t n, unsigned *out)
{
    unsigned acc = 0;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        uint4 a = __ldcs(p + i), b = __ldcs(p + i + stride), c = __ldcs(p + i + 2 * stride),
              d = __ldcs(p + i + 3 * stride);
        acc ^= a.x ^ a.w ^ b.y ^ b.z ^ c.x ^ c.w ^ d.y ^ d.z;
    }
    for (; i < n; i += stride)
        acc ^= __ldcs(p + i).x;
    if (acc == 0x9e3779b9u) /* never in practice: keeps the loads */
        out[blockIdx.x] = acc;
}

int main(void)
{
    const size_t sizes[4] = {(size_t)4096 * 16 * 144, (size_t)14336 * 16 * 144,
                             (size_t)4096 * 448 * 34, (size_t)1 << 30};
    int dev = 0, sms = 0, bps = 0;
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
        fprintf(stderr, "read_bw: no CUDA device\n");
        return 1;
    }
    sms = prop.multiProcessorCount;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps, k_read, 512, 0);
    void *buf = NULL;
    unsigned *out = NULL;
    if (cudaMalloc(&buf, sizes[3]) != cudaSuccess || cudaMalloc(&out, 65536 * 4) != cudaSuccess) {
        fprintf(stderr, "read_bw: cudaMalloc failed\n");
        return 1;
    }
    cudaMemset(buf, 1, sizes[3]);
    printf("read bandwidth (%s, %d multiprocessors)\n  %12s %10s %10s\n", prop.name, sms, "bytes",
           "us", "GB/s");
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (int s = 0; s < 4; s++) {
        size_t n = sizes[s] / 16;
        unsigned blocks = (unsigned)(sms * (bps > 0 ? bps : 1));
        for (int i = 0; i < 3; i++)
            k_read<<<blocks, 512>>>((const uint4 *)buf, n, out);
        cudaEventRecord(e0);
        for (int i = 0; i < 20; i++)
            k_read<<<blocks, 512>>>((const uint4 *)buf, n, out);
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        double us = 1e3 * ms / 20;
        printf("  %12zu %10.1f %10.0f\n", sizes[s], us, (double)sizes[s] / (us * 1e3));
    }
    if (cudaGetLastError() != cudaSuccess) {
        fprintf(stderr, "read_bw: a launch failed\n");
        return 1;
    }
    return 0;
}
