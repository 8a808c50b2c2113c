/* The x86 product kernels of runtime/quant.c, one body for three paths: included by quant_avx2.c
 * (QV_BITS 256), quant_avxvnni.c (256, QV_VNNI 1: AVX-VNNI's 256-bit dpbusd, for cores with it but
 * no AVX-512), quant_avx512.c (512) and quant_vnni.c (512, QV_VNNI 1), each compiled with its
 * own -m flags. Weights are unpacked to bytes once per activation group (up to 4 rows) and dotted
 * with the int8 activations: unsigned weights x signed activations (maddubs + madd, or dpbusd),
 * offsets (q - 8, q - 16, q - 32) and mins applied through the activations' block sums. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "runtime/quant_internal.h"

#define AI static inline __attribute__((always_inline))

#if QV_BITS == 512
typedef __m512i vi;
typedef __m512 vf;
#define VLEN 64
#define vzero() _mm512_setzero_si512()
#define vzerof() _mm512_setzero_ps()
#define vand(a, b) _mm512_and_si512(a, b)
#define vor(a, b) _mm512_or_si512(a, b)
#define vadd32(a, b) _mm512_add_epi32(a, b)
#define vmul32(a, b) _mm512_mullo_epi32(a, b)
#define vset8(c) _mm512_set1_epi8((char)(c))
#define vsrl16(a, n) _mm512_srli_epi16(a, n)
#define vsll16(a, n) _mm512_slli_epi16(a, n)
#define vloadu(p) _mm512_loadu_si512((const void *)(p))
#define vcvt(a) _mm512_cvtepi32_ps(a)
#define vfma(a, b, c) _mm512_fmadd_ps(a, b, c)
#define vsetf(x) _mm512_set1_ps(x)
#define vhsum(a) _mm512_reduce_add_ps(a)
#define vaddf(a, b) _mm512_add_ps(a, b)
#else
typedef __m256i vi;
typedef __m256 vf;
#define VLEN 32
#define vzero() _mm256_setzero_si256()
#define vzerof() _mm256_setzero_ps()
#define vand(a, b) _mm256_and_si256(a, b)
#define vor(a, b) _mm256_or_si256(a, b)
#define vadd32(a, b) _mm256_add_epi32(a, b)
#define vmul32(a, b) _mm256_mullo_epi32(a, b)
#define vset8(c) _mm256_set1_epi8((char)(c))
#define vsrl16(a, n) _mm256_srli_epi16(a, n)
#define vsll16(a, n) _mm256_slli_epi16(a, n)
#define vloadu(p) _mm256_loadu_si256((const void *)(p))
#define vcvt(a) _mm256_cvtepi32_ps(a)
#define vfma(a, b, c) _mm256_fmadd_ps(a, b, c)
#define vsetf(x) _mm256_set1_ps(x)
#define vaddf(a, b) _mm256_add_ps(a, b)
#endif

static float hsum256(__m256 a)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
#if QV_BITS != 512
#define vhsum(a) hsum256(a)
#endif

static float f16(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

static int ld16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

static uint32_t ld32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* acc + the sums of 4 products u8 u * s8 s per 32-bit lane (no saturation: u <= 128 or
 * u <= 63 with |s| <= 127, so a pair stays below 2^15). */
AI vi dot_us(vi acc, vi u, vi s)
{
#if QV_BITS == 512 && QV_VNNI
    return _mm512_dpbusd_epi32(acc, u, s);
#elif QV_VNNI
    return _mm256_dpbusd_avx_epi32(acc, u, s);
#elif QV_BITS == 512
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)));
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

/* q8_0: signed weights. VNNI reads them as w + 128 (the offset comes off through the block sums);
 * maddubs instead takes |w| and moves w's sign onto the activation. */
#if QV_VNNI
#define Q8_OFF 128
AI vi dot_ss(vi acc, vi w, vi s)
{
#if QV_BITS == 512
    return dot_us(acc, _mm512_xor_si512(w, vset8(0x80)), s);
#else
    return dot_us(acc, _mm256_xor_si256(w, vset8(0x80)), s);
#endif
}
#elif QV_BITS == 512
#define Q8_OFF 0
AI vi dot_ss(vi acc, vi w, vi s)
{
    __mmask64 neg = _mm512_movepi8_mask(w);
    return dot_us(acc, _mm512_abs_epi8(w), _mm512_mask_sub_epi8(s, neg, _mm512_setzero_si512(), s));
}
#else
#define Q8_OFF 0
AI vi dot_ss(vi acc, vi w, vi s)
{
    return dot_us(acc, _mm256_sign_epi8(w, w), _mm256_sign_epi8(s, w));
}
#endif

#if QV_BITS != 512
/* Bit i of m as byte i: 0x10 when set, else 0. */
AI __m256i bits_to_bytes(uint32_t m)
{
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2,
                                          2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201ll);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)m), shuf);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}
#endif

/* ---- 32-element blocks ---- */

/* Block layout facts: bytes, where qs starts, where qh starts (0: none), has a min. */
#define BB(t) (t == GP_Q4_0 ? 18 : t == GP_Q4_1 ? 20 : t == GP_Q5_0 ? 22 : t == GP_Q5_1 ? 24 : 34)
#define QS(t) (t == GP_Q4_0 ? 2 : t == GP_Q4_1 ? 4 : t == GP_Q5_0 ? 6 : t == GP_Q5_1 ? 8 : 2)
#define QH(t) (t == GP_Q5_0 ? 2 : t == GP_Q5_1 ? 4 : 0)
#define HASMIN(t) (t == GP_Q4_1 || t == GP_Q5_1)
#define OFF(t) (t == GP_Q4_0 ? 8 : t == GP_Q5_0 ? 16 : t == GP_Q8_0 ? Q8_OFF : 0)

/* The weights of VLEN / 32 consecutive blocks from b as bytes (unsigned q; q8_0 signed). */
AI vi load_w32(gp_dtype t, const uint8_t *b)
{
#if QV_BITS == 512
    if (t == GP_Q8_0)
        return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const void *)(b + 2))),
                                  _mm256_loadu_si256((const void *)(b + BB(t) + 2)), 1);
    __m256i q = _mm256_set_m128i(_mm_loadu_si128((const void *)(b + BB(t) + QS(t))),
                                 _mm_loadu_si128((const void *)(b + QS(t))));
    __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1);
    z = _mm512_and_si512(_mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0)), vset8(15));
    if (QH(t)) {
        uint64_t m = ld32(b + QH(t)) | (uint64_t)ld32(b + BB(t) + QH(t)) << 32;
        z = _mm512_or_si512(z, _mm512_maskz_mov_epi8(m, vset8(0x10)));
    }
    return z;
#else
    if (t == GP_Q8_0)
        return _mm256_loadu_si256((const void *)(b + 2));
    __m128i q = _mm_loadu_si128((const void *)(b + QS(t)));
    __m256i z = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), vset8(15));
    if (QH(t))
        z = _mm256_or_si256(z, bits_to_bytes(ld32(b + QH(t))));
    return z;
#endif
}

/* One 32-block by plain C (the odd last block of the 512-bit path): the same integer dot. */
static int dot_block_c(gp_dtype t, const uint8_t *b, const int8_t *x)
{
    int dot = 0;
    uint32_t qh = QH(t) ? ld32(b + QH(t)) : 0;
    for (int i = 0; i < 32; i++) {
        int q;
        if (t == GP_Q8_0)
            q = (int8_t)b[2 + i] + Q8_OFF;
        else
            q = (b[QS(t) + (i & 15)] >> (i >> 4 << 2) & 15) | (int)(qh >> i & 1) << 4;
        dot += q * x[i];
    }
    return dot;
}

/* One step of VLEN / 32 blocks from block b into acc (the scaled dots) and cacc / corr (the
 * offsets' and mins' corrections), for the R activation rows: the blocks after the last whole
 * step32x4 (two on the 512-bit paths, then maybe one by dot_block_c; one to three on AVX2). */
AI void step32(gp_dtype t, const uint8_t *wr, int64_t b, const gp_qact *a, int R, vf *acc,
               __m128 *cacc, float *corr)
{
    const uint8_t *blk = wr + (size_t)b * BB(t);
    vi u = load_w32(t, blk);
#if QV_BITS == 512
    /* Both blocks' factors in one 128-bit vector, wf = [dw0, dw1, cw0, cw1] with cw = m - OFF dw,
     * times [dx0, dx1, ds0, ds1]: lanes 0, 1 spread over the blocks' 8 lanes each scale the dots,
     * lanes 2, 3 are the corrections, summed in cacc (its lanes 0, 1 are not used). */
    __m128i h = _mm_insert_epi16(_mm_cvtsi32_si128(ld16(blk)), ld16(blk + BB(t)), 1);
    if (HASMIN(t))
        h = _mm_insert_epi16(_mm_insert_epi16(h, ld16(blk + 2), 2), ld16(blk + BB(t) + 2), 3);
    __m128 wf = _mm_cvtph_ps(h);
    if (!HASMIN(t))
        wf = _mm_movelh_ps(wf, _mm_mul_ps(wf, _mm_set1_ps(-(float)OFF(t))));
    const __m512i is = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    (void)corr;
    for (int r = 0; r < R; r++) {
        vi x = vloadu(a[r].q + 32 * b);
        vi p = t == GP_Q8_0 ? dot_ss(vzero(), u, x) : dot_us(vzero(), u, x);
        __m128 xf = _mm_castsi128_ps(_mm_unpacklo_epi64(_mm_loadl_epi64((const void *)(a[r].d + b)),
                                                        _mm_loadl_epi64((const void *)(a[r].ds + b))));
        __m128 f = _mm_mul_ps(wf, xf);
        acc[r] = vfma(vcvt(p), _mm512_permutexvar_ps(is, _mm512_castps128_ps512(f)), acc[r]);
        cacc[r] = _mm_add_ps(cacc[r], f);
    }
#else
    float dw0 = f16(blk), cw0 = (HASMIN(t) ? f16(blk + 2) : 0) - (float)OFF(t) * dw0;
    (void)cacc;
    for (int r = 0; r < R; r++) {
        vi x = vloadu(a[r].q + 32 * b);
        vi p = t == GP_Q8_0 ? dot_ss(vzero(), u, x) : dot_us(vzero(), u, x);
        corr[r] += cw0 * a[r].ds[b];
        acc[r] = vfma(vcvt(p), vsetf(dw0 * a[r].d[b]), acc[r]);
    }
#endif
}

/* The scales of four blocks from blk: wd = their d, wc = their corrections' factor m - OFF d. */
AI void scales4(gp_dtype t, const uint8_t *blk, __m128 *wd, __m128 *wc)
{
    if (HASMIN(t)) { /* d and m are adjacent: one u32 a block, then d0..d3 and m0..m3 apart */
        __m128i h = _mm_cvtsi32_si128((int)ld32(blk));
        h = _mm_insert_epi32(h, (int)ld32(blk + BB(t)), 1);
        h = _mm_insert_epi32(h, (int)ld32(blk + 2 * BB(t)), 2);
        h = _mm_insert_epi32(h, (int)ld32(blk + 3 * BB(t)), 3);
        __m256 w8 = _mm256_permutevar8x32_ps(_mm256_cvtph_ps(h), _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
        *wd = _mm256_castps256_ps128(w8);
        *wc = _mm256_extractf128_ps(w8, 1);
    } else {
        __m128i h = _mm_cvtsi32_si128(ld16(blk));
        h = _mm_insert_epi16(h, ld16(blk + BB(t)), 1);
        h = _mm_insert_epi16(h, ld16(blk + 2 * BB(t)), 2);
        h = _mm_insert_epi16(h, ld16(blk + 3 * BB(t)), 3);
        *wd = _mm_cvtph_ps(h);
        *wc = _mm_mul_ps(*wd, _mm_set1_ps(-(float)OFF(t)));
    }
}

/* Four blocks from b: their scales in one 128-bit vector each (times the activations' d and ds),
 * spread over each block's 8 lanes by permutes; the corrections summed 4 lanes wide in cacc. */
AI void step32x4(gp_dtype t, const uint8_t *wr, int64_t b, const gp_qact *a, int R, vf *acc0,
                 vf *acc1, __m128 *cacc)
{
    const uint8_t *blk = wr + (size_t)b * BB(t);
    __m128 wd, wc;
    scales4(t, blk, &wd, &wc);
#if QV_BITS == 512
    vi u0 = load_w32(t, blk), u1 = load_w32(t, blk + 2 * BB(t));
    const __m512i i01 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m512i i23 = _mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    for (int r = 0; r < R; r++) {
        vi x0 = vloadu(a[r].q + 32 * b), x1 = vloadu(a[r].q + 32 * b + 64);
        vi p0 = t == GP_Q8_0 ? dot_ss(vzero(), u0, x0) : dot_us(vzero(), u0, x0);
        vi p1 = t == GP_Q8_0 ? dot_ss(vzero(), u1, x1) : dot_us(vzero(), u1, x1);
        __m512 f = _mm512_castps128_ps512(_mm_mul_ps(wd, _mm_loadu_ps(a[r].d + b)));
        acc0[r] = vfma(vcvt(p0), _mm512_permutexvar_ps(i01, f), acc0[r]);
        acc1[r] = vfma(vcvt(p1), _mm512_permutexvar_ps(i23, f), acc1[r]);
        cacc[r] = _mm_fmadd_ps(wc, _mm_loadu_ps(a[r].ds + b), cacc[r]);
    }
#else
    vi u[4];
    for (int i = 0; i < 4; i++)
        u[i] = load_w32(t, blk + i * BB(t));
    for (int r = 0; r < R; r++) {
        __m128 f4 = _mm_mul_ps(wd, _mm_loadu_ps(a[r].d + b));
        __m256 f = _mm256_set_m128(f4, f4);
        for (int i = 0; i < 4; i++) {
            vi x = vloadu(a[r].q + 32 * (b + i));
            vi p = t == GP_Q8_0 ? dot_ss(vzero(), u[i], x) : dot_us(vzero(), u[i], x);
            vf s = _mm256_permutevar8x32_ps(f, _mm256_set1_epi32(i));
            if (i & 1)
                acc1[r] = vfma(vcvt(p), s, acc1[r]);
            else
                acc0[r] = vfma(vcvt(p), s, acc0[r]);
        }
        cacc[r] = _mm_fmadd_ps(wc, _mm_loadu_ps(a[r].ds + b), cacc[r]);
    }
#endif
}

AI void rows32(gp_dtype t, const uint8_t *w, size_t rb, int64_t n0, int64_t n1, const uint8_t *xq,
               size_t ab, int R, int64_t K, float *y, int64_t ldy)
{
    const int64_t S = VLEN / 32, nb = K / 32, nbv = nb - nb % S;
    gp_qact a[4];
    for (int r = 0; r < R; r++)
        a[r] = gp_qact_row(t, xq + (size_t)r * ab, K);
    for (int64_t n = n0; n < n1; n++) {
        const uint8_t *wr = w + (size_t)n * rb;
        /* acc0, acc1: a step's two halves, two dependency chains */
        vf acc0[4], acc1[4];
        __m128 cacc0[4], cacc1[4];
        float corr[4];
        for (int r = 0; r < R; r++) {
            acc0[r] = acc1[r] = vzerof();
            cacc0[r] = cacc1[r] = _mm_setzero_ps();
            corr[r] = 0;
        }
        int64_t b = 0;
        for (; b + 4 <= nbv; b += 4) /* cacc0: 4 lanes of corrections; cacc1: lanes 2, 3 */
            step32x4(t, wr, b, a, R, acc0, acc1, cacc0);
        for (; b < nbv; b += S)
            step32(t, wr, b, a, R, acc0, cacc1, corr);
        for (int r = 0; r < R; r++) {
            float sum = vhsum(vaddf(acc0[r], acc1[r])) + corr[r];
            __m128 c0 = cacc0[r];
            c0 = _mm_add_ps(c0, _mm_movehl_ps(c0, c0));
            sum += _mm_cvtss_f32(_mm_add_ss(c0, _mm_shuffle_ps(c0, c0, 1)));
#if QV_BITS == 512
            __m128 c1 = cacc1[r];
            sum += _mm_cvtss_f32(_mm_add_ss(_mm_movehl_ps(c1, c1), _mm_shuffle_ps(c1, c1, 3)));
#endif
            for (int64_t i = nbv; i < nb; i++) {
                const uint8_t *blk = wr + (size_t)i * BB(t);
                float dw = f16(blk), cw = (HASMIN(t) ? f16(blk + 2) : 0) - (float)OFF(t) * dw;
                sum += dw * a[r].d[i] * (float)dot_block_c(t, blk, a[r].q + 32 * i) +
                       cw * a[r].ds[i];
            }
            y[r * ldy + n] = sum;
        }
    }
}

/* ---- k-quants: super-blocks of 256 ---- */

/* The 16 int16 [m0, m0, m1, m1, ..., m7, m7]: madd with the 16 block sums gives m_j * sum_j. */
AI __m256i mins_x2(uint64_t mn)
{
    __m128i v = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)mn));
    return _mm256_set_m128i(_mm_unpackhi_epi16(v, v), _mm_unpacklo_epi16(v, v));
}

AI void rows_k45(gp_dtype t, const uint8_t *w, size_t rb, int64_t n0, int64_t n1,
                 const uint8_t *xq, size_t ab, int R, int64_t K, float *y, int64_t ldy)
{
    const int64_t nb = K / 256;
    const size_t bb = t == GP_Q5_K ? 176 : 144;
    gp_qact a[4];
    for (int r = 0; r < R; r++)
        a[r] = gp_qact_row(t, xq + (size_t)r * ab, K);
    for (int64_t n = n0; n < n1; n++) {
        const uint8_t *wr = w + (size_t)n * rb;
        vf acc[4];
        __m256 accm[4];
        for (int r = 0; r < R; r++) {
            acc[r] = vzerof();
            accm[r] = _mm256_setzero_ps();
        }
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *blk = wr + (size_t)b * bb;
            const uint8_t *qs = blk + (t == GP_Q5_K ? 48 : 16);
            uint64_t sc, mn;
            gp_quant_k_scales64(blk + 4, &sc, &mn);
            float d = f16(blk), dmin = f16(blk + 2);
            vi isum[4];
            for (int r = 0; r < R; r++)
                isum[r] = vzero();
#if QV_BITS == 512
            __m512i qh = t == GP_Q5_K ? _mm512_broadcast_i64x4(_mm256_loadu_si256((const void *)(blk + 16)))
                                      : _mm512_setzero_si512();
            const __m512i scv = _mm512_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc)); /* sc_j, lane j */
            for (int c = 0; c < 4; c++) {
                __m256i q = _mm256_loadu_si256((const void *)(qs + 32 * c));
                __m512i u = _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1);
                u = _mm512_and_si512(u, vset8(15));
                if (t == GP_Q5_K) {
                    __m512i sel = _mm512_mask_blend_epi8(0xffffffff00000000ull, vset8(1 << 2 * c),
                                                         vset8(1 << (2 * c + 1)));
                    u = _mm512_or_si512(u, _mm512_maskz_mov_epi8(_mm512_test_epi8_mask(qh, sel),
                                                                 vset8(0x10)));
                }
                __m512i sv = _mm512_permutexvar_epi32(
                    _mm512_mask_blend_epi32(0xff00, _mm512_set1_epi32(2 * c), _mm512_set1_epi32(2 * c + 1)), scv);
                for (int r = 0; r < R; r++)
                    isum[r] = vadd32(isum[r], vmul32(dot_us(vzero(), u, vloadu(a[r].q + 256 * b + 64 * c)), sv));
            }
#else
            __m256i qh = t == GP_Q5_K ? _mm256_loadu_si256((const void *)(blk + 16)) : vzero();
            for (int c = 0; c < 8; c++) {
                __m256i q = _mm256_loadu_si256((const void *)(qs + 32 * (c >> 1)));
                __m256i u = vand(c & 1 ? vsrl16(q, 4) : q, vset8(15));
                if (t == GP_Q5_K) {
                    __m256i bit = vset8(1 << c);
                    u = vor(u, vand(_mm256_cmpeq_epi8(vand(qh, bit), bit), vset8(0x10)));
                }
                __m256i sv = _mm256_set1_epi32((int)(sc >> 8 * c & 255));
                for (int r = 0; r < R; r++)
                    isum[r] = vadd32(isum[r], vmul32(dot_us(vzero(), u, vloadu(a[r].q + 256 * b + 32 * c)), sv));
            }
#endif
            __m256i m2 = mins_x2(mn);
            for (int r = 0; r < R; r++) {
                float dx = a[r].d[b];
                __m256i imin = _mm256_madd_epi16(m2, _mm256_loadu_si256((const void *)(a[r].bsum + 16 * b)));
                acc[r] = vfma(vcvt(isum[r]), vsetf(d * dx), acc[r]);
                accm[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(imin), _mm256_set1_ps(dmin * dx), accm[r]);
            }
        }
        for (int r = 0; r < R; r++)
            y[r * ldy + n] = vhsum(acc[r]) - hsum256(accm[r]);
    }
}

AI void rows_q6k(const uint8_t *w, size_t rb, int64_t n0, int64_t n1, const uint8_t *xq, size_t ab,
                 int R, int64_t K, float *y, int64_t ldy)
{
    const int64_t nb = K / 256;
    gp_qact a[4];
    for (int r = 0; r < R; r++)
        a[r] = gp_qact_row(GP_Q6_K, xq + (size_t)r * ab, K);
    for (int64_t n = n0; n < n1; n++) {
        const uint8_t *wr = w + (size_t)n * rb;
        vf acc[4];
        for (int r = 0; r < R; r++)
            acc[r] = vzerof();
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *blk = wr + (size_t)b * 210, *ql = blk, *qh = blk + 128;
            __m128i sc8 = _mm_loadu_si128((const void *)(blk + 192));
            float d = f16(blk + 208);
            vi isum[4];
            for (int r = 0; r < R; r++)
                isum[r] = vzero();
#if QV_BITS == 512
            const __m512i s32 = _mm512_cvtepi8_epi32(sc8); /* the 16 scales */
            for (int h = 0; h < 2; h++) {
                __m512i z = _mm512_loadu_si512((const void *)(ql + 64 * h));
                __m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const void *)(qh + 32 * h)));
                __m512i u[2];
                u[0] = vor(vand(z, vset8(15)),
                           vsll16(vand(_mm512_srlv_epi64(hb, _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0)), vset8(3)), 4));
                u[1] = vor(vand(vsrl16(z, 4), vset8(15)),
                           vsll16(vand(_mm512_srlv_epi64(hb, _mm512_set_epi64(6, 6, 6, 6, 4, 4, 4, 4)), vset8(3)), 4));
                for (int c = 0; c < 2; c++) {
                    int g = 8 * h + 4 * c; /* the 16-groups g..g+3 */
                    __m512i idx = _mm512_set_epi32(g + 3, g + 3, g + 3, g + 3, g + 2, g + 2, g + 2, g + 2,
                                                   g + 1, g + 1, g + 1, g + 1, g, g, g, g);
                    __m512i sv = _mm512_permutexvar_epi32(idx, s32);
                    for (int r = 0; r < R; r++)
                        isum[r] = vadd32(isum[r], vmul32(dot_us(vzero(), u[c], vloadu(a[r].q + 256 * b + 128 * h + 64 * c)), sv));
                }
            }
#else
            const __m256i s32[2] = {_mm256_cvtepi8_epi32(sc8), _mm256_cvtepi8_epi32(_mm_srli_si128(sc8, 8))};
            for (int h = 0; h < 2; h++) {
                __m256i ql0 = vloadu(ql + 64 * h), ql1 = vloadu(ql + 64 * h + 32), hv = vloadu(qh + 32 * h);
                for (int k = 0; k < 4; k++) {
                    __m256i lo = k & 1 ? ql1 : ql0;
                    __m256i u = vor(vand(k >> 1 ? vsrl16(lo, 4) : lo, vset8(15)),
                                    vsll16(vand(vsrl16(hv, 2 * k), vset8(3)), 4));
                    int g = 8 * h + 2 * k; /* the 16-groups g, g + 1 */
                    __m256i idx = _mm256_setr_epi32(g & 7, g & 7, g & 7, g & 7, (g + 1) & 7, (g + 1) & 7,
                                                    (g + 1) & 7, (g + 1) & 7);
                    __m256i sv = _mm256_permutevar8x32_epi32(s32[g >> 3], idx);
                    for (int r = 0; r < R; r++)
                        isum[r] = vadd32(isum[r], vmul32(dot_us(vzero(), u, vloadu(a[r].q + 256 * b + 128 * h + 32 * k)), sv));
                }
            }
#endif
            __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
            for (int r = 0; r < R; r++) {
                /* q - 32: take 32 * sum_g sc_g * bsum_g off the lanes */
                __m256i off = _mm256_slli_epi32(
                    _mm256_madd_epi16(sc16, _mm256_loadu_si256((const void *)(a[r].bsum + 16 * b))), 5);
#if QV_BITS == 512
                isum[r] = _mm512_sub_epi32(isum[r], _mm512_inserti64x4(_mm512_setzero_si512(), off, 0));
#else
                isum[r] = _mm256_sub_epi32(isum[r], off);
#endif
                acc[r] = vfma(vcvt(isum[r]), vsetf(d * a[r].d[b]), acc[r]);
            }
        }
        for (int r = 0; r < R; r++)
            y[r * ldy + n] = vhsum(acc[r]);
    }
}

/* Specializes the kernels on the type and on R (so the per-row loops over r unroll). */
#define FOR_R(call)                         \
    switch (R) {                            \
    case 1: { const int R_ = 1; call; break; } \
    case 2: { const int R_ = 2; call; break; } \
    case 3: { const int R_ = 3; call; break; } \
    default: { const int R_ = 4; call; break; } \
    }

int QV_NAME(gp_dtype wt, const uint8_t *w, size_t rb, int64_t n0, int64_t n1, const uint8_t *xq,
            size_t ab, int R, int64_t K, float *y, int64_t ldy)
{
    switch (wt) {
    case GP_Q4_0: FOR_R(rows32(GP_Q4_0, w, rb, n0, n1, xq, ab, R_, K, y, ldy)); return 1;
    case GP_Q4_1: FOR_R(rows32(GP_Q4_1, w, rb, n0, n1, xq, ab, R_, K, y, ldy)); return 1;
    case GP_Q5_0: FOR_R(rows32(GP_Q5_0, w, rb, n0, n1, xq, ab, R_, K, y, ldy)); return 1;
    case GP_Q5_1: FOR_R(rows32(GP_Q5_1, w, rb, n0, n1, xq, ab, R_, K, y, ldy)); return 1;
    case GP_Q8_0: FOR_R(rows32(GP_Q8_0, w, rb, n0, n1, xq, ab, R_, K, y, ldy)); return 1;
    case GP_Q4_K: FOR_R(rows_k45(GP_Q4_K, w, rb, n0, n1, xq, ab, R_, K, y, ldy)); return 1;
    case GP_Q5_K: FOR_R(rows_k45(GP_Q5_K, w, rb, n0, n1, xq, ab, R_, K, y, ldy)); return 1;
    case GP_Q6_K: FOR_R(rows_q6k(w, rb, n0, n1, xq, ab, R_, K, y, ldy)); return 1;
    default: return 0;
    }
}
