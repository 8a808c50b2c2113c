/* gp_quant_matmul_ws's integer path on aarch64: SDOT by element, built with +dotprod (cpu/quant_int_neon.h,
 * cpu/CMakeLists.txt); chosen at run time by cpu/quant_f32.c. */
#define QI_KIND 1
#define QI_PATH gp_qint_dotprod
#include "cpu/quant_int_neon.h"
