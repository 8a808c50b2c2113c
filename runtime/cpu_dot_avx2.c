/* The float products' kernel (runtime/cpu_dot.h) in AVX2 with FMA and F16C: the 16 lanes of an
 * accumulator in two ymm registers, one row of a at a time (16 registers hold no more). Built
 * with its own flags (runtime/kernels.cmake) and chosen at run time. */
#include <immintrin.h>
#include <string.h>

#include "runtime/cpu_dot.h"
#include "runtime/f16.h"

static inline __attribute__((always_inline)) __m256 ldw(gp_dtype wt, const char *p, int64_t k)
{
    if (wt == GP_F16)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p + 2 * k)));
    if (wt == GP_BF16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(p + 2 * k))), 16));
    return _mm256_loadu_ps((const float *)(const void *)p + k);
}

/* Element k of a w row as f32 (the tail). */
static float elt(gp_dtype wt, const char *p, int64_t k)
{
    uint16_t h;
    float f;
    if (wt == GP_F32) {
        memcpy(&f, p + 4 * k, 4);
        return f;
    }
    memcpy(&h, p + 2 * k, 2);
    return wt == GP_F16 ? gp_f16_to_f32(h) : gp_bf16_to_f32(h);
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
                xw[n][i] = elt(wt, w[n], k + i);
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
                 float *acc, int64_t am, int first, float *tot, int64_t ldt)
{
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
