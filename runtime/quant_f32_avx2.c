/* gp_quant_matmul_f32's AVX2 + FMA + F16C path (runtime/quant_f32_x86.h), built with those flags
 * only (runtime/kernels.cmake); chosen at run time by runtime/quant_f32.c. */
#define QF_BITS 256
#include "runtime/quant_f32_x86.h"
