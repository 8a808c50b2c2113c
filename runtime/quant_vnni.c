/* runtime/quant_x86.h's kernels for the vnni path (compiled with its own -m flags, kernels.cmake). */
#define QV_BITS 512
#define QV_VNNI 1
#define QV_NAME gp_quant_rows_vnni
#include "runtime/quant_x86.h"
