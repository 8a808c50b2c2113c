/* gp_quant_matmul_f32's AVX-512 F/BW/VL path (cpu/quant_f32_x86.h), built with those flags
 * only (cpu/CMakeLists.txt); chosen at run time by cpu/quant_f32.c. */
#define QF_BITS 512
#include "cpu/quant_f32_x86.h"
