/* Device helpers shared by the CUDA kernel files: tensors right-aligned to four dims whose symbolic
 * dims resolve from the param block at run time, dtype loads and stores, block reductions. */
#ifndef GP_CUDA_INTERNAL_CUH
#define GP_CUDA_INTERNAL_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "cuda/cuda_kernels.h"
#include "ir/f16.h"

/* A tensor right-aligned to four dims (missing outer dims: ne 1, nb 0, sym -1). Passed by value. */
struct KT {
    char *p;
    int t;         /* gp_dtype */
    int sym[4];
    int64_t ne[4]; /* launch sizes on the host; exact sizes after kt_resolve on the device */
    int64_t nb[4];
};

/* Host: a gp_cu_tensor as a KT with symbolic dims at their launch sizes (ctx->h_syms). */
KT gp_kt_of(const gp_cu_ctx *c, const gp_cu_tensor *k);
/* Host: elements of a KT's first `nd` dims (rows: nd = 3). */
static inline int64_t kt_count(const KT &k, int nd)
{
    int64_t n = 1;
    for (int d = 0; d < nd; d++)
        n *= k.ne[d];
    return n;
}

/* Device: the eval's exact sizes. */
__device__ __forceinline__ void kt_resolve(KT &k, const int64_t *syms)
{
#pragma unroll
    for (int d = 0; d < 4; d++)
        if (k.sym[d] >= 0)
            k.ne[d] = syms[k.sym[d]];
}

/* Byte offset of element (i0, i1, i2, i3) of t, whose dims of 1 broadcast. */
__device__ __forceinline__ int64_t kt_off(const KT &t, int64_t i0, int64_t i1, int64_t i2,
                                          int64_t i3)
{
    return (t.ne[0] == 1 ? 0 : i0 * t.nb[0]) + (t.ne[1] == 1 ? 0 : i1 * t.nb[1]) +
           (t.ne[2] == 1 ? 0 : i2 * t.nb[2]) + (t.ne[3] == 1 ? 0 : i3 * t.nb[3]);
}

/* Byte offset of row r (all dims but the last) of shape o within t. */
__device__ __forceinline__ int64_t kt_row_off(const KT &t, const KT &o, int64_t r)
{
    int64_t i2 = r % o.ne[2], q = r / o.ne[2];
    return kt_off(t, q / o.ne[1], q % o.ne[1], i2, 0);
}

/*
 * Row-span kernels (k_elementwise, k_convert, k_epilogue): a block of SPAN_THREADS takes SPAN
 * elements of one row at a time, grid-stride over rows x spans, so that a row's offsets are found
 * once per span, not per element; each thread loads its SPAN_U elements before it stores them,
 * so that their round trips overlap.
 */
enum { SPAN_THREADS = 256, SPAN_U = 4, SPAN = SPAN_U * SPAN_THREADS };

/* Host: blocks for n units of a grid-stride loop: n, within [1, 8192]. */
static inline unsigned gp_cu_blocks(int64_t n)
{
    return (unsigned)(n < 1 ? 1 : n > 8192 ? 8192 : n);
}

/* Host: a row-span kernel's blocks for `rows` rows of C elements. */
static inline unsigned span_blocks(int64_t rows, int64_t C)
{
    return gp_cu_blocks(rows * ((C + SPAN - 1) / SPAN));
}

__device__ __forceinline__ float ld_f(const char *p, int t)
{
    switch (t) {
    case GP_F32:
        return *(const float *)p;
    case GP_F16:
        return __half2float(*(const __half *)p);
    case GP_BF16:
        return __bfloat162float(*(const __nv_bfloat16 *)p);
    default:
        return (float)*(const int32_t *)p; /* rounds to nearest, as the CPU's cast */
    }
}

/* Rope r's frequency of pair i, as gp_rope_freq (ir/core.c) computes it: theta^(-2i/n) in
 * double, divided by the factor with linear scaling (orig_len GP_ROPE_LINEAR), rescaled by
 * Llama 3's bands when r.orig_len > 0 (the same operations in the same precisions: low and high
 * stay float, as on the host). */
__device__ __forceinline__ double rope_freq(const gp_cu_rope &r, int64_t i)
{
    double freq = pow(r.theta, -2.0 * (double)i / (double)r.n);
    if (r.orig_len == GP_ROPE_LINEAR)
        return freq / r.factor;
    if (r.orig_len <= 0)
        return freq;
    float lo = r.low, hi = r.high;
    double len = (double)r.orig_len, wavelen = 2.0 * 3.14159265358979323846 / freq;
    if (wavelen < len / hi)
        return freq; /* high frequencies: unchanged */
    if (wavelen > len / lo)
        return freq / r.factor; /* low frequencies: stretched by factor */
    double s = (len / wavelen - lo) / (hi - lo);
    return (1.0 - s) * freq / r.factor + s * freq;
}

/* Rope pair i's angle at position p, as the CPU's rope computes it: cos and sin of p * freq in
 * double (p * freq in f32 loses too much at long positions), rounded to f32. */
__device__ __forceinline__ void rope_cos_sin(const gp_cu_rope &r, double p, int64_t i, float *c,
                                             float *s)
{
    double f = rope_freq(r, i);
    if (r.ff) /* llama.cpp's rope_freqs, LongRoPE's factors: the frequency over the pair's */
        f /= (double)*(const float *)(r.ff + i * r.ff_nb);
    double ang = p * f;
    *c = (float)cos(ang) * r.mscale;
    *s = (float)sin(ang) * r.mscale;
}

/* ld_f in two steps: an element's bits (its 2 or 4 bytes), then their value. A row's loads can then
 * all be issued before the first conversion, where a loop of ld_f waits for each load before it
 * issues the next (the conversion in each case of the switch uses the load at once). */
__device__ __forceinline__ uint32_t ld_bits(const char *p, int t)
{
    return t == GP_F16 || t == GP_BF16 ? *(const uint16_t *)p : *(const uint32_t *)p;
}

__device__ __forceinline__ float bits_f(uint32_t u, int t)
{
    switch (t) {
    case GP_F32:
        return __uint_as_float(u);
    case GP_F16:
        return __half2float(__ushort_as_half((unsigned short)u));
    case GP_BF16:
        return __bfloat162float(__ushort_as_bfloat16((unsigned short)u));
    default:
        return (float)(int32_t)u;
    }
}

__device__ __forceinline__ void st_f(char *p, int t, float v)
{
    switch (t) {
    case GP_F32:
        *(float *)p = v;
        break;
    case GP_F16:
        *(__half *)p = __float2half_rn(v);
        break;
    case GP_BF16:
        *(__nv_bfloat16 *)p = __float2bfloat16_rn(v);
        break;
    default:
        *(int32_t *)p = gp_f32_to_i32_sat(v);
        break;
    }
}

/* Four consecutive elements of dtype t at p, aligned to four of them, in one store (st_f four
 * times). */
__device__ __forceinline__ void st_f4(char *p, int t, const float (&y)[4])
{
    if (t == GP_F16 || t == GP_BF16) {
        uint32_t h[4];
#pragma unroll
        for (int k = 0; k < 4; k++)
            h[k] = t == GP_F16 ? __half_as_ushort(__float2half_rn(y[k]))
                               : __bfloat16_as_ushort(__float2bfloat16_rn(y[k]));
        *(uint2 *)p = make_uint2(h[0] | h[1] << 16, h[2] | h[3] << 16);
    } else if (t == GP_F32) {
        *(float4 *)p = make_float4(y[0], y[1], y[2], y[3]);
    } else {
        *(int4 *)p = make_int4(gp_f32_to_i32_sat(y[0]), gp_f32_to_i32_sat(y[1]), gp_f32_to_i32_sat(y[2]), gp_f32_to_i32_sat(y[3]));
    }
}

/* Sum or maximum over each group of W lanes (W a power of two up to 32: lanes that differ only
 * in their low log2(W) bits); every lane of a group gets its group's. */
template <int W> __device__ __forceinline__ float lanes_sum(float v)
{
#pragma unroll
    for (int o = W / 2; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <int W> __device__ __forceinline__ float lanes_max(float v)
{
#pragma unroll
    for (int o = W / 2; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* The same across the groups of W lanes: over lanes that differ only in their bits from W on
 * (the lanes at one place of each group); every lane gets its place's. */
template <int W> __device__ __forceinline__ float across_sum(float v)
{
#pragma unroll
    for (int o = 16; o >= W; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <int W> __device__ __forceinline__ float across_max(float v)
{
#pragma unroll
    for (int o = 16; o >= W; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float warp_sum(float v)
{
    return lanes_sum<32>(v);
}

__device__ __forceinline__ float warp_max(float v)
{
    return lanes_max<32>(v);
}

/* Sum (is_max 0) or maximum over the block; every thread gets the result. sh: 32 floats of shared
 * memory; blockDim.x a multiple of 32. Begins with a barrier so sh can be reused back to back. */
__device__ __forceinline__ float block_reduce(float v, float *sh, int is_max)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = is_max ? warp_max(v) : warp_sum(v);
    __syncthreads();
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : (is_max ? -INFINITY : 0.0f);
    return is_max ? warp_max(v) : warp_sum(v);
}

/* a and b each summed over the block, to every thread (one barrier pair for both). sh: 64
 * floats of shared memory. */
__device__ __forceinline__ void block_reduce2(float &a, float &b, float *sh)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    a = warp_sum(a);
    b = warp_sum(b);
    __syncthreads();
    if (lane == 0) {
        sh[w] = a;
        sh[32 + w] = b;
    }
    __syncthreads();
    a = warp_sum(lane < nw ? sh[lane] : 0.0f);
    b = warp_sum(lane < nw ? sh[32 + lane] : 0.0f);
}

/*
 * Programmatic dependent launch (Hopper): every kernel starts with this. It waits until the
 * kernel before it in the stream has finished and its writes are visible (a no-op when the
 * launch did not ask for overlap), then lets the next kernel be scheduled, so that kernel's
 * launch and block setup overlap this one's run. Nothing may touch memory before it.
 */
__device__ __forceinline__ void pdl_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_trigger()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_begin()
{
    pdl_wait();
    pdl_trigger();
}

/* A hint to bring the line at p into L2 (no effect on results: safe before pdl_begin, since the
 * real loads come after it). Kernels use it for bytes no earlier kernel writes (weights, the KV
 * cache rows of earlier evals) while the kernel before them still runs. */
__device__ __forceinline__ void prefetch_l2(const void *p)
{
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

/* prefetch_l2 over bytes [p, p + n), one 128-byte line per thread of the block. Kernels on the
 * critical path use it before their wait for small bytes that are likely not in L2 (a norm's
 * weights): once the next kernel's weight loads are queued, a miss waits behind them. */
__device__ __forceinline__ void prefetch_l2_range(const void *p, int64_t n)
{
    const char *q = (const char *)((uintptr_t)p & ~(uintptr_t)127), *end = (const char *)p + n;
    for (q += (int64_t)threadIdx.x * 128; q < end; q += (int64_t)blockDim.x * 128)
        prefetch_l2(q);
}

/*
 * Phase stamps, in diagnostic builds only (-DGPLAN_STAMPS=1; none otherwise): thread 0 of block 0
 * of a launch records clock64() at the kernel's phases into its source file's ring, which
 * gp_cuda_stamps_dump prints as the mean cycles between phases per kind of kernel.
 */
enum { GP_STAMP_SLOTS = 16384, GP_STAMP_PH = 8 };
#ifdef GPLAN_STAMPS
#include <stdio.h>
struct StampRing {
    unsigned long long t[GP_STAMP_SLOTS][1 + GP_STAMP_PH]; /* [0]: the kind; then the phases */
    unsigned n;
};
static __device__ StampRing gp_ring;
static __shared__ unsigned gp_stamp_slot;
__device__ __forceinline__ bool stamp_block()
{
    return threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0;
}
#define STAMP_BEGIN(kind)                                                                          \
    do {                                                                                           \
        if (stamp_block()) {                                                                       \
            gp_stamp_slot = atomicAdd(&gp_ring.n, 1u) % GP_STAMP_SLOTS;                            \
            for (int p_ = 2; p_ <= GP_STAMP_PH; p_++)                                              \
                gp_ring.t[gp_stamp_slot][p_] = 0;                                                  \
            gp_ring.t[gp_stamp_slot][0] = (kind);                                                  \
            gp_ring.t[gp_stamp_slot][1] = clock64();                                               \
        }                                                                                          \
    } while (0)
#define STAMP(ph)                                                                                  \
    do {                                                                                           \
        if (stamp_block())                                                                         \
            gp_ring.t[gp_stamp_slot % GP_STAMP_SLOTS][1 + (ph)] = clock64();                       \
    } while (0)
/* Host: prints file's ring (names[kind - 1]) to f. */
static inline void stamps_print(FILE *f, const char *file, const char *const *names, int n_names)
{
    static StampRing h;
    if (cudaMemcpyFromSymbol(&h, gp_ring, sizeof h) != cudaSuccess)
        return;
    for (int k = 1; k <= n_names; k++) {
        double sum[GP_STAMP_PH] = {0};
        long n = 0;
        for (unsigned s = 0; s < GP_STAMP_SLOTS && s < h.n; s++) {
            const unsigned long long *t = h.t[s];
            if (t[0] != (unsigned long long)k)
                continue;
            int last = 1;
            while (last < GP_STAMP_PH && t[last + 1] != 0 && t[last + 1] >= t[last])
                last++;
            for (int p = 1; p < last; p++)
                sum[p] += (double)(t[p + 1] - t[p]);
            n++;
        }
        if (!n)
            continue;
        fprintf(f, "STAMP %s %s n=%ld cycles:", file, names[k - 1], n);
        for (int p = 1; p < GP_STAMP_PH; p++)
            fprintf(f, " %.0f", sum[p] / (double)n);
        fprintf(f, "\n");
    }
}
#else
#define STAMP_BEGIN(kind) ((void)0)
#define STAMP(ph) ((void)0)
#endif

/* ---- norms (layer_norm and rms_norm of one row) as k_norm computes them, for the kernels that
 * compute a norm inside another op: a matvec, an all-reduce ---- */

/* A norm's weights (gp_cu_prenorm): out = (x - mean) / rms * w (+ b). */
struct NORM {
    int is_ln, has_b;
    float eps;
    KT w, b;           /* [K] each */
    const float *fold; /* gp_cu_prenorm.fold: [2 N] */
    float off;         /* rms_norm's weight offset: each weight is w + off (gp_cu_prenorm.offset) */
};

/* The norm's weights (and bias) for elements [i0, i1) into L2, before the kernel's wait. */
__device__ __forceinline__ void prefetch_norm(const NORM &nm, int64_t i0, int64_t i1)
{
    prefetch_l2_range(nm.w.p + i0 * nm.w.nb[3], (i1 - i0) * nm.w.nb[3]);
    if (nm.has_b)
        prefetch_l2_range(nm.b.p + i0 * nm.b.nb[3], (i1 - i0) * nm.b.nb[3]);
}

/* A norm's sums over a row of n held in registers, R elements per thread (element first + j *
 * step in v[j], 0 past n; k_norm's layout is first = threadIdx.x, step = blockDim.x): sets *mean
 * (a layer norm's, over the block; else 0) and returns this thread's sum of squared deviations,
 * for the caller's block_reduce. sh: 32 floats of shared memory. */
template <int R>
__device__ __forceinline__ float norm_sq_regs(const float (&v)[R], int64_t n, int is_ln, float *sh,
                                              float *mean_out, int64_t first, int64_t step)
{
    float acc = 0.0f, mean = 0.0f;
    if (is_ln) {
#pragma unroll
        for (int j = 0; j < R; j++)
            acc += v[j];
        mean = block_reduce(acc, sh, 0) / (float)n;
        acc = 0.0f;
    }
#pragma unroll
    for (int j = 0; j < R; j++) {
        int64_t i = first + j * step;
        float d = v[j] - mean;
        acc += i < n ? d * d : 0.0f;
    }
    *mean_out = mean;
    return acc;
}

/*
 * A norm of x [K] as k_norm computes it: norm_stats gives the mean (layer norm) and 1 / rms of
 * x - mean over the block, norm_one element i, stage_norm all of y = norm(x) into shared memory xs
 * (16-byte aligned). Every thread of the block calls norm_stats and stage_norm.
 */
__device__ __forceinline__ void norm_stats(const NORM &nm, const float *x, int64_t K, float *mean_out,
                                           float *inv_out)
{
    enum { REG = 8 }; /* x up to REG * blockDim.x: read once, every load in flight at once */
    __shared__ float red[64];
    float acc = 0.0f, mean = 0.0f;
    if (K <= REG * (int64_t)blockDim.x) {
        float v[REG];
#pragma unroll
        for (int j = 0; j < REG; j++) {
            int64_t i = threadIdx.x + (int64_t)j * blockDim.x;
            v[j] = i < K ? x[i] : 0.0f;
        }
        if (nm.is_ln) {
            /* One reduction of the sums and squares of x - x[0] instead of two, one after the
             * other (the mean, then the squares about it): one block reduction fewer on the
             * critical path. Shifted by x[0], the variance loses
             * about eps_f32 (x[0] - mean)^2 / var of itself to cancellation, and x[0] being one
             * of the K values, (x[0] - mean)^2 <= K var: at most ~1e-4 of it for K = 1600. */
            float s0 = K > 0 ? x[0] : 0.0f, a = 0.0f, b = 0.0f;
#pragma unroll
            for (int j = 0; j < REG; j++) {
                float d = threadIdx.x + (int64_t)j * blockDim.x < K ? v[j] - s0 : 0.0f;
                a += d;
                b += d * d;
            }
            block_reduce2(a, b, red);
            float m = a / (float)K;
            *mean_out = s0 + m;
            *inv_out = 1.0f / sqrtf(fmaxf(b / (float)K - m * m, 0.0f) + nm.eps);
            return;
        }
        acc = norm_sq_regs(v, K, 0, red, &mean, threadIdx.x, blockDim.x);
    } else {
        if (nm.is_ln) {
            for (int64_t i = threadIdx.x; i < K; i += blockDim.x)
                acc += x[i];
            mean = block_reduce(acc, red, 0) / (float)K;
            acc = 0.0f;
        }
        for (int64_t i = threadIdx.x; i < K; i += blockDim.x) {
            float d = x[i] - mean;
            acc += d * d;
        }
    }
    *mean_out = mean;
    *inv_out = 1.0f / sqrtf(block_reduce(acc, red, 0) / (float)K + nm.eps);
}

/* One element: xi normalized, times the weight wi, plus the bias bi (with one). */
__device__ __forceinline__ float norm_val(const NORM &nm, float xi, float mean, float inv, float wi,
                                          float bi)
{
    float y = (xi - mean) * inv * wi;
    if (nm.has_b)
        y += bi;
    return y;
}

/* Element i's weight (with the offset, as the CPU's w + offset) and bias (0 without one). */
__device__ __forceinline__ float norm_w(const NORM &nm, int64_t i)
{
    return ld_f(nm.w.p + i * nm.w.nb[3], nm.w.t) + nm.off;
}
__device__ __forceinline__ float norm_b(const NORM &nm, int64_t i)
{
    return nm.has_b ? ld_f(nm.b.p + i * nm.b.nb[3], nm.b.t) : 0.0f;
}

__device__ __forceinline__ float norm_one(const NORM &nm, const float *x, int64_t i, float mean,
                                          float inv)
{
    return norm_val(nm, x[i], mean, inv, norm_w(nm, i), norm_b(nm, i));
}

/* A barrier of the block's first NT threads (named barrier 1; the rest of the block may be doing
 * something else), or of the whole block (NT == 0). */
template <int NT> __device__ __forceinline__ void sync_group()
{
    if (NT == 0)
        __syncthreads();
    else
        asm volatile("bar.sync 1, %0;" ::"n"(NT) : "memory");
}

/*
 * Clusters (sm_90): a block may write another's shared memory only once that block has started.
 * cluster_started_arrive, called by every thread of every block of the cluster at its start,
 * and cluster_started_wait, before the first such write, make sure of it without a stall where
 * the blocks started together (a split barrier: the arrival has no memory order, the wait none to
 * give). Each pair is one phase of the cluster barrier, so cluster.sync() may follow.
 */
__device__ __forceinline__ void cluster_started_arrive()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
#endif
}

__device__ __forceinline__ void cluster_started_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
#endif
}

/*
 * The end of split work, called by every thread of a block once its share is stored: counts the
 * block at *counter and returns 1 (in every thread) in the block that brings the count to n, the
 * last of the n blocks sharing the counter. That block sees every other block's stores (each
 * fences before it counts, the last fences after) and resets *counter when it is done with them.
 * flag: an int of shared memory. NT: the threads that call it, as sync_group<NT>.
 */
template <int NT = 0>
__device__ __forceinline__ int last_of(unsigned *counter, unsigned n, int *flag)
{
    __threadfence();
    sync_group<NT>();
    if (threadIdx.x == 0)
        *flag = atomicAdd(counter, 1u) == n - 1;
    sync_group<NT>();
    if (!*flag)
        return 0;
    __threadfence();
    return 1;
}

/* Host: the configuration of a launch on stream s: programmatic dependent launch when pdl,
 * clusters of cluster_z blocks along z when cluster_z > 1; at holds its attributes. */
static inline cudaLaunchConfig_t gp_cu_config(cudaStream_t s, int pdl, unsigned cluster_z,
                                              dim3 grid, dim3 block, size_t smem,
                                              cudaLaunchAttribute (&at)[2])
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cfg.attrs = at;
    if (cluster_z > 1) {
        cudaLaunchAttribute &c = at[cfg.numAttrs++];
        c.id = cudaLaunchAttributeClusterDimension;
        c.val.clusterDim.x = 1;
        c.val.clusterDim.y = 1;
        c.val.clusterDim.z = cluster_z;
    }
    if (pdl) {
        cudaLaunchAttribute &p = at[cfg.numAttrs++];
        p.id = cudaLaunchAttributeProgrammaticStreamSerialization;
        p.val.programmaticStreamSerializationAllowed = 1;
    }
    return cfg;
}

/* Host: launches kernel k on stream s as gp_cu_config configures it; CUDA's launch status. */
template <typename... P, typename... A>
static inline cudaError_t gp_cu_launch_cl(cudaStream_t s, int pdl, unsigned cluster_z,
                                          void (*k)(P...), dim3 grid, dim3 block, size_t smem,
                                          A... args)
{
    cudaLaunchAttribute at[2];
    cudaLaunchConfig_t cfg = gp_cu_config(s, pdl, cluster_z, grid, block, smem, at);
    return cudaLaunchKernelEx(&cfg, k, static_cast<P>(args)...);
}

/* Host: launches kernel k on stream s, asking for programmatic dependent launch when pdl; CUDA's
 * launch status. */
template <typename... P, typename... A>
static inline cudaError_t gp_cu_launch_on(cudaStream_t s, int pdl, void (*k)(P...), dim3 grid,
                                          dim3 block, size_t smem, A... args)
{
    return gp_cu_launch_cl(s, pdl, 0, k, grid, block, smem, args...);
}

/* Host: gp_cu_launch_cl for a kernel context (c->stream, c->pdl). Errors are read back with
 * gp_cu_check_launch, as for <<<>>>. */
template <typename... P, typename... A>
static inline void gp_cu_launch_z(const gp_cu_ctx *c, unsigned cluster_z, void (*k)(P...),
                                  dim3 grid, dim3 block, size_t smem, A... args)
{
    (void)gp_cu_launch_cl(c->stream, c->pdl, cluster_z, k, grid, block, smem, args...);
}

/* Host: gp_cu_launch_z without clusters. */
template <typename... P, typename... A>
static inline void gp_cu_launch(const gp_cu_ctx *c, void (*k)(P...), dim3 grid, dim3 block,
                                size_t smem, A... args)
{
    gp_cu_launch_z(c, 0, k, grid, block, smem, args...);
}

/* Host: the phase stamps of cuda_matvec.cu's and cuda_attention.cu's kernels, to f (FILE *;
 * diagnostic builds only). */
void gp_cu_stamps_matmul(void *f);
void gp_cu_stamps_attention(void *f);

/* Host: records a launch error in ctx; 0 when fine. */
int gp_cu_check_launch(gp_cu_ctx *c, const char *what);

/* Host entry points of the kernel files (cuda_ops.cu, cuda_attention.cu, cuda_matmul.cu). */
int gp_cu_attention(gp_cu_ctx *c, const gp_attrs *a, const gp_cu_tensor *out,
                    const gp_cu_tensor *in, void *ws, size_t ws_size);
int gp_cu_matmul(gp_cu_ctx *c, const gp_attrs *a, const gp_cu_tensor *out, const gp_cu_tensor *in,
                 void *ws, size_t ws_size, const gp_cu_epilogue *epi, const gp_cu_prenorm *pre,
                 int *fused, int *pre_used);
/* cuda_moe.cu; ws: gp_cuda_moe_ws(T, H, E, top_k, F).total bytes at the launch's T at least. */
extern "C" int gp_cu_moe(gp_cu_ctx *c, const gp_attrs *a, const gp_cu_tensor *out,
                         const gp_cu_tensor *in, void *ws, size_t ws_size);

#endif
