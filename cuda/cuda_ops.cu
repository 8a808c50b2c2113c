/* CUDA kernels for the row-wise ops (elementwise with broadcasting, norms, softmax, rope, copies,
 * lookups, concat, store) and the dispatcher gp_cuda_compute; matmul and attention have their own
 * files. Kernels are launched at the launch sizes and read the eval's sizes from the param block. */
#include <atomic>
#include <cooperative_groups.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cuda/cuda_matvec.cuh"
#include "cuda/cuda_quant.cuh"

enum { THREADS = 256 };

KT gp_kt_of(const gp_cu_ctx *c, const gp_cu_tensor *k)
{
    KT r;
    r.p = (char *)k->data;
    r.t = (int)k->dtype;
    int off = 4 - k->ndim;
    for (int d = 0; d < 4; d++) {
        int s = d - off;
        r.ne[d] = s < 0 ? 1 : k->ne[s];
        r.nb[d] = s < 0 ? 0 : k->nb[s];
        r.sym[d] = s < 0 ? -1 : k->sym[s];
        if (r.sym[d] >= 0 && c->h_syms && r.sym[d] < c->n_syms)
            r.ne[d] = c->h_syms[r.sym[d]];
    }
    return r;
}

int gp_cu_check_launch(gp_cu_ctx *c, const char *what)
{
    cudaError_t e = cudaGetLastError();
    c->launches++;
    if (e == cudaSuccess)
        return 0;
    snprintf(c->err, sizeof c->err, "%s: kernel launch failed: %s", what, cudaGetErrorString(e));
    return -1;
}

static unsigned grid_for(int64_t n, int threads)
{
    return gp_cu_blocks((n + threads - 1) / threads);
}

/* An element of dtype st whose bits are u (ld_bits) stored at dst as dtype dt: the raw bytes when
 * the dtypes match, else via f32. */
__device__ __forceinline__ void st_bits(char *dst, int dt, uint32_t u, int st)
{
    if (dt == st) {
        if (dt == GP_F16 || dt == GP_BF16)
            *(uint16_t *)dst = (uint16_t)u;
        else
            *(uint32_t *)dst = u;
    } else {
        st_f(dst, dt, bits_f(u, st));
    }
}

/* One element from src (dtype st) to dst (dt). */
__device__ __forceinline__ void copy_elem(char *dst, int dt, const char *src, int st)
{
    st_bits(dst, dt, ld_bits(src, st), st);
}

/* ---- elementwise: unary, binary with broadcasting, copies ---- */

enum { EW_COPY = -1 };

__device__ __forceinline__ float silu_f(float x)
{
    return x / (1.0f + expf(-x));
}

/* fa: scale's factor; fb: its cap (> 0: soft-capped, fb tanh(x fa / fb), as the CPU's). */
__device__ __forceinline__ float ew_apply(int op, float fa, float fb, float x, float y)
{
    switch (op) {
    case GP_OP_ADD: return x + y;
    case GP_OP_SUB: return x - y;
    case GP_OP_MUL: return x * y;
    case GP_OP_DIV: return x / y;
    case GP_OP_SWIGLU: return silu_f(x) * y;
    case GP_OP_SCALE: return fb > 0.0f ? fb * tanhf(x * fa / fb) : x * fa;
    case GP_OP_GELU: return gelu_tanh(x);
    case GP_OP_GELU_ERF: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case GP_OP_SILU: return silu_f(x);
    default: return x;
    }
}

/*
 * out = op(x[, y]) over out's elements; x and y broadcast. op EW_COPY: cont and cast. A
 * row-span kernel (cuda_internal.cuh); a thread of each of its first three warps finds the
 * span's row in o, x or y. Each element is read and written by one thread: in place is safe.
 */
__global__ void k_elementwise(int op, float fa, float fb, KT o, KT x, KT y, int has_y,
                              const int64_t *syms)
{
    __shared__ int64_t off[3];
    pdl_begin();
    kt_resolve(o, syms);
    kt_resolve(x, syms);
    if (has_y)
        kt_resolve(y, syms);
    int64_t C = o.ne[3], rows = o.ne[0] * o.ne[1] * o.ne[2], per = (C + SPAN - 1) / SPAN;
    int64_t xs = x.ne[3] == 1 ? 0 : x.nb[3], ys = y.ne[3] == 1 ? 0 : y.nb[3];
    for (int64_t b = blockIdx.x; b < rows * per; b += gridDim.x) {
        int64_t r = b / per, c0 = (b - r * per) * SPAN + threadIdx.x;
        __syncthreads(); /* the last span's offsets are read */
        if (threadIdx.x == 0) /* one thread of a warp each: the divisions run side by side */
            off[0] = kt_row_off(o, o, r);
        if (threadIdx.x == 32)
            off[1] = kt_row_off(x, o, r);
        if (threadIdx.x == 64)
            off[2] = kt_row_off(y, o, r);
        __syncthreads();
        char *po = o.p + off[0];
        const char *px = x.p + off[1], *py = y.p + off[2];
        uint32_t bx[SPAN_U], by[SPAN_U];
#pragma unroll
        for (int u = 0; u < SPAN_U; u++) {
            int64_t c = c0 + u * SPAN_THREADS;
            bx[u] = c < C ? ld_bits(px + c * xs, x.t) : 0;
            by[u] = c < C && has_y ? ld_bits(py + c * ys, y.t) : 0;
        }
#pragma unroll
        for (int u = 0; u < SPAN_U; u++) {
            int64_t c = c0 + u * SPAN_THREADS;
            if (c >= C)
                break;
            if (op == EW_COPY)
                st_bits(po + c * o.nb[3], o.t, bx[u], x.t);
            else
                st_f(po + c * o.nb[3], o.t,
                     ew_apply(op, fa, fb, bits_f(bx[u], x.t), has_y ? bits_f(by[u], y.t) : 0.0f));
        }
    }
}

static int launch_elementwise(gp_cu_ctx *c, int op, float fa, const gp_cu_tensor *out,
                              const gp_cu_tensor *x, const gp_cu_tensor *y, float fb = 0.0f)
{
    KT o = gp_kt_of(c, out), kx = gp_kt_of(c, x), ky = y ? gp_kt_of(c, y) : kx;
    int64_t n = kt_count(o, 4);
    if (n == 0)
        return 0;
    gp_cu_launch(c, k_elementwise, span_blocks(n / o.ne[3], o.ne[3]), SPAN_THREADS, 0, op, fa, fb,
                 o, kx, ky, y != NULL, c->d_syms);
    return gp_cu_check_launch(c, "elementwise");
}

/* ---- instances for one-per-eval ops (ops_typed) ---- */

/* The norm and the lookups have instances for f32 activations and one weight dtype, set as
 * constants in their copies of the arguments, so that the compiler folds every switch on a dtype:
 * the instances are much smaller than the generic kernels, and every launch fetches its code
 * cold. */
static std::atomic<long long> ops_typed_launches(0);

extern "C" int64_t gp_cuda_ops_typed_count(void)
{
    return ops_typed_launches.load();
}

/* t when an instance takes it (f16, bf16, f32) and they are on, counting the launch; else -1. */
static int ops_typed(gp_cu_ctx *c, int t)
{
    int ok = !c->ops_generic && (t == GP_F16 || t == GP_BF16 || t == GP_F32);
    ops_typed_launches += ok;
    return ok ? t : -1;
}

/* ---- norms and softmax: one block per row ---- */

/* Rows up to NORM_REG * blockDim.x elements stay in registers; blocks of up to NORM_MAX_THREADS. */
enum { NORM_REG = 8, NORM_MAX_THREADS = 512 };

/*
 * One block per row (grid-stride over rows). A row that fits in registers is read in one pass:
 * each thread issues all of its loads of x, w and b at once, then the block reduces, so a row
 * costs one memory round trip, not one per loop iteration. Wider rows loop (two passes over x).
 * WT >= 0: the instance for x and o in f32 and w and b in dtype WT (ops_typed), as constants.
 */
template <int WT>
__global__ void __launch_bounds__(NORM_MAX_THREADS)
    k_norm(int is_ln, float eps, float off, KT o, KT x, KT w, KT b, int has_b, int late,
           const int64_t *syms)
{
    if (WT >= 0) { /* what the host checked, as constants (ops_typed) */
        x.t = o.t = GP_F32;
        w.t = b.t = WT;
    }
    NORM nm = {is_ln, has_b, eps, w, b, NULL, off};
    prefetch_norm(nm, 0, w.ne[3]); /* w and b are [n]: one row for every row of x */
    pdl_wait();
    if (!late)
        pdl_trigger();
    __shared__ float sh[32];
    kt_resolve(o, syms);
    kt_resolve(x, syms);
    int64_t rows = o.ne[0] * o.ne[1] * o.ne[2], n = o.ne[3];
    int in_regs = n <= (int64_t)NORM_REG * blockDim.x;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const char *px = x.p + kt_row_off(x, o, r);
        char *po = o.p + kt_row_off(o, o, r);
        float mean = 0.0f, acc = 0.0f;
        if (in_regs) {
            /* Every load first (ld_bits), then the conversions: with ld_f, each conversion's
             * switch made the next load wait for this one. */
            uint32_t xb[NORM_REG], wb[NORM_REG], bb[NORM_REG];
#pragma unroll
            for (int j = 0; j < NORM_REG; j++) {
                int64_t i = threadIdx.x + (int64_t)j * blockDim.x;
                xb[j] = i < n ? ld_bits(px + i * x.nb[3], x.t) : 0;
                wb[j] = i < n ? ld_bits(w.p + i * w.nb[3], w.t) : 0;
                bb[j] = has_b && i < n ? ld_bits(b.p + i * b.nb[3], b.t) : 0;
            }
            float v[NORM_REG], wv[NORM_REG], bv[NORM_REG];
#pragma unroll
            for (int j = 0; j < NORM_REG; j++) {
                v[j] = bits_f(xb[j], x.t);
                wv[j] = bits_f(wb[j], w.t) + off; /* rms_norm's weight offset (0 without) */
                bv[j] = bits_f(bb[j], b.t);
            }
            acc = norm_sq_regs(v, n, is_ln, sh, &mean, threadIdx.x, blockDim.x);
            float inv = 1.0f / sqrtf(block_reduce(acc, sh, 0) / (float)n + eps);
            if (late)
                pdl_trigger();
#pragma unroll
            for (int j = 0; j < NORM_REG; j++) {
                int64_t i = threadIdx.x + (int64_t)j * blockDim.x;
                if (i < n)
                    st_f(po + i * o.nb[3], o.t, (v[j] - mean) * inv * wv[j] + bv[j]);
            }
            continue;
        }
        if (is_ln) {
            for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
                acc += ld_f(px + i * x.nb[3], x.t);
            mean = block_reduce(acc, sh, 0) / (float)n;
            acc = 0.0f;
        }
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
            float d = ld_f(px + i * x.nb[3], x.t) - mean;
            acc += d * d;
        }
        float inv = 1.0f / sqrtf(block_reduce(acc, sh, 0) / (float)n + eps);
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
            st_f(po + i * o.nb[3], o.t,
                 norm_val(nm, ld_f(px + i * x.nb[3], x.t), mean, inv, norm_w(nm, i), norm_b(nm, i)));
    }
}

/* The norm's block: enough threads for the row to stay in registers, when it can. */
static unsigned norm_threads(int64_t n)
{
    int64_t t = (n + NORM_REG - 1) / NORM_REG;
    t = (t + 31) / 32 * 32;
    return (unsigned)(t < 64 ? 64 : t > (int64_t)NORM_MAX_THREADS ? (int64_t)NORM_MAX_THREADS : t);
}

__global__ void k_softmax(int causal, float scale, KT o, KT x, const int64_t *syms)
{
    pdl_begin();
    __shared__ float sh[32];
    kt_resolve(o, syms);
    kt_resolve(x, syms);
    int64_t rows = o.ne[0] * o.ne[1] * o.ne[2], S = o.ne[3], T = o.ne[2];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const char *px = x.p + kt_row_off(x, o, r);
        char *po = o.p + kt_row_off(o, o, r);
        /* Causal: (t, s) is kept when s <= t + S - T. */
        int64_t nv = S;
        if (causal) {
            nv = r % T + S - T + 1;
            nv = nv < 0 ? 0 : nv > S ? S : nv;
        }
        float mx = -INFINITY, sum = 0.0f;
        for (int64_t i = threadIdx.x; i < nv; i += blockDim.x)
            mx = fmaxf(mx, ld_f(px + i * x.nb[3], x.t) * scale);
        mx = block_reduce(mx, sh, 1);
        for (int64_t i = threadIdx.x; i < nv; i += blockDim.x)
            sum += expf(ld_f(px + i * x.nb[3], x.t) * scale - mx);
        sum = block_reduce(sum, sh, 0);
        for (int64_t i = threadIdx.x; i < S; i += blockDim.x) {
            float v = i < nv ? expf(ld_f(px + i * x.nb[3], x.t) * scale - mx) / sum : 0.0f;
            st_f(po + i * o.nb[3], o.t, v);
        }
    }
}

static unsigned rows_grid(const KT &o)
{
    int64_t r = kt_count(o, 3);
    return (unsigned)(r < 1 ? 1 : r > 65535 ? 65535 : r);
}

/* ---- argmax: a row per cluster of AM_CLUSTER blocks (one block per row without clusters) ---- */

/* A cluster's 8192 threads load a row of 50257 in one batch. */
enum { AM_THREADS = 1024, AM_BATCH = 8, AM_CLUSTER = 8 };

/* Offers element i of value v to the running best (bv, bi; bi < 0: none yet): it wins when it is
 * a number and larger, or equal at a lower index. NaN never wins; i < 0 is no offer. */
__device__ __forceinline__ void am_offer(float &bv, int &bi, float v, int i)
{
    if (i >= 0 && v == v && (bi < 0 || v > bv || (v == bv && i < bi))) {
        bv = v;
        bi = i;
    }
}

/* The best of the 32 lanes' offers, to lane 0. */
__device__ __forceinline__ void am_warp(float &bv, int &bi)
{
    for (int s = 16; s > 0; s /= 2) {
        float v = __shfl_down_sync(0xffffffffu, bv, s);
        int i = __shfl_down_sync(0xffffffffu, bi, s);
        am_offer(bv, bi, v, i);
    }
}

/*
 * o [rows] (i32, laid out as the rows of x) = the first index of the largest value of each row
 * of x [..., N], as the CPU's k_argmax. The C = gridDim.z blocks of a row (one cluster when C > 1)
 * take every C-th stretch of blockDim.x elements; each block keeps its best, and block rank 0
 * takes the best of the C through distributed shared memory. copy (NULL: none) gets every value
 * of x as it is read, at x's byte offsets (4-byte elements: f32 x).
 */
__global__ void __launch_bounds__(AM_THREADS) k_argmax(KT o, KT x, char *copy, const int64_t *syms)
{
    pdl_begin();
    __shared__ float sv[AM_THREADS / 32];
    __shared__ int si[AM_THREADS / 32];
    kt_resolve(o, syms);
    kt_resolve(x, syms);
    int64_t rows = x.ne[0] * x.ne[1] * x.ne[2], N = x.ne[3];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, C = gridDim.z;
    int64_t step = (int64_t)C * blockDim.x;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const char *px = x.p + kt_row_off(x, x, r);
        char *pc = copy ? copy + (px - x.p) : NULL;
        float bv = 0.0f;
        int bi = -1;
        for (int64_t i0 = (int64_t)blockIdx.z * blockDim.x + threadIdx.x; i0 < N;
             i0 += AM_BATCH * step) {
            uint32_t u[AM_BATCH]; /* every load of the batch first, then the compares */
#pragma unroll
            for (int j = 0; j < AM_BATCH; j++) {
                int64_t i = i0 + j * step;
                u[j] = i < N ? ld_bits(px + i * x.nb[3], x.t) : 0;
            }
            if (pc) /* stores that nothing waits for, issued with the batch's loads in flight */
#pragma unroll
                for (int j = 0; j < AM_BATCH; j++)
                    if (i0 + j * step < N)
                        *(uint32_t *)(pc + (i0 + j * step) * x.nb[3]) = u[j];
#pragma unroll
            for (int j = 0; j < AM_BATCH; j++) {
                int64_t i = i0 + j * step;
                am_offer(bv, bi, bits_f(u[j], x.t), i < N ? (int)i : -1);
            }
        }
        am_warp(bv, bi);
        __syncthreads(); /* sv, si free again (the row before) */
        if (lane == 0) {
            sv[w] = bv;
            si[w] = bi;
        }
        __syncthreads();
        if (w == 0) {
            bv = 0.0f;
            bi = -1;
            if (lane < (int)(blockDim.x >> 5))
                am_offer(bv, bi, sv[lane], si[lane]);
            am_warp(bv, bi);
        }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        if (C > 1) { /* the C blocks' bests: sv[0], si[0] of each */
            namespace cg = cooperative_groups;
            cg::cluster_group cl = cg::this_cluster();
            if (threadIdx.x == 0) {
                sv[0] = bv;
                si[0] = bi;
            }
            cl.sync();
            if (w == 0) {
                bv = 0.0f;
                bi = -1;
                if (lane < C && blockIdx.z == 0)
                    am_offer(bv, bi, *cl.map_shared_rank(&sv[0], lane),
                             *cl.map_shared_rank(&si[0], lane));
                am_warp(bv, bi);
            }
            cl.sync(); /* every block's sv, si read before the next row writes them */
        }
#endif
        if (threadIdx.x == 0 && blockIdx.z == 0)
            *(int32_t *)(o.p + kt_row_off(o, x, r)) = bi < 0 ? 0 : bi;
    }
}

/* ---- rope: one block per (t, h) row of x [T, H, D] ---- */

__global__ void k_rope(gp_cu_rope rp, KT o, KT x, KT pos, const int64_t *syms)
{
    int interleaved = rp.interleaved;
    int64_t n = rp.n;
    pdl_begin();
    kt_resolve(o, syms);
    kt_resolve(x, syms);
    int64_t T = o.ne[1], H = o.ne[2], D = o.ne[3], half = n / 2;
    int64_t ustep = interleaved ? 2 : 1, voff = interleaved ? 1 : half;
    for (int64_t r = blockIdx.x; r < T * H; r += gridDim.x) {
        int64_t t = r / H, h = r % H;
        const char *px = x.p + t * x.nb[1] + h * x.nb[2];
        char *po = o.p + t * o.nb[1] + h * o.nb[2];
        double p = (double)*(const int32_t *)(pos.p + t * pos.nb[3]);
        for (int64_t j = threadIdx.x; j < half; j += blockDim.x) {
            float cs, sn;
            rope_cos_sin(rp, p, j, &cs, &sn);
            int64_t iu = j * ustep, iv = j * ustep + voff;
            float u = ld_f(px + iu * x.nb[3], x.t), v = ld_f(px + iv * x.nb[3], x.t);
            /* each product and sum rounded on its own (no FMA contraction), as the CPU's rope */
            st_f(po + iu * o.nb[3], o.t, __fsub_rn(__fmul_rn(u, cs), __fmul_rn(v, sn)));
            st_f(po + iv * o.nb[3], o.t, __fadd_rn(__fmul_rn(u, sn), __fmul_rn(v, cs)));
        }
        for (int64_t i = n + threadIdx.x; i < D; i += blockDim.x)
            st_f(po + i * o.nb[3], o.t, ld_f(px + i * x.nb[3], x.t));
    }
}

extern "C" gp_cu_rope gp_cuda_rope_of(const gp_attrs *a, gp_dtype dtype)
{
    gp_cu_rope r;
    memset(&r, 0, sizeof r);
    r.on = 1;
    int64_t scaling = a->i[GP_ROPE_SCALING];
    r.interleaved = a->i[GP_ROPE_MODE] == 1;
    r.n = a->i[GP_ROPE_N_DIMS];
    r.theta = a->f[GP_ROPE_THETA];
    r.dtype = dtype;
    r.mscale = scaling == GP_ROPE_LONGROPE ? (float)a->f[GP_ROPE_FACTOR] : 1.0f;
    if (scaling == GP_ROPE_LINEAR) { /* linear scaling (ir/core.h) */
        r.orig_len = GP_ROPE_LINEAR;
        r.factor = a->f[GP_ROPE_FACTOR];
    } else if (scaling > 0) { /* Llama 3 scaling */
        r.orig_len = scaling;
        r.factor = a->f[GP_ROPE_FACTOR];
        r.low = (float)a->f[GP_ROPE_LOW_FACTOR];
        r.high = (float)a->f[GP_ROPE_HIGH_FACTOR];
    }
    return r;
}

/* ---- lookups, concat, store ---- */

/* out [T, C] = table[ids[t]]; ids out of range leave their row unwritten. Each thread loads
 * GR_REG elements of the row at once, then stores them: a loop of copy_elem would wait a memory
 * round trip per element (its store could alias the next load, which then cannot go first).
 * ADD: out = table[ids[t]] + table2[ids2[t]] (gp_cuda_get_rows_add), the sum in f32, rows with
 * either id out of range unwritten. TT >= 0: the instance for tables of dtype TT and an f32 out
 * (ops_typed). */
enum { GR_REG = 16 };
template <bool ADD, int TT>
__global__ void k_get_rows(KT o, KT table, KT ids, KT table2, KT ids2, const int64_t *syms)
{
    if (TT >= 0) { /* what the host checked, as constants (ops_typed) */
        table.t = table2.t = TT;
        o.t = GP_F32;
    }
    pdl_begin();
    kt_resolve(o, syms);
    int64_t T = o.ne[2], C = o.ne[3], V = table.ne[2], V2 = table2.ne[2];
    for (int64_t t = blockIdx.x; t < T; t += gridDim.x) {
        int32_t id = *(const int32_t *)(ids.p + t * ids.nb[3]);
        int32_t id2 = ADD ? *(const int32_t *)(ids2.p + t * ids2.nb[3]) : 0;
        if (id < 0 || id >= V || (ADD && (id2 < 0 || id2 >= V2)))
            continue;
        const char *src = table.p + id * table.nb[2], *src2 = table2.p + id2 * table2.nb[2];
        char *dst = o.p + t * o.nb[2];
        for (int64_t i0 = threadIdx.x; i0 < C; i0 += GR_REG * (int64_t)blockDim.x) {
            uint32_t u[GR_REG], u2[GR_REG];
#pragma unroll
            for (int j = 0; j < GR_REG; j++) {
                int64_t i = i0 + j * (int64_t)blockDim.x;
                u[j] = i < C ? ld_bits(src + i * table.nb[3], table.t) : 0;
                u2[j] = ADD && i < C ? ld_bits(src2 + i * table2.nb[3], table2.t) : 0;
            }
#pragma unroll
            for (int j = 0; j < GR_REG; j++) {
                int64_t i = i0 + j * (int64_t)blockDim.x;
                if (i < C && ADD)
                    st_f(dst + i * o.nb[3], o.t,
                         __fadd_rn(bits_f(u[j], table.t), bits_f(u2[j], table2.t)));
                else if (i < C)
                    st_bits(dst + i * o.nb[3], o.t, u[j], table.t);
            }
        }
    }
}

/* A launch of k_get_rows<ADD>: its instance for the tables' dtype where there is one. */
template <bool ADD>
static void launch_rows(gp_cu_ctx *c, const KT &o, const KT &t1, const KT &i1, const KT &t2,
                        const KT &i2)
{
    int tt = o.t == GP_F32 && t2.t == t1.t ? ops_typed(c, t1.t) : -1;
    gp_cu_launch(c,
                 tt == GP_F16    ? k_get_rows<ADD, GP_F16>
                 : tt == GP_BF16 ? k_get_rows<ADD, GP_BF16>
                 : tt == GP_F32  ? k_get_rows<ADD, GP_F32>
                                 : k_get_rows<ADD, -1>,
                 rows_grid(o), THREADS, 0, o, t1, i1, t2, i2, c->d_syms);
}

extern "C" int gp_cuda_get_rows_add(gp_cu_ctx *c, const gp_cu_tensor *out, const gp_cu_tensor *t1,
                                    const gp_cu_tensor *ids1, const gp_cu_tensor *t2,
                                    const gp_cu_tensor *ids2)
{
    KT o = gp_kt_of(c, out), k1 = gp_kt_of(c, t1), i1 = gp_kt_of(c, ids1);
    KT k2 = gp_kt_of(c, t2), i2 = gp_kt_of(c, ids2);
    if (out->ndim != 2 || t1->ndim != 2 || t2->ndim != 2 || ids1->dtype != GP_I32 ||
        ids2->dtype != GP_I32 || k1.ne[3] != o.ne[3] || k2.ne[3] != o.ne[3] ||
        kt_count(i1, 4) < o.ne[2] || kt_count(i2, 4) < o.ne[2]) {
        snprintf(c->err, sizeof c->err,
                 "get_rows_add: needs tables [V, C], i32 ids [T] and out [T, C]");
        return -1;
    }
    if (kt_count(o, 4) == 0)
        return 0;
    launch_rows<true>(c, o, k1, i1, k2, i2);
    return gp_cu_check_launch(c, "get_rows_add");
}

/* W += the LoRA delta (gp_cuda_lora_merge): a thread per element of W, in memory order; the delta
 * of element (k, n) of op(W) [in, out] is sum_j A[j][k] B[n][j] in f32, added once. */
__global__ void k_lora_merge(char *w, const char *a, const char *b, int dt, int es, int64_t in,
                             int64_t out, int64_t r, int tb)
{
    int64_t total = in * out;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {
        int64_t k = tb ? e % in : e / out, n = tb ? e / in : e % out;
        float s = 0.0f;
        for (int64_t j = 0; j < r; j++)
            s += ld_f(a + (j * in + k) * es, dt) * ld_f(b + (n * r + j) * es, dt);
        st_f(w + e * es, dt, ld_f(w + e * es, dt) + s);
    }
}

extern "C" int gp_cuda_lora_merge(gp_cu_ctx *c, void *w, const void *a, const void *b, gp_dtype dt,
                                  int64_t in, int64_t out, int64_t r, int tb)
{
    if ((dt != GP_F32 && dt != GP_F16 && dt != GP_BF16) || in < 1 || out < 1 || r < 1) {
        snprintf(c->err, sizeof c->err, "lora_merge: needs f32, f16 or bf16, sizes of 1 or more");
        return -1;
    }
    /* Not a graph's launch: no programmatic dependent launch, ordered after the copies before. */
    k_lora_merge<<<grid_for(in * out, THREADS), THREADS, 0, c->stream>>>(
        (char *)w, (const char *)a, (const char *)b, dt, (int)gp_dtype_size(dt), in, out, r, tb);
    return gp_cu_check_launch(c, "lora_merge");
}

__global__ void k_concat(int ax, KT o, KT a, KT b, const int64_t *syms)
{
    pdl_begin();
    kt_resolve(o, syms);
    kt_resolve(a, syms);
    kt_resolve(b, syms);
    int64_t n = o.ne[0] * o.ne[1] * o.ne[2] * o.ne[3], na = a.ne[ax];
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t idx[4], r = i;
        for (int d = 3; d >= 0; d--) {
            idx[d] = r % o.ne[d];
            r /= o.ne[d];
        }
        char *po = o.p + idx[0] * o.nb[0] + idx[1] * o.nb[1] + idx[2] * o.nb[2] + idx[3] * o.nb[3];
        const KT *s = &a;
        if (idx[ax] >= na) {
            idx[ax] -= na;
            s = &b;
        }
        copy_elem(po, o.t, s->p + idx[0] * s->nb[0] + idx[1] * s->nb[1] + idx[2] * s->nb[2] +
                               idx[3] * s->nb[3], s->t);
    }
}

/* One store's operands: drow/srow: one row (dims 1..) of dst and src; dst0/src0: the strides of
 * dim 0; S rows in dst; ring: position p is row p % S (store's ring attribute). */
struct StoreOp {
    KT drow, srow;
    int64_t dst0, src0, S;
    int ring;
};

/* The row of dst that position p goes to: p, or p % S in a ring (p >= 0); -1 when none. */
__device__ __forceinline__ int64_t store_row(const StoreOp &st, int32_t p)
{
    if (p < 0)
        return -1;
    int64_t r = st.ring ? (int64_t)p % st.S : (int64_t)p;
    return r < st.S ? r : -1;
}

/* dst[pos[t]] = src[t] (row pos[t] % S in a ring); one block per (t, store): blockIdx.y picks st0
 * or st1 (the K and V writes of a layer in one launch). A row written again by a later t is
 * skipped here, so the largest t wins as on the CPU. T rows in src (symbolic: tsym >= 0), the
 * same for both stores. */
__global__ void k_store(StoreOp st0, StoreOp st1, int64_t T, int tsym, KT pos, const int64_t *syms)
{
    pdl_begin();
    StoreOp st = blockIdx.y ? st1 : st0;
    const KT &drow = st.drow;
    KT srow = st.srow;
    kt_resolve(srow, syms);
    if (tsym >= 0)
        T = syms[tsym];
    int64_t n = srow.ne[0] * srow.ne[1] * srow.ne[2] * srow.ne[3];
    int same = drow.t == srow.t, two = srow.t == GP_F16 || srow.t == GP_BF16;
    for (int64_t t = blockIdx.x; t < T; t += gridDim.x) {
        int64_t p = store_row(st, *(const int32_t *)(pos.p + t * pos.nb[3]));
        int later = 0;
        for (int64_t u = t + 1 + threadIdx.x; u < T; u += blockDim.x)
            later |= store_row(st, *(const int32_t *)(pos.p + u * pos.nb[3])) == p;
        if (__syncthreads_or(later) || p < 0)
            continue;
        char *d = drow.p + p * st.dst0;
        const char *s = srow.p + t * st.src0;
        /* Four elements per round, loads before stores so their latencies overlap (dst is the
         * state, src an input of the node: they never overlap). */
        for (int64_t i0 = threadIdx.x; i0 < n; i0 += 4 * (int64_t)blockDim.x) {
            float val[4];
            uint32_t raw[4];
            int64_t doff[4];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                int64_t i = i0 + u * (int64_t)blockDim.x;
                doff[u] = -1;
                if (i >= n)
                    continue;
                /* 32-bit divisions: a row has fewer than 2^31 elements (store_op) */
                uint32_t ui = (uint32_t)i, n3 = (uint32_t)srow.ne[3], n2 = (uint32_t)srow.ne[2];
                uint32_t i3 = ui % n3, r = ui / n3, i2 = r % n2;
                r /= n2;
                uint32_t i1 = r % (uint32_t)srow.ne[1], j0 = r / (uint32_t)srow.ne[1];
                doff[u] = j0 * drow.nb[0] + i1 * drow.nb[1] + i2 * drow.nb[2] + i3 * drow.nb[3];
                const char *ps = s + j0 * srow.nb[0] + i1 * srow.nb[1] + i2 * srow.nb[2] + i3 * srow.nb[3];
                if (same) /* the raw bits, as copy_elem */
                    raw[u] = two ? *(const uint16_t *)ps : *(const uint32_t *)ps;
                else
                    val[u] = ld_f(ps, srow.t);
            }
#pragma unroll
            for (int u = 0; u < 4; u++) {
                if (doff[u] < 0)
                    continue;
                if (!same)
                    st_f(d + doff[u], drow.t, val[u]);
                else if (two)
                    *(uint16_t *)(d + doff[u]) = (uint16_t)raw[u];
                else
                    *(uint32_t *)(d + doff[u]) = raw[u];
            }
        }
    }
}

/* Dims 1.. of t as a tensor of their own. */
static gp_cu_tensor drop_dim0(const gp_cu_tensor *t)
{
    gp_cu_tensor r = *t;
    r.ndim = t->ndim - 1;
    for (int d = 1; d < t->ndim; d++) {
        r.ne[d - 1] = t->ne[d];
        r.nb[d - 1] = t->nb[d];
        r.sym[d - 1] = t->sym[d];
    }
    return r;
}

/* A store's operands (in: dst, pos, src; ring: its attribute) for k_store; its row count at
 * launch in *T. */
static int store_op(gp_cu_ctx *c, const gp_cu_tensor *in, int ring, StoreOp *st, int64_t *T)
{
    const gp_cu_tensor *dst = &in[0], *src = &in[2];
    if (dst->ndim < 1 || src->ndim != dst->ndim) {
        snprintf(c->err, sizeof c->err, "store: dst and src must have the same rank >= 1");
        return -1;
    }
    gp_cu_tensor dr = drop_dim0(dst), sr = drop_dim0(src);
    st->drow = gp_kt_of(c, &dr);
    st->srow = gp_kt_of(c, &sr);
    if (kt_count(st->srow, 4) > INT32_MAX) {
        snprintf(c->err, sizeof c->err, "store: a row of %lld elements (at most %d)",
                 (long long)kt_count(st->srow, 4), INT32_MAX);
        return -1;
    }
    st->dst0 = dst->nb[0];
    st->src0 = src->nb[0];
    st->S = dst->ne[0];
    st->ring = ring != 0;
    KT ksrc = gp_kt_of(c, src);
    *T = ksrc.ne[4 - src->ndim];
    return 0;
}

static int launch_store(gp_cu_ctx *c, const gp_cu_tensor *in0, const gp_cu_tensor *in1, int ring)
{
    StoreOp st0, st1;
    int64_t T, T1;
    if (store_op(c, in0, ring, &st0, &T) || (in1 && store_op(c, in1, ring, &st1, &T1)))
        return -1;
    if (in1 && (T1 != T || in1[2].sym[0] != in0[2].sym[0])) {
        snprintf(c->err, sizeof c->err, "store2: the two stores have different rows");
        return -1;
    }
    if (T == 0)
        return 0;
    dim3 grid((unsigned)(T > 65535 ? 65535 : T), in1 ? 2 : 1);
    KT kp = gp_kt_of(c, &in0[1]);
    gp_cu_launch(c, k_store, grid, THREADS, 0, st0, in1 ? st1 : st0, T, in0[2].sym[0], kp,
                 c->d_syms);
    return gp_cu_check_launch(c, "store");
}

extern "C" int gp_cuda_store2(gp_cu_ctx *c, const gp_cu_tensor *in0, const gp_cu_tensor *in1,
                              int ring)
{
    return launch_store(c, in0, in1, ring);
}

/* ---- the dispatcher ---- */

static int uses_syms(const gp_cu_tensor *t)
{
    for (int d = 0; d < t->ndim; d++)
        if (t->sym[d] >= 0)
            return 1;
    return 0;
}

/* 0 when out and in[0..n_in) have no symbolic dims or c has the sizes; else -1 with err. */
static int syms_ready(gp_cu_ctx *c, const char *fn, const char *op, const gp_cu_tensor *out,
                      const gp_cu_tensor *in, int n_in)
{
    int need = uses_syms(out);
    for (int i = 0; i < n_in; i++)
        need |= uses_syms(&in[i]);
    if (need && (!c->d_syms || !c->h_syms)) {
        snprintf(c->err, sizeof c->err, "%s: %s: symbolic dims but no param block", fn, op);
        return -1;
    }
    return 0;
}

static int launch_argmax(gp_cu_ctx *c, const gp_cu_tensor *out, const gp_cu_tensor *in, void *copy)
{
    KT o = gp_kt_of(c, out), x = gp_kt_of(c, in);
    if (out->dtype != GP_I32 || out->ndim != in->ndim - 1 || x.ne[3] > INT32_MAX ||
        (copy && in->dtype != GP_F32)) {
        snprintf(c->err, sizeof c->err, "argmax: needs x [..., N] and out i32 [...]%s",
                 copy ? ", and f32 x for a copy" : "");
        return -1;
    }
    /* out's dims as the rows of x: one place to the left */
    for (int d = 0; d < 3; d++) {
        o.ne[d] = o.ne[d + 1];
        o.nb[d] = o.nb[d + 1];
        o.sym[d] = o.sym[d + 1];
    }
    o.ne[3] = 1;
    o.sym[3] = -1;
    if (kt_count(x, 3) == 0)
        return 0;
    unsigned cl = c->clusters && x.ne[3] > AM_THREADS ? AM_CLUSTER : 1;
    gp_cu_launch_z(c, cl, k_argmax, dim3(rows_grid(x), 1, cl), dim3(AM_THREADS), 0, o, x,
                   (char *)copy, c->d_syms);
    return gp_cu_check_launch(c, "argmax");
}

extern "C" int gp_cuda_argmax_copy(gp_cu_ctx *c, const gp_cu_tensor *out, const gp_cu_tensor *x,
                                   void *x_copy)
{
    if (syms_ready(c, "gp_cuda_argmax_copy", "argmax", out, x, 1))
        return -1;
    return launch_argmax(c, out, x, x_copy);
}

extern "C" int gp_cuda_compute(gp_cu_ctx *c, gp_op op, const gp_attrs *a, const gp_cu_tensor *out,
                               const gp_cu_tensor *in, int n_in, void *ws, size_t ws_size)
{
    const gp_op_info *info = gp_op_get(op);
    if (!info || n_in < info->min_inputs || n_in > info->max_inputs) {
        snprintf(c->err, sizeof c->err, "gp_cuda_compute: op %d with %d inputs", (int)op, n_in);
        return -1;
    }
    if (syms_ready(c, "gp_cuda_compute", info->name, out, in, n_in))
        return -1;
    if (gp_op_computes_nothing(op))
        return 0;
    switch (op) {
    case GP_OP_ADD:
    case GP_OP_SUB:
    case GP_OP_MUL:
    case GP_OP_DIV:
    case GP_OP_SWIGLU:
        return launch_elementwise(c, op, 0.0f, out, &in[0], &in[1]);
    case GP_OP_SCALE:
    case GP_OP_GELU:
    case GP_OP_GELU_ERF:
    case GP_OP_SILU: {
        int sc = op == GP_OP_SCALE; /* the others have no attributes */
        return launch_elementwise(c, op, sc ? (float)a->f[GP_SCALE_FACTOR] : 0.0f, out, &in[0],
                                  NULL, sc ? (float)a->f[GP_SCALE_SOFTCAP] : 0.0f);
    }
    case GP_OP_CONT:
    case GP_OP_CAST:
        return launch_elementwise(c, EW_COPY, 0.0f, out, &in[0], NULL);
    case GP_OP_ALL_REDUCE:
        /* One device's term: x (+ y); the backend sends several devices' terms to NCCL. */
        if (n_in > 1)
            return launch_elementwise(c, GP_OP_ADD, 0.0f, out, &in[0], &in[1]);
        return out->data == in[0].data ? 0 : launch_elementwise(c, EW_COPY, 0.0f, out, &in[0], NULL);
    case GP_OP_LAYER_NORM:
    case GP_OP_RMS_NORM: {
        int ln = op == GP_OP_LAYER_NORM, has_b = ln && n_in > 2;
        KT o = gp_kt_of(c, out), x = gp_kt_of(c, &in[0]), w = gp_kt_of(c, &in[1]);
        KT b = has_b ? gp_kt_of(c, &in[2]) : w;
        if (kt_count(o, 4) == 0)
            return 0;
        int wt = x.t == GP_F32 && o.t == GP_F32 && b.t == w.t ? ops_typed(c, w.t) : -1;
        gp_cu_launch(c,
                     wt == GP_F16    ? k_norm<GP_F16>
                     : wt == GP_BF16 ? k_norm<GP_BF16>
                     : wt == GP_F32  ? k_norm<GP_F32>
                                     : k_norm<-1>,
                     rows_grid(o), norm_threads(o.ne[3]), 0, ln,
                     (float)a->f[ln ? GP_LAYER_NORM_EPS : GP_RMS_NORM_EPS],
                     ln ? 0.0f : (float)a->f[GP_RMS_NORM_OFFSET], o, x, w, b, has_b,
                     !!(c->late & GP_LATE_NORM), c->d_syms);
        return gp_cu_check_launch(c, "norm");
    }
    case GP_OP_SOFTMAX: {
        KT o = gp_kt_of(c, out), x = gp_kt_of(c, &in[0]);
        if (kt_count(o, 4) == 0)
            return 0;
        gp_cu_launch(c, k_softmax, rows_grid(o), THREADS, 0, (int)a->i[GP_SOFTMAX_CAUSAL],
                     (float)a->f[GP_SOFTMAX_SCALE], o, x, c->d_syms);
        return gp_cu_check_launch(c, "softmax");
    }
    case GP_OP_ROPE: {
        KT o = gp_kt_of(c, out), x = gp_kt_of(c, &in[0]), p = gp_kt_of(c, &in[1]);
        int64_t n = a->i[GP_ROPE_N_DIMS];
        if (out->ndim != 3 || n < 0 || n > o.ne[3] || n % 2) {
            snprintf(c->err, sizeof c->err, "rope: needs x [T, H, D] and even n <= D (n = %lld)",
                     (long long)n);
            return -1;
        }
        if (kt_count(o, 4) == 0)
            return 0;
        gp_cu_rope rp = gp_cuda_rope_of(a, out->dtype);
        if (n_in > 2) {
            KT ff = gp_kt_of(c, &in[2]);
            rp.ff = ff.p;
            rp.ff_nb = ff.nb[3];
        }
        gp_cu_launch(c, k_rope, rows_grid(o), 128, 0, rp, o, x, p, c->d_syms);
        return gp_cu_check_launch(c, "rope");
    }
    case GP_OP_GET_ROWS: {
        if (gp_dtype_is_quant(in[0].dtype)) /* blocks dequantized (cuda_quant.cu) */
            return gp_cu_quant_get_rows(c, out, &in[0], &in[1]);
        KT o = gp_kt_of(c, out), t = gp_kt_of(c, &in[0]), ids = gp_kt_of(c, &in[1]);
        if (out->ndim != 2 || in[0].ndim != 2) {
            snprintf(c->err, sizeof c->err, "get_rows: needs table [V, C] and out [T, C]");
            return -1;
        }
        if (kt_count(o, 4) == 0)
            return 0;
        launch_rows<false>(c, o, t, ids, t, ids);
        return gp_cu_check_launch(c, "get_rows");
    }
    case GP_OP_CONCAT: {
        KT o = gp_kt_of(c, out), ka = gp_kt_of(c, &in[0]), kb = gp_kt_of(c, &in[1]);
        int64_t axis = a->i[GP_CONCAT_AXIS];
        int ax = (int)(axis < 0 ? axis + out->ndim : axis) + 4 - out->ndim;
        if (ax < 4 - out->ndim || ax > 3) {
            snprintf(c->err, sizeof c->err, "concat: axis %lld out of range", (long long)axis);
            return -1;
        }
        int64_t n = kt_count(o, 4);
        if (n == 0)
            return 0;
        gp_cu_launch(c, k_concat, grid_for(n, THREADS), THREADS, 0, ax, o, ka, kb, c->d_syms);
        return gp_cu_check_launch(c, "concat");
    }
    case GP_OP_ARGMAX:
        return launch_argmax(c, out, &in[0], NULL);
    case GP_OP_STORE:
        return launch_store(c, in, NULL, (int)a->i[GP_STORE_RING]);
    case GP_OP_MATMUL:
        return gp_cu_matmul(c, a, out, in, ws, ws_size, NULL, NULL, NULL, NULL);
    case GP_OP_ATTENTION:
        return gp_cu_attention(c, a, out, in, ws, ws_size);
    case GP_OP_MOE:
        return gp_cu_moe(c, a, out, in, ws, ws_size);
    default:
        snprintf(c->err, sizeof c->err, "gp_cuda_compute: unknown op %d", (int)op);
        return -1;
    }
}
