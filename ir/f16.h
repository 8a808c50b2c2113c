/* Half-precision conversions (IEEE binary16 and bfloat16 <-> f32), bit-exact with the hardware
 * instructions: round to nearest even, subnormals kept, overflow to Inf, NaNs stay NaN (quieted);
 * and cast's f32 -> int32, which every backend does alike. */
#ifndef GP_IR_F16_H
#define GP_IR_F16_H

#include <stdint.h>
#include <string.h>

static inline uint32_t gp_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float gp_f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* binary16 -> f32, exact. Written with masks rather than branches so loops over it vectorize. */
static inline float gp_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t em = h & 0x7fffu;                           /* exponent and mantissa */
    uint32_t normal = (em << 13) + ((127u - 15u) << 23); /* rebias the exponent */
    /* Inf keeps a zero mantissa; a NaN gets the quiet bit, as vcvtph2ps does. */
    uint32_t quiet = (uint32_t)((em & 0x3ffu) != 0) << 22;
    uint32_t special = 0x7f800000u | ((em & 0x3ffu) << 13) | quiet;
    /* Subnormals and zero: em * 2^-24, exact in f32 (em < 2^10). */
    uint32_t sub = gp_f32_bits((float)(int32_t)em * 0x1p-24f);
    uint32_t is_special = 0u - (uint32_t)(em >= 0x7c00u), is_normal = 0u - (uint32_t)(em >= 0x0400u);
    uint32_t mag = (special & is_special) | (normal & is_normal & ~is_special) | (sub & ~is_normal);
    return gp_f32_from_bits(sign | mag);
}

/* f32 -> binary16, round to nearest even. */
static inline uint16_t gp_f32_to_f16(float f)
{
    uint32_t x = gp_f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    x &= 0x7fffffffu;
    if (x > 0x7f800000u) /* NaN: keep the top payload bits, set the quiet bit */
        return (uint16_t)(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
    if (x >= 0x477ff000u) /* >= 65520 (halfway from the largest finite 65504 to 2^16): Inf */
        return (uint16_t)(sign | 0x7c00u);
    if (x >= 0x38800000u) { /* >= 2^-14: a normal f16 */
        /* Adding 0xfff plus the lowest kept bit rounds to nearest even; a carry out of the
         * mantissa correctly bumps the exponent. */
        x += ((uint32_t)(15 - 127) << 23) + 0xfffu + ((x >> 13) & 1u);
        return (uint16_t)(sign | (x >> 13));
    }
    /* Subnormal or zero: the result is round(|f| * 2^24) units of 2^-24 (1024 is the smallest normal,
     * whose bits are the same integer). Adding 2^23 makes the FPU round to an integer, to even. */
    float scaled = gp_f32_from_bits(x) * 0x1p24f;
    return (uint16_t)(sign | (gp_f32_bits(scaled + 0x1p23f) - 0x4b000000u));
}

/* bfloat16 -> f32: the top half of the f32 bits. */
static inline float gp_bf16_to_f32(uint16_t h)
{
    return gp_f32_from_bits((uint32_t)h << 16);
}

/* f32 -> bfloat16, round to nearest even; NaNs quieted (the rounding could turn one into Inf). */
static inline uint16_t gp_f32_to_bf16(float f)
{
    uint32_t x = gp_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x0040u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

/* f32 -> int32 as cast does it on every backend: toward zero, saturating, NaN -> 0 (C leaves the
 * overflow undefined). Device code too (cuda/cuda_internal.cuh). */
#ifdef __CUDACC__
#define GP_F16_HD __host__ __device__ __forceinline__
#else
#define GP_F16_HD static inline
#endif
GP_F16_HD int32_t gp_f32_to_i32_sat(float f)
{
    if (f != f)
        return 0;
    if (f >= 2147483648.0f)
        return INT32_MAX;
    if (f <= -2147483648.0f)
        return INT32_MIN;
    return (int32_t)f;
}

#endif
