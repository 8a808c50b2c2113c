/* ggml's block formats written from their definition (runtime/quant.h): dequantize, quantize, the
 * 8-bit activation rows, the portable product kernel and the selector of the SIMD ones. */
#include "runtime/quant.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "runtime/f16.h"
#include "runtime/quant_internal.h"

static float rd16(const uint8_t *p) /* a little-endian binary16 as f32 */
{
    return gp_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

static void wr16(uint8_t *p, float f)
{
    uint16_t h = gp_f32_to_f16(f);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void wr32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> 8 * i);
}

/* ---- dequantize ---- */

/* A 32-block's low nibbles are elements 0..15, its high nibbles 16..31. Loops of 16 with fixed
 * shifts so the compiler vectorizes them. */
static void deq_block(gp_dtype t, const uint8_t *b, float *y)
{
    switch (t) {
    case GP_Q4_0: {
        float d = rd16(b);
        for (int i = 0; i < 16; i++) {
            y[i] = d * (float)((b[2 + i] & 15) - 8);
            y[i + 16] = d * (float)((b[2 + i] >> 4) - 8);
        }
        break;
    }
    case GP_Q4_1: {
        float d = rd16(b), m = rd16(b + 2);
        for (int i = 0; i < 16; i++) {
            y[i] = d * (float)(b[4 + i] & 15) + m;
            y[i + 16] = d * (float)(b[4 + i] >> 4) + m;
        }
        break;
    }
    case GP_Q5_0: {
        float d = rd16(b);
        uint32_t qh = rd32(b + 2);
        for (int i = 0; i < 16; i++) {
            y[i] = d * (float)(((b[6 + i] & 15) | (int)(qh >> i & 1) << 4) - 16);
            y[i + 16] = d * (float)(((b[6 + i] >> 4) | (int)(qh >> (i + 16) & 1) << 4) - 16);
        }
        break;
    }
    case GP_Q5_1: {
        float d = rd16(b), m = rd16(b + 2);
        uint32_t qh = rd32(b + 4);
        for (int i = 0; i < 16; i++) {
            y[i] = d * (float)((b[8 + i] & 15) | (int)(qh >> i & 1) << 4) + m;
            y[i + 16] = d * (float)((b[8 + i] >> 4) | (int)(qh >> (i + 16) & 1) << 4) + m;
        }
        break;
    }
    case GP_Q8_0: {
        float d = rd16(b);
        for (int i = 0; i < 32; i++)
            y[i] = (float)(int8_t)b[2 + i] * d;
        break;
    }
    case GP_Q4_K:
    case GP_Q5_K: {
        float d = rd16(b), dmin = rd16(b + 2);
        uint8_t sc[8], mn[8];
        gp_quant_k_scales(b + 4, sc, mn);
        const uint8_t *qh = b + 16, *qs = t == GP_Q5_K ? b + 48 : b + 16;
        for (int j = 0; j < 8; j++) {
            float dl = d * (float)sc[j], ml = dmin * (float)mn[j];
            for (int l = 0; l < 32; l++) {
                int q = qs[32 * (j >> 1) + l] >> 4 * (j & 1) & 15;
                if (t == GP_Q5_K)
                    q |= (qh[l] >> j & 1) << 4;
                y[32 * j + l] = dl * (float)q - ml;
            }
        }
        break;
    }
    case GP_Q6_K: {
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        float d = rd16(b + 208);
        for (int h = 0; h < 2; h++) {
            for (int k = 0; k < 4; k++) {
                const uint8_t *lo = ql + 64 * h + 32 * (k & 1), *hi = qh + 32 * h;
                float *yk = y + 128 * h + 32 * k;
                float s0 = d * (float)sc[8 * h + 2 * k], s1 = d * (float)sc[8 * h + 2 * k + 1];
                for (int l = 0; l < 32; l++) {
                    int q = (lo[l] >> 4 * (k >> 1) & 15) | (hi[l] >> 2 * k & 3) << 4;
                    yk[l] = (l < 16 ? s0 : s1) * (float)(q - 32);
                }
            }
        }
        break;
    }
    default:
        GP_ASSERT(!"not a quantized dtype");
    }
}

void gp_quant_dequantize_row(gp_dtype t, const void *src, float *dst, int64_t n)
{
    GP_ASSERT(gp_dtype_is_quant(t));
    int64_t qk = gp_dtype_block(t);
    size_t bb = gp_dtype_block_bytes(t);
    GP_ASSERT(n % qk == 0);
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / qk; i++)
        deq_block(t, b + (size_t)i * bb, dst + i * qk);
}

/* ---- quantize ---- */

/* ggml's rounding for its reference quantizers: to nearest, ties away from zero. */
static int round_away(float x)
{
    return (int)roundf(x);
}

static int clampi(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* q4_0 / q5_0: the element of largest magnitude (the first on ties) maps to q = 0. */
static void quant_sym(const float *x, int levels, uint8_t *dp, uint8_t *q)
{
    float amax = 0, max = 0;
    for (int i = 0; i < 32; i++) {
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    }
    float d = max / (float)-(levels / 2), id = d != 0 ? 1.0f / d : 0;
    for (int i = 0; i < 32; i++) /* truncation of x / d + levels / 2 + 0.5: ggml's rounding */
        q[i] = (uint8_t)clampi((int)(x[i] * id + ((float)(levels / 2) + 0.5f)), 0, levels - 1);
    wr16(dp, d);
}

/* q4_1 / q5_1: q = 0 at the minimum, levels - 1 at the maximum. */
static void quant_asym(const float *x, int levels, uint8_t *dp, uint8_t *mp, uint8_t *q)
{
    float mn = x[0], mx = x[0];
    for (int i = 1; i < 32; i++) {
        mn = x[i] < mn ? x[i] : mn;
        mx = x[i] > mx ? x[i] : mx;
    }
    float d = (mx - mn) / (float)(levels - 1), id = d != 0 ? 1.0f / d : 0;
    for (int i = 0; i < 32; i++)
        q[i] = (uint8_t)clampi((int)((x[i] - mn) * id + 0.5f), 0, levels - 1);
    wr16(dp, d);
    wr16(mp, mn);
}

static void pack_nibbles(const uint8_t *q, uint8_t *qs)
{
    for (int i = 0; i < 16; i++)
        qs[i] = (uint8_t)((q[i] & 15) | (q[i + 16] & 15) << 4);
}

static uint32_t pack_high(const uint8_t *q)
{
    uint32_t qh = 0;
    for (int i = 0; i < 32; i++)
        qh |= (uint32_t)(q[i] >> 4 & 1) << i;
    return qh;
}

/* q4_k / q5_k super-block (see quant.h for the scheme); levels 16 or 32. */
static void quant_k45(const float *x, int levels, uint8_t *b)
{
    float scale[8], minv[8], smax = 0, mmax = 0;
    for (int j = 0; j < 8; j++) {
        float lo = 0, hi = x[32 * j];
        for (int l = 0; l < 32; l++) {
            float v = x[32 * j + l];
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
        scale[j] = (hi - lo) / (float)(levels - 1);
        minv[j] = -lo;
        smax = scale[j] > smax ? scale[j] : smax;
        mmax = minv[j] > mmax ? minv[j] : mmax;
    }
    wr16(b, smax / 63);
    wr16(b + 2, mmax / 63);
    float d = rd16(b), dmin = rd16(b + 2); /* quantize against the stored values */
    float id = d != 0 ? 1.0f / d : 0, idmin = dmin != 0 ? 1.0f / dmin : 0;
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; j++) {
        sc[j] = (uint8_t)clampi((int)nearbyintf(scale[j] * id), 0, 63);
        mn[j] = (uint8_t)clampi((int)nearbyintf(minv[j] * idmin), 0, 63);
    }
    uint8_t *s = b + 4;
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
        s[j + 4] = (uint8_t)(mn[j] | (mn[j + 4] >> 4) << 6);
        s[j + 8] = (uint8_t)((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4);
    }
    uint8_t *qh = b + 16, *qs = levels == 32 ? b + 48 : b + 16;
    if (levels == 32)
        memset(qh, 0, 32);
    for (int j = 0; j < 8; j++) {
        float dl = d * (float)sc[j], ml = dmin * (float)mn[j], idl = dl != 0 ? 1.0f / dl : 0;
        for (int l = 0; l < 32; l++) {
            int q = clampi((int)nearbyintf((x[32 * j + l] + ml) * idl), 0, levels - 1);
            uint8_t *p = qs + 32 * (j >> 1) + l;
            if (j & 1)
                *p = (uint8_t)(*p | (q & 15) << 4);
            else
                *p = (uint8_t)(q & 15);
            if (levels == 32)
                qh[l] = (uint8_t)(qh[l] | (q >> 4) << j);
        }
    }
}

static void quant_q6k(const float *x, uint8_t *b)
{
    float scale[16], smax = 0;
    for (int g = 0; g < 16; g++) {
        float amax = 0;
        for (int l = 0; l < 16; l++)
            amax = fabsf(x[16 * g + l]) > amax ? fabsf(x[16 * g + l]) : amax;
        scale[g] = amax / 31;
        smax = scale[g] > smax ? scale[g] : smax;
    }
    wr16(b + 208, smax / 127);
    float d = rd16(b + 208), id = d != 0 ? 1.0f / d : 0;
    int8_t *sc = (int8_t *)(b + 192);
    uint8_t *ql = b, *qh = b + 128;
    memset(b, 0, 192);
    for (int g = 0; g < 16; g++)
        sc[g] = (int8_t)clampi((int)nearbyintf(scale[g] * id), 0, 127);
    for (int i = 0; i < 256; i++) {
        float dl = d * (float)sc[i / 16], idl = dl != 0 ? 1.0f / dl : 0;
        int q = clampi((int)nearbyintf(x[i] * idl), -32, 31) + 32;
        int h = i >> 7, k = i >> 5 & 3, l = i & 31;
        ql[64 * h + 32 * (k & 1) + l] |= (uint8_t)((q & 15) << 4 * (k >> 1));
        qh[32 * h + l] |= (uint8_t)((q >> 4) << 2 * k);
    }
}

void gp_quant_quantize_row(gp_dtype t, const float *src, void *dst, int64_t n)
{
    GP_ASSERT(gp_dtype_is_quant(t));
    int64_t qk = gp_dtype_block(t);
    size_t bb = gp_dtype_block_bytes(t);
    GP_ASSERT(n % qk == 0);
    for (int64_t i = 0; i < n / qk; i++) {
        const float *x = src + i * qk;
        uint8_t *b = (uint8_t *)dst + (size_t)i * bb, q[32];
        switch (t) {
        case GP_Q4_0:
            quant_sym(x, 16, b, q);
            pack_nibbles(q, b + 2);
            break;
        case GP_Q4_1:
            quant_asym(x, 16, b, b + 2, q);
            pack_nibbles(q, b + 4);
            break;
        case GP_Q5_0:
            quant_sym(x, 32, b, q);
            wr32(b + 2, pack_high(q));
            pack_nibbles(q, b + 6);
            break;
        case GP_Q5_1:
            quant_asym(x, 32, b, b + 2, q);
            wr32(b + 4, pack_high(q));
            pack_nibbles(q, b + 8);
            break;
        case GP_Q8_0: {
            float amax = 0;
            for (int l = 0; l < 32; l++)
                amax = fabsf(x[l]) > amax ? fabsf(x[l]) : amax;
            float d = amax / 127, id = d != 0 ? 1.0f / d : 0;
            wr16(b, d);
            for (int l = 0; l < 32; l++)
                b[2 + l] = (uint8_t)(int8_t)round_away(x[l] * id);
            break;
        }
        case GP_Q4_K:
            quant_k45(x, 16, b);
            break;
        case GP_Q5_K:
            quant_k45(x, 32, b);
            break;
        case GP_Q6_K:
            quant_q6k(x, b);
            break;
        default:
            GP_ASSERT(!"not a quantized dtype");
        }
    }
}

/* ---- activations ---- */

size_t gp_quant_act_row_bytes(gp_dtype wt, int64_t K)
{
    GP_ASSERT(gp_dtype_is_quant(wt) && K % gp_dtype_block(wt) == 0);
    if (gp_quant_is_k(wt))
        return (size_t)K + 4 * (size_t)(K / 256) + 2 * (size_t)(K / 16);
    return (size_t)K + 8 * (size_t)(K / 32);
}

/* n values into int8 q = round(x / d) with d = absmax / 127; returns d. Rounding to nearest even
 * by adding and taking off 1.5 * 2^23 (exact for |v| <= 2^22; here |v| <= 127 plus a rounding):
 * nearbyintf's result, in a form the compiler vectorizes without SSE4.1's roundps. */
static float act_block(const float *x, int n, int8_t *q)
{
    float amax = 0;
    for (int i = 0; i < n; i++)
        amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
    float d = amax / 127, id = amax != 0 ? 127 / amax : 0;
    for (int i = 0; i < n; i++) {
        float v = x[i] * id, r = (v + 0x1.8p23f) - 0x1.8p23f;
        r = r > 127 ? 127 : r;
        q[i] = (int8_t)(r >= -127 ? r : -127); /* a NaN (x not finite) gives -127, not UB */
    }
    return d;
}

void gp_quant_act_quantize(gp_dtype wt, const float *x, int64_t m0, int64_t m1, int64_t K,
                           int64_t ldx, void *xq)
{
    size_t ab = gp_quant_act_row_bytes(wt, K);
    GP_ASSERT(((uintptr_t)xq & 3) == 0);
    for (int64_t m = m0; m < m1; m++) {
        uint8_t *row = (uint8_t *)xq + (size_t)m * ab;
        const float *xr = x + m * ldx;
        int8_t *q = (int8_t *)row;
        float *d = (float *)(row + K);
        if (gp_quant_is_k(wt)) {
            int16_t *bsum = (int16_t *)(row + K + 4 * (K / 256));
            for (int64_t b = 0; b < K / 256; b++) {
                d[b] = act_block(xr + 256 * b, 256, q + 256 * b);
                for (int g = 0; g < 16; g++) {
                    int s = 0;
                    for (int l = 0; l < 16; l++)
                        s += q[256 * b + 16 * g + l];
                    bsum[16 * b + g] = (int16_t)s;
                }
            }
        } else {
            float *ds = d + K / 32;
            for (int64_t b = 0; b < K / 32; b++) {
                d[b] = act_block(xr + 32 * b, 32, q + 32 * b);
                int s = 0;
                for (int l = 0; l < 32; l++)
                    s += q[32 * b + l];
                ds[b] = d[b] * (float)s;
            }
        }
    }
}

/* ---- the portable product ---- */

/* The integer q of one 32-block of weights (q4_0 / q5_0 with their offsets taken off, so every
 * type's value is d * q + m), in loops of fixed shape the compiler vectorizes. */
static void unpack32(gp_dtype t, const uint8_t *w, int8_t *q)
{
    switch (t) {
    case GP_Q4_0:
    case GP_Q4_1: {
        const uint8_t *qs = w + (t == GP_Q4_0 ? 2 : 4);
        int off = t == GP_Q4_0 ? 8 : 0;
        for (int i = 0; i < 16; i++) {
            q[i] = (int8_t)((qs[i] & 15) - off);
            q[i + 16] = (int8_t)((qs[i] >> 4) - off);
        }
        break;
    }
    case GP_Q5_0:
    case GP_Q5_1: {
        uint32_t qh = rd32(w + (t == GP_Q5_0 ? 2 : 4));
        const uint8_t *qs = w + (t == GP_Q5_0 ? 6 : 8);
        int off = t == GP_Q5_0 ? 16 : 0;
        for (int i = 0; i < 16; i++) {
            q[i] = (int8_t)(((qs[i] & 15) | (int)(qh >> i & 1) << 4) - off);
            q[i + 16] = (int8_t)(((qs[i] >> 4) | (int)(qh >> (i + 16) & 1) << 4) - off);
        }
        break;
    }
    default:
        memcpy(q, w + 2, 32);
        break;
    }
}

static int idot32(const int8_t *a, const int8_t *b)
{
    int s = 0;
    for (int i = 0; i < 32; i++)
        s += a[i] * b[i];
    return s;
}

/* One weight row . one activation row, in the order every path uses: per block an exact integer
 * dot, scaled in f32 and summed over blocks. */
static float dot_portable(gp_dtype t, const uint8_t *w, const gp_qact *a, int64_t K)
{
    float sum = 0;
    size_t bb = gp_dtype_block_bytes(t);
    int8_t q[32];
    if (!gp_quant_is_k(t)) {
        for (int64_t b = 0; b < K / 32; b++, w += bb) {
            unpack32(t, w, q);
            float m = t == GP_Q4_1 || t == GP_Q5_1 ? rd16(w + 2) : 0;
            sum += rd16(w) * a->d[b] * (float)idot32(q, a->q + 32 * b) + m * a->ds[b];
        }
        return sum;
    }
    for (int64_t b = 0; b < K / 256; b++, w += bb) {
        const int8_t *x = a->q + 256 * b;
        const int16_t *bs = a->bsum + 16 * b;
        if (t == GP_Q6_K) {
            const uint8_t *ql = w, *qh = w + 128;
            const int8_t *sc = (const int8_t *)(w + 192);
            int isum = 0;
            for (int h = 0; h < 2; h++) {
                for (int k = 0; k < 4; k++) { /* elements 128 h + 32 k + l */
                    const uint8_t *lo = ql + 64 * h + 32 * (k & 1), *hi = qh + 32 * h;
                    for (int l = 0; l < 32; l++)
                        q[l] = (int8_t)(((lo[l] >> 4 * (k >> 1) & 15) | (hi[l] >> 2 * k & 3) << 4) - 32);
                    const int8_t *xk = x + 128 * h + 32 * k;
                    int d0 = 0, d1 = 0;
                    for (int l = 0; l < 16; l++) {
                        d0 += q[l] * xk[l];
                        d1 += q[l + 16] * xk[l + 16];
                    }
                    isum += sc[8 * h + 2 * k] * d0 + sc[8 * h + 2 * k + 1] * d1;
                }
            }
            sum += rd16(w + 208) * a->d[b] * (float)isum;
            continue;
        }
        uint8_t sc[8], mn[8];
        gp_quant_k_scales(w + 4, sc, mn);
        const uint8_t *qh = w + 16, *qs = t == GP_Q5_K ? w + 48 : w + 16;
        int isum = 0, imin = 0;
        for (int j = 0; j < 8; j++) {
            const uint8_t *p = qs + 32 * (j >> 1);
            for (int l = 0; l < 32; l++)
                q[l] = (int8_t)((p[l] >> 4 * (j & 1) & 15) | (t == GP_Q5_K ? (qh[l] >> j & 1) << 4 : 0));
            isum += sc[j] * idot32(q, x + 32 * j);
            imin += mn[j] * (bs[2 * j] + bs[2 * j + 1]);
        }
        sum += rd16(w) * a->d[b] * (float)isum - rd16(w + 2) * a->d[b] * (float)imin;
    }
    return sum;
}

static int rows_portable(gp_dtype wt, const uint8_t *w, size_t rb, int64_t n0, int64_t n1,
                         const uint8_t *xq, size_t ab, int R, int64_t K, float *y, int64_t ldy)
{
    for (int r = 0; r < R; r++) {
        gp_qact a = gp_qact_row(wt, xq + (size_t)r * ab, K);
        for (int64_t n = n0; n < n1; n++)
            y[r * ldy + n] = dot_portable(wt, w + (size_t)n * rb, &a, K);
    }
    return 1;
}

/* ---- the selector ---- */

static atomic_int cur_isa = -2; /* -2: not chosen yet */

int gp_quant_isa_supported(int isa)
{
    switch (isa) {
    case GP_QUANT_ISA_PORTABLE:
        return 1;
#if defined(__x86_64__) && defined(__GNUC__)
    case GP_QUANT_ISA_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("f16c");
    case GP_QUANT_ISA_AVX512:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && gp_quant_isa_supported(GP_QUANT_ISA_AVX2);
    case GP_QUANT_ISA_VNNI:
        return __builtin_cpu_supports("avx512vnni") &&
               gp_quant_isa_supported(GP_QUANT_ISA_AVX512);
    case GP_QUANT_ISA_AVXVNNI:
        return __builtin_cpu_supports("avxvnni") && gp_quant_isa_supported(GP_QUANT_ISA_AVX2);
#endif
    default:
        return 0;
    }
}

static int best_isa(void)
{
    static const int order[] = {GP_QUANT_ISA_VNNI, GP_QUANT_ISA_AVX512, GP_QUANT_ISA_AVXVNNI,
                                GP_QUANT_ISA_AVX2};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        if (gp_quant_isa_supported(order[i]))
            return order[i];
    return GP_QUANT_ISA_PORTABLE;
}

int gp_quant_force_isa(int isa)
{
    if (isa == GP_QUANT_ISA_AUTO)
        isa = best_isa();
    else if (!gp_quant_isa_supported(isa))
        return -1;
    atomic_store(&cur_isa, isa);
    return 0;
}

int gp_quant_isa(void)
{
    int isa = atomic_load(&cur_isa);
    if (isa < 0) {
        isa = best_isa();
        atomic_store(&cur_isa, isa);
    }
    return isa;
}

const char *gp_quant_isa_name(int isa)
{
    static const char *names[] = {"portable", "avx2", "avx512", "vnni", "avxvnni"};
    return isa >= 0 && isa < GP_QUANT_ISA_COUNT ? names[isa] : "auto";
}

/* Output rows handled per weight tile: the tile (NT rows) stays in L2 while every group of up to 4
 * activation rows (in L1) passes over it, so weights are read from memory once for all M rows. */
#define TILE_BYTES (128 * 1024)

void gp_quant_matmul(gp_dtype wt, const void *w, int64_t n0, int64_t n1, const void *xq, int64_t M,
                     int64_t K, float *y, int64_t ldy)
{
    GP_ASSERT(gp_dtype_is_quant(wt) && K % gp_dtype_block(wt) == 0 && K > 0);
    size_t rb = gp_dtype_row_bytes(wt, K), ab = gp_quant_act_row_bytes(wt, K);
    gp_quant_rows_fn fn = rows_portable;
#if defined(__x86_64__) && defined(__GNUC__)
    static const gp_quant_rows_fn fns[GP_QUANT_ISA_COUNT] = {
        rows_portable, gp_quant_rows_avx2, gp_quant_rows_avx512, gp_quant_rows_vnni,
        gp_quant_rows_avxvnni};
    fn = fns[gp_quant_isa()];
#endif
    int64_t nt = M == 1 ? n1 - n0 : (int64_t)(TILE_BYTES / rb);
    nt = nt < 1 ? 1 : nt;
    for (int64_t t0 = n0; t0 < n1; t0 += nt) {
        int64_t t1 = t0 + nt < n1 ? t0 + nt : n1;
        for (int64_t m = 0; m < M; m += 4) {
            int R = M - m < 4 ? (int)(M - m) : 4;
            const uint8_t *x = (const uint8_t *)xq + (size_t)m * ab;
            if (!fn(wt, w, rb, t0, t1, x, ab, R, K, y + m * ldy, ldy))
                rows_portable(wt, w, rb, t0, t1, x, ab, R, K, y + m * ldy, ldy);
        }
    }
}
