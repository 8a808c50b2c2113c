/* The matrix-vector kernels: one-row products (decode) with 16-byte weight loads, for [N, K]
 * weights (a warp or more per row) and [K, N] weights (split K, combined in a cluster, with
 * atomics or by the last block), their epilogues and staged or folded norms; several products of
 * one x in one launch (gp_cuda_matvec_group); a folded layer norm's constants (gp_cuda_fold). */
#include <cooperative_groups.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>

#include "cuda/cuda_matvec.cuh"
#include "cuda/cuda_quant.cuh"

/* Loads 4 floats of x: from shared memory (a staged norm) or through the read-only path. */
template <bool PRE> __device__ __forceinline__ float4 ld_x4(const float *p)
{
    return PRE ? *(const float4 *)p : __ldg((const float4 *)p);
}
template <bool PRE> __device__ __forceinline__ float ld_x1(const float *p)
{
    return PRE ? *p : __ldg(p);
}

/* xv = the n floats of x at px (n a multiple of 4, px 16-byte aligned), as ld_x4 loads them. */
template <int n, bool PRE> __device__ __forceinline__ void ld_xn(float *xv, const float *px)
{
#pragma unroll
    for (int q = 0; q < n / 4; q++) {
        float4 f = ld_x4<PRE>(px + 4 * q);
        xv[4 * q] = f.x;
        xv[4 * q + 1] = f.y;
        xv[4 * q + 2] = f.z;
        xv[4 * q + 3] = f.w;
    }
}

/* ---- matrix-vector: M == 1, x f32 contiguous, weights 16-bit or f32 with 16-byte rows ---- */

/* Rows of an [N, K] product per block of the first matvec kernel (since removed): try_matvec still
 * counts blocks of that many rows for its limit on products normalizing all of x in every block. */
enum { MV_ROWS_PER_BLOCK = 8 };

enum { KN_TX = 32, KN_TY = 8, KN_UNROLL = 8, KN_ROWS = KN_TY * KN_UNROLL };

/*
 * Weights [K, N] (row k at w + k * ldw bytes, N contiguous): a block covers 32 * V::N columns
 * and the rows of its K split; each warp takes every KN_TY-th row. With several splits, partial
 * sums go to part [nsplit, N] and the last block of a column tile to finish (counted in
 * counters[tile], reset by that block) adds them in split order: deterministic, one launch. PRE: as
 * x is the input of norm nm, normalized into shared memory first (every block normalizes all of
 * x: K floats, from L2).
 */
template <typename W, bool PRE>
__global__ void __launch_bounds__(KN_TX *KN_TY)
    k_matvec_kn(const char *w, int64_t ldw, const float *x, KT o, EPI e, NORM nm, int ksym, int64_t K,
                int64_t N, float *part, unsigned *counters, const int64_t *syms)
{
    typedef vec16<W> V;
    __shared__ float red[KN_TY][KN_TX * V::N];
    __shared__ int last;
    extern __shared__ float4 xs_kn[];
    pdl_begin();
    if (ksym >= 0)
        K = syms[ksym];
    if (PRE) {
        stage_norm(nm, x, K, (float *)xs_kn);
        x = (const float *)xs_kn;
    }
    int tx = threadIdx.x % KN_TX, ty = threadIdx.x / KN_TX, nsplit = gridDim.y;
    int64_t col = ((int64_t)blockIdx.x * KN_TX + tx) * V::N;
    /* Splits of whole KN_ROWS chunks (the launcher's estimate; K here may be the eval's). */
    int64_t per = ((K + nsplit - 1) / nsplit + KN_ROWS - 1) / KN_ROWS * KN_ROWS;
    int64_t k0 = blockIdx.y * per, k1 = min(K, k0 + per);
    float acc[V::N];
#pragma unroll
    for (int e = 0; e < V::N; e++)
        acc[e] = 0.0f;
    if (col < N) {
        int64_t k = k0 + ty;
        for (; k + KN_TY * (KN_UNROLL - 1) < k1; k += KN_ROWS) {
            uint4 u[KN_UNROLL];
            float xv[KN_UNROLL];
#pragma unroll
            for (int i = 0; i < KN_UNROLL; i++) {
                u[i] = ld_stream(w + (k + KN_TY * i) * ldw + col * sizeof(W));
                xv[i] = ld_x1<PRE>(x + k + KN_TY * i);
            }
#pragma unroll
            for (int i = 0; i < KN_UNROLL; i++) {
                float wv[V::N];
                V::unpack(u[i], wv);
#pragma unroll
                for (int e = 0; e < V::N; e++)
                    acc[e] += wv[e] * xv[i];
            }
        }
        for (; k < k1; k += KN_TY) {
            float wv[V::N], xk = ld_x1<PRE>(x + k);
            V::unpack(ld_stream(w + k * ldw + col * sizeof(W)), wv);
#pragma unroll
            for (int e = 0; e < V::N; e++)
                acc[e] += wv[e] * xk;
        }
    }
#pragma unroll
    for (int e = 0; e < V::N; e++)
        red[ty][tx * V::N + e] = acc[e];
    __syncthreads();
    int64_t tile0 = (int64_t)blockIdx.x * KN_TX * V::N;
    for (int j = threadIdx.x; j < KN_TX * V::N; j += blockDim.x) {
        float s = 0.0f;
#pragma unroll
        for (int r = 0; r < KN_TY; r++)
            s += red[r][j];
        if (tile0 + j >= N)
            continue;
        if (nsplit == 1)
            st_f(o.p + (tile0 + j) * o.nb[3], o.t, epi_apply(e, tile0 + j, s));
        else
            part[blockIdx.y * N + tile0 + j] = s;
    }
    if (nsplit == 1)
        return;
    if (!last_of(&counters[blockIdx.x], (unsigned)nsplit, &last))
        return;
    for (int j = threadIdx.x; j < KN_TX * V::N; j += blockDim.x) {
        if (tile0 + j >= N)
            continue;
        float s = 0.0f;
#pragma unroll 8
        for (int i = 0; i < nsplit; i++)
            s += __ldcg(&part[i * N + tile0 + j]);
        st_f(o.p + (tile0 + j) * o.nb[3], o.t, epi_apply(e, tile0 + j, s));
    }
    if (threadIdx.x == 0)
        counters[blockIdx.x] = 0;
}

/* ---- matrix-vector, version 2: every thread issues MV2_U independent 16-byte weight loads before
 * its first multiply; with constant weights (early) the first batch is issued before the wait for
 * the kernel before (PDL), so it overlaps that kernel's tail and the norm's staging. ---- */

enum { MV2_WARPS = 8, MV2_U = 8 };

/* The version-2 kernels' `early` bits: EARLY_W, the first weights are loaded before the PDL wait
 * (constant weights); EARLY_EPI, the epilogue's operands right after it, ahead of the sums;
 * EARLY_NORM, a staged norm's weights before it (constant too); EARLY_EPIC (with EARLY_EPI, [K, N]
 * kernels): the epilogue's operands are all weights (a bias), loaded before the wait too. And
 * X_GELU: the [K, N] kernels stage gelu(x), not x (the product before them left its gelu to them,
 * gp_cu_ctx.acc_gelu). EARLY_TRIG: they let the next kernel start at their start
 * (gp_cu_ctx.trig_early). */
enum { EARLY_W = 1, EARLY_EPI = 2, EARLY_NORM = 4, X_GELU = 8, EARLY_EPIC = 16, EARLY_TRIG = 32 };

/* Zeroes n floats at p, spread over every thread of the grid: a later launch adds into them
 * (gp_cu_ctx.zero_p). */
__device__ __forceinline__ void zero_span(float *p, int64_t n)
{
    int64_t blk = blockIdx.x + (int64_t)gridDim.x * (blockIdx.y + (int64_t)gridDim.y * blockIdx.z);
    int64_t step = (int64_t)blockDim.x * gridDim.x * gridDim.y * gridDim.z;
    for (int64_t i = blk * blockDim.x + threadIdx.x; i < n; i += step)
        p[i] = 0.0f;
}

/*
 * Warps per row of the [N, K] kernels: enough that one batch of loads (MV2_U chunks of 16 bytes per
 * lane) covers a warp's share of the row, so no warp waits for a second batch (a K = 6400 f16 row
 * is 800 chunks: 4 warps). nc: chunks per row at the launch's K.
 */
__host__ __device__ __forceinline__ int nk_split(int64_t nc)
{
    int64_t s = (nc + 32 * MV2_U - 1) / (32 * MV2_U);
    return s <= 1 ? 1 : s <= 2 ? 2 : s <= 4 ? 4 : 8;
}

/*
 * acc += the dot products of x with the chunks u holds: chunk c0 + 32 i for i < U, below ce.
 * RMS: x is an rms_norm's input and gw its weights (W, contiguous): acc += w * (x * (gw + goff)),
 * without the 1 / rms (goff: the norm's weight offset); with sq, also *sq += x * x (the row's
 * statistics, from the loads the dot makes).
 */
template <typename W, int U, bool PRE, bool RMS = false>
__device__ __forceinline__ float nk_dot(const uint4 *u, const float *x, int64_t c0, int64_t ce,
                                        float acc, const char *gw = NULL, float *sq = NULL,
                                        float goff = 0.0f)
{
    typedef vec16<W> V;
#pragma unroll
    for (int i = 0; i < U; i++) {
        int64_t c = c0 + 32 * i;
        if (c >= ce)
            break;
        float xv[V::N], wv[V::N], gv[V::N];
        ld_xn<V::N, PRE>(xv, x + c * V::N);
        if (RMS)
            V::unpack(__ldg((const uint4 *)(gw + c * 16)), gv);
        V::unpack(u[i], wv);
#pragma unroll
        for (int k = 0; k < V::N; k++) {
            if (RMS && sq)
                *sq += xv[k] * xv[k];
            acc += wv[k] * (RMS ? xv[k] * (gv[k] + goff) : xv[k]);
        }
    }
    return acc;
}

/* u[i] = chunk c0 + 32 i of row (16 bytes each) for i < U, zero from chunk ce on. */
template <int U> __device__ __forceinline__ void nk_load(uint4 *u, const char *row, int64_t c0, int64_t ce)
{
#pragma unroll
    for (int i = 0; i < U; i++)
        u[i] = c0 + 32 * i < ce ? ld_stream(row + (c0 + 32 * i) * 16) : make_uint4(0, 0, 0, 0);
}

/* Where a warp works in the [N, K] kernels: S = nk_split warps per row, MV2_WARPS / S rows per
 * block; the warp's share of the row is chunks [cb, ce). */
struct NKW {
    int S, ks, lane;
    int64_t n, cb, ce;
};

__device__ __forceinline__ NKW nk_where(int64_t nc_launch, int64_t first_row)
{
    NKW r;
    int warp = threadIdx.x >> 5;
    r.S = nk_split(nc_launch);
    r.ks = warp % r.S;
    r.lane = threadIdx.x & 31;
    r.n = first_row + warp / r.S;
    return r;
}

__device__ __forceinline__ void nk_share(NKW &r, int64_t nc)
{
    int64_t per = (nc + r.S - 1) / r.S;
    r.cb = r.ks * per;
    r.ce = min(nc, r.cb + per);
}

/* The row's sum: the S warps' partials added in order by the first (lane 0 of ks 0 gets it). */
__device__ __forceinline__ float nk_total(const NKW &r, float acc, float *red)
{
    float sum = warp_sum(acc);
    if (r.S == 1)
        return sum;
    if (r.lane == 0)
        red[threadIdx.x >> 5] = sum;
    __syncthreads();
    if (r.ks != 0)
        return 0.0f;
    float t = 0.0f;
    for (int i = 0; i < r.S; i++)
        t += red[(threadIdx.x >> 5) + i];
    return t;
}

/*
 * Weights [N, K] (row n at w + n * ldw bytes, K contiguous): out[n] = sum_k x[k] w[n][k]. S warps
 * per row (nk_split), each over a contiguous share of the row's chunks; lane l holds chunks
 * cb + l + 32 i. Sums in a fixed order (batch, i, element, the warp's butterfly, then the S
 * partials). PRE: x is the input of norm nm, normalized into shared memory first (dynamic, K
 * floats). Every thread runs to the end (rows past N are clamped, not stored).
 */
template <typename W, bool PRE>
__global__ void __launch_bounds__(MV2_WARPS * 32, 4)
    k_matvec_nk2(const char *w, int64_t ldw, const float *x, KT o, EPI e, NORM nm, int ksym,
                 int64_t K, int64_t N, int early, const int64_t *syms)
{
    typedef vec16<W> V;
    extern __shared__ float4 xs_nk2[];
    __shared__ float red[MV2_WARPS];
    NKW r = nk_where(K / V::N, (int64_t)blockIdx.x * (MV2_WARPS / nk_split(K / V::N)));
    const char *row = w + (r.n < N ? r.n : N - 1) * ldw;
    uint4 u[MV2_U];
    if (PRE && ksym < 0)
        prefetch_norm(nm, 0, K);
    if (early & EARLY_W) { /* weights: no kernel writes them, and ksym < 0 (K is the launch's) */
        nk_share(r, K / V::N);
        nk_load<MV2_U>(u, row, r.cb + r.lane, r.ce);
    }
    pdl_begin();
    /* Not with PRE: its registers would spill. */
    bool epi_ahead = !PRE && (early & EARLY_EPI);
    EpiVals ev;
    if (epi_ahead)
        ev = epi_load(e, r.n < N ? r.n : N - 1);
    if (ksym >= 0)
        K = syms[ksym];
    if (PRE) {
        stage_norm(nm, x, K, (float *)xs_nk2);
        x = (const float *)xs_nk2;
    }
    int64_t nc = K / V::N; /* K % V::N == 0 (checked by the launcher) */
    if (!(early & EARLY_W)) {
        nk_share(r, nc);
        nk_load<MV2_U>(u, row, r.cb + r.lane, r.ce);
    }
    float acc = 0.0f;
    for (int64_t c0 = r.cb + r.lane;;) {
        acc = nk_dot<W, MV2_U, PRE>(u, x, c0, r.ce, acc);
        c0 += 32 * MV2_U;
        if (c0 - r.lane >= r.ce)
            break;
        nk_load<MV2_U>(u, row, c0, r.ce);
    }
    float sum = nk_total(r, acc, red);
    if (r.lane == 0 && r.ks == 0 && r.n < N)
        st_f(o.p + r.n * o.nb[3], o.t,
             epi_apply_vals(e, epi_ahead ? ev : epi_load(e, r.n), sum));
}

/*
 * Short rows ([N, K], at most 32 * MV2_U / 2 chunks: GPT-2 117M's LM head, K = 768): each warp
 * takes two rows, MV2_U / 2 chunks of each per lane, so that a thread has as many bytes in flight
 * as for a long row and the launch needs half the blocks. The sums are k_matvec_nk2's with one
 * warp per row, in the same order: the same bits.
 */
template <typename W>
__global__ void __launch_bounds__(MV2_WARPS * 32, 4)
    k_matvec_nk2_pairs(const char *w, int64_t ldw, const float *x, KT o, EPI e, int64_t K,
                       int64_t N, int early)
{
    typedef vec16<W> V;
    enum { U = MV2_U / 2 };
    int lane = threadIdx.x & 31;
    int64_t n0 = ((int64_t)blockIdx.x * MV2_WARPS + (threadIdx.x >> 5)) * 2, nc = K / V::N;
    const char *row0 = w + min(n0, N - 1) * ldw, *row1 = w + min(n0 + 1, N - 1) * ldw;
    uint4 u0[U], u1[U];
    if (early & EARLY_W) { /* weights: no kernel writes them */
        nk_load<U>(u0, row0, lane, nc);
        nk_load<U>(u1, row1, lane, nc);
    }
    pdl_begin();
    EpiVals ev0, ev1;
    if (early & EARLY_EPI) {
        ev0 = epi_load(e, min(n0, N - 1));
        ev1 = epi_load(e, min(n0 + 1, N - 1));
    }
    if (!(early & EARLY_W)) {
        nk_load<U>(u0, row0, lane, nc);
        nk_load<U>(u1, row1, lane, nc);
    }
    float s0 = warp_sum(nk_dot<W, U, false>(u0, x, lane, nc, 0.0f));
    float s1 = warp_sum(nk_dot<W, U, false>(u1, x, lane, nc, 0.0f));
    if (lane == 0 && n0 < N)
        st_f(o.p + n0 * o.nb[3], o.t,
             epi_apply_vals(e, early & EARLY_EPI ? ev0 : epi_load(e, n0), s0));
    if (lane == 0 && n0 + 1 < N)
        st_f(o.p + (n0 + 1) * o.nb[3], o.t,
             epi_apply_vals(e, early & EARLY_EPI ? ev1 : epi_load(e, n0 + 1), s1));
}

/* ---- grouped matrix-vector: several [N, K] products of one x in one launch ---- */

/* Up to GP_CU_MAX_GROUP products out_s = x w_s^T, the blocks of product s being
 * [block0[s], block0[s + 1]); or, with glu, one product pair written as silu(x w_0^T) * (x w_1^T)
 * to out[0] (a SwiGLU's gate and up projections, the swiglu node's output). */
struct MVG {
    int n, glu, early;
    const char *w[GP_CU_MAX_GROUP];
    int64_t ldw[GP_CU_MAX_GROUP], N[GP_CU_MAX_GROUP];
    unsigned block0[GP_CU_MAX_GROUP + 1];
    KT o[GP_CU_MAX_GROUP];
    /* RMS launches: x is the norm's input, gw its weights (contiguous, of the products' dtype) */
    const char *gw;
    float eps, goff; /* goff: the norm's weight offset (gp_cu_prenorm.offset) */
};

/*
 * The rows of k_matvec_nk2, split and summed the same way (so the same bits as one launch per
 * product). GLU: each warp computes its share of row n of both products, MV2_U / 2 chunks of each
 * in flight. RMS: x is the input of an rms_norm that the products read; each warp also sums the
 * squares of the x it reads, so the row's warps together have the norm's statistics, and the
 * store scales by 1 / rms.
 */
/* Blocks per multiprocessor of the RMS variant: in the 64 registers of 4 it spills, which costs
 * more than the fourth block gains. */
enum { NKG_RMS_BLOCKS = 3 };
template <typename W, bool GLU, bool RMS>
__global__ void __launch_bounds__(MV2_WARPS * 32, RMS ? NKG_RMS_BLOCKS : 4)
    k_matvec_nkg(MVG g, const float *x, int64_t K)
{
    typedef vec16<W> V;
    enum { U = GLU ? MV2_U / 2 : MV2_U };
    __shared__ float red[MV2_WARPS], red2[MV2_WARPS], red3[MV2_WARPS];
    int s = 0;
    while (s + 1 < g.n && blockIdx.x >= g.block0[s + 1])
        s++;
    int64_t nc = K / V::N, N = g.N[s];
    NKW r = nk_where(nc, (int64_t)(blockIdx.x - g.block0[s]) * (MV2_WARPS / nk_split(nc)));
    nk_share(r, nc);
    const char *row = g.w[s] + (r.n < N ? r.n : N - 1) * g.ldw[s];
    const char *row2 = GLU ? g.w[1] + (r.n < N ? r.n : N - 1) * g.ldw[1] : row;
    uint4 u[U], u2[GLU ? U : 1];
    if (RMS)
        prefetch_l2_range(g.gw, K * (int64_t)sizeof(W));
    if (g.early) {
        nk_load<U>(u, row, r.cb + r.lane, r.ce);
        if (GLU)
            nk_load<U>(u2, row2, r.cb + r.lane, r.ce);
    }
    pdl_begin();
    if (!g.early) {
        nk_load<U>(u, row, r.cb + r.lane, r.ce);
        if (GLU)
            nk_load<U>(u2, row2, r.cb + r.lane, r.ce);
    }
    float acc = 0.0f, acc2 = 0.0f, sq = 0.0f;
    for (int64_t c0 = r.cb + r.lane;;) {
        acc = nk_dot<W, U, false, RMS>(u, x, c0, r.ce, acc, g.gw, &sq, g.goff);
        if (GLU)
            acc2 = nk_dot<W, U, false, RMS>(u2, x, c0, r.ce, acc2, g.gw, NULL, g.goff);
        c0 += 32 * U;
        if (c0 - r.lane >= r.ce)
            break;
        nk_load<U>(u, row, c0, r.ce);
        if (GLU)
            nk_load<U>(u2, row2, c0, r.ce);
    }
    float sum = nk_total(r, acc, red), inv = 1.0f;
    if (RMS) /* as k_norm: 1 / sqrt(mean of the squares + eps) */
        inv = 1.0f / sqrtf(nk_total(r, sq, red3) / (float)K + g.eps);
    if (GLU) {
        float up = nk_total(r, acc2, red2);
        if (RMS) {
            sum *= inv;
            up *= inv;
        }
        if (r.lane == 0 && r.ks == 0 && r.n < N)
            st_f(g.o[0].p + r.n * g.o[0].nb[3], g.o[0].t, sum / (1.0f + expf(-sum)) * up);
    } else if (r.lane == 0 && r.ks == 0 && r.n < N) {
        st_f(g.o[s].p + r.n * g.o[s].nb[3], g.o[s].t, RMS ? sum * inv : sum);
    }
}

enum { KN2_TX = 32, KN2_TY = 8, KN2_ROWS = KN2_TY * MV2_U };

/* u[i] = row k + TY i at column byte offset cb, zero from row k1 on or when !ok. */
template <int TY = KN2_TY>
__device__ __forceinline__ void kn2_load(uint4 *u, const char *w, int64_t ldw, int64_t cb, int64_t k,
                                         int64_t k1, bool ok)
{
#pragma unroll
    for (int i = 0; i < MV2_U; i++)
        u[i] = ok && k + TY * i < k1 ? ld_stream(w + (k + TY * i) * ldw + cb)
                                     : make_uint4(0, 0, 0, 0);
}

/* How a [K, N] matvec meets a norm of x before its product: none, x normalized into shared memory
 * first (STAGE), or the layer norm folded into the sums (FOLD: NORM.fold, gp_cuda_fold). */
enum { PRE_NONE = 0, PRE_STAGE = 1, PRE_FOLD = 2 };

/* A folded layer norm's statistics (m: mean - x[0], inv: 1 / rms) and one column's constants c and
 * d (NORM.fold); the product is fold_apply of the sums of (x - x[0]) w W. */
struct FOLDV {
    float m, inv, c, d;
};

__device__ __forceinline__ float fold_apply(const FOLDV &f, float s)
{
    return f.inv * (s - f.m * f.c) + f.d;
}

/* FOLD's x: the split's (x - x[0]) w into xs (thread t: rows k0 + t + i blockDim.x, gw the norm
 * weight of the first), and each warp's sums of x - x[0] and their squares over all of x (K <= 8
 * blockDim.x) into st[warp]. Up to a row per thread, every load is issued before the first use:
 * one round trip. */
__device__ __forceinline__ void fold_stage(const NORM &nm, const float *x, int64_t K, int64_t k0,
                                           int64_t k1, float gw, float *xs, float2 *st)
{
    enum { REG = 8 };
    int t = threadIdx.x;
    float s0 = x[0], v[REG];
#pragma unroll
    for (int j = 0; j < REG; j++) {
        int64_t i = t + (int64_t)j * blockDim.x;
        v[j] = i < K ? x[i] : 0.0f;
    }
    float xk = k0 + t < k1 ? x[k0 + t] : 0.0f;
    float a = 0.0f, b = 0.0f;
#pragma unroll
    for (int j = 0; j < REG; j++) {
        float d = t + (int64_t)j * blockDim.x < K ? v[j] - s0 : 0.0f;
        a += d;
        b += d * d;
    }
    if (k0 + t < k1)
        xs[t] = (xk - s0) * gw;
    for (int64_t j = t + blockDim.x; j < k1 - k0; j += blockDim.x)
        xs[j] = (x[k0 + j] - s0) * norm_w(nm, k0 + j);
    a = warp_sum(a);
    b = warp_sum(b);
    if ((t & 31) == 0)
        st[t >> 5] = make_float2(a, b);
}

/* The statistics into fo from fold_stage's st (NW warps), after a barrier: every thread, and
 * every block over the same x, the same bits. */
template <int NW>
__device__ __forceinline__ void fold_stats(const float2 (&st)[NW], int64_t K, float eps, FOLDV *fo)
{
    float a = 0.0f, b = 0.0f;
#pragma unroll
    for (int i = 0; i < NW; i++) {
        a += st[i].x;
        b += st[i].y;
    }
    float m = a / (float)K;
    fo->m = m;
    fo->inv = 1.0f / sqrtf(fmaxf(b / (float)K - m * m, 0.0f) + eps);
}

/*
 * The sums of one split of a [K, N] product (row k of the weights at w + k * ldw bytes, N
 * contiguous), shared by k_matvec_kn2 and k_matvec_kc. The block (256 threads, TX x TY) covers
 * columns [tile0, tile0 + TX * V::N) and rows [k0, k0 + per) (fixed at launch; cut at K); thread
 * (tx, ty) holds rows k0 + ty + TY i of each batch of TY * MV2_U rows. The split's x (normalized
 * with PRE_STAGE) is staged in shared memory xs [per]. Returns, to thread j < TX * V::N, the
 * split's sum for column tile0 + j (red: [TY][TX * V::N] of shared memory, read until the return:
 * a barrier comes before the caller writes it again). With ecol >= 0 and EARLY_EPI in early, *ev
 * gets the epilogue's operands at column ecol right after the wait. ksym >= 0: K is read from
 * syms then (the launch's K is an upper bound). PRE_FOLD (K <= 8 blockDim.x, ksym < 0): the sums
 * are of (x - x[0]) w, and *fo gets the norm's statistics (every block the same bits) and, with
 * ecol >= 0, column ecol's constants, for fold_apply. zp: zn floats that this launch zeroes
 * right after the wait (gp_cu_ctx.zero_p; NULL: none).
 */
template <typename W, int PRE, int TX>
__device__ __forceinline__ float kn_split_sum(const char *w, int64_t ldw, const float *x,
                                              const NORM &nm, int ksym, int64_t K, int64_t N,
                                              int64_t tile0, int64_t k0, int64_t per, int early,
                                              const int64_t *syms, float *xs,
                                              float (*red)[TX * vec16<W>::N], const EPI &e,
                                              int64_t ecol, EpiVals *ev, FOLDV *fo, float *zp,
                                              int64_t zn)
{
    typedef vec16<W> V;
    enum { TY = 256 / TX, ROWS = TY * MV2_U };
    if (early & EARLY_TRIG) /* the next kernel may start now (its wait still waits for ours) */
        pdl_trigger();
    __shared__ float2 st[PRE == PRE_FOLD ? 8 : 1];
    int tx = threadIdx.x % TX, ty = threadIdx.x / TX;
    int64_t col = tile0 + (int64_t)tx * V::N;
    bool ok = col < N;
    int64_t cb = (ok ? col : 0) * (int64_t)sizeof(W);
    int64_t k1 = min(K, k0 + per);
    uint4 u[MV2_U];
    /* EARLY_NORM: the norm's weights of the split, one element per thread, before the wait (and
     * FOLD's constants, which only gp_cuda_fold writes). */
    bool norm_ahead = PRE && (early & EARLY_NORM) && (PRE == PRE_FOLD || per <= blockDim.x);
    float gw = 0.0f, gb = 0.0f;
    if (norm_ahead && k0 + (int64_t)threadIdx.x < k1) {
        gw = norm_w(nm, k0 + threadIdx.x);
        if (PRE == PRE_STAGE)
            gb = norm_b(nm, k0 + threadIdx.x);
    } else if (PRE == PRE_STAGE && ksym < 0) {
        prefetch_norm(nm, k0, k1);
    }
    if (PRE == PRE_FOLD && (early & EARLY_NORM) && ecol >= 0) {
        fo->c = nm.fold[ecol];
        fo->d = nm.fold[N + ecol];
    }
    if (early & EARLY_W) /* weights: no kernel writes them, and ksym < 0 */
        kn2_load<TY>(u, w, ldw, cb, k0 + ty, k1, ok);
    if ((early & EARLY_EPIC) && ecol >= 0) /* a bias: from HBM, not a round trip after the wait */
        *ev = epi_load(e, ecol);
    pdl_begin();
    STAMP(1);
    if ((early & EARLY_EPI) && !(early & EARLY_EPIC) && ecol >= 0)
        *ev = epi_load(e, ecol);
    if (ksym >= 0) {
        K = syms[ksym];
        k1 = min(K, k0 + per);
    }
    if (zp)
        zero_span(zp, zn);
    if (PRE == PRE_FOLD) {
        if (!(early & EARLY_NORM)) {
            if (k0 + (int64_t)threadIdx.x < k1)
                gw = norm_w(nm, k0 + threadIdx.x);
            if (ecol >= 0) {
                fo->c = nm.fold[ecol];
                fo->d = nm.fold[N + ecol];
            }
        }
        fold_stage(nm, x, K, k0, k1, gw, xs, st);
    } else {
        float mean = 0.0f, inv = 1.0f;
        if (PRE)
            norm_stats(nm, x, K, &mean, &inv);
        for (int64_t j = threadIdx.x; j < k1 - k0; j += blockDim.x)
            xs[j] = !PRE ? (early & X_GELU ? gelu_tanh(x[k0 + j]) : __ldg(x + k0 + j))
                    : norm_ahead ? norm_val(nm, x[k0 + j], mean, inv, gw, gb) /* j == threadIdx.x */
                                 : norm_one(nm, x, k0 + j, mean, inv);
    }
    __syncthreads();
    STAMP(2);
    if (!(early & EARLY_W))
        kn2_load<TY>(u, w, ldw, cb, k0 + ty, k1, ok);
    float acc[V::N];
#pragma unroll
    for (int q = 0; q < V::N; q++)
        acc[q] = 0.0f;
    for (int64_t kb = k0;;) {
        rows_fma<W>(u, xs, kb + ty, TY, k0, k1, acc);
        kb += ROWS;
        if (kb >= k1)
            break;
        kn2_load<TY>(u, w, ldw, cb, kb + ty, k1, ok);
    }
    STAMP(3);
#pragma unroll
    for (int q = 0; q < V::N; q++)
        red[ty][tx * V::N + q] = acc[q];
    __syncthreads();
    STAMP(4);
    float s = 0.0f;
    if (threadIdx.x < TX * V::N) {
#pragma unroll
        for (int r = 0; r < TY; r++)
            s += red[r][threadIdx.x];
    }
    if (PRE == PRE_FOLD)
        fold_stats(st, K, nm.eps, fo);
    return s;
}

/*
 * Weights [K, N]: a block covers 32 * V::N columns and rows [k0, k0 + per) (its split; per a
 * multiple of KN2_ROWS, fixed at launch), summed by kn_split_sum. With several splits, partial
 * sums go to part [nsplit, N] and the last block of a column tile (counters[tile], reset by it)
 * adds them: each ty adds splits ty, ty + KN2_TY, ..., then the ty sums in order. Deterministic
 * for a given (K, per): one launch.
 */
template <typename W, int PRE>
__global__ void __launch_bounds__(KN2_TX *KN2_TY, 4)
    k_matvec_kn2(const char *w, int64_t ldw, const float *x, KT o, EPI e, NORM nm, int ksym,
                 int64_t K, int64_t N, int64_t per, float *part, unsigned *counters, int early,
                 const int64_t *syms, float *zp, int64_t zn)
{
    typedef vec16<W> V;
    __shared__ float red[KN2_TY][KN2_TX * V::N];
    __shared__ int last;
    extern __shared__ float xs_kn2[];
    STAMP_BEGIN(PRE ? 4 : 3);
    int tx = threadIdx.x % KN2_TX, ty = threadIdx.x / KN2_TX, nsplit = gridDim.y;
    int64_t col = ((int64_t)blockIdx.x * KN2_TX + tx) * V::N;
    bool ok = col < N;
    /* Thread j < KN2_TX * V::N (<= blockDim.x) finishes column tile0 + j. */
    int64_t tile0 = (int64_t)blockIdx.x * KN2_TX * V::N;
    EpiVals ev;
    FOLDV fo;
    float sum = kn_split_sum<W, PRE, KN2_TX>(w, ldw, x, nm, ksym, K, N, tile0, blockIdx.y * per,
                                             per, early, syms, xs_kn2, red, e,
                                             min(tile0 + (int64_t)threadIdx.x, N - 1), &ev, &fo,
                                             zp, zn);
    int j = threadIdx.x;
    if (j < KN2_TX * V::N && tile0 + j < N) {
        if (nsplit == 1)
            st_f(o.p + (tile0 + j) * o.nb[3], o.t,
                 epi_apply_vals(e, early & EARLY_EPI ? ev : epi_load(e, tile0 + j),
                                PRE == PRE_FOLD ? fold_apply(fo, sum) : sum));
        else
            part[blockIdx.y * N + tile0 + j] = sum;
    }
    STAMP(5);
    if (nsplit == 1)
        return;
    if (!last_of(&counters[blockIdx.x], (unsigned)nsplit, &last))
        return;
    STAMP(6);
    /* Splits ty, ty + KN2_TY, ... of this thread's V::N columns (16-byte aligned: N % V::N == 0). */
    float s[V::N];
#pragma unroll
    for (int q = 0; q < V::N; q++)
        s[q] = 0.0f;
    if (ok) {
#pragma unroll 4
        for (int i = ty; i < nsplit; i += KN2_TY) {
#pragma unroll
            for (int q = 0; q < V::N; q += 4) {
                float4 f = __ldcg((const float4 *)(part + (int64_t)i * N + col + q));
                s[q] += f.x;
                s[q + 1] += f.y;
                s[q + 2] += f.z;
                s[q + 3] += f.w;
            }
        }
    }
#pragma unroll
    for (int q = 0; q < V::N; q++)
        red[ty][tx * V::N + q] = s[q];
    __syncthreads();
    if (j < KN2_TX * V::N && tile0 + j < N) {
        float t = 0.0f;
#pragma unroll
        for (int r = 0; r < KN2_TY; r++)
            t += red[r][j];
        if (PRE == PRE_FOLD)
            t = fold_apply(fo, t);
        st_f(o.p + (tile0 + j) * o.nb[3], o.t,
             epi_apply_vals(e, early & EARLY_EPI ? ev : epi_load(e, tile0 + j), t));
    }
    if (threadIdx.x == 0)
        counters[blockIdx.x] = 0;
    STAMP(7);
}

enum { KC_MAXC = 16 }; /* the largest cluster k_matvec_kc takes (16 is non-portable) */

/* k_matvec_kc's instance for adds: its epilogue ADDs of operands of W's dtype and the norm's
 * weights of W's dtype, set as constants so that the compiler folds their switches (a smaller
 * kernel, run cold every launch; see att_kv in cuda_attention.cu). kc_typed_ok checks them. */
template <typename W> __device__ __forceinline__ void kc_typed(EPI &e, NORM &nm)
{
#pragma unroll
    for (int k = 0; k < GP_CU_MAX_EPI; k++) {
        e.op[k] = GP_OP_ADD;
        e.other[k].t = vec16<W>::T;
    }
    nm.w.t = nm.b.t = vec16<W>::T;
}

/*
 * Weights [K, N] with the splits of a column tile combined inside a cluster: the grid is
 * (tiles, 1, C) in clusters of (1, 1, C), so block rank r = blockIdx.z is split r, rows
 * [r per, (r + 1) per) (cut at K), and the block covers TX * V::N columns (kn_split_sum). Block r
 * finishes the columns j with j % C == r: every block writes its sum of column j into that
 * block's shared memory (pin, through distributed shared memory), and after one cluster barrier
 * block r adds the C sums of each of its columns in rank order from its own shared memory, then
 * the epilogue. No partials in global memory, no counter, and no read of another block's memory
 * after the barrier (so none waits for the others before it exits): the same bits for a given
 * (K, per, TX). C == 1 launches without clusters (any architecture).
 *
 * With add, no cluster: o already holds an addend of the result (a residual written in
 * place) and every block adds its split's sums into it with atomics, split 0 with the epilogue e
 * (then adds only: o + its split's sums + e's operands). The order of the adds varies from launch
 * to launch: the last bits may too.
 */
template <typename W, int PRE, int TX, bool ADD>
__global__ void __launch_bounds__(256, 4)
    k_matvec_kc(const char *w, int64_t ldw, const float *x, KT o, EPI e, NORM nm, int64_t K,
                int64_t N, int64_t per, int early, int add, float *zp, int64_t zn)
{
    typedef vec16<W> V;
    enum { TC = TX * V::N };
    if (ADD) { /* the instance for adds (kc_typed_ok): the operands' dtypes as constants */
        add = 1;
        kc_typed<W>(e, nm);
    }
    __shared__ float red[256 / TX][TC];
    extern __shared__ float xs_kc[];
    STAMP_BEGIN(PRE ? 2 : 1);
    int C = gridDim.z, r = blockIdx.z, j = threadIdx.x;
    if (C > 1 && !add)
        cluster_started_arrive();
    int64_t tile0 = (int64_t)blockIdx.x * TC;
    bool fin = j < TC && tile0 + j < N && (add || j % C == r);
    bool epi = fin && (!add || r == 0);
    EpiVals ev;
    FOLDV fo;
    float s = kn_split_sum<W, PRE, TX>(w, ldw, x, nm, -1, K, N, tile0, r * per, per, early, NULL,
                                       xs_kc, red, e, epi ? tile0 + j : -1, &ev, &fo, zp, zn);
    if (!(early & EARLY_EPI) && epi)
        ev = epi_load(e, tile0 + j);
    if (add) {
        /* split 0 adds the fold's constants too; the others their sums scaled */
        if (PRE == PRE_FOLD)
            s = epi ? fold_apply(fo, s) : fo.inv * s;
        if (fin)
            atomicAdd((float *)(o.p + (tile0 + j) * o.nb[3]), epi ? epi_apply_vals(e, ev, s) : s);
        return;
    }
    if (C == 1) {
        if (fin)
            st_f(o.p + (tile0 + j) * o.nb[3], o.t,
                 epi_apply_vals(e, ev, PRE == PRE_FOLD ? fold_apply(fo, s) : s));
        return;
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
    __trap(); /* no clusters before sm_90: gp_cuda_matvec_cluster_ok keeps C at 1 there */
#elif defined(__CUDA_ARCH__)
    namespace cg = cooperative_groups;
    __shared__ float pin[TC + KC_MAXC]; /* [C][own]: split i's sum of column r + C k at i own + k */
    cg::cluster_group cl = cg::this_cluster();
    int own = (TC + C - 1) / C;
    cluster_started_wait();
    if (j < TC)
        cl.map_shared_rank(pin, j % C)[r * own + j / C] = s;
    cl.sync();
    STAMP(5);
    if (fin) {
        float t = 0.0f;
        for (int i = 0; i < C; i++)
            t += pin[i * own + j / C];
        if (PRE == PRE_FOLD)
            t = fold_apply(fo, t);
        st_f(o.p + (tile0 + j) * o.nb[3], o.t, epi_apply_vals(e, ev, t));
    }
    STAMP(6);
#endif
}

void gp_cu_stamps_matmul(void *f)
{
#ifdef GPLAN_STAMPS
    /* Phases (STAMP n: the end of phase n; 0 is the kernel's start): 1 the wait for the kernel
     * before, 2 x staged (normalized with _pre), 3 the sums of the split, 4 the block's sums;
     * kc: 5 the cluster barrier, 6 the columns stored; kn2: 5 stored (or the split's partials),
     * 6 the last block's count, 7 its sums stored. */
    static const char *const names[] = {"kc", "kc_pre", "kn2", "kn2_pre"};
    stamps_print((FILE *)f, "matmul", names, 4);
#else
    (void)f;
#endif
}

extern "C" void gp_cuda_stamps_dump(const char *path)
{
#ifdef GPLAN_STAMPS
    FILE *f = fopen(path, "a");
    if (!f)
        return;
    gp_cu_stamps_matmul(f);
    gp_cu_stamps_attention(f);
    fclose(f);
#else
    (void)path;
#endif
}

/* Dynamic shared memory for a staged norm: K floats (none without one). */
static size_t norm_smem(int64_t K)
{
    return (size_t)K * sizeof(float);
}

template <typename W>
static void launch_kn(const gp_cu_ctx *c, dim3 grid, const char *w, int64_t ldw, const float *x,
                      const KT &o, const EPI &e, const NORM *nm, int ksym, int64_t K, int64_t N,
                      float *part)
{
    if (nm)
        gp_cu_launch(c, k_matvec_kn<W, true>, grid, KN_TX * KN_TY, norm_smem(K), w, ldw, x, o, e, *nm,
                     ksym, K, N, part, c->d_counters, c->d_syms);
    else
        gp_cu_launch(c, k_matvec_kn<W, false>, grid, KN_TX * KN_TY, 0, w, ldw, x, o, e, NORM(), ksym,
                     K, N, part, c->d_counters, c->d_syms);
}

template <typename W>
static void launch_nk2(const gp_cu_ctx *c, unsigned grid, const char *w, int64_t ldw, const float *x,
                       const KT &o, const EPI &e, const NORM *nm, int ksym, int64_t K, int64_t N,
                       int early)
{
    size_t smem = nm ? norm_smem(K) : 0;
    if (nm)
        gp_cu_launch(c, k_matvec_nk2<W, true>, grid, MV2_WARPS * 32, smem, w, ldw, x, o, e, *nm,
                     ksym, K, N, early, c->d_syms);
    else
        gp_cu_launch(c, k_matvec_nk2<W, false>, grid, MV2_WARPS * 32, smem, w, ldw, x, o, e, NORM(),
                     ksym, K, N, early, c->d_syms);
}

template <typename W>
static void launch_kn2(const gp_cu_ctx *c, dim3 grid, const char *w, int64_t ldw, const float *x,
                       const KT &o, const EPI &e, const NORM *nm, int pm, int ksym, int64_t K,
                       int64_t N, int64_t per, float *part, int early)
{
    size_t smem = (size_t)per * sizeof(float);
    if (pm == PRE_FOLD)
        gp_cu_launch(c, k_matvec_kn2<W, PRE_FOLD>, grid, KN2_TX * KN2_TY, smem, w, ldw, x, o, e,
                     *nm, ksym, K, N, per, part, c->d_counters, early, c->d_syms, c->zero_p,
                     c->zero_n);
    else if (nm)
        gp_cu_launch(c, k_matvec_kn2<W, PRE_STAGE>, grid, KN2_TX * KN2_TY, smem, w, ldw, x, o, e,
                     *nm, ksym, K, N, per, part, c->d_counters, early, c->d_syms, c->zero_p,
                     c->zero_n);
    else
        gp_cu_launch(c, k_matvec_kn2<W, PRE_NONE>, grid, KN2_TX * KN2_TY, smem, w, ldw, x, o, e,
                     NORM(), ksym, K, N, per, part, c->d_counters, early, c->d_syms, c->zero_p,
                     c->zero_n);
}

/* k_matvec_kc by weight type, norm (PRE_*), tile width (TX = 32, 16 or 8) and, for PRE_NONE and
 * PRE_FOLD, the instance for adds (typed: kc_typed's dtypes hold). */
typedef void (*kc_fn)(const char *, int64_t, const float *, KT, EPI, NORM, int64_t, int64_t,
                      int64_t, int, int, float *, int64_t);

template <typename W, int PRE, bool ADD> static kc_fn kc_width(int tx)
{
    return tx == 32 ? k_matvec_kc<W, PRE, 32, ADD> : tx == 16 ? k_matvec_kc<W, PRE, 16, ADD>
                                                              : k_matvec_kc<W, PRE, 8, ADD>;
}

template <typename W> static kc_fn kc_pre(int pm, int tx, int typed)
{
    return pm == PRE_FOLD    ? typed ? kc_width<W, PRE_FOLD, true>(tx)
                                     : kc_width<W, PRE_FOLD, false>(tx)
           : pm == PRE_STAGE ? kc_width<W, PRE_STAGE, false>(tx)
           : typed           ? kc_width<W, PRE_NONE, true>(tx)
                             : kc_width<W, PRE_NONE, false>(tx);
}

static kc_fn kc_kernel(int wt, int pm, int tx, int typed)
{
    if (wt == GP_F16)
        return kc_pre<__half>(pm, tx, typed);
    if (wt == GP_BF16)
        return kc_pre<__nv_bfloat16>(pm, tx, typed);
    return kc_pre<float>(pm, tx, typed);
}

/* 1 when k_matvec_kc's instance for adds takes a launch of weights of dtype wt: it adds (add)
 * without a staged norm (pm), e is ADDs of operands of dtype wt, the norm's weights (nm, maybe
 * NULL) are of dtype wt. */
static int kc_typed_ok(const gp_cu_ctx *c, int wt, int pm, int add, const EPI &e, const NORM *nm)
{
    int ok = add && pm != PRE_STAGE && !c->kc_generic;
    for (int k = 0; k < e.n; k++)
        ok &= e.op[k] == GP_OP_ADD && e.other[k].t == wt;
    return ok && (!nm || (nm->w.t == wt && (!nm->has_b || nm->b.t == wt)));
}

extern "C" int gp_cuda_matvec_cluster_ok(int n, int *fit)
{
    static const int wts[3] = {GP_F16, GP_BF16, GP_F32};
    int ok = n >= 2 && n <= KC_MAXC;
    for (int m = 2; fit && m <= n && m <= KC_MAXC; m++)
        fit[m] = 0;
    for (int m = 2; ok && m <= n; m++) {
        int least = 0;
        for (int i = 0; ok && i < 3 * 3 * 3; i++) {
            kc_fn k = kc_kernel(wts[i / 9], (i / 3) % 3, 32 >> (i % 3), 0);
            if (m > 8 &&
                cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1)) {
                ok = 0;
                break;
            }
            cudaLaunchAttribute at[2];
            cudaLaunchConfig_t cfg = gp_cu_config(NULL, 0, (unsigned)m, dim3(1, 1, (unsigned)m),
                                                  dim3(256), norm_smem(8192), at);
            int clusters = 0;
            ok = cudaOccupancyMaxActiveClusters(&clusters, k, &cfg) == cudaSuccess && clusters > 0;
            if (!least || clusters < least)
                least = clusters;
        }
        if (fit)
            fit[m] = ok ? least : 0;
    }
    cudaGetLastError();
    return ok;
}

/*
 * The cluster split of K for [K, N] weights (k_matvec_kc): for each tile width (TX = 32, 16 and 8
 * threads of vn columns each), C splits of per = ceil(K / C) rows per tile, C at most
 * c->mv_cluster, for about bps blocks per multiprocessor in all, and no more clusters
 * than fit on the device at once (c->mv_cluster_fit). Takes the width whose split is the fewest
 * batches of rows (the first is loaded before the PDL wait), then the most blocks. 0 when
 * clusters are off, or every split would be more than 4 batches or 32 KiB of x (kn2 then).
 * With add, splits that add into the output with atomics (no clusters): C at most c->mv_add, or
 * c->mv_add_narrow for N <= 1024.
 */
static int kc_split(const gp_cu_ctx *c, int64_t K, int64_t N, int64_t vn, int bps, int add,
                    int *tx, int64_t *per, int64_t *ns)
{
    int maxc = c->mv_cluster;
    if (add)
        maxc = N <= 1024 && c->mv_add_narrow > 1 ? c->mv_add_narrow : c->mv_add;
    if (maxc < 2 || K <= 0 || N <= 0 || bps < 1)
        return 0;
    int64_t target = (int64_t)(c->n_sm > 0 ? c->n_sm : 132) * bps;
    int64_t best = 0, best_blocks = 0;
    for (int t = 32; t >= 8; t /= 2) {
        int64_t tiles = (N + t * vn - 1) / (t * vn), C = target / tiles, rows = 256 / t * MV2_U;
        C = C < 1 ? 1 : C > maxc ? maxc : C;
        while (!add && C > 1 && c->mv_cluster_fit[C] > 0 && tiles > c->mv_cluster_fit[C])
            C--;
        int64_t p = (K + C - 1) / C;
        C = (K + p - 1) / p;
        int64_t batches = (p + rows - 1) / rows, blocks = tiles * C;
        if (p > 8192 || batches > 4)
            continue;
        if (!best || batches < best || (batches == best && blocks > best_blocks)) {
            best = batches;
            best_blocks = blocks;
            *tx = t;
            *per = p;
            *ns = C;
        }
    }
    return best > 0;
}

/*
 * Blocks per multiprocessor for a product adding into zeroed output bytes (acc: GPT-2's c_attn and
 * c_fc, their layer norms folded): 2 when that many blocks' first batches, loaded before the PDL
 * wait, hold the whole matrix, else 4 (as many as fit at once), for as many of its bytes early as
 * can be. Both beat one count for all sizes (bench/gpu-notes.md).
 */
static int acc_bps(const gp_cu_ctx *c, int64_t bytes)
{
    int64_t first = (int64_t)(c->n_sm > 0 ? c->n_sm : 132) * 2 * 256 * MV2_U * 16;
    return bytes <= first ? 2 : 4;
}

/* 1 when bytes [p, p + n) lie in the constant range (weights), which kernels may read early. */
static int is_const(const gp_cu_ctx *c, const char *p, int64_t n)
{
    return !c->no_early && c->const_hi && p >= (const char *)c->const_lo && n >= 0 &&
           (uintptr_t)p + (uintptr_t)n <= (uintptr_t)c->const_hi;
}

static std::atomic<int64_t> mv_adds(0), mv_folds(0), mv_accs(0), x_gelus(0), x_gelus_apart(0),
    kc_typeds(0), mv_trigs(0);

extern "C" int64_t gp_cuda_matvec_typed_count(void)
{
    return kc_typeds.load();
}

extern "C" int64_t gp_cuda_matvec_add_count(void)
{
    return mv_adds.load();
}

extern "C" int64_t gp_cuda_matvec_fold_count(void)
{
    return mv_folds.load();
}

extern "C" int64_t gp_cuda_matvec_acc_count(int which)
{
    return which == 0 ? mv_accs.load() : which == 1 ? x_gelus.load() : x_gelus_apart.load();
}

extern "C" int64_t gp_cuda_matvec_trig_count(void)
{
    return mv_trigs.load();
}

/* A [K, N] split's PRE_* for norm nm (NULL: none): FOLD where the norm comes folded and x fits
 * the statistics' registers (kn_split_sum). */
static int pre_mode(const NORM *nm, int ksym, int64_t K)
{
    if (!nm)
        return PRE_NONE;
    return nm->fold && nm->is_ln && ksym < 0 && K <= 8 * 256 ? PRE_FOLD : PRE_STAGE;
}

/* gp_cuda_fold's constants, a thread per column j: dst[j] = sum_k w_k W_kj, dst[N + j] = sum_k
 * b_k W_kj, in the order of k. */
__global__ void k_fold(const char *wt, int dt, int es, int64_t ldw, int64_t K, int64_t N, NORM nm,
                       float *dst)
{
    pdl_begin();
    int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= N)
        return;
    const char *p = wt + j * es;
    float c = 0.0f, d = 0.0f;
#pragma unroll 8
    for (int64_t k = 0; k < K; k++) {
        float v = ld_f(p + k * ldw, dt);
        c += norm_w(nm, k) * v;
        d += norm_b(nm, k) * v;
    }
    dst[j] = c;
    dst[N + j] = d;
}

/*
 * 1 when a one-row product's splits may add into o with atomics (k_matvec_kc's add): o is f32, x
 * shares no bytes with it (blocks still read x while others add), and e is ADDs of operands that
 * share none either, except, when o is not zero, one ADD of o itself (a residual written in place:
 * f32, the same row); with gelu_ok, e may end in a GELU, left to o's reader (*gelu = 1). *rest is
 * e without that ADD and that GELU. zero: o holds zeros (c->acc: an earlier launch zeroed it).
 */
static int adds_into(const EPI &e, const KT &o, const float *x, int64_t K, int64_t N, int zero,
                     int gelu_ok, EPI *rest, int *gelu)
{
    uintptr_t olo, ohi, xlo = (uintptr_t)x, xhi = (uintptr_t)(x + K);
    kt_span(o, &olo, &ohi);
    int n = e.n, self = -1;
    *gelu = gelu_ok && n > 0 && e.op[n - 1] == GP_OP_GELU;
    n -= *gelu;
    if (o.t != GP_F32 || n < (zero ? 0 : 1) || (xlo < ohi && olo < xhi))
        return 0;
    for (int k = 0; k < n; k++) {
        const KT &t = e.other[k];
        if (e.op[k] != GP_OP_ADD)
            return 0;
        if (!zero && self < 0 && t.p == o.p && t.t == GP_F32 && t.ne[3] == N && t.nb[3] == o.nb[3])
            self = k;
        else if (kt_meets(t, olo, ohi))
            return 0;
    }
    if (!zero && self < 0)
        return 0;
    *rest = e;
    rest->n = 0;
    for (int k = 0; k < n; k++)
        if (k != self) {
            rest->op[rest->n] = e.op[k];
            rest->other[rest->n++] = e.other[k];
        }
    return 1;
}

/*
 * The version-2 split of K for [K, N] weights: about mv_bps blocks per multiprocessor in all,
 * splits of whole KN2_ROWS batches, each split's x in at most 32 KiB of shared memory. Sets *per
 * and *nsplit; 0 when the workspace or the counters can't take it (then version 1 serves).
 */
static int kn2_split(const gp_cu_ctx *c, int64_t K, int64_t N, int64_t tiles, size_t ws_size,
                     const void *ws, int64_t *per, int64_t *nsplit)
{
    if (K <= 0 || N <= 0)
        return 0;
    int64_t target = (int64_t)(c->n_sm > 0 ? c->n_sm : 132) * (c->mv_bps > 0 ? c->mv_bps : 4);
    int64_t ns = (target + tiles - 1) / tiles;
    if (ns < 1)
        ns = 1;
    int64_t p = (K + ns - 1) / ns;
    p = (p + KN2_ROWS - 1) / KN2_ROWS * KN2_ROWS;
    if (p < KN2_ROWS)
        p = KN2_ROWS;
    if (p > 8192)
        p = 8192; /* 32 KiB of x */
    ns = (K + p - 1) / p;
    if (ns > 65535)
        return 0;
    if (ns > 1 && (!ws || (size_t)(ns * N) * sizeof(float) > ws_size || tiles > c->n_counters ||
                   !c->d_counters))
        return 0;
    *per = p;
    *nsplit = ns;
    return 1;
}

/* The norm of pre as a NORM, with x its input; 0 when the layout doesn't fit the staging (x one
 * contiguous f32 row of K, 16-byte aligned; K floats in 32 KiB of shared memory). */
static int norm_of(gp_cu_ctx *c, const gp_cu_prenorm *pre, int64_t K, NORM *nm, const float **x)
{
    KT kx = gp_kt_of(c, &pre->x);
    *nm = norm_params(c, pre);
    if (kx.t != GP_F32 || kt_count(kx, 3) != 1 || kx.ne[3] != K || kx.nb[3] != 4 ||
        ((uintptr_t)kx.p & 15) || nm->w.ne[3] != K || kt_count(nm->w, 3) != 1 ||
        norm_smem(K) > 32 * 1024 || (nm->has_b && (nm->b.ne[3] != K || kt_count(nm->b, 3) != 1)))
        return 0;
    *x = (const float *)kx.p;
    return 1;
}

__global__ void k_gelu_inplace(float *x, int64_t n)
{
    pdl_begin();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)blockDim.x * gridDim.x)
        x[i] = gelu_tanh(x[i]);
}

/* c->x_gelu where the product's kernel cannot stage gelu(x): x [n] (f32, contiguous) becomes
 * gelu(x) in place first (only the product reads it). 0, or -1 with c->err set. */
int gp_cu_x_gelu_now(gp_cu_ctx *c, const float *x, int64_t n)
{
    c->x_gelu = 0;
    unsigned blocks = (unsigned)((n + 255) / 256 < 1024 ? (n + 255) / 256 : 1024);
    gp_cu_launch(c, k_gelu_inplace, blocks > 0 ? blocks : 1, 256, 0, (float *)x, n);
    x_gelus_apart++;
    return gp_cu_check_launch(c, "gelu_inplace");
}

/* EARLY_EPIC when epilogues load early (EARLY_EPI) and every operand of e (of N columns, or one)
 * is a weight (the constant range): a [K, N] kernel then loads them before its wait; else 0. */
static int epi_const(const gp_cu_ctx *c, const EPI &e, int64_t N)
{
    int ok = c->epi_early && c->epi_const && e.n > 0;
    for (int k = 0; k < e.n && ok; k++) {
        const KT &t = e.other[k];
        ok = e.op[k] == GP_OP_GELU ||
             is_const(c, t.p, (t.ne[3] == 1 ? 0 : N - 1) * t.nb[3] + es_of(t.t));
    }
    return ok ? EARLY_EPIC : 0;
}

/* What a [K, N] kernel launch took of the context's requests: the zeroing, the accumulation
 * (with its gelu left to the reader), gelu(x). */
static void launched_kn(gp_cu_ctx *c, int fl, int acc, int gelu)
{
    c->zero_done = c->zero_p != NULL;
    c->acc_done = acc;
    c->acc_gelu_done = gelu;
    mv_trigs += (fl & EARLY_TRIG) != 0;
    if (fl & X_GELU) {
        c->x_gelu = 0;
        x_gelus++;
    }
}

/*
 * Tries the matrix-vector kernels; 1 when launched, 0 when the shapes don't fit (nothing launched),
 * -1 on error. With pre: a is the norm's output, computed in the kernel from pre->x.
 */
int gp_cu_try_matvec(gp_cu_ctx *c, const KT &o0, const KT &ka, const KT &kb, int ta, int tb,
                      const gp_cu_tensor *in, void *ws, size_t ws_size, const gp_cu_epilogue *epi,
                      const gp_cu_prenorm *pre)
{
    const KT &o = o0;
    if (c->no_matvec || o.ne[0] * o.ne[1] != 1 || o.ne[2] != 1 || ka.ne[0] * ka.ne[1] != 1 ||
        kb.ne[0] * kb.ne[1] != 1 || ka.t != GP_F32)
        return 0;
    if (kb.t != GP_F16 && kb.t != GP_BF16 && kb.t != GP_F32)
        return 0;
    mat A = mat_of(ka, ta), B = mat_of(kb, tb);
    int64_t N = o.ne[3], K = ta ? ka.ne[2] : ka.ne[3], es = es_of(kb.t), vn = 16 / es;
    int ksym = in[0].sym[in[0].ndim - (ta ? 2 : 1)];
    /* x must be contiguous and 16-byte aligned, weight rows 16-byte aligned. */
    if (A.sc != 4 || ((uintptr_t)A.p & 15) || ((uintptr_t)B.p & 15))
        return 0;
    const float *x = (const float *)A.p;
    NORM nm;
    if (pre && (ta || ksym >= 0 || !norm_of(c, pre, K, &nm, &x)))
        return 0;
    /* The epilogue's operands: one row of N (or a scalar); the result goes to epi->out. */
    EPI e;
    e.n = 0;
    KT ot = o;
    if (epi && epi->n > 0) {
        ot = gp_kt_of(c, &epi->out);
        if (kt_count(ot, 3) != 1 || ot.ne[3] != N || epi->n > GP_CU_MAX_EPI)
            return 0;
        e.n = epi->n;
        for (int k = 0; k < epi->n; k++) {
            e.op[k] = epi->op[k];
            if (epi->op[k] == GP_OP_GELU)
                continue;
            e.other[k] = gp_kt_of(c, &epi->other[k]);
            if (kt_count(e.other[k], 3) != 1 || (e.other[k].ne[3] != N && e.other[k].ne[3] != 1) ||
                (epi->op[k] != GP_OP_ADD && epi->op[k] != GP_OP_MUL))
                return 0;
        }
    }
    const NORM *pn = pre ? &nm : NULL;
    if (B.sr == es && B.sc % 16 == 0 && K % vn == 0) {
        /* [N, K]: K contiguous, rows B.sc bytes apart. */
        if (c->x_gelu && gp_cu_x_gelu_now(c, x, K))
            return -1;
        unsigned grid = (unsigned)((N + MV_ROWS_PER_BLOCK - 1) / MV_ROWS_PER_BLOCK);
        /* Every block normalizes all of x: past a few waves of blocks (an LM head) that costs
         * more than the norm's own launch. */
        if (pn && grid > 2048)
            return 0;
        int early = ksym < 0 && is_const(c, B.p, (N - 1) * B.sc + K * es);
        unsigned rows = (unsigned)(MV2_WARPS / nk_split(K / vn));
        unsigned g2 = (unsigned)((N + rows - 1) / rows);
        int fl = (early ? EARLY_W : 0) | (c->epi_early ? EARLY_EPI : 0);
        if (c->mv_pairs && !pn && ksym < 0 && K / vn <= 32 * MV2_U / 2) {
            unsigned gp = (unsigned)((N + 2 * MV2_WARPS - 1) / (2 * MV2_WARPS));
            if (kb.t == GP_F16)
                gp_cu_launch(c, k_matvec_nk2_pairs<__half>, gp, MV2_WARPS * 32, 0, B.p, B.sc,
                             x, ot, e, K, N, fl);
            else if (kb.t == GP_BF16)
                gp_cu_launch(c, k_matvec_nk2_pairs<__nv_bfloat16>, gp, MV2_WARPS * 32, 0, B.p,
                             B.sc, x, ot, e, K, N, fl);
            else
                gp_cu_launch(c, k_matvec_nk2_pairs<float>, gp, MV2_WARPS * 32, 0, B.p, B.sc,
                             x, ot, e, K, N, fl);
            return gp_cu_check_launch(c, "matvec_nk2_pairs") ? -1 : 1;
        }
        if (kb.t == GP_F16)
            launch_nk2<__half>(c, g2, B.p, B.sc, x, ot, e, pn, ksym, K, N, fl);
        else if (kb.t == GP_BF16)
            launch_nk2<__nv_bfloat16>(c, g2, B.p, B.sc, x, ot, e, pn, ksym, K, N, fl);
        else
            launch_nk2<float>(c, g2, B.p, B.sc, x, ot, e, pn, ksym, K, N, fl);
        return gp_cu_check_launch(c, "matvec_nk2") ? -1 : 1;
    }
    if (B.sc == es && B.sr % 16 == 0 && N % vn == 0) {
        /* [K, N]: N contiguous, rows B.sr bytes apart; split K until the GPU has ~4 blocks per
         * multiprocessor. */
        int64_t tiles = (N + KN_TX * vn - 1) / (KN_TX * vn), per2, ns2;
        int early = ksym < 0 && is_const(c, B.p, (K - 1) * B.sr + N * es);
        int fl = (early ? EARLY_W : 0) | (c->epi_early ? EARLY_EPI : 0) |
                 (c->trig_early ? EARLY_TRIG : 0);
        if (pn && c->norm_early && is_const(c, pn->w.p, K * pn->w.nb[3]) &&
            (!pn->has_b || is_const(c, pn->b.p, K * pn->b.nb[3])))
            fl |= EARLY_NORM;
        int tx;
        /* add: the splits add into o with atomics, o holding a residual or zeros (acc) */
        EPI rest;
        int add = 0, acc = 0, gelu = 0;
        if (c->mv_add > 1 && ksym < 0) {
            add = adds_into(e, ot, x, K, N, 0, 0, &rest, &gelu);
            if (!add && c->acc)
                add = acc = adds_into(e, ot, x, K, N, 1, c->acc_gelu, &rest, &gelu);
        }
        int bps = pn && !add ? c->mv_cluster_pre : c->mv_cluster_bps > 0 ? c->mv_cluster_bps : 3;
        if (acc && c->mv_cluster_bps <= 0)
            bps = acc_bps(c, K * N * es);
        int kc = ksym < 0 &&
                 kc_split(c, K, N, vn, bps, add, &tx, &per2, &ns2);
        int kn2 = !kc && kn2_split(c, K, N, tiles, ws_size, ws, &per2, &ns2);
        if (c->x_gelu && !(kc || kn2) && gp_cu_x_gelu_now(c, x, K))
            return -1;
        if (c->x_gelu) /* staged by the kernel below */
            fl |= X_GELU;
        if (kc) {
            dim3 g((unsigned)((N + tx * vn - 1) / (tx * vn)), 1, (unsigned)ns2);
            int pm = pre_mode(pn, ksym, K);
            int typed = kc_typed_ok(c, kb.t, pm, add, add ? rest : e, pn);
            fl |= epi_const(c, add ? rest : e, N);
            gp_cu_launch_z(c, add ? 0 : (unsigned)ns2, kc_kernel(kb.t, pm, tx, typed), g,
                           dim3(256), norm_smem(per2), B.p, B.sr, x, ot, add ? rest : e,
                           pn ? *pn : NORM(), K, N, per2, fl, add, c->zero_p, c->zero_n);
            mv_adds += add && !acc;
            kc_typeds += typed;
            mv_accs += acc;
            mv_folds += pm == PRE_FOLD;
            launched_kn(c, fl, acc, gelu);
            return gp_cu_check_launch(c, "matvec_kc") ? -1 : 1;
        }
        if (kn2) {
            dim3 g2((unsigned)tiles, (unsigned)ns2);
            float *part = (float *)ws;
            int pm = pre_mode(pn, ksym, K);
            fl |= epi_const(c, e, N);
            if (kb.t == GP_F16)
                launch_kn2<__half>(c, g2, B.p, B.sr, x, ot, e, pn, pm, ksym, K, N, per2, part, fl);
            else if (kb.t == GP_BF16)
                launch_kn2<__nv_bfloat16>(c, g2, B.p, B.sr, x, ot, e, pn, pm, ksym, K, N, per2,
                                          part, fl);
            else
                launch_kn2<float>(c, g2, B.p, B.sr, x, ot, e, pn, pm, ksym, K, N, per2, part, fl);
            mv_folds += pm == PRE_FOLD;
            launched_kn(c, fl, 0, 0);
            return gp_cu_check_launch(c, "matvec_kn2") ? -1 : 1;
        }
        /* About two blocks per multiprocessor, each at least two chunks of KN_ROWS rows deep. */
        int64_t nsplit = (264 + tiles - 1) / tiles, maxs = (K + 2 * KN_ROWS - 1) / (2 * KN_ROWS);
        if (nsplit > maxs)
            nsplit = maxs;
        if (nsplit > 65535)
            nsplit = 65535;
        if (!ws || (size_t)(nsplit * N) * sizeof(float) > ws_size || tiles > c->n_counters ||
            !c->d_counters)
            nsplit = 1;
        if (nsplit < 1)
            nsplit = 1;
        dim3 grid((unsigned)tiles, (unsigned)nsplit);
        float *part = (float *)ws;
        if (kb.t == GP_F16)
            launch_kn<__half>(c, grid, B.p, B.sr, x, ot, e, pn, ksym, K, N, part);
        else if (kb.t == GP_BF16)
            launch_kn<__nv_bfloat16>(c, grid, B.p, B.sr, x, ot, e, pn, ksym, K, N, part);
        else
            launch_kn<float>(c, grid, B.p, B.sr, x, ot, e, pn, ksym, K, N, part);
        return gp_cu_check_launch(c, "matvec_kn") ? -1 : 1;
    }
    return 0;
}

template <typename W>
static void launch_nkg(const gp_cu_ctx *c, unsigned blocks, const MVG &m, const float *x, int64_t K,
                       int glu, int rms)
{
    unsigned t = MV2_WARPS * 32;
    if (glu && rms)
        gp_cu_launch(c, k_matvec_nkg<W, true, true>, blocks, t, 0, m, x, K);
    else if (glu)
        gp_cu_launch(c, k_matvec_nkg<W, true, false>, blocks, t, 0, m, x, K);
    else if (rms)
        gp_cu_launch(c, k_matvec_nkg<W, false, true>, blocks, t, 0, m, x, K);
    else
        gp_cu_launch(c, k_matvec_nkg<W, false, false>, blocks, t, 0, m, x, K);
}

/* The grouped launch (cuda_kernels.h); *launched = 0 when a product doesn't fit it. */
extern "C" int gp_cuda_matvec_group(gp_cu_ctx *c, const gp_cu_group *g, int *launched)
{
    *launched = 0;
    if (!c->no_matvec && g->n >= 1 && gp_dtype_is_quant(g->w[0].dtype))
        return gp_cu_quant_group(c, g, launched);
    if (c->no_matvec || g->n < 2 || g->n > GP_CU_MAX_GROUP || (g->glu && g->n != 2))
        return 0;
    /* With the norm: rms only */
    int rms = g->has_norm;
    if (rms && g->norm.is_ln)
        return 0;
    const gp_cu_tensor *xt = rms ? &g->norm.x : &g->x;
    KT kx = gp_kt_of(c, xt);
    int64_t K = kx.ne[3];
    if (kx.t != GP_F32 || kt_count(kx, 3) != 1 || kx.nb[3] != 4 || ((uintptr_t)kx.p & 15) ||
        xt->sym[xt->ndim - 1] >= 0)
        return 0;
    MVG m;
    memset(&m, 0, sizeof m);
    if (rms) {
        KT gw = gp_kt_of(c, &g->norm.w);
        if (gw.ne[3] != K || kt_count(gw, 3) != 1 || gw.nb[3] != es_of(gw.t) ||
            ((uintptr_t)gw.p & 15) || gw.t != g->w[0].dtype)
            return 0;
        m.gw = gw.p;
        m.eps = g->norm.eps;
        m.goff = g->norm.offset;
    }
    m.n = g->n;
    m.glu = g->glu;
    m.early = 1;
    int wt = -1;
    unsigned blocks = 0, rows = (unsigned)(MV2_WARPS / nk_split(K * es_of(g->w[0].dtype) / 16));
    for (int s = 0; s < g->n; s++) {
        KT kb = gp_kt_of(c, &g->w[s]), o = gp_kt_of(c, &g->out[g->glu ? 0 : s]);
        mat B = mat_of(kb, g->tb[s]);
        int64_t es = es_of(kb.t), N = g->tb[s] ? kb.ne[2] : kb.ne[3];
        int64_t kw = g->tb[s] ? kb.ne[3] : kb.ne[2];
        if ((kb.t != GP_F16 && kb.t != GP_BF16 && kb.t != GP_F32) || (wt >= 0 && kb.t != wt) ||
            kb.ne[0] * kb.ne[1] != 1 || kw != K || B.sr != es || B.sc % 16 || K % (16 / es) ||
            ((uintptr_t)B.p & 15) || kt_count(o, 3) != 1 || o.ne[3] != N || N <= 0 ||
            (g->glu && s == 1 && N != m.N[0]))
            return 0;
        wt = kb.t;
        m.w[s] = B.p;
        m.ldw[s] = B.sc;
        m.N[s] = N;
        m.o[s] = o;
        m.early &= is_const(c, B.p, (N - 1) * B.sc + K * es);
        m.block0[s] = blocks;
        if (!g->glu || s == 0)
            blocks += (unsigned)((N + rows - 1) / rows);
    }
    m.block0[g->n] = blocks;
    if (g->glu)
        m.block0[1] = blocks; /* every block is in product 0's range */
    const float *x = (const float *)kx.p;
    if (wt == GP_F16)
        launch_nkg<__half>(c, blocks, m, x, K, g->glu, rms);
    else if (wt == GP_BF16)
        launch_nkg<__nv_bfloat16>(c, blocks, m, x, K, g->glu, rms);
    else
        launch_nkg<float>(c, blocks, m, x, K, g->glu, rms);
    if (gp_cu_check_launch(c, "matvec_group"))
        return -1;
    *launched = 1;
    return 0;
}

extern "C" int64_t gp_cuda_fold(gp_cu_ctx *c, const gp_cu_prenorm *pre, const gp_attrs *a,
                                const gp_cu_tensor *w, float *dst)
{
    KT kb = gp_kt_of(c, w);
    int tb = a->i[GP_MATMUL_TB] != 0;
    mat B = mat_of(kb, tb);
    int64_t K = tb ? kb.ne[3] : kb.ne[2], N = tb ? kb.ne[2] : kb.ne[3];
    int64_t es = kb.t == GP_F16 || kb.t == GP_BF16 ? 2 : kb.t == GP_F32 ? 4 : 0;
    NORM nm = norm_params(c, pre);
    /* try_matvec's [K, N] case, and pre_mode's FOLD */
    if (!pre->is_ln || w->ndim != 2 || !es || B.sc != es || B.sr % 16 || N % (16 / es) ||
        K < 1 || K > 8 * 256 || nm.w.ne[3] != K || (nm.has_b && nm.b.ne[3] != K))
        return 0;
    if (!dst)
        return 2 * N;
    gp_cu_launch(c, k_fold, (unsigned)((N + 127) / 128), 128, 0, (const char *)B.p, kb.t, (int)es,
                 B.sr, K, N, nm, dst);
    return gp_cu_check_launch(c, "fold") ? -1 : 2 * N;
}
