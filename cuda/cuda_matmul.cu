/* CUDA matmul: out[..., M, N] = a[..., M, K] b[..., K, N] in f32 accumulation. One-row products
 * (decode) go to gplan's matrix-vector kernels (cuda_matvec.cu); the rest to cuBLAS
 * (cublasGemmStridedBatchedEx, f32 compute), converting an f32 operand to the other's 16-bit dtype in
 * the workspace when the dtypes differ; layouts cuBLAS cannot take go to a plain fallback kernel. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>

#include "cuda/cuda_matvec.cuh"
#include "cuda/cuda_quant.cuh"

/* ---- fallback: one thread per output element, k ascending ---- */

__global__ void k_matmul_naive(KT o, KT a, KT b, int ta, int tb, const int64_t *syms)
{
    pdl_begin();
    kt_resolve(o, syms);
    kt_resolve(a, syms);
    kt_resolve(b, syms);
    int64_t M = o.ne[2], N = o.ne[3], K = ta ? a.ne[2] : a.ne[3];
    int64_t sam = ta ? a.nb[3] : a.nb[2], sak = ta ? a.nb[2] : a.nb[3];
    int64_t sbk = tb ? b.nb[3] : b.nb[2], sbn = tb ? b.nb[2] : b.nb[3];
    int64_t n = o.ne[0] * o.ne[1] * M * N;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t j = i % N, r = i / N, m = r % M;
        r /= M;
        int64_t i1 = r % o.ne[1], i0 = r / o.ne[1];
        const char *pa = a.p + (a.ne[0] == 1 ? 0 : i0 * a.nb[0]) + (a.ne[1] == 1 ? 0 : i1 * a.nb[1]) +
                         m * sam;
        const char *pb = b.p + (b.ne[0] == 1 ? 0 : i0 * b.nb[0]) + (b.ne[1] == 1 ? 0 : i1 * b.nb[1]) +
                         j * sbn;
        float acc = 0.0f;
        for (int64_t k = 0; k < K; k++)
            acc += ld_f(pa + k * sak, a.t) * ld_f(pb + k * sbk, b.t);
        st_f(o.p + i0 * o.nb[0] + i1 * o.nb[1] + m * o.nb[2] + j * o.nb[3], o.t, acc);
    }
}

/* ---- cuBLAS ---- */

/* dst [n0, n1, R, C] contiguous in dtype dt from the logical operand m (launch sizes). A row-span
 * kernel (cuda_internal.cuh); thread 0 finds the span's row. */
__global__ void k_convert(char *dst, int dt, mat m, int64_t R, int64_t C)
{
    __shared__ int64_t off;
    pdl_begin();
    int64_t rows = m.n0 * m.n1 * R, per = (C + SPAN - 1) / SPAN;
    int64_t es = dt == GP_F32 ? 4 : 2;
    for (int64_t b = blockIdx.x; b < rows * per; b += gridDim.x) {
        int64_t rr = b / per, c0 = (b - rr * per) * SPAN + threadIdx.x;
        __syncthreads(); /* the last span's offset is read */
        if (threadIdx.x == 0)
            off = rr / R / m.n1 * m.s0 + rr / R % m.n1 * m.s1 + rr % R * m.sr;
        __syncthreads();
        const char *src = m.p + off;
        char *out = dst + rr * C * es;
        uint32_t v[SPAN_U];
#pragma unroll
        for (int u = 0; u < SPAN_U; u++) {
            int64_t cc = c0 + u * SPAN_THREADS;
            v[u] = cc < C ? ld_bits(src + cc * m.sc, m.t) : 0;
        }
#pragma unroll
        for (int u = 0; u < SPAN_U; u++) {
            int64_t cc = c0 + u * SPAN_THREADS;
            if (cc < C)
                st_f(out + cc * es, dt, bits_f(v[u], m.t));
        }
    }
}

/*
 * out = the epilogue e applied to o element by element: the elementwise nodes after a product
 * that cuBLAS wrote (a prompt's bias, gelu, residual) in one pass instead of a launch and a pass
 * each; e's operands broadcast over dims of 1. A row-span kernel (cuda_internal.cuh); a thread
 * of each of its first warps finds the span's row in one tensor. out is o itself or disjoint
 * from it (blas_epilogue), and each element is read and written by one thread. VEC: o and out
 * are f32 rows of 16-byte aligned vectors of 4, each operand such rows (f32) or rows of 8-byte
 * aligned vectors (16-bit) or one value per row (epi_vec_ok): a thread's SPAN_U elements are one
 * vector, loaded and stored at once.
 */
template <bool VEC> __global__ void k_epilogue(KT o, EPI e, KT out, const int64_t *syms)
{
    __shared__ int64_t off[2 + GP_CU_MAX_EPI];
    pdl_begin();
    kt_resolve(o, syms);
    kt_resolve(out, syms);
    int64_t cs[GP_CU_MAX_EPI];
    int has[GP_CU_MAX_EPI];
#pragma unroll
    for (int k = 0; k < GP_CU_MAX_EPI; k++) {
        has[k] = k < e.n && e.op[k] != GP_OP_GELU;
        cs[k] = 0;
        if (has[k]) {
            kt_resolve(e.other[k], syms);
            cs[k] = e.other[k].ne[3] == 1 ? 0 : e.other[k].nb[3];
        }
    }
    int64_t C = out.ne[3], rows = out.ne[0] * out.ne[1] * out.ne[2];
    int64_t per = (C + SPAN - 1) / SPAN;
    for (int64_t b = blockIdx.x; b < rows * per; b += gridDim.x) {
        int64_t r = b / per, c0 = (b - r * per) * SPAN + threadIdx.x;
        __syncthreads(); /* the last span's offsets are read */
        if (threadIdx.x == 0) /* one thread of a warp each: the divisions run side by side */
            off[0] = kt_row_off(out, out, r);
        if (threadIdx.x == 32)
            off[1] = kt_row_off(o, out, r);
#pragma unroll
        for (int k = 0; k < GP_CU_MAX_EPI; k++)
            if (threadIdx.x == 64 + 32 * k && has[k])
                off[2 + k] = kt_row_off(e.other[k], out, r);
        __syncthreads();
        char *po = out.p + off[0];
        const char *pi = o.p + off[1];
        if (VEC) {
            int64_t c = (b - r * per) * SPAN + SPAN_U * threadIdx.x;
            if (c >= C)
                continue;
            float4 x4 = *(const float4 *)(pi + 4 * c);
            float x[SPAN_U] = {x4.x, x4.y, x4.z, x4.w}, ov[GP_CU_MAX_EPI][SPAN_U];
#pragma unroll
            for (int k = 0; k < GP_CU_MAX_EPI; k++) {
                const char *pk = has[k] ? e.other[k].p + off[2 + k] : NULL;
                int t = e.other[k].t;
                if (!has[k] || cs[k] == 0) {
                    float s = has[k] ? ld_f(pk, t) : 0.0f;
                    for (int j = 0; j < SPAN_U; j++)
                        ov[k][j] = s;
                } else if (t == GP_F32) {
                    float4 w = *(const float4 *)(pk + 4 * c);
                    ov[k][0] = w.x, ov[k][1] = w.y, ov[k][2] = w.z, ov[k][3] = w.w;
                } else {
                    uint2 u = *(const uint2 *)(pk + 2 * c);
                    uint32_t h[SPAN_U] = {u.x & 0xffff, u.x >> 16, u.y & 0xffff, u.y >> 16};
                    for (int j = 0; j < SPAN_U; j++)
                        ov[k][j] = bits_f(h[j], t);
                }
            }
#pragma unroll
            for (int j = 0; j < SPAN_U; j++) {
                EpiVals ev;
#pragma unroll
                for (int k = 0; k < GP_CU_MAX_EPI; k++)
                    ev.v[k] = ov[k][j];
                x[j] = epi_apply_vals(e, ev, x[j]);
            }
            *(float4 *)(po + 4 * c) = make_float4(x[0], x[1], x[2], x[3]);
        } else {
            uint32_t bi[SPAN_U], bk[SPAN_U][GP_CU_MAX_EPI];
#pragma unroll
            for (int u = 0; u < SPAN_U; u++) {
                int64_t c = c0 + u * SPAN_THREADS;
                bi[u] = c < C ? ld_bits(pi + c * o.nb[3], o.t) : 0;
#pragma unroll
                for (int k = 0; k < GP_CU_MAX_EPI; k++)
                    bk[u][k] = c < C && has[k] ? ld_bits(e.other[k].p + off[2 + k] + c * cs[k],
                                                         e.other[k].t)
                                               : 0;
            }
#pragma unroll
            for (int u = 0; u < SPAN_U; u++) {
                int64_t c = c0 + u * SPAN_THREADS;
                if (c >= C)
                    break;
                EpiVals ev;
#pragma unroll
                for (int k = 0; k < GP_CU_MAX_EPI; k++)
                    ev.v[k] = has[k] ? bits_f(bk[u][k], e.other[k].t) : 0.0f;
                st_f(po + c * out.nb[3], out.t, epi_apply_vals(e, ev, bits_f(bi[u], o.t)));
            }
        }
    }
}

static std::atomic<long long> blas_epilogues(0), blas_epilogues_vec(0);

extern "C" int64_t gp_cuda_blas_epilogue_count(int vec)
{
    return vec ? blas_epilogues_vec.load() : blas_epilogues.load();
}

/* 1 when t's rows (dims 0-2, those of more than one element) and its start are al-byte aligned. */
static int rows_aligned(const KT &t, int64_t al)
{
    int ok = (uintptr_t)t.p % (uintptr_t)al == 0;
    for (int d = 0; d < 3; d++)
        ok &= t.ne[d] == 1 || t.nb[d] % al == 0;
    return ok;
}

/* 1 when k_epilogue<true> takes these tensors (its comment). */
static int epi_vec_ok(const KT &o, const KT &out, const EPI &e)
{
    if (o.t != GP_F32 || out.t != GP_F32 || o.nb[3] != 4 || out.nb[3] != 4 ||
        out.ne[3] % SPAN_U || !rows_aligned(o, 16) || !rows_aligned(out, 16))
        return 0;
    for (int k = 0; k < e.n; k++) {
        const KT &x = e.other[k];
        if (e.op[k] == GP_OP_GELU || x.ne[3] == 1)
            continue;
        int es = x.t == GP_F32 ? 4 : x.t == GP_F16 || x.t == GP_BF16 ? 2 : 0;
        if (!es || x.nb[3] != es || !rows_aligned(x, SPAN_U * es))
            return 0;
    }
    return 1;
}

/* After cuBLAS wrote o: the epilogue in one launch (k_epilogue). 1 when launched, 0 when it
 * doesn't fit (the caller runs the nodes one by one), -1 on a launch error. */
static int blas_epilogue(gp_cu_ctx *c, const KT &o, const gp_cu_epilogue *epi)
{
    if (!c->blas_epi || epi->n < 1 || epi->n > GP_CU_MAX_EPI)
        return 0;
    KT out = gp_kt_of(c, &epi->out);
    uintptr_t olo, ohi;
    kt_span(o, &olo, &ohi);
    int same = out.p == o.p && out.t == o.t;
    for (int d = 0; d < 4; d++) {
        if (out.ne[d] != o.ne[d] || out.sym[d] != o.sym[d])
            return 0;
        same &= out.nb[d] == o.nb[d];
    }
    if (!same && kt_meets(out, olo, ohi)) /* a thread would read what another one wrote */
        return 0;
    EPI e;
    e.n = epi->n;
    for (int k = 0; k < epi->n; k++) {
        e.op[k] = epi->op[k];
        if (epi->op[k] == GP_OP_GELU)
            continue;
        if (epi->op[k] != GP_OP_ADD && epi->op[k] != GP_OP_MUL)
            return 0;
        e.other[k] = gp_kt_of(c, &epi->other[k]);
        for (int d = 0; d < 4; d++)
            if (e.other[k].ne[d] != 1 &&
                (e.other[k].ne[d] != out.ne[d] || e.other[k].sym[d] != out.sym[d]))
                return 0;
    }
    unsigned grid = span_blocks(kt_count(out, 3), out.ne[3]);
    int vec = epi_vec_ok(o, out, e);
    if (vec)
        gp_cu_launch(c, k_epilogue<true>, grid, SPAN_THREADS, 0, o, e, out, c->d_syms);
    else
        gp_cu_launch(c, k_epilogue<false>, grid, SPAN_THREADS, 0, o, e, out, c->d_syms);
    if (gp_cu_check_launch(c, "matmul epilogue"))
        return -1;
    blas_epilogues++;
    blas_epilogues_vec += vec;
    return 1;
}

static cudaDataType_t cu_type(int t)
{
    return t == GP_F16 ? CUDA_R_16F : t == GP_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

/* Converts operand *m ([R, C] per batch) to dtype dt at dst, and points *m at the copy. */
static int convert_operand(gp_cu_ctx *c, mat *m, int dt, int64_t R, int64_t C, char *dst)
{
    int64_t es = es_of(dt);
    gp_cu_launch(c, k_convert, span_blocks(m->n0 * m->n1 * R, C), SPAN_THREADS, 0, dst, dt, *m, R,
                 C);
    if (gp_cu_check_launch(c, "matmul_convert"))
        return -1;
    m->p = dst;
    m->t = dt;
    m->sc = es;
    m->sr = C * es;
    m->s1 = m->n1 == 1 ? 0 : R * C * es;
    m->s0 = m->n0 == 1 ? 0 : m->n1 * R * C * es;
    return 0;
}

/* A cuBLAS view of logical X[fast][slow] at x + fast * s_fast + slow * s_slow (bytes) as a
 * column-major n_fast x n_slow matrix: stored as is (op N) or transposed (op T). 0 and op, ld
 * (elements) when one of the two fits, else -1. */
static int blas_view(int64_t s_fast, int64_t s_slow, int64_t n_fast, int64_t n_slow, int64_t es,
                     cublasOperation_t *op, int64_t *ld)
{
    int slow_ok = n_slow == 1 || (s_slow % es == 0 && s_slow / es >= n_fast);
    if ((s_fast == es || n_fast == 1) && slow_ok) {
        *op = CUBLAS_OP_N;
        *ld = n_slow == 1 ? (n_fast > 1 ? n_fast : 1) : s_slow / es;
        return 0;
    }
    int fast_ok = n_fast == 1 || (s_fast % es == 0 && s_fast / es >= n_slow);
    if ((s_slow == es || n_slow == 1) && fast_ok) {
        *op = CUBLAS_OP_T;
        *ld = n_fast == 1 ? (n_slow > 1 ? n_slow : 1) : s_fast / es;
        return 0;
    }
    return -1;
}

static int set_blas_ws(gp_cu_ctx *c, void *ws, size_t size)
{
    return gp_cu_blas_ws(c, ws, size);
}

extern "C" int gp_cu_blas_ws(gp_cu_ctx *c, void *ws, size_t size)
{
    if (ws == c->blas_ws && size == c->blas_ws_size)
        return 0;
    cublasStatus_t st = cublasSetWorkspace(c->blas, ws, size);
    if (st != CUBLAS_STATUS_SUCCESS) {
        snprintf(c->err, sizeof c->err, "cublasSetWorkspace(%zu bytes): %s", size,
                 cublasGetStatusString(st));
        return -1;
    }
    c->blas_ws = ws;
    c->blas_ws_size = size;
    return 0;
}

/* 1 when done through cuBLAS, 0 when the layout doesn't fit it, -1 on error. */
static int try_blas(gp_cu_ctx *c, const KT &o, const KT &ka, const KT &kb, int ta, int tb, void *ws,
                    size_t ws_size)
{
    if (!c->blas || ka.t == GP_I32 || kb.t == GP_I32 || o.t == GP_I32)
        return 0;
    mat A = mat_of(ka, ta), B = mat_of(kb, tb);
    int64_t B0 = o.ne[0], B1 = o.ne[1], M = o.ne[2], N = o.ne[3], K = ta ? ka.ne[2] : ka.ne[3];
    int64_t eo = es_of(o.t);
    if ((o.nb[3] != eo && N > 1) || (M > 1 && (o.nb[2] % eo || o.nb[2] / eo < N)))
        return 0;
    /* Same input dtypes: convert an f32 operand to the other's 16-bit dtype (or a to b's). */
    size_t blas_ws = ws_size;
    char *scratch = NULL;
    if (A.t != B.t) {
        int to_b = A.t == GP_F32 || B.t != GP_F32; /* convert a unless b is the f32 one */
        mat *m = to_b ? &A : &B;
        int64_t R = to_b ? M : K, C = to_b ? K : N;
        size_t need = (size_t)(m->n0 * m->n1 * R * C * 2);
        blas_ws = ws_size / 2 & ~(size_t)255;
        if (!ws || need > ws_size - blas_ws)
            return 0;
        scratch = (char *)ws + blas_ws;
        if (convert_operand(c, m, to_b ? B.t : A.t, R, C, scratch))
            return -1;
    }
    int64_t es = es_of(A.t);
    /* Column-major: C^T [N, M] = B^T [N, K] * A^T [K, M]. */
    cublasOperation_t opb, opa;
    int64_t ldb, lda;
    if (blas_view(B.sc, B.sr, N, K, es, &opb, &ldb) || blas_view(A.sc, A.sr, K, M, es, &opa, &lda))
        return 0;
    if ((A.s0 | A.s1 | B.s0 | B.s1) % es || o.nb[0] % eo || o.nb[1] % eo)
        return 0;
    if (N > INT32_MAX || M > INT32_MAX || K > INT32_MAX || lda > INT32_MAX || ldb > INT32_MAX)
        return 0;
    /* Batches: one strided call over b1, repeated over b0 unless b0 folds into it uniformly. */
    int64_t nb0 = B0, nb1 = B1, sa = A.s1, sb = B.s1, so = o.nb[1];
    if (B1 == 1) {
        nb0 = 1;
        nb1 = B0;
        sa = A.s0;
        sb = B.s0;
        so = o.nb[0];
    } else if (B0 == 1 || (A.s0 == B1 * A.s1 && B.s0 == B1 * B.s1 && o.nb[0] == B1 * o.nb[1])) {
        nb0 = 1;
        nb1 = B0 * B1;
    }
    if (set_blas_ws(c, ws, ws ? blas_ws : 0))
        return -1;
    const float one = 1.0f, zero = 0.0f;
    for (int64_t b0 = 0; b0 < nb0; b0++) {
        cublasStatus_t st = cublasGemmStridedBatchedEx(
            c->blas, opb, opa, (int)N, (int)M, (int)K, &one, B.p + b0 * B.s0, cu_type(B.t), (int)ldb,
            sb / es, A.p + b0 * A.s0, cu_type(A.t), (int)lda, sa / es, &zero, o.p + b0 * o.nb[0],
            cu_type(o.t), (int)(M == 1 ? (N > 1 ? N : 1) : o.nb[2] / eo), so / eo, (int)nb1,
            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        c->launches++;
        if (st != CUBLAS_STATUS_SUCCESS) {
            snprintf(c->err, sizeof c->err,
                     "cublasGemmStridedBatchedEx(N %lld, M %lld, K %lld, batch %lld): %s",
                     (long long)N, (long long)M, (long long)K, (long long)nb1,
                     cublasGetStatusString(st));
            return -1;
        }
    }
    return 1;
}

int gp_cu_matmul(gp_cu_ctx *c, const gp_attrs *a, const gp_cu_tensor *out, const gp_cu_tensor *in,
                 void *ws, size_t ws_size, const gp_cu_epilogue *epi, const gp_cu_prenorm *pre,
                 int *fused, int *pre_used)
{
    if (fused)
        *fused = 0;
    if (pre_used)
        *pre_used = 0;
    if (gp_dtype_is_quant(in[1].dtype)) { /* cuda_quant.cu; a norm is left to its node */
        if (pre && pre_used)
            return 0;
        int f = 0;
        if (gp_cu_quant_matmul(c, a, out, in, ws, ws_size, fused ? epi : NULL, &f))
            return -1;
        if (f || !epi || epi->n < 1 || !fused) {
            if (fused)
                *fused = f;
            return 0;
        }
        /* not in the kernel (a prompt): the epilogue in one launch after it, when it fits */
        int r = blas_epilogue(c, gp_kt_of(c, out), epi);
        if (r < 0)
            return -1;
        *fused = r;
        return 0;
    }
    KT o = gp_kt_of(c, out), ka = gp_kt_of(c, &in[0]), kb = gp_kt_of(c, &in[1]);
    int ta = a->i[GP_MATMUL_TA] != 0, tb = a->i[GP_MATMUL_TB] != 0;
    if (in[0].ndim < 2 || in[1].ndim < 2 || out->ndim < 2) {
        snprintf(c->err, sizeof c->err, "matmul: operands need two dims or more");
        return -1;
    }
    if (pre && !pre_used)
        pre = NULL;
    if (c->x_gelu && pre) {
        snprintf(c->err, sizeof c->err, "matmul: gelu(x) asked for with a norm of x");
        return -1;
    }
    if (kt_count(o, 4) == 0) {
        c->x_gelu = 0; /* x is not read */
        return 0; /* with pre: not used, so the caller runs the norm as it would */
    }
    int r = epi ? gp_cu_try_matvec(c, o, ka, kb, ta, tb, in, ws, ws_size, epi, pre) : 0;
    if (r > 0) {
        *fused = 1;
        if (pre)
            *pre_used = 1;
        return 0;
    }
    if (r == 0)
        r = gp_cu_try_matvec(c, o, ka, kb, ta, tb, in, ws, ws_size, NULL, pre);
    if (pre) {
        /* Only the matrix-vector kernels compute a norm; else the caller runs it first. */
        if (r > 0)
            *pre_used = 1;
        return r < 0 ? -1 : 0;
    }
    if (r == 0 && c->x_gelu) {
        /* x is read whole by cuBLAS: gelu(x) in place first (f32, contiguous) */
        if (ka.t != GP_F32 || ka.nb[3] != 4 || ka.nb[2] != ka.ne[3] * 4 ||
            ka.nb[1] != ka.ne[2] * ka.nb[2] || ka.nb[0] != ka.ne[1] * ka.nb[1]) {
            snprintf(c->err, sizeof c->err, "matmul: gelu(x) asked for a strided x");
            return -1;
        }
        if (gp_cu_x_gelu_now(c, (const float *)ka.p, kt_count(ka, 4)))
            return -1;
    }
    if (r == 0)
        r = try_blas(c, o, ka, kb, ta, tb, ws, ws_size);
    if (r < 0)
        return -1;
    if (r > 0 && epi && epi->n > 0 && fused) {
        r = blas_epilogue(c, o, epi);
        if (r < 0)
            return -1;
        *fused = r;
        return 0;
    }
    if (r > 0)
        return 0;
    int64_t n = kt_count(o, 4), b = (n + 255) / 256;
    gp_cu_launch(c, k_matmul_naive, (unsigned)(b > 8192 ? 8192 : b), 256, 0, o, ka, kb, ta, tb,
                 c->d_syms);
    return gp_cu_check_launch(c, "matmul_naive");
}

extern "C" int gp_cuda_matmul_fused(gp_cu_ctx *c, const gp_attrs *a, const gp_cu_tensor *out,
                                    const gp_cu_tensor *in, void *ws, size_t ws_size,
                                    const gp_cu_epilogue *epi, const gp_cu_prenorm *pre, int *fused,
                                    int *pre_used)
{
    return gp_cu_matmul(c, a, out, in, ws, ws_size, epi, pre, fused, pre_used);
}
