/* The one-shot all-reduce of tensor-parallel sessions over NVLink (cuda/cuda_comm.h says when it
 * is used): one launch per all-reduce per rank, each rank pushing its term into its peers' memory.
 *
 * Protocol, for rank `me` of n and block b of the launch. Each row of a receive buffer (one per
 * sender and parity) has GP_AR_BLOCKS slots of GP_AR_SLOT bytes, and block b only ever touches
 * slot b, whatever part of the message it sums (block_bytes per block for small messages, 1/16th
 * of it for large ones). Ranks issue the same all-reduces in the same order, so the launches that
 * have a block b are the same sequence on every rank, and block b keeps its own epochs:
 *   1. thread 0: e = ++seq[b] (this rank's epoch of block b), par = e & 1 (before the PDL wait
 *      when the launch before is not an all-reduce: see not_after);
 *   2. every thread stores its 16 bytes of in into slot b of row (me, par) of EVERY peer (remote
 *      stores: push, never pull); barrier; thread 0 writes e into flags[me][b] on every peer with
 *      a release store at system scope;
 *   3. thread 0 waits until its own flags[p][b] >= e for every peer p (acquire loads), also polling
 *      the host-mapped abort word and a time limit: on either it writes this rank's status word
 *      and stops waiting (sums are then garbage; the host reports the error); barrier;
 *   4. out = sum over r = 0..n-1 in order of (r == me ? in : row (r, par)), accumulated in f32, so
 *      every rank gets the same bits. in == out is fine: a chunk is read and written by one thread.
 * Why no second barrier: rank q writes slot b of row (q, par) on rank p again only at block b's
 * epoch e + 2. To get there q's block b passed epoch e + 1's wait, so it saw p's flag for e + 1,
 * which p's block b raised only after p's kernel for epoch e had finished reading (the kernels of
 * a stream run in order: each waits for the one before it, pdl_begin), and the acquire of that
 * flag orders p's reads of epoch e before q's stores of epoch e + 2. Epoch e + 1 writes the other
 * parity, which p may still be reading for e. Flags only grow, so `>=` never misses one.
 */
#include <stdint.h>
#include <string.h>

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
    static __device__ __forceinline__ U put(float f)
    {
        return __half_as_ushort(__float2half_rn(f));
    }
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
__device__ __forceinline__ void ar_store(unsigned char *p, unsigned len, int vec,
                                         const ar_chunk<U> &c)
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
        const unsigned long long *f = a.flags[a.rank] + (size_t)p * GP_AR_BLOCKS + b;
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

/* Thread 0: *e = ++seq[b], this launch's epoch of block b. Only all-reduces read and write seq;
 * through L2, since the one before may have run block b on another multiprocessor. */
__device__ __forceinline__ void next_epoch(const gp_cuda_ar_peers &a, unsigned b,
                                           unsigned long long *e)
{
    if (threadIdx.x == 0) {
        *e = __ldcg(a.seq + b) + 1;
        __stcg(a.seq + b, *e);
    }
}

/* The norm after an all-reduce (gp_cuda_ar_norm), when one block sums the whole f32 row: out =
 * norm(sum). */
struct ARNORM {
    int on;
    NORM nm;
    KT out;   /* [bytes / 4] */
    int vec4; /* out is aligned to 4 elements: a thread's 4 go in one store */
};

/* Thread t's elements of the row, [4t, 4t + n) of N, summed in v (0 past n): their norm to
 * an.out, with the weights w and bias bs read before the kernel's wait. The sums over the row are
 * block reductions (every thread of the block calls it). */
__device__ __forceinline__ void ar_norm(const ARNORM &an, const float (&v)[4], const float (&w)[4],
                                        const float (&bs)[4], int n, int64_t N)
{
    __shared__ float red[32];
    int64_t e0 = 4 * (int64_t)threadIdx.x;
    float mean, s = norm_sq_regs(v, N, an.nm.is_ln, red, &mean, e0, 1);
    float inv = 1.0f / sqrtf(block_reduce(s, red, 0) / (float)N + an.nm.eps);
    float y[4];
#pragma unroll
    for (int k = 0; k < 4; k++)
        y[k] = norm_val(an.nm, v[k], mean, inv, w[k], bs[k]);
    /* One store of the four when they are whole and aligned: four stores delay the late rank,
     * which every other rank waits for. */
    if (an.vec4 && n == 4) {
        st_f4(an.out.p + e0 * an.out.nb[3], an.out.t, y);
        return;
    }
#pragma unroll
    for (int k = 0; k < 4; k++)
        if (k < n)
            st_f(an.out.p + (e0 + k) * an.out.nb[3], an.out.t, y[k]);
}

/* One launch: gridDim.x <= GP_AR_BLOCKS blocks, block b summing bytes [b*per_block, min(bytes,
 * (b+1)*per_block)) of the message (per_block <= GP_AR_SLOT, a multiple of 16), thread t its t-th
 * 16-byte chunk. in, out [bytes] on this rank's device; vec: both 16-byte aligned. With an.on (f32,
 * one block for the whole row) the block also writes the norm of the sum. */
template <int DT>
__global__ void __launch_bounds__(1024, 1)
    k_all_reduce(gp_cuda_ar_peers a, const unsigned char *in, unsigned char *out,
                 unsigned long long bytes, unsigned per_block, int vec, ARNORM an, int not_after)
{
    typedef typename ar_type<DT>::U U;
    enum { L = 16 / sizeof(U) };
    __shared__ unsigned long long sh_e;
    const unsigned b = blockIdx.x;
    const unsigned long long off = (unsigned long long)b * per_block + 16ull * threadIdx.x;
    const unsigned long long hi = min(bytes, (unsigned long long)(b + 1) * per_block);
    const bool have = 16ull * threadIdx.x < per_block && off < hi;
    const unsigned len = have ? (unsigned)min(16ull, hi - off) : 0;
    /* The norm's weights of this thread's elements: no kernel writes weights, so they are read
     * before the wait, all at once. */
    const int ne = (int)(len / sizeof(U));
    float w[4] = {0.0f, 0.0f, 0.0f, 0.0f}, bs[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (DT == GP_F32 && an.on) {
        uint32_t wb[4] = {0, 0, 0, 0}, bb[4] = {0, 0, 0, 0};
        int64_t e0 = (int64_t)(off / 4);
#pragma unroll
        for (int k = 0; k < 4; k++)
            if (k < ne) {
                wb[k] = ld_bits(an.nm.w.p + (e0 + k) * an.nm.w.nb[3], an.nm.w.t);
                if (an.nm.has_b)
                    bb[k] = ld_bits(an.nm.b.p + (e0 + k) * an.nm.b.nb[3], an.nm.b.t);
            }
#pragma unroll
        for (int k = 0; k < 4; k++) {
            w[k] = bits_f(wb[k], an.nm.w.t);
            bs[k] = bits_f(bb[k], an.nm.b.t);
        }
    }
    /* With not_after, the all-reduce before this one is at least two launches back, so it has
     * finished once this kernel runs at all (the launch before it waited for it before letting
     * this one start): the epoch need not wait. */
    if (not_after)
        next_epoch(a, b, &sh_e);
    pdl_begin(); /* in is the kernel before's output: nothing is read before it finished */
    if (!not_after)
        next_epoch(a, b, &sh_e);
    ar_chunk<U> mine;
    mine.v = have ? ar_load<U>(in + off, len, vec) : make_uint4(0, 0, 0, 0);
    __syncthreads();
    const unsigned long long e = sh_e;
    const size_t par = (size_t)(e & 1);
    const int me = a.rank;
    /* Where this thread's chunk lives in a row: block b's slot, whatever the message's size. */
    const size_t slot = (size_t)b * GP_AR_SLOT + 16u * threadIdx.x;

    /* 2. Push: this rank's row (me, par) in every peer's receive buffer. */
    if (have)
        for (int p = 0; p < a.n; p++)
            if (p != me)
                *(uint4 *)(a.recv[p] + ((size_t)me * 2 + par) * GP_AR_P2P_MAX + slot) = mine.v;
    __syncthreads();
    if (threadIdx.x == 0) {
        /* A release at system scope: the block's stores, ordered before it by the barrier, are
         * visible to whoever acquires the flag. (A __threadfence_system() before it would add
         * nothing to that ordering, only time.) */
        for (int p = 0; p < a.n; p++)
            if (p != me)
                st_release_sys(a.flags[p] + (size_t)me * GP_AR_BLOCKS + b, e);
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
    float acc[L];
#pragma unroll
    for (int k = 0; k < L; k++)
        acc[k] = 0.0f;
    if (have) {
        /* 4. Sum in rank order. Received rows are read through L2 (ld.cg): L1 may hold the bytes
         * of this parity from two epochs ago. */
        for (int r = 0; r < a.n; r++) {
            ar_chunk<U> t;
            const unsigned char *from = a.recv[me] + ((size_t)r * 2 + par) * GP_AR_P2P_MAX + slot;
            if (r == me)
                t = mine;
            else
                t.v = __ldcg((const uint4 *)from);
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
    /* 5. The norm after the all-reduce: the block holds the whole row. */
    if (DT == GP_F32 && an.on) {
        float v[4];
#pragma unroll
        for (int k = 0; k < 4; k++)
            v[k] = acc[k % L];
        ar_norm(an, v, w, bs, ne, (int64_t)(bytes / 4));
    }
}

/* A contiguous row [n] of dtype t at p, as the kernels' tensors. */
static KT row_kt(const void *p, gp_dtype t, int64_t n)
{
    KT k;
    memset(&k, 0, sizeof k);
    k.p = (char *)p;
    k.t = t;
    for (int d = 0; d < 4; d++) {
        k.sym[d] = -1;
        k.ne[d] = 1;
    }
    k.ne[3] = n;
    k.nb[3] = (int64_t)gp_dtype_size(t);
    return k;
}

extern "C" int gp_cuda_ar_launch(const gp_cuda_ar_peers *p, const void *in, void *out,
                                 size_t count, gp_dtype dt, cudaStream_t s, int pdl,
                                 const gp_cuda_ar_norm *norm, int not_after)
{
    size_t bytes = count * gp_dtype_size(dt);
    if (bytes == 0)
        return cudaSuccess;
    if (bytes > GP_AR_P2P_MAX || p->block_bytes < 16 || p->block_bytes > GP_AR_SLOT ||
        p->block_bytes % 16)
        return cudaErrorInvalidValue;
    /* block_bytes per block up to GP_AR_BLOCKS blocks, then bytes / GP_AR_BLOCKS per block (at
     * most GP_AR_SLOT, since bytes <= GP_AR_P2P_MAX). */
    size_t per = (bytes + GP_AR_BLOCKS - 1) / GP_AR_BLOCKS;
    per = (per + 15) / 16 * 16;
    if (per < p->block_bytes)
        per = p->block_bytes;
    unsigned blocks = (unsigned)((bytes + per - 1) / per);
    size_t chunks = ((bytes < per ? bytes : per) + 15) / 16;
    unsigned threads = (unsigned)(chunks + 31) / 32 * 32;
    int vec = ((uintptr_t)in | (uintptr_t)out) % 16 == 0;

    const unsigned char *i8 = (const unsigned char *)in;
    unsigned char *o8 = (unsigned char *)out;
    unsigned long long nb = bytes;
    unsigned pb = (unsigned)per;
    ARNORM an;
    memset(&an, 0, sizeof an);
    if (norm && gp_cuda_ar_norm_ok(norm, count, dt)) {
        /* One block for the whole row (gp_cuda_ar_norm_ok: at most 1024 chunks of 16 bytes). */
        an.on = 1;
        an.nm.is_ln = norm->is_ln;
        an.nm.eps = norm->eps;
        an.nm.w = row_kt(norm->w, norm->w_dt, (int64_t)count);
        an.nm.has_b = norm->b != NULL;
        an.nm.b = an.nm.has_b ? row_kt(norm->b, norm->b_dt, (int64_t)count) : an.nm.w;
        an.out = row_kt(norm->out, norm->out_dt, (int64_t)count);
        an.vec4 = (uintptr_t)norm->out % (4 * gp_dtype_size(norm->out_dt)) == 0;
        per = (bytes + 15) / 16 * 16;
        pb = (unsigned)per;
        blocks = 1;
        threads = (unsigned)((per / 16 + 31) / 32 * 32);
    }
    const size_t smem = 0;
    dim3 grid(blocks), block(threads);
    switch (dt) {
    case GP_F32:
        return gp_cu_launch_on(s, pdl, k_all_reduce<GP_F32>, grid, block, smem, *p, i8, o8, nb,
                               pb, vec, an, not_after);
    case GP_F16:
        return gp_cu_launch_on(s, pdl, k_all_reduce<GP_F16>, grid, block, smem, *p, i8, o8, nb,
                               pb, vec, an, not_after);
    case GP_BF16:
        return gp_cu_launch_on(s, pdl, k_all_reduce<GP_BF16>, grid, block, smem, *p, i8, o8, nb,
                               pb, vec, an, not_after);
    default:
        return cudaErrorInvalidValue;
    }
}

extern "C" int gp_cuda_ar_norm_ok(const gp_cuda_ar_norm *norm, size_t count, gp_dtype dt)
{
    size_t bytes = count * sizeof(float);
    return dt == GP_F32 && count > 0 && count == norm->n && bytes <= 16 * 1024 &&
           bytes <= GP_AR_SLOT && norm->w && norm->out;
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
