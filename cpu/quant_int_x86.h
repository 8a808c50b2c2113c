/* gp_quant_matmul_ws's integer path (processors without AMX), one source for three variants, each
 * compiled with its own -m flags and named by QI_PATH (cpu/quant_f32_internal.h's gp_qint_path):
 * quant_int_avx512.c (QI_BITS 512: AVX-512 VNNI, vpdpbusd on zmm), quant_int_avxvnni.c (256:
 * AVX-VNNI, vpdpbusd on ymm) and quant_int_avx2.c (256, QI_MADDUBS: vpmaddubsw + vpmaddwd). Every
 * block format, as w = d (q - zero) + m per group of 32 (q6_k: d sc (q - 32) per group of 16),
 * for M > GP_QUANT_WS_MIN_M rows:
 *
 *   prep: each row of x quantized once per product in blocks of 32 (the weights' blocks) to two
 *         8-bit parts: d = max |x| / 127, hi = round(x / d), lo = round((x - d hi) 254 / d), both
 *         in [-127, 127] (maddubs' bounds below rely on it), so x = d (hi + lo / 254) within
 *         d / 508; with the block's sums of hi and lo (int, and
 *         those of its first 16 for q6_k) and of x (f32, in a fixed order);
 *   cols: 32 columns a tile, their blocks unpacked to bytes laid out "lanes over columns" (lane c
 *         of a vector: column c's 4 bytes at k, k + 1, k + 2, k + 3), so that one vpdpbusd against
 *         x's 4 bytes broadcast adds 4 products to each column of the vector; a block's integer
 *         dots (hi's, lo's / 254) then scale by the column's d times the row's d (q4_1: plus the
 *         column's m times the row block's sum of x). q6_k: each group of 16's integer dot, less
 *         32 times x's sum over the group, times the group's int8 scale, the two added in int32:
 *         |sc (q - 32) x| <= 128 * 32 * 127 over 32 elements is below 2^24, so the block's dot
 *         converts to f32 exactly, and then scales by d d_x as the other formats' do.
 *
 * The error against the f32 path is x's quantization alone (the weights' integers are exact): per
 * block |x - d (hi + lo / 254)| <= d / 508, so |y - y_f32| <= sum over blocks of (d_x / 508) sum |w|
 * over the block, plus f32 rounding (tests/test_quant_f32.c checks that bound). One 8-bit part
 * would be 254 times that: past the real models' parity with transformers (SmolLM2 Q4_1's logits
 * 8e-2 off, 1e-3 allowed). Rows and columns are independent and K is walked in the same order for
 * every split: 1 and 2 threads give the same bits. The three variants compute the same integers
 * (maddubs' int16 sums never saturate, below) and the same f32 operations in the same order: they
 * give the same bits as each other. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "cpu/quant.h"
#include "cpu/quant_f32_internal.h"
#include "cpu/quant_internal.h"
#include "ir/f16.h"

#define AI static inline __attribute__((always_inline))
#ifndef QI_MADDUBS
#define QI_MADDUBS 0
#endif

enum { BLK = 32, NT = 32, KB = 16 }; /* a block; columns a tile; blocks a tile holds of K */

/* The wrappers both widths share, one definition each: MM(op) is _mm512_op or _mm256_op, MMI(op)
 * _mm512_op_si512 or _mm256_op_si256. */
#if QI_BITS == 512
#define MM(op) _mm512_##op
#define MMI(op) _mm512_##op##_si512
enum { NL = 16, NV = 2 }; /* int32 lanes a vector; vectors of columns a micro kernel's */
enum { MR_PLAIN = 4, MR_G16 = 2 }; /* rows a micro kernel's (q6_k's holds twice the sums) */
typedef __m512i vi;
typedef __m512 vf;
typedef __mmask16 vm;
#else
#define MM(op) _mm256_##op
#define MMI(op) _mm256_##op##_si256
enum { NL = 8, NV = 1 };
#if QI_MADDUBS
enum { MR_PLAIN = 2, MR_G16 = 2 }; /* 16 ymm registers: the int16 partial sums take room */
#else
enum { MR_PLAIN = 4, MR_G16 = 2 };
#endif
typedef __m256i vi;
typedef __m256 vf;
typedef __m256i vm;
#endif
AI vi vi_zero(void) { return MMI(setzero)(); }
AI vi vi_set(int a) { return MM(set1_epi32)(a); }
AI vi vi_ld(const void *p) { return MMI(loadu)((const vi *)p); }
AI void vi_st(void *p, vi a) { MMI(storeu)((vi *)p, a); }
AI vi vi_and(vi a, vi b) { return MMI(and)(a, b); }
AI vi vi_or(vi a, vi b) { return MMI(or)(a, b); }
AI vi vi_xor(vi a, vi b) { return MMI(xor)(a, b); }
AI vi vi_add(vi a, vi b) { return MM(add_epi32)(a, b); }
AI vi vi_sub(vi a, vi b) { return MM(sub_epi32)(a, b); }
AI vi vi_mul(vi a, vi b) { return MM(mullo_epi32)(a, b); }
AI vi vi_max(vi a, vi b) { return MM(max_epi32)(a, b); }
AI vi vi_srl(vi a, int n) { return MM(srl_epi32)(a, _mm_cvtsi32_si128(n)); }
AI vi vi_sll(vi a, int n) { return MM(sll_epi32)(a, _mm_cvtsi32_si128(n)); }
AI vi vi_sra(vi a, int n) { return MM(sra_epi32)(a, _mm_cvtsi32_si128(n)); }
AI vf vf_zero(void) { return MM(setzero_ps)(); }
AI vf vf_set(float a) { return MM(set1_ps)(a); }
AI vf vf_ld(const float *p) { return MM(loadu_ps)(p); }
AI void vf_st(float *p, vf a) { MM(storeu_ps)(p, a); }
AI vf vf_add(vf a, vf b) { return MM(add_ps)(a, b); }
AI vf vf_mul(vf a, vf b) { return MM(mul_ps)(a, b); }
AI vf vf_fma(vf a, vf b, vf c) { return MM(fmadd_ps)(a, b, c); }
AI vf vf_fnma(vf a, vf b, vf c) { return MM(fnmadd_ps)(a, b, c); }
AI vf vf_cvt(vi a) { return MM(cvtepi32_ps)(a); }
AI vi vf_round(vf a) { return MM(cvtps_epi32)(a); } /* nearest, ties to even */
AI vf vf_max(vf a, vf b) { return MM(max_ps)(a, b); }

/* What differs between the widths. */
#if QI_BITS == 512
AI vi vi_iota(void) { return _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }
/* o[i]: the sum of the lanes of a, b, c, e (i = 0 .. 3), the four in one tree */
AI void vi_sum4(vi a, vi b, vi c, vi e, int32_t *o)
{
    vi ab = _mm512_add_epi32(_mm512_shuffle_i64x2(a, b, 0x44), _mm512_shuffle_i64x2(a, b, 0xee));
    vi ce = _mm512_add_epi32(_mm512_shuffle_i64x2(c, e, 0x44), _mm512_shuffle_i64x2(c, e, 0xee));
    vi s = _mm512_add_epi32(_mm512_shuffle_i64x2(ab, ce, 0x88), _mm512_shuffle_i64x2(ab, ce, 0xdd));
    s = _mm512_add_epi32(s, _mm512_shuffle_epi32(s, (_MM_PERM_ENUM)0x4e));
    s = _mm512_add_epi32(s, _mm512_shuffle_epi32(s, (_MM_PERM_ENUM)0xb1));
    s = _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), s);
    _mm_storeu_si128((__m128i *)o, _mm512_castsi512_si128(s));
}
/* the first n lanes (n <= 0: none) */
AI vm vm_first(int n) { return n >= 16 ? 0xffff : n > 0 ? (__mmask16)((1u << n) - 1) : 0; }
/* 4 bytes at base + each lane's offset, where the mask is set (elsewhere 0, nothing read) */
AI vi vi_gather(vm k, vi off, const uint8_t *base)
{
    return _mm512_mask_i32gather_epi32(vi_zero(), k, off, (const void *)base, 1);
}
AI vf vf_ldm(vm k, const float *p) { return _mm512_maskz_loadu_ps(k, p); }
AI void vf_stm(float *p, vm k, vf a) { _mm512_mask_storeu_ps(p, k, a); }
AI vf vf_abs(vf a) { return _mm512_abs_ps(a); }
AI float vf_hmax(vf a) { return _mm512_reduce_max_ps(a); }
/* each lane's low 16 bits as binary16 */
AI vf vf_f16(vi a) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(a)); }
/* s16[i] = v[0][i] + v[1][i] (x[i] + x[16 + i]), then halves added down to one */
AI float vf_sum32(const vf *v)
{
    __m512 s16 = _mm512_add_ps(v[0], v[1]);
    __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(s16),
                              _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s16), 1)));
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}
/* 32 lanes (v[0] then v[1]), each in [-127, 127], as 32 bytes */
AI void vi_st_bytes(int8_t *q, const vi *v)
{
    _mm_storeu_si128((__m128i *)q, _mm512_cvtsepi32_epi8(v[0]));
    _mm_storeu_si128((__m128i *)(q + 16), _mm512_cvtsepi32_epi8(v[1]));
}
#else
AI vi vi_iota(void) { return _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7); }
AI void vi_sum4(vi a, vi b, vi c, vi e, int32_t *o)
{
    vi s = _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, e));
    _mm_storeu_si128((__m128i *)o, _mm_add_epi32(_mm256_castsi256_si128(s),
                                                 _mm256_extracti128_si256(s, 1)));
}
AI vm vm_first(int n) { return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), vi_iota()); }
AI vi vi_gather(vm k, vi off, const uint8_t *base)
{
    return _mm256_mask_i32gather_epi32(vi_zero(), (const int *)(const void *)base, off, k, 1);
}
AI vf vf_ldm(vm k, const float *p) { return _mm256_maskload_ps(p, k); }
AI void vf_stm(float *p, vm k, vf a) { _mm256_maskstore_ps(p, k, a); }
AI vf vf_abs(vf a) { return _mm256_and_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff))); }
AI float vf_hmax(vf a)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(s, _mm_shuffle_ps(s, s, 1)));
}
AI vf vf_f16(vi a)
{
    __m256i p = _mm256_packus_epi32(_mm256_and_si256(a, _mm256_set1_epi32(0xffff)), vi_zero());
    p = _mm256_permute4x64_epi64(p, 0x08); /* lanes 0-3, then 4-7, in the low 128 bits */
    return _mm256_cvtph_ps(_mm256_castsi256_si128(p));
}
/* the tree of the 512-bit variant: s16's halves are v[0] + v[2] and v[1] + v[3] */
AI float vf_sum32(const vf *v)
{
    __m256 s8 = _mm256_add_ps(_mm256_add_ps(v[0], v[2]), _mm256_add_ps(v[1], v[3]));
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}
AI void vi_st_bytes(int8_t *q, const vi *v)
{
    /* packs work within 128-bit halves: bytes come out as dwords 0 4 1 5 2 6 3 7 */
    __m256i a = _mm256_packs_epi32(v[0], v[1]), b = _mm256_packs_epi32(v[2], v[3]);
    __m256i c = _mm256_packs_epi16(a, b);
    c = _mm256_permutevar8x32_epi32(c, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)q, c);
}
#endif

enum { NX = BLK / NL }; /* vectors a block of x */

/* The workspace (gp_qint_ws_bytes): [M][K / 32][2][32] int8 (each block's hi, then lo), then
 * [M][K / 32] each of f32 d, int32 sums of hi and of lo, f32 sum of x, int32 sums of hi and of lo
 * over the block's first 16. */
typedef struct {
    int8_t *q;
    float *d, *fsum;
    int32_t *shi, *slo, *shi0, *slo0;
} xq_view;

static xq_view view_of(const void *ws, int64_t M, int64_t K)
{
    int64_t nb = M * (K / BLK);
    char *p = (char *)ws + 2 * M * K;
    xq_view v;
    v.q = (int8_t *)ws;
    v.d = (float *)p;
    v.shi = (int32_t *)(p + 4 * nb);
    v.slo = (int32_t *)(p + 8 * nb);
    v.fsum = (float *)(p + 12 * nb);
    v.shi0 = (int32_t *)(p + 16 * nb);
    v.slo0 = (int32_t *)(p + 20 * nb);
    return v;
}

static void prep(const float *x, int64_t ldx, int64_t M, int64_t K, void *ws, int64_t m0,
                 int64_t m1)
{
    xq_view v = view_of(ws, M, K);
    int64_t nb = K / BLK;
    const vi nlim = vi_set(-127);
    for (int64_t m = m0; m < m1; m++)
        for (int64_t b = 0; b < nb; b++) {
            const float *xb = x + m * ldx + b * BLK;
            vf a[NX], mx = vf_zero();
            for (int i = 0; i < NX; i++) {
                a[i] = vf_ld(xb + NL * i);
                mx = vf_max(mx, vf_abs(a[i]));
            }
            float amax = vf_hmax(mx), d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
            vf s = vf_set(id), vd = vf_set(d), s2 = vf_set(254.0f * id);
            vi h[NX], l[NX];
            for (int i = 0; i < NX; i++) {
                /* |x / d| <= 127 (1 + 3 2^-24) rounds to 127 at most, and so does the rest; a
                 * conversion out of range (x not finite, 1 / d overflowing) gives INT_MIN: one
                 * bound holds them all in [-127, 127] */
                h[i] = vi_max(vf_round(vf_mul(a[i], s)), nlim);
                /* the rest, |x - d hi| <= d / 2, in steps of d / 254 */
                vf r = vf_fnma(vf_cvt(h[i]), vd, a[i]);
                l[i] = vi_max(vf_round(vf_mul(r, s2)), nlim);
            }
            int8_t *q = v.q + (m * nb + b) * 2 * BLK;
            vi_st_bytes(q, h);
            vi_st_bytes(q + BLK, l);
            int64_t at = m * nb + b;
            int32_t sum[4]; /* hi's over the first 16 and the last, then lo's */
#if QI_BITS == 512
            vi_sum4(h[0], h[1], l[0], l[1], sum);
#else
            vi_sum4(vi_add(h[0], h[1]), vi_add(h[2], h[3]), vi_add(l[0], l[1]), vi_add(l[2], l[3]),
                    sum);
#endif
            v.d[at] = d;
            v.shi[at] = sum[0] + sum[1];
            v.slo[at] = sum[2] + sum[3];
            v.shi0[at] = sum[0];
            v.slo0[at] = sum[2];
            v.fsum[at] = vf_sum32(a);
        }
}

/* A tile: columns n .. n + nt (nt <= 32; the others zero) over blocks kb0 .. kb0 + kn of K. */
typedef struct {
    uint32_t q[KB][8][NT]; /* [block][quad j][column]: the column's bytes 4 j .. 4 j + 3 */
    float d[KB][NT], m[KB][NT];
    int32_t s[KB][2][NT]; /* q6_k: the int8 scales of the block's two groups of 16 */
} tile;

/* each lane: the 4 bits of its x & 15 to bit 4 of its 4 bytes */
AI vi spread4(vi x)
{
    const vi one = vi_set(1);
    vi r = vi_sll(vi_and(x, one), 4);
    r = vi_or(r, vi_sll(vi_and(vi_srl(x, 1), one), 12));
    r = vi_or(r, vi_sll(vi_and(vi_srl(x, 2), one), 20));
    return vi_or(r, vi_sll(vi_and(vi_srl(x, 3), one), 28));
}

/* The byte offsets of NL weight rows rb bytes apart: a gather's index. */
AI vi col_offsets(size_t rb) { return vi_mul(vi_iota(), vi_set((int)rb)); }

/* unpack for the formats of 32-element blocks: each of NL columns' dwords gathered at once. q8_0's
 * bytes: q + 128 (unsigned, for vpdpbusd), or as stored for maddubs (cols says why). */
static void unpack32(gp_dtype wt, const uint8_t *w, size_t rb, int64_t n, int nt, int64_t kb0,
                     int kn, tile *t)
{
    size_t bb = gp_dtype_block_bytes(wt);
    const vi idx = col_offsets(rb), lo4 = vi_set(0x0f0f0f0f);
    for (int h = 0; h < NT / NL; h++) {
        vm k = vm_first(nt - NL * h);
        for (int b = 0; b < kn; b++) {
            const uint8_t *base = w + (size_t)(n + NL * h) * rb + (size_t)(kb0 + b) * bb;
            vi head = vi_gather(k, idx, base); /* d, then m (q4_1, q5_1) */
            vf m = vf_zero();
            if (wt == GP_Q4_1 || wt == GP_Q5_1)
                m = vf_f16(vi_srl(head, 16));
            vf_st(t->d[b] + NL * h, vf_f16(head));
            vf_st(t->m[b] + NL * h, m);
            if (wt == GP_Q8_0) {
                for (int j = 0; j < 8; j++) {
                    vi u = vi_gather(k, idx, base + 2 + 4 * j);
                    if (!QI_MADDUBS)
                        u = vi_xor(u, vi_set((int)0x80808080u));
                    vi_st(t->q[b][j] + NL * h, u);
                }
                continue;
            }
            int qs = wt == GP_Q4_0 ? 2 : wt == GP_Q4_1 ? 4 : wt == GP_Q5_0 ? 6 : 8;
            vi qh = wt == GP_Q5_0 || wt == GP_Q5_1 ? vi_gather(k, idx, base + qs - 4) : vi_zero();
            for (int j = 0; j < 4; j++) {
                vi u = vi_gather(k, idx, base + qs + 4 * j);
                vi a = vi_and(u, lo4), c = vi_and(vi_srl(u, 4), lo4);
                if (wt == GP_Q5_0 || wt == GP_Q5_1) {
                    a = vi_or(a, spread4(vi_srl(qh, 4 * j)));
                    c = vi_or(c, spread4(vi_srl(qh, 16 + 4 * j)));
                }
                vi_st(t->q[b][j] + NL * h, a);
                vi_st(t->q[b][j + 4] + NL * h, c);
            }
        }
    }
}

/* unpack for q4_k and q5_k: the quads of NL columns gathered at once, each column's 6-bit scales
 * decoded apart, once a superblock. */
static void unpackk(gp_dtype wt, const uint8_t *w, size_t rb, int64_t n, int nt, int64_t kb0,
                    int kn, tile *t)
{
    size_t bb = gp_dtype_block_bytes(wt);
    const vi idx = col_offsets(rb), lo4 = vi_set(0x0f0f0f0f), bit = vi_set(0x01010101);
    for (int h = 0; h < NT / NL; h++) {
        int cols = nt - NL * h;
        vm k = vm_first(cols);
        float sd[NL][8], sm[NL][8]; /* the current superblock's scales, each column's */
        int64_t have = -1;
        for (int b = 0; b < kn; b++) {
            int64_t g = kb0 + b;
            int j = (int)(g % 8);
            const uint8_t *base = w + (size_t)(n + NL * h) * rb + (size_t)(g / 8) * bb;
            if (g / 8 != have) {
                have = g / 8;
                for (int c = 0; c < NL; c++) {
                    uint8_t sc[8] = {0}, mn[8] = {0};
                    float d = 0.0f, dmin = 0.0f;
                    if (c < cols) {
                        const uint8_t *blk = base + (size_t)c * rb;
                        uint16_t hd, hm;
                        gp_quant_k_scales(blk + 4, sc, mn);
                        memcpy(&hd, blk, 2);
                        memcpy(&hm, blk + 2, 2);
                        d = gp_f16_to_f32(hd);
                        dmin = gp_f16_to_f32(hm);
                    }
                    for (int i = 0; i < 8; i++) {
                        sd[c][i] = d * (float)sc[i];
                        sm[c][i] = -dmin * (float)mn[i];
                    }
                }
            }
            for (int c = 0; c < NL; c++) {
                t->d[b][NL * h + c] = sd[c][j];
                t->m[b][NL * h + c] = sm[c][j];
            }
            const uint8_t *qs = base + (wt == GP_Q5_K ? 48 : 16) + 32 * (j >> 1);
            for (int q = 0; q < 8; q++) {
                vi u = vi_and(vi_srl(vi_gather(k, idx, qs + 4 * q), 4 * (j & 1)), lo4);
                if (wt == GP_Q5_K) {
                    vi hb = vi_gather(k, idx, base + 16 + 4 * q);
                    u = vi_or(u, vi_sll(vi_and(vi_srl(hb, j), bit), 4));
                }
                vi_st(t->q[b][q] + NL * h, u);
            }
        }
    }
}

/* unpack for q6_k (cpu/quant.h's layout): q unsigned in [0, 63] (the 32 off in cols), d per
 * superblock and the block's two int8 scales per column. */
static void unpack6(const uint8_t *w, size_t rb, int64_t n, int nt, int64_t kb0, int kn, tile *t)
{
    size_t bb = gp_dtype_block_bytes(GP_Q6_K);
    const vi idx = col_offsets(rb), lo4 = vi_set(0x0f0f0f0f), lo2 = vi_set(0x03030303);
    for (int h = 0; h < NT / NL; h++) {
        vm k = vm_first(nt - NL * h);
        for (int b = 0; b < kn; b++) {
            int64_t g = kb0 + b;
            int j = (int)(g % 8), hh = j / 4, kk = j % 4; /* elements 128 hh + 32 kk + l */
            const uint8_t *base = w + (size_t)(n + NL * h) * rb + (size_t)(g / 8) * bb;
            /* d is the last 2 bytes: read from 206 so as not to run past the block */
            vf_st(t->d[b] + NL * h, vf_f16(vi_srl(vi_gather(k, idx, base + 206), 16)));
            vi sc = vi_gather(k, idx, base + 192 + 2 * j);
            vi_st(t->s[b][0] + NL * h, vi_sra(vi_sll(sc, 24), 24));
            vi_st(t->s[b][1] + NL * h, vi_sra(vi_sll(sc, 16), 24));
            const uint8_t *ql = base + 64 * hh + 32 * (kk & 1), *qh = base + 128 + 32 * hh;
            for (int q = 0; q < 8; q++) {
                vi u = vi_and(vi_srl(vi_gather(k, idx, ql + 4 * q), 4 * (kk >> 1)), lo4);
                vi hb = vi_and(vi_srl(vi_gather(k, idx, qh + 4 * q), 2 * kk), lo2);
                vi_st(t->q[b][q] + NL * h, vi_or(u, vi_sll(hb, 4)));
            }
        }
    }
}

static void unpack(gp_dtype wt, const uint8_t *w, size_t rb, int64_t n, int nt, int64_t kb0,
                   int kn, tile *t)
{
    if (wt == GP_Q6_K)
        unpack6(w, rb, n, nt, kb0, kn, t);
    else if (gp_dtype_block(wt) == BLK)
        unpack32(wt, w, rb, n, nt, kb0, kn, t);
    else
        unpackk(wt, w, rb, n, nt, kb0, kn, t); /* q4_k, q5_k */
}

/*
 * How a micro kernel sums a block: PLAIN (one integer dot per block; weights q <= 31), G16 (q6_k:
 * one per group of 16, q <= 63), Q8 (q8_0 under maddubs: signed weights).
 *
 * vpmaddubsw multiplies unsigned bytes (the weights) by signed ones (x's parts, |x| <= 127 as prep
 * clamps them) and adds pairs into int16 with saturation; its results are added in int16 over P
 * quads before vpmaddwd widens them, so the sums must stay within 32767: PLAIN 4 quads, 4 * 2 * 31
 * * 127 = 31496; G16 2 quads, 2 * 2 * 63 * 127 = 32004. q8_0's q in [-128, 127] offset to unsigned
 * (q + 128, as vpdpbusd takes it) would reach 2 * 255 * 127 in one pair: instead its |q| (<= 128)
 * is the unsigned operand and q's sign moves to x (vpsignb), 2 * 128 * 127 = 32512 a pair, one
 * quad at a time. The integers are those vpdpbusd's give.
 */
enum { PLAIN, G16, Q8 };

#if QI_BITS == 256 && QI_MADDUBS
AI vi mul16(vi w, vi x) { return _mm256_maddubs_epi16(w, x); }
AI vi add16(vi a, vi b) { return _mm256_add_epi16(a, b); }
AI vi widen16(vi a) { return _mm256_madd_epi16(a, _mm256_set1_epi16(1)); }
AI vi sign8(vi x, vi w) { return _mm256_sign_epi8(x, w); }
AI vi abs8(vi w) { return _mm256_abs_epi8(w); }
#elif QI_BITS == 256
AI vi dot(vi acc, vi w, vi x) { return _mm256_dpbusd_avx_epi32(acc, w, x); }
#else
AI vi dot(vi acc, vi w, vi x) { return _mm512_dpbusd_epi32(acc, w, x); }
#endif

/* rows r < MR, columns c0 .. c0 + NV NL of the tile (those below nt stored) at row m:
 * y[m + r][n + c0 ..] (+)= the tile's part of the product. */
AI void micro(const int MR, const int KIND, gp_dtype wt, const tile *t, int c0, int nt, int kn,
              int64_t kb0, const xq_view *v, int64_t m, int64_t K, int first, float *y,
              int64_t ldy)
{
    int64_t nb = K / BLK;
    /* the offset each block's integer dot carries: q4_0 stores q + 8, q5_0 q + 16, q8_0 q + 128
     * (vpdpbusd; maddubs takes it signed) */
    int zero = wt == GP_Q4_0 ? 8 : wt == GP_Q5_0 ? 16 : wt == GP_Q8_0 && KIND != Q8 ? 128 : 0;
    const int NG = KIND == G16 ? 2 : 1, QG = 8 / NG; /* groups a block; quads a group */
#if QI_MADDUBS
    const int P = KIND == PLAIN ? 4 : KIND == G16 ? 2 : 1; /* quads summed in int16 */
#endif
    vm km[NV];
    vf acc[4][NV];
    for (int u = 0; u < NV; u++)
        km[u] = vm_first(nt - c0 - NL * u);
    for (int r = 0; r < MR; r++) {
        float *yr = y + (m + r) * ldy + c0;
        for (int u = 0; u < NV; u++)
            acc[r][u] = first ? vf_zero() : vf_ldm(km[u], yr + NL * u);
    }
    const vf inv = vf_set(1.0f / 254.0f);
    for (int b = 0; b < kn; b++) {
        int64_t kb = kb0 + b;
        /* the block's integer dots (hi's, lo's); q6_k's th, tl: its groups' scaled and added */
        vi hi[4][NV], lo[4][NV], th[4][NV], tl[4][NV];
        for (int g = 0; g < NG; g++) {
#if QI_MADDUBS
            vi ph[4][NV], pl[4][NV];
#endif
            for (int r = 0; r < MR; r++)
                for (int u = 0; u < NV; u++)
                    hi[r][u] = lo[r][u] = vi_zero();
#pragma GCC unroll 8
            for (int jj = 0; jj < QG; jj++) {
                int j = QG * g + jj;
                vi wq[NV];
                for (int u = 0; u < NV; u++)
                    wq[u] = vi_ld(t->q[b][j] + c0 + NL * u);
#if QI_MADDUBS
                vi wu[NV];
                for (int u = 0; u < NV; u++)
                    wu[u] = KIND == Q8 ? abs8(wq[u]) : wq[u];
#endif
                for (int r = 0; r < MR; r++) {
                    const int8_t *xq = v->q + ((m + r) * nb + kb) * 2 * BLK + 4 * j;
                    int32_t h4, l4;
                    memcpy(&h4, xq, 4);
                    memcpy(&l4, xq + BLK, 4);
                    vi xh = vi_set(h4), xl = vi_set(l4);
                    for (int u = 0; u < NV; u++) {
#if QI_MADDUBS
                        vi sh = KIND == Q8 ? sign8(xh, wq[u]) : xh;
                        vi sl = KIND == Q8 ? sign8(xl, wq[u]) : xl;
                        vi a = mul16(wu[u], sh), c = mul16(wu[u], sl);
                        ph[r][u] = jj % P ? add16(ph[r][u], a) : a;
                        pl[r][u] = jj % P ? add16(pl[r][u], c) : c;
                        if (jj % P == P - 1) {
                            hi[r][u] = vi_add(hi[r][u], widen16(ph[r][u]));
                            lo[r][u] = vi_add(lo[r][u], widen16(pl[r][u]));
                        }
#else
                        hi[r][u] = dot(hi[r][u], wq[u], xh);
                        lo[r][u] = dot(lo[r][u], wq[u], xl);
#endif
                    }
                }
            }
            if (KIND != G16)
                continue;
            for (int r = 0; r < MR; r++) {
                /* q6_k's group g: (dot - 32 sum x) sc_g, exact in int32 */
                int64_t at = (m + r) * nb + kb;
                int sh = g ? v->shi[at] - v->shi0[at] : v->shi0[at];
                int sl = g ? v->slo[at] - v->slo0[at] : v->slo0[at];
                vi oh = vi_set(32 * sh), ol = vi_set(32 * sl);
                for (int u = 0; u < NV; u++) {
                    vi sc = vi_ld(t->s[b][g] + c0 + NL * u);
                    vi eh = vi_mul(vi_sub(hi[r][u], oh), sc), el = vi_mul(vi_sub(lo[r][u], ol), sc);
                    th[r][u] = g ? vi_add(th[r][u], eh) : eh;
                    tl[r][u] = g ? vi_add(tl[r][u], el) : el;
                }
            }
        }
        int has_m = wt == GP_Q4_1 || wt == GP_Q5_1 || wt == GP_Q4_K || wt == GP_Q5_K;
        vf d[NV], mm[NV];
        for (int u = 0; u < NV; u++) {
            d[u] = vf_ld(t->d[b] + c0 + NL * u);
            mm[u] = has_m ? vf_ld(t->m[b] + c0 + NL * u) : vf_zero();
        }
        for (int r = 0; r < MR; r++) {
            int64_t at = (m + r) * nb + kb;
            vf dx = vf_set(v->d[at]);
            vi oh = vi_set(zero * v->shi[at]), ol = vi_set(zero * v->slo[at]);
            for (int u = 0; u < NV; u++) {
                vi eh = KIND == G16 ? th[r][u] : vi_sub(hi[r][u], oh);
                vi el = KIND == G16 ? tl[r][u] : vi_sub(lo[r][u], ol);
                vf f = vf_fma(vf_cvt(el), inv, vf_cvt(eh));
                acc[r][u] = vf_fma(f, vf_mul(d[u], dx), acc[r][u]);
            }
            if (has_m) {
                vf sx = vf_set(v->fsum[at]);
                for (int u = 0; u < NV; u++)
                    acc[r][u] = vf_fma(mm[u], sx, acc[r][u]);
            }
        }
    }
    for (int r = 0; r < MR; r++) {
        float *yr = y + (m + r) * ldy + c0;
        for (int u = 0; u < NV; u++)
            vf_stm(yr + NL * u, km[u], acc[r][u]);
    }
}

/* rows m0 .. m1 of the tile's columns c0 .. c0 + NV NL, MRM rows at a time, then fewer */
AI void rows(const int MRM, const int KIND, gp_dtype wt, const tile *t, int c0, int nt, int kn,
             int64_t kb0, const xq_view *v, int64_t m0, int64_t m1, int64_t K, float *y,
             int64_t ldy)
{
    int64_t m = m0;
    int first = kb0 == 0;
    if (MRM >= 4)
        for (; m + 4 <= m1; m += 4)
            micro(4, KIND, wt, t, c0, nt, kn, kb0, v, m, K, first, y, ldy);
    for (; m + 2 <= m1; m += 2)
        micro(2, KIND, wt, t, c0, nt, kn, kb0, v, m, K, first, y, ldy);
    if (m < m1)
        micro(1, KIND, wt, t, c0, nt, kn, kb0, v, m, K, first, y, ldy);
}

static void cols(gp_dtype wt, const uint8_t *w, int64_t n0, int64_t n1, int64_t M, int64_t K,
                 float *y, int64_t ldy, const void *ws, int64_t m0, int64_t m1)
{
    xq_view v = view_of(ws, M, K);
    size_t rb = gp_dtype_row_bytes(wt, K);
    int64_t nb = K / BLK;
    int kind = wt == GP_Q6_K ? G16 : wt == GP_Q8_0 && QI_MADDUBS ? Q8 : PLAIN;
    tile t __attribute__((aligned(64)));
    for (int64_t n = n0; n < n1; n += NT) {
        int nt = n1 - n < NT ? (int)(n1 - n) : NT;
        for (int64_t kb0 = 0; kb0 < nb; kb0 += KB) {
            int kn = nb - kb0 < KB ? (int)(nb - kb0) : KB;
            unpack(wt, w, rb, n, nt, kb0, kn, &t);
            for (int c0 = 0; c0 < nt; c0 += NV * NL) {
                if (kind == G16)
                    rows(MR_G16, G16, wt, &t, c0, nt, kn, kb0, &v, m0, m1, K, y + n, ldy);
                else if (QI_MADDUBS && kind == Q8)
                    rows(MR_PLAIN, Q8, wt, &t, c0, nt, kn, kb0, &v, m0, m1, K, y + n, ldy);
                else
                    rows(MR_PLAIN, PLAIN, wt, &t, c0, nt, kn, kb0, &v, m0, m1, K, y + n, ldy);
            }
        }
    }
}

#if QI_BITS == 256
#include "cpu/quant_int_row.h"
const gp_qint_path QI_PATH = {prep, cols, row};
#else
/* none: on a Zen 5 the 256-bit row path took 1.5-1.8x the f32 path's time at M = 1 (q4_0 33 ms
 * against 21, q4_k_m 37-50 against 23-28; bench/gguf-notes.md) */
const gp_qint_path QI_PATH = {prep, cols, NULL};
#endif
