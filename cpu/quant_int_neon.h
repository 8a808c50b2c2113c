/* gp_quant_matmul_ws's integer path on aarch64, one source for three variants, each compiled with
 * its own -march flags and named by QI_PATH (cpu/quant_f32_internal.h's gp_qint_path):
 * quant_int_neon.c (QI_KIND 0: SMULL + SADALP, any ARMv8-A), quant_int_dotprod.c (1: SDOT by
 * element, FEAT_DotProd) and quant_int_i8mm.c (2: SMMLA on 2 x 8 by 8 x 2 tiles, FEAT_I8MM).
 *
 * The arithmetic is cpu/quant_int_x86.h's, step for step, so every variant gives the x86
 * variants' bits (tests/test_quant_f32.c checks all of them against one scalar emulation):
 *
 *   prep: each row of x quantized once per product in blocks of 32 to two 8-bit parts: d = max |x|
 *         / 127, hi = round(x / d), lo = round((x - d hi) 254 / d), both clamped to [-127, 127]
 *         (a conversion out of range gives INT_MIN first, as cvtps2dq does), x = d (hi + lo / 254)
 *         within d / 508; with the block's sum of x in the same fixed tree.
 *   cols: 32 columns a tile, their blocks unpacked to signed bytes, the zero point taken off (q4_0
 *         q - 8, q5_0 q - 16, q6_k q - 32; SDOT and SMMLA multiply signed by signed, so no offset
 *         sums are needed: each block's integer dots are exactly the x86 variants' after theirs
 *         are subtracted); a block's two integer dots (hi's, lo's) then give f = lo / 254 + hi
 *         (one fused multiply-add), y += f (d_w d_x) (fused), and for the formats with an offset
 *         y += m_w (sum of x) (fused). q6_k: each group of 16's integer dot times its int8 scale,
 *         the two added in int32 (exact: below 2^24), then as the others.
 *
 * Layouts of the unpacked weights: "lanes over columns" for SMULL and SDOT (a vector holds 4
 * columns' 4 bytes at k .. k + 3; one SDOT by element against x's 4 bytes adds 4 products to each
 * column); "pairs" for SMMLA (a vector holds 2 columns' 8 bytes at k .. k + 7, x's vector 2 rows'
 * 8 bytes: one SMMLA adds 8 products to each of the 2 x 2 outputs). The error bound is the x86
 * path's: sum over blocks of (d_x / 508) sum |w| plus the f32 roundings. Rows and columns are
 * independent and K is walked in the same order for every split: 1 and 2 threads give the same
 * bits. */
#include <arm_neon.h>
#include <stdint.h>
#include <string.h>

#include "cpu/quant.h"
#include "cpu/quant_f32_internal.h"
#include "cpu/quant_internal.h"

#define AI static inline __attribute__((always_inline))

enum { BLK = 32, NT = 32, KB = 16 }; /* a block; columns a tile; blocks a tile holds of K */
#define QI_PAIRS (QI_KIND == 2)       /* SMMLA's layouts of x and of the weights */

/* The workspace (within gp_qint_ws_bytes(M + 1, K) <= gp_quant_matmul_ws_bytes(M, K)): x's bytes,
 * then [M][K / 32] each of f32 d and f32 sum of x. x's bytes: without QI_PAIRS [M][K / 32][2][32]
 * (each block's hi, then lo); with it [(M + 1) / 2][K / 32][2][4][2][8] (row pairs: each block's
 * hi then lo, by 8 elements, row 2 p then 2 p + 1). */
typedef struct {
    int8_t *q;
    float *d, *fsum;
    int64_t nb;
} xq_view;

static xq_view view_of(const void *ws, int64_t M, int64_t K)
{
    int64_t nb = K / BLK, m2 = M + (M & 1);
    xq_view v;
    v.q = (int8_t *)ws;
    v.d = (float *)((char *)ws + 2 * m2 * K);
    v.fsum = v.d + M * nb;
    v.nb = nb;
    return v;
}

/* where x's 8 bytes of row m, block b, part (0 hi, 1 lo), elements 8 g .. 8 g + 7 are */
AI int8_t *xq_at(const xq_view *v, int64_t m, int64_t b, int part, int g)
{
#if QI_PAIRS
    return v->q + (((m >> 1) * v->nb + b) * 2 + part) * 64 + 16 * g + 8 * (m & 1);
#else
    return v->q + ((m * v->nb + b) * 2 + part) * 32 + 8 * g;
#endif
}

/* round to nearest even, and INT_MIN where out of range or NaN (cvtps2dq's answer) */
AI int32x4_t round_x86(float32x4_t a)
{
    uint32x4_t ok = vcaltq_f32(a, vdupq_n_f32(2147483648.0f));
    return vbslq_s32(ok, vcvtnq_s32_f32(a), vdupq_n_s32(INT32_MIN));
}

/* 32 int32 in [-127, 127] as 32 bytes (8 at a time) */
AI void st_bytes(const xq_view *v, int64_t m, int64_t b, int part, const int32x4_t *h)
{
    for (int g = 0; g < 4; g++) {
        int16x8_t s = vcombine_s16(vqmovn_s32(h[2 * g]), vqmovn_s32(h[2 * g + 1]));
        vst1_s8(xq_at(v, m, b, part, g), vqmovn_s16(s));
    }
}

static void prep(const float *x, int64_t ldx, int64_t M, int64_t K, void *ws, int64_t m0,
                 int64_t m1)
{
    xq_view v = view_of(ws, M, K);
    int64_t nb = K / BLK;
    const int32x4_t nlim = vdupq_n_s32(-127);
    for (int64_t m = m0; m < m1; m++)
        for (int64_t b = 0; b < nb; b++) {
            const float *xb = x + m * ldx + b * BLK;
            float32x4_t a[8], mx = vdupq_n_f32(0.0f);
            for (int i = 0; i < 8; i++) {
                a[i] = vld1q_f32(xb + 4 * i);
                mx = vmaxq_f32(mx, vabsq_f32(a[i]));
            }
            float amax = vmaxvq_f32(mx), d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
            float32x4_t s = vdupq_n_f32(id), vd = vdupq_n_f32(d), s2 = vdupq_n_f32(254.0f * id);
            int32x4_t h[8], l[8];
            for (int i = 0; i < 8; i++) {
                /* |x / d| <= 127 (1 + 3 2^-24) rounds to 127 at most, and so does the rest */
                h[i] = vmaxq_s32(round_x86(vmulq_f32(a[i], s)), nlim);
                /* the rest, |x - d hi| <= d / 2, in steps of d / 254 */
                float32x4_t r = vfmsq_f32(a[i], vcvtq_f32_s32(h[i]), vd);
                l[i] = vmaxq_s32(round_x86(vmulq_f32(r, s2)), nlim);
            }
            st_bytes(&v, m, b, 0, h);
            st_bytes(&v, m, b, 1, l);
            /* the sum of x in quant_f32_internal.h's tree: s16 = x[i] + x[16 + i], then halves */
            float32x4_t a0 = vaddq_f32(a[0], a[4]), a1 = vaddq_f32(a[1], a[5]);
            float32x4_t a2 = vaddq_f32(a[2], a[6]), a3 = vaddq_f32(a[3], a[7]);
            float32x4_t s4 = vaddq_f32(vaddq_f32(a0, a2), vaddq_f32(a1, a3));
            v.d[m * nb + b] = d;
            v.fsum[m * nb + b] = vpadds_f32(vadd_f32(vget_low_f32(s4), vget_high_f32(s4)));
        }
}

/* ---- the weights ---- */

/* A tile: columns n .. n + nt (nt <= 32; the others zero) over blocks kb0 .. kb0 + kn of K. */
typedef struct {
    int8_t q[KB][NT * BLK]; /* per block, the layout of the variant (above) */
    float d[KB][NT], m[KB][NT];
    int32_t s[KB][2][NT]; /* q6_k: the int8 scales of the block's two groups of 16 */
} tile;

/* 16 in byte i where bit i of m (16 bits) is set */
AI uint8x16_t bit16(uint32_t m)
{
    static const uint8_t bits[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    uint8x16_t v = vcombine_u8(vdup_n_u8((uint8_t)m), vdup_n_u8((uint8_t)(m >> 8)));
    return vandq_u8(vtstq_u8(v, vld1q_u8(bits)), vdupq_n_u8(16));
}

AI float f16(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}

/* One column's block of 32 (of any format; g the block's index along K, for the k-quants its
 * super-block's g / 8 and sub-block g % 8, whose d sc and -dmin m are sd[j] and sm[j]): its 32
 * values q - zero into lo (elements 0 .. 15) and hi (16 .. 31), its d and m (the offset: q4_1,
 * q5_1, and the k-quants' -dmin m), q6_k's two int8 scales. */
AI void col_block(gp_dtype wt, const uint8_t *row, int64_t g, const float *sd, const float *sm,
                  int8x16_t *lo, int8x16_t *hi, float *d, float *m, int32_t *s0, int32_t *s1)
{
    const uint8x16_t m4 = vdupq_n_u8(15);
    *m = 0.0f;
    if (gp_dtype_block(wt) == BLK) {
        const uint8_t *b = row + (size_t)g * (size_t)gp_dtype_block_bytes(wt);
        *d = f16(b);
        if (wt == GP_Q8_0) {
            *lo = vld1q_s8((const int8_t *)(b + 2));
            *hi = vld1q_s8((const int8_t *)(b + 18));
            return;
        }
        if (wt == GP_Q4_1 || wt == GP_Q5_1)
            *m = f16(b + 2);
        int qs = wt == GP_Q4_0 ? 2 : wt == GP_Q4_1 ? 4 : wt == GP_Q5_0 ? 6 : 8;
        uint8x16_t u = vld1q_u8(b + qs), a = vandq_u8(u, m4), c = vshrq_n_u8(u, 4);
        if (wt == GP_Q5_0 || wt == GP_Q5_1) {
            uint32_t qh;
            memcpy(&qh, b + qs - 4, 4);
            a = vorrq_u8(a, bit16(qh));
            c = vorrq_u8(c, bit16(qh >> 16));
        }
        int8x16_t zero = vdupq_n_s8(wt == GP_Q4_0 ? 8 : wt == GP_Q5_0 ? 16 : 0);
        *lo = vsubq_s8(vreinterpretq_s8_u8(a), zero);
        *hi = vsubq_s8(vreinterpretq_s8_u8(c), zero);
        return;
    }
    const uint8_t *base = row + (size_t)(g / 8) * (size_t)gp_dtype_block_bytes(wt);
    int j = (int)(g % 8);
    if (wt == GP_Q6_K) { /* elements 128 hh + 32 kk + l of the super-block */
        int hh = j / 4, kk = j % 4;
        *d = f16(base + 208);
        *s0 = (int8_t)base[192 + 2 * j];
        *s1 = (int8_t)base[193 + 2 * j];
        const uint8_t *ql = base + 64 * hh + 32 * (kk & 1), *qh = base + 128 + 32 * hh;
        int8x16_t o[2];
        for (int h = 0; h < 2; h++) {
            uint8x16_t u = vld1q_u8(ql + 16 * h), hb = vld1q_u8(qh + 16 * h);
            u = kk >> 1 ? vshrq_n_u8(u, 4) : vandq_u8(u, m4);
            hb = vandq_u8(vshlq_u8(hb, vdupq_n_s8((int8_t)(-2 * kk))), vdupq_n_u8(3));
            o[h] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(u, vshlq_n_u8(hb, 4))), vdupq_n_s8(32));
        }
        *lo = o[0];
        *hi = o[1];
        return;
    }
    *d = sd[j]; /* q4_k, q5_k */
    *m = sm[j];
    const uint8_t *qs = base + (wt == GP_Q5_K ? 48 : 16) + 32 * (j >> 1);
    int8x16_t o[2];
    for (int h = 0; h < 2; h++) {
        uint8x16_t u = vld1q_u8(qs + 16 * h);
        u = j & 1 ? vshrq_n_u8(u, 4) : vandq_u8(u, m4);
        if (wt == GP_Q5_K) {
            uint8x16_t hb = vtstq_u8(vld1q_u8(base + 16 + 16 * h), vdupq_n_u8((uint8_t)(1u << j)));
            u = vorrq_u8(u, vandq_u8(hb, vdupq_n_u8(16)));
        }
        o[h] = vreinterpretq_s8_u8(u);
    }
    *lo = o[0];
    *hi = o[1];
}

#if !QI_PAIRS
/* c[0..3]: 4 columns' words (word j: elements 4 j .. 4 j + 3); out word j of every column in
 * c[j] */
AI void tr4(int8x16_t *c)
{
    uint32x4_t a = vtrn1q_u32(vreinterpretq_u32_s8(c[0]), vreinterpretq_u32_s8(c[1]));
    uint32x4_t b = vtrn2q_u32(vreinterpretq_u32_s8(c[0]), vreinterpretq_u32_s8(c[1]));
    uint32x4_t e = vtrn1q_u32(vreinterpretq_u32_s8(c[2]), vreinterpretq_u32_s8(c[3]));
    uint32x4_t f = vtrn2q_u32(vreinterpretq_u32_s8(c[2]), vreinterpretq_u32_s8(c[3]));
    c[0] = vreinterpretq_s8_u64(vtrn1q_u64(vreinterpretq_u64_u32(a), vreinterpretq_u64_u32(e)));
    c[1] = vreinterpretq_s8_u64(vtrn1q_u64(vreinterpretq_u64_u32(b), vreinterpretq_u64_u32(f)));
    c[2] = vreinterpretq_s8_u64(vtrn2q_u64(vreinterpretq_u64_u32(a), vreinterpretq_u64_u32(e)));
    c[3] = vreinterpretq_s8_u64(vtrn2q_u64(vreinterpretq_u64_u32(b), vreinterpretq_u64_u32(f)));
}
#endif

/* The tile's blocks, 4 columns at a time (up to nt; the micro kernels read no group past it);
 * the k-quants' 6-bit scales decoded once a super-block and column. */
static void unpack(gp_dtype wt, const uint8_t *w, size_t rb, int64_t n, int nt, int64_t kb0,
                   int kn, tile *t)
{
    int kq = wt == GP_Q4_K || wt == GP_Q5_K;
    for (int c0 = 0; c0 < nt; c0 += 4) {
        float sd[4][8] = {{0}}, sm[4][8] = {{0}}; /* the current super-block's, each column's */
        int64_t have = -1;
        for (int b = 0; b < kn; b++) {
            int64_t g = kb0 + b;
            if (kq && g / 8 != have) {
                have = g / 8;
                for (int c = 0; c < 4 && c0 + c < nt; c++) {
                    const uint8_t *blk = w + (size_t)(n + c0 + c) * rb +
                                         (size_t)have * (size_t)gp_dtype_block_bytes(wt);
                    uint8_t sc[8], mn[8];
                    gp_quant_k_scales(blk + 4, sc, mn);
                    float d = f16(blk), dmin = f16(blk + 2);
                    for (int i = 0; i < 8; i++) {
                        sd[c][i] = d * (float)sc[i];
                        sm[c][i] = -dmin * (float)mn[i];
                    }
                }
            }
            int8x16_t lo[4], hi[4];
            for (int c = 0; c < 4; c++) {
                int col = c0 + c;
                if (col < nt) {
                    col_block(wt, w + (size_t)(n + col) * rb, g, sd[c], sm[c], &lo[c], &hi[c],
                              &t->d[b][col], &t->m[b][col], &t->s[b][0][col], &t->s[b][1][col]);
                } else {
                    lo[c] = hi[c] = vdupq_n_s8(0);
                    t->d[b][col] = t->m[b][col] = 0.0f;
                    t->s[b][0][col] = t->s[b][1][col] = 0;
                }
            }
            int8_t *q = t->q[b];
#if QI_PAIRS
            for (int p = 0; p < 2; p++) { /* columns c0 + 2 p, c0 + 2 p + 1 */
                int64x2_t a = vreinterpretq_s64_s8(lo[2 * p]), c = vreinterpretq_s64_s8(lo[2 * p + 1]);
                int64x2_t e = vreinterpretq_s64_s8(hi[2 * p]), f = vreinterpretq_s64_s8(hi[2 * p + 1]);
                int pc = c0 / 2 + p;
                vst1q_s8(q + (0 * NT / 2 + pc) * 16, vreinterpretq_s8_s64(vzip1q_s64(a, c)));
                vst1q_s8(q + (1 * NT / 2 + pc) * 16, vreinterpretq_s8_s64(vzip2q_s64(a, c)));
                vst1q_s8(q + (2 * NT / 2 + pc) * 16, vreinterpretq_s8_s64(vzip1q_s64(e, f)));
                vst1q_s8(q + (3 * NT / 2 + pc) * 16, vreinterpretq_s8_s64(vzip2q_s64(e, f)));
            }
#else
            tr4(lo);
            tr4(hi);
            for (int j = 0; j < 4; j++) {
                vst1q_s8(q + (j * NT + c0) * 4, lo[j]);
                vst1q_s8(q + ((j + 4) * NT + c0) * 4, hi[j]);
            }
#endif
        }
    }
}

/* ---- the micro kernels ---- */

/* up to 4 floats of a row (n of them) in and out of a vector; the rest are zero / not stored */
AI float32x4_t ld_part(const float *p, int n)
{
    if (n >= 4)
        return vld1q_f32(p);
    float b[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    memcpy(b, p, (size_t)n * sizeof *p);
    return vld1q_f32(b);
}

AI void st_part(float *p, int n, float32x4_t a)
{
    if (n >= 4) {
        vst1q_f32(p, a);
        return;
    }
    float b[4];
    vst1q_f32(b, a);
    memcpy(p, b, (size_t)n * sizeof *p);
}

#if !QI_PAIRS
/* The integer dot of 4 columns with one row's part: SDOT by element, or (plain NEON) SMULL of the
 * weights' bytes by x's 4 bytes broadcast, the int16 products (|q x| <= 128 * 127, exact) added
 * pairwise into int32 by SADALP: lanes (column c, elements 2 i, 2 i + 1), two vectors, folded into
 * one per column at the end. */
#if QI_KIND == 1
enum { MR_MAX = 4 };
typedef int32x4_t iacc;
AI iacc ia_zero(void) { return vdupq_n_s32(0); }
AI int32x4_t ia_sum(iacc a) { return a; }
#define IA_DOT(acc, wv, x, J) ((acc) = vdotq_laneq_s32((acc), (wv), (x), (J)))
#else
enum { MR_MAX = 2 }; /* two accumulators a sum: 32 registers hold no more rows */
typedef struct {
    int32x4_t a, b;
} iacc;
AI iacc ia_zero(void) { return (iacc){vdupq_n_s32(0), vdupq_n_s32(0)}; }
AI int32x4_t ia_sum(iacc a) { return vpaddq_s32(a.a, a.b); }
#define IA_DOT(acc, wv, x, J)                                                                      \
    do {                                                                                           \
        int8x16_t xb_ = vreinterpretq_s8_s32(vdupq_laneq_s32(vreinterpretq_s32_s8(x), (J)));       \
        (acc).a = vpadalq_s16((acc).a, vmull_s8(vget_low_s8(wv), vget_low_s8(xb_)));               \
        (acc).b = vpadalq_s16((acc).b, vmull_high_s8((wv), xb_));                                  \
    } while (0)
#endif

/* rows m .. m + MR - 1, columns c0 .. c0 + 3 of the tile (those below nt stored):
 * y[m + r][n + c0 ..] (+)= the tile's part of the product. */
AI void micro(const int MR, const int G16, const int HAS_M, const tile *t, int c0, int nt, int kn,
              int64_t kb0, const xq_view *v, int64_t m, int first, float *y, int64_t ldy)
{
    int nc = nt - c0;
    float32x4_t acc[MR_MAX];
    for (int r = 0; r < MR; r++)
        acc[r] = first ? vdupq_n_f32(0.0f) : ld_part(y + (m + r) * ldy + c0, nc);
    const float32x4_t inv = vdupq_n_f32(1.0f / 254.0f);
    for (int b = 0; b < kn; b++) {
        int64_t kb = kb0 + b;
        int32x4_t eh[MR_MAX], el[MR_MAX];
        iacc ih[MR_MAX], il[MR_MAX];
        /* the block's halves: elements 16 g .. 16 g + 15 (q6_k: its groups of 16, each scaled) */
        for (int g = 0; g < 2; g++) {
            int8x16_t xh[MR_MAX], xl[MR_MAX];
            for (int r = 0; r < MR; r++) {
                if (g == 0 || G16)
                    ih[r] = il[r] = ia_zero();
                xh[r] = vld1q_s8(xq_at(v, m + r, kb, 0, 2 * g));
                xl[r] = vld1q_s8(xq_at(v, m + r, kb, 1, 2 * g));
            }
            const int8_t *q = t->q[b] + (4 * g * NT + c0) * 4;
#define QI_STEP(J)                                                                                 \
    do {                                                                                           \
        int8x16_t wv = vld1q_s8(q + (J) * NT * 4);                                                 \
        for (int r = 0; r < MR; r++) {                                                             \
            IA_DOT(ih[r], wv, xh[r], J);                                                           \
            IA_DOT(il[r], wv, xl[r], J);                                                           \
        }                                                                                          \
    } while (0)
            QI_STEP(0);
            QI_STEP(1);
            QI_STEP(2);
            QI_STEP(3);
#undef QI_STEP
            if (!G16)
                continue;
            int32x4_t sc = vld1q_s32(t->s[b][g] + c0);
            for (int r = 0; r < MR; r++) { /* q6_k's group g: dot sc_g, exact in int32 */
                int32x4_t dh = vmulq_s32(ia_sum(ih[r]), sc), dl = vmulq_s32(ia_sum(il[r]), sc);
                eh[r] = g ? vaddq_s32(eh[r], dh) : dh;
                el[r] = g ? vaddq_s32(el[r], dl) : dl;
            }
        }
        float32x4_t d = vld1q_f32(t->d[b] + c0);
        float32x4_t mm = HAS_M ? vld1q_f32(t->m[b] + c0) : vdupq_n_f32(0.0f);
        for (int r = 0; r < MR; r++) {
            int64_t at = (m + r) * v->nb + kb;
            int32x4_t h = G16 ? eh[r] : ia_sum(ih[r]), l = G16 ? el[r] : ia_sum(il[r]);
            float32x4_t f = vfmaq_f32(vcvtq_f32_s32(h), vcvtq_f32_s32(l), inv);
            acc[r] = vfmaq_f32(acc[r], f, vmulq_f32(d, vdupq_n_f32(v->d[at])));
            if (HAS_M)
                acc[r] = vfmaq_f32(acc[r], mm, vdupq_n_f32(v->fsum[at]));
        }
    }
    for (int r = 0; r < MR; r++)
        st_part(y + (m + r) * ldy + c0, nc, acc[r]);
}

/* rows m0 .. m1 of the tile's columns c0 .. c0 + 3, MR_MAX rows at a time, then fewer */
AI void rows(const int G16, const int HAS_M, const tile *t, int c0, int nt, int kn, int64_t kb0,
             const xq_view *v, int64_t m0, int64_t m1, float *y, int64_t ldy)
{
    int64_t m = m0;
    int first = kb0 == 0;
    for (; m + MR_MAX <= m1; m += MR_MAX)
        micro(MR_MAX, G16, HAS_M, t, c0, nt, kn, kb0, v, m, first, y, ldy);
    if (MR_MAX > 2)
        for (; m + 2 <= m1; m += 2)
            micro(2, G16, HAS_M, t, c0, nt, kn, kb0, v, m, first, y, ldy);
    if (m < m1)
        micro(1, G16, HAS_M, t, c0, nt, kn, kb0, v, m, first, y, ldy);
}
#else
/* SMMLA: RP (<= 2) pairs of rows by 2 pairs of columns; accumulator lanes (row 2 p, column c),
 * (2 p, c + 1), (2 p + 1, c), (2 p + 1, c + 1). A pair with a row outside [m0, m1) (a thread's
 * first or last, or M odd) reads and writes only the other: its x half is zeros, its outputs are
 * not stored (FULL 0). */

/* x's 16 bytes of pair p, block kb, part, elements 8 g .. 8 g + 7 of both rows */
AI int8x16_t ld_pair(const xq_view *v, int64_t p, int64_t kb, int part, int g, const int FULL,
                     int ok0, int ok1)
{
    const int8_t *s = v->q + ((p * v->nb + kb) * 2 + part) * 64 + 16 * g;
    if (FULL)
        return vld1q_s8(s);
    return vcombine_s8(ok0 ? vld1_s8(s) : vdup_n_s8(0), ok1 ? vld1_s8(s + 8) : vdup_n_s8(0));
}

/* two floats of one row (c0 + 2 cp ..), n of them valid */
AI float32x2_t ld2(const float *p, int n)
{
    return n >= 2 ? vld1_f32(p) : n == 1 ? vset_lane_f32(p[0], vdup_n_f32(0.0f), 0) : vdup_n_f32(0.0f);
}

AI void st2(float *p, int n, float32x2_t a)
{
    if (n >= 2)
        vst1_f32(p, a);
    else if (n == 1)
        p[0] = vget_lane_f32(a, 0);
}

AI void micro(const int RP, const int G16, const int HAS_M, const int FULL, const tile *t, int c0,
              int nt, int kn, int64_t kb0, const xq_view *v, int64_t p0, int64_t m0, int64_t m1,
              int first, float *y, int64_t ldy)
{
    int ok[2][2]; /* [rp][row of the pair] in [m0, m1) */
    for (int rp = 0; rp < RP; rp++)
        for (int i = 0; i < 2; i++) {
            int64_t r = 2 * (p0 + rp) + i;
            ok[rp][i] = FULL || (r >= m0 && r < m1);
        }
    int ncol[2] = {nt - c0, nt - c0 - 2}; /* columns valid from c0 + 2 cp */
    float32x4_t acc[2][2];
    for (int rp = 0; rp < RP; rp++)
        for (int cp = 0; cp < 2; cp++) {
            float32x2_t a[2] = {vdup_n_f32(0.0f), vdup_n_f32(0.0f)};
            for (int i = 0; i < 2 && !first; i++)
                if (ok[rp][i])
                    a[i] = ld2(y + (2 * (p0 + rp) + i) * ldy + c0 + 2 * cp, ncol[cp]);
            acc[rp][cp] = vcombine_f32(a[0], a[1]);
        }
    const float32x4_t inv = vdupq_n_f32(1.0f / 254.0f);
    for (int b = 0; b < kn; b++) {
        int64_t kb = kb0 + b;
        int32x4_t ih[2][2], il[2][2], eh[2][2], el[2][2];
        for (int g = 0; g < 4; g++) {
            int8x16_t xh[2], xl[2], wv[2];
            for (int rp = 0; rp < RP; rp++) {
                xh[rp] = ld_pair(v, p0 + rp, kb, 0, g, FULL, ok[rp][0], ok[rp][1]);
                xl[rp] = ld_pair(v, p0 + rp, kb, 1, g, FULL, ok[rp][0], ok[rp][1]);
            }
            for (int cp = 0; cp < 2; cp++)
                wv[cp] = vld1q_s8(t->q[b] + (g * NT / 2 + c0 / 2 + cp) * 16);
            for (int rp = 0; rp < RP; rp++)
                for (int cp = 0; cp < 2; cp++) {
                    int fresh = g == 0 || (G16 && g == 2);
                    ih[rp][cp] = vmmlaq_s32(fresh ? vdupq_n_s32(0) : ih[rp][cp], xh[rp], wv[cp]);
                    il[rp][cp] = vmmlaq_s32(fresh ? vdupq_n_s32(0) : il[rp][cp], xl[rp], wv[cp]);
                }
            if (!G16 || !(g & 1))
                continue;
            int gi = g >> 1; /* q6_k's group of 16: dot sc, exact in int32 */
            for (int cp = 0; cp < 2; cp++) {
                int32x2_t s2 = vld1_s32(t->s[b][gi] + c0 + 2 * cp);
                int32x4_t sc = vcombine_s32(s2, s2);
                for (int rp = 0; rp < RP; rp++) {
                    int32x4_t dh = vmulq_s32(ih[rp][cp], sc), dl = vmulq_s32(il[rp][cp], sc);
                    eh[rp][cp] = gi ? vaddq_s32(eh[rp][cp], dh) : dh;
                    el[rp][cp] = gi ? vaddq_s32(el[rp][cp], dl) : dl;
                }
            }
        }
        float32x4_t d[2], mm[2], dx[2], sx[2];
        for (int cp = 0; cp < 2; cp++) {
            float32x2_t d2 = vld1_f32(t->d[b] + c0 + 2 * cp), m2 = vld1_f32(t->m[b] + c0 + 2 * cp);
            d[cp] = vcombine_f32(d2, d2);
            mm[cp] = vcombine_f32(m2, m2);
        }
        for (int rp = 0; rp < RP; rp++) {
            float dd[2] = {0.0f, 0.0f}, ss[2] = {0.0f, 0.0f};
            for (int i = 0; i < 2; i++)
                if (ok[rp][i]) {
                    int64_t at = (2 * (p0 + rp) + i) * v->nb + kb;
                    dd[i] = v->d[at];
                    ss[i] = v->fsum[at];
                }
            dx[rp] = vcombine_f32(vdup_n_f32(dd[0]), vdup_n_f32(dd[1]));
            sx[rp] = vcombine_f32(vdup_n_f32(ss[0]), vdup_n_f32(ss[1]));
        }
        for (int rp = 0; rp < RP; rp++)
            for (int cp = 0; cp < 2; cp++) {
                int32x4_t h = G16 ? eh[rp][cp] : ih[rp][cp], l = G16 ? el[rp][cp] : il[rp][cp];
                float32x4_t f = vfmaq_f32(vcvtq_f32_s32(h), vcvtq_f32_s32(l), inv);
                acc[rp][cp] = vfmaq_f32(acc[rp][cp], f, vmulq_f32(d[cp], dx[rp]));
                if (HAS_M)
                    acc[rp][cp] = vfmaq_f32(acc[rp][cp], mm[cp], sx[rp]);
            }
    }
    for (int rp = 0; rp < RP; rp++)
        for (int cp = 0; cp < 2; cp++) {
            float *yr = y + 2 * (p0 + rp) * ldy + c0 + 2 * cp;
            if (ok[rp][0])
                st2(yr, ncol[cp], vget_low_f32(acc[rp][cp]));
            if (ok[rp][1])
                st2(yr + ldy, ncol[cp], vget_high_f32(acc[rp][cp]));
        }
}

/* the pairs of rows m0 .. m1: a first or last one only half inside alone, the others two at a
 * time */
AI void rows(const int G16, const int HAS_M, const tile *t, int c0, int nt, int kn, int64_t kb0,
             const xq_view *v, int64_t m0, int64_t m1, float *y, int64_t ldy)
{
    if (m0 >= m1)
        return;
    int first = kb0 == 0;
    int64_t p = m0 / 2, pl = (m1 - 1) / 2, pf = m1 & 1 ? pl : pl + 1; /* whole: [.., pf) */
    if (m0 & 1)
        micro(1, G16, HAS_M, 0, t, c0, nt, kn, kb0, v, p++, m0, m1, first, y, ldy);
    for (; p + 2 <= pf; p += 2)
        micro(2, G16, HAS_M, 1, t, c0, nt, kn, kb0, v, p, m0, m1, first, y, ldy);
    if (p < pf)
        micro(1, G16, HAS_M, 1, t, c0, nt, kn, kb0, v, p++, m0, m1, first, y, ldy);
    if (p <= pl)
        micro(1, G16, HAS_M, 0, t, c0, nt, kn, kb0, v, p, m0, m1, first, y, ldy);
}
#endif

static void cols(gp_dtype wt, const uint8_t *w, int64_t n0, int64_t n1, int64_t M, int64_t K,
                 float *y, int64_t ldy, const void *ws, int64_t m0, int64_t m1)
{
    xq_view v = view_of(ws, M, K);
    size_t rb = gp_dtype_row_bytes(wt, K);
    int64_t nb = K / BLK;
    int g16 = wt == GP_Q6_K;
    int has_m = wt == GP_Q4_1 || wt == GP_Q5_1 || wt == GP_Q4_K || wt == GP_Q5_K;
    tile t __attribute__((aligned(64)));
    for (int64_t n = n0; n < n1; n += NT) {
        int nt = n1 - n < NT ? (int)(n1 - n) : NT;
        for (int64_t kb0 = 0; kb0 < nb; kb0 += KB) {
            int kn = nb - kb0 < KB ? (int)(nb - kb0) : KB;
            unpack(wt, w, rb, n, nt, kb0, kn, &t);
            for (int c0 = 0; c0 < nt; c0 += 4) {
                if (g16)
                    rows(1, 0, &t, c0, nt, kn, kb0, &v, m0, m1, y + n, ldy);
                else if (has_m)
                    rows(0, 1, &t, c0, nt, kn, kb0, &v, m0, m1, y + n, ldy);
                else
                    rows(0, 0, &t, c0, nt, kn, kb0, &v, m0, m1, y + n, ldy);
            }
        }
    }
}

const gp_qint_path QI_PATH = {prep, cols, NULL};
