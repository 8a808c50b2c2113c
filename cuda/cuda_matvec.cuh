/* Device code of the matrix-vector kernels (cuda_matvec.cu): epilogues, a staged norm of x,
 * 16-byte weight chunks. */
#ifndef GP_CUDA_MATVEC_CUH
#define GP_CUDA_MATVEC_CUH

#include "cuda/cuda_internal.cuh"

/* Logical operands: A[b0][b1][m][k] at a + b0 * sa0 + b1 * sa1 + m * sm + k * sk (bytes). */
typedef struct {
    char *p;
    int t;
    int64_t s0, s1; /* batch strides, 0 where the operand broadcasts */
    int64_t sr, sc; /* row and column strides */
    int64_t n0, n1; /* the operand's own batch extents (1 when broadcast) */
} mat;

static inline mat mat_of(const KT &k, int trans)
{
    mat r;
    r.p = k.p;
    r.t = k.t;
    r.s0 = k.ne[0] == 1 ? 0 : k.nb[0];
    r.s1 = k.ne[1] == 1 ? 0 : k.nb[1];
    r.n0 = k.ne[0];
    r.n1 = k.ne[1];
    r.sr = trans ? k.nb[3] : k.nb[2];
    r.sc = trans ? k.nb[2] : k.nb[3];
    return r;
}

static inline int es_of(int t)
{
    return (int)gp_dtype_size((gp_dtype)t);
}

/* The bytes [lo, hi) that t's elements span (launch sizes). */
static inline void kt_span(const KT &t, uintptr_t *lo, uintptr_t *hi)
{
    int64_t ext = es_of(t.t);
    for (int d = 0; d < 4; d++)
        ext += (t.ne[d] - 1) * t.nb[d];
    *lo = (uintptr_t)t.p;
    *hi = (uintptr_t)t.p + (uintptr_t)ext;
}

/* 1 when the bytes t's elements span meet [lo, hi). */
static inline int kt_meets(const KT &t, uintptr_t lo, uintptr_t hi)
{
    uintptr_t a, b;
    kt_span(t, &a, &b);
    return a < hi && lo < b;
}

/* Host: a norm's parameters (gp_cu_prenorm; x aside) as kernels read them. */
static inline NORM norm_params(const gp_cu_ctx *c, const gp_cu_prenorm *p)
{
    NORM nm;
    nm.is_ln = p->is_ln;
    nm.eps = p->eps;
    nm.w = gp_kt_of(c, &p->w);
    nm.has_b = p->b.data != NULL;
    nm.b = nm.has_b ? gp_kt_of(c, &p->b) : nm.w;
    nm.fold = p->fold;
    nm.off = p->offset;
    return nm;
}

/* ---- epilogues ---- */

struct EPI {
    int n;
    int op[GP_CU_MAX_EPI];
    KT other[GP_CU_MAX_EPI];
};

/* The epilogue's operands at column col (the other operands of its ADDs and MULs, in order): a
 * kernel may load them ahead of its sum, so that they are not a round trip after it. */
struct EpiVals {
    float v[GP_CU_MAX_EPI];
};

__device__ __forceinline__ EpiVals epi_load(const EPI &e, int64_t col)
{
    EpiVals r;
#pragma unroll
    for (int k = 0; k < GP_CU_MAX_EPI; k++) {
        r.v[k] = 0.0f;
        if (k < e.n && e.op[k] != GP_OP_GELU) {
            const KT &o = e.other[k];
            r.v[k] = ld_f(o.p + (o.ne[3] == 1 ? 0 : col * o.nb[3]), o.t);
        }
    }
    return r;
}

/* v through the epilogue, with the operands epi_load gave. */
/* GP_OP_GELU (the tanh approximation), as the CPU and k_unary compute it. */
__device__ __forceinline__ float gelu_tanh(float v)
{
    return 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
}

__device__ __forceinline__ float epi_apply_vals(const EPI &e, const EpiVals &ev, float v)
{
#pragma unroll
    for (int k = 0; k < GP_CU_MAX_EPI; k++) {
        if (k >= e.n)
            break;
        if (e.op[k] == GP_OP_GELU)
            v = gelu_tanh(v);
        else
            v = e.op[k] == GP_OP_ADD ? v + ev.v[k] : v * ev.v[k];
    }
    return v;
}

__device__ __forceinline__ float epi_apply(const EPI &e, int64_t col, float v)
{
    return epi_apply_vals(e, epi_load(e, col), v);
}

__device__ __forceinline__ void stage_norm(const NORM &nm, const float *x, int64_t K, float *xs)
{
    float mean, inv;
    norm_stats(nm, x, K, &mean, &inv);
    for (int64_t i = threadIdx.x; i < K; i += blockDim.x)
        xs[i] = norm_one(nm, x, i, mean, inv);
    __syncthreads();
}

/* 16 bytes of weights as floats: vec16<W>::N elements of type W, unpacked in order; T: W's
 * gp_dtype (for instances that take their operands' dtypes as constants). */
__device__ __forceinline__ float2 pair_f2(__half2 h)
{
    return __half22float2(h);
}
__device__ __forceinline__ float2 pair_f2(__nv_bfloat162 h)
{
    return __bfloat1622float2(h);
}

/* The 16-bit types, through their pair type P (__half2, __nv_bfloat162), of gp_dtype DT. */
template <typename P, int DT> struct vec16_pairs {
    enum { N = 8, T = DT };
    static __device__ __forceinline__ void unpack(uint4 u, float *f)
    {
        const P *h = (const P *)&u;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float2 v = pair_f2(h[i]);
            f[2 * i] = v.x;
            f[2 * i + 1] = v.y;
        }
    }
};

template <typename W> struct vec16;
template <> struct vec16<__half> : vec16_pairs<__half2, GP_F16> {};
template <> struct vec16<__nv_bfloat16> : vec16_pairs<__nv_bfloat162, GP_BF16> {};
template <> struct vec16<float> {
    enum { N = 4, T = GP_F32 };
    static __device__ __forceinline__ void unpack(uint4 u, float *f)
    {
        f[0] = __uint_as_float(u.x);
        f[1] = __uint_as_float(u.y);
        f[2] = __uint_as_float(u.z);
        f[3] = __uint_as_float(u.w);
    }
};

/* acc[0, vec16<W>::N) += the rows of u (row r0 + step i in u[i]; rows from k1 on are left out)
 * times their x, xs[row - k0]: a batch of a [K, N] split's weight chunks, in row order. */
template <typename W, int U>
__device__ __forceinline__ void rows_fma(const uint4 (&u)[U], const float *xs, int64_t r0,
                                         int64_t step, int64_t k0, int64_t k1, float *acc)
{
    typedef vec16<W> V;
#pragma unroll
    for (int i = 0; i < U; i++) {
        int64_t row = r0 + step * i;
        if (row >= k1)
            break;
        float wv[V::N], xk = xs[row - k0];
        V::unpack(u[i], wv);
#pragma unroll
        for (int q = 0; q < V::N; q++)
            acc[q] += wv[q] * xk;
    }
}

__device__ __forceinline__ uint4 ld_stream(const void *p)
{
    /* Weights are read once per eval: don't let them evict activations from L1. */
    return __ldcs((const uint4 *)p);
}


/* Host (cuda_matvec.cu): a one-row product o = a b (ta, tb: transposed operands) in a
 * matrix-vector kernel, its epilogue fused (epi, may be NULL) and, with pre, x = the norm of pre's
 * input computed in the kernel: 1 when launched, 0 when no kernel takes these operands (nothing
 * launched), -1 with c->err. */
int gp_cu_try_matvec(gp_cu_ctx *c, const KT &o, const KT &ka, const KT &kb, int ta, int tb,
                     const gp_cu_tensor *in, void *ws, size_t ws_size, const gp_cu_epilogue *epi,
                     const gp_cu_prenorm *pre);
/* Host: c->x_gelu where the product's kernel cannot stage gelu(x): x [n] (f32, contiguous)
 * becomes gelu(x) in place (one launch). 0, or -1 with c->err. */
int gp_cu_x_gelu_now(gp_cu_ctx *c, const float *x, int64_t n);

#endif
