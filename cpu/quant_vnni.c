/* gp_quant_matmul_ws's integer path on AVX-512 VNNI (processors without AMX: AMD Zen 4 and later,
 * Intel from Ice Lake), for q4_0, q4_1, q5_0, q5_1, q8_0, q4_k and q5_k weights (their groups of
 * 32 as w = d (q - zero) + m) and M > GP_QUANT_WS_MIN_M rows:
 *
 *   prep: each row of x quantized once per product in blocks of 32 (the weights' blocks) to two
 *         8-bit parts: d = max |x| / 127, hi = round(x / d), lo = round((x - d hi) 254 / d), so
 *         x = d (hi + lo / 254) within d / 508; with the block's sums of hi and lo (int) and of x;
 *   cols: 32 columns at a time, their blocks unpacked to bytes laid out "lanes over columns" (lane c
 *         of a 64-byte vector: column c's 4 bytes at k, k + 1, k + 2, k + 3), so that one
 *         vpdpbusd against x's 4 bytes broadcast adds 4 products to each of 16 columns; a block's
 *         integer dots (hi's, lo's / 254) then scale by the column's d times the row's d (q4_1: plus
 *         the column's m times the row block's sum of x).
 *
 * The error against the f32 path is x's quantization alone (the weights' integers are exact): per
 * block |x - d (hi + lo / 254)| <= d / 508, so |y - y_f32| <= sum over blocks of (d_x / 508) sum |w|
 * over the block, plus f32 rounding (tests/test_quant_f32.c checks that bound). One 8-bit part
 * would be 254 times that: past the real models' parity with transformers (SmolLM2 Q4_1's logits
 * 8e-2 off, 1e-3 allowed). Rows and columns are independent and K is walked in the same order for
 * every split: 1 and 2 threads give the same bits. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cpu/quant.h"
#include "cpu/quant_f32_internal.h"
#include "cpu/quant_internal.h"
#include "ir/f16.h"

enum { BLK = 32, NT = 32, KB = 16 }; /* a block; columns a tile; blocks a tile holds of K */

/* q6_k's scales are per 16 elements: not here (the f32 path takes it). */
int gp_qvnni_supports(gp_dtype wt)
{
    return wt == GP_Q4_0 || wt == GP_Q4_1 || wt == GP_Q5_0 || wt == GP_Q5_1 || wt == GP_Q8_0 ||
           wt == GP_Q4_K || wt == GP_Q5_K;
}

/* The workspace: [M][K / 32][2][32] int8 (each block's hi, then lo), then [M][K / 32] f32 d,
 * int32 sums of hi and of lo, f32 sum of x. */
typedef struct {
    int8_t *q;
    float *d, *fsum;
    int32_t *shi, *slo;
} xq_view;

static xq_view view_of(const void *ws, int64_t M, int64_t K)
{
    int64_t nb = K / BLK;
    char *p = (char *)ws;
    xq_view v;
    v.q = (int8_t *)p;
    p += 2 * M * K;
    v.d = (float *)p;
    v.shi = (int32_t *)(p + 4 * M * nb);
    v.slo = (int32_t *)(p + 8 * M * nb);
    v.fsum = (float *)(p + 12 * M * nb);
    return v;
}

int64_t gp_qvnni_ws_bytes(int64_t M, int64_t K)
{
    return 2 * M * K + 16 * M * (K / BLK);
}

static float hmax_abs(__m512 a, __m512 b)
{
    return _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
}

void gp_qvnni_prep(const float *x, int64_t ldx, int64_t M, int64_t K, void *ws, int64_t m0,
                   int64_t m1)
{
    xq_view v = view_of(ws, M, K);
    int64_t nb = K / BLK;
    for (int64_t m = m0; m < m1; m++)
        for (int64_t b = 0; b < nb; b++) {
            const float *xb = x + m * ldx + b * BLK;
            __m512 a = _mm512_loadu_ps(xb), c = _mm512_loadu_ps(xb + 16);
            float amax = hmax_abs(a, c), d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
            __m512 s = _mm512_set1_ps(id), vd = _mm512_set1_ps(d), s2 = _mm512_set1_ps(254.0f * id);
            __m512i ha = _mm512_cvtps_epi32(_mm512_mul_ps(a, s)); /* nearest, ties to even */
            __m512i hc = _mm512_cvtps_epi32(_mm512_mul_ps(c, s));
            /* the rest, |x - d hi| <= d / 2, in steps of d / 254 */
            __m512 ra = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(ha), vd, a);
            __m512 rc = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(hc), vd, c);
            __m512i la = _mm512_cvtps_epi32(_mm512_mul_ps(ra, s2));
            __m512i lc = _mm512_cvtps_epi32(_mm512_mul_ps(rc, s2));
            int8_t *q = v.q + (m * nb + b) * 2 * BLK;
            _mm_storeu_si128((__m128i *)q, _mm512_cvtsepi32_epi8(ha));
            _mm_storeu_si128((__m128i *)(q + 16), _mm512_cvtsepi32_epi8(hc));
            _mm_storeu_si128((__m128i *)(q + 32), _mm512_cvtsepi32_epi8(la));
            _mm_storeu_si128((__m128i *)(q + 48), _mm512_cvtsepi32_epi8(lc));
            v.d[m * nb + b] = d;
            v.shi[m * nb + b] = _mm512_reduce_add_epi32(_mm512_add_epi32(ha, hc));
            v.slo[m * nb + b] = _mm512_reduce_add_epi32(_mm512_add_epi32(la, lc));
            v.fsum[m * nb + b] = _mm512_reduce_add_ps(_mm512_add_ps(a, c));
        }
}

/* A tile: columns n .. n + nt (nt <= 32; the others zero) over blocks kb0 .. kb0 + kn of K. */
typedef struct {
    uint32_t q[KB][8][NT]; /* [block][quad j][column]: the column's bytes 4 j .. 4 j + 3 */
    float d[KB][NT], m[KB][NT];
} tile;

/* 16 lanes: the 4 bits of each lane's x & 15 to bit 4 of its 4 bytes (spread4 on every lane). */
static __m512i spread4_v(__m512i x)
{
    const __m512i one = _mm512_set1_epi32(1);
    __m512i r = _mm512_slli_epi32(_mm512_and_si512(x, one), 4);
    r = _mm512_or_si512(r, _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(x, 1), one), 12));
    r = _mm512_or_si512(r, _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(x, 2), one), 20));
    return _mm512_or_si512(r, _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(x, 3), one), 28));
}

/* The byte offsets of 16 weight rows rb bytes apart: a gather's index. */
static __m512i col_offsets(size_t rb)
{
    return _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                              _mm512_set1_epi32((int)rb));
}

/* The first n of 16 lanes (n <= 0: none). */
static __mmask16 lanes(int n)
{
    return n >= 16 ? 0xffff : n > 0 ? (__mmask16)((1u << n) - 1) : 0;
}

/* unpack for the formats of 32-element blocks: each of 16 columns' dwords gathered at once. */
static void unpack32(gp_dtype wt, const uint8_t *w, size_t rb, int64_t n, int nt, int64_t kb0,
                     int kn, tile *t)
{
    size_t bb = gp_dtype_block_bytes(wt);
    const __m512i idx = col_offsets(rb);
    const __m512i lo4 = _mm512_set1_epi32(0x0f0f0f0f);
    for (int h = 0; h < 2; h++) {
        int cols = nt - 16 * h;
        __mmask16 k = lanes(cols);
        for (int b = 0; b < kn; b++) {
            const uint8_t *base = w + (size_t)(n + 16 * h) * rb + (size_t)(kb0 + b) * bb;
            const __m512i z = _mm512_setzero_si512();
#define GATHER(off) _mm512_mask_i32gather_epi32(z, k, idx, (const void *)(base + (off)), 1)
            __m512i head = GATHER(0); /* d, then m (q4_1, q5_1) */
            __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(head));
            __m512 m = _mm512_setzero_ps();
            if (wt == GP_Q4_1 || wt == GP_Q5_1)
                m = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(head, 16)));
            _mm512_storeu_ps(t->d[b] + 16 * h, d);
            _mm512_storeu_ps(t->m[b] + 16 * h, m);
            if (wt == GP_Q8_0) {
                for (int j = 0; j < 8; j++)
                    _mm512_storeu_si512(t->q[b][j] + 16 * h,
                                        _mm512_xor_si512(GATHER(2 + 4 * j),
                                                         _mm512_set1_epi32((int)0x80808080u)));
                continue;
            }
            int qs = wt == GP_Q4_0 ? 2 : wt == GP_Q4_1 ? 4 : wt == GP_Q5_0 ? 6 : 8;
            __m512i qh = wt == GP_Q5_0 || wt == GP_Q5_1 ? GATHER(qs - 4) : z;
            for (int j = 0; j < 4; j++) {
                __m512i u = GATHER(qs + 4 * j);
                __m512i a = _mm512_and_si512(u, lo4), c = _mm512_and_si512(_mm512_srli_epi32(u, 4), lo4);
                if (wt == GP_Q5_0 || wt == GP_Q5_1) {
                    a = _mm512_or_si512(a, spread4_v(_mm512_srli_epi32(qh, 4 * j)));
                    c = _mm512_or_si512(c, spread4_v(_mm512_srli_epi32(qh, 16 + 4 * j)));
                }
                _mm512_storeu_si512(t->q[b][j] + 16 * h, a);
                _mm512_storeu_si512(t->q[b][j + 4] + 16 * h, c);
            }
#undef GATHER
        }
    }
}

/* unpack for q4_k and q5_k: the quads of 16 columns gathered at once, each column's 6-bit scales
 * decoded apart. */
static void unpackk(gp_dtype wt, const uint8_t *w, size_t rb, int64_t n, int nt, int64_t kb0,
                    int kn, tile *t)
{
    size_t bb = gp_dtype_block_bytes(wt);
    const __m512i idx = col_offsets(rb);
    const __m512i lo4 = _mm512_set1_epi32(0x0f0f0f0f), bit = _mm512_set1_epi32(0x01010101);
    const __m512i z = _mm512_setzero_si512();
    for (int h = 0; h < 2; h++) {
        int cols = nt - 16 * h;
        __mmask16 k = lanes(cols);
        float sd[16][8], sm[16][8]; /* the current superblock's scales, each column's */
        int64_t have = -1;
        for (int b = 0; b < kn; b++) {
            int64_t g = kb0 + b;
            int j = (int)(g % 8);
            const uint8_t *base = w + (size_t)(n + 16 * h) * rb + (size_t)(g / 8) * bb;
            if (g / 8 != have) {
                have = g / 8;
                for (int c = 0; c < 16; c++) {
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
            for (int c = 0; c < 16; c++) {
                t->d[b][16 * h + c] = sd[c][j];
                t->m[b][16 * h + c] = sm[c][j];
            }
            const uint8_t *qs = base + (wt == GP_Q5_K ? 48 : 16) + 32 * (j >> 1);
            for (int q = 0; q < 8; q++) {
                __m512i u = _mm512_mask_i32gather_epi32(z, k, idx, (const void *)(qs + 4 * q), 1);
                u = _mm512_and_si512(_mm512_srli_epi32(u, 4 * (j & 1)), lo4);
                if (wt == GP_Q5_K) {
                    __m512i hb = _mm512_mask_i32gather_epi32(z, k, idx,
                                                             (const void *)(base + 16 + 4 * q), 1);
                    u = _mm512_or_si512(u, _mm512_slli_epi32(
                                               _mm512_and_si512(_mm512_srli_epi32(hb, j), bit), 4));
                }
                _mm512_storeu_si512(t->q[b][q] + 16 * h, u);
            }
        }
    }
}

static void unpack(gp_dtype wt, const uint8_t *w, size_t rb, int64_t n, int nt, int64_t kb0,
                   int kn, tile *t)
{
    if (gp_dtype_block(wt) == BLK)
        unpack32(wt, w, rb, n, nt, kb0, kn, t);
    else
        unpackk(wt, w, rb, n, nt, kb0, kn, t); /* q4_k, q5_k (gp_qvnni_supports) */
}

/* rows r < MR of the tile at row m: y[m + r][n ..] (+)= the tile's part of the product. */
static inline __attribute__((always_inline)) void micro(const int MR, gp_dtype wt, const tile *t,
                                                        int kn, int64_t kb0, const xq_view *v,
                                                        int64_t m, int64_t K, int first, int nt,
                                                        float *y, int64_t ldy)
{
    int64_t nb = K / BLK;
    /* the offset each block's integer dot carries: q4_0 stores q + 8, q5_0 q + 16, q8_0 q + 128 */
    int zero = wt == GP_Q4_0 ? 8 : wt == GP_Q5_0 ? 16 : wt == GP_Q8_0 ? 128 : 0;
    __mmask16 k0 = lanes(nt), k1 = lanes(nt - 16);
    __m512 acc[4][2];
    for (int r = 0; r < MR; r++) {
        float *yr = y + (m + r) * ldy;
        acc[r][0] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(k0, yr);
        acc[r][1] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(k1, yr + 16);
    }
    const __m512 inv = _mm512_set1_ps(1.0f / 254.0f);
    for (int b = 0; b < kn; b++) {
        int64_t kb = kb0 + b;
        __m512i hi[4][2], lo[4][2];
        for (int r = 0; r < MR; r++)
            hi[r][0] = hi[r][1] = lo[r][0] = lo[r][1] = _mm512_setzero_si512();
        for (int j = 0; j < 8; j++) {
            __m512i w0 = _mm512_loadu_si512(t->q[b][j]), w1 = _mm512_loadu_si512(t->q[b][j] + 16);
            for (int r = 0; r < MR; r++) {
                const int8_t *xq = v->q + ((m + r) * nb + kb) * 2 * BLK + 4 * j;
                int32_t h4, l4;
                memcpy(&h4, xq, 4);
                memcpy(&l4, xq + BLK, 4);
                __m512i xh = _mm512_set1_epi32(h4), xl = _mm512_set1_epi32(l4);
                hi[r][0] = _mm512_dpbusd_epi32(hi[r][0], w0, xh);
                hi[r][1] = _mm512_dpbusd_epi32(hi[r][1], w1, xh);
                lo[r][0] = _mm512_dpbusd_epi32(lo[r][0], w0, xl);
                lo[r][1] = _mm512_dpbusd_epi32(lo[r][1], w1, xl);
            }
        }
        __m512 d0 = _mm512_loadu_ps(t->d[b]), d1 = _mm512_loadu_ps(t->d[b] + 16);
        __m512 m0 = _mm512_loadu_ps(t->m[b]), m1 = _mm512_loadu_ps(t->m[b] + 16);
        for (int r = 0; r < MR; r++) {
            int64_t at = (m + r) * nb + kb;
            __m512i oh = _mm512_set1_epi32(zero * v->shi[at]), ol = _mm512_set1_epi32(zero * v->slo[at]);
            __m512 dx = _mm512_set1_ps(v->d[at]);
            __m512 f0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(lo[r][0], ol)), inv,
                                        _mm512_cvtepi32_ps(_mm512_sub_epi32(hi[r][0], oh)));
            __m512 f1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(lo[r][1], ol)), inv,
                                        _mm512_cvtepi32_ps(_mm512_sub_epi32(hi[r][1], oh)));
            acc[r][0] = _mm512_fmadd_ps(f0, _mm512_mul_ps(d0, dx), acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(f1, _mm512_mul_ps(d1, dx), acc[r][1]);
            if (wt != GP_Q4_0 && wt != GP_Q5_0 && wt != GP_Q8_0) { /* an offset m */
                __m512 sx = _mm512_set1_ps(v->fsum[at]);
                acc[r][0] = _mm512_fmadd_ps(m0, sx, acc[r][0]);
                acc[r][1] = _mm512_fmadd_ps(m1, sx, acc[r][1]);
            }
        }
    }
    for (int r = 0; r < MR; r++) {
        float *yr = y + (m + r) * ldy;
        _mm512_mask_storeu_ps(yr, k0, acc[r][0]);
        if (k1)
            _mm512_mask_storeu_ps(yr + 16, k1, acc[r][1]);
    }
}

void gp_qvnni_cols(gp_dtype wt, const uint8_t *w, int64_t n0, int64_t n1, int64_t M, int64_t K,
                   float *y, int64_t ldy, const void *ws, int64_t m0, int64_t m1)
{
    xq_view v = view_of(ws, M, K);
    size_t rb = gp_dtype_row_bytes(wt, K);
    int64_t nb = K / BLK;
    tile t __attribute__((aligned(64)));
    for (int64_t n = n0; n < n1; n += NT) {
        int nt = n1 - n < NT ? (int)(n1 - n) : NT;
        for (int64_t kb0 = 0; kb0 < nb; kb0 += KB) {
            int kn = nb - kb0 < KB ? (int)(nb - kb0) : KB;
            unpack(wt, w, rb, n, nt, kb0, kn, &t);
            int64_t m = m0;
            for (; m + 4 <= m1; m += 4)
                micro(4, wt, &t, kn, kb0, &v, m, K, kb0 == 0, nt, y + n, ldy);
            switch (m1 - m) {
            case 3: micro(3, wt, &t, kn, kb0, &v, m, K, kb0 == 0, nt, y + n, ldy); break;
            case 2: micro(2, wt, &t, kn, kb0, &v, m, K, kb0 == 0, nt, y + n, ldy); break;
            case 1: micro(1, wt, &t, kn, kb0, &v, m, K, kb0 == 0, nt, y + n, ldy); break;
            default: break;
            }
        }
    }
}
