/* The float products' kernel (cpu/cpu_dot.h) in AVX-512 F/BW/VL with FMA: one zmm per
 * accumulator, f16 weights widened in registers (vcvtph2ps), bf16 by a shift. Built with its own
 * flags (cpu/CMakeLists.txt) and chosen at run time. */
#include <immintrin.h>

#include "cpu/cpu_dot.h"

static inline __attribute__((always_inline)) __m512 ldw(gp_dtype wt, const char *p, int64_t k)
{
    if (wt == GP_F16)
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p + 2 * k)));
    if (wt == GP_BF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(p + 2 * k))), 16));
    return _mm512_loadu_ps((const float *)(const void *)p + k);
}

/* The same with lanes past the mask zero (no read there). */
static inline __attribute__((always_inline)) __m512 ldw_mask(gp_dtype wt, const char *p, int64_t k,
                                                             __mmask16 m)
{
    if (wt == GP_F16)
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p + 2 * k));
    if (wt == GP_BF16)
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p + 2 * k)), 16));
    return _mm512_maskz_loadu_ps(m, (const float *)(const void *)p + k);
}

/* rm and wt are constants after inlining: one unrolled loop per case. */
/* gp_dot_total of four accumulators at once, the same additions in the same order:
 * t[n] = total of c[n]. */
static inline __attribute__((always_inline)) void totals4(const __m512 *c, float *t)
{
    __m256 y[4];
    for (int n = 0; n < 4; n++) /* s8[i] = l[i] + l[i + 8] */
        y[n] = _mm256_add_ps(_mm512_castps512_ps256(c[n]), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(c[n]), 1)));
    /* s4[i] = s8[i] + s8[i + 4]: outputs 0 and 1 in t01 (halves), 2 and 3 in t23 */
    __m256 t01 = _mm256_add_ps(_mm256_permute2f128_ps(y[0], y[1], 0x20),
                               _mm256_permute2f128_ps(y[0], y[1], 0x31));
    __m256 t23 = _mm256_add_ps(_mm256_permute2f128_ps(y[2], y[3], 0x20),
                               _mm256_permute2f128_ps(y[2], y[3], 0x31));
    /* (s4[0] + s4[2]), (s4[1] + s4[3]): per half [out a: both, out b: both] */
    __m256 w = _mm256_add_ps(_mm256_shuffle_ps(t01, t23, _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm256_shuffle_ps(t01, t23, _MM_SHUFFLE(3, 2, 3, 2)));
    __m256 r = _mm256_add_ps(_mm256_shuffle_ps(w, w, _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm256_shuffle_ps(w, w, _MM_SHUFFLE(3, 1, 3, 1)));
    /* r: lower half [t0, t2, t0, t2], upper half [t1, t3, t1, t3] */
    __m128 lo = _mm256_castps256_ps128(r), hi = _mm256_extractf128_ps(r, 1);
    t[0] = _mm_cvtss_f32(lo);
    t[1] = _mm_cvtss_f32(hi);
    t[2] = _mm_cvtss_f32(_mm_shuffle_ps(lo, lo, 1));
    t[3] = _mm_cvtss_f32(_mm_shuffle_ps(hi, hi, 1));
}

static inline __attribute__((always_inline)) void tile(int rm, gp_dtype wt, int64_t kc,
                                                       const float *const *a, const char *const *w,
                                                       float *acc, int64_t am, int first,
                                                       float *tot, int64_t ldt, int64_t pf)
{
    __m512 c[GP_DOT_RM][GP_DOT_RN];
    const float *ar[GP_DOT_RM];
    const char *w0 = w[0], *w1 = w[1], *w2 = w[2], *w3 = w[3];
    for (int m = 0; m < rm; m++) {
        ar[m] = a[m];
        for (int n = 0; n < GP_DOT_RN; n++)
            c[m][n] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + m * am + n * 16);
    }
    int64_t k = 0;
    int64_t es = wt == GP_F32 ? 4 : 2;
    for (; k + 16 <= kc; k += 16) {
        if (pf) {
            _mm_prefetch(w0 + es * k + pf, _MM_HINT_T0);
            _mm_prefetch(w1 + es * k + pf, _MM_HINT_T0);
            _mm_prefetch(w2 + es * k + pf, _MM_HINT_T0);
            _mm_prefetch(w3 + es * k + pf, _MM_HINT_T0);
        }
        __m512 v0 = ldw(wt, w0, k), v1 = ldw(wt, w1, k), v2 = ldw(wt, w2, k), v3 = ldw(wt, w3, k);
        for (int m = 0; m < rm; m++) {
            __m512 x = _mm512_loadu_ps(ar[m] + k);
            c[m][0] = _mm512_fmadd_ps(x, v0, c[m][0]);
            c[m][1] = _mm512_fmadd_ps(x, v1, c[m][1]);
            c[m][2] = _mm512_fmadd_ps(x, v2, c[m][2]);
            c[m][3] = _mm512_fmadd_ps(x, v3, c[m][3]);
        }
    }
    if (k < kc) {
        __mmask16 mk = (__mmask16)((1u << (kc - k)) - 1);
        __m512 v0 = ldw_mask(wt, w0, k, mk), v1 = ldw_mask(wt, w1, k, mk);
        __m512 v2 = ldw_mask(wt, w2, k, mk), v3 = ldw_mask(wt, w3, k, mk);
        for (int m = 0; m < rm; m++) {
            __m512 x = _mm512_maskz_loadu_ps(mk, ar[m] + k);
            c[m][0] = _mm512_fmadd_ps(x, v0, c[m][0]);
            c[m][1] = _mm512_fmadd_ps(x, v1, c[m][1]);
            c[m][2] = _mm512_fmadd_ps(x, v2, c[m][2]);
            c[m][3] = _mm512_fmadd_ps(x, v3, c[m][3]);
        }
    }
    if (tot) {
        for (int m = 0; m < rm; m++)
            totals4(c[m], tot + m * ldt);
        return;
    }
    for (int m = 0; m < rm; m++)
        for (int n = 0; n < GP_DOT_RN; n++)
            _mm512_storeu_ps(acc + m * am + n * 16, c[m][n]);
}

#define GP_DOT_CASES(wt)                                                                           \
    switch (rm) {                                                                                  \
    case 1: tile(1, wt, kc, a, w, acc, am, first, tot, ldt, pf); break;                                                 \
    case 2: tile(2, wt, kc, a, w, acc, am, first, tot, ldt, pf); break;                                                 \
    case 3: tile(3, wt, kc, a, w, acc, am, first, tot, ldt, pf); break;                                                 \
    case 4: tile(4, wt, kc, a, w, acc, am, first, tot, ldt, pf); break;                                                 \
    case 5: tile(5, wt, kc, a, w, acc, am, first, tot, ldt, pf); break;                                                 \
    default: tile(6, wt, kc, a, w, acc, am, first, tot, ldt, pf); break;                                                \
    }

void gp_dot_avx512(int rm, int64_t kc, const float *const *a, const char *const *w, gp_dtype wt,
                   float *acc, int64_t am, int first, float *tot, int64_t ldt, int64_t pf)
{
    if (wt == GP_F16) {
        GP_DOT_CASES(GP_F16)
    } else if (wt == GP_BF16) {
        GP_DOT_CASES(GP_BF16)
    } else {
        GP_DOT_CASES(GP_F32)
    }
}

/* ---- attention's loops ---- */

/* Four rows of k at once: their lanes' totals in one totals4 (the same additions per row). */
static inline __attribute__((always_inline)) void scores4(gp_dtype kt, const float *q,
                                                          const char *k, int64_t ks, int64_t d,
                                                          float scale, float *sc)
{
    __m512 c[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps()};
    int64_t i = 0;
    for (; i + 16 <= d; i += 16) {
        __m512 x = _mm512_loadu_ps(q + i);
        for (int j = 0; j < 4; j++)
            c[j] = _mm512_fmadd_ps(x, ldw(kt, k + j * ks, i), c[j]);
    }
    if (i < d) {
        __mmask16 mk = (__mmask16)((1u << (d - i)) - 1);
        __m512 x = _mm512_maskz_loadu_ps(mk, q + i);
        for (int j = 0; j < 4; j++)
            c[j] = _mm512_fmadd_ps(x, ldw_mask(kt, k + j * ks, i, mk), c[j]);
    }
    float t[4];
    totals4(c, t);
    for (int j = 0; j < 4; j++)
        sc[j] = t[j] * scale;
}

void gp_attn_scores_avx512(const float *q, const char *k, int64_t ks, gp_dtype kt, int64_t d,
                           int64_t n, float scale, float *sc)
{
    int64_t s0 = 0;
    for (; s0 + 4 <= n; s0 += 4) {
        if (kt == GP_F16)
            scores4(GP_F16, q, k + s0 * ks, ks, d, scale, sc + s0);
        else if (kt == GP_BF16)
            scores4(GP_BF16, q, k + s0 * ks, ks, d, scale, sc + s0);
        else
            scores4(GP_F32, q, k + s0 * ks, ks, d, scale, sc + s0);
    }
    for (int64_t s = s0; s < n; s++) {
        const char *kr = k + s * ks;
        __m512 c = _mm512_setzero_ps();
        int64_t i = 0;
        for (; i + 16 <= d; i += 16)
            c = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), ldw(kt, kr, i), c);
        if (i < d) {
            __mmask16 mk = (__mmask16)((1u << (d - i)) - 1);
            c = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, q + i), ldw_mask(kt, kr, i, mk), c);
        }
        __m512 c4[4] = {c, c, c, c};
        float t[4];
        totals4(c4, t);
        sc[s] = t[0] * scale;
    }
}

/* R query heads against four rows of k: each row loaded and widened once for all R, every
 * (head, row) chain and total as scores4's. */
static inline __attribute__((always_inline)) void scores4_group(int R, gp_dtype kt,
                                                                const float *const *q,
                                                                const char *k, int64_t ks,
                                                                int64_t d, float scale,
                                                                float *const *sc, int64_t s0)
{
    __m512 c[GP_ATTN_GROUP][4];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < 4; j++)
            c[r][j] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= d; i += 16) {
        __m512 kv[4];
        for (int j = 0; j < 4; j++)
            kv[j] = ldw(kt, k + j * ks, i);
        for (int r = 0; r < R; r++) {
            __m512 x = _mm512_loadu_ps(q[r] + i);
            for (int j = 0; j < 4; j++)
                c[r][j] = _mm512_fmadd_ps(x, kv[j], c[r][j]);
        }
    }
    if (i < d) {
        __mmask16 mk = (__mmask16)((1u << (d - i)) - 1);
        __m512 kv[4];
        for (int j = 0; j < 4; j++)
            kv[j] = ldw_mask(kt, k + j * ks, i, mk);
        for (int r = 0; r < R; r++) {
            __m512 x = _mm512_maskz_loadu_ps(mk, q[r] + i);
            for (int j = 0; j < 4; j++)
                c[r][j] = _mm512_fmadd_ps(x, kv[j], c[r][j]);
        }
    }
    for (int r = 0; r < R; r++) {
        float t[4];
        totals4(c[r], t);
        for (int j = 0; j < 4; j++)
            sc[r][s0 + j] = t[j] * scale;
    }
}

static inline __attribute__((always_inline)) void scores_group(int R, gp_dtype kt,
                                                               const float *const *q,
                                                               const char *k, int64_t ks,
                                                               int64_t d, int64_t n, float scale,
                                                               float *const *sc)
{
    int64_t s0 = 0;
    for (; s0 + 4 <= n; s0 += 4)
        scores4_group(R, kt, q, k + s0 * ks, ks, d, scale, sc, s0);
    for (int r = 0; r < R && s0 < n; r++) /* the last rows one at a time, as one head does */
        gp_attn_scores_avx512(q[r], k + s0 * ks, ks, kt, d, n - s0, scale, sc[r] + s0);
}

void gp_attn_scores_group_avx512(int R, const float *const *q, const char *k, int64_t ks,
                                 gp_dtype kt, int64_t d, int64_t n, float scale, float *const *sc)
{
#define QG(RR, T)                                                                                  \
    case RR:                                                                                       \
        scores_group(RR, T, q, k, ks, d, n, scale, sc);                                            \
        break;
#define QG_T(T)                                                                                    \
    switch (R) {                                                                                   \
        QG(2, T) QG(3, T) QG(4, T)                                                                 \
    default:                                                                                       \
        scores_group(1, T, q, k, ks, d, n, scale, sc);                                             \
    }
    if (kt == GP_F16) {
        QG_T(GP_F16)
    } else if (kt == GP_BF16) {
        QG_T(GP_BF16)
    } else {
        QG_T(GP_F32)
    }
#undef QG_T
#undef QG
}

/* R heads' accumulators for up to 64 elements in registers over every s, each row of v loaded
 * and widened once for all R; every head's chain as accum64's. */
static inline __attribute__((always_inline)) void accum64_group(int R, gp_dtype vt,
                                                                const float *const *w,
                                                                const char *v, int64_t vs,
                                                                int64_t d, int64_t n,
                                                                float *const *acc, int64_t off)
{
    __mmask16 mk[4];
    __m512 c[GP_ATTN_GROUP][4];
    for (int j = 0; j < 4; j++) {
        int64_t left = d - 16 * j;
        mk[j] = left >= 16 ? (__mmask16)0xffff : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
    }
    for (int r = 0; r < R; r++)
        for (int j = 0; j < 4; j++)
            c[r][j] = _mm512_maskz_loadu_ps(mk[j], acc[r] + off + 16 * j);
    for (int64_t s = 0; s < n; s++) {
        const char *vr = v + s * vs;
        __m512 vv[4];
        for (int j = 0; j < 4; j++)
            vv[j] = d == 64 ? ldw(vt, vr, 16 * j) : ldw_mask(vt, vr, 16 * j, mk[j]);
        for (int r = 0; r < R; r++) {
            __m512 x = _mm512_set1_ps(w[r][s]);
            for (int j = 0; j < 4; j++)
                c[r][j] = _mm512_fmadd_ps(x, vv[j], c[r][j]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int j = 0; j < 4; j++)
            _mm512_mask_storeu_ps(acc[r] + off + 16 * j, mk[j], c[r][j]);
}

void gp_attn_accum_group_avx512(int R, const float *const *w, const char *v, int64_t vs,
                                gp_dtype vt, int64_t d, int64_t n, float *const *acc)
{
    int64_t es = vt == GP_F32 ? 4 : 2;
    for (int64_t i = 0; i < d; i += 64) {
        int64_t m = d - i < 64 ? d - i : 64;
#define QA(RR, T)                                                                                  \
    case RR:                                                                                       \
        accum64_group(RR, T, w, v + i * es, vs, m, n, acc, i);                                     \
        break;
#define QA_T(T)                                                                                    \
    switch (R) {                                                                                   \
        QA(2, T) QA(3, T) QA(4, T)                                                                 \
    default:                                                                                       \
        accum64_group(1, T, w, v + i * es, vs, m, n, acc, i);                                      \
    }
        if (vt == GP_F16) {
            QA_T(GP_F16)
        } else if (vt == GP_BF16) {
            QA_T(GP_BF16)
        } else {
            QA_T(GP_F32)
        }
#undef QA_T
#undef QA
    }
}

/* Up to 64 elements of acc in registers over every s. */
static inline __attribute__((always_inline)) void accum64(gp_dtype vt, const float *w,
                                                          const char *v, int64_t vs, int64_t d,
                                                          int64_t n, float *acc)
{
    __mmask16 mk[4];
    __m512 c[4];
    for (int j = 0; j < 4; j++) {
        int64_t left = d - 16 * j;
        mk[j] = left >= 16 ? (__mmask16)0xffff : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
        c[j] = _mm512_maskz_loadu_ps(mk[j], acc + 16 * j);
    }
    if (d == 64) {
        for (int64_t s = 0; s < n; s++) {
            __m512 x = _mm512_set1_ps(w[s]);
            const char *vr = v + s * vs;
            for (int j = 0; j < 4; j++)
                c[j] = _mm512_fmadd_ps(x, ldw(vt, vr, 16 * j), c[j]);
        }
    } else {
        for (int64_t s = 0; s < n; s++) {
            __m512 x = _mm512_set1_ps(w[s]);
            const char *vr = v + s * vs;
            for (int j = 0; j < 4; j++)
                if (mk[j])
                    c[j] = _mm512_fmadd_ps(x, ldw_mask(vt, vr, 16 * j, mk[j]), c[j]);
        }
    }
    for (int j = 0; j < 4; j++)
        _mm512_mask_storeu_ps(acc + 16 * j, mk[j], c[j]);
}

void gp_attn_accum_avx512(const float *w, const char *v, int64_t vs, gp_dtype vt, int64_t d,
                          int64_t n, float *acc)
{
    int64_t es = vt == GP_F32 ? 4 : 2;
    for (int64_t i = 0; i < d; i += 64) {
        int64_t m = d - i < 64 ? d - i : 64;
        if (vt == GP_F16)
            accum64(GP_F16, w, v + i * es, vs, m, n, acc + i);
        else if (vt == GP_BF16)
            accum64(GP_BF16, w, v + i * es, vs, m, n, acc + i);
        else
            accum64(GP_F32, w, v + i * es, vs, m, n, acc + i);
    }
}

/* ---- rows: B [K, N] with n contiguous ---- */

static inline __attribute__((always_inline)) void rows_tile(int rm, gp_dtype bt, int64_t kc,
                                                            const float *const *a, const char *b,
                                                            int64_t ldb, int nc, float *acc,
                                                            int first)
{
    __m512 c[GP_DOT_RM][4];
    __mmask16 mk[4];
    int nv = (nc + 15) / 16;
    const float *ar[GP_DOT_RM];
    for (int j = 0; j < 4; j++) {
        int left = nc - 16 * j;
        mk[j] = left >= 16 ? (__mmask16)0xffff : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
    }
    for (int m = 0; m < rm; m++) {
        ar[m] = a[m];
        for (int j = 0; j < 4; j++)
            c[m][j] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + m * 64 + 16 * j);
    }
    if (nv == 4 && mk[3] == 0xffff) {
        for (int64_t k = 0; k < kc; k++) {
            const char *br = b + k * ldb;
            _mm_prefetch(br + 8 * ldb, _MM_HINT_T0);
            _mm_prefetch(br + 8 * ldb + 64, _MM_HINT_T0);
            __m512 v0 = ldw(bt, br, 0), v1 = ldw(bt, br, 16), v2 = ldw(bt, br, 32), v3 = ldw(bt, br, 48);
            for (int m = 0; m < rm; m++) {
                __m512 x = _mm512_set1_ps(ar[m][k]);
                c[m][0] = _mm512_fmadd_ps(x, v0, c[m][0]);
                c[m][1] = _mm512_fmadd_ps(x, v1, c[m][1]);
                c[m][2] = _mm512_fmadd_ps(x, v2, c[m][2]);
                c[m][3] = _mm512_fmadd_ps(x, v3, c[m][3]);
            }
        }
    } else {
        for (int64_t k = 0; k < kc; k++) {
            const char *br = b + k * ldb;
            __m512 v[4];
            for (int j = 0; j < 4; j++)
                v[j] = ldw_mask(bt, br, 16 * j, mk[j]);
            for (int m = 0; m < rm; m++) {
                __m512 x = _mm512_set1_ps(ar[m][k]);
                for (int j = 0; j < 4; j++)
                    c[m][j] = _mm512_fmadd_ps(x, v[j], c[m][j]);
            }
        }
    }
    for (int m = 0; m < rm; m++)
        for (int j = 0; j < 4; j++)
            _mm512_storeu_ps(acc + m * 64 + 16 * j, c[m][j]);
}

#define GP_ROWS_CASES(bt)                                                                          \
    switch (rm) {                                                                                  \
    case 1: rows_tile(1, bt, kc, a, b, ldb, nc, acc, first); break;                                \
    case 2: rows_tile(2, bt, kc, a, b, ldb, nc, acc, first); break;                                \
    case 3: rows_tile(3, bt, kc, a, b, ldb, nc, acc, first); break;                                \
    case 4: rows_tile(4, bt, kc, a, b, ldb, nc, acc, first); break;                                \
    case 5: rows_tile(5, bt, kc, a, b, ldb, nc, acc, first); break;                                \
    default: rows_tile(6, bt, kc, a, b, ldb, nc, acc, first); break;                               \
    }

void gp_rows_avx512(int rm, int64_t kc, const float *const *a, const char *b, int64_t ldb,
                    gp_dtype bt, int nc, float *acc, int first)
{
    if (bt == GP_F16) {
        GP_ROWS_CASES(GP_F16)
    } else if (bt == GP_BF16) {
        GP_ROWS_CASES(GP_BF16)
    } else {
        GP_ROWS_CASES(GP_F32)
    }
}
