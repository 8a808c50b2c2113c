/* gp_quant_matmul_ws's integer path on aarch64: SMULL + SADALP, any ARMv8-A, built with the baseline flags (cpu/quant_int_neon.h,
 * cpu/CMakeLists.txt); chosen at run time by cpu/quant_f32.c. */
#define QI_KIND 0
#define QI_PATH gp_qint_neon
#include "cpu/quant_int_neon.h"
