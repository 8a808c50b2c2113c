/* runtime/quant_x86.h's kernels for the avxvnni path (compiled with its own -m flags, kernels.cmake). */
#define QV_BITS 256
#define QV_VNNI 1
#define QV_NAME gp_quant_rows_avxvnni
#include "runtime/quant_x86.h"
