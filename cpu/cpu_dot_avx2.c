/* The float products' kernels (cpu/cpu_dot.h: lanes, rows, attention's loops) in AVX2 with FMA
 * and F16C: the 16 lanes of an accumulator in two ymm registers, one row of a at a time (16
 * registers hold no more). Built with its own flags (cpu/CMakeLists.txt), chosen at run time. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "cpu/cpu_dot.h"
#include "ir/f16.h"

static inline __attribute__((always_inline)) __m256 ldw(gp_dtype wt, const char *p, int64_t k)
{
    if (wt == GP_F16)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p + 2 * k)));
    if (wt == GP_BF16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(p + 2 * k))), 16));
    return _mm256_loadu_ps((const float *)(const void *)p + k);
}

static inline __attribute__((always_inline)) void row(gp_dtype wt, int64_t kc, const float *a,
                                                      const char *const *w, float *acc, int first,
                                                      float *tot)
{
    __m256 c[GP_DOT_RN][2];
    const char *w0 = w[0], *w1 = w[1], *w2 = w[2], *w3 = w[3];
    for (int n = 0; n < GP_DOT_RN; n++) {
        c[n][0] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(acc + n * 16);
        c[n][1] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(acc + n * 16 + 8);
    }
    int64_t k = 0;
    for (; k + 16 <= kc; k += 16) {
        for (int h = 0; h < 2; h++) {
            __m256 x = _mm256_loadu_ps(a + k + 8 * h);
            c[0][h] = _mm256_fmadd_ps(x, ldw(wt, w0, k + 8 * h), c[0][h]);
            c[1][h] = _mm256_fmadd_ps(x, ldw(wt, w1, k + 8 * h), c[1][h]);
            c[2][h] = _mm256_fmadd_ps(x, ldw(wt, w2, k + 8 * h), c[2][h]);
            c[3][h] = _mm256_fmadd_ps(x, ldw(wt, w3, k + 8 * h), c[3][h]);
        }
    }
    if (k < kc) {
        /* The tail through zero-padded copies: +0 past kc, as the other builds. */
        _Alignas(32) float xa[16] = {0}, xw[GP_DOT_RN][16] = {{0}};
        for (int64_t i = 0; i < kc - k; i++) {
            xa[i] = a[k + i];
            for (int n = 0; n < GP_DOT_RN; n++)
                xw[n][i] = gp_dot_elt(wt, w[n], k + i);
        }
        for (int h = 0; h < 2; h++) {
            __m256 x = _mm256_load_ps(xa + 8 * h);
            for (int n = 0; n < GP_DOT_RN; n++)
                c[n][h] = _mm256_fmadd_ps(x, _mm256_load_ps(xw[n] + 8 * h), c[n][h]);
        }
    }
    if (tot) {
        for (int n = 0; n < GP_DOT_RN; n++) {
            _Alignas(32) float l[16];
            _mm256_store_ps(l, c[n][0]);
            _mm256_store_ps(l + 8, c[n][1]);
            tot[n] = gp_dot_total(l);
        }
        return;
    }
    for (int n = 0; n < GP_DOT_RN; n++) {
        _mm256_storeu_ps(acc + n * 16, c[n][0]);
        _mm256_storeu_ps(acc + n * 16 + 8, c[n][1]);
    }
}

void gp_dot_avx2(int rm, int64_t kc, const float *const *a, const char *const *w, gp_dtype wt,
                 float *acc, int64_t am, int first, float *tot, int64_t ldt, int64_t pf)
{
    (void)pf;
    for (int m = 0; m < rm; m++) {
        float *t = tot ? tot + m * ldt : NULL;
        if (wt == GP_F16)
            row(GP_F16, kc, a[m], w, acc + m * am, first, t);
        else if (wt == GP_BF16)
            row(GP_BF16, kc, a[m], w, acc + m * am, first, t);
        else
            row(GP_F32, kc, a[m], w, acc + m * am, first, t);
    }
}

/* ---- attention's loops (cpu/cpu_dot.h) ---- */

void gp_attn_scores_avx2(const float *q, const char *k, int64_t ks, gp_dtype kt, int64_t d,
                         int64_t n, float scale, float *sc)
{
    int64_t d16 = d / 16 * 16;
    for (int64_t s = 0; s < n; s++) {
        const char *kr = k + s * ks;
        __m256 c0 = _mm256_setzero_ps(), c1 = _mm256_setzero_ps();
        for (int64_t i = 0; i < d16; i += 16) {
            c0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), ldw(kt, kr, i), c0);
            c1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), ldw(kt, kr, i + 8), c1);
        }
        _Alignas(32) float l[16];
        _mm256_store_ps(l, c0);
        _mm256_store_ps(l + 8, c1);
        if (d16 < d) /* the tail: +0 past d up to 16, as the other builds */
            for (int64_t i = d16; i < d16 + 16; i++)
                l[i - d16] =
                    fmaf(i < d ? q[i] : 0.0f, i < d ? gp_dot_elt(kt, kr, i) : 0.0f, l[i - d16]);
        sc[s] = gp_dot_total(l) * scale;
    }
}

void gp_attn_accum_avx2(const float *w, const char *v, int64_t vs, gp_dtype vt, int64_t d,
                        int64_t n, float *acc)
{
    int64_t d8 = d / 8 * 8;
    for (int64_t i = 0; i < d8; i += 32) {
        int nv = d8 - i < 32 ? (int)((d8 - i) / 8) : 4;
        __m256 c[4];
        for (int j = 0; j < nv; j++)
            c[j] = _mm256_loadu_ps(acc + i + 8 * j);
        for (int64_t s = 0; s < n; s++) {
            __m256 x = _mm256_set1_ps(w[s]);
            const char *vr = v + s * vs;
            for (int j = 0; j < nv; j++)
                c[j] = _mm256_fmadd_ps(x, ldw(vt, vr, i + 8 * j), c[j]);
        }
        for (int j = 0; j < nv; j++)
            _mm256_storeu_ps(acc + i + 8 * j, c[j]);
    }
    for (int64_t i = d8; i < d; i++)
        for (int64_t s = 0; s < n; s++)
            acc[i] = fmaf(w[s], gp_dot_elt(vt, v + s * vs, i), acc[i]);
}

/* ---- rows: B [K, N] with n contiguous, one row of a at a time ---- */

static inline __attribute__((always_inline)) void rows_row(gp_dtype bt, int64_t kc, const float *a,
                                                           const char *b, int64_t ldb, int nc,
                                                           float *acc, int first)
{
    int nv = nc / 8;
    __m256 c[8];
    for (int j = 0; j < nv; j++)
        c[j] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(acc + 8 * j);
    for (int64_t k = 0; k < kc; k++) {
        __m256 x = _mm256_set1_ps(a[k]);
        const char *br = b + k * ldb;
        for (int j = 0; j < nv; j++)
            c[j] = _mm256_fmadd_ps(x, ldw(bt, br, 8 * j), c[j]);
    }
    for (int j = 0; j < nv; j++)
        _mm256_storeu_ps(acc + 8 * j, c[j]);
    for (int j = 8 * nv; j < nc; j++) {
        float t = first ? 0.0f : acc[j];
        for (int64_t k = 0; k < kc; k++)
            t = fmaf(a[k], gp_dot_elt(bt, b + k * ldb, j), t);
        acc[j] = t;
    }
}

void gp_rows_avx2(int rm, int64_t kc, const float *const *a, const char *b, int64_t ldb,
                  gp_dtype bt, int nc, float *acc, int first)
{
    for (int m = 0; m < rm; m++) {
        if (bt == GP_F16)
            rows_row(GP_F16, kc, a[m], b, ldb, nc, acc + m * 64, first);
        else if (bt == GP_BF16)
            rows_row(GP_BF16, kc, a[m], b, ldb, nc, acc + m * 64, first);
        else
            rows_row(GP_F32, kc, a[m], b, ldb, nc, acc + m * 64, first);
    }
}
