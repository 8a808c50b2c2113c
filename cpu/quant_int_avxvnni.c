/* gp_quant_matmul_ws's integer path on AVX-VNNI (vpdpbusd on ymm; cpu/quant_int_x86.h), built
 * with AVX2 + FMA + F16C + AVX-VNNI only (cpu/CMakeLists.txt); chosen at run time by
 * cpu/quant_f32.c. */
#define QI_BITS 256
#define QI_PATH gp_qint_avxvnni
#include "cpu/quant_int_x86.h"
