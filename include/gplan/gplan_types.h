/* The types gplan's public API shares with its internals: element types and the dims limit.
 * Installed as gplan/gplan_types.h beside gplan/gplan.h; ir/core.h includes it too, so the compiler,
 * the plan files and the API agree on every value. Self-contained: no internal header. */
#ifndef GP_GPLAN_GPLAN_TYPES_H
#define GP_GPLAN_GPLAN_TYPES_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GP_MAX_DIMS 4

/* Element types. The block-quantized ones (ggml's formats, docs/gguf.md) are for weights only: a
 * row of n elements is n / gp_dtype_block(t) blocks of gp_dtype_block_bytes(t) bytes, and n must be
 * a multiple of the block. Their values are appended so plan files keep the numbers they had. */
typedef enum {
    GP_F32,
    GP_F16,
    GP_BF16,
    GP_I32,
    GP_Q4_0, /* 32 elements: f16 scale d, 16 bytes of 4-bit q; x = d * (q - 8) */
    GP_Q4_1, /* 32: f16 d, f16 m, 16 bytes of 4-bit q; x = d * q + m */
    GP_Q5_0, /* 32: f16 d, 4 bytes of high bits, 16 bytes of low nibbles; x = d * (q - 16) */
    GP_Q5_1, /* 32: f16 d, f16 m, 4 bytes of high bits, 16 bytes of low nibbles; x = d * q + m */
    GP_Q8_0, /* 32: f16 d, 32 int8 q; x = d * q */
    GP_Q4_K, /* 256: f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128 bytes of 4-bit q */
    GP_Q5_K, /* 256: as q4_k plus 32 bytes of high bits */
    GP_Q6_K, /* 256: 128 bytes low 4 bits, 64 bytes high 2 bits, 16 int8 scales, f16 d */
    GP_DTYPE_COUNT
} gp_dtype;

/* Bytes of one element; 0 for the block-quantized dtypes. */
size_t gp_dtype_size(gp_dtype t);
/* "f32", "f16", "bf16", "i32", "q4_0", ... */
const char *gp_dtype_name(gp_dtype t);

#ifdef __cplusplus
}
#endif

#endif
