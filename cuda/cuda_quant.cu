/* CUDA kernels on ggml's block-quantized weights (cuda/cuda_quant.cuh): one-token products reading
 * the blocks directly, prompt products through tiles dequantized into shared memory, lookups. */
#include <atomic>
#include <stdio.h>
#include <string.h>

#include "cuda/cuda_internal.cuh"
#include "cuda/cuda_quant.cuh"
#include "runtime/f16.h"

static std::atomic<int64_t> quant_counts[3];

extern "C" int64_t gp_cuda_quant_count(int which)
{
    return which >= 0 && which < 3 ? quant_counts[which].load() : 0;
}

/* A little-endian binary16 at p (any alignment: blocks of 18, 22, 34 or 210 bytes). */
__host__ __device__ __forceinline__ float ld_h16(const uint8_t *p)
{
#ifdef __CUDA_ARCH__
    return __half2float(__ushort_as_half((unsigned short)(p[0] | p[1] << 8)));
#else
    return gp_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
#endif
}

/* #pragma unroll in code the host compiles too (gcc warns of pragmas it does not know). */
#ifdef __CUDA_ARCH__
#define Q_UNROLL _Pragma("unroll")
#else
#define Q_UNROLL
#endif

/* Products, sums and differences rounded on their own (never contracted into fused multiply-adds),
 * on the device and on the host (gp_cuda_quant_deq8_host; x86-64's baseline has no FMA). */
__host__ __device__ __forceinline__ float mul_rn(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

__host__ __device__ __forceinline__ float add_rn(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}

__host__ __device__ __forceinline__ float sub_rn(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}

/*
 * Elements e0 .. e0 + 7 of a row of blocks of type T into v, e0 a multiple of 8 (so that they lie
 * in one block, one sub-block of 32 and one group of 16). The arithmetic is runtime/quant.c's
 * deq_block operation for operation, rounded as it is (no contraction into fused multiply-adds), so
 * the values are gp_quant_dequantize_row's bit for bit. Host code too, for gp_cuda_quant_deq8_host.
 */
template <int T> __host__ __device__ __forceinline__ void deq8(const uint8_t *row, int e0, float (&v)[8])
{
    if (T == GP_Q4_0 || T == GP_Q4_1 || T == GP_Q5_0 || T == GP_Q5_1 || T == GP_Q8_0) {
        const int bytes = T == GP_Q4_0 ? 18 : T == GP_Q4_1 ? 20 : T == GP_Q5_0 ? 22
                        : T == GP_Q5_1 ? 24 : 34;
        const uint8_t *b = row + (size_t)(e0 >> 5) * bytes;
        int j0 = e0 & 31;
        float d = ld_h16(b);
        if (T == GP_Q8_0) {
            Q_UNROLL
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
        Q_UNROLL
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
        const uint8_t *b = row + (size_t)(e0 >> 8) * (T == GP_Q4_K ? 144 : 176);
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
        Q_UNROLL
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
        Q_UNROLL
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

/* Calls F<T>(args...) for the quantized dtype t; 0, or -1 when t is not one. */
#define QUANT_DISPATCH(t, F, ...)                                                                  \
    ((t) == GP_Q4_0   ? (F<GP_Q4_0>(__VA_ARGS__), 0)                                               \
     : (t) == GP_Q4_1 ? (F<GP_Q4_1>(__VA_ARGS__), 0)                                               \
     : (t) == GP_Q5_0 ? (F<GP_Q5_0>(__VA_ARGS__), 0)                                               \
     : (t) == GP_Q5_1 ? (F<GP_Q5_1>(__VA_ARGS__), 0)                                               \
     : (t) == GP_Q8_0 ? (F<GP_Q8_0>(__VA_ARGS__), 0)                                               \
     : (t) == GP_Q4_K ? (F<GP_Q4_K>(__VA_ARGS__), 0)                                               \
     : (t) == GP_Q5_K ? (F<GP_Q5_K>(__VA_ARGS__), 0)                                               \
     : (t) == GP_Q6_K ? (F<GP_Q6_K>(__VA_ARGS__), 0)                                               \
                      : -1)

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

extern "C" int gp_cu_quant_matmul(gp_cu_ctx *c, const gp_attrs *a, const gp_cu_tensor *out,
                                  const gp_cu_tensor *in)
{
    const gp_cu_tensor *xt = &in[0], *wt = &in[1];
    gp_dtype t = wt->dtype;
    int64_t qk = gp_dtype_block(t), K = xt->ne[1], N = wt->ne[0];
    int msym = xt->sym[0];
    KT kx = gp_kt_of(c, xt), ko = gp_kt_of(c, out);
    if (a->i[0] != 0 || a->i[1] == 0 || xt->ndim != 2 || wt->ndim != 2 || out->ndim != 2 ||
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
    (void)QUANT_DISPATCH(t, launch_matmul, c, vec, (const uint8_t *)wt->data,
                   gp_dtype_row_bytes(t, K), (const float *)xt->data, xt->nb[0] / 4,
                   (float *)out->data, out->nb[0] / 4, (int)K, (int)N, M, msym);
    quant_counts[vec ? 0 : 1]++;
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
