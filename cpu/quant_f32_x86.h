/* The x86 bodies of gp_quant_matmul_f32 (cpu/quant_f32_internal.h gives the arithmetic), one
 * source for two paths: included by quant_f32_avx2.c (QF_BITS 256) and quant_f32_avx512.c (512),
 * each compiled with its own -m flags. "vf" is 16 f32 lanes: one zmm, or two ymm. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "cpu/quant_f32_internal.h"

#define AI static inline __attribute__((always_inline))

#if QF_BITS == 512
typedef __m512 vf;
typedef __m512i vi;
AI vf vzero(void) { return _mm512_setzero_ps(); }
AI vf vset(float f) { return _mm512_set1_ps(f); }
AI vf vld(const float *p) { return _mm512_loadu_ps(p); }
AI void vst(float *p, vf a) { _mm512_storeu_ps(p, a); }
AI vf vadd(vf a, vf b) { return _mm512_add_ps(a, b); }
AI vf vsub(vf a, vf b) { return _mm512_sub_ps(a, b); }
AI vf vmul(vf a, vf b) { return _mm512_mul_ps(a, b); }
AI vf vfma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
AI vf vfms(vf a, vf b, vf c) { return _mm512_fmsub_ps(a, b, c); }
AI vf vcvt(vi a) { return _mm512_cvtepi32_ps(a); }
/* 16 bytes at p as 16 int32, zero- or sign-extended */
AI vi vu8(const uint8_t *p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128((const void *)p)); }
AI vi vs8(const uint8_t *p) { return _mm512_cvtepi8_epi32(_mm_loadu_si128((const void *)p)); }
AI vi viset(int v) { return _mm512_set1_epi32(v); }
AI vi viand(vi a, int m) { return _mm512_and_si512(a, _mm512_set1_epi32(m)); }
AI vi vior(vi a, vi b) { return _mm512_or_si512(a, b); }
AI vi visub(vi a, int v) { return _mm512_sub_epi32(a, _mm512_set1_epi32(v)); }
AI vi visrl(vi a, int n) { return _mm512_srl_epi32(a, _mm_cvtsi32_si128(n)); }
AI vi visll(vi a, int n) { return _mm512_sll_epi32(a, _mm_cvtsi32_si128(n)); }
/* lane i | 16 where bit i of m is set */
AI vi vibit16(vi a, uint32_t m)
{
    return _mm512_mask_or_epi32(a, (__mmask16)(m & 0xffff), a, _mm512_set1_epi32(16));
}
/* the fixed tree of quant_f32_internal.h over lo + hi */
AI float vred(vf lo, vf hi)
{
    vf v = _mm512_add_ps(lo, hi);
    __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v),
                              _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}
#ifndef QF_DEQ_ONLY
#define QF_NAME gp_qf32_avx512
#endif
/* prompt tiles: MR x NR outputs in registers (2 zmm each: 24 of the 32) */
#define MRP 4
#define NRP 3
#else
typedef struct {
    __m256 a, b;
} vf;
typedef struct {
    __m256i a, b;
} vi;
AI vf vzero(void) { return (vf){_mm256_setzero_ps(), _mm256_setzero_ps()}; }
AI vf vset(float f) { return (vf){_mm256_set1_ps(f), _mm256_set1_ps(f)}; }
AI vf vld(const float *p) { return (vf){_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
AI void vst(float *p, vf a)
{
    _mm256_storeu_ps(p, a.a);
    _mm256_storeu_ps(p + 8, a.b);
}
AI vf vadd(vf a, vf b) { return (vf){_mm256_add_ps(a.a, b.a), _mm256_add_ps(a.b, b.b)}; }
AI vf vsub(vf a, vf b) { return (vf){_mm256_sub_ps(a.a, b.a), _mm256_sub_ps(a.b, b.b)}; }
AI vf vmul(vf a, vf b) { return (vf){_mm256_mul_ps(a.a, b.a), _mm256_mul_ps(a.b, b.b)}; }
AI vf vfma(vf a, vf b, vf c)
{
    return (vf){_mm256_fmadd_ps(a.a, b.a, c.a), _mm256_fmadd_ps(a.b, b.b, c.b)};
}
AI vf vfms(vf a, vf b, vf c)
{
    return (vf){_mm256_fmsub_ps(a.a, b.a, c.a), _mm256_fmsub_ps(a.b, b.b, c.b)};
}
AI vf vcvt(vi a) { return (vf){_mm256_cvtepi32_ps(a.a), _mm256_cvtepi32_ps(a.b)}; }
/* one 16-byte load (8-byte loads of just-stored bytes became a register vmovq that valgrind
 * 3.19 cannot decode) */
AI vi vu8(const uint8_t *p)
{
    __m128i v = _mm_loadu_si128((const void *)p);
    return (vi){_mm256_cvtepu8_epi32(v), _mm256_cvtepu8_epi32(_mm_unpackhi_epi64(v, v))};
}
AI vi vs8(const uint8_t *p)
{
    __m128i v = _mm_loadu_si128((const void *)p);
    return (vi){_mm256_cvtepi8_epi32(v), _mm256_cvtepi8_epi32(_mm_unpackhi_epi64(v, v))};
}
AI vi viset(int v) { return (vi){_mm256_set1_epi32(v), _mm256_set1_epi32(v)}; }
AI vi viand(vi a, int m)
{
    __m256i c = _mm256_set1_epi32(m);
    return (vi){_mm256_and_si256(a.a, c), _mm256_and_si256(a.b, c)};
}
AI vi vior(vi a, vi b) { return (vi){_mm256_or_si256(a.a, b.a), _mm256_or_si256(a.b, b.b)}; }
AI vi visub(vi a, int v)
{
    __m256i c = _mm256_set1_epi32(v);
    return (vi){_mm256_sub_epi32(a.a, c), _mm256_sub_epi32(a.b, c)};
}
AI vi visrl(vi a, int n)
{
    __m128i c = _mm_cvtsi32_si128(n);
    return (vi){_mm256_srl_epi32(a.a, c), _mm256_srl_epi32(a.b, c)};
}
AI vi visll(vi a, int n)
{
    __m128i c = _mm_cvtsi32_si128(n);
    return (vi){_mm256_sll_epi32(a.a, c), _mm256_sll_epi32(a.b, c)};
}
AI __m256i bit8(uint32_t m) /* 16 in lane i where bit i of m is set (i < 8) */
{
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    __m256i v = _mm256_and_si256(_mm256_set1_epi32((int)(m & 255)), bit);
    return _mm256_and_si256(_mm256_cmpeq_epi32(v, bit), _mm256_set1_epi32(16));
}
AI vi vibit16(vi a, uint32_t m)
{
    return (vi){_mm256_or_si256(a.a, bit8(m)), _mm256_or_si256(a.b, bit8(m >> 8))};
}
AI float vred(vf lo, vf hi)
{
    __m256 s8 = _mm256_add_ps(_mm256_add_ps(lo.a, hi.a), _mm256_add_ps(lo.b, hi.b));
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}
#define QF_NAME gp_qf32_avx2
#define MRP 2
#define NRP 1
#endif

/* prompt blocking: NRP weight rows dequantized up to KC columns at a time into wb, a group of at
 * most MG activation rows (sized to stay in L2) swept over them, partial lane sums parked in ab
 * between column chunks when K > KC (36 KiB of stack) */
#define KC 1024
#define MG 64

static float f16(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

static uint32_t ld32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* block bytes and elements (ir/core.h's dtype table); super-block layouts as in cpu/quant.h */
#define BB(t) gp_dtype_bytes_c(t)
#define QK(t) gp_dtype_block_c(t)

/* A block's scales as f32, computed once per block and row: 32-blocks d, m (s[0], o[0]);
 * q4_k / q5_k d sc_j and dmin m_j (s[j], o[j]); q6_k d * scales[i] (s[i]). */
typedef struct {
    float s[16], o[8];
    int8_t qb[256] __attribute__((aligned(64))); /* q6_k: q - 32 of the whole block */
#if QF_BITS == 512
    vf T0, T1; /* q4 / q5 value tables, by q (below) */
#endif
} bctx;

#if QF_BITS != 512
/* q6_k: the 256 q - 32 as bytes in element order, 32 at a time (as the 512-bit q6_bytes) */
AI void q6_bytes(const uint8_t *b, int8_t *qb)
{
    const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(3), o32 = _mm256_set1_epi8(32);
    for (int h = 0; h < 2; h++) {
        __m256i l0 = _mm256_loadu_si256((const void *)(b + 64 * h));
        __m256i l1 = _mm256_loadu_si256((const void *)(b + 64 * h + 32));
        __m256i qh = _mm256_loadu_si256((const void *)(b + 128 + 32 * h));
        __m256i q[4] = {_mm256_and_si256(l0, m4), _mm256_and_si256(l1, m4),
                        _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                        _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4)};
        for (int k = 0; k < 4; k++) {
            __m256i hb = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * k)), m2);
            q[k] = _mm256_or_si256(q[k], _mm256_slli_epi16(hb, 4));
            _mm256_store_si256((void *)(qb + 128 * h + 32 * k), _mm256_sub_epi8(q[k], o32));
        }
    }
}
#endif

#if QF_BITS == 512
/* 0, 1, ..., 15 as f32 */
AI vf iota(void) { return _mm512_cvtepi32_ps(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)); }

/* q6_k: the 256 q - 32 as bytes in element order, 64 at a time (byte ops on 64 lanes are far
 * cheaper than unpacking 16 at a time) */
AI void q6_bytes(const uint8_t *b, int8_t *qb)
{
    const __m512i m4 = _mm512_set1_epi8(15), m2 = _mm512_set1_epi8(3), o32 = _mm512_set1_epi8(32);
    /* qh's 2-bit fields: k = 0, 1 in the low and high 256 bits of A, k = 2, 3 of B */
    const __m512i ca = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
    const __m512i cb = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1);
    for (int h = 0; h < 2; h++) {
        __m512i ql = _mm512_loadu_si512((const void *)(b + 64 * h));
        __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const void *)(b + 128 + 32 * h)));
        __m512i ha = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, ca), m2), 4);
        __m512i hb = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, cb), m2), 4);
        __m512i qa = _mm512_or_si512(_mm512_and_si512(ql, m4), ha);
        __m512i qb4 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), hb);
        _mm512_store_si512((void *)(qb + 128 * h), _mm512_sub_epi8(qa, o32));
        _mm512_store_si512((void *)(qb + 128 * h + 64), _mm512_sub_epi8(qb4, o32));
    }
}
#endif

AI void prep(gp_dtype t, const uint8_t *b, bctx *c)
{
#if QF_BITS == 512
    if (t == GP_Q4_0 || t == GP_Q4_1 || t == GP_Q5_0 || t == GP_Q5_1)
        goto tables; /* only the value tables below */
#endif
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
#if QF_BITS == 512
        /* the 6-bit scales and mins of quant_internal.h's table, all 16 at once: lane j < 8 sc_j,
         * lane 8 + j m_j, from the packed bytes s[0..11] */
        const __m512i ia = _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11);
        const __m512i ib = _mm512_setr_epi32(0, 0, 0, 0, 0, 1, 2, 3, 0, 0, 0, 0, 4, 5, 6, 7);
        const __m512i sh = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4);
        const __m512i mk = _mm512_setr_epi32(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15,
                                             15, 15, 15);
        __m512i B = _mm512_cvtepu8_epi32(_mm_loadu_si128((const void *)(b + 4)));
        __m512i lo = _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutexvar_epi32(ia, B), sh), mk);
        __m512i hi = _mm512_slli_epi32(
            _mm512_srli_epi32(_mm512_maskz_permutexvar_epi32(0xf0f0, ib, B), 6), 4);
        __m512 dm = _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(f16(b)), _mm512_set1_ps(f16(b + 2)));
        __m512 v = _mm512_mul_ps(dm, _mm512_cvtepi32_ps(_mm512_or_si512(lo, hi)));
        _mm256_storeu_ps(c->s, _mm512_castps512_ps256(v));
        _mm256_storeu_ps(c->o, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
        break;
#else
        /* the same 8 + 8 values by 256-bit lanes: bytes gathered by pshufb, then as above */
        __m128i raw = _mm_loadu_si128((const void *)(b + 4));
        const __m256i sh = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4);
        const __m256i mk = _mm256_setr_epi32(63, 63, 63, 63, 15, 15, 15, 15);
        __m256i asc = _mm256_cvtepu8_epi32(_mm_shuffle_epi8(
            raw, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, -1, -1, -1, -1, -1, -1, -1, -1)));
        __m256i amn = _mm256_cvtepu8_epi32(_mm_shuffle_epi8(
            raw, _mm_setr_epi8(4, 5, 6, 7, 8, 9, 10, 11, -1, -1, -1, -1, -1, -1, -1, -1)));
        __m256i qsc = _mm256_cvtepu8_epi32(_mm_shuffle_epi8(
            raw, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, -1, -1, -1, -1)));
        __m256i qmn = _mm256_cvtepu8_epi32(_mm_shuffle_epi8(
            raw, _mm_setr_epi8(-1, -1, -1, -1, 4, 5, 6, 7, -1, -1, -1, -1, -1, -1, -1, -1)));
        __m256i sc = _mm256_or_si256(_mm256_and_si256(asc, mk),
                                     _mm256_slli_epi32(_mm256_srli_epi32(qsc, 6), 4));
        __m256i mn = _mm256_or_si256(_mm256_and_si256(_mm256_srlv_epi32(amn, sh), mk),
                                     _mm256_slli_epi32(_mm256_srli_epi32(qmn, 6), 4));
        _mm256_storeu_ps(c->s, _mm256_mul_ps(_mm256_set1_ps(f16(b)), _mm256_cvtepi32_ps(sc)));
        _mm256_storeu_ps(c->o, _mm256_mul_ps(_mm256_set1_ps(f16(b + 2)), _mm256_cvtepi32_ps(mn)));
        break;
#endif
    }
    default: { /* q6_k */
        /* d times the 16 int8 scales, vectorized (a scalar loop was a third of the work per
         * weight at M = 1) */
        __m128i sc8 = _mm_loadu_si128((const void *)(b + 192));
#if QF_BITS == 512
        _mm512_storeu_ps(c->s, _mm512_mul_ps(_mm512_set1_ps(f16(b + 208)),
                                             _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc8))));
#else
        __m256 d = _mm256_set1_ps(f16(b + 208));
        _mm256_storeu_ps(c->s, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc8))));
        _mm256_storeu_ps(c->s + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                                                         _mm_srli_si128(sc8, 8)))));
#endif
        q6_bytes(b, c->qb);
        break;
    }
    }
#if QF_BITS == 512
tables:;
    /* the 16 (q4) or 32 (q5) values a block can take: each weight is then one permute of its q.
     * d q is exact in f32 (an f16's 11 significant bits times a 5-bit integer), so d q + m rounds
     * once either way and one fused multiply-add gives dequantization's d * q + m bit for bit */
    vf i16 = iota();
    if (t == GP_Q4_0 || t == GP_Q5_0) {
        vf d = _mm512_cvtph_ps(_mm256_set1_epi16((short)(b[0] | b[1] << 8)));
        c->T0 = vmul(d, vsub(i16, vset(t == GP_Q4_0 ? 8 : 16)));
        if (t == GP_Q5_0)
            c->T1 = vmul(d, i16);
    } else if (t == GP_Q4_1 || t == GP_Q5_1) { /* d, m converted together: d m d m ... */
        vf dm = _mm512_cvtph_ps(_mm256_set1_epi32((int)ld32(b)));
        vf d = _mm512_moveldup_ps(dm), m = _mm512_movehdup_ps(dm);
        c->T0 = vfma(d, i16, m);
        if (t == GP_Q5_1)
            c->T1 = vfma(d, vadd(i16, vset(16)), m);
    }
#endif
}

/* Values 32 g .. 32 g + 31 of block b (g < QK / 32), exactly gp_quant_dequantize_row's. */
AI void deq(gp_dtype t, const uint8_t *b, const bctx *c, int g, vf *w0, vf *w1)
{
#if QF_BITS == 512
    /* q - 8 etc. are exact small integers in f32, so the tables hold exactly the values the
     * arithmetic below would give */
    if (t == GP_Q4_0 || t == GP_Q4_1) { /* permutes read only the low 4 bits of an index */
        vi q = vu8(b + (t == GP_Q4_0 ? 2 : 4));
        *w0 = _mm512_permutexvar_ps(q, c->T0);
        *w1 = _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), c->T0);
        return;
    }
    if (t == GP_Q5_0 || t == GP_Q5_1) {
        vi q = vu8(b + (t == GP_Q5_0 ? 6 : 8));
        uint32_t qh = ld32(b + (t == GP_Q5_0 ? 2 : 4));
        vi lo = vibit16(viand(q, 15), qh), hi = vibit16(_mm512_srli_epi32(q, 4), qh >> 16);
        *w0 = _mm512_permutex2var_ps(c->T0, lo, c->T1);
        *w1 = _mm512_permutex2var_ps(c->T0, hi, c->T1);
        return;
    }
    if (t == GP_Q4_K) {
        const uint8_t *qs = b + 16 + 32 * (g >> 1);
        /* d sc_j q and dmin m_j are exact (17 + 4 significant bits): one rounding, as fmsub */
        vf T = _mm512_fmsub_ps(vset(c->s[g]), iota(), vset(c->o[g]));
        vi lo = vu8(qs), hi = vu8(qs + 16);
        if (g & 1) {
            lo = _mm512_srli_epi32(lo, 4);
            hi = _mm512_srli_epi32(hi, 4);
        }
        *w0 = _mm512_permutexvar_ps(lo, T);
        *w1 = _mm512_permutexvar_ps(hi, T);
        return;
    }
    if (t == GP_Q5_K) { /* q's bit 4 from qh[l] >> g picks the second table */
        const uint8_t *qs = b + 48 + 32 * (g >> 1);
        vf T0 = _mm512_fmsub_ps(vset(c->s[g]), iota(), vset(c->o[g]));
        vf T1 = _mm512_fmsub_ps(vset(c->s[g]), vadd(iota(), vset(16)), vset(c->o[g]));
        vi lo = vu8(qs), hi = vu8(qs + 16);
        if (g & 1) {
            lo = _mm512_srli_epi32(lo, 4);
            hi = _mm512_srli_epi32(hi, 4);
        } else {
            lo = viand(lo, 15);
            hi = viand(hi, 15);
        }
        const __m512i bit = _mm512_set1_epi32(1 << g), b16 = _mm512_set1_epi32(16);
        lo = _mm512_mask_or_epi32(lo, _mm512_test_epi32_mask(vu8(b + 16), bit), lo, b16);
        hi = _mm512_mask_or_epi32(hi, _mm512_test_epi32_mask(vu8(b + 32), bit), hi, b16);
        *w0 = _mm512_permutex2var_ps(T0, lo, T1);
        *w1 = _mm512_permutex2var_ps(T0, hi, T1);
        return;
    }
#endif
    switch (t) {
    case GP_Q4_0:
    case GP_Q4_1:
    case GP_Q5_0:
    case GP_Q5_1: {
        const int qs = t == GP_Q4_0 ? 2 : t == GP_Q4_1 ? 4 : t == GP_Q5_0 ? 6 : 8;
        vi q = vu8(b + qs), lo = viand(q, 15), hi = visrl(q, 4);
        if (t == GP_Q5_0 || t == GP_Q5_1) {
            uint32_t qh = ld32(b + (t == GP_Q5_0 ? 2 : 4));
            lo = vibit16(lo, qh);
            hi = vibit16(hi, qh >> 16);
        }
        vf d = vset(c->s[0]);
        if (t == GP_Q4_0 || t == GP_Q5_0) {
            int off = t == GP_Q4_0 ? 8 : 16;
            *w0 = vmul(d, vcvt(visub(lo, off)));
            *w1 = vmul(d, vcvt(visub(hi, off)));
        } else { /* d q exact (see the tables): one fused rounding is dequantization's two */
            vf m = vset(c->o[0]);
            *w0 = vfma(d, vcvt(lo), m);
            *w1 = vfma(d, vcvt(hi), m);
        }
        break;
    }
    case GP_Q8_0: {
        vf d = vset(c->s[0]);
        *w0 = vmul(vcvt(vs8(b + 2)), d);
        *w1 = vmul(vcvt(vs8(b + 18)), d);
        break;
    }
    case GP_Q4_K:
    case GP_Q5_K: {
        const uint8_t *qs = b + (t == GP_Q5_K ? 48 : 16) + 32 * (g >> 1);
        vi lo = viand(visrl(vu8(qs), 4 * (g & 1)), 15);
        vi hi = viand(visrl(vu8(qs + 16), 4 * (g & 1)), 15);
        if (t == GP_Q5_K) {
            lo = vior(lo, visll(viand(visrl(vu8(b + 16), g), 1), 4));
            hi = vior(hi, visll(viand(visrl(vu8(b + 32), g), 1), 4));
        }
        vf d = vset(c->s[g]), m = vset(c->o[g]); /* d sc_j q exact: fmsub rounds as d q - m */
        *w0 = vfms(d, vcvt(lo), m);
        *w1 = vfms(d, vcvt(hi), m);
        break;
    }
    default: /* q6_k, from the bytes prep unpacked */
        *w0 = vmul(vset(c->s[2 * g]), vcvt(vs8((const uint8_t *)c->qb + 32 * g)));
        *w1 = vmul(vset(c->s[2 * g + 1]), vcvt(vs8((const uint8_t *)c->qb + 32 * g + 16)));
        break;
    }
}

#ifndef QF_DEQ_ONLY /* quant_amx.c takes only prep and deq */

/* ---- decode: each weight row streamed once for all MR (<= 4) activation rows ---- */

#define MAXM 4
#define MAXR 4
#ifndef QF_PF
#define QF_PF 16 /* rows ahead to prefetch */
#endif

/* outputs n .. n + NR - 1 of rows 0 .. MR - 1 */
AI void dec_tile(gp_dtype t, const uint8_t *w, size_t rb, int64_t n, int NR, const float *x,
                 int64_t ldx, int MR, int64_t K, float *y, int64_t ldy)
{
    vf acc[MAXM][MAXR][2];
    for (int m = 0; m < MR; m++)
        for (int r = 0; r < NR; r++)
            acc[m][r][0] = acc[m][r][1] = vzero();
    const int64_t ns = K / QK(t);
    const size_t pfo = (6144 / rb < 4 ? 4 : 6144 / rb + 1) * rb;
    const uint8_t *row[MAXR];
    for (int r = 0; r < NR; r++)
        row[r] = w + (size_t)(n + r) * rb;
    for (int64_t s = 0; s < ns; s++) {
        bctx c[MAXR];
        for (int r = 0; r < NR; r++) {
            /* the same place some 6 KiB of rows on, the distance that measured best
             * (bench/quant-notes.md); prefetches never fault, past the matrix they are only
             * wasted */
            const char *pf = (const char *)row[r] + pfo + (size_t)s * BB(t);
            for (int l = 0; l < BB(t); l += 64)
                _mm_prefetch(pf + l, _MM_HINT_T0);
            prep(t, row[r] + (size_t)s * BB(t), &c[r]);
        }
        for (int g = 0; g < QK(t) / 32; g++) {
            vf w0[MAXR], w1[MAXR];
            for (int r = 0; r < NR; r++)
                deq(t, row[r] + (size_t)s * BB(t), &c[r], g, &w0[r], &w1[r]);
            const int64_t k = s * QK(t) + 32 * g;
            for (int m = 0; m < MR; m++) {
                vf x0 = vld(x + m * ldx + k), x1 = vld(x + m * ldx + k + 16);
                for (int r = 0; r < NR; r++) {
                    acc[m][r][0] = vfma(x0, w0[r], acc[m][r][0]);
                    acc[m][r][1] = vfma(x1, w1[r], acc[m][r][1]);
                }
            }
        }
    }
    for (int m = 0; m < MR; m++)
        for (int r = 0; r < NR; r++)
            y[m * ldy + n + r] = vred(acc[m][r][0], acc[m][r][1]);
}

/* rows per tile: 4 keep the FMA chains of M = 1 apart; 2 leave registers for M = 2..4 */
AI void dec_rows(gp_dtype t, const uint8_t *w, size_t rb, int64_t n0, int64_t n1, const float *x,
                 int64_t ldx, int MR, int64_t K, float *y, int64_t ldy)
{
    const int R = MR == 1 ? 4 : 2;
    int64_t n = n0;
    for (; n + R <= n1; n += R)
        dec_tile(t, w, rb, n, R, x, ldx, MR, K, y, ldy);
    for (; n < n1; n++)
        dec_tile(t, w, rb, n, 1, x, ldx, MR, K, y, ldy);
}

static void dec_all(gp_dtype t, const uint8_t *w, int64_t n0, int64_t n1, const float *x,
                    int64_t ldx, int MR, int64_t K, float *y, int64_t ldy)
{
    size_t rb = gp_dtype_row_bytes(t, K);
#define QF_DEC(T)                                                                              \
    case T:                                                                                    \
        switch (MR) {                                                                          \
        case 1: dec_rows(T, w, rb, n0, n1, x, ldx, 1, K, y, ldy); break;                       \
        case 2: dec_rows(T, w, rb, n0, n1, x, ldx, 2, K, y, ldy); break;                       \
        case 3: dec_rows(T, w, rb, n0, n1, x, ldx, 3, K, y, ldy); break;                       \
        default: dec_rows(T, w, rb, n0, n1, x, ldx, 4, K, y, ldy); break;                      \
        }                                                                                      \
        break;
    switch (t) {
        QF_DEC(GP_Q4_0)
        QF_DEC(GP_Q4_1)
        QF_DEC(GP_Q5_0)
        QF_DEC(GP_Q5_1)
        QF_DEC(GP_Q8_0)
        QF_DEC(GP_Q4_K)
        QF_DEC(GP_Q5_K)
        QF_DEC(GP_Q6_K)
    default:
        GP_ASSERT(!"not a quantized dtype");
    }
#undef QF_DEC
}

/* ---- prompt: dequantized weight tiles, an f32 register-blocked kernel over them ---- */

/* rows n .. n + nt - 1, columns k0 .. k0 + kc - 1 into wb[r * KC + k - k0] */
AI void deq_tile(gp_dtype t, const uint8_t *w, size_t rb, int64_t n, int nt, int64_t k0,
                 int64_t kc, float *wb)
{
    for (int r = 0; r < nt; r++) {
        const uint8_t *row = w + (size_t)(n + r) * rb;
        for (int64_t s = k0 / QK(t); s < (k0 + kc) / QK(t); s++) {
            const uint8_t *b = row + (size_t)s * BB(t);
            bctx c;
            prep(t, b, &c);
            for (int g = 0; g < QK(t) / 32; g++) {
                vf w0, w1;
                deq(t, b, &c, g, &w0, &w1);
                float *o = wb + r * KC + (s * QK(t) + 32 * g - k0);
                vst(o, w0);
                vst(o + 16, w1);
            }
        }
    }
}

static void deq_tile_any(gp_dtype t, const uint8_t *w, size_t rb, int64_t n, int nt, int64_t k0,
                         int64_t kc, float *wb)
{
#define QF_DEQ(T, ...)                                                                             \
    case T:                                                                                    \
        deq_tile(T, w, rb, n, nt, k0, kc, wb);                                                 \
        break;
    switch (t) {
        GP_QUANT_DTYPES(QF_DEQ)
    default:
        GP_ASSERT(!"not a quantized dtype");
    }
#undef QF_DEQ
}

/* MR x NR outputs over kc columns: x [MR rows at ldx], wb [NR rows at KC], lane sums in ab
 * (output (m, r) at ab + m * abs + 32 r) unless first (start from 0) / last (reduce into y). */
AI void micro(int MR, int NR, const float *x, int64_t ldx, const float *wb, int64_t kc, float *ab,
              int64_t abs, int first, int last, float *y, int64_t ldy)
{
    vf acc[MRP][NRP][2];
    for (int m = 0; m < MR; m++)
        for (int r = 0; r < NR; r++) {
            acc[m][r][0] = first ? vzero() : vld(ab + m * abs + 32 * r);
            acc[m][r][1] = first ? vzero() : vld(ab + m * abs + 32 * r + 16);
        }
    for (int64_t j = 0; j < kc; j += 32) {
        for (int h = 0; h < 2; h++) {
            vf xv[MRP];
            for (int m = 0; m < MR; m++)
                xv[m] = vld(x + m * ldx + j + 16 * h);
            for (int r = 0; r < NR; r++) {
                vf wv = vld(wb + r * KC + j + 16 * h);
                for (int m = 0; m < MR; m++)
                    acc[m][r][h] = vfma(xv[m], wv, acc[m][r][h]);
            }
        }
    }
    for (int m = 0; m < MR; m++)
        for (int r = 0; r < NR; r++) {
            if (last) {
                y[m * ldy + r] = vred(acc[m][r][0], acc[m][r][1]);
            } else {
                vst(ab + m * abs + 32 * r, acc[m][r][0]);
                vst(ab + m * abs + 32 * r + 16, acc[m][r][1]);
            }
        }
}

static void micro_any(int MR, int NR, const float *x, int64_t ldx, const float *wb, int64_t kc,
                      float *ab, int64_t abs, int first, int last, float *y, int64_t ldy)
{
#define QF_MI(A, B)                                                                            \
    if (MR == A && NR == B) {                                                                  \
        micro(A, B, x, ldx, wb, kc, ab, abs, first, last, y, ldy);                             \
        return;                                                                                \
    }
#if MRP == 4 && NRP == 3
    QF_MI(4, 3) QF_MI(4, 2) QF_MI(4, 1) QF_MI(3, 3) QF_MI(3, 2) QF_MI(3, 1)
    QF_MI(2, 3) QF_MI(2, 2) QF_MI(2, 1) QF_MI(1, 3) QF_MI(1, 2) QF_MI(1, 1)
#else
    QF_MI(2, 1) QF_MI(1, 1)
#endif
#undef QF_MI
    GP_ASSERT(!"micro tile out of range");
}

static void prompt_all(gp_dtype t, const uint8_t *w, int64_t n0, int64_t n1, const float *x,
                       int64_t ldx, int64_t M, int64_t K, float *y, int64_t ldy)
{
    size_t rb = gp_dtype_row_bytes(t, K);
    float wb[NRP * KC] __attribute__((aligned(64))); /* [NRP][KC] */
    float ab[MG * NRP * 32] __attribute__((aligned(64))); /* [MG][NRP][32] lane sums */
    /* rows of x per group: about 512 KiB of them, a multiple of MRP */
    int64_t mgr = (512 << 10) / (4 * K);
    int mgmax = mgr >= MG ? MG : mgr < MRP ? MRP : (int)(mgr / MRP * MRP);
    for (int64_t m0 = 0; m0 < M; m0 += mgmax) {
        int mg = M - m0 < mgmax ? (int)(M - m0) : mgmax;
        for (int64_t n = n0; n < n1; n += NRP) {
            int nt = n1 - n < NRP ? (int)(n1 - n) : NRP;
            for (int64_t k0 = 0; k0 < K; k0 += KC) {
                int64_t kc = K - k0 < KC ? K - k0 : KC;
                deq_tile_any(t, w, rb, n, nt, k0, kc, wb);
                for (int mi = 0; mi < mg; mi += MRP) {
                    int mr = mg - mi < MRP ? mg - mi : MRP;
                    micro_any(mr, nt, x + (m0 + mi) * ldx + k0, ldx, wb, kc, ab + mi * NRP * 32,
                              NRP * 32, k0 == 0, k0 + kc == K, y + (m0 + mi) * ldy + n, ldy);
                }
            }
        }
    }
}

void QF_NAME(gp_dtype wt, const uint8_t *w, int64_t n0, int64_t n1, const float *x, int64_t ldx,
             int64_t M, int64_t K, float *y, int64_t ldy)
{
    if (M <= MAXM)
        dec_all(wt, w, n0, n1, x, ldx, (int)M, K, y, ldy);
    else
        prompt_all(wt, w, n0, n1, x, ldx, M, K, y, ldy);
}
#endif
