/* runtime/quant_x86.h's kernels for the avx512 path (compiled with its own -m flags, kernels.cmake). */
#define QV_BITS 512
#define QV_VNNI 0
#define QV_NAME gp_quant_rows_avx512
#include "runtime/quant_x86.h"
