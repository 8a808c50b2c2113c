/* The CUDA kernels on ggml's block-quantized weights (cpu/quant.h's layouts; cuda_quant.cu):
 * products of f32 activations with quantized [N, K] weights, and lookups in quantized tables.
 * Plain C declarations, so that the backend's C files and the tests can include it too. */
#ifndef GP_CUDA_QUANT_CUH
#define GP_CUDA_QUANT_CUH

#include <stdint.h>

#include "cuda/cuda_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * y [M, N] = x [M, K] W [N, K]^T (matmul with ta = 0, tb = 1; the only form a quantized weight
 * takes), x and y f32 with contiguous rows, W the blocks as they are (rows of
 * gp_dtype_row_bytes(W, K) bytes, contiguous), K a multiple of the block. W's values are those of
 * gp_quant_dequantize_row (the same bits). M may be symbolic (read from the param block). At launch
 * sizes M <= 8 (one token): where W is 16-byte aligned and x's rows fit in shared memory as
 * k_qdot stages them, k_qdot (cuda_qdot.cu: x quantized in two 8-bit parts, integer dot products,
 * within its documented bound of the exact sums), else one warp a row in f32. Larger M (prompts), with ws (a workspace of GP_WS_CUBLAS_BYTES, as the planner gives every
 * CUDA matmul) and cuBLAS: x and tiles of W rounded to f16 in ws, their products on tensor cores
 * in f32 sums, rows of y past the param block's M written too (the launch size's); without ws,
 * tiles of 64 x 64 outputs in f32, W's tile dequantized into shared memory. epi (may be NULL):
 * k_qdot applies it for one row of x (*fused = 1: only epi->out written), else *fused = 0 (the
 * caller runs it). No norm of x (gp_cu_matmul refuses pre; groups take one). Allocates nothing.
 * 0, or -1 with c->err set (layouts it does not take, a launch or cuBLAS error).
 */
int gp_cu_quant_matmul(gp_cu_ctx *c, const gp_attrs *a, const gp_cu_tensor *out,
                       const gp_cu_tensor *in, void *ws, size_t ws_size,
                       const gp_cu_epilogue *epi, int *fused);

/*
 * gp_cuda_matvec_group for quantized weights (gp_cuda_matvec_group calls it): q, k and v, or gate
 * and up with their swiglu, in one k_qdot launch, x staged once per block (with has_norm: as
 * rms_norm(norm.x, norm.w), computed there and never written). Weights of one block type, or of
 * q4_k and q6_k (Q4_K_M's q, k and v; GLU: one type), k_qdot's layouts, x one f32 row. *launched = 0 when it does not take them (nothing launched). 0, or -1
 * with c->err.
 */
int gp_cu_quant_group(gp_cu_ctx *c, const gp_cu_group *g, int *launched);

/* cuBLAS's workspace set to [ws, ws + size) unless it is already (cuda_matmul.cu). 0, or -1 with
 * c->err set. */
int gp_cu_blas_ws(gp_cu_ctx *c, void *ws, size_t size);

/* get_rows on a quantized table [V, C]: out [T, C] (f32, f16 or bf16) = the rows ids (i32 [T])
 * dequantized, the values of gp_quant_dequantize_row rounded to out's dtype; a row whose id is
 * out of range is left unwritten. 0, or -1 with c->err set. */
int gp_cu_quant_get_rows(gp_cu_ctx *c, const gp_cu_tensor *out, const gp_cu_tensor *table,
                         const gp_cu_tensor *ids);

/* The kernels' dequantization run on the host (no GPU needed: tests compare it with
 * gp_quant_dequantize_row): elements e0 .. e0 + 7 (e0 a multiple of 8) of a row of type t into
 * v[8]. 0, or -1 when t is not quantized or e0 is not a multiple of 8. */
int gp_cuda_quant_deq8_host(gp_dtype t, const void *row, int e0, float *v);

/* k_qdot's arithmetic run on the host (no GPU needed): y [M, N] = x [M, K] w [N, K]^T as the
 * kernel computes it (x quantized in two 8-bit parts a block of 32, integer dot products), w's
 * rows contiguous and 16-byte aligned, M <= 8. 0, or -1 for a type or shape it does not take. */
int gp_cuda_qdot_host(gp_dtype t, const void *w, int N, const float *x, int K, int M, float *y);

/* Launches so far in this process, for tests: which 0, one-token products; 1, prompt products;
 * 2, lookups; 3, one-token products in k_qdot; 4, prompt products on cuBLAS; 5, grouped launches
 * (gp_cu_quant_group; their products count in 0 and 3 too). */
int64_t gp_cuda_quant_count(int which);

#ifdef __cplusplus
}
#endif

#endif
