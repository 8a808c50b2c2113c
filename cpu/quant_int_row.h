/* One row of x (M = 1: a decode step's products) on the integer path, for the formats of 32-element
 * blocks, included by cpu/quant_int_x86.h in its 256-bit variants (avx2, avxvnni). The tile path
 * unpacks 32 columns' blocks into a "lanes over columns" layout, which one row cannot repay
 * (every M on it: q4_0 decode 162 -> ~300 ms on a Zen 1, bench/gguf-notes.md); here each weight
 * row's blocks are read straight from the file's bytes, widened to 16 bits in x's element order,
 * and dotted by vpmaddwd against x's two 8-bit parts (prep's workspace) joined into one 16-bit
 * integer, 254 hi + lo: the same value in units of d_x / 254, so the error bound is the tile
 * path's (cpu/quant_int_x86.h: x's quantization alone, d_x / 508 an element) with half the
 * multiplies of two vpmaddubsw parts. The bits differ from the tile path's (another order of
 * sums) but not between thread counts (a weight row is one thread's). */
#include <immintrin.h>

/* block b's 32 weights as 16-bit integers in element order, 16 in *lo and 16 in *hi: q as stored
 * (q4/q5 unsigned, the zero point apart; q8_0 signed) */
AI void row_unpack(gp_dtype wt, const uint8_t *b, __m256i *lo, __m256i *hi)
{
    if (wt == GP_Q8_0) {
        *lo = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + 2)));
        *hi = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + 18)));
        return;
    }
    int qs = wt == GP_Q4_0 ? 2 : wt == GP_Q4_1 ? 4 : wt == GP_Q5_0 ? 6 : 8;
    const __m128i m4 = _mm_set1_epi8(0x0f);
    __m128i q = _mm_loadu_si128((const __m128i *)(b + qs));
    __m128i a = _mm_and_si128(q, m4), c = _mm_and_si128(_mm_srli_epi16(q, 4), m4);
    if (wt == GP_Q5_0 || wt == GP_Q5_1) {
        /* bit i of qh is element i's fifth: byte i takes qh's byte i / 8, then its bit i % 8 */
        uint32_t qh;
        memcpy(&qh, b + qs - 4, 4);
        const __m128i bit = _mm_set1_epi64x((long long)0x8040201008040201ull);
        const __m128i p0 = _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
        const __m128i p1 = _mm_setr_epi8(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
        __m128i h = _mm_cvtsi32_si128((int)qh), f = _mm_set1_epi8(0x10);
        __m128i h0 = _mm_shuffle_epi8(h, p0), h1 = _mm_shuffle_epi8(h, p1);
        a = _mm_or_si128(a, _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(h0, bit), bit), f));
        c = _mm_or_si128(c, _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(h1, bit), bit), f));
    }
    *lo = _mm256_cvtepu8_epi16(a);
    *hi = _mm256_cvtepu8_epi16(c);
}

/* 16 elements of x's parts hi and lo as the 16-bit integers 254 hi + lo (|.| <= 32385) */
AI __m256i row_x16(const int8_t *hi, const int8_t *lo)
{
    __m256i h = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)hi));
    __m256i l = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)lo));
    return _mm256_add_epi16(_mm256_sub_epi16(_mm256_slli_epi16(h, 8), _mm256_slli_epi16(h, 1)), l);
}

/* y[n .. n + R): row 0 of x (its blocks in v) times weight rows n .. n + R, R chains apart so
 * that the FMA latencies overlap and x is widened once for R rows. A lane sums 4 products,
 * |.| <= 4 * 128 * 32385: exact in int32 and in f32's 24 bits. The zero point (q4_0 8, q5_0 16)
 * comes off in lane 0 as zero times x's block sum (exact); the minimums (q4_1, q5_1) add m times
 * x's f32 block sum. */
AI void row_tile(const int R, gp_dtype wt, const uint8_t *w, size_t rb, int64_t n, int64_t nb,
                 float *y, const xq_view *v)
{
    size_t bb = gp_dtype_block_bytes(wt);
    int zero = wt == GP_Q4_0 ? 8 : wt == GP_Q5_0 ? 16 : 0, has_m = wt == GP_Q4_1 || wt == GP_Q5_1;
    __m256 acc[4];
    float mz[4];
    for (int r = 0; r < R; r++)
        acc[r] = _mm256_setzero_ps(), mz[r] = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        const int8_t *xq = v->q + b * 2 * BLK;
        __m256i x0 = row_x16(xq, xq + BLK), x1 = row_x16(xq + 16, xq + BLK + 16);
        __m256i z = _mm256_setr_epi32(zero * (254 * v->shi[b] + v->slo[b]), 0, 0, 0, 0, 0, 0, 0);
        float dx = v->d[b] * (1.0f / 254.0f);
        /* the next R rows (contiguous after these), spread over this tile's blocks: the hardware
         * prefetchers stop at each 4 KiB page of the mapped file */
        const char *pf = (const char *)w + (size_t)(n + R) * rb + (size_t)b * R * bb;
        _mm_prefetch(pf, _MM_HINT_T0);
        _mm_prefetch(pf + 64, _MM_HINT_T0);
        for (int r = 0; r < R; r++) {
            const uint8_t *blk = w + (size_t)(n + r) * rb + (size_t)b * bb;
            __m256i w0, w1;
            row_unpack(wt, blk, &w0, &w1);
            __m256i dot = _mm256_add_epi32(_mm256_madd_epi16(w0, x0), _mm256_madd_epi16(w1, x1));
            uint16_t h[2];
            memcpy(h, blk, 4);
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(dot, z)),
                                     _mm256_set1_ps(_cvtsh_ss(h[0]) * dx), acc[r]);
            if (has_m)
                mz[r] += _cvtsh_ss(h[1]) * v->fsum[b];
        }
    }
    for (int r = 0; r < R; r++) {
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc[r]), _mm256_extractf128_ps(acc[r], 1));
        s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        y[n + r] = _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1))) + mz[r];
    }
}

/* columns n .. n1, four rows at a time, for one format known at compile time */
AI void row_all(gp_dtype wt, const uint8_t *w, int64_t n, int64_t n1, int64_t K, float *y,
                const xq_view *v)
{
    size_t rb = gp_dtype_row_bytes(wt, K);
    int64_t nb = K / BLK;
    for (; n + 4 <= n1; n += 4)
        row_tile(4, wt, w, rb, n, nb, y, v);
    for (; n < n1; n++)
        row_tile(1, wt, w, rb, n, nb, y, v);
}

static void row(gp_dtype wt, const uint8_t *w, int64_t n0, int64_t n1, int64_t K, float *y,
                const void *ws)
{
    xq_view v = view_of(ws, 1, K);
    switch (wt) {
    case GP_Q4_0: row_all(GP_Q4_0, w, n0, n1, K, y, &v); break;
    case GP_Q4_1: row_all(GP_Q4_1, w, n0, n1, K, y, &v); break;
    case GP_Q5_0: row_all(GP_Q5_0, w, n0, n1, K, y, &v); break;
    case GP_Q5_1: row_all(GP_Q5_1, w, n0, n1, K, y, &v); break;
    case GP_Q8_0: row_all(GP_Q8_0, w, n0, n1, K, y, &v); break;
    default: GP_ASSERT(!"no one-row path for this format");
    }
}
