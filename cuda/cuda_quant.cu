/* CUDA kernels on ggml's block-quantized weights (cuda/cuda_quant.cuh): one-token products reading
 * the blocks directly, prompt products through tiles dequantized into shared memory, lookups. */
#include <atomic>
#include <type_traits>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_matvec.cuh"
#include "cuda/cuda_qdot.cuh"
#include "cuda/cuda_quant.cuh"
#include "ir/f16.h"

static std::atomic<int64_t> quant_counts[6];

/* A/B switch while k_qdot and k_qmv are measured side by side: GPLAN_CUDA_QDOT=0 takes k_qmv. */
static int qdot_on()
{
    static int on = -1;
    if (on < 0) {
        const char *v = getenv("GPLAN_CUDA_QDOT");
        on = !(v && v[0] == '0');
    }
    return on;
}

extern "C" int64_t gp_cuda_quant_count(int which)
{
    return which >= 0 && which < 6 ? quant_counts[which].load() : 0;
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

/* ---- one token, fast: lanes are rows, 256 elements a step, 16-byte loads ---- */

/*
 * Each lane of a warp takes one row of a group of 32 and, per step, the row's next 256 elements
 * (one super-block, or eight blocks of 32) loaded whole in 16-byte pieces (the rows are 16-byte
 * aligned: gp_cuda_quant_fast), so every lane of the warp reads the same 256 floats of x, staged
 * in shared memory with their sums per 16 (one broadcast load for all 32 rows). A quant q becomes a
 * float without a conversion instruction: its byte v < 128 placed under the exponent of 0.5 gives
 * f = 0.5 + v / 256 exactly (one byte permute), so 16 elements cost 16 permutes and 16 fused
 * multiply-adds F = sum f x, and their part of the dot product is a F + c X (X = sum x, staged),
 * a and c from the block's scales. Bytes hold q shifted up to just under 128 (4-bit q: 8 q, so
 * q = 32 f - 16; 5-bit: 4 q; 6-bit: 2 q) so that the offset costs few bits of F (within about
 * 1e-6 of sum |x| |w| a step: test_quant_step_host); q8_0 takes the exact 2^23 + v form and a
 * subtraction. A row's steps may be split over S warps of a block, added in split order.
 */
enum { QV_WARPS = 8, QV_MAXS = 8, QV_SMEM_MAX = 160 << 10 };

template <int T> struct QV {
    enum {
        /* bytes a step: 8 blocks of 32, or one super-block of 256 */
        G = gp_dtype_bytes_c(T) * (256 / gp_dtype_block_c(T)),
        NU = T == GP_Q6_K ? 14 : G / 16, /* 16-byte loads a step (q6_k: from up to 14 bytes before) */
        NW = 4 * NU
    };
};

/* The step's device intrinsics, and their host forms (gp_cuda_quant_step_host). */
__host__ __device__ __forceinline__ uint32_t q_funnel16(uint32_t lo, uint32_t hi)
{
#ifdef __CUDA_ARCH__
    return __funnelshift_r(lo, hi, 16);
#else
    return lo >> 16 | hi << 16;
#endif
}

__host__ __device__ __forceinline__ uint32_t q_perm(uint32_t x, uint32_t y, unsigned sel)
{
#ifdef __CUDA_ARCH__
    return __byte_perm(x, y, sel);
#else
    uint64_t v = (uint64_t)y << 32 | x;
    uint32_t r = 0;
    for (int i = 0; i < 4; i++)
        r |= (uint32_t)(v >> 8 * (sel >> 4 * i & 7) & 0xffu) << 8 * i;
    return r;
#endif
}

__host__ __device__ __forceinline__ float q_f32(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}

/* Bytes off .. off + 3 (off even, known at compile time once unrolled) of the words w. */
template <int NW> __host__ __device__ __forceinline__ uint32_t qw32(const uint32_t (&w)[NW], int off)
{
    return off % 4 ? q_funnel16(w[off / 4], w[off / 4 + 1]) : w[off / 4];
}

template <int NW> __host__ __device__ __forceinline__ float qh16(const uint32_t (&w)[NW], int off)
{
    uint32_t v = off % 4 ? w[off / 4] >> 16 : w[off / 4] & 0xffffu;
    uint8_t b[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
    return ld_h16(b);
}

template <int NW> __host__ __device__ __forceinline__ int qb8(const uint32_t (&w)[NW], int off)
{
    return (int)(int8_t)(w[off / 4] >> 8 * (off % 4) & 0xffu);
}

/* Byte B of v (< 128) as 0.5 + v / 256 (EXACT: v any byte, as 2^23 + v). */
template <int B, bool EXACT> __host__ __device__ __forceinline__ float qbf(uint32_t v)
{
    return EXACT ? q_f32(q_perm(v, 0x4B000000u, 0x7650 | B))
                 : q_f32(q_perm(v, 0x3F000000u, 0x7054 | B << 8));
}

/*
 * acc[m] += a F_m + c X_m for the 16 elements whose bytes are v0 .. v3 (in order) and x rows m at
 * xs + m xk (X_m: their staged sum, at ss + m xk / 16). EXACT: the bytes are q + 128 and F sums
 * q x exactly converted.
 */
template <int MM, bool EXACT>
__host__ __device__ __forceinline__ void qv_run(uint32_t v0, uint32_t v1, uint32_t v2, uint32_t v3, float a,
                                       float c, const float *xs, const float *ss, int xk, int M,
                                       float (&acc)[MM])
{
    const float off = EXACT ? 8388736.0f : 0.0f; /* 2^23 + 128 */
    float f[16] = {qbf<0, EXACT>(v0), qbf<1, EXACT>(v0), qbf<2, EXACT>(v0), qbf<3, EXACT>(v0),
                   qbf<0, EXACT>(v1), qbf<1, EXACT>(v1), qbf<2, EXACT>(v1), qbf<3, EXACT>(v1),
                   qbf<0, EXACT>(v2), qbf<1, EXACT>(v2), qbf<2, EXACT>(v2), qbf<3, EXACT>(v2),
                   qbf<0, EXACT>(v3), qbf<1, EXACT>(v3), qbf<2, EXACT>(v3), qbf<3, EXACT>(v3)};
    if (EXACT) {
Q_UNROLL
        for (int i = 0; i < 16; i++)
            f[i] -= off;
    }
Q_UNROLL
    for (int m = 0; m < MM; m++) {
        if (m >= M)
            break;
        const float4 *x4 = (const float4 *)(xs + (size_t)m * xk);
        float F0 = 0.0f, F1 = 0.0f;
Q_UNROLL
        for (int q = 0; q < 4; q += 2) {
            float4 xa = x4[q], xb = x4[q + 1];
            F0 = fmaf(f[4 * q], xa.x, F0);
            F1 = fmaf(f[4 * q + 4], xb.x, F1);
            F0 = fmaf(f[4 * q + 1], xa.y, F0);
            F1 = fmaf(f[4 * q + 5], xb.y, F1);
            F0 = fmaf(f[4 * q + 2], xa.z, F0);
            F1 = fmaf(f[4 * q + 6], xb.z, F1);
            F0 = fmaf(f[4 * q + 3], xa.w, F0);
            F1 = fmaf(f[4 * q + 7], xb.w, F1);
        }
        float F = F0 + F1;
        acc[m] = EXACT ? fmaf(a, F, acc[m]) : fmaf(a, F, fmaf(c, ss[(size_t)m * (xk / 16)], acc[m]));
    }
}

/* Runs of 4-bit quants: the low (HI 0) or high nibbles of the 16 bytes at w[i0 .. i0 + 3] as 8 q. */
template <int NW>
__host__ __device__ __forceinline__ void nib8(const uint32_t (&w)[NW], int off, int hi, uint32_t (&v)[4])
{
Q_UNROLL
    for (int i = 0; i < 4; i++) {
        uint32_t q = qw32(w, off + 4 * i);
        v[i] = (hi ? q >> 1 : q << 3) & 0x78787878u;
    }
}

/* The 4 bits of h from bit b on, spread to bit 6 of each byte (q5_0 / q5_1's fifth bits, of 4 q). */
__host__ __device__ __forceinline__ uint32_t spread4(uint32_t h, int b)
{
    return (h >> b & 15u) * 0x08102040u & 0x40404040u;
}

/* acc += the products of 256 elements (step bytes from byte S of w) with x at xs (sums at ss). */
template <int T, int MM, int S, int NW>
__host__ __device__ __forceinline__ void qv_step(const uint32_t (&w)[NW], const float *xs, const float *ss,
                                        int xk, int M, float (&acc)[MM])
{
    uint32_t v[4];
    if (T == GP_Q4_0 || T == GP_Q4_1) {
        const int bb = gp_dtype_bytes_c(T);
Q_UNROLL
        for (int t = 0; t < 8; t++) {
            float d = qh16(w, bb * t), a = 32.0f * d;
            float c = T == GP_Q4_0 ? -24.0f * d : qh16(w, bb * t + 2) - 16.0f * d;
            int qs = bb * t + (T == GP_Q4_0 ? 2 : 4);
Q_UNROLL
            for (int hi = 0; hi < 2; hi++) {
                nib8(w, qs, hi, v);
                qv_run<MM, false>(v[0], v[1], v[2], v[3], a, c, xs + 32 * t + 16 * hi,
                                  ss + 2 * t + hi, xk, M, acc);
            }
        }
    } else if (T == GP_Q5_0 || T == GP_Q5_1) {
        const int bb = T == GP_Q5_0 ? 22 : 24, o = T == GP_Q5_0 ? 2 : 4;
Q_UNROLL
        for (int t = 0; t < 8; t++) {
            float d = qh16(w, bb * t), a = 64.0f * d; /* bytes 4 q: q = 64 f - 32 */
            float c = T == GP_Q5_0 ? -48.0f * d : qh16(w, bb * t + 2) - 32.0f * d;
            uint32_t h = qw32(w, bb * t + o);
Q_UNROLL
            for (int hi = 0; hi < 2; hi++) {
Q_UNROLL
                for (int i = 0; i < 4; i++) {
                    uint32_t q = qw32(w, bb * t + o + 4 + 4 * i);
                    v[i] = ((hi ? q >> 2 : q << 2) & 0x3C3C3C3Cu) | spread4(h, 16 * hi + 4 * i);
                }
                qv_run<MM, false>(v[0], v[1], v[2], v[3], a, c, xs + 32 * t + 16 * hi,
                                  ss + 2 * t + hi, xk, M, acc);
            }
        }
    } else if (T == GP_Q8_0) {
Q_UNROLL
        for (int t = 0; t < 8; t++) {
            float d = qh16(w, 34 * t);
Q_UNROLL
            for (int hi = 0; hi < 2; hi++) {
Q_UNROLL
                for (int i = 0; i < 4; i++)
                    v[i] = qw32(w, 34 * t + 2 + 16 * hi + 4 * i) ^ 0x80808080u;
                qv_run<MM, true>(v[0], v[1], v[2], v[3], d, 0.0f, xs + 32 * t + 16 * hi, ss, xk,
                                 M, acc);
            }
        }
    } else if (T == GP_Q4_K || T == GP_Q5_K) {
        float d = qh16(w, 0), dmin = qh16(w, 2);
        uint32_t s0 = w[1], s1 = w[2], s2 = w[3];
Q_UNROLL
        for (int j = 0; j < 8; j++) {
            int sc, mn;
            if (j < 4) {
                sc = s0 >> 8 * j & 63;
                mn = s1 >> 8 * j & 63;
            } else {
                sc = (s2 >> 8 * (j - 4) & 15) | (s0 >> (8 * (j - 4) + 6) & 3) << 4;
                mn = (s2 >> (8 * (j - 4) + 4) & 15) | (s1 >> (8 * (j - 4) + 6) & 3) << 4;
            }
            float dl = mul_rn(d, (float)sc), ml = mul_rn(dmin, (float)mn);
            int p = j >> 1, hi = j & 1;
Q_UNROLL
            for (int h = 0; h < 2; h++) {
                if (T == GP_Q4_K) {
                    nib8(w, 16 + 32 * p + 16 * h, hi, v);
                    qv_run<MM, false>(v[0], v[1], v[2], v[3], 32.0f * dl, -fmaf(16.0f, dl, ml),
                                      xs + 32 * j + 16 * h, ss + 2 * j + h, xk, M, acc);
                } else {
Q_UNROLL
                    for (int i = 0; i < 4; i++) { /* bytes 4 q: q = 64 f - 32 */
                        uint32_t q = w[12 + 8 * p + 4 * h + i], qh = w[4 + 4 * h + i];
                        uint32_t hb = j <= 6 ? qh << (6 - j) : qh >> (j - 6);
                        v[i] = ((hi ? q >> 2 : q << 2) & 0x3C3C3C3Cu) | (hb & 0x40404040u);
                    }
                    qv_run<MM, false>(v[0], v[1], v[2], v[3], 64.0f * dl, -fmaf(32.0f, dl, ml),
                                      xs + 32 * j + 16 * h, ss + 2 * j + h, xk, M, acc);
                }
            }
        }
    } else { /* GP_Q6_K */
        float d = qh16(w, S + 208);
Q_UNROLL
        for (int hh = 0; hh < 2; hh++)
Q_UNROLL
            for (int k = 0; k < 4; k++)
Q_UNROLL
                for (int l = 0; l < 2; l++) {
                    float ds = mul_rn(d, (float)qb8(w, S + 192 + 8 * hh + 2 * k + l));
Q_UNROLL
                    for (int i = 0; i < 4; i++) {
                        uint32_t ql = qw32(w, S + 64 * hh + 32 * (k & 1) + 16 * l + 4 * i);
                        uint32_t qh = qw32(w, S + 128 + 32 * hh + 16 * l + 4 * i);
                        /* bytes 2 q: q = 128 f - 64 */
                        uint32_t hb = k <= 2 ? qh << (5 - 2 * k) : qh >> 1;
                        v[i] = ((k >> 1 ? ql >> 3 : ql << 1) & 0x1E1E1E1Eu) | (hb & 0x60606060u);
                    }
                    qv_run<MM, false>(v[0], v[1], v[2], v[3], 128.0f * ds, -96.0f * ds,
                                      xs + 128 * hh + 32 * k + 16 * l, ss + 8 * hh + 2 * k + l, xk,
                                      M, acc);
                }
    }
}

/* Step p of a row (its bytes from row + p G, q6_k's from S bytes before) into w. */
template <int T, int S>
__device__ __forceinline__ void qv_load(const uint8_t *row, int p, uint32_t (&w)[QV<T>::NW])
{
    const uint4 *src = (const uint4 *)(row + (size_t)p * QV<T>::G - S);
#pragma unroll
    for (int i = 0; i < QV<T>::NU; i++) {
        uint4 u = __ldcs(src + i); /* read once: kept out of L1 */
        w[4 * i] = u.x;
        w[4 * i + 1] = u.y;
        w[4 * i + 2] = u.z;
        w[4 * i + 3] = u.w;
    }
}

/* q6_k's step p + t (t < 8: its bytes 2 t mod 16 past a 16-byte boundary, as p is a multiple of
 * 8) from wq, then step p + t + 1 loaded into wq when there is one. */
template <int T, int MM, int t>
__device__ __forceinline__ void q6_next(const uint8_t *row, int p, int p1, int st,
                                        uint32_t (&wq)[QV<T>::NW], const float *xs,
                                        const float *ss, int xk, int M, float (&acc)[MM])
{
    if (p + t < p1)
        qv_step<T, MM, 2 * t>(wq, xs + 256 * (p + t), ss + 16 * (p + t), xk, M, acc);
    if (p + t + st < p1) { /* the lane's next step: st on */
        if (st == 1)
            qv_load<T, 2 * ((t + 1) % 8)>(row, p + t + 1, wq);
        else
            qv_load<T, 2 * ((t + 2) % 8)>(row, p + t + 2, wq);
    }
}

/* What a k_qmv launch computes: n products of one x by weights of one K (rows of rb[s] bytes),
 * product s's blocks [block0[s], block0[s + 1]), its rows N[s], its output y[s] (f32, row m at
 * y[s] + m ldy); GLU: one pair, y[0] = silu(x w[0]^T) * (x w[1]^T); epi: one product of one row
 * whose epilogue (e, into eo) the store applies. */
struct QVD {
    int n, epi;
    unsigned t2; /* bit s: product s is of the instance's second type */
    const uint8_t *w[GP_CU_MAX_GROUP];
    size_t rb[GP_CU_MAX_GROUP];
    int N[GP_CU_MAX_GROUP];
    float *y[GP_CU_MAX_GROUP];
    unsigned block0[GP_CU_MAX_GROUP + 1];
    int64_t ldy;
};

__device__ __forceinline__ float qv_silu(float v)
{
    return v / (1.0f + expf(-v)); /* as the swiglu node (cuda_ops.cu) */
}

/* Step p of a q6_k row (its shift 2 (p mod 8)) into w: one instance a shift. */
template <int T>
__device__ __forceinline__ void q6_load(const uint8_t *row, int p, uint32_t (&w)[QV<T>::NW])
{
    switch (p & 7) {
    case 0: qv_load<T, 0>(row, p, w); break;
    case 1: qv_load<T, 2>(row, p, w); break;
    case 2: qv_load<T, 4>(row, p, w); break;
    case 3: qv_load<T, 6>(row, p, w); break;
    case 4: qv_load<T, 8>(row, p, w); break;
    case 5: qv_load<T, 10>(row, p, w); break;
    case 6: qv_load<T, 12>(row, p, w); break;
    default: qv_load<T, 14>(row, p, w); break;
    }
}

/*
 * y [M, N] = x [M, K] W [N, K]^T for M <= MM, for each product of d: block b takes rows
 * [32 (8 / S) b', + 32 (8 / S)) of its product (b' its index there), warp w row group w / S and
 * steps [ks per, (ks + 1) per) of each row (ks = w % S; P = K / 256 steps, the last split maybe
 * shorter or empty). Its first steps' weights are loaded before the wait for the kernel before
 * (PDL: weights are constant), then x's M rows (RMS: rms_norm(x) by nm, one row) and their sums of
 * 16 are staged (dynamic shared memory, M K 17 / 16 floats); each step's load is issued while the
 * step before it computes (two buffers; q8_0's, too large, q6_k's and GLU's rows: one each).
 */
/* k_qmv's staging: after the wait, x's M rows (RMS: rms_norm(x) by nm, one row) and their sums
 * of 16 into shared memory; the eval's M (at most m_launch) to *M. */
template <bool RMS>
__device__ __forceinline__ void qv_stage(const float *x, int64_t ldx, int K, int64_t m_launch,
                                         int msym, const int64_t *syms, const NORM &nm, float *xs,
                                         float *ss, int *Mout)
{
    if (RMS)
        prefetch_norm(nm, 0, K);
    pdl_begin();
    int64_t Ml = msym >= 0 ? syms[msym] : m_launch;
    int M = (int)(Ml < m_launch ? Ml : m_launch);
    if (RMS) {
        stage_norm(nm, x, K, xs); /* one row (the launcher's check) */
    } else {
        for (int m = 0; m < M; m++)
            for (int i = threadIdx.x; i < K; i += blockDim.x)
                xs[(size_t)m * K + i] = x[m * ldx + i];
        __syncthreads();
    }
    for (int g = threadIdx.x; g < M * (K / 16); g += blockDim.x) {
        const float4 *p4 = (const float4 *)(xs + (size_t)g * 16);
        float s = 0.0f;
#pragma unroll
        for (int q = 0; q < 4; q++) {
            float4 v = p4[q];
            s += (v.x + v.y) + (v.z + v.w);
        }
        ss[g] = s;
    }
    __syncthreads();
    *Mout = M;
}

/* One lane's rows of type T: steps p0, p0 + st, ... below p1 of row (GLU: and of row2, into
 * acc2), its first steps loaded before qv_stage. */
template <int T, int MM, bool GLU, bool RMS>
__device__ __forceinline__ void qv_rows(const uint8_t *row, const uint8_t *row2, int p0, int p1,
                                        int st, const float *x, int64_t ldx, int K,
                                        int64_t m_launch, int msym, const int64_t *syms,
                                        const NORM &nm, float *xs, float *ss, int *Mout,
                                        float (&acc)[MM], float (&acc2)[MM])
{
    const bool two = T != GP_Q6_K && T != GP_Q8_0 && !GLU;
    uint32_t w0[QV<T>::NW], w1[QV<T>::NW]; /* w1: unused by q6_k and q8_0 */
    if (p0 < p1) {
        if (T == GP_Q6_K)
            q6_load<T>(row, p0, w0);
        else
            qv_load<T, 0>(row, p0, w0);
    }
    if ((two || GLU) && p0 + (GLU ? 0 : st) < p1)
        qv_load<T, 0>(row2, p0 + (GLU ? 0 : st), w1);
    qv_stage<RMS>(x, ldx, K, m_launch, msym, syms, nm, xs, ss, Mout);
    int M = *Mout;
    if (GLU) { /* gate and up rows, a step of each at a time */
        for (int p = p0; p < p1; p += st) {
            qv_step<T, MM, 0>(w0, xs + 256 * p, ss + 16 * p, K, M, acc);
            if (p + st < p1)
                qv_load<T, 0>(row, p + st, w0);
            qv_step<T, MM, 0>(w1, xs + 256 * p, ss + 16 * p, K, M, acc2);
            if (p + st < p1)
                qv_load<T, 0>(row2, p + st, w1);
        }
    } else if (T == GP_Q6_K) {
        /* step p's shift is 2 (p mod 8): one instance a shift, the step's own picked per step */
        for (int p = p0; p < p1; p += st) {
            int b = p & ~7;
            switch (p & 7) {
            case 0: q6_next<T, MM, 0>(row, b, p1, st, w0, xs, ss, K, M, acc); break;
            case 1: q6_next<T, MM, 1>(row, b, p1, st, w0, xs, ss, K, M, acc); break;
            case 2: q6_next<T, MM, 2>(row, b, p1, st, w0, xs, ss, K, M, acc); break;
            case 3: q6_next<T, MM, 3>(row, b, p1, st, w0, xs, ss, K, M, acc); break;
            case 4: q6_next<T, MM, 4>(row, b, p1, st, w0, xs, ss, K, M, acc); break;
            case 5: q6_next<T, MM, 5>(row, b, p1, st, w0, xs, ss, K, M, acc); break;
            case 6: q6_next<T, MM, 6>(row, b, p1, st, w0, xs, ss, K, M, acc); break;
            default: q6_next<T, MM, 7>(row, b, p1, st, w0, xs, ss, K, M, acc); break;
            }
        }
    } else if (!two) {
        for (int p = p0; p < p1; p += st) {
            qv_step<T, MM, 0>(w0, xs + 256 * p, ss + 16 * p, K, M, acc);
            if (p + st < p1)
                qv_load<T, 0>(row, p + st, w0);
        }
    } else {
        for (int p = p0; p < p1; p += 2 * st) {
            qv_step<T, MM, 0>(w0, xs + 256 * p, ss + 16 * p, K, M, acc);
            if (p + 2 * st < p1)
                qv_load<T, 0>(row, p + 2 * st, w0);
            if (p + st < p1) {
                qv_step<T, MM, 0>(w1, xs + 256 * (p + st), ss + 16 * (p + st), K, M, acc);
                if (p + 3 * st < p1)
                    qv_load<T, 0>(row, p + 3 * st, w1);
            }
        }
    }
}

/*
 * y [M, N] = x [M, K] W [N, K]^T for M <= MM, for each product of d (of type T, or T2 where bit s
 * of d.t2 is set: a group of two types, as Q4_K_M's q, k in q4_k and v in q6_k): block b takes
 * rows [32 (8 / S) b', + 32 (8 / S)) of its product (b' its index there), warp w row group w / S
 * and steps [ks per, (ks + 1) per) of each row (ks = w % S; P = K / 256 steps, the last split
 * maybe shorter or empty). Its first steps' weights are loaded before the wait for the kernel
 * before (PDL: weights are constant), then x's M rows (RMS: rms_norm(x) by nm, one row) and their
 * sums of 16 are staged (dynamic shared memory, M K 17 / 16 floats); each step's load is issued
 * while the step before it computes (two buffers; q8_0's, too large, q6_k's and GLU's rows: one
 * each).
 */
template <int T, int T2, int MM, bool GLU, bool RMS>
__global__ void __launch_bounds__(QV_WARPS * 32, 2)
    k_qmv(QVD d, const float *x, int64_t ldx, int K, int S, int per, int H, int64_t m_launch,
          int msym, const int64_t *syms, EPI e, KT eo, NORM nm)
{
    extern __shared__ float4 qv_smem[];
    __shared__ float red[QV_WARPS][32];
    float *xs = (float *)qv_smem;             /* [M][K] */
    float *ss = xs + (size_t)m_launch * K;    /* [M][K / 16] */
    int sp = 0;
    while (sp + 1 < d.n && blockIdx.x >= d.block0[sp + 1])
        sp++;
    /* H halves of a warp (1 or 2) take its R = 32 / H rows, each every H-th step of the split */
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, ks = warp % S, N = d.N[sp];
    int R = 32 / H, r = lane % R, half = lane / R;
    int64_t n = ((int64_t)(blockIdx.x - d.block0[sp]) * (QV_WARPS / S) + warp / S) * R + r;
    const uint8_t *row = d.w[sp] + (size_t)(n < N ? n : N - 1) * d.rb[sp];
    const uint8_t *row2 = GLU ? d.w[1] + (size_t)(n < N ? n : N - 1) * d.rb[1] : row;
    int p0 = ks * per + half, p1 = min(K / 256, ks * per + per), M = 0;
    float acc[MM], acc2[MM];
#pragma unroll
    for (int m = 0; m < MM; m++)
        acc[m] = acc2[m] = 0.0f;
    if (T2 != T && (d.t2 >> sp & 1)) /* the same for the whole block */
        qv_rows<T2, MM, GLU, RMS>(row, row2, p0, p1, H, x, ldx, K, m_launch, msym, syms, nm, xs,
                                  ss, &M, acc, acc2);
    else
        qv_rows<T, MM, GLU, RMS>(row, row2, p0, p1, H, x, ldx, K, m_launch, msym, syms, nm, xs,
                                 ss, &M, acc, acc2);
#pragma unroll
    for (int m = 0; m < MM; m++) {
        if (m >= M)
            break;
        float v = acc[m], v2 = acc2[m];
        if (H == 2) { /* the two halves' sums, to the first */
            v += __shfl_down_sync(0xffffffffu, v, 16);
            v2 += __shfl_down_sync(0xffffffffu, v2, 16);
        }
        if (S > 1) { /* the splits' sums, in split order */
            __syncthreads();
            red[warp][lane] = v;
            __syncthreads();
            v = 0.0f;
            for (int i = 0; i < S; i++)
                v += red[warp - ks + i][lane];
            if (GLU) {
                __syncthreads();
                red[warp][lane] = v2;
                __syncthreads();
                v2 = 0.0f;
                for (int i = 0; i < S; i++)
                    v2 += red[warp - ks + i][lane];
            }
        }
        if (ks != 0 || n >= N || half)
            continue;
        if (GLU)
            d.y[0][m * d.ldy + n] = qv_silu(v) * v2;
        else if (d.epi)
            st_f(eo.p + n * eo.nb[3], eo.t, epi_apply(e, n, v));
        else
            d.y[sp][m * d.ldy + n] = v;
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

/* k_qmv's step on the host: the words as the kernel loads them (from S bytes before the step),
 * x's sums of 16 as it stages them. */
template <int T, int S> static void step_host(const uint8_t *step, const float *x, float *out)
{
    uint8_t buf[QV<T>::NW * 4];
    uint32_t w[QV<T>::NW];
    memset(buf, 0, sizeof buf);
    memcpy(buf + S, step, QV<T>::G);
    memcpy(w, buf, sizeof w);
    alignas(16) float xs[256], ss[16];
    memcpy(xs, x, sizeof xs);
    for (int g = 0; g < 16; g++) {
        float a = 0.0f;
        for (int q = 0; q < 4; q++)
            a += (xs[16 * g + 4 * q] + xs[16 * g + 4 * q + 1]) +
                 (xs[16 * g + 4 * q + 2] + xs[16 * g + 4 * q + 3]);
        ss[g] = a;
    }
    float acc[1] = {0.0f};
    qv_step<T, 1, S>(w, xs, ss, 256, 1, acc);
    *out = acc[0];
}

template <int T> static int step_shift(const uint8_t *step, int shift, const float *x, float *out)
{
    switch (T == GP_Q6_K ? shift : shift ? -1 : 0) {
    case 0: step_host<T, 0>(step, x, out); return 0;
    case 2: step_host<T, 2>(step, x, out); return 0;
    case 4: step_host<T, 4>(step, x, out); return 0;
    case 6: step_host<T, 6>(step, x, out); return 0;
    case 8: step_host<T, 8>(step, x, out); return 0;
    case 10: step_host<T, 10>(step, x, out); return 0;
    case 12: step_host<T, 12>(step, x, out); return 0;
    case 14: step_host<T, 14>(step, x, out); return 0;
    default: return -1;
    }
}

extern "C" int gp_cuda_quant_step_host(gp_dtype t, const void *step, int shift, const float *x,
                                       float *out)
{
    const uint8_t *b = (const uint8_t *)step;
#define QS_ONE(T, ...)                                                                             \
    case T: return step_shift<T>(b, shift, x, out);
    switch (t) {
        GP_QUANT_DTYPES(QS_ONE)
    default: return -1;
    }
#undef QS_ONE
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

/* The types the grouped, GLU and RMS instances of k_qmv are built for (the common files' types;
 * the others' groups run as single products). */
static int qv_group_type(gp_dtype t)
{
    return t == GP_Q4_0 || t == GP_Q8_0 || t == GP_Q4_K || t == GP_Q6_K;
}

/* 1 when k_qmv takes rows of type t, K and rb at w (16-byte aligned rows, K a multiple of 256,
 * q6_k's of 2048), M rows of x within QV_SMEM_MAX. */
static int qv_fits(gp_dtype t, const void *w, size_t rb, int64_t K, int64_t M)
{
    size_t smem = (size_t)M * (size_t)K * 4 + (size_t)M * (size_t)(K / 16) * 4;
    return K % 256 == 0 && rb % 16 == 0 && (uintptr_t)w % 16 == 0 &&
           (t != GP_Q6_K || K % 2048 == 0) && M >= 1 && M <= 8 && smem <= QV_SMEM_MAX &&
           K <= ((int64_t)1 << 30);
}

/* Launches k_qmv<T, T2, ...> for d (its block0 set here from its N): the splits, the shared
 * memory. */
template <int T, int T2, int MM, bool GLU, bool RMS>
static int launch_qmv(gp_cu_ctx *c, QVD d, const float *x, int64_t ldx, int K, int64_t M, int msym,
                      const EPI &e, const KT &eo, const NORM &nm)
{
    /* Splits of a row's steps over the warps of a block, until about 1536 warps run (12 a
     * multiprocessor), each taking per steps, the last fewer */
    int P = K / 256, groups = 0, S = 1, H = 1;
    for (int s = 0; s < (GLU ? 1 : d.n); s++)
        groups += (d.N[s] + 31) / 32;
    while (S < QV_MAXS && groups * S < 1536 && P >= 2 * S)
        S *= 2;
    /* Fewer groups of 32 rows than multiprocessors: groups of 16 rows, two steps at a time */
    if (groups < 132 && P >= 2 * S) {
        H = 2;
        groups = 0;
        for (int s = 0; s < (GLU ? 1 : d.n); s++)
            groups += (d.N[s] + 15) / 16;
    }
    int per = (P + S - 1) / S, R = 32 / H;
    unsigned blocks = 0;
    for (int s = 0; s < d.n; s++) {
        d.block0[s] = blocks;
        if (!GLU || s == 0)
            blocks += (unsigned)(((d.N[s] + R - 1) / R + QV_WARPS / S - 1) / (QV_WARPS / S));
    }
    d.block0[d.n] = blocks;
    if (GLU)
        d.block0[1] = blocks; /* every block is in product 0's range */
    size_t smem = (size_t)M * (size_t)K * 4 + (size_t)M * (size_t)(K / 16) * 4;
    void (*k)(QVD, const float *, int64_t, int, int, int, int, int64_t, int, const int64_t *, EPI,
              KT, NORM) = k_qmv<T, T2, MM, GLU, RMS>;
    /* more than 48 KB of dynamic shared memory: allowed once per kernel and device */
    static std::atomic<unsigned> allowed;
    int dev = 0;
    if (smem > (48 << 10) && cudaGetDevice(&dev) == cudaSuccess && dev < 32 &&
        !(allowed.load() & 1u << dev)) {
        if (cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, QV_SMEM_MAX) !=
            cudaSuccess) {
            cudaGetLastError();
            return 0;
        }
        allowed |= 1u << dev;
    }
    gp_cu_launch(c, k, dim3(blocks), dim3(QV_WARPS * 32), smem, d, x, ldx, K, S, per, H, M, msym,
                 c->d_syms, e, eo, nm);
    return 1;
}

/* A single product y = x W^T (d.n 1) of type t in k_qmv: 1 when launched, 0 when not taken. */
static int launch_fast(gp_dtype t, gp_cu_ctx *c, const QVD &d, const float *x, int64_t ldx, int K,
                       int64_t M, int msym, const EPI &e, const KT &eo)
{
    NORM nm;
    memset(&nm, 0, sizeof nm);
#define QV_ONE(TT, ...)                                                                            \
    case TT:                                                                                       \
        return M == 1 ? launch_qmv<TT, TT, 1, false, false>(c, d, x, ldx, K, M, msym, e, eo, nm)  \
                      : launch_qmv<TT, TT, 8, false, false>(c, d, x, ldx, K, M, msym, e, eo, nm);
    switch (t) {
        GP_QUANT_DTYPES(QV_ONE)
    default: return 0;
    }
#undef QV_ONE
}

template <int T, int T2>
static int launch_group_t(gp_cu_ctx *c, const QVD &d, const float *x, int K, int glu, int rms,
                          const NORM &nm)
{
    EPI e;
    KT eo;
    memset(&e, 0, sizeof e);
    memset(&eo, 0, sizeof eo);
    /* GLU: not built for q6_k (gate and up in q6_k are q6_k files') nor for two types */
    if constexpr (T != GP_Q6_K && T == T2) {
        if (glu)
            return rms ? launch_qmv<T, T, 1, true, true>(c, d, x, K, K, 1, -1, e, eo, nm)
                       : launch_qmv<T, T, 1, true, false>(c, d, x, K, K, 1, -1, e, eo, nm);
    } else if (glu) {
        return 0;
    }
    return rms ? launch_qmv<T, T2, 1, false, true>(c, d, x, K, K, 1, -1, e, eo, nm)
               : launch_qmv<T, T2, 1, false, false>(c, d, x, K, K, 1, -1, e, eo, nm);
}

extern "C" int gp_cu_quant_group(gp_cu_ctx *c, const gp_cu_group *g, int *launched)
{
    *launched = 0;
    /* the products' types: one of qv_group_type, or q4_k and q6_k (Q4_K_M's q, k and v) */
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
    if ((!qdot_on() && !qv_group_type(t)) || g->n < 2 || g->n > GP_CU_MAX_GROUP ||
        (g->glu && g->n != 2) || (g->has_norm && g->norm.is_ln))
        return 0;
    const gp_cu_tensor *xt = g->has_norm ? &g->norm.x : &g->x;
    KT kx = gp_kt_of(c, xt);
    int64_t K = kx.ne[3];
    if (kx.t != GP_F32 || kt_count(kx, 3) != 1 || kx.nb[3] != 4 || ((uintptr_t)kx.p & 15) ||
        xt->sym[xt->ndim - 1] >= 0)
        return 0;
    QVD d;
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
            !(qdot_on() ? qd_fits(w->dtype, w->data, (const float *)kx.p, K, K, 1, g->has_norm)
                        : qv_fits(w->dtype, w->data, d.rb[s], K, 1)) ||
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
    int r = 0, gl = g->glu, hn = g->has_norm;
    if (qdot_on()) {
        QDD q;
        memset(&q, 0, sizeof q);
        q.n = d.n;
        q.t2 = d.t2;
        for (int s = 0; s < d.n; s++) {
            q.w[s] = d.w[s];
            q.rb[s] = d.rb[s];
            q.N[s] = d.N[s];
            q.y[s] = d.y[s];
        }
        r = qd_group(c, t, t2, q, x, (int)K, gl, hn, nm);
    } else
    switch (mix ? -1 : (int)t) {
    case -1: r = launch_group_t<GP_Q4_K, GP_Q6_K>(c, d, x, (int)K, gl, hn, nm); break;
    case GP_Q4_0: r = launch_group_t<GP_Q4_0, GP_Q4_0>(c, d, x, (int)K, gl, hn, nm); break;
    case GP_Q8_0: r = launch_group_t<GP_Q8_0, GP_Q8_0>(c, d, x, (int)K, gl, hn, nm); break;
    case GP_Q4_K: r = launch_group_t<GP_Q4_K, GP_Q4_K>(c, d, x, (int)K, gl, hn, nm); break;
    case GP_Q6_K: r = launch_group_t<GP_Q6_K, GP_Q6_K>(c, d, x, (int)K, gl, hn, nm); break;
    default: break;
    }
    if (!r)
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

/* The epilogue epi of a one-row product of N outputs as k_qmv applies it (e, into eo): 1, or 0
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
    if (vec && qdot_on() &&
        qd_fits(t, wt->data, (const float *)xt->data, xt->nb[0] / 4, K, M, 0)) {
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
        d.epi = epi && fused && M == 1 && qv_epilogue(c, epi, N, &e, &eo);
        fast = qd_matmul(c, t, d, (const float *)xt->data, xt->nb[0] / 4, (int)K, M, msym, e, eo);
        if (fast && d.epi)
            *fused = 1;
    } else if (vec && qv_fits(t, wt->data, rb, K, M)) {
        QVD d;
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
        fast = launch_fast(t, c, d, (const float *)xt->data, xt->nb[0] / 4, (int)K, M, msym, e,
                           eo);
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
