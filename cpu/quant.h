/* ggml's block-quantized weight formats (q4_0 ... q6_k, ir/core.h): dequantize and quantize rows,
 * and the CPU products of f32 activations with quantized weights dequantized on the fly.
 * Nothing here allocates; the products' SIMD paths (AVX2, AVX-512; NEON on aarch64) are chosen at
 * run time. */
#ifndef GP_CPU_QUANT_H
#define GP_CPU_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "ir/core.h"

/*
 * Block layouts (little-endian; "d" and "m" are IEEE binary16; element i of a block):
 *   q4_0 (32, 18 B): d, qs[16]; q = qs[i % 16] >> 4 * (i / 16) & 15; x = d * (q - 8)
 *   q4_1 (32, 20 B): d, m, qs[16]; q as q4_0; x = d * q + m
 *   q5_0 (32, 22 B): d, qh[4] (u32: bit i is bit 4 of q_i), qs[16]; x = d * (q - 16)
 *   q5_1 (32, 24 B): d, m, qh[4], qs[16]; x = d * q + m
 *   q8_0 (32, 34 B): d, int8 q[32]; x = d * q
 *   q4_k (256, 144 B): d, dmin, scales[12] (eight 6-bit scales sc_j and mins m_j, packed:
 *        j < 4: sc = s[j] & 63, m = s[j + 4] & 63; j >= 4: sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4,
 *        m = (s[j + 4] >> 4) | (s[j] >> 6) << 4), qs[128]; sub-block j = i / 32 takes the
 *        low (j even) or high (j odd) nibbles of qs[32 * (j / 2) + i % 32]; x = d sc_j q - dmin m_j
 *   q5_k (256, 176 B): d, dmin, scales[12], qh[32] (bit j of qh[i % 32] is bit 4 of q_i), qs[128]
 *   q6_k (256, 210 B): ql[128], qh[64], int8 scales[16] (one per 16), d. With i = 128 h + 32 k + l:
 *        q = (ql[64 h + 32 (k & 1) + l] >> 4 (k >> 1) & 15) | (qh[32 h + l] >> 2 k & 3) << 4;
 *        x = d * scales[i / 16] * (q - 32)
 * Dequantization computes in f32 in the order the python gguf package does (for example
 * (d * sc) * q - (dmin * m) for q4_k), so its values are bit for bit the package's.
 */

/* x[n] from a row of n / gp_dtype_block(t) blocks; n a multiple of the block. */
void gp_quant_dequantize_row(gp_dtype t, const void *src, float *dst, int64_t n);

/*
 * A row of n finite floats (n a multiple of the block) into blocks of type t. Round to nearest
 * throughout.
 *  - q8_0, q4_0, q4_1, q5_0, q5_1: ggml's reference rules, byte for byte those of gguf.quants
 *    (q8_0: d = absmax / 127; q4_0/q5_0: d = (the element of largest magnitude) / -8 or / -16;
 *    q4_1/q5_1: d = (max - min) / 15 or / 31, m = min).
 *  - q4_k, q5_k: per sub-block of 32 the range [min(0, min x), max x] gives a scale (range / 15 or
 *    / 31) and a min (-min(0, min x)); d and dmin are the largest scale and min / 63, each sub-block's
 *    6-bit scale and min round to nearest against the stored f16 d and dmin, and the q round to
 *    nearest against the resulting d sc and dmin m.
 *  - q6_k: per 16 the scale is absmax / 31 (q - 32 in -31..31, symmetric), d = largest scale / 127,
 *    int8 scales and then q round to nearest against the stored d.
 */
void gp_quant_quantize_row(gp_dtype t, const float *src, void *dst, int64_t n);

/* Products with f32 activations (cpu/quant_f32.c):
 * y[m * ldy + n] = sum_k x[m * ldx + k] W[n, k] for n in [n0, n1) and every m < M, W's values those
 * of gp_quant_dequantize_row and the sum in f32 in one fixed order per output
 * (cpu/quant_f32_internal.h): bit for bit the same for every split of [n0, n1) and every M
 * (decode and prompt agree), and the same on the AVX2, AVX-512 and NEON paths (the portable one
 * rounds each product, so it differs in the last bits). w: [N] rows of gp_dtype_row_bytes(wt, K) bytes;
 * K a multiple of gp_dtype_block(wt). The path follows gp_quant_force_isa (vnni and amx run
 * avx512's, avxvnni avx2's, dotprod and i8mm neon's). */
void gp_quant_matmul_f32(gp_dtype wt, const void *w, int64_t n0, int64_t n1, const float *x,
                         int64_t ldx, int64_t M, int64_t K, float *y, int64_t ldy);

/* The kernel paths of gp_quant_matmul_f32. GP_QUANT_ISA_AUTO picks the best one the CPU has (the
 * default). */
enum {
    GP_QUANT_ISA_AUTO = -1,
    GP_QUANT_ISA_PORTABLE = 0, /* plain C */
    GP_QUANT_ISA_AVX2 = 1,     /* AVX2 + FMA + F16C (gp_quant_matmul_ws: maddubs integer dots) */
    GP_QUANT_ISA_AVX512 = 2,   /* AVX-512 F/BW/VL (gp_quant_matmul_ws: avx2's integer dots) */
    GP_QUANT_ISA_VNNI = 3,     /* AVX-512 F/BW/VL + VNNI: gp_quant_matmul_f32 runs avx512's;
                                * gp_quant_matmul_ws vpdpbusd on zmm */
    GP_QUANT_ISA_AMX = 4,      /* vnni + AVX512-BF16 + AMX-TILE/BF16 (the OS granting the tile
                                * state): gp_quant_matmul_f32 runs avx512's; gp_quant_matmul_ws
                                * runs prompts on AMX tiles */
    GP_QUANT_ISA_AVXVNNI = 5,  /* avx2 + AVX-VNNI: gp_quant_matmul_f32 runs avx2's;
                                * gp_quant_matmul_ws vpdpbusd on ymm */
    GP_QUANT_ISA_NEON = 6,     /* aarch64 Advanced SIMD (every ARMv8-A processor): the f32
                                * products in NEON (the same bits as avx2's); gp_quant_matmul_ws
                                * widening multiplies (SMULL + SADALP) */
    GP_QUANT_ISA_DOTPROD = 7,  /* neon + FEAT_DotProd: gp_quant_matmul_ws SDOT */
    GP_QUANT_ISA_I8MM = 8,     /* dotprod + FEAT_I8MM: gp_quant_matmul_ws SMMLA on pairs of
                                * rows and columns */
    GP_QUANT_ISA_COUNT
};

/* Prompt products with a planned workspace, on AMX (cpu/quant_amx.c) or with integer dot
 * products (cpu/quant_int_x86.h: paths vnni, avxvnni, avx2 and avx512, which runs avx2's;
 * cpu/quant_int_neon.h: paths i8mm, dotprod and neon):
 * gp_quant_matmul_ws_bytes(M, K) is the workspace for M rows of K: 4 K (M rounded up to 16) bytes
 * when M > GP_QUANT_WS_MIN_M, else 0.
 * gp_quant_matmul_ws is thread ith's part of y [M, N] = x W^T (all threads call it with the same
 * arguments); it returns 0, having done nothing, unless the path has such a form, M >
 * GP_QUANT_WS_MIN_M (the k-quants on the integer paths: M >= GP_QUANT_VNNI_MIN_M) and ws_size >=
 * gp_quant_matmul_ws_bytes(M, K): then gp_quant_matmul_f32 is the caller's to run.
 * amx: each weight and activation is split into two bf16 halves, hi = bf16(v) and
 * lo = bf16(v - hi), and y = sum hi_x hi_w + lo_x hi_w + hi_x lo_w in f32 (AMX's TDPBF16PS, which
 * flushes subnormal inputs and results to zero); the error is some 2^-16 of sum |x w| beyond the
 * f32 sum's (tests/test_quant_f32.c bounds it). Threads split the 16-row tiles of x.
 * The integer paths: x quantized per block of 32 to two 8-bit parts, the weights' integers exact;
 * the error is at most sum over blocks of (max |x| / 127 / 508) sum |w| beyond the f32 rounding
 * (cpu/quant_int_x86.h), and the integer paths give the same bits as each other.
 * Each output's operations depend on its row and column only, so every thread count gives the same
 * bits (not those of gp_quant_matmul_f32). */
#define GP_QUANT_WS_MIN_M 5 /* at M = 5 the f32 path is still faster (bench/quant-notes.md) */
/* The integer paths (cpu/quant_int_x86.h) for the k-quants from this many rows (at 6 it only matches
 * the f32 path: each superblock's 6-bit scales are decoded column by column); the formats of
 * 32-element blocks take it from GP_QUANT_WS_MIN_M + 1 (bench/quant-notes.md). Both thresholds
 * apply unmeasured to the aarch64 paths (no aarch64 machine to time them on). */
#define GP_QUANT_VNNI_MIN_M 8
static inline int64_t gp_quant_matmul_ws_bytes(int64_t M, int64_t K)
{
    return M > GP_QUANT_WS_MIN_M ? 4 * K * ((M + 15) / 16 * 16) : 0;
}
int gp_quant_matmul_ws(gp_dtype wt, const void *w, int64_t N, const float *x, int64_t ldx,
                       int64_t M, int64_t K, float *y, int64_t ldy, void *ws, size_t ws_size,
                       int ith, int nth);

/* The same product in two phases, for a pool whose threads can wait at a barrier (the CPU
 * backend): when gp_quant_matmul_ws_taken(wt, M, K, ws, ws_size), every thread runs
 * gp_quant_matmul_ws_prep (its share of x's halves into ws), then after the barrier
 * gp_quant_matmul_ws_cols on its own columns [n0, n1) (all rows). Each output's operations are
 * gp_quant_matmul_ws's, so the bits are its bits for every split; the weights are unpacked once
 * for all rows instead of once a thread. */
int gp_quant_matmul_ws_taken(gp_dtype wt, int64_t M, int64_t K, const void *ws, size_t ws_size);
void gp_quant_matmul_ws_prep(const float *x, int64_t ldx, int64_t M, int64_t K, void *ws, int ith,
                             int nth);
void gp_quant_matmul_ws_cols(gp_dtype wt, const void *w, int64_t n0, int64_t n1, int64_t M,
                             int64_t K, float *y, int64_t ldy, const void *ws);

/* 1 when this build and CPU can run path isa, else 0. */
int gp_quant_isa_supported(int isa);
/* Makes every later gp_quant_matmul_f32 use path isa (or AUTO); -1 and no change when
 * unsupported. Meant for tests and benchmarks, not to be called while products run. */
int gp_quant_force_isa(int isa);
/* The path gp_quant_matmul_f32 uses now, and a name for one ("portable", "avx2", "avx512",
 * "vnni", "amx", "avxvnni", "neon", "dotprod", "i8mm"). AUTO prefers amx, vnni, avx512, avxvnni,
 * avx2 (x86-64), i8mm, dotprod, neon (aarch64), portable, in that order. */
int gp_quant_isa(void);
const char *gp_quant_isa_name(int isa);

#endif
