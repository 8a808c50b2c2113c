/* The float products' inner kernel (cpu/cpu_matmul.c) and its builds per instruction set:
 * 16 lanes over k, FMA, weights read in their stored dtype. Internal to gp_cpu. */
#ifndef GP_CPU_CPU_DOT_H
#define GP_CPU_CPU_DOT_H

#include <stdint.h>
#include <string.h>

#include "ir/core.h"
#include "ir/f16.h"

/* Lanes per accumulator, rows of a and of w per kernel call. */
enum { GP_DOT_LANES = 16, GP_DOT_RM = 6, GP_DOT_RN = 4 };

/* acc[m * am + n * 16 + l] += a[m][k] * w[n][k] over k < kc with k % 16 == l, one fused
 * multiply-add per element, k ascending, for m < rm (1..GP_DOT_RM) and n < GP_DOT_RN. Past kc
 * (up to a multiple of 16) both operands count as +0. a: rm rows of f32; w: GP_DOT_RN rows of
 * dtype wt (f32, f16 or bf16). first: the lanes start from +0 (acc is not read). tot: when not
 * NULL, the lanes' totals (gp_dot_total) go to tot[m * ldt + n] and acc is not written. pf: when
 * not 0, the builds that prefetch fetch each w row's bytes pf further on as they read it (the
 * caller passes the distance to the rows its next call reads; a hint only, never dereferenced).
 * Every build gives the same bits: the order and the operations are fixed, only the vector width
 * of the registers holding the lanes differs. */
typedef void (*gp_dot_fn)(int rm, int64_t kc, const float *const *a, const char *const *w,
                          gp_dtype wt, float *acc, int64_t am, int first, float *tot, int64_t ldt,
                          int64_t pf);

/* The 16 lanes l[] summed pairwise: lane i + lane i + 8, then + 4, then (0 + 2) + (1 + 3). */
static inline float gp_dot_total(const float *l)
{
    float s8[8], s4[4];
    for (int i = 0; i < 8; i++)
        s8[i] = l[i] + l[i + 8];
    for (int i = 0; i < 4; i++)
        s4[i] = s8[i] + s8[i + 4];
    return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

/* Element k of a row of dtype t (f32, f16 or bf16) at p, as f32: how the portable paths and the
 * scalar tails read weights and K/V rows. */
static inline float gp_dot_elt(gp_dtype t, const char *p, int64_t k)
{
    uint16_t h;
    float f;
    if (t == GP_F32) {
        memcpy(&f, p + 4 * k, 4);
        return f;
    }
    memcpy(&h, p + 2 * k, 2);
    return t == GP_F16 ? gp_f16_to_f32(h) : gp_bf16_to_f32(h);
}

void gp_dot_portable(int rm, int64_t kc, const float *const *a, const char *const *w, gp_dtype wt,
                     float *acc, int64_t am, int first, float *tot, int64_t ldt, int64_t pf);
#if defined(__x86_64__) && defined(__GNUC__)
#define GP_DOT_X86 1
void gp_dot_avx2(int rm, int64_t kc, const float *const *a, const char *const *w, gp_dtype wt,
                 float *acc, int64_t am, int first, float *tot, int64_t ldt, int64_t pf);
void gp_dot_avx512(int rm, int64_t kc, const float *const *a, const char *const *w, gp_dtype wt,
                   float *acc, int64_t am, int first, float *tot, int64_t ldt, int64_t pf);
#endif
#if defined(__aarch64__) && defined(__GNUC__)
#define GP_DOT_NEON 1 /* cpu/cpu_dot_neon.c */
void gp_dot_neon(int rm, int64_t kc, const float *const *a, const char *const *w, gp_dtype wt,
                 float *acc, int64_t am, int first, float *tot, int64_t ldt, int64_t pf);
#endif

/* The product with B's rows contiguous in n (a [K, N] weight, tb=0): out(m, n) is one chain of
 * fused multiply-adds over k ascending, vectors over n. For m < rm (1..GP_DOT_RM), j < nc (1..64):
 * acc[m * 64 + j] (from +0 when first) += a[m][k] * b[k][j] over k < kc; b's rows `ldb` bytes
 * apart, dtype bt (f32, f16, bf16). The same bits in every build. */
typedef void (*gp_rows_fn)(int rm, int64_t kc, const float *const *a, const char *b, int64_t ldb,
                           gp_dtype bt, int nc, float *acc, int first);
void gp_rows_portable(int rm, int64_t kc, const float *const *a, const char *b, int64_t ldb,
                      gp_dtype bt, int nc, float *acc, int first);
#ifdef GP_DOT_X86
void gp_rows_avx2(int rm, int64_t kc, const float *const *a, const char *b, int64_t ldb,
                  gp_dtype bt, int nc, float *acc, int first);
void gp_rows_avx512(int rm, int64_t kc, const float *const *a, const char *b, int64_t ldb,
                    gp_dtype bt, int nc, float *acc, int first);
#endif
#ifdef GP_DOT_NEON
void gp_rows_neon(int rm, int64_t kc, const float *const *a, const char *b, int64_t ldb,
                  gp_dtype bt, int nc, float *acc, int first);
#endif
gp_rows_fn gp_cpu_rows(void);

/* Attention's inner loops (cpu/cpu_attention.c), built per instruction set like gp_dot_fn and
 * with the same bits in every build. Rows of k and v: `ks`/`vs` bytes apart, d contiguous elements
 * of dtype f32, f16 or bf16.
 * scores: sc[s] = (q . k row s) * scale for s < n, the dot in 16 lanes of fused multiply-adds
 *         (element i to lane i % 16, +0 past d) summed by gp_dot_total.
 * accum:  acc[i] = fused multiply-adds of w[s] v[s][i] onto acc[i], s ascending, for i < d. */
typedef void (*gp_attn_scores_fn)(const float *q, const char *k, int64_t ks, gp_dtype kt, int64_t d,
                                  int64_t n, float scale, float *sc);
typedef void (*gp_attn_accum_fn)(const float *w, const char *v, int64_t vs, gp_dtype vt, int64_t d,
                                 int64_t n, float *acc);
void gp_attn_scores_portable(const float *q, const char *k, int64_t ks, gp_dtype kt, int64_t d,
                             int64_t n, float scale, float *sc);
void gp_attn_accum_portable(const float *w, const char *v, int64_t vs, gp_dtype vt, int64_t d,
                            int64_t n, float *acc);
#ifdef GP_DOT_X86
void gp_attn_scores_avx2(const float *q, const char *k, int64_t ks, gp_dtype kt, int64_t d,
                         int64_t n, float scale, float *sc);
void gp_attn_accum_avx2(const float *w, const char *v, int64_t vs, gp_dtype vt, int64_t d,
                        int64_t n, float *acc);
void gp_attn_scores_avx512(const float *q, const char *k, int64_t ks, gp_dtype kt, int64_t d,
                           int64_t n, float scale, float *sc);
void gp_attn_accum_avx512(const float *w, const char *v, int64_t vs, gp_dtype vt, int64_t d,
                          int64_t n, float *acc);
#endif
#ifdef GP_DOT_NEON
void gp_attn_scores_neon(const float *q, const char *k, int64_t ks, gp_dtype kt, int64_t d,
                         int64_t n, float scale, float *sc);
void gp_attn_accum_neon(const float *w, const char *v, int64_t vs, gp_dtype vt, int64_t d,
                        int64_t n, float *acc);
#endif
/* The same loops for r < R (1..GP_ATTN_GROUP) query heads of one KV group at once, each row of
 * k and v read once for all R: sc[r][s] and acc[r][i] bit for bit what the one-head loops give
 * for q[r] and w[r]. Built for AVX-512 and NEON. */
enum { GP_ATTN_GROUP = 4 };
typedef void (*gp_attn_scores_group_fn)(int R, const float *const *q, const char *k, int64_t ks,
                                        gp_dtype kt, int64_t d, int64_t n, float scale,
                                        float *const *sc);
typedef void (*gp_attn_accum_group_fn)(int R, const float *const *w, const char *v, int64_t vs,
                                       gp_dtype vt, int64_t d, int64_t n, float *const *acc);
#ifdef GP_DOT_X86
void gp_attn_scores_group_avx512(int R, const float *const *q, const char *k, int64_t ks,
                                 gp_dtype kt, int64_t d, int64_t n, float scale, float *const *sc);
void gp_attn_accum_group_avx512(int R, const float *const *w, const char *v, int64_t vs,
                                gp_dtype vt, int64_t d, int64_t n, float *const *acc);
#endif
#ifdef GP_DOT_NEON
void gp_attn_scores_group_neon(int R, const float *const *q, const char *k, int64_t ks,
                               gp_dtype kt, int64_t d, int64_t n, float scale, float *const *sc);
void gp_attn_accum_group_neon(int R, const float *const *w, const char *v, int64_t vs,
                              gp_dtype vt, int64_t d, int64_t n, float *const *acc);
#endif
/* The attention loops of the level in use. */
gp_attn_scores_fn gp_cpu_attn_scores(void);
gp_attn_accum_fn gp_cpu_attn_accum(void);
/* The group loops of the level in use into *scores and *accum: 1, or 0 when it has none. */
int gp_cpu_attn_group(gp_attn_scores_group_fn *scores, gp_attn_accum_group_fn *accum);

/* The kernel in use: the best build the CPU runs (`gp_cpu_dot_level`). */
gp_dot_fn gp_cpu_dot(void);
/* Levels: 0 portable, 1 AVX2+FMA+F16C (aarch64: NEON), 2 AVX-512 F/BW/VL. Sets the level to use (tests compare the
 * builds; -1: the best the CPU has), capped at what the CPU has; returns the level now in use. */
int gp_cpu_dot_level(int want);
/* The float products' kernels in use by name: "avx512", "avx2", "neon" or "portable". */
const char *gp_cpu_dot_name(void);

#endif
