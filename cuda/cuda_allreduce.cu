/* The one-shot all-reduce of tensor-parallel sessions over NVLink (cuda/cuda_comm.h says when it
 * is used): one launch per all-reduce per rank, each rank pushing its term into its peers' memory.
 *
 * Protocol, for rank `me` of n, block b of the launch (b owns bytes [b*slice, (b+1)*slice) of every
 * message; ranks issue the same all-reduces in the same order, so block b's launches on every rank
 * are the same sequence):
 *   1. thread 0: e = ++seq[b] (this rank's epoch of block b), par = e & 1;
 *   2. every thread stores its share of in's slice into recv[me][par] of EVERY peer (remote stores:
 *      push, never pull); barrier; thread 0: system fence, then flags[me][b] = e on every peer
 *      (release store, system scope);
 *   3. thread 0 waits until its own flags[p][b] >= e for every peer p (acquire loads), also polling
 *      the host-mapped abort word and a time limit: on either it writes this rank's status word
 *      and stops waiting (sums are then garbage; the host reports the error); barrier;
 *   4. out = sum over r = 0..n-1 in order of (r == me ? in : recv[r][par]), accumulated in f32, so
 *      every rank gets the same bits. in == out is fine: a chunk is read and written by one thread.
 * Why no second barrier: rank q writes slice b of recv[q][par] on rank p again only at epoch e + 2.
 * To get there q's block b passed epoch e + 1's wait, so it saw p's flag for e + 1, which p's
 * block b raised only after its kernel for epoch e had finished reading (the kernels of a stream
 * run in order: each waits for the one before it, pdl_begin), and the acquire of that flag orders
 * p's reads of epoch e before q's stores of epoch e + 2. Epoch e + 1 uses the other parity, which
 * p may still be reading for e while q writes e + 1. Flags only grow, so `>=` never misses one.
 */
#include <stdint.h>

#include "cuda/cuda_comm.h"
#include "cuda/cuda_internal.cuh"

/* Storage and f32 conversions of a dtype's elements; a 16-byte chunk holds L of them. */
template <int DT> struct ar_type;
template <> struct ar_type<GP_F32> {
    typedef uint32_t U;
    static __device__ __forceinline__ float get(U u) { return __uint_as_float(u); }
    static __device__ __forceinline__ U put(float f) { return __float_as_uint(f); }
};
template <> struct ar_type<GP_F16> {
    typedef uint16_t U;
    static __device__ __forceinline__ float get(U u) { return __half2float(__ushort_as_half(u)); }
    static __device__ __forceinline__ U put(float f) { return __half_as_ushort(__float2half_rn(f)); }
};
template <> struct ar_type<GP_BF16> {
    typedef uint16_t U;
    static __device__ __forceinline__ float get(U u)
    {
        return __bfloat162float(__ushort_as_bfloat16(u));
    }
    static __device__ __forceinline__ U put(float f)
    {
        return __bfloat16_as_ushort(__float2bfloat16_rn(f));
    }
};

template <typename U> union ar_chunk {
    uint4 v;
    U u[16 / sizeof(U)];
};

/* len bytes (a whole number of elements, <= 16) at p as a chunk, zero-filled past len; one 16-byte
 * load when the chunk is whole and p aligned (vec). */
template <typename U>
__device__ __forceinline__ uint4 ar_load(const unsigned char *p, unsigned len, int vec)
{
    ar_chunk<U> c;
    if (vec && len == 16) {
        c.v = *(const uint4 *)p;
        return c.v;
    }
    c.v = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (unsigned k = 0; k < 16 / sizeof(U); k++) /* fixed bounds: c stays in registers */
        if (k < len / sizeof(U))
            c.u[k] = ((const U *)p)[k];
    return c.v;
}

template <typename U>
__device__ __forceinline__ void ar_store(unsigned char *p, unsigned len, int vec, const ar_chunk<U> &c)
{
    if (vec && len == 16) {
        *(uint4 *)p = c.v;
        return;
    }
#pragma unroll
    for (unsigned k = 0; k < 16 / sizeof(U); k++)
        if (k < len / sizeof(U))
            ((U *)p)[k] = c.u[k];
}

__device__ __forceinline__ void st_release_sys(unsigned long long *p, unsigned long long v)
{
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ unsigned long long ld_acquire_sys(const unsigned long long *p)
{
    unsigned long long v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

/* Host-mapped words: read and written at system scope, no ordering needed. */
__device__ __forceinline__ unsigned ld_relaxed_sys(const unsigned *p)
{
    unsigned v;
    asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void st_relaxed_sys(unsigned *p, unsigned v)
{
    asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ unsigned long long globaltimer_ns()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* Thread 0: waits for every peer's flag of epoch e of block b; GP_AR_OK, or why it stopped. The
 * abort word lives in host memory (a PCIe read) and the clock is coarse: both every 64 polls. */
__device__ unsigned ar_wait(const gp_cuda_ar_peers &a, unsigned b, unsigned long long e)
{
    const unsigned long long t0 = globaltimer_ns();
    for (int p = 0; p < a.n; p++) {
        if (p == a.rank)
            continue;
        const unsigned long long *f = a.flags[a.rank] + (size_t)p * GP_AR_MAX_BLOCKS + b;
        for (unsigned it = 1; ld_acquire_sys(f) < e; it++) {
            if (it % 64)
                continue;
            if (ld_relaxed_sys(a.abort))
                return GP_AR_ABORTED;
            if (globaltimer_ns() - t0 > a.timeout_ns)
                return GP_AR_TIMEOUT | (unsigned)p << 8;
        }
    }
    return GP_AR_OK;
}

/* One launch: gridDim.x blocks, block b summing bytes [b*slice, min(bytes, (b+1)*slice)).
 * in, out [bytes] on this rank's device; vec: both 16-byte aligned. */
template <int DT>
__global__ void __launch_bounds__(1024, 1)
    k_all_reduce(gp_cuda_ar_peers a, const unsigned char *in, unsigned char *out,
                 unsigned long long bytes, int vec)
{
    typedef typename ar_type<DT>::U U;
    enum { L = 16 / sizeof(U) };
    __shared__ unsigned long long sh_e;
    pdl_begin(); /* in is the kernel before's output: nothing is read before it finished */
    const unsigned b = blockIdx.x;
    const unsigned long long lo = (unsigned long long)b * a.slice;
    const unsigned long long hi = min(bytes, lo + a.slice);
    const unsigned chunks = (unsigned)((hi - lo + 15) / 16);
    if (threadIdx.x == 0) {
        /* Through L2: the kernel before this one may have run block b on another multiprocessor. */
        sh_e = __ldcg(a.seq + b) + 1;
        __stcg(a.seq + b, sh_e);
    }
    __syncthreads();
    const unsigned long long e = sh_e;
    const size_t par = (size_t)(e & 1);
    const int me = a.rank;

    /* 2. Push: this rank's row (me, par) in every peer's receive buffer. */
    const size_t row = ((size_t)me * 2 + par) * GP_AR_P2P_MAX;
    for (unsigned c = threadIdx.x; c < chunks; c += blockDim.x) {
        const unsigned long long off = lo + 16ull * c;
        const unsigned len = (unsigned)min(16ull, hi - off);
        const uint4 v = ar_load<U>(in + off, len, vec);
        for (int p = 0; p < a.n; p++)
            if (p != me)
                *(uint4 *)(a.recv[p] + row + off) = v;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence_system(); /* the block's stores (ordered before by the barrier) first */
        for (int p = 0; p < a.n; p++)
            if (p != me)
                st_release_sys(a.flags[p] + (size_t)me * GP_AR_MAX_BLOCKS + b, e);
        /* 3. Wait for the peers' rows. */
        unsigned st = ar_wait(a, b, e);
        if (st == GP_AR_ABORTED) {
            /* Keeps a time-out's word: whoever set abort after its own timeout wrote its status
             * first (the fences order the two). */
            __threadfence_system();
            if (ld_relaxed_sys(a.status) == GP_AR_OK)
                st_relaxed_sys(a.status, st);
        } else if (st != GP_AR_OK) {
            /* Then every other wait, here and on the other devices, ends now instead of after
             * its own time limit. */
            st_relaxed_sys(a.status, st);
            __threadfence_system();
            st_relaxed_sys(a.abort, (unsigned)a.rank + 1);
        }
    }
    __syncthreads();

    /* 4. Sum in rank order. Received rows are read through L2 (ld.cg): L1 may hold the bytes
     * of this parity from two epochs ago. */
    const unsigned char *mine = a.recv[me];
    for (unsigned c = threadIdx.x; c < chunks; c += blockDim.x) {
        const unsigned long long off = lo + 16ull * c;
        const unsigned len = (unsigned)min(16ull, hi - off);
        float acc[L];
        for (int r = 0; r < a.n; r++) {
            ar_chunk<U> t;
            if (r == me)
                t.v = ar_load<U>(in + off, len, vec);
            else
                t.v = __ldcg((const uint4 *)(mine + ((size_t)r * 2 + par) * GP_AR_P2P_MAX + off));
#pragma unroll
            for (int k = 0; k < L; k++)
                acc[k] = r == 0 ? ar_type<DT>::get(t.u[k]) : acc[k] + ar_type<DT>::get(t.u[k]);
        }
        ar_chunk<U> o;
#pragma unroll
        for (int k = 0; k < L; k++)
            o.u[k] = ar_type<DT>::put(acc[k]);
        ar_store<U>(out + off, len, vec, o);
    }
}

extern "C" int gp_cuda_ar_launch(const gp_cuda_ar_peers *p, const void *in, void *out,
                                 size_t count, gp_dtype dt, cudaStream_t s, int pdl)
{
    size_t bytes = count * gp_dtype_size(dt);
    if (bytes == 0)
        return cudaSuccess;
    if (bytes > GP_AR_P2P_MAX || p->slice < GP_AR_MIN_SLICE || p->slice % 16)
        return cudaErrorInvalidValue;
    unsigned blocks = (unsigned)((bytes + p->slice - 1) / p->slice);
    size_t chunks = ((bytes < p->slice ? bytes : p->slice) + 15) / 16;
    unsigned threads = chunks >= 1024 ? 1024 : (unsigned)(chunks + 31) / 32 * 32;
    int vec = ((uintptr_t)in | (uintptr_t)out) % 16 == 0;

    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(blocks);
    cfg.blockDim = dim3(threads);
    cfg.stream = s;
    cfg.attrs = at;
    cfg.numAttrs = pdl ? 1 : 0;
    const unsigned char *i8 = (const unsigned char *)in;
    unsigned char *o8 = (unsigned char *)out;
    unsigned long long nb = bytes;
    cudaError_t e;
    switch (dt) {
    case GP_F32:
        e = cudaLaunchKernelEx(&cfg, k_all_reduce<GP_F32>, *p, i8, o8, nb, vec);
        break;
    case GP_F16:
        e = cudaLaunchKernelEx(&cfg, k_all_reduce<GP_F16>, *p, i8, o8, nb, vec);
        break;
    case GP_BF16:
        e = cudaLaunchKernelEx(&cfg, k_all_reduce<GP_BF16>, *p, i8, o8, nb, vec);
        break;
    default:
        return cudaErrorInvalidValue;
    }
    return e;
}

extern "C" int gp_cuda_ar_load(void)
{
    cudaFuncAttributes fa;
    cudaError_t e = cudaFuncGetAttributes(&fa, k_all_reduce<GP_F32>);
    if (e == cudaSuccess)
        e = cudaFuncGetAttributes(&fa, k_all_reduce<GP_F16>);
    if (e == cudaSuccess)
        e = cudaFuncGetAttributes(&fa, k_all_reduce<GP_BF16>);
    return e;
}
