/* CUDA kernels on ggml's block-quantized weights (cuda/cuda_quant.cuh): one-token products reading
 * the blocks directly, prompt products through tiles dequantized into shared memory, lookups. */
#include <atomic>
#include <type_traits>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_hostdev.cuh"
#include "cuda/cuda_matvec.cuh"
#include "cuda/cuda_qdot.cuh"
#include "cuda/cuda_quant.cuh"

static std::atomic<int64_t> quant_counts[6];


extern "C" int64_t gp_cuda_quant_count(int which)
{
    return which >= 0 && which < 6 ? quant_counts[which].load() : 0;
}

/* A little-endian binary16 at p (any alignment: blocks of 18, 22, 34 or 210 bytes). */
__host__ __device__ __forceinline__ float ld_h16(const uint8_t *p)
{
    return h2f_bits((uint32_t)(p[0] | p[1] << 8));
}

/*
 * Elements e0 .. e0 + 7 of a row of blocks of type T into v, e0 a multiple of 8 (so that they lie
 * in one block, one sub-block of 32 and one group of 16). The arithmetic is cpu/quant.c's
 * deq_block operation for operation, rounded as it is (no contraction into fused multiply-adds), so
 * the values are gp_quant_dequantize_row's bit for bit. Host code too, for gp_cuda_quant_deq8_host.
 */
template <int T> __host__ __device__ __forceinline__ void deq8(const uint8_t *row, int e0, float (&v)[8])
{
    if (gp_dtype_block_c(T) == 32) {
        const int bytes = gp_dtype_bytes_c(T);
        const uint8_t *b = row + (size_t)(e0 >> 5) * bytes;
        int j0 = e0 & 31;
        float d = ld_h16(b);
        if (T == GP_Q8_0) {
            HD_UNROLL
            for (int u = 0; u < 8; u++)
                v[u] = mul_rn((float)(int8_t)b[2 + j0 + u], d);
            return;
        }
        float m = T == GP_Q4_1 || T == GP_Q5_1 ? ld_h16(b + 2) : 0.0f;
        const uint8_t *qh = b + (T == GP_Q5_0 ? 2 : 4);
        uint32_t h = 0;
        if (T == GP_Q5_0 || T == GP_Q5_1)
            h = (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
        const uint8_t *qs = b + (T == GP_Q4_0 ? 2 : T == GP_Q4_1 ? 4 : T == GP_Q5_0 ? 6 : 8);
        HD_UNROLL
        for (int u = 0; u < 8; u++) {
            int i = j0 + u;
            int q = qs[i & 15] >> (i >> 4 << 2) & 15;
            if (T == GP_Q5_0 || T == GP_Q5_1)
                q |= (int)(h >> i & 1) << 4;
            if (T == GP_Q4_0)
                v[u] = mul_rn(d, (float)(q - 8));
            else if (T == GP_Q5_0)
                v[u] = mul_rn(d, (float)(q - 16));
            else
                v[u] = add_rn(mul_rn(d, (float)q), m);
        }
    } else if (T == GP_Q4_K || T == GP_Q5_K) {
        const uint8_t *b = row + (size_t)(e0 >> 8) * gp_dtype_bytes_c(T);
        int i0 = e0 & 255, j = i0 >> 5, l0 = i0 & 31;
        float d = ld_h16(b), dmin = ld_h16(b + 2);
        const uint8_t *s = b + 4;
        int sc, mn;
        if (j < 4) {
            sc = s[j] & 63;
            mn = s[j + 4] & 63;
        } else {
            sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
            mn = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
        }
        float dl = mul_rn(d, (float)sc), ml = mul_rn(dmin, (float)mn);
        const uint8_t *qh = b + 16, *qs = T == GP_Q5_K ? b + 48 : b + 16;
        HD_UNROLL
        for (int u = 0; u < 8; u++) {
            int l = l0 + u;
            int q = qs[32 * (j >> 1) + l] >> 4 * (j & 1) & 15;
            if (T == GP_Q5_K)
                q |= (qh[l] >> j & 1) << 4;
            v[u] = sub_rn(mul_rn(dl, (float)q), ml);
        }
    } else { /* GP_Q6_K */
        const uint8_t *b = row + (size_t)(e0 >> 8) * 210;
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        int i0 = e0 & 255;
        float ds = mul_rn(ld_h16(b + 208), (float)sc[i0 >> 4]); /* 8 elements: one group of 16 */
        HD_UNROLL
        for (int u = 0; u < 8; u++) {
            int i = i0 + u, h = i >> 7, k = i >> 5 & 3, l = i & 31;
            int q = (ql[64 * h + 32 * (k & 1) + l] >> 4 * (k >> 1) & 15) |
                    (qh[32 * h + l] >> 2 * k & 3) << 4;
            v[u] = mul_rn(ds, (float)(q - 32));
        }
    }
}

/* ---- one token: M <= MV_MAXM rows of x ---- */

enum { MV_WARPS = 4, MV_MAXM = 8 };

/*
 * Warp w of block b takes output column n = b * MV_WARPS + w: lane l reads elements 8 l .. 8 l + 7
 * of every 256 of W's row n (whole blocks per group of lanes, 1 KB of x per round for the warp),
 * each value used for every row of x; then the lanes' sums are added by the warp.
 * w: [N] rows of rb bytes; x [M, K] (row m at x + m ldx); y [M, N] (row m at y + m ldy).
 */
template <int T>
__global__ void __launch_bounds__(MV_WARPS * 32)
    k_qmatvec(const uint8_t *w, size_t rb, const float *x, int64_t ldx, float *y, int64_t ldy,
              int K, int N, int64_t m_launch, int msym, const int64_t *syms)
{
    pdl_begin();
    int64_t M = msym >= 0 ? syms[msym] : m_launch;
    M = M < m_launch ? M : m_launch;
    int lane = threadIdx.x & 31, n = blockIdx.x * MV_WARPS + (threadIdx.x >> 5);
    if (n >= N) /* the whole warp */
        return;
    const uint8_t *row = w + (size_t)n * rb;
    float acc[MV_MAXM];
#pragma unroll
    for (int m = 0; m < MV_MAXM; m++)
        acc[m] = 0.0f;
    for (int e0 = lane * 8; e0 < K; e0 += 256) {
        float v[8];
        deq8<T>(row, e0, v);
#pragma unroll
        for (int m = 0; m < MV_MAXM; m++) {
            if (m >= M)
                break;
            const float *xr = x + m * ldx + e0;
#pragma unroll
            for (int u = 0; u < 8; u++)
                acc[m] = fmaf(v[u], xr[u], acc[m]);
        }
    }
#pragma unroll
    for (int m = 0; m < MV_MAXM; m++) {
        if (m >= M) /* M is the same for every lane */
            break;
        float s = warp_sum(acc[m]);
        if (lane == 0)
            y[m * ldy + n] = s;
    }
}

/* ---- prompts: tiles of TM x TN outputs ---- */

enum { TM = 64, TN = 64, TK = 32, TTHREADS = 256 };

/*
 * Block (bx, by) computes y rows [64 by, 64 by + 64) x columns [64 bx, 64 bx + 64): per 32 of K,
 * x's tile and W's tile (dequantized: a thread takes 8 elements of one row) go to shared memory,
 * k-major, and each thread accumulates 4 x 4 outputs (rows ty + 16 i, columns tx + 16 j).
 */
template <int T>
__global__ void __launch_bounds__(TTHREADS)
    k_qmatmul_tiles(const uint8_t *w, size_t rb, const float *x, int64_t ldx, float *y,
                    int64_t ldy, int K, int N, int64_t m_launch, int msym, const int64_t *syms)
{
    __shared__ float xs[TK][TM + 4]; /* [k][m] */
    __shared__ float ws[TK][TN + 4]; /* [k][n] */
    pdl_begin();
    int64_t M = msym >= 0 ? syms[msym] : m_launch;
    M = M < m_launch ? M : m_launch;
    int64_t m0 = (int64_t)blockIdx.y * TM;
    int n0 = blockIdx.x * TN;
    if (m0 >= M) /* the whole block, before any barrier */
        return;
    int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    int lr = tid >> 2, lc = (tid & 3) * 8; /* the row and 8 columns this thread loads */
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
            acc[i][j] = 0.0f;
    const uint8_t *wrow = n0 + lr < N ? w + (size_t)(n0 + lr) * rb : NULL;
    const float *xrow = m0 + lr < M ? x + (m0 + lr) * ldx : NULL;
    for (int k0 = 0; k0 < K; k0 += TK) { /* K is a multiple of 32 */
        float v[8];
        if (wrow) {
            deq8<T>(wrow, k0 + lc, v);
        } else {
#pragma unroll
            for (int u = 0; u < 8; u++)
                v[u] = 0.0f;
        }
#pragma unroll
        for (int u = 0; u < 8; u++) {
            ws[lc + u][lr] = v[u];
            xs[lc + u][lr] = xrow ? xrow[k0 + lc + u] : 0.0f;
        }
        __syncthreads();
#pragma unroll 8
        for (int k = 0; k < TK; k++) {
            float a[4], bv[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                a[i] = xs[k][ty + 16 * i];
                bv[i] = ws[k][tx + 16 * i];
            }
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    acc[i][j] = fmaf(a[i], bv[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int64_t m = m0 + ty + 16 * i;
        if (m >= M)
            continue;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int n = n0 + tx + 16 * j;
            if (n < N)
                y[m * ldy + n] = acc[i][j];
        }
    }
}

/* ---- prompts on tensor cores: W dequantized to f16 in tiles of the workspace, cuBLAS ---- */

/* dst [nt, kt] f16 (rows kt apart) = W rows [n0, n0 + nt), columns [k0, k0 + kt): the values of
 * gp_quant_dequantize_row rounded to f16, 8 elements a thread (kt a multiple of 8). */
template <int T>
__global__ void k_qdeq_f16(const uint8_t *w, size_t rb, int n0, int k0, int nt, int kt, __half *dst)
{
    pdl_begin();
    int64_t per = kt / 8, total = (int64_t)nt * per;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int r = (int)(i / per), e = (int)(i - r * per) * 8;
        float v[8];
        deq8<T>(w + (size_t)(n0 + r) * rb, k0 + e, v);
        __half2 h[4];
#pragma unroll
        for (int u = 0; u < 4; u++)
            h[u] = __floats2half2_rn(v[2 * u], v[2 * u + 1]);
        *(uint4 *)(dst + (size_t)r * kt + e) = *(const uint4 *)h;
    }
}

/* dst [M, kt] f16 (rows kt apart) = x [M, k0 .. k0 + kt) rounded (x's rows ldx floats apart). */
__global__ void k_qx_f16(const float *x, int64_t ldx, int64_t M, int k0, int kt, __half *dst)
{
    pdl_begin();
    int64_t per = kt / 8, total = M * per;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t m = i / per;
        int e = (int)(i - m * per) * 8;
        const float *src = x + m * ldx + k0 + e;
        __half2 h[4];
#pragma unroll
        for (int u = 0; u < 4; u++)
            h[u] = __floats2half2_rn(src[2 * u], src[2 * u + 1]);
        *(uint4 *)(dst + (size_t)m * kt + e) = *(const uint4 *)h;
    }
}

/* ---- lookups ---- */

/* Block-stride over out's rows t: row ids[t] of the table (rows of rb bytes, V of them), 8
 * elements a thread at a time, stored in out's dtype; ids out of range are skipped. */
template <int T>
__global__ void k_qget_rows(KT o, const uint8_t *tab, size_t rb, int64_t V, KT ids, int C,
                            const int64_t *syms)
{
    pdl_begin();
    kt_resolve(o, syms);
    for (int64_t t = blockIdx.x; t < o.ne[2]; t += gridDim.x) {
        int32_t id = *(const int32_t *)(ids.p + t * ids.nb[3]);
        if (id < 0 || id >= V)
            continue;
        const uint8_t *row = tab + (size_t)id * rb;
        char *dst = o.p + t * o.nb[2];
        for (int e0 = threadIdx.x * 8; e0 < C; e0 += blockDim.x * 8) {
            float v[8];
            deq8<T>(row, e0, v);
#pragma unroll
            for (int u = 0; u < 8; u++)
                st_f(dst + (int64_t)(e0 + u) * o.nb[3], o.t, v[u]);
        }
    }
}

/* ---- host ---- */

/* Calls f(std::integral_constant<int, T>{}) for the quantized dtype t (a switch over ir/core.h's
 * table); 0, or -1 when t is not one. QUANT_DISPATCH(t, F, args...) calls F<T>(args...). */
template <class Fn> static int quant_dispatch(int t, Fn &&f)
{
    switch (t) {
#define QUANT_CASE(T, ...)                                                                         \
    case T: f(std::integral_constant<int, T>{}); return 0;
        GP_QUANT_DTYPES(QUANT_CASE)
#undef QUANT_CASE
    default: return -1;
    }
}
#define QUANT_DISPATCH(t, F, ...)                                                                  \
    quant_dispatch((int)(t), [&](auto T_) { F<decltype(T_)::value>(__VA_ARGS__); })

template <int T> static void deq8_host(const void *row, int e0, float *v)
{
    float r[8];
    deq8<T>((const uint8_t *)row, e0, r);
    memcpy(v, r, sizeof r);
}

extern "C" int gp_cuda_quant_deq8_host(gp_dtype t, const void *row, int e0, float *v)
{
    if (e0 < 0 || e0 % 8)
        return -1;
    return QUANT_DISPATCH(t, deq8_host, row, e0, v);
}

template <int T>
static void launch_matmul(gp_cu_ctx *c, int vec, const uint8_t *w, size_t rb, const float *x,
                          int64_t ldx, float *y, int64_t ldy, int K, int N, int64_t M, int msym)
{
    if (vec)
        gp_cu_launch(c, k_qmatvec<T>, dim3((unsigned)((N + MV_WARPS - 1) / MV_WARPS)),
                     dim3(MV_WARPS * 32), 0, w, rb, x, ldx, y, ldy, K, N, M, msym, c->d_syms);
    else
        gp_cu_launch(c, k_qmatmul_tiles<T>,
                     dim3((unsigned)((N + TN - 1) / TN), (unsigned)((M + TM - 1) / TM)),
                     dim3(TTHREADS), 0, w, rb, x, ldx, y, ldy, K, N, M, msym, c->d_syms);
}

extern "C" int gp_cu_quant_group(gp_cu_ctx *c, const gp_cu_group *g, int *launched)
{
    *launched = 0;
    /* the products' types: one, or q4_k and q6_k (Q4_K_M's q, k and v) */
    gp_dtype t = g->w[0].dtype, t2 = t;
    for (int s = 1; s < g->n && s < GP_CU_MAX_GROUP; s++)
        if (g->w[s].dtype != t)
            t2 = g->w[s].dtype;
    int mix = t2 != t;
    if (mix && !((t == GP_Q4_K && t2 == GP_Q6_K) || (t == GP_Q6_K && t2 == GP_Q4_K)))
        return 0;
    if (mix) { /* the instance's first type q4_k */
        t = GP_Q4_K;
        t2 = GP_Q6_K;
    }
    if (!gp_dtype_is_quant(t) || g->n < 2 || g->n > GP_CU_MAX_GROUP || (g->glu && g->n != 2) ||
        (g->has_norm && g->norm.is_ln))
        return 0;
    const gp_cu_tensor *xt = g->has_norm ? &g->norm.x : &g->x;
    KT kx = gp_kt_of(c, xt);
    int64_t K = kx.ne[3];
    if (kx.t != GP_F32 || kt_count(kx, 3) != 1 || kx.nb[3] != 4 || ((uintptr_t)kx.p & 15) ||
        xt->sym[xt->ndim - 1] >= 0)
        return 0;
    QDD d;
    memset(&d, 0, sizeof d);
    d.n = g->n;
    NORM nm;
    memset(&nm, 0, sizeof nm);
    if (g->has_norm) {
        nm = norm_params(c, &g->norm);
        if (nm.w.ne[3] != K || kt_count(nm.w, 3) != 1 || nm.fold)
            return 0;
    }
    for (int s = 0; s < g->n; s++) {
        const gp_cu_tensor *w = &g->w[s];
        KT o = gp_kt_of(c, &g->out[g->glu ? 0 : s]);
        d.rb[s] = gp_dtype_row_bytes(w->dtype, K);
        if ((w->dtype != t && w->dtype != t2) || !g->tb[s] || w->ndim != 2 || w->ne[1] != K ||
            w->sym[0] >= 0 || w->sym[1] >= 0 ||
            !qd_fits(w->dtype, w->data, (const float *)kx.p, K, K, 1, g->has_norm) ||
            o.t != GP_F32 || kt_count(o, 3) != 1 || o.nb[3] != 4 || o.ne[3] != w->ne[0] ||
            w->ne[0] < 1 || w->ne[0] > ((int64_t)1 << 30) ||
            (g->glu && s == 1 && w->ne[0] != d.N[0]))
            return 0;
        d.w[s] = (const uint8_t *)w->data;
        d.N[s] = (int)w->ne[0];
        d.y[s] = (float *)o.p;
        d.t2 |= (unsigned)(mix && w->dtype == t2) << s;
    }
    const float *x = (const float *)kx.p;
    if (!qd_group(c, t, t2, d, x, (int)K, g->glu, g->has_norm, nm))
        return 0;
    quant_counts[0] += g->glu ? 2 : g->n;
    quant_counts[3] += g->glu ? 2 : g->n;
    quant_counts[5]++;
    if (gp_cu_check_launch(c, "quant_group"))
        return -1;
    *launched = 1;
    return 0;
}

/* The prompt path's workspace: cuBLAS's own part, then x's tile, then W's. */
enum { QB_BLAS_WS = 4 << 20, QB_KT = 4096, QB_MIN_NT = 256 };

template <int T>
static void launch_deq(gp_cu_ctx *c, const uint8_t *w, size_t rb, int n0, int k0, int nt, int kt,
                       __half *dst)
{
    int64_t n = (int64_t)nt * (kt / 8), b = (n + 255) / 256;
    gp_cu_launch(c, k_qdeq_f16<T>, dim3((unsigned)(b < 4096 ? b : 4096)), dim3(256), 0, w, rb, n0,
                 k0, nt, kt, dst);
}

/*
 * y = x W^T on tensor cores for a prompt: per tile of K (at most QB_KT) x's columns go to f16, and
 * per tile of W's rows within it W's values (those of gp_quant_dequantize_row) go to f16, both in
 * the workspace, and cuBLAS adds their product into y (f32 sums). The tiles are as large as the
 * workspace allows. 1 when done, 0 when it does not fit (no workspace or cuBLAS, or tiles of
 * fewer than QB_MIN_NT rows), -1 on an error.
 */
static int quant_blas(gp_cu_ctx *c, gp_dtype t, const uint8_t *w, size_t rb, const float *x,
                      int64_t ldx, float *y, int64_t ldy, int K, int N, int64_t M, void *ws,
                      size_t ws_size)
{
    if (!c->blas || !ws || M > INT32_MAX || ldy > INT32_MAX)
        return 0;
    char *base = (char *)(((uintptr_t)ws + 255) & ~(uintptr_t)255);
    size_t have = ws_size > (size_t)(base - (char *)ws) ? ws_size - (size_t)(base - (char *)ws) : 0;
    int kt = K < QB_KT ? K : QB_KT; /* QB_KT: a multiple of every block; a last tile too */
    size_t xbytes = ((size_t)M * (size_t)kt * 2 + 255) & ~(size_t)255;
    if (have < QB_BLAS_WS + xbytes)
        return 0;
    int64_t nt = (int64_t)((have - QB_BLAS_WS - xbytes) / ((size_t)kt * 2));
    if (nt > N)
        nt = N;
    else
        nt -= nt % 128;
    if (nt < QB_MIN_NT && nt < N)
        return 0;
    __half *xh = (__half *)(base + QB_BLAS_WS), *wh = (__half *)(base + QB_BLAS_WS + xbytes);
    if (gp_cu_blas_ws(c, base, QB_BLAS_WS))
        return -1;
    const float one = 1.0f, zero = 0.0f;
    for (int k0 = 0; k0 < K; k0 += kt) {
        int kk = K - k0 < kt ? K - k0 : kt;
        int64_t nx = M * (kk / 8), bx = (nx + 255) / 256;
        gp_cu_launch(c, k_qx_f16, dim3((unsigned)(bx < 4096 ? bx : 4096)), dim3(256), 0, x, ldx, M,
                     k0, kk, xh);
        for (int n0 = 0; n0 < N; n0 += (int)nt) {
            int nn = (int)(N - n0 < nt ? N - n0 : nt);
            (void)QUANT_DISPATCH(t, launch_deq, c, w, rb, n0, k0, nn, kk, wh);
            if (gp_cu_check_launch(c, "quant_dequantize_f16"))
                return -1;
            cublasStatus_t st = cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, nn, (int)M, kk, &one,
                                             wh, CUDA_R_16F, kk, xh, CUDA_R_16F, kk,
                                             k0 ? &one : &zero, y + n0, CUDA_R_32F, (int)ldy,
                                             CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
            c->launches++;
            if (st != CUBLAS_STATUS_SUCCESS) {
                snprintf(c->err, sizeof c->err, "cublasGemmEx(quantized %s, N %d, M %lld, K %d): %s",
                         gp_dtype_name(t), nn, (long long)M, kk, cublasGetStatusString(st));
                return -1;
            }
        }
    }
    return 1;
}

/* The epilogue epi of a one-row product of N outputs as k_qdot applies it (e, into eo): 1, or 0
 * when it does not take it (operands other than one row of N or one value, ops other than add,
 * mul and gelu). */
static int qv_epilogue(gp_cu_ctx *c, const gp_cu_epilogue *epi, int64_t N, EPI *e, KT *eo)
{
    *eo = gp_kt_of(c, &epi->out);
    if (epi->n < 1 || epi->n > GP_CU_MAX_EPI || kt_count(*eo, 3) != 1 || eo->ne[3] != N)
        return 0;
    e->n = epi->n;
    for (int k = 0; k < epi->n; k++) {
        e->op[k] = epi->op[k];
        if (epi->op[k] == GP_OP_GELU)
            continue;
        e->other[k] = gp_kt_of(c, &epi->other[k]);
        if (kt_count(e->other[k], 3) != 1 || (e->other[k].ne[3] != N && e->other[k].ne[3] != 1) ||
            (epi->op[k] != GP_OP_ADD && epi->op[k] != GP_OP_MUL))
            return 0;
    }
    return 1;
}

extern "C" int gp_cu_quant_matmul(gp_cu_ctx *c, const gp_attrs *a, const gp_cu_tensor *out,
                                  const gp_cu_tensor *in, void *ws, size_t ws_size,
                                  const gp_cu_epilogue *epi, int *fused)
{
    if (fused)
        *fused = 0;
    const gp_cu_tensor *xt = &in[0], *wt = &in[1];
    gp_dtype t = wt->dtype;
    int64_t qk = gp_dtype_block(t), K = xt->ne[1], N = wt->ne[0];
    int msym = xt->sym[0];
    KT kx = gp_kt_of(c, xt), ko = gp_kt_of(c, out);
    int ta = a->i[GP_MATMUL_TA] != 0, tb = a->i[GP_MATMUL_TB] != 0;
    if (ta || !tb || xt->ndim != 2 || wt->ndim != 2 || out->ndim != 2 ||
        xt->dtype != GP_F32 || out->dtype != GP_F32 || xt->nb[1] != 4 || out->nb[1] != 4 ||
        xt->nb[0] % 4 || out->nb[0] % 4 || wt->ne[1] != K || out->ne[1] != N ||
        xt->sym[1] >= 0 || wt->sym[0] >= 0 || wt->sym[1] >= 0 || out->sym[1] >= 0 ||
        out->sym[0] != msym || ko.ne[2] != kx.ne[2] || !gp_dtype_is_quant(t) || K < 1 ||
        K % qk || K > ((int64_t)1 << 30) || N < 1 || N > ((int64_t)1 << 30)) {
        snprintf(c->err, sizeof c->err,
                 "matmul: a %s weight needs x f32 [M, K], W [N, K] (tb = 1, K a multiple of %lld) "
                 "and out f32 [M, N], rows contiguous",
                 gp_dtype_name(t), (long long)qk);
        return -1;
    }
    if (c->x_gelu) { /* never planned: a quantized product has no epilogue to leave it one */
        snprintf(c->err, sizeof c->err, "matmul: gelu(x) asked of a %s product", gp_dtype_name(t));
        return -1;
    }
    int64_t M = kx.ne[2]; /* at the launch sizes */
    if (M == 0)
        return 0;
    int vec = M <= MV_MAXM;
    size_t rb = gp_dtype_row_bytes(t, K);
    if (!vec) {
        int r = quant_blas(c, t, (const uint8_t *)wt->data, rb, (const float *)xt->data,
                           xt->nb[0] / 4, (float *)out->data, out->nb[0] / 4, (int)K, (int)N, M, ws,
                           ws_size);
        if (r < 0)
            return -1;
        if (r > 0) {
            quant_counts[1]++;
            quant_counts[4]++;
            return gp_cu_check_launch(c, "quant_matmul_blas");
        }
    }
    int fast = 0;
    if (vec && qd_fits(t, wt->data, (const float *)xt->data, xt->nb[0] / 4, K, M, 0)) {
        QDD d;
        memset(&d, 0, sizeof d);
        d.n = 1;
        d.w[0] = (const uint8_t *)wt->data;
        d.N[0] = (int)N;
        d.y[0] = (float *)out->data;
        d.rb[0] = rb;
        d.ldy = out->nb[0] / 4;
        EPI e;
        KT eo;
        memset(&e, 0, sizeof e);
        memset(&eo, 0, sizeof eo);
        /* one row at most (the launch size's): the epilogue too */
        d.epi = epi && fused && M == 1 && qv_epilogue(c, epi, N, &e, &eo);
        fast = qd_matmul(c, t, d, (const float *)xt->data, xt->nb[0] / 4, (int)K, M, msym, e, eo);
        if (fast && d.epi)
            *fused = 1;
    }
    if (!fast)
        (void)QUANT_DISPATCH(t, launch_matmul, c, vec, (const uint8_t *)wt->data, rb,
                             (const float *)xt->data, xt->nb[0] / 4, (float *)out->data,
                             out->nb[0] / 4, (int)K, (int)N, M, msym);
    quant_counts[vec ? 0 : 1]++;
    quant_counts[3] += fast;
    return gp_cu_check_launch(c, vec ? "quant_matvec" : "quant_matmul_tiles");
}

template <int T>
static void launch_rows(gp_cu_ctx *c, const KT &o, const uint8_t *tab, size_t rb, int64_t V,
                        const KT &ids, int C)
{
    gp_cu_launch(c, k_qget_rows<T>, dim3(gp_cu_blocks(o.ne[2])), dim3(128), 0, o, tab, rb, V, ids,
                 C, c->d_syms);
}

extern "C" int gp_cu_quant_get_rows(gp_cu_ctx *c, const gp_cu_tensor *out,
                                    const gp_cu_tensor *table, const gp_cu_tensor *ids)
{
    gp_dtype t = table->dtype;
    int64_t qk = gp_dtype_block(t), C = table->ne[1];
    KT o = gp_kt_of(c, out), ki = gp_kt_of(c, ids);
    if (out->ndim != 2 || table->ndim != 2 || ids->dtype != GP_I32 || out->ne[1] != C ||
        out->sym[1] >= 0 || table->sym[0] >= 0 || table->sym[1] >= 0 || !gp_dtype_is_quant(t) ||
        C % qk || C > ((int64_t)1 << 30) || kt_count(ki, 4) < o.ne[2] ||
        (out->dtype != GP_F32 && out->dtype != GP_F16 && out->dtype != GP_BF16)) {
        snprintf(c->err, sizeof c->err,
                 "get_rows: a %s table needs [V, C] (C a multiple of %lld), i32 ids [T] and a "
                 "float out [T, C]",
                 gp_dtype_name(t), (long long)qk);
        return -1;
    }
    if (kt_count(o, 4) == 0)
        return 0;
    (void)QUANT_DISPATCH(t, launch_rows, c, o, (const uint8_t *)table->data, gp_dtype_row_bytes(t, C),
                   table->ne[0], ki, (int)C);
    quant_counts[2]++;
    return gp_cu_check_launch(c, "quant_get_rows");
}

/* ---- moe: the experts' products on quantized weights (cuda_moe.cuh's kernels over deq8) ---- */

#include "cuda/cuda_moe.cuh"

template <int T> struct QuantRows {
    static __device__ __forceinline__ void ld8(const uint8_t *row, int e0, int K, float (&v)[8])
    {
        (void)K; /* rows of whole blocks: e0 + 8 <= K */
        deq8<T>(row, e0, v);
    }
};

template <int T>
static void moe_quant(const gp_cu_ctx *c, const MoeProd &p, int vec, int64_t tiles)
{
    moe_launch<QuantRows<T>>(c, p, vec, tiles);
}

int gp_cu_moe_quant_launch(const gp_cu_ctx *c, gp_dtype t, const MoeProd &p, int vec,
                           int64_t tiles)
{
    return QUANT_DISPATCH(t, moe_quant, c, p, vec, tiles);
}
