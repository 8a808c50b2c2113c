/* gp_quant_matmul_ws's integer path on aarch64: SMMLA, built with +dotprod+i8mm (cpu/quant_int_neon.h,
 * cpu/CMakeLists.txt); chosen at run time by cpu/quant_f32.c. */
#define QI_KIND 2
#define QI_PATH gp_qint_i8mm
#include "cpu/quant_int_neon.h"
