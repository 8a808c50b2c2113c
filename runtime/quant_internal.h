/* Inside runtime/quant*.c: the activation layout and the per-ISA row kernels the selector picks. */
#ifndef GP_RUNTIME_QUANT_INTERNAL_H
#define GP_RUNTIME_QUANT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "ir/core.h"

/* One activation row (runtime/quant.h): q[K] int8, then for 32-block weights d[K/32], ds[K/32]
 * (f32), for k-quant weights d[K/256] (f32) and bsum[K/16] (int16). */
typedef struct {
    const int8_t *q;      /* [K] */
    const float *d;       /* [K / 32] or [K / 256] */
    const float *ds;      /* [K / 32]; NULL for the k-quants */
    const int16_t *bsum;  /* [K / 16]; NULL for the 32-blocks */
} gp_qact;

static inline int gp_quant_is_k(gp_dtype t)
{
    return t == GP_Q4_K || t == GP_Q5_K || t == GP_Q6_K;
}

static inline gp_qact gp_qact_row(gp_dtype wt, const void *xq, int64_t K)
{
    const uint8_t *p = xq;
    gp_qact a = {(const int8_t *)p, (const float *)(p + K), NULL, NULL};
    if (gp_quant_is_k(wt))
        a.bsum = (const int16_t *)(p + K + 4 * (K / 256));
    else
        a.ds = (const float *)(p + K + 4 * (K / 32));
    return a;
}

/* y[r * ldy + n] = row n of w (rb bytes a row) . activation row r, for n in [n0, n1), r < R <= 4
 * (activation rows at xq + r * ab). One per ISA; each returns 0 when it has no kernel for wt. */
typedef int (*gp_quant_rows_fn)(gp_dtype wt, const uint8_t *w, size_t rb, int64_t n0, int64_t n1,
                                const uint8_t *xq, size_t ab, int R, int64_t K, float *y,
                                int64_t ldy);

int gp_quant_rows_avx2(gp_dtype wt, const uint8_t *w, size_t rb, int64_t n0, int64_t n1,
                       const uint8_t *xq, size_t ab, int R, int64_t K, float *y, int64_t ldy);
int gp_quant_rows_avx512(gp_dtype wt, const uint8_t *w, size_t rb, int64_t n0, int64_t n1,
                         const uint8_t *xq, size_t ab, int R, int64_t K, float *y, int64_t ldy);
int gp_quant_rows_avxvnni(gp_dtype wt, const uint8_t *w, size_t rb, int64_t n0, int64_t n1,
                          const uint8_t *xq, size_t ab, int R, int64_t K, float *y, int64_t ldy);
int gp_quant_rows_vnni(gp_dtype wt, const uint8_t *w, size_t rb, int64_t n0, int64_t n1,
                       const uint8_t *xq, size_t ab, int R, int64_t K, float *y, int64_t ldy);

/* q4_k / q5_k: the eight 6-bit scales and mins of a super-block's 12 packed bytes. */
static inline void gp_quant_k_scales(const uint8_t *s, uint8_t sc[8], uint8_t mn[8])
{
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
        sc[j + 4] = (uint8_t)((s[j + 8] & 15) | (s[j] >> 6) << 4);
        mn[j + 4] = (uint8_t)((s[j + 8] >> 4) | (s[j + 4] >> 6) << 4);
    }
}

/* The same as two u64 of 8 bytes each (byte j = sc_j, m_j), from three u32 of the packed bytes. */
static inline void gp_quant_k_scales64(const uint8_t *s, uint64_t *sc, uint64_t *mn)
{
    uint32_t a = (uint32_t)s[0] | (uint32_t)s[1] << 8 | (uint32_t)s[2] << 16 | (uint32_t)s[3] << 24;
    uint32_t b = (uint32_t)s[4] | (uint32_t)s[5] << 8 | (uint32_t)s[6] << 16 | (uint32_t)s[7] << 24;
    uint32_t c = (uint32_t)s[8] | (uint32_t)s[9] << 8 | (uint32_t)s[10] << 16 | (uint32_t)s[11] << 24;
    *sc = (a & 0x3f3f3f3fu) | (uint64_t)((c & 0x0f0f0f0fu) | (a >> 2 & 0x30303030u)) << 32;
    *mn = (b & 0x3f3f3f3fu) | (uint64_t)((c >> 4 & 0x0f0f0f0fu) | (b >> 2 & 0x30303030u)) << 32;
}

#endif
