/* The moe op's CUDA pieces shared by two files: the routing and grouping arithmetic as host and
 * device functions (cuda_moe.cu's kernels and their host twins), and the experts' product kernels
 * as templates over a row loader, instantiated by cuda_moe.cu for f32, f16 and bf16 weights and
 * by cuda_quant.cu for the block formats (its deq8). C++ only. */
#ifndef GP_CUDA_MOE_CUH
#define GP_CUDA_MOE_CUH

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cuda/cuda_hostdev.cuh"
#include "cuda/cuda_internal.cuh"
#include "cuda/cuda_moe.h"

/* ---- arithmetic run on the device and on the host ---- */

/* f32 operations rounded on their own (cuda/cuda_hostdev.cuh's mul_rn, add_rn, sub_rn, div_rn:
 * never contracted into fused multiply-adds), as the CPU's code is compiled (-ffp-contract=off),
 * so that the twins give the CPU's bits. */
__host__ __device__ __forceinline__ float moe_bits_f32(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

/* cpu/cpu_internal.h's gp_expf operation for operation (the same bits). */
__host__ __device__ __forceinline__ float moe_expf(float x)
{
    float xc = x < -104.0f ? -104.0f : x; /* NaN compares false: kept, then made 0 */
    xc = xc > 89.0f ? 89.0f : xc;
    xc = xc != xc ? 0.0f : xc;
    const float magic = 12582912.0f;
    float nf = sub_rn(add_rn(mul_rn(xc, 1.44269504f), magic), magic);
    float r = sub_rn(sub_rn(xc, mul_rn(nf, 0.693145752f)), mul_rn(nf, 1.42860677e-6f));
    float p = 1.98412698e-4f;
    p = add_rn(mul_rn(p, r), 1.38888889e-3f);
    p = add_rn(mul_rn(p, r), 8.33333333e-3f);
    p = add_rn(mul_rn(p, r), 4.16666667e-2f);
    p = add_rn(mul_rn(p, r), 1.66666667e-1f);
    p = add_rn(mul_rn(p, r), 0.5f);
    p = add_rn(mul_rn(p, r), 1.0f);
    p = add_rn(mul_rn(p, r), 1.0f);
    int32_t n = (int32_t)nf, n1 = n / 2;
    float s1 = moe_bits_f32((uint32_t)(n1 + 127) << 23);
    float s2 = moe_bits_f32((uint32_t)(n - n1 + 127) << 23);
    float y = mul_rn(mul_rn(p, s1), s2);
    return x != x ? x : y;
}

/* silu as the CPU's unary op computes it. */
__host__ __device__ __forceinline__ float moe_silu(float x)
{
    return div_rn(x, add_rn(1.0f, moe_expf(-x)));
}

/* gp_acc8_total: the 8 lanes of a sum combined pairwise. */
__host__ __device__ __forceinline__ float moe_acc8_total(const float *l)
{
    return add_rn(add_rn(add_rn(l[0], l[1]), add_rn(l[2], l[3])),
                   add_rn(add_rn(l[4], l[5]), add_rn(l[6], l[7])));
}

/* cpu_moe.c's softmax of v[0..n) in place: v - max, exponentials, their sum in 8 lanes (element
 * i in lane i % 8), each divided by it. The route kernel runs the same operations over a warp. */
__host__ __device__ __forceinline__ void moe_softmax_seq(float *v, int n)
{
    float mx = -INFINITY, l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int i = 0; i < n; i++)
        mx = fmaxf(mx, v[i]);
    for (int i = 0; i < n; i++)
        v[i] = moe_expf(sub_rn(v[i], mx));
    for (int i = 0; i < n; i++)
        l[i % 8] = add_rn(l[i % 8], v[i]);
    float sum = moe_acc8_total(l);
    for (int i = 0; i < n; i++)
        v[i] = div_rn(v[i], sum);
}

/* A candidate of a top-k round: value v of expert i (i < 0: none). */
struct MoePick {
    float v;
    int i;
};

/* The better of two candidates: the larger value, the lower index of equal ones. A total order
 * (NaN values are never candidates), so a warp's reduction in any order gives the same pick. */
__host__ __device__ __forceinline__ MoePick moe_better(MoePick a, MoePick b)
{
    if (a.i < 0)
        return b;
    if (b.i < 0)
        return a;
    return b.v > a.v || (b.v == a.v && b.i < a.i) ? b : a;
}

__host__ __device__ __forceinline__ int moe_taken(const int32_t *pick, int j, int e)
{
    for (int q = 0; q < j; q++)
        if (pick[q] == e)
            return 1;
    return 0;
}

/* Lane `lane` of nl's share of top-k round j (pick[0..j) taken): the best untaken non-NaN value
 * of its experts lane, lane + nl, ..., and in *first the lowest untaken one (INT_MAX: none). */
__host__ __device__ __forceinline__ MoePick moe_lane_best(const float *v, int E, int lane, int nl,
                                                          const int32_t *pick, int j, int *first)
{
    MoePick b = {0.0f, -1};
    *first = INT_MAX;
    for (int e = lane; e < E; e += nl) {
        if (moe_taken(pick, j, e))
            continue;
        if (*first == INT_MAX)
            *first = e;
        if (v[e] == v[e]) {
            MoePick c = {v[e], e};
            b = moe_better(b, c);
        }
    }
    return b;
}

/* Round j's pick as cpu_moe.c's top_k makes it, from the lanes' reductions: its scan starts at
 * the lowest untaken expert f and moves only to a strictly larger value, so a NaN at f stays and
 * a NaN elsewhere is never taken: f when v[f] is NaN, else the best non-NaN (v[f] is one). */
__host__ __device__ __forceinline__ int moe_round_pick(const float *v, int first, MoePick best)
{
    return v[first] != v[first] ? first : best.i;
}

/* The k weights of the picks pick[0..k) (rank order) of v by norm (GP_MOE_*), then picks and
 * weights sorted by expert: cpu_moe.c's route after its top_k, operation for operation. */
__host__ __device__ __forceinline__ void moe_finish(const float *v, int32_t *pick, float *w, int k,
                                                    int norm)
{
    for (int j = 0; j < k; j++)
        w[j] = v[pick[j]];
    if (norm == GP_MOE_TOPK_SOFTMAX) {
        moe_softmax_seq(w, k);
    } else if (norm == GP_MOE_SOFTMAX_NORM) {
        float sum = 0.0f;
        for (int j = 0; j < k; j++)
            sum = add_rn(sum, w[j]);
        for (int j = 0; j < k; j++)
            w[j] = div_rn(w[j], sum);
    }
    for (int j = 1; j < k; j++)
        for (int q = j; q > 0 && pick[q - 1] > pick[q]; q--) {
            int32_t pe = pick[q];
            float pw = w[q];
            pick[q] = pick[q - 1], w[q] = w[q - 1];
            pick[q - 1] = pe, w[q - 1] = pw;
        }
}

/* off [E + 1] and toff [E + 1] from the experts' row counts: rows and tiles of
 * GP_CUDA_MOE_TM rows, each expert's after the lower ones'. */
__host__ __device__ __forceinline__ void moe_offsets(const int32_t *cnt, int E, int32_t *off,
                                                     int32_t *toff)
{
    off[0] = 0;
    toff[0] = 0;
    for (int e = 0; e < E; e++) {
        off[e + 1] = off[e] + cnt[e];
        toff[e + 1] = toff[e] + (cnt[e] + GP_CUDA_MOE_TM - 1) / GP_CUDA_MOE_TM;
    }
}

/* A lane's rank among the lanes of ballot m below it. */
__host__ __device__ __forceinline__ int moe_rank(unsigned m, int lane)
{
    unsigned below = m & ((1u << lane) - 1u);
#ifdef __CUDA_ARCH__
    return __popc(below);
#else
    return __builtin_popcount(below);
#endif
}

/* The last e with off[e] <= r (off nondecreasing from off[0] = 0 <= r < off[E]): the expert
 * whose rows [off[e], off[e + 1]) hold r, never an empty one. */
__host__ __device__ __forceinline__ int moe_row_expert(const int32_t *off, int E, int r)
{
    int lo = 0, hi = E - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (off[mid] <= r)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* ---- the experts' products ---- */

/* One product launch over the experts: y[r] = x[r] W_e^T for each row r of expert e (off), or
 * for the router (off NULL) every row on W itself. */
struct MoeProd {
    const uint8_t *w0, *w1; /* expert 0's [N, K] weight; w1 up's (glu), else NULL */
    int64_t eb;             /* bytes from one expert's weight to the next (0: the router) */
    int64_t rb;             /* bytes between W's rows */
    const float *x;         /* [rows, K], rows ldx floats apart */
    int64_t ldx;
    float *y;               /* [rows, N], rows ldy floats apart */
    int64_t ldy;
    int K, N, E;
    int glu;                /* 1: y = silu(x W0^T) * (x W1^T) */
    const int32_t *off;     /* device [E + 1]: each expert's rows; NULL: the router */
    const int32_t *toff;    /* device [E + 1]: each expert's tiles (k_moe_tiles) */
    int64_t rows_launch;    /* the rows at the launch sizes: a bound of the eval's */
    int rsym;               /* the router: its rows are this symbol's size (-1: rows_launch) */
};

enum { MOE_VW = 4, MOE_TN = 64, MOE_TK = 32, MOE_TT = 256 };

/*
 * One output a warp (few rows: decode): warp w of block (bx, r) takes column n = bx MOE_VW + w of
 * row r, finds r's expert in off and reads that expert's row n of W only: lane l takes elements
 * 8 l .. 8 l + 7 of every 256, L::ld8 loading them (0 past K); the warp adds the lanes' sums.
 */
template <class L> __global__ void __launch_bounds__(MOE_VW * 32) k_moe_vec(MoeProd p, const int64_t *syms)
{
    pdl_begin();
    int64_t rows = p.off ? p.off[p.E] : p.rsym >= 0 ? syms[p.rsym] : p.rows_launch;
    rows = rows < p.rows_launch ? rows : p.rows_launch;
    int lane = threadIdx.x & 31, n = blockIdx.x * MOE_VW + (threadIdx.x >> 5);
    if (n >= p.N) /* the whole warp */
        return;
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
        int e = p.off ? moe_row_expert(p.off, p.E, (int)r) : 0;
        size_t at = (size_t)e * (size_t)p.eb + (size_t)n * (size_t)p.rb;
        const float *x = p.x + r * p.ldx;
        float a0 = 0.0f, a1 = 0.0f;
        for (int e0 = lane * 8; e0 < p.K; e0 += 256) {
            float v[8], xv[8];
#pragma unroll
            for (int u = 0; u < 8; u++)
                xv[u] = e0 + u < p.K ? x[e0 + u] : 0.0f;
            L::ld8(p.w0 + at, e0, p.K, v);
#pragma unroll
            for (int u = 0; u < 8; u++)
                a0 = fmaf(v[u], xv[u], a0);
            if (p.glu) {
                L::ld8(p.w1 + at, e0, p.K, v);
#pragma unroll
                for (int u = 0; u < 8; u++)
                    a1 = fmaf(v[u], xv[u], a1);
            }
        }
        a0 = warp_sum(a0);
        a1 = warp_sum(a1);
        if (lane == 0)
            p.y[r * p.ldy + n] = p.glu ? moe_silu(a0) * a1 : a0;
    }
}

/*
 * Tiles of GP_CUDA_MOE_TM rows x MOE_TN columns (prompts): block (bx, y) takes tile y of the
 * experts' tiles (toff: the expert, then its rows from off), columns [64 bx, 64 bx + 64); per 32
 * of K, x's tile and W's (L::ld8: a thread loads 8 elements of one row) go to shared memory, and
 * each thread accumulates 4 x 4 outputs (rows ty + 16 i, columns tx + 16 j), of up's too (glu).
 */
template <class L> __global__ void __launch_bounds__(MOE_TT) k_moe_tiles(MoeProd p, const int64_t *syms)
{
    enum { TM = GP_CUDA_MOE_TM };
    __shared__ float xs[MOE_TK][TM + 4];        /* [k][m] */
    __shared__ float ws[2][MOE_TK][MOE_TN + 4]; /* [k][n] */
    (void)syms;
    pdl_begin();
    int tiles = p.toff[p.E], n0 = blockIdx.x * MOE_TN;
    int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    int lr = tid >> 2, lc = (tid & 3) * 8; /* the row and 8 columns this thread loads */
    for (int yt = blockIdx.y; yt < tiles; yt += gridDim.y) { /* the same for the whole block */
        int e = moe_row_expert(p.toff, p.E, yt);
        int64_t r0 = p.off[e] + (int64_t)(yt - p.toff[e]) * TM, r1 = p.off[e + 1];
        float acc[2][4][4];
#pragma unroll
        for (int g = 0; g < 2; g++)
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    acc[g][i][j] = 0.0f;
        size_t at = (size_t)e * (size_t)p.eb + (size_t)(n0 + lr) * (size_t)p.rb;
        int wok = n0 + lr < p.N;
        const float *xr = r0 + lr < r1 ? p.x + (r0 + lr) * p.ldx : NULL;
        for (int k0 = 0; k0 < p.K; k0 += MOE_TK) {
            for (int g = 0; g <= p.glu; g++) {
                float v[8];
                if (wok) {
                    L::ld8((g ? p.w1 : p.w0) + at, k0 + lc, p.K, v);
                } else {
#pragma unroll
                    for (int u = 0; u < 8; u++)
                        v[u] = 0.0f;
                }
#pragma unroll
                for (int u = 0; u < 8; u++)
                    ws[g][lc + u][lr] = v[u];
            }
#pragma unroll
            for (int u = 0; u < 8; u++) {
                int k = k0 + lc + u;
                xs[lc + u][lr] = xr && k < p.K ? xr[k] : 0.0f;
            }
            __syncthreads();
#pragma unroll 4
            for (int k = 0; k < MOE_TK; k++) {
                float a[4];
#pragma unroll
                for (int i = 0; i < 4; i++)
                    a[i] = xs[k][ty + 16 * i];
                for (int g = 0; g <= p.glu; g++)
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        float b = ws[g][k][tx + 16 * j];
#pragma unroll
                        for (int i = 0; i < 4; i++)
                            acc[g][i][j] = fmaf(a[i], b, acc[g][i][j]);
                    }
            }
            __syncthreads();
        }
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int64_t m = r0 + ty + 16 * i;
            if (m >= r1)
                continue;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int n = n0 + tx + 16 * j;
                if (n < p.N)
                    p.y[m * p.ldy + n] =
                        p.glu ? moe_silu(acc[0][i][j]) * acc[1][i][j] : acc[0][i][j];
            }
        }
    }
}

/* Host: p's product in k_moe_vec (vec) or k_moe_tiles over at most `tiles` tiles, rows loaded by
 * L. Launch errors are read back by the caller (gp_cu_check_launch). */
template <class L>
static inline void moe_launch(const gp_cu_ctx *c, const MoeProd &p, int vec, int64_t tiles)
{
    unsigned gx = (unsigned)((p.N + (vec ? MOE_VW : MOE_TN) - 1) / (vec ? MOE_VW : MOE_TN));
    int64_t ny = vec ? p.rows_launch : tiles;
    unsigned gy = (unsigned)(ny < 1 ? 1 : ny > 65535 ? 65535 : ny);
    if (vec)
        gp_cu_launch(c, k_moe_vec<L>, dim3(gx, gy), dim3(MOE_VW * 32), 0, p, c->d_syms);
    else
        gp_cu_launch(c, k_moe_tiles<L>, dim3(gx, gy), dim3(MOE_TT), 0, p, c->d_syms);
}

/* cuda_quant.cu: moe_launch with deq8 for the block format t; 0, or -1 when t is not one. */
int gp_cu_moe_quant_launch(const gp_cu_ctx *c, gp_dtype t, const MoeProd &p, int vec,
                           int64_t tiles);

#endif
