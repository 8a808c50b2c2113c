/* gp_quant_matmul_ws's integer path on AVX-512 VNNI (cpu/quant_int_x86.h), built with those
 * flags only (cpu/CMakeLists.txt); chosen at run time by cpu/quant_f32.c. */
#define QI_BITS 512
#define QI_PATH gp_qint_avx512
#include "cpu/quant_int_x86.h"
