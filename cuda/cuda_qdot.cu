/*
 * One-token products (M <= QD_MAXM rows of x) on block-quantized weights with integer dot
 * products (cuda/cuda_quant.cuh, gp_cu_quant_matmul and gp_cu_quant_group):
 *
 *   stage: each block quantizes x's rows once into shared memory, per block of 32 elements in two
 *          8-bit parts: d = max |x| / 127, hi = round(x / d), lo = round((x - d hi) 254 / d), so
 *          that x = d (hi + lo / 254) within d / 508 (the CPU's VNNI path, cpu/quant_vnni.c), with
 *          each 16 elements' d and, as the format needs it, their quantized or exact sum;
 *   rows:  a warp takes a row of W at a time (rows grid-strided over the warps of the launch), its
 *          lanes along K: lane l takes units l, l + 32, ... of 32 elements (a block of 32, or 16
 *          bytes of a super-block's quants with their scales), so that the warp's loads of a row
 *          are contiguous; each unit's 16 quants a half go through dp4a against hi and lo, and
 *          its part of the dot product is a d (sum q hi + sum q lo / 254) + c Q + e X, a, c and e
 *          from the unit's scales (w = a q + c or w = a q + e), Q and X the half's staged sums.
 *          The next unit's weights are loaded while the current one computes (across rows too).
 *
 * The error against the exact product is x's quantization alone (the weights' integers are exact):
 * |y - y_exact| <= sum over blocks of 32 of (d_x / 508) sum |a q + c| over the block, plus f32
 * rounding (tests/cuda/test_cuda_quant.c checks that bound). Loads are aligned 4- or 16-byte words;
 * a unit's window may hold bytes of the blocks beside it (never past the row's 4-byte words).
 */
#include <atomic>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_hostdev.cuh"
#include "cuda/cuda_qdot.cuh"
#include "cuda/cuda_quant.cuh"

/* ---- the device's intrinsics, and their host forms (gp_cuda_qdot_host) ---- */

__host__ __device__ __forceinline__ uint32_t qd_ldw(const uint8_t *p) /* p 4-byte aligned */
{
#ifdef __CUDA_ARCH__
    return __ldg((const unsigned int *)p);
#else
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
#endif
}

__host__ __device__ __forceinline__ void qd_ld16(const uint8_t *p, uint32_t *w) /* 16-aligned */
{
#ifdef __CUDA_ARCH__
    uint4 u = __ldg((const uint4 *)p);
    w[0] = u.x, w[1] = u.y, w[2] = u.z, w[3] = u.w;
#else
    memcpy(w, p, 16);
#endif
}

__host__ __device__ __forceinline__ uint32_t qd_fun16(uint32_t lo, uint32_t hi)
{
#ifdef __CUDA_ARCH__
    return __funnelshift_r(lo, hi, 16);
#else
    return lo >> 16 | hi << 16;
#endif
}

__host__ __device__ __forceinline__ int qd_dp4a(uint32_t a, uint32_t b, int c)
{
#ifdef __CUDA_ARCH__
    return __dp4a((int)a, (int)b, c);
#else
    for (int i = 0; i < 4; i++)
        c += (int)(int8_t)(a >> 8 * i) * (int)(int8_t)(b >> 8 * i);
    return c;
#endif
}

/* ---- formats ---- */

template <int T> struct QD {
    enum {
        BB = gp_dtype_bytes_c(T),             /* bytes a block (of 32 or of 256) */
        KQ = gp_dtype_block_c(T) == 256,      /* a super-block: 8 units a block */
        /* 32-bit words a unit's raw window holds (one spare past it, never loaded) */
        NR = T == GP_Q4_0 ? 5 : T == GP_Q4_1 ? 5 : T == GP_Q5_0 ? 6 : T == GP_Q5_1 ? 6
           : T == GP_Q8_0 ? 9 : T == GP_Q4_K ? 8 : T == GP_Q5_K ? 12 : 12,
        /* the staged sum a half needs: 1 quantized (w = a (q - z)), 2 exact (w = a q + m), 0 none */
        SUM = T == GP_Q4_0 || T == GP_Q5_0 || T == GP_Q6_K ? 1 : T == GP_Q8_0 ? 0 : 2,
        /* the swizzle of x's 16-byte halves in shared memory that keeps a quarter-warp's loads on
         * distinct banks for the halves its lanes take (see qd_slot) */
        SW = T == GP_Q6_K ? 4 : KQ ? 2 : 1
    };
};

/* One lane's unit: its raw words as loaded, and (2-byte-aligned windows) its byte offset. */
template <int T> struct QRaw {
    uint32_t w[QD<T>::NR + 1];
    int o;
};

/* The slot of x's half p (16 elements) among the 16-byte slots of a row's hi (or lo) bytes. */
template <int T> __host__ __device__ __forceinline__ int qd_slot(int p)
{
    return p ^ (QD<T>::SW * (p >> 3 & 1));
}

/* Loads unit u of a row (u: 32 elements from 32 u): aligned words only. */
template <int T> __host__ __device__ __forceinline__ void qd_fetch(const uint8_t *row, int u, QRaw<T> &r)
{
    r.w[QD<T>::NR] = 0;
    r.o = 0;
    if constexpr (T == GP_Q4_K || T == GP_Q5_K) {
        const uint8_t *b = row + (size_t)(u >> 3) * QD<T>::BB;
        int c = u & 7;
        qd_ld16(b, r.w); /* d, dmin, the 12 bytes of scales */
        if constexpr (T == GP_Q4_K) {
            qd_ld16(b + 16 + 16 * c, r.w + 4);
        } else {
            qd_ld16(b + 16 + 16 * (c & 1), r.w + 4); /* qh: the unit's 16 l */
            qd_ld16(b + 48 + 16 * c, r.w + 8);
        }
    } else if constexpr (T == GP_Q6_K) {
        const uint8_t *b = row + (size_t)(u >> 3) * 210;
        int s = u & 7, h = s >> 2, k0 = s >> 1 & 1, l0 = 16 * (s & 1);
        const uint8_t *ql = b + 64 * h + 32 * k0 + l0, *qh = b + 128 + 32 * h + l0;
        r.o = (int)((uintptr_t)b & 2); /* the super-block's offset (210 bytes: 2-aligned) */
        const uint8_t *a = ql - r.o, *hh = qh - r.o;
        HD_UNROLL
        for (int i = 0; i < 5; i++) {
            r.w[i] = i < 4 || r.o ? qd_ldw(a + 4 * i) : 0u;
            r.w[5 + i] = i < 4 || r.o ? qd_ldw(hh + 4 * i) : 0u;
        }
        /* the two scales (bytes 192 + 8 h + 2 k0 + s and + 4) and d (208), as one word each */
        const uint8_t *sc = b + 192 + 8 * h + 2 * k0 + (s & 1);
        r.w[10] = (uint32_t)sc[0] | (uint32_t)sc[4] << 8;
        r.w[11] = qd_ldw(b + 208 - r.o);
    } else {
        const uint8_t *b = row + (size_t)u * QD<T>::BB;
        r.o = QD<T>::BB % 4 ? (int)((uintptr_t)b & 2) : 0;
        const uint8_t *a = b - r.o;
        HD_UNROLL
        for (int i = 0; i < QD<T>::NR; i++)
            r.w[i] = qd_ldw(a + 4 * i);
    }
}

/* The 32-bit word at byte B (even, known at compile time) of the unit's bytes (window offset o). */
template <int T, int B> __host__ __device__ __forceinline__ uint32_t qd_w32(const QRaw<T> &r)
{
    const int k = B / 4;
    if (QD<T>::BB % 4 == 0 && !QD<T>::KQ)
        return B % 4 ? qd_fun16(r.w[k], r.w[k + 1]) : r.w[k];
    if (B % 4 == 0)
        return r.o ? qd_fun16(r.w[k], r.w[k + 1]) : r.w[k];
    return r.o ? r.w[k + 1] : qd_fun16(r.w[k], r.w[k + 1]);
}

/* x's staged view: row m's hi and lo bytes (slots of 16, qd_slot), each half's {d, sum}. */
struct QX {
    const uint8_t *h, *l; /* [M][K] */
    const float2 *s;      /* [M][K / 16] */
    int K;
};

/* acc[m] += a (d (q . hi + q . lo / 254)) + c2 S for x's half p, q the 16 quants' bytes (S: the
 * half's staged sum; c2 is c or e as the format's QD::SUM says). */
template <int T, int MM>
__host__ __device__ __forceinline__ void qd_half(const uint32_t (&q)[4], float a, float c2, int p,
                                                 const QX &x, int M, float (&acc)[MM])
{
    const int slot = qd_slot<T>(p);
    HD_UNROLL
    for (int m = 0; m < MM; m++) {
        if (m >= M)
            break;
        uint32_t xh[4], xl[4];
#ifdef __CUDA_ARCH__
        uint4 vh = *(const uint4 *)(x.h + (size_t)m * x.K + 16 * slot);
        uint4 vl = *(const uint4 *)(x.l + (size_t)m * x.K + 16 * slot);
        xh[0] = vh.x, xh[1] = vh.y, xh[2] = vh.z, xh[3] = vh.w;
        xl[0] = vl.x, xl[1] = vl.y, xl[2] = vl.z, xl[3] = vl.w;
#else
        memcpy(xh, x.h + (size_t)m * x.K + 16 * slot, 16);
        memcpy(xl, x.l + (size_t)m * x.K + 16 * slot, 16);
#endif
        int ih = qd_dp4a(q[0], xh[0], qd_dp4a(q[1], xh[1], qd_dp4a(q[2], xh[2], qd_dp4a(q[3], xh[3], 0))));
        int il = qd_dp4a(q[0], xl[0], qd_dp4a(q[1], xl[1], qd_dp4a(q[2], xl[2], qd_dp4a(q[3], xl[3], 0))));
        float2 ds = x.s[(size_t)m * (x.K / 16) + p];
        float qx = ds.x * fmaf((float)il, 1.0f / 254.0f, (float)ih);
        acc[m] = QD<T>::SUM != 0 ? fmaf(a, qx, fmaf(c2, ds.y, acc[m])) : fmaf(a, qx, acc[m]);
    }
}

/* A 6-bit scale and min of a q4_k / q5_k super-block (scales' bytes in s0 .. s2), sub-block j. */
__host__ __device__ __forceinline__ void qd_kscale(uint32_t s0, uint32_t s1, uint32_t s2, int j,
                                                   int &sc, int &mn)
{
    if (j < 4) {
        sc = s0 >> 8 * j & 63;
        mn = s1 >> 8 * j & 63;
    } else {
        int i = 8 * (j - 4);
        sc = (s2 >> i & 15) | (s0 >> (i + 6) & 3) << 4;
        mn = (s2 >> (i + 4) & 15) | (s1 >> (i + 6) & 3) << 4;
    }
}

/* The 4 bits of h from bit b on, spread to bit 4 of each byte (q5_0 / q5_1's fifth bits). */
__host__ __device__ __forceinline__ uint32_t qd_spread(uint32_t h, int b)
{
    return (h >> b & 15u) * 0x02040810u & 0x10101010u;
}

/* acc += unit u's part of the products (its raw words r) with x's rows. */
template <int T, int MM>
__host__ __device__ __forceinline__ void qd_unit(const QRaw<T> &r, int u, const QX &x, int M,
                                                 float (&acc)[MM])
{
    uint32_t q0[4], q1[4];
    if constexpr (T == GP_Q4_K || T == GP_Q5_K) {
        int c = u & 7, j = 2 * (c >> 1), p = 16 * (u >> 3) + 2 * j + (c & 1);
        float d = h2f_bits(r.w[0]), dmin = h2f_bits(r.w[0] >> 16);
        int sc0, mn0, sc1, mn1;
        qd_kscale(r.w[1], r.w[2], r.w[3], j, sc0, mn0);
        qd_kscale(r.w[1], r.w[2], r.w[3], j + 1, sc1, mn1);
        HD_UNROLL
        for (int i = 0; i < 4; i++) {
            uint32_t v = T == GP_Q4_K ? r.w[4 + i] : r.w[8 + i];
            q0[i] = v & 0x0F0F0F0Fu;
            q1[i] = v >> 4 & 0x0F0F0F0Fu;
            if (T == GP_Q5_K) {
                uint32_t h = r.w[4 + i];
                q0[i] |= (h >> j & 0x01010101u) << 4;
                q1[i] |= (h >> (j + 1) & 0x01010101u) << 4;
            }
        }
        qd_half<T, MM>(q0, mul_rn(d, (float)sc0), -mul_rn(dmin, (float)mn0), p, x, M, acc);
        qd_half<T, MM>(q1, mul_rn(d, (float)sc1), -mul_rn(dmin, (float)mn1), p + 2, x, M, acc);
    } else if constexpr (T == GP_Q6_K) {
        int s = u & 7, k0 = s >> 1 & 1;
        int p = 16 * (u >> 3) + 8 * (s >> 2) + 2 * k0 + (s & 1);
        float d = h2f_bits(r.o ? r.w[11] >> 16 : r.w[11]);
        HD_UNROLL
        for (int i = 0; i < 4; i++) {
            uint32_t l = r.o ? qd_fun16(r.w[i], r.w[i + 1]) : r.w[i];
            uint32_t h = r.o ? qd_fun16(r.w[5 + i], r.w[6 + i]) : r.w[5 + i];
            q0[i] = (l & 0x0F0F0F0Fu) | (h >> 2 * k0 & 0x03030303u) << 4;
            q1[i] = (l >> 4 & 0x0F0F0F0Fu) | (h >> (2 * k0 + 4) & 0x03030303u) << 4;
        }
        float a0 = mul_rn(d, (float)(int8_t)(r.w[10] & 0xffu));
        float a1 = mul_rn(d, (float)(int8_t)(r.w[10] >> 8 & 0xffu));
        qd_half<T, MM>(q0, a0, -32.0f * a0, p, x, M, acc);
        qd_half<T, MM>(q1, a1, -32.0f * a1, p + 4, x, M, acc);
    } else {
        /* blocks of 32: d, then (q4_1, q5_1) m, then (q5_0, q5_1) qh, then the quants */
        const int qoff = T == GP_Q4_0 ? 2 : T == GP_Q4_1 ? 4 : T == GP_Q5_0 ? 6 : T == GP_Q5_1 ? 8 : 2;
        uint32_t w0 = qd_w32<T, 0>(r);
        float d = h2f_bits(w0), c = 0.0f;
        if (T == GP_Q4_0)
            c = -8.0f * d;
        else if (T == GP_Q5_0)
            c = -16.0f * d;
        else if (T == GP_Q4_1 || T == GP_Q5_1)
            c = h2f_bits(w0 >> 16);
        uint32_t hb = 0;
        if (T == GP_Q5_0)
            hb = qd_w32<T, 2>(r);
        else if (T == GP_Q5_1)
            hb = qd_w32<T, 4>(r);
        if (T == GP_Q8_0) {
            q0[0] = qd_w32<T, 2>(r), q0[1] = qd_w32<T, 6>(r);
            q0[2] = qd_w32<T, 10>(r), q0[3] = qd_w32<T, 14>(r);
            q1[0] = qd_w32<T, 18>(r), q1[1] = qd_w32<T, 22>(r);
            q1[2] = qd_w32<T, 26>(r), q1[3] = qd_w32<T, 30>(r);
        } else {
            uint32_t v[4] = {qd_w32<T, qoff>(r), qd_w32<T, qoff + 4>(r), qd_w32<T, qoff + 8>(r),
                             qd_w32<T, qoff + 12>(r)};
            HD_UNROLL
            for (int i = 0; i < 4; i++) {
                q0[i] = v[i] & 0x0F0F0F0Fu;
                q1[i] = v[i] >> 4 & 0x0F0F0F0Fu;
                if (T == GP_Q5_0 || T == GP_Q5_1) {
                    q0[i] |= qd_spread(hb, 4 * i);
                    q1[i] |= qd_spread(hb, 16 + 4 * i);
                }
            }
        }
        qd_half<T, MM>(q0, d, c, 2 * u, x, M, acc);
        qd_half<T, MM>(q1, d, c, 2 * u + 1, x, M, acc);
    }
}

__host__ __device__ __forceinline__ void qd_st32(uint8_t *p, uint32_t v) /* p 4-byte aligned */
{
#ifdef __CUDA_ARCH__
    *(uint32_t *)p = v;
#else
    memcpy(p, &v, 4);
#endif
}

/* Elements 4 t .. 4 t + 3 of x's row m (v4) quantized by their block's d into hi and lo at their
 * slots of the staged view; shl gets their sums of hi and of lo. */
template <int T>
__host__ __device__ __forceinline__ void qd_quant4(const float *v4, float d, uint8_t *h, uint8_t *l,
                                                   int t, int K, int m, float *shl)
{
    float id = d > 0.0f ? 1.0f / d : 0.0f;
    uint32_t wh = 0, wl = 0;
    int sh = 0, sl = 0;
    HD_UNROLL
    for (int i = 0; i < 4; i++) {
        int hi = (int)rintf(v4[i] * id);
        hi = hi > 127 ? 127 : hi < -127 ? -127 : hi;
        float rr = v4[i] - mul_rn(d, (float)hi);
        int lo = (int)rintf(rr * 254.0f * id);
        lo = lo > 127 ? 127 : lo < -127 ? -127 : lo;
        wh |= (uint32_t)(hi & 255) << 8 * i;
        wl |= (uint32_t)(lo & 255) << 8 * i;
        sh += hi;
        sl += lo;
    }
    size_t at = (size_t)m * K + 16 * qd_slot<T>(t >> 2) + 4 * (t & 3);
    qd_st32(h + at, wh);
    qd_st32(l + at, wl);
    shl[0] = (float)sh;
    shl[1] = (float)sl;
}

enum { QD_THREADS = 512, QD_WARPS = QD_THREADS / 32 };

/* x's M rows (RMS: rms_norm(x) by nm, one row, through xf) into the staged view at sm: thread t
 * takes 4 elements, 8 threads a block of 32. src: f32 rows ld apart (global or shared memory). A
 * block holding a NaN or an infinity gets d = NaN, so that every product reading it is NaN. Every
 * thread of the block calls it. */
template <int T, bool RMS>
__device__ __forceinline__ void qd_stage(const float *x, int64_t ldx, int K, int M, const NORM &nm,
                                         uint8_t *sm, float *xf)
{
    uint8_t *h = sm, *l = sm + (size_t)M * K;
    float2 *s = (float2 *)(sm + (size_t)2 * M * K);
    const float *src = x;
    int64_t ld = ldx;
    if (RMS) {
        stage_norm(nm, x, K, xf);
        src = xf;
        ld = K;
    }
    int n4 = K / 4;
    for (int m = 0; m < M; m++)
        for (int base = 0; base < n4; base += QD_THREADS) {
            int t = base + (int)threadIdx.x;
            bool ok = t < n4;
            float4 v = ok ? *(const float4 *)(src + m * ld + 4 * (int64_t)t)
                          : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            float am = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
            int bad = !(fabsf(v.x) <= 3.4e38f && fabsf(v.y) <= 3.4e38f && fabsf(v.z) <= 3.4e38f &&
                        fabsf(v.w) <= 3.4e38f);
#pragma unroll
            for (int o = 1; o < 8; o <<= 1) {
                am = fmaxf(am, __shfl_xor_sync(0xffffffffu, am, o));
                bad |= __shfl_xor_sync(0xffffffffu, bad, o);
            }
            float d = bad ? __int_as_float(0x7fc00000) : am / 127.0f;
            float v4[4] = {v.x, v.y, v.z, v.w}, shl[2] = {0.0f, 0.0f};
            if (ok)
                qd_quant4<T>(v4, bad ? 0.0f : d, h, l, t, K, m, shl);
            float fs = (v.x + v.y) + (v.z + v.w);
#pragma unroll
            for (int o = 1; o < 4; o <<= 1) {
                shl[0] += __shfl_xor_sync(0xffffffffu, shl[0], o);
                shl[1] += __shfl_xor_sync(0xffffffffu, shl[1], o);
                fs += __shfl_xor_sync(0xffffffffu, fs, o);
            }
            if (ok && (t & 3) == 0)
                s[(size_t)m * (K / 16) + (t >> 2)] =
                    make_float2(d, QD<T>::SUM == 1 ? d * fmaf(shl[1], 1.0f / 254.0f, shl[0]) : fs);
        }
    __syncthreads();
}

/* The product and row of concatenated row r among the products of phase ph (t2 bit ph). */
__device__ __forceinline__ int qd_row(const QDD &d, int ph, int64_t r, int *n)
{
    for (int s = 0; s < d.n; s++) {
        if ((int)(d.t2 >> s & 1) != ph)
            continue;
        if (r < d.N[s]) {
            *n = (int)r;
            return s;
        }
        r -= d.N[s];
    }
    *n = 0;
    return -1;
}

__device__ __forceinline__ float qd_silu(float v)
{
    return v / (1.0f + expf(-v)); /* as the swiglu node (cuda_ops.cu) */
}

/* The rows of phase ph (products of type TT): warp gw's rows gw, gw + nw, ...; units of 2 a lane a
 * step, the next step's loaded before the current one's products. first: the phase's first
 * step was loaded (before the wait) into cur. */
template <int TT, int MM, bool GLU>
__device__ __forceinline__ void qd_rows(const QDD &d, int ph, int64_t rows, const QX &x, int M,
                                        const EPI &e, const KT &eo, QRaw<TT> (&cur)[2],
                                        QRaw<TT> (&cur2)[2], bool first)
{
    const int lane = threadIdx.x & 31, U = x.K / 32, G = (U + 63) / 64;
    const int64_t nw = (int64_t)gridDim.x * QD_WARPS;
    int64_t r = (int64_t)blockIdx.x * QD_WARPS + (threadIdx.x >> 5);
    int g = 0, n = 0, s = r < rows ? qd_row(d, ph, r, &n) : -1;
    const uint8_t *row = s >= 0 ? d.w[s] + (size_t)n * d.rb[s] : NULL;
    const uint8_t *row2 = GLU && s >= 0 ? d.w[1] + (size_t)n * d.rb[1] : NULL;
    if (!first && row) {
        for (int j = 0; j < 2; j++) {
            int u = lane + 32 * j;
            if (u < U) {
                qd_fetch<TT>(row, u, cur[j]);
                if (GLU)
                    qd_fetch<TT>(row2, u, cur2[j]);
            }
        }
    }
    float acc[MM], acc2[MM];
#pragma unroll
    for (int m = 0; m < MM; m++)
        acc[m] = acc2[m] = 0.0f;
    while (row) {
        /* the next step: this row's next pair of units, or the next row's first */
        int g2 = g + 1, n2 = n, s2 = s;
        int64_t r2 = r;
        if (g2 == G) {
            g2 = 0;
            r2 = r + nw;
            s2 = r2 < rows ? qd_row(d, ph, r2, &n2) : -1;
        }
        const uint8_t *nrow = s2 >= 0 ? d.w[s2] + (size_t)n2 * d.rb[s2] : NULL;
        const uint8_t *nrow2 = GLU && s2 >= 0 ? d.w[1] + (size_t)n2 * d.rb[1] : NULL;
        QRaw<TT> nxt[2], nxt2[2];
#pragma unroll
        for (int j = 0; j < 2; j++) {
            int u = 64 * g2 + lane + 32 * j;
            if (nrow && u < U) {
                qd_fetch<TT>(nrow, u, nxt[j]);
                if (GLU)
                    qd_fetch<TT>(nrow2, u, nxt2[j]);
            }
        }
#pragma unroll
        for (int j = 0; j < 2; j++) {
            int u = 64 * g + lane + 32 * j;
            if (u < U) {
                qd_unit<TT, MM>(cur[j], u, x, M, acc);
                if (GLU)
                    qd_unit<TT, MM>(cur2[j], u, x, M, acc2);
            }
        }
        if (g == G - 1) {
#pragma unroll
            for (int m = 0; m < MM; m++) {
                if (m >= M)
                    break;
                float v = warp_sum(acc[m]), v2 = GLU ? warp_sum(acc2[m]) : 0.0f;
                acc[m] = acc2[m] = 0.0f;
                if (lane != 0)
                    continue;
                if (GLU)
                    d.y[0][m * d.ldy + n] = qd_silu(v) * v2;
                else if (d.epi)
                    st_f(eo.p + n * eo.nb[3], eo.t, epi_apply(e, n, v));
                else
                    d.y[s][m * d.ldy + n] = v;
            }
        }
#pragma unroll
        for (int j = 0; j < 2; j++) {
            cur[j] = nxt[j];
            if (GLU)
                cur2[j] = nxt2[j];
        }
        g = g2, n = n2, s = s2, r = r2, row = nrow;
    }
}

/*
 * y [M, N] = x [M, K] W [N, K]^T for each product of d, M <= MM (the eval's, from syms when msym
 * >= 0, at most m_launch): the first rows' weights loaded before the wait for the kernel before
 * (PDL: weights are constant), x staged (dynamic shared memory: m_launch K 2.75 bytes, RMS: and K
 * floats), then the rows of type T (t2 bit 0), then those of T2.
 */
template <int T, int T2, int MM, bool GLU, bool RMS>
__global__ void __launch_bounds__(QD_THREADS, 1)
    k_qdot(QDD d, const float *x, int64_t ldx, int K, int64_t m_launch, int msym,
           const int64_t *syms, EPI e, KT eo, NORM nm, int64_t rows0, int64_t rows1)
{
    extern __shared__ float4 qd_smem[];
    uint8_t *sm = (uint8_t *)qd_smem;
    float *xf = (float *)(sm + (size_t)m_launch * K * 2 + (size_t)m_launch * (K / 16) * 8);
    const int lane = threadIdx.x & 31, U = K / 32;
    int64_t r = (int64_t)blockIdx.x * QD_WARPS + (threadIdx.x >> 5);
    QRaw<T> cur[2], cur2[2];
    if (r < rows0) {
        int n = 0, s = qd_row(d, 0, r, &n);
        const uint8_t *row = d.w[s] + (size_t)n * d.rb[s];
#pragma unroll
        for (int j = 0; j < 2; j++)
            if (lane + 32 * j < U) {
                qd_fetch<T>(row, lane + 32 * j, cur[j]);
                if (GLU)
                    qd_fetch<T>(d.w[1] + (size_t)n * d.rb[1], lane + 32 * j, cur2[j]);
            }
    }
    if (RMS)
        prefetch_norm(nm, 0, K);
    pdl_begin();
    int64_t Ml = msym >= 0 ? syms[msym] : m_launch;
    int M = (int)(Ml < m_launch ? Ml : m_launch);
    qd_stage<T, RMS>(x, ldx, K, M, nm, sm, xf);
    QX xv;
    xv.h = sm;
    xv.l = sm + (size_t)M * K;
    xv.s = (const float2 *)(sm + (size_t)2 * M * K);
    xv.K = K;
    qd_rows<T, MM, GLU>(d, 0, rows0, xv, M, e, eo, cur, cur2, true);
    if (T2 != T && rows1 > 0) {
        /* the second type's halves are staged with its own swizzle */
        __syncthreads();
        qd_stage<T2, false>(RMS ? xf : x, RMS ? K : ldx, K, M, nm, sm, xf);
        QRaw<T2> c2[2], c22[2];
        qd_rows<T2, MM, GLU>(d, 1, rows1, xv, M, e, eo, c2, c22, false);
    }
}
/* ---- host ---- */

int qd_fits(gp_dtype t, const void *w, const float *x, int64_t ldx, int64_t K, int64_t m_launch,
            int rms)
{
    size_t smem = (size_t)m_launch * (size_t)K * 2 + (size_t)m_launch * (size_t)(K / 16) * 8 +
                  (rms ? (size_t)K * 4 : 0);
    return gp_dtype_is_quant(t) && K % 32 == 0 && K % gp_dtype_block(t) == 0 &&
           (uintptr_t)w % 16 == 0 && (uintptr_t)x % 16 == 0 && ldx % 4 == 0 && m_launch >= 1 &&
           m_launch <= QD_MAXM && smem <= QD_SMEM_MAX && K <= ((int64_t)1 << 24);
}

template <int T, int T2, int MM, bool GLU, bool RMS>
static int launch_qdot(gp_cu_ctx *c, const QDD &d, const float *x, int64_t ldx, int K, int64_t M,
                       int msym, const EPI &e, const KT &eo, const NORM &nm)
{
    int64_t rows0 = 0, rows1 = 0;
    for (int s = 0; s < (GLU ? 1 : d.n); s++)
        (d.t2 >> s & 1 ? rows1 : rows0) += d.N[s];
    size_t smem = (size_t)M * (size_t)K * 2 + (size_t)M * (size_t)(K / 16) * 8 +
                  (RMS ? (size_t)K * 4 : 0);
    void (*k)(QDD, const float *, int64_t, int, int64_t, int, const int64_t *, EPI, KT, NORM,
              int64_t, int64_t) = k_qdot<T, T2, MM, GLU, RMS>;
    static std::atomic<unsigned> allowed;
    int dev = 0;
    if (smem > (48 << 10) && cudaGetDevice(&dev) == cudaSuccess && dev < 32 &&
        !(allowed.load() & 1u << dev)) {
        if (cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, QD_SMEM_MAX) !=
            cudaSuccess) {
            cudaGetLastError();
            return 0;
        }
        allowed |= 1u << dev;
    }
    /* as many blocks as are resident at once (the rows are grid-strided), from the occupancy of
     * this instance at this shared memory (the last asked kept: one size per product) */
    static std::atomic<int64_t> occ; /* smem << 8 | blocks a multiprocessor */
    int64_t o = occ.load(), bps = (o >> 8) == (int64_t)smem ? (o & 255) : 0;
    if (!bps) {
        int nb = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, k, QD_THREADS, smem) != cudaSuccess)
            cudaGetLastError();
        bps = nb > 0 ? (nb < 255 ? nb : 255) : 1;
        occ.store((int64_t)smem << 8 | bps);
    }
    int64_t most = rows0 > rows1 ? rows0 : rows1, want = (most + QD_WARPS - 1) / QD_WARPS;
    int64_t cap = (int64_t)(c->n_sm > 0 ? c->n_sm : 132) * bps;
    unsigned blocks = (unsigned)(want < cap ? want : cap);
    gp_cu_launch(c, k, dim3(blocks), dim3(QD_THREADS), smem, d, x, ldx, K, M, msym, c->d_syms, e,
                 eo, nm, rows0, rows1);
    return 1;
}


/* The instances: single products of every type for one row and for up to QD_MAXM, groups (one
 * row, with or without the norm, GLU) of every type, and Q4_K_M's q4_k + q6_k q, k and v. */
template <int T>
static int qd_single(gp_cu_ctx *c, const QDD &d, const float *x, int64_t ldx, int K, int64_t M,
                     int msym, const EPI &e, const KT &eo)
{
    NORM nm;
    memset(&nm, 0, sizeof nm);
    return M == 1 ? launch_qdot<T, T, 1, false, false>(c, d, x, ldx, K, M, msym, e, eo, nm)
                  : launch_qdot<T, T, QD_MAXM, false, false>(c, d, x, ldx, K, M, msym, e, eo, nm);
}

template <int T>
static int qd_grouped(gp_cu_ctx *c, const QDD &d, const float *x, int K, int glu, int rms,
                      const NORM &nm)
{
    EPI e;
    KT eo;
    memset(&e, 0, sizeof e);
    memset(&eo, 0, sizeof eo);
    if (glu)
        return rms ? launch_qdot<T, T, 1, true, true>(c, d, x, K, K, 1, -1, e, eo, nm)
                   : launch_qdot<T, T, 1, true, false>(c, d, x, K, K, 1, -1, e, eo, nm);
    return rms ? launch_qdot<T, T, 1, false, true>(c, d, x, K, K, 1, -1, e, eo, nm)
               : launch_qdot<T, T, 1, false, false>(c, d, x, K, K, 1, -1, e, eo, nm);
}

int qd_matmul(gp_cu_ctx *c, gp_dtype t, const QDD &d, const float *x, int64_t ldx, int K,
              int64_t M, int msym, const EPI &e, const KT &eo)
{
    switch (t) {
#define QD_ONE(TT, ...)                                                                            \
    case TT: return qd_single<TT>(c, d, x, ldx, K, M, msym, e, eo);
        GP_QUANT_DTYPES(QD_ONE)
#undef QD_ONE
    default: return 0;
    }
}

int qd_group(gp_cu_ctx *c, gp_dtype t, gp_dtype t2, const QDD &d, const float *x, int K, int glu,
             int rms, const NORM &nm)
{
    if (t != t2) {
        if (t != GP_Q4_K || t2 != GP_Q6_K || glu)
            return 0;
        EPI e;
        KT eo;
        memset(&e, 0, sizeof e);
        memset(&eo, 0, sizeof eo);
        return rms ? launch_qdot<GP_Q4_K, GP_Q6_K, 1, false, true>(c, d, x, K, K, 1, -1, e, eo, nm)
                   : launch_qdot<GP_Q4_K, GP_Q6_K, 1, false, false>(c, d, x, K, K, 1, -1, e, eo,
                                                                     nm);
    }
    switch (t) {
#define QD_ONE(TT, ...)                                                                            \
    case TT: return qd_grouped<TT>(c, d, x, K, glu, rms, nm);
        GP_QUANT_DTYPES(QD_ONE)
#undef QD_ONE
    default: return 0;
    }
}

/* ---- the kernel's arithmetic on the host (gp_cuda_qdot_host) ---- */

template <int T> static void qd_host_rows(const uint8_t *w, size_t rb, int N, const float *x,
                                          int K, int M, float *y)
{
    uint8_t *h = (uint8_t *)malloc((size_t)M * K), *l = (uint8_t *)malloc((size_t)M * K);
    float2 *s = (float2 *)malloc((size_t)M * (K / 16) * sizeof(float2));
    for (int m = 0; m < M; m++)
        for (int b = 0; b < K / 32; b++) {
            const float *xb = x + (size_t)m * K + 32 * b;
            float am = 0.0f;
            int bad = 0;
            for (int i = 0; i < 32; i++) {
                am = fmaxf(am, fabsf(xb[i]));
                bad |= !(fabsf(xb[i]) <= 3.4e38f);
            }
            float d = bad ? NAN : am / 127.0f;
            for (int g = 0; g < 2; g++) {
                float sh = 0.0f, sl = 0.0f, fs = 0.0f;
                for (int q = 0; q < 4; q++) {
                    int t = 8 * b + 4 * g + q;
                    float shl[2];
                    qd_quant4<T>(x + (size_t)m * K + 4 * t, bad ? 0.0f : d, h, l, t, K, m, shl);
                    sh += shl[0];
                    sl += shl[1];
                    const float *v = x + (size_t)m * K + 4 * t;
                    fs += (v[0] + v[1]) + (v[2] + v[3]);
                }
                s[(size_t)m * (K / 16) + 2 * b + g] =
                    make_float2(d, QD<T>::SUM == 1 ? d * fmaf(sl, 1.0f / 254.0f, sh) : fs);
            }
        }
    QX xv;
    xv.h = h;
    xv.l = l;
    xv.s = s;
    xv.K = K;
    for (int n = 0; n < N; n++) {
        float acc[32][QD_MAXM];
        memset(acc, 0, sizeof acc);
        for (int u = 0; u < K / 32; u++) {
            QRaw<T> r;
            qd_fetch<T>(w + (size_t)n * rb, u, r);
            qd_unit<T, QD_MAXM>(r, u, xv, M, acc[u % 32]);
        }
        for (int m = 0; m < M; m++) {
            float v = 0.0f;
            for (int lane = 0; lane < 32; lane++)
                v += acc[lane][m];
            y[(size_t)m * N + n] = v;
        }
    }
    free(h);
    free(l);
    free(s);
}

extern "C" int gp_cuda_qdot_host(gp_dtype t, const void *w, int N, const float *x, int K, int M,
                                 float *y)
{
    if (!gp_dtype_is_quant(t) || K % 32 || K % gp_dtype_block(t) || M < 1 || M > QD_MAXM ||
        ((uintptr_t)w & 15))
        return -1;
    size_t rb = gp_dtype_row_bytes(t, K);
#define QD_HOST(TT, ...)                                                                           \
    case TT: qd_host_rows<TT>((const uint8_t *)w, rb, N, x, K, M, y); return 0;
    switch (t) {
        GP_QUANT_DTYPES(QD_HOST)
    default: return -1;
    }
#undef QD_HOST
}
