/* The CUDA backend's kernels: one entry point enqueues one node's computation on a stream, with the
 * semantics of runtime/cpu_kernels.h (gp_cpu_compute), and is tested against it. */
#ifndef GP_CUDA_KERNELS_H
#define GP_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "ir/core.h"

/*
 * A tensor as a CUDA kernel sees it. Sizes that change per eval (symbolic dims) are not baked into
 * launches: a kernel reads them from the device parameter block (gp_cu_ctx.d_syms) when it runs, so
 * a captured graph replays correctly for any size up to the one it was launched for.
 */
typedef struct {
    void *data;              /* device address of element 0 */
    gp_dtype dtype;
    int ndim;                /* 0..GP_MAX_DIMS */
    int64_t ne[GP_MAX_DIMS]; /* [ndim] shape; a symbolic dim holds its bound (unused here) */
    int sym[GP_MAX_DIMS];    /* [ndim] symbolic dim index into the param block, or -1 */
    int64_t nb[GP_MAX_DIMS]; /* [ndim] strides in bytes (0 allowed: a broadcast) */
} gp_cu_tensor;

/* What every launch needs. Owned by the caller (the backend, or a test). */
typedef struct {
    cudaStream_t stream;
    cublasHandle_t blas;     /* NULL: matmuls use gplan's own kernels only */
    const int64_t *d_syms;   /* device [n_syms]: each symbolic dim's size for this eval */
    const int64_t *h_syms;   /* host [n_syms]: launch sizes, >= the eval's (a graph bucket's top) */
    int n_syms;
    unsigned *d_counters;    /* device [n_counters], zero between launches: split-K matvec tiles */
    int n_counters;
    int no_matvec;           /* 1: M == 1 matmuls go to cuBLAS too (for benchmarks) */
    void *blas_ws;           /* the workspace cuBLAS was last given (cublasSetWorkspace) */
    size_t blas_ws_size;
    int64_t launches;        /* kernels and library calls enqueued so far */
    char err[256];           /* the last error */
} gp_cu_ctx;

/*
 * Enqueues node `op` on ctx->stream: out from in[0..n_in), as gp_cpu_compute. ws (ws_size bytes,
 * device) is the node's planned workspace (runtime/plan.h: GP_WS_CUBLAS_BYTES for matmul, the
 * split-KV partials for attention); it may be NULL when the op needs none. Allocates nothing.
 * Index inputs out of range are skipped by the kernels (no out-of-bounds access); the runtime
 * checks them before the eval. Returns 0, or -1 with ctx->err set (a launch or cuBLAS failure, an
 * unsupported layout).
 */
int gp_cuda_compute(gp_cu_ctx *ctx, gp_op op, const gp_attrs *a, const gp_cu_tensor *out,
                    const gp_cu_tensor *in, int n_in, void *ws, size_t ws_size);

/* Counters gp_cuda_compute may use at once (the size d_counters must have). */
#define GP_CU_COUNTERS 4096

#ifdef __cplusplus
}
#endif

#endif
