/* Inside cpu/quant_f32*.c: the one arithmetic every path of gp_quant_matmul_f32 follows, and
 * the per-ISA entry points the selector in quant_f32.c picks. */
#ifndef GP_CPU_QUANT_F32_INTERNAL_H
#define GP_CPU_QUANT_F32_INTERNAL_H

#include <stdint.h>

#include "ir/core.h"

/*
 * The order of operations of one output y = x . W[n] (cpu/quant.h): W[n]'s values are those of
 * gp_quant_dequantize_row, bit for bit; 32 lane sums, lane l = the products x[k] W[n, k] for k = l
 * mod 32 added in increasing k (SIMD paths: one fused multiply-add each, starting from 0; portable:
 * a rounded product, then a rounded add); then s16[i] = lane[i] + lane[16 + i], s8[i] = s16[i] +
 * s16[8 + i], s4[i] = s8[i] + s8[4 + i], s2[i] = s4[i] + s4[2 + i], y = s2[0] + s2[1]. Nothing in it
 * depends on n0, n1 or M, so every split of the columns and every batch of rows gives the same bits;
 * the AVX2, AVX-512 and NEON paths give the same bits as each other.
 */
#define GP_QF32_LANES 32

/* Same contract as gp_quant_matmul_f32; w is the whole matrix (row n at n * row bytes). */
typedef void (*gp_qf32_fn)(gp_dtype wt, const uint8_t *w, int64_t n0, int64_t n1, const float *x,
                           int64_t ldx, int64_t M, int64_t K, float *y, int64_t ldy);

void gp_qf32_avx2(gp_dtype wt, const uint8_t *w, int64_t n0, int64_t n1, const float *x,
                  int64_t ldx, int64_t M, int64_t K, float *y, int64_t ldy);
void gp_qf32_avx512(gp_dtype wt, const uint8_t *w, int64_t n0, int64_t n1, const float *x,
                    int64_t ldx, int64_t M, int64_t K, float *y, int64_t ldy);
/* cpu/quant_f32_neon.c: aarch64, the same bits as the two above */
void gp_qf32_neon(gp_dtype wt, const uint8_t *w, int64_t n0, int64_t n1, const float *x,
                  int64_t ldx, int64_t M, int64_t K, float *y, int64_t ldy);

/* cpu/quant_amx.c: gp_quant_matmul_ws's body; ws as that function checks it */
void gp_qamx(gp_dtype wt, const uint8_t *w, int64_t N, const float *x, int64_t ldx, int64_t M,
             int64_t K, float *y, int64_t ldy, void *ws, int ith, int nth);

void gp_qamx_prep(const float *x, int64_t ldx, int64_t M, int64_t K, void *ws, int64_t mt0,
                  int64_t mt1);
void gp_qamx_cols(gp_dtype wt, const uint8_t *w, int64_t n0, int64_t n1, int64_t M, int64_t K,
                  float *y, int64_t ldy, const void *ws, int64_t mt0, int64_t mt1);

/* cpu/quant_int_*.c: the integer path of gp_quant_matmul_ws where there is no AMX
 * (cpu/quant_int_x86.h, cpu/quant_int_neon.h), for the formats gp_qint_supports takes; prep quantizes rows [m0, m1) of
 * x into ws (gp_qint_ws_bytes), cols computes columns [n0, n1) of rows [m0, m1). One variant per
 * instruction set, all giving the same bits; quant_f32.c picks one by gp_quant_isa. */
typedef struct {
    void (*prep)(const float *x, int64_t ldx, int64_t M, int64_t K, void *ws, int64_t m0,
                 int64_t m1);
    void (*cols)(gp_dtype wt, const uint8_t *w, int64_t n0, int64_t n1, int64_t M, int64_t K,
                 float *y, int64_t ldy, const void *ws, int64_t m0, int64_t m1);
    /* M = 1 (cpu/quant_int_row.h): columns [n0, n1) of x's one row (gp_qint_row_supports);
     * NULL where the path has none */
    void (*row)(gp_dtype wt, const uint8_t *w, int64_t n0, int64_t n1, int64_t K, float *y,
                const void *ws);
} gp_qint_path;
extern const gp_qint_path gp_qint_avx512; /* AVX-512 VNNI */
extern const gp_qint_path gp_qint_avxvnni; /* AVX-VNNI on ymm */
extern const gp_qint_path gp_qint_avx2;    /* AVX2: vpmaddubsw + vpmaddwd */
/* aarch64 (cpu/quant_int_neon.h): the same arithmetic, the same bits as the x86 variants */
extern const gp_qint_path gp_qint_neon;    /* NEON: SMULL + SADALP */
extern const gp_qint_path gp_qint_dotprod; /* FEAT_DotProd: SDOT */
extern const gp_qint_path gp_qint_i8mm;    /* FEAT_I8MM: SMMLA */

int gp_qint_supports(gp_dtype wt);
static inline int gp_qint_row_supports(gp_dtype wt)
{
    return wt == GP_Q4_0 || wt == GP_Q4_1 || wt == GP_Q5_0 || wt == GP_Q5_1 || wt == GP_Q8_0 ||
           wt == GP_Q4_K || wt == GP_Q5_K || wt == GP_Q6_K;
}
/* x's two 8-bit parts (2 M K bytes) and 24 bytes of scale and sums per row and block of 32: at
 * most gp_quant_matmul_ws_bytes(M, K) = 4 K (M rounded up to 16) */
static inline int64_t gp_qint_ws_bytes(int64_t M, int64_t K)
{
    return 2 * M * K + 24 * M * (K / 32);
}

#endif
