/* One row of x (M = 1: a decode step's products) on the integer path, for every block format (the
 * k-quants a super-block of 256 at a time, x's blocks of 32 its sub-blocks), included by
 * cpu/quant_int_x86.h in its 256-bit variants (avx2, avxvnni). The tile path
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

/* the sum of a's eight lanes */
AI float row_hsum(__m256 a)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
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
    for (int r = 0; r < R; r++)
        y[n + r] = row_hsum(acc[r]) + mz[r];
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

/* ---- the k-quants: super-blocks of 256, x's blocks of 32 their sub-blocks ---- */

/* sub-blocks 2 j and 2 j + 1 of a q4_k / q5_k super-block b (x's blocks in element order) as 16-bit
 * integers: *a0, *a1 the first (elements 0-15, 16-31), *c0, *c1 the second */
AI void rowk_unpack(gp_dtype wt, const uint8_t *b, int j, __m256i *a0, __m256i *a1, __m256i *c0,
                    __m256i *c1)
{
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const uint8_t *qs = b + (wt == GP_Q4_K ? 16 : 48) + 32 * j;
    __m256i q = _mm256_loadu_si256((const __m256i *)qs);
    __m256i a = _mm256_and_si256(q, m4), c = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
    if (wt == GP_Q5_K) { /* element l's fifth bit: bit 2 j (first) or 2 j + 1 of qh[l] */
        __m256i h = _mm256_loadu_si256((const __m256i *)(b + 16));
        const __m256i ba = _mm256_set1_epi8((char)(1 << (2 * j))),
                      bc = _mm256_set1_epi8((char)(2 << (2 * j))), f = _mm256_set1_epi8(0x10);
        a = _mm256_or_si256(a, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(h, ba), ba), f));
        c = _mm256_or_si256(c, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(h, bc), bc), f));
    }
    *a0 = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(a));
    *a1 = _mm256_cvtepu8_epi16(_mm256_extracti128_si256(a, 1));
    *c0 = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(c));
    *c1 = _mm256_cvtepu8_epi16(_mm256_extracti128_si256(c, 1));
}

/* sub-block t (elements 32 t .. 32 t + 31) of a q6_k super-block as q - 32 in 16 bits */
AI void row6_unpack(const uint8_t *b, int t, __m256i *lo, __m256i *hi)
{
    int n = t / 4, k = t % 4;
    const uint8_t *ql = b + 64 * n + (k & 1) * 32, *qh = b + 128 + 32 * n;
    __m256i l = _mm256_loadu_si256((const __m256i *)ql), h = _mm256_loadu_si256((const __m256i *)qh);
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(0x03);
    l = k < 2 ? _mm256_and_si256(l, m4) : _mm256_and_si256(_mm256_srli_epi16(l, 4), m4);
    h = _mm256_and_si256(_mm256_srli_epi16(h, 2 * k), m2);
    __m256i q = _mm256_sub_epi8(_mm256_or_si256(l, _mm256_slli_epi16(h, 4)), _mm256_set1_epi8(32));
    *lo = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(q));
    *hi = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(q, 1));
}

/* y[n .. n + R) for q4_k, q5_k and q6_k: as row_tile, a super-block at a time. A sub-block's
 * dot (q4_k/q5_k: q <= 31; q6_k: |q - 32| <= 32, over each group of 16 apart) sums at most 4
 * products of 32 * 32385 a lane: exact in f32. Each lane then scales by the weight's d times
 * its sub-block's (or group's) scale times x's block d, broadcast from a vector of the eight;
 * q4_k/q5_k's minimums come off as dmin m times x's f32 block sums, eight at once. */
AI void rowk_tile(const int R, gp_dtype wt, const uint8_t *w, size_t rb, int64_t n, int64_t nsb,
                  float *y, const xq_view *v)
{
    size_t bb = gp_dtype_block_bytes(wt);
    __m256 acc[4], mz[4];
    for (int r = 0; r < R; r++)
        acc[r] = _mm256_setzero_ps(), mz[r] = _mm256_setzero_ps();
    for (int64_t sb = 0; sb < nsb; sb++) {
        __m256 dx = _mm256_loadu_ps(v->d + 8 * sb) /* x's d of the eight blocks */;
        const char *pf = (const char *)w + (size_t)(n + R) * rb + (size_t)sb * R * bb;
        for (int i = 0; i < R * (int)bb; i += 64)
            _mm_prefetch(pf + i, _MM_HINT_T0);
        __m256 sc[4][2]; /* [row] the eight sub-blocks' (q6_k: sixteen groups') d sc dx */
        for (int r = 0; r < R; r++) {
            const uint8_t *blk = w + (size_t)(n + r) * rb + (size_t)sb * bb;
            if (wt == GP_Q6_K) {
                uint16_t h;
                memcpy(&h, blk + 208, 2);
                __m128i s8 = _mm_loadu_si128((const __m128i *)(blk + 192));
                __m256 d = _mm256_set1_ps(_cvtsh_ss(h));
                const __m256i i0 = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3),
                              i1 = _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7);
                sc[r][0] = _mm256_mul_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(s8))),
                                         _mm256_permutevar8x32_ps(dx, i0));
                sc[r][1] = _mm256_mul_ps(
                    _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(s8, 8)))),
                    _mm256_permutevar8x32_ps(dx, i1));
            } else {
                uint16_t h[2];
                uint8_t s6[8], m6[8];
                memcpy(h, blk, 4);
                gp_quant_k_scales(blk + 4, s6, m6);
                __m128i sv = _mm_loadl_epi64((const __m128i *)s6), mv = _mm_loadl_epi64((const __m128i *)m6);
                sc[r][0] = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(h[0])),
                                                       _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sv))),
                                         dx);
                mz[r] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(h[1])),
                                                      _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(mv))),
                                        _mm256_loadu_ps(v->fsum + 8 * sb), mz[r]);
            }
        }
        for (int t = 0; t < 8; t += 2) {
            const int8_t *xq = v->q + (8 * sb + t) * 2 * BLK;
            __m256i x0 = row_x16(xq, xq + BLK), x1 = row_x16(xq + 16, xq + BLK + 16);
            __m256i x2 = row_x16(xq + 2 * BLK, xq + 3 * BLK),
                    x3 = row_x16(xq + 2 * BLK + 16, xq + 3 * BLK + 16);
            for (int r = 0; r < R; r++) {
                const uint8_t *blk = w + (size_t)(n + r) * rb + (size_t)sb * bb;
                __m256i a0, a1, c0, c1;
                if (wt == GP_Q6_K) {
                    row6_unpack(blk, t, &a0, &a1);
                    row6_unpack(blk, t + 1, &c0, &c1);
                    /* groups 2 t .. 2 t + 3 of sixteen: lanes of sc[r][t / 4] */
                    __m256 s = sc[r][t / 4];
                    int g = 2 * (t % 4);
                    __m256 dots[4] = {
                        _mm256_cvtepi32_ps(_mm256_madd_epi16(a0, x0)),
                        _mm256_cvtepi32_ps(_mm256_madd_epi16(a1, x1)),
                        _mm256_cvtepi32_ps(_mm256_madd_epi16(c0, x2)),
                        _mm256_cvtepi32_ps(_mm256_madd_epi16(c1, x3))};
                    for (int i = 0; i < 4; i++)
                        acc[r] = _mm256_fmadd_ps(
                            dots[i], _mm256_permutevar8x32_ps(s, _mm256_set1_epi32(g + i)), acc[r]);
                } else {
                    rowk_unpack(wt, blk, t / 2, &a0, &a1, &c0, &c1);
                    __m256i da = _mm256_add_epi32(_mm256_madd_epi16(a0, x0), _mm256_madd_epi16(a1, x1));
                    __m256i dc = _mm256_add_epi32(_mm256_madd_epi16(c0, x2), _mm256_madd_epi16(c1, x3));
                    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(da),
                                             _mm256_permutevar8x32_ps(sc[r][0], _mm256_set1_epi32(t)),
                                             acc[r]);
                    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dc),
                                             _mm256_permutevar8x32_ps(sc[r][0], _mm256_set1_epi32(t + 1)),
                                             acc[r]);
                }
            }
        }
    }
    for (int r = 0; r < R; r++)
        y[n + r] = row_hsum(acc[r]) * (1.0f / 254.0f) - row_hsum(mz[r]);
}

AI void rowk_all(gp_dtype wt, const uint8_t *w, int64_t n, int64_t n1, int64_t K, float *y,
                 const xq_view *v)
{
    size_t rb = gp_dtype_row_bytes(wt, K);
    int64_t nsb = K / 256;
    for (; n + 4 <= n1; n += 4)
        rowk_tile(4, wt, w, rb, n, nsb, y, v);
    for (; n < n1; n++)
        rowk_tile(1, wt, w, rb, n, nsb, y, v);
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
    case GP_Q4_K: rowk_all(GP_Q4_K, w, n0, n1, K, y, &v); break;
    case GP_Q5_K: rowk_all(GP_Q5_K, w, n0, n1, K, y, &v); break;
    case GP_Q6_K: rowk_all(GP_Q6_K, w, n0, n1, K, y, &v); break;
    default: GP_ASSERT(!"no one-row path for this format");
    }
}
