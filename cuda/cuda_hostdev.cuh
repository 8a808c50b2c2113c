/* Device intrinsics with their host forms, for the kernels whose host twins the tests compare bit
 * for bit (gp_cuda_qdot_host, gp_cuda_quant_deq8_host): unrolling, products, sums and differences
 * rounded on their own (never contracted into fused multiply-adds; x86-64's baseline has no FMA),
 * and binary16 bits to float. C++ only (cuda_qdot.cu, cuda_quant.cu). */
#ifndef GP_CUDA_HOSTDEV_CUH
#define GP_CUDA_HOSTDEV_CUH

#include <cuda_fp16.h>
#include <stdint.h>

#include "ir/f16.h"

/* #pragma unroll in code the host compiles too (gcc warns of pragmas it does not know). */
#ifdef __CUDA_ARCH__
#define HD_UNROLL _Pragma("unroll")
#else
#define HD_UNROLL
#endif

__host__ __device__ __forceinline__ float mul_rn(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

__host__ __device__ __forceinline__ float add_rn(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}

__host__ __device__ __forceinline__ float sub_rn(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}

__host__ __device__ __forceinline__ float div_rn(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}

/* The binary16 in the low 16 bits of bits. */
__host__ __device__ __forceinline__ float h2f_bits(uint32_t bits)
{
#ifdef __CUDA_ARCH__
    return __half2float(__ushort_as_half((unsigned short)(bits & 0xffffu)));
#else
    return gp_f16_to_f32((uint16_t)(bits & 0xffffu));
#endif
}

#endif
