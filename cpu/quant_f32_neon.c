/* gp_quant_matmul_f32's aarch64 path in NEON (the arithmetic of cpu/quant_f32_internal.h: the
 * same bits as the x86 SIMD paths): blocks dequantized in registers to exactly
 * gp_quant_dequantize_row's values, 32 lane sums an output (eight q registers) of fused
 * multiply-adds, the fixed tree. Decode streams each weight row once for all rows of x; prompts
 * dequantize tiles of rows and sweep a register-blocked kernel over them. */
#include <arm_neon.h>
#include <stdint.h>
#include <string.h>

#include "cpu/quant.h"
#include "cpu/quant_f32_internal.h"
#include "cpu/quant_internal.h"

#define AI static inline __attribute__((always_inline))

/* a little-endian binary16 as f32 (exact) */
AI float f16(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}

/* 16 signed bytes as 4 x 4 f32 (exact) */
AI void cvt16(int8x16_t v, float32x4_t *o)
{
    int16x8_t a = vmovl_s8(vget_low_s8(v)), b = vmovl_high_s8(v);
    o[0] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(a)));
    o[1] = vcvtq_f32_s32(vmovl_high_s16(a));
    o[2] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(b)));
    o[3] = vcvtq_f32_s32(vmovl_high_s16(b));
}

/* 16 in byte i where bit i of m (16 bits) is set */
AI uint8x16_t bit16(uint32_t m)
{
    static const uint8_t bits[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    uint8x16_t v = vcombine_u8(vdup_n_u8((uint8_t)m), vdup_n_u8((uint8_t)(m >> 8)));
    return vandq_u8(vtstq_u8(v, vld1q_u8(bits)), vdupq_n_u8(16));
}

/* The fixed tree of quant_f32_internal.h over 32 lanes (lane 4 i + j in l[i], lane j). */
AI float red32(const float32x4_t *l)
{
    float32x4_t a0 = vaddq_f32(l[0], l[4]), a1 = vaddq_f32(l[1], l[5]); /* s16 */
    float32x4_t a2 = vaddq_f32(l[2], l[6]), a3 = vaddq_f32(l[3], l[7]);
    float32x4_t s4 = vaddq_f32(vaddq_f32(a0, a2), vaddq_f32(a1, a3)); /* s8, then s4 */
    return vpadds_f32(vadd_f32(vget_low_f32(s4), vget_high_f32(s4)));
}

#define BB(t) gp_dtype_bytes_c(t)
#define QK(t) gp_dtype_block_c(t)

/* A block's scales as f32, once per block and row: 32-blocks d, m (s[0], o[0]); q4_k / q5_k
 * d sc_j and dmin m_j (s[j], o[j]); q6_k d * scales[i] (s[i]) and its q - 32 as bytes. */
typedef struct {
    float s[16], o[8];
    int8_t qb[256] __attribute__((aligned(16)));
} bctx;

AI void prep(gp_dtype t, const uint8_t *b, bctx *c)
{
    switch (t) {
    case GP_Q4_0:
    case GP_Q5_0:
    case GP_Q8_0:
        c->s[0] = f16(b);
        break;
    case GP_Q4_1:
    case GP_Q5_1:
        c->s[0] = f16(b);
        c->o[0] = f16(b + 2);
        break;
    case GP_Q4_K:
    case GP_Q5_K: {
        uint8_t sc[8], mn[8];
        float d = f16(b), dmin = f16(b + 2);
        gp_quant_k_scales(b + 4, sc, mn);
        for (int j = 0; j < 8; j++) {
            c->s[j] = d * (float)sc[j];
            c->o[j] = dmin * (float)mn[j];
        }
        break;
    }
    default: { /* q6_k: q - 32 in element order (cpu/quant.h's layout), 16 at a time */
        float d = f16(b + 208);
        for (int i = 0; i < 16; i++)
            c->s[i] = d * (float)(int8_t)b[192 + i];
        const uint8x16_t m4 = vdupq_n_u8(15), m2 = vdupq_n_u8(3);
        for (int h = 0; h < 2; h++)
            for (int k = 0; k < 4; k++)
                for (int l = 0; l < 32; l += 16) {
                    uint8x16_t lo = vld1q_u8(b + 64 * h + 32 * (k & 1) + l);
                    uint8x16_t hi = vld1q_u8(b + 128 + 32 * h + l);
                    lo = k >> 1 ? vshrq_n_u8(lo, 4) : vandq_u8(lo, m4);
                    hi = vandq_u8(vshlq_u8(hi, vdupq_n_s8((int8_t)(-2 * k))), m2);
                    uint8x16_t q = vorrq_u8(lo, vshlq_n_u8(hi, 4));
                    vst1q_s8(c->qb + 128 * h + 32 * k + l,
                             vsubq_s8(vreinterpretq_s8_u8(q), vdupq_n_s8(32)));
                }
        break;
    }
    }
}

/* Values 32 g .. 32 g + 31 of block b into w[0..7] (element 32 g + 4 i + j in w[i], lane j),
 * exactly gp_quant_dequantize_row's: d q, d sc_j q and dmin m_j are exact in f32 (an f16's 11
 * significant bits times at most 6 bits), so each value rounds once, where dequantization rounds
 * it: the add or subtract of the offset (q4_1, q5_1, q4_k, q5_k), the product (q8_0, q6_k). */
AI void deq(gp_dtype t, const uint8_t *b, const bctx *c, int g, float32x4_t *w)
{
    switch (t) {
    case GP_Q4_0:
    case GP_Q4_1:
    case GP_Q5_0:
    case GP_Q5_1: {
        const int qs = t == GP_Q4_0 ? 2 : t == GP_Q4_1 ? 4 : t == GP_Q5_0 ? 6 : 8;
        uint8x16_t q = vld1q_u8(b + qs);
        uint8x16_t lo = vandq_u8(q, vdupq_n_u8(15)), hi = vshrq_n_u8(q, 4);
        if (t == GP_Q5_0 || t == GP_Q5_1) {
            uint32_t qh;
            memcpy(&qh, b + (t == GP_Q5_0 ? 2 : 4), 4);
            lo = vorrq_u8(lo, bit16(qh));
            hi = vorrq_u8(hi, bit16(qh >> 16));
        }
        int8x16_t l8 = vreinterpretq_s8_u8(lo), h8 = vreinterpretq_s8_u8(hi);
        if (t == GP_Q4_0 || t == GP_Q5_0) {
            int8x16_t off = vdupq_n_s8(t == GP_Q4_0 ? 8 : 16);
            l8 = vsubq_s8(l8, off);
            h8 = vsubq_s8(h8, off);
        }
        cvt16(l8, w);
        cvt16(h8, w + 4);
        float32x4_t d = vdupq_n_f32(c->s[0]);
        for (int i = 0; i < 8; i++)
            w[i] = vmulq_f32(d, w[i]);
        if (t == GP_Q4_1 || t == GP_Q5_1) {
            float32x4_t m = vdupq_n_f32(c->o[0]);
            for (int i = 0; i < 8; i++)
                w[i] = vaddq_f32(w[i], m);
        }
        break;
    }
    case GP_Q8_0: {
        cvt16(vld1q_s8((const int8_t *)(b + 2)), w);
        cvt16(vld1q_s8((const int8_t *)(b + 18)), w + 4);
        float32x4_t d = vdupq_n_f32(c->s[0]);
        for (int i = 0; i < 8; i++)
            w[i] = vmulq_f32(w[i], d);
        break;
    }
    case GP_Q4_K:
    case GP_Q5_K: {
        const uint8_t *qs = b + (t == GP_Q5_K ? 48 : 16) + 32 * (g >> 1);
        for (int h = 0; h < 2; h++) {
            uint8x16_t q = vld1q_u8(qs + 16 * h);
            q = g & 1 ? vshrq_n_u8(q, 4) : vandq_u8(q, vdupq_n_u8(15));
            if (t == GP_Q5_K) {
                uint8x16_t hb = vtstq_u8(vld1q_u8(b + 16 + 16 * h), vdupq_n_u8((uint8_t)(1u << g)));
                q = vorrq_u8(q, vandq_u8(hb, vdupq_n_u8(16)));
            }
            cvt16(vreinterpretq_s8_u8(q), w + 4 * h);
        }
        float32x4_t d = vdupq_n_f32(c->s[g]), m = vdupq_n_f32(c->o[g]);
        for (int i = 0; i < 8; i++)
            w[i] = vsubq_f32(vmulq_f32(d, w[i]), m);
        break;
    }
    default: { /* q6_k */
        cvt16(vld1q_s8(c->qb + 32 * g), w);
        cvt16(vld1q_s8(c->qb + 32 * g + 16), w + 4);
        float32x4_t s0 = vdupq_n_f32(c->s[2 * g]), s1 = vdupq_n_f32(c->s[2 * g + 1]);
        for (int i = 0; i < 4; i++) {
            w[i] = vmulq_f32(s0, w[i]);
            w[i + 4] = vmulq_f32(s1, w[i + 4]);
        }
        break;
    }
    }
}

/* ---- decode: each weight row streamed once for all MR (<= 4) rows of x ---- */

#define MAXM 4

/* outputs n .. n + NR - 1 (NR <= 2) of rows 0 .. MR - 1 */
AI void dec_tile(gp_dtype t, const uint8_t *w, size_t rb, int64_t n, int NR, const float *x,
                 int64_t ldx, int MR, int64_t K, float *y, int64_t ldy)
{
    float32x4_t acc[MAXM][2][8];
    for (int m = 0; m < MR; m++)
        for (int r = 0; r < NR; r++)
            for (int i = 0; i < 8; i++)
                acc[m][r][i] = vdupq_n_f32(0.0f);
    const int64_t ns = K / QK(t);
    /* the same place some 6 KiB of rows on, as the x86 paths (bench/quant-notes.md) */
    const size_t pfo = (6144 / rb < 4 ? 4 : 6144 / rb + 1) * rb;
    for (int64_t s = 0; s < ns; s++) {
        bctx c[2];
        for (int r = 0; r < NR; r++) {
            const uint8_t *blk = w + (size_t)(n + r) * rb + (size_t)s * BB(t);
            for (int l = 0; l < BB(t); l += 64)
                __builtin_prefetch(blk + pfo + l);
            prep(t, blk, &c[r]);
        }
        for (int g = 0; g < QK(t) / 32; g++) {
            const int64_t k = s * QK(t) + 32 * g;
            for (int r = 0; r < NR; r++) {
                float32x4_t wv[8];
                deq(t, w + (size_t)(n + r) * rb + (size_t)s * BB(t), &c[r], g, wv);
                for (int m = 0; m < MR; m++)
                    for (int i = 0; i < 8; i++)
                        acc[m][r][i] = vfmaq_f32(acc[m][r][i], vld1q_f32(x + m * ldx + k + 4 * i), wv[i]);
            }
        }
    }
    for (int m = 0; m < MR; m++)
        for (int r = 0; r < NR; r++)
            y[m * ldy + n + r] = red32(acc[m][r]);
}

/* two weight rows a tile for one row of x (16 accumulators), one for more */
AI void dec_rows(gp_dtype t, const uint8_t *w, size_t rb, int64_t n0, int64_t n1, const float *x,
                 int64_t ldx, int MR, int64_t K, float *y, int64_t ldy)
{
    int64_t n = n0;
    if (MR == 1)
        for (; n + 2 <= n1; n += 2)
            dec_tile(t, w, rb, n, 2, x, ldx, 1, K, y, ldy);
    for (; n < n1; n++)
        dec_tile(t, w, rb, n, 1, x, ldx, MR, K, y, ldy);
}

static void dec_all(gp_dtype t, const uint8_t *w, int64_t n0, int64_t n1, const float *x,
                    int64_t ldx, int MR, int64_t K, float *y, int64_t ldy)
{
    size_t rb = gp_dtype_row_bytes(t, K);
#define QF_DEC(T, ...)                                                                         \
    case T:                                                                                    \
        switch (MR) {                                                                          \
        case 1: dec_rows(T, w, rb, n0, n1, x, ldx, 1, K, y, ldy); break;                       \
        case 2: dec_rows(T, w, rb, n0, n1, x, ldx, 2, K, y, ldy); break;                       \
        case 3: dec_rows(T, w, rb, n0, n1, x, ldx, 3, K, y, ldy); break;                       \
        default: dec_rows(T, w, rb, n0, n1, x, ldx, 4, K, y, ldy); break;                      \
        }                                                                                      \
        break;
    switch (t) {
        GP_QUANT_DTYPES(QF_DEC)
    default:
        GP_ASSERT(!"not a quantized dtype");
    }
#undef QF_DEC
}

/* ---- prompt: dequantized weight rows, an f32 register-blocked kernel over them ----
 * A weight row dequantized up to KC columns at a time into wb, a group of at most MG rows of x
 * (sized to stay in L2) swept over it MRP rows at a time (3 outputs: 24 accumulators), partial
 * lane sums parked in ab between column chunks when K > KC. */
#define KC 1024
#define MG 63
#define MRP 3

/* row n, columns k0 .. k0 + kc - 1 into wb[k - k0] */
AI void deq_row(gp_dtype t, const uint8_t *row, int64_t k0, int64_t kc, float *wb)
{
    for (int64_t s = k0 / QK(t); s < (k0 + kc) / QK(t); s++) {
        const uint8_t *b = row + (size_t)s * BB(t);
        bctx c;
        prep(t, b, &c);
        for (int g = 0; g < QK(t) / 32; g++) {
            float32x4_t wv[8];
            deq(t, b, &c, g, wv);
            float *o = wb + (s * QK(t) + 32 * g - k0);
            for (int i = 0; i < 8; i++)
                vst1q_f32(o + 4 * i, wv[i]);
        }
    }
}

static void deq_row_any(gp_dtype t, const uint8_t *row, int64_t k0, int64_t kc, float *wb)
{
#define QF_DEQ(T, ...)                                                                         \
    case T:                                                                                    \
        deq_row(T, row, k0, kc, wb);                                                           \
        break;
    switch (t) {
        GP_QUANT_DTYPES(QF_DEQ)
    default:
        GP_ASSERT(!"not a quantized dtype");
    }
#undef QF_DEQ
}

/* MR outputs of one weight row over kc columns: x [MR rows at ldx], wb, lane sums in ab (row m's
 * at ab + 32 m) unless first (start from 0) / last (reduce into y[m * ldy]). */
AI void micro(int MR, const float *x, int64_t ldx, const float *wb, int64_t kc, float *ab,
              int first, int last, float *y, int64_t ldy)
{
    float32x4_t acc[MRP][8];
    for (int m = 0; m < MR; m++)
        for (int i = 0; i < 8; i++)
            acc[m][i] = first ? vdupq_n_f32(0.0f) : vld1q_f32(ab + 32 * m + 4 * i);
    for (int64_t j = 0; j < kc; j += 32)
        for (int i = 0; i < 8; i++) {
            float32x4_t wv = vld1q_f32(wb + j + 4 * i);
            for (int m = 0; m < MR; m++)
                acc[m][i] = vfmaq_f32(acc[m][i], vld1q_f32(x + m * ldx + j + 4 * i), wv);
        }
    for (int m = 0; m < MR; m++) {
        if (last) {
            y[m * ldy] = red32(acc[m]);
        } else {
            for (int i = 0; i < 8; i++)
                vst1q_f32(ab + 32 * m + 4 * i, acc[m][i]);
        }
    }
}

static void prompt_all(gp_dtype t, const uint8_t *w, int64_t n0, int64_t n1, const float *x,
                       int64_t ldx, int64_t M, int64_t K, float *y, int64_t ldy)
{
    size_t rb = gp_dtype_row_bytes(t, K);
    float wb[KC] __attribute__((aligned(64)));
    float ab[MG * 32] __attribute__((aligned(64))); /* [MG][32] lane sums */
    /* rows of x per group: about 512 KiB of them, a multiple of MRP */
    int64_t mgr = (512 << 10) / (4 * K);
    int mgmax = mgr >= MG ? MG : mgr < MRP ? MRP : (int)(mgr / MRP * MRP);
    for (int64_t m0 = 0; m0 < M; m0 += mgmax) {
        int mg = M - m0 < mgmax ? (int)(M - m0) : mgmax;
        for (int64_t n = n0; n < n1; n++) {
            for (int64_t k0 = 0; k0 < K; k0 += KC) {
                int64_t kc = K - k0 < KC ? K - k0 : KC;
                deq_row_any(t, w + (size_t)n * rb, k0, kc, wb);
                for (int mi = 0; mi < mg; mi += MRP) {
                    int mr = mg - mi < MRP ? mg - mi : MRP;
                    const float *xm = x + (m0 + mi) * ldx + k0;
                    float *ym = y + (m0 + mi) * ldy + n, *am = ab + 32 * mi;
                    int first = k0 == 0, last = k0 + kc == K;
                    if (mr == 3)
                        micro(3, xm, ldx, wb, kc, am, first, last, ym, ldy);
                    else if (mr == 2)
                        micro(2, xm, ldx, wb, kc, am, first, last, ym, ldy);
                    else
                        micro(1, xm, ldx, wb, kc, am, first, last, ym, ldy);
                }
            }
        }
    }
}

void gp_qf32_neon(gp_dtype wt, const uint8_t *w, int64_t n0, int64_t n1, const float *x,
                  int64_t ldx, int64_t M, int64_t K, float *y, int64_t ldy)
{
    if (M <= MAXM)
        dec_all(wt, w, n0, n1, x, ldx, (int)M, K, y, ldy);
    else
        prompt_all(wt, w, n0, n1, x, ldx, M, K, y, ldy);
}
