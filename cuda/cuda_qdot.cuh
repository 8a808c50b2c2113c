/* One-token products on block-quantized weights with integer dot products (cuda_qdot.cu), for
 * cuda_quant.cu's entry points: C++ only. */
#ifndef GP_CUDA_QDOT_CUH
#define GP_CUDA_QDOT_CUH

#include "cuda/cuda_matvec.cuh"

enum { QD_MAXM = 8, QD_SMEM_MAX = 200 << 10 };

/* What a k_qdot launch computes: n products of one x (product s: rows of rb[s] bytes, N[s] rows,
 * out y[s], row m at y[s] + m ldy); t2 bit s: product s is of the second type; GLU (n 2): y[0] =
 * silu(x w[0]^T) * (x w[1]^T); epi: one product of one row whose epilogue (e, into eo) the store
 * applies. */
struct QDD {
    int n, epi;
    unsigned t2;
    const uint8_t *w[GP_CU_MAX_GROUP];
    size_t rb[GP_CU_MAX_GROUP];
    int N[GP_CU_MAX_GROUP];
    float *y[GP_CU_MAX_GROUP];
    int64_t ldy;
};

/* 1 when k_qdot takes weights of type t at w for x (rows ldx floats apart) of m_launch rows, K
 * columns (rms: with the norm staged too). */
int qd_fits(gp_dtype t, const void *w, const float *x, int64_t ldx, int64_t K, int64_t m_launch,
            int rms);

/* A single product (d.n 1) of type t: 1 when launched, 0 when not taken. */
int qd_matmul(gp_cu_ctx *c, gp_dtype t, const QDD &d, const float *x, int64_t ldx, int K,
              int64_t M, int msym, const EPI &e, const KT &eo);

/* A group of one row of x (K its length): products of type t (and t2 where d.t2 says: q4_k and
 * q6_k only), glu, with the rms_norm nm staged when rms. 1 when launched, 0 when not taken. */
int qd_group(gp_cu_ctx *c, gp_dtype t, gp_dtype t2, const QDD &d, const float *x, int K, int glu,
             int rms, const NORM &nm);

#endif
