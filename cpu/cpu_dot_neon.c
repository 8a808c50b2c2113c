/* The float products' kernels (cpu/cpu_dot.h: lanes, rows, attention's loops) in AArch64 NEON
 * (Advanced SIMD, every ARMv8-A processor): the 16 lanes of an accumulator in four q registers,
 * f16 widened by FCVTL (no FEAT_FP16 arithmetic: the products are f32 fused multiply-adds, the
 * same bits as the x86 builds), bf16 by a shift. */
#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "cpu/cpu_dot.h"

#define AI static inline __attribute__((always_inline))

/* Elements k .. k + 3 of a row of dtype wt at p, as f32 (exact: f16 and bf16 widen exactly). */
AI float32x4_t ldw4(gp_dtype wt, const char *p, int64_t k)
{
    if (wt == GP_F16)
        return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)(const void *)p + k)));
    if (wt == GP_BF16)
        return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16((const uint16_t *)(const void *)p + k), 16));
    return vld1q_f32((const float *)(const void *)p + k);
}

/* Elements k .. k + 15 into v[0..3]. */
AI void ldw16(gp_dtype wt, const char *p, int64_t k, float32x4_t *v)
{
    if (wt == GP_F16) {
        const uint16_t *h = (const uint16_t *)(const void *)p + k;
        float16x8_t a = vreinterpretq_f16_u16(vld1q_u16(h)), b = vreinterpretq_f16_u16(vld1q_u16(h + 8));
        v[0] = vcvt_f32_f16(vget_low_f16(a));
        v[1] = vcvt_high_f32_f16(a);
        v[2] = vcvt_f32_f16(vget_low_f16(b));
        v[3] = vcvt_high_f32_f16(b);
        return;
    }
    if (wt == GP_BF16) {
        const uint16_t *h = (const uint16_t *)(const void *)p + k;
        uint16x8_t a = vld1q_u16(h), b = vld1q_u16(h + 8);
        v[0] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(a), 16));
        v[1] = vreinterpretq_f32_u32(vshll_high_n_u16(a, 16));
        v[2] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(b), 16));
        v[3] = vreinterpretq_f32_u32(vshll_high_n_u16(b, 16));
        return;
    }
    for (int i = 0; i < 4; i++)
        v[i] = vld1q_f32((const float *)(const void *)p + k + 4 * i);
}

/* gp_dot_total of lanes 0-3, 4-7, 8-11, 12-15 in c[0..3]: s8 = (c0 + c2, c1 + c3), s4 = their sum,
 * then (s4[0] + s4[2]) + (s4[1] + s4[3]). */
AI float total16(const float32x4_t *c)
{
    float32x4_t s4 = vaddq_f32(vaddq_f32(c[0], c[2]), vaddq_f32(c[1], c[3]));
    return vpadds_f32(vadd_f32(vget_low_f32(s4), vget_high_f32(s4)));
}

/* ---- the lanes kernel (gp_dot_fn) ----
 * MR (<= 3) rows of a against 2 rows of w: 24 accumulator registers; the caller's 4 rows of w
 * take two passes (a's rows come from L1 the second time). */
AI void dot_block(int MR, gp_dtype wt, int64_t kc, const float *const *a, const char *w0,
                  const char *w1, float *acc, int64_t am, int first, float *tot, int64_t ldt,
                  int64_t pf)
{
    float32x4_t c[3][2][4];
    for (int m = 0; m < MR; m++)
        for (int n = 0; n < 2; n++)
            for (int i = 0; i < 4; i++)
                c[m][n][i] = first ? vdupq_n_f32(0.0f) : vld1q_f32(acc + m * am + n * 16 + 4 * i);
    int64_t es = wt == GP_F32 ? 4 : 2, k = 0;
    for (; k + 16 <= kc; k += 16) {
        if (pf) {
            __builtin_prefetch(w0 + es * k + pf);
            __builtin_prefetch(w1 + es * k + pf);
        }
        float32x4_t v0[4], v1[4];
        ldw16(wt, w0, k, v0);
        ldw16(wt, w1, k, v1);
        for (int m = 0; m < MR; m++)
            for (int i = 0; i < 4; i++) {
                float32x4_t x = vld1q_f32(a[m] + k + 4 * i);
                c[m][0][i] = vfmaq_f32(c[m][0][i], x, v0[i]);
                c[m][1][i] = vfmaq_f32(c[m][1][i], x, v1[i]);
            }
    }
    if (k < kc) {
        /* the tail through zero-padded copies: +0 past kc, as the other builds */
        float xw[2][16] = {{0}};
        for (int64_t i = 0; i < kc - k; i++) {
            xw[0][i] = gp_dot_elt(wt, w0, k + i);
            xw[1][i] = gp_dot_elt(wt, w1, k + i);
        }
        for (int m = 0; m < MR; m++) {
            float xa[16] = {0};
            for (int64_t i = 0; i < kc - k; i++)
                xa[i] = a[m][k + i];
            for (int i = 0; i < 4; i++) {
                float32x4_t x = vld1q_f32(xa + 4 * i);
                c[m][0][i] = vfmaq_f32(c[m][0][i], x, vld1q_f32(xw[0] + 4 * i));
                c[m][1][i] = vfmaq_f32(c[m][1][i], x, vld1q_f32(xw[1] + 4 * i));
            }
        }
    }
    for (int m = 0; m < MR; m++)
        for (int n = 0; n < 2; n++) {
            if (tot)
                tot[m * ldt + n] = total16(c[m][n]);
            else
                for (int i = 0; i < 4; i++)
                    vst1q_f32(acc + m * am + n * 16 + 4 * i, c[m][n][i]);
        }
}

AI void dot_typed(gp_dtype wt, int rm, int64_t kc, const float *const *a, const char *const *w,
                  float *acc, int64_t am, int first, float *tot, int64_t ldt, int64_t pf)
{
    for (int m = 0; m < rm; m += 3) {
        int mr = rm - m < 3 ? rm - m : 3;
        for (int n = 0; n < GP_DOT_RN; n += 2) {
            /* acc is NULL when tot is not */
            float *ac = acc ? acc + m * am + n * 16 : NULL, *tt = tot ? tot + m * ldt + n : NULL;
            if (mr == 3)
                dot_block(3, wt, kc, a + m, w[n], w[n + 1], ac, am, first, tt, ldt, pf);
            else if (mr == 2)
                dot_block(2, wt, kc, a + m, w[n], w[n + 1], ac, am, first, tt, ldt, pf);
            else
                dot_block(1, wt, kc, a + m, w[n], w[n + 1], ac, am, first, tt, ldt, pf);
        }
    }
}

void gp_dot_neon(int rm, int64_t kc, const float *const *a, const char *const *w, gp_dtype wt,
                 float *acc, int64_t am, int first, float *tot, int64_t ldt, int64_t pf)
{
    if (wt == GP_F16)
        dot_typed(GP_F16, rm, kc, a, w, acc, am, first, tot, ldt, pf);
    else if (wt == GP_BF16)
        dot_typed(GP_BF16, rm, kc, a, w, acc, am, first, tot, ldt, pf);
    else
        dot_typed(GP_F32, rm, kc, a, w, acc, am, first, tot, ldt, pf);
}

/* ---- attention's loops (cpu/cpu_dot.h) ---- */

/* Rows s of k (R of them, R <= 4) against q: 16 lanes each, the tail zero-padded. */
AI void scores_rows(int R, gp_dtype kt, const float *q, const char *k, int64_t ks, int64_t d,
                    float scale, float *sc)
{
    float32x4_t c[4][4];
    for (int j = 0; j < R; j++)
        for (int i = 0; i < 4; i++)
            c[j][i] = vdupq_n_f32(0.0f);
    int64_t i0 = 0;
    for (; i0 + 16 <= d; i0 += 16)
        for (int i = 0; i < 4; i++) {
            float32x4_t x = vld1q_f32(q + i0 + 4 * i);
            for (int j = 0; j < R; j++)
                c[j][i] = vfmaq_f32(c[j][i], x, ldw4(kt, k + j * ks, i0 + 4 * i));
        }
    if (i0 < d) {
        float xq[16] = {0};
        for (int64_t i = i0; i < d; i++)
            xq[i - i0] = q[i];
        for (int j = 0; j < R; j++) {
            float xk[16] = {0};
            for (int64_t i = i0; i < d; i++)
                xk[i - i0] = gp_dot_elt(kt, k + j * ks, i);
            for (int i = 0; i < 4; i++)
                c[j][i] = vfmaq_f32(c[j][i], vld1q_f32(xq + 4 * i), vld1q_f32(xk + 4 * i));
        }
    }
    for (int j = 0; j < R; j++)
        sc[j] = total16(c[j]) * scale;
}

AI void scores_typed(gp_dtype kt, const float *q, const char *k, int64_t ks, int64_t d, int64_t n,
                     float scale, float *sc)
{
    int64_t s = 0;
    for (; s + 4 <= n; s += 4)
        scores_rows(4, kt, q, k + s * ks, ks, d, scale, sc + s);
    for (; s < n; s++)
        scores_rows(1, kt, q, k + s * ks, ks, d, scale, sc + s);
}

void gp_attn_scores_neon(const float *q, const char *k, int64_t ks, gp_dtype kt, int64_t d,
                         int64_t n, float scale, float *sc)
{
    if (kt == GP_F16)
        scores_typed(GP_F16, q, k, ks, d, n, scale, sc);
    else if (kt == GP_BF16)
        scores_typed(GP_BF16, q, k, ks, d, n, scale, sc);
    else
        scores_typed(GP_F32, q, k, ks, d, n, scale, sc);
}

/* acc[0 .. 4 nv) in registers (nv <= 16) over every s. */
AI void accum_block(gp_dtype vt, const float *w, const char *v, int64_t vs, int nv, int64_t n,
                    float *acc)
{
    float32x4_t c[16];
    for (int j = 0; j < nv; j++)
        c[j] = vld1q_f32(acc + 4 * j);
    for (int64_t s = 0; s < n; s++) {
        float32x4_t x = vdupq_n_f32(w[s]);
        const char *vr = v + s * vs;
        for (int j = 0; j < nv; j++)
            c[j] = vfmaq_f32(c[j], x, ldw4(vt, vr, 4 * j));
    }
    for (int j = 0; j < nv; j++)
        vst1q_f32(acc + 4 * j, c[j]);
}

AI void accum_typed(gp_dtype vt, const float *w, const char *v, int64_t vs, int64_t d, int64_t n,
                    float *acc)
{
    int64_t es = vt == GP_F32 ? 4 : 2, d4 = d / 4 * 4;
    for (int64_t i = 0; i < d4; i += 64) {
        int nv = d4 - i < 64 ? (int)((d4 - i) / 4) : 16;
        if (nv == 16)
            accum_block(vt, w, v + i * es, vs, 16, n, acc + i);
        else
            accum_block(vt, w, v + i * es, vs, nv, n, acc + i);
    }
    for (int64_t i = d4; i < d; i++)
        for (int64_t s = 0; s < n; s++)
            acc[i] = fmaf(w[s], gp_dot_elt(vt, v + s * vs, i), acc[i]);
}

void gp_attn_accum_neon(const float *w, const char *v, int64_t vs, gp_dtype vt, int64_t d,
                        int64_t n, float *acc)
{
    if (vt == GP_F16)
        accum_typed(GP_F16, w, v, vs, d, n, acc);
    else if (vt == GP_BF16)
        accum_typed(GP_BF16, w, v, vs, d, n, acc);
    else
        accum_typed(GP_F32, w, v, vs, d, n, acc);
}

/* R (<= GP_ATTN_GROUP) query heads of one KV group against each row of k: the row loaded and
 * widened once for all R (16 accumulators), every head's chain and total as scores_rows's. */
AI void scores_group_typed(int R, gp_dtype kt, const float *const *q, const char *k, int64_t ks,
                           int64_t d, int64_t n, float scale, float *const *sc)
{
    for (int64_t s = 0; s < n; s++) {
        const char *kr = k + s * ks;
        float32x4_t c[GP_ATTN_GROUP][4];
        for (int r = 0; r < R; r++)
            for (int i = 0; i < 4; i++)
                c[r][i] = vdupq_n_f32(0.0f);
        int64_t i0 = 0;
        for (; i0 + 16 <= d; i0 += 16) {
            float32x4_t kv[4];
            ldw16(kt, kr, i0, kv);
            for (int r = 0; r < R; r++)
                for (int i = 0; i < 4; i++)
                    c[r][i] = vfmaq_f32(c[r][i], vld1q_f32(q[r] + i0 + 4 * i), kv[i]);
        }
        if (i0 < d) {
            float xk[16] = {0};
            for (int64_t i = i0; i < d; i++)
                xk[i - i0] = gp_dot_elt(kt, kr, i);
            for (int r = 0; r < R; r++) {
                float xq[16] = {0};
                for (int64_t i = i0; i < d; i++)
                    xq[i - i0] = q[r][i];
                for (int i = 0; i < 4; i++)
                    c[r][i] = vfmaq_f32(c[r][i], vld1q_f32(xq + 4 * i), vld1q_f32(xk + 4 * i));
            }
        }
        for (int r = 0; r < R; r++)
            sc[r][s] = total16(c[r]) * scale;
    }
}

void gp_attn_scores_group_neon(int R, const float *const *q, const char *k, int64_t ks,
                               gp_dtype kt, int64_t d, int64_t n, float scale, float *const *sc)
{
#define QG(RR, T)                                                                                  \
    case RR:                                                                                       \
        scores_group_typed(RR, T, q, k, ks, d, n, scale, sc);                                      \
        break;
#define QG_T(T)                                                                                    \
    switch (R) {                                                                                   \
        QG(2, T) QG(3, T) QG(4, T)                                                                 \
    default:                                                                                       \
        scores_group_typed(1, T, q, k, ks, d, n, scale, sc);                                       \
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

/* R heads' accumulators for 16 elements (4 NV vectors, NV <= 4) over every s, each row of v
 * loaded and widened once for all R; every element's chain as accum_block's. */
AI void accum_group_block(int R, int NV, gp_dtype vt, const float *const *w, const char *v,
                          int64_t vs, int64_t n, float *const *acc, int64_t off)
{
    float32x4_t c[GP_ATTN_GROUP][4];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < NV; j++)
            c[r][j] = vld1q_f32(acc[r] + off + 4 * j);
    for (int64_t s = 0; s < n; s++) {
        const char *vr = v + s * vs;
        float32x4_t vv[4];
        for (int j = 0; j < NV; j++)
            vv[j] = ldw4(vt, vr, off + 4 * j);
        for (int r = 0; r < R; r++) {
            float32x4_t x = vdupq_n_f32(w[r][s]);
            for (int j = 0; j < NV; j++)
                c[r][j] = vfmaq_f32(c[r][j], x, vv[j]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int j = 0; j < NV; j++)
            vst1q_f32(acc[r] + off + 4 * j, c[r][j]);
}

AI void accum_group_typed(int R, gp_dtype vt, const float *const *w, const char *v, int64_t vs,
                          int64_t d, int64_t n, float *const *acc)
{
    int64_t d4 = d / 4 * 4, i = 0;
    for (; i + 16 <= d4; i += 16)
        accum_group_block(R, 4, vt, w, v, vs, n, acc, i);
    for (; i < d4; i += 4)
        accum_group_block(R, 1, vt, w, v, vs, n, acc, i);
    for (int r = 0; r < R; r++)
        for (int64_t e = d4; e < d; e++)
            for (int64_t s = 0; s < n; s++)
                acc[r][e] = fmaf(w[r][s], gp_dot_elt(vt, v + s * vs, e), acc[r][e]);
}

void gp_attn_accum_group_neon(int R, const float *const *w, const char *v, int64_t vs,
                              gp_dtype vt, int64_t d, int64_t n, float *const *acc)
{
#define QA(RR, T)                                                                                  \
    case RR:                                                                                       \
        accum_group_typed(RR, T, w, v, vs, d, n, acc);                                             \
        break;
#define QA_T(T)                                                                                    \
    switch (R) {                                                                                   \
        QA(2, T) QA(3, T) QA(4, T)                                                                 \
    default:                                                                                       \
        accum_group_typed(1, T, w, v, vs, d, n, acc);                                              \
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

/* ---- rows: B [K, N] with n contiguous ----
 * MR (<= 2) rows of a by 32 columns: 16 accumulators; a's elements four at a time, each
 * multiply-add by lane (the same fused operation as with a broadcast). */
AI void rows_block(int MR, gp_dtype bt, int64_t kc, const float *const *a, const char *b,
                   int64_t ldb, int nv, float *acc, int first)
{
    float32x4_t c[2][8];
    for (int m = 0; m < MR; m++)
        for (int j = 0; j < nv; j++)
            c[m][j] = first ? vdupq_n_f32(0.0f) : vld1q_f32(acc + m * 64 + 4 * j);
    int64_t k = 0;
#define GP_ROWS_STEP(L)                                                                            \
    do {                                                                                           \
        const char *br = b + (k + L) * ldb;                                                        \
        for (int j = 0; j < nv; j++) {                                                             \
            float32x4_t v = ldw4(bt, br, 4 * j);                                                   \
            for (int m = 0; m < MR; m++)                                                           \
                c[m][j] = vfmaq_laneq_f32(c[m][j], v, x[m], L);                                    \
        }                                                                                          \
    } while (0)
    for (; k + 4 <= kc; k += 4) {
        float32x4_t x[2];
        for (int m = 0; m < MR; m++)
            x[m] = vld1q_f32(a[m] + k);
        GP_ROWS_STEP(0);
        GP_ROWS_STEP(1);
        GP_ROWS_STEP(2);
        GP_ROWS_STEP(3);
    }
#undef GP_ROWS_STEP
    for (; k < kc; k++) {
        const char *br = b + k * ldb;
        for (int j = 0; j < nv; j++) {
            float32x4_t v = ldw4(bt, br, 4 * j);
            for (int m = 0; m < MR; m++)
                c[m][j] = vfmaq_f32(c[m][j], vdupq_n_f32(a[m][k]), v);
        }
    }
    for (int m = 0; m < MR; m++)
        for (int j = 0; j < nv; j++)
            vst1q_f32(acc + m * 64 + 4 * j, c[m][j]);
}

AI void rows_typed(gp_dtype bt, int rm, int64_t kc, const float *const *a, const char *b,
                   int64_t ldb, int nc, float *acc, int first)
{
    int64_t es = bt == GP_F32 ? 4 : 2;
    int n4 = nc / 4 * 4;
    for (int j0 = 0; j0 < n4; j0 += 32) {
        int nv = n4 - j0 < 32 ? (n4 - j0) / 4 : 8;
        for (int m = 0; m < rm; m += 2) {
            int mr = rm - m >= 2 ? 2 : 1;
            float *ac = acc + m * 64 + j0;
            const char *bj = b + j0 * es;
            if (mr == 2 && nv == 8) /* the common case with constant bounds: all in registers */
                rows_block(2, bt, kc, a + m, bj, ldb, 8, ac, first);
            else if (nv == 8)
                rows_block(1, bt, kc, a + m, bj, ldb, 8, ac, first);
            else
                rows_block(mr, bt, kc, a + m, bj, ldb, nv, ac, first);
        }
    }
    for (int m = 0; m < rm; m++) /* the last columns one at a time, the same chains */
        for (int j = n4; j < nc; j++) {
            float t = first ? 0.0f : acc[m * 64 + j];
            for (int64_t k = 0; k < kc; k++)
                t = fmaf(a[m][k], gp_dot_elt(bt, b + k * ldb, j), t);
            acc[m * 64 + j] = t;
        }
}

void gp_rows_neon(int rm, int64_t kc, const float *const *a, const char *b, int64_t ldb,
                  gp_dtype bt, int nc, float *acc, int first)
{
    if (bt == GP_F16)
        rows_typed(GP_F16, rm, kc, a, b, ldb, nc, acc, first);
    else if (bt == GP_BF16)
        rows_typed(GP_BF16, rm, kc, a, b, ldb, nc, acc, first);
    else
        rows_typed(GP_F32, rm, kc, a, b, ldb, nc, acc, first);
}
