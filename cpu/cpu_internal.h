/* Helpers shared by the CPU kernel files: strided row loads and stores with dtype conversion,
 * shapes padded to four dims, and reductions in a fixed order. Not part of the runtime's API. */
#ifndef GP_CPU_CPU_INTERNAL_H
#define GP_CPU_CPU_INTERNAL_H

#include <stdatomic.h>
#include <stdint.h>

#include "cpu/cpu_kernels.h"
#include "ir/f16.h"

/* Elements per stack chunk in row loops (a multiple of the 8 reduction lanes). */
#define GP_CHUNK 256

/* A tensor right-aligned to four dims: missing outer dims have ne 1 and nb 0. */
typedef struct {
    char *p;
    gp_dtype t;
    int64_t ne[4];
    int64_t nb[4];
} gp_t4;

static inline gp_t4 gp_t4_of(const gp_ktensor *k)
{
    gp_t4 r;
    r.p = k->data;
    r.t = k->dtype;
    int off = 4 - k->ndim;
    for (int d = 0; d < 4; d++) {
        r.ne[d] = d < off ? 1 : k->ne[d - off];
        r.nb[d] = d < off ? 0 : k->nb[d - off];
    }
    return r;
}

/* Rows (all dims but the last) of a four-dim shape. */
static inline int64_t gp_t4_rows(const gp_t4 *t)
{
    return t->ne[0] * t->ne[1] * t->ne[2];
}

/* Byte offset of row r of `shape` within tensor t (t may broadcast: its dims of 1 repeat). */
static inline int64_t gp_t4_row_off(const gp_t4 *t, const int64_t shape[4], int64_t r)
{
    int64_t i2 = r % shape[2];
    int64_t i1 = (r / shape[2]) % shape[1];
    int64_t i0 = r / (shape[2] * shape[1]);
    return (t->ne[0] == 1 ? 0 : i0 * t->nb[0]) + (t->ne[1] == 1 ? 0 : i1 * t->nb[1]) +
           (t->ne[2] == 1 ? 0 : i2 * t->nb[2]);
}

/* The rows [*r0, *r1) that thread ith of nth computes out of n. */
static inline void gp_share(int64_t n, int ith, int nth, int64_t *r0, int64_t *r1)
{
    *r0 = n * ith / nth;
    *r1 = n * (ith + 1) / nth;
}

/* e^x in f32 arithmetic only (no library call, so loops over it vectorize; the same bits in every
 * build: -ffp-contract=off, no FMA): x = n ln 2 + r with |r| <= ln 2 / 2, e^r by its Taylor
 * polynomial to degree 7 (truncation under 1e-8 relative), times 2^n as two powers of two (so
 * results down to the subnormals and up to the overflow to +inf come out as expf's). Within 1.3
 * ulp of expf; NaN stays NaN. */
static inline float gp_expf(float x)
{
    /* Quiet comparisons (no FP exception on NaN), so loops over it if-convert and vectorize. */
    float xc = __builtin_isless(x, -104.0f) ? -104.0f : x;
    xc = __builtin_isgreater(xc, 89.0f) ? 89.0f : xc;
    xc = __builtin_isunordered(xc, xc) ? 0.0f : xc;
    const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    float nf = (xc * 1.44269504f + magic) - magic;
    float r = (xc - nf * 0.693145752f) - nf * 1.42860677e-6f; /* ln 2 = hi + lo, hi exact * n */
    float p = 1.98412698e-4f;                                 /* 1/7! */
    p = p * r + 1.38888889e-3f;
    p = p * r + 8.33333333e-3f;
    p = p * r + 4.16666667e-2f;
    p = p * r + 1.66666667e-1f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t n = (int32_t)nf, n1 = n / 2; /* n in [-150, 129]: both halves' exponents normal */
    union {
        uint32_t u;
        float f;
    } s1, s2;
    s1.u = (uint32_t)(n1 + 127) << 23;
    s2.u = (uint32_t)(n - n1 + 127) << 23;
    float y = (p * s1.f) * s2.f;
    return __builtin_isunordered(x, x) ? x : y;
}

/* dst[0..n) = src elements 0..n of dtype t, `stride` bytes apart, as f32. */
void gp_cpu_load_row(float *dst, const char *src, int64_t n, int64_t stride, gp_dtype t);

/* Elements 0..n of a row as f32: src itself when it is contiguous f32, else loaded into buf. */
static inline const float *gp_cpu_row(float *buf, const char *src, int64_t n, int64_t stride,
                                      gp_dtype t)
{
    if (t == GP_F32 && stride == 4)
        return (const float *)(const void *)src;
    gp_cpu_load_row(buf, src, n, stride, t);
    return buf;
}

/* Stores src[0..n) f32 as dtype t into dst with `stride` bytes between elements. */
void gp_cpu_store_row(char *dst, int64_t stride, gp_dtype t, const float *src, int64_t n);

/* Sum of x[0..n) in 8 interleaved lanes combined pairwise: a fixed order for every caller. */
typedef struct {
    float l[8];
} gp_acc8;

static inline void gp_acc8_zero(gp_acc8 *a)
{
    for (int j = 0; j < 8; j++)
        a->l[j] = 0.0f;
}

static inline float gp_acc8_total(const gp_acc8 *a)
{
    return ((a->l[0] + a->l[1]) + (a->l[2] + a->l[3])) + ((a->l[4] + a->l[5]) + (a->l[6] + a->l[7]));
}

/* Adds x[0..n) to the lanes; element i goes to lane i % 8 when called on chunks of GP_CHUNK. */
static inline void gp_acc8_add(gp_acc8 *a, const float *x, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            a->l[j] += x[i + j];
    for (int j = 0; i < n; i++, j++)
        a->l[j] += x[i];
}

/* Adds x[i] * y[i]; same lane rule. */
static inline void gp_acc8_dot(gp_acc8 *a, const float *x, const float *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            a->l[j] += x[i + j] * y[i + j];
    for (int j = 0; i < n; i++, j++)
        a->l[j] += x[i] * y[i];
}

void gp_cpu_matmul(const gp_attrs *a, const gp_ktensor *out, const gp_ktensor *in, int ith,
                   int nth);

/* Elementwise steps applied to a product's rows before they are stored (the planned CPU backend
 * fuses a matmul with the nodes that follow it, runtime/cpu_backend.c): in order, each step is
 *  - GP_EPI_BIAS:     v[n] += t[n] (t: f32 [N], contiguous);
 *  - GP_EPI_UNARY:    v = op(v) (gelu, gelu_erf, silu, scale: the elementwise kernels' functions);
 *  - GP_EPI_RESIDUAL: v[m][n] += t[m][n] (t: f32 [M, N], n contiguous).
 * The same f32 operations as the unfused nodes (their outputs f32), so the same bits. */
enum { GP_EPI_BIAS, GP_EPI_UNARY, GP_EPI_RESIDUAL, GP_EPI_MAX = 3 };
typedef struct {
    int n;
    struct {
        int kind;
        gp_op op;            /* GP_EPI_UNARY */
        const gp_attrs *at;  /* GP_EPI_UNARY */
        const float *t;      /* GP_EPI_BIAS, GP_EPI_RESIDUAL */
        int64_t ld;          /* GP_EPI_RESIDUAL: floats between rows */
    } s[GP_EPI_MAX];
} gp_mm_epilogue;

/* gp_cpu_matmul (float weights), followed by epilogue e (NULL: none; else out is 2-D f32). next:
 * NULL, or a counter at 0 that every thread of this call shares (work items are then taken in
 * turn rather than split evenly up front: the same results). */
void gp_cpu_matmul_epi(const gp_attrs *a, const gp_ktensor *out, const gp_ktensor *in,
                       const gp_mm_epilogue *e, atomic_llong *next, int ith, int nth);

/* x[0..n) = op(x) for the unary elementwise ops (gelu, gelu_erf, silu, scale). */
void gp_cpu_unary(gp_op op, const gp_attrs *a, float *x, int64_t n);
/* matmul(x [M, K] f32, W [N, K] quantized, tb=1) -> y [M, N] f32. Threads split the output
 * columns; prompts run on AMX instead when gp_quant_matmul_ws takes them (the CPU has it and ws
 * holds gp_quant_matmul_ws_bytes(M, K)). */
void gp_cpu_matmul_quant(const gp_ktensor *out, const gp_ktensor *in, void *ws, size_t ws_size,
                         int ith, int nth);
void gp_cpu_attention(const gp_attrs *a, const gp_ktensor *out, const gp_ktensor *in, int n_in,
                      void *ws, size_t ws_size, int ith, int nth);
/* moe (cpu/cpu_moe.c): GP_MOE_PHASES phases with a barrier between them, each called by every
 * thread (route a share of the tokens; group them by expert, thread 0; gather x's rows; quantize
 * them for the integer products (quantized experts); gate and up on a share of the columns;
 * quantize silu(gate) * up's rows; down and the weighted sums on a share of the columns);
 * gp_cpu_moe runs them all on thread 0 (the others return). ws: gp_moe_ws(T, ...).total bytes
 * (cpu/moe.h). The same bits for every thread count and either form. */
#define GP_MOE_PHASES 7
void gp_cpu_moe_phase(const gp_attrs *a, const gp_ktensor *out, const gp_ktensor *in, int n_in,
                      void *ws, size_t ws_size, int ith, int nth, int phase);
void gp_cpu_moe(const gp_attrs *a, const gp_ktensor *out, const gp_ktensor *in, int n_in,
                void *ws, size_t ws_size, int ith, int nth);
/* The rows one query may score: the cache's, or a ragged batch's positions of a sequence
 * (blocks' M * block; n_in 6). */
int64_t gp_cpu_attention_span(const gp_attrs *a, const gp_ktensor *in, int n_in);

#endif
