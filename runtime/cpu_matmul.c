/* CPU matmul: out[..., M, N] = a[..., M, K] b[..., K, N] over any strides, dtypes and transposes.
 * Cache-blocked: tiles of A and B are packed to f32 on the stack (no workspace), then a 4x16
 * register kernel accumulates in f32 with k in ascending order, the same for every element. */
#include <string.h>

#include "runtime/cpu_internal.h"
#include "runtime/quant.h"

/* Block sizes: an A block [MB, KB] (32 KiB) and a B block [KB, NB] (32 KiB) fit in L2, one B
 * panel [KB, NR] (8 KiB) in L1. Stack use: (MB KB + KB NB + MB NB + KB) floats = 80.5 KiB. */
enum { MR = 4, NR = 16, MB = 64, NB = 64, KB = 128 };

typedef float v8 __attribute__((vector_size(32)));

/* One build for AVX2 machines and a portable one, picked at load time. The arithmetic is the same
 * IEEE operations in the same order (no FMA: gp_cpu builds with -ffp-contract=off), so both give
 * the same bits. */
#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones) && !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
#define GP_CLONES __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef GP_CLONES
#define GP_CLONES
#endif

/* Unaligned vector loads and stores (macros: a function returning v8 would change the ABI
 * between the two builds). */
#define V8_LOAD(v, p) memcpy(&(v), (p), sizeof(v8))
#define V8_STORE(p, v) memcpy((p), &(v), sizeof(v8))

/* c[r][0..16) += sum over k < kc of a[r][k] * b[k][0..16), for r < mr (a constant after inlining).
 * a: [mr, lda], b: [kc, ldb], c: [mr, ldc]. */
static inline __attribute__((always_inline)) void tile(int mr, int64_t kc, const float *a,
                                                       int64_t lda, const float *b, int64_t ldb,
                                                       float *c, int64_t ldc)
{
    v8 c0[MR], c1[MR];
    for (int r = 0; r < mr; r++) {
        V8_LOAD(c0[r], c + r * ldc);
        V8_LOAD(c1[r], c + r * ldc + 8);
    }
    for (int64_t k = 0; k < kc; k++) {
        v8 b0, b1;
        V8_LOAD(b0, b + k * ldb);
        V8_LOAD(b1, b + k * ldb + 8);
        for (int r = 0; r < mr; r++) {
            float av = a[r * lda + k];
            c0[r] += b0 * av;
            c1[r] += b1 * av;
        }
    }
    for (int r = 0; r < mr; r++) {
        V8_STORE(c + r * ldc, c0[r]);
        V8_STORE(c + r * ldc + 8, c1[r]);
    }
}

/* ct[mc, NB] += ap[mc, KB] bp[kc, NB] over the first ncp (a multiple of NR) columns. */
GP_CLONES static void block(int64_t mc, int64_t ncp, int64_t kc, const float *ap, const float *bp,
                            float *ct)
{
    for (int64_t m = 0; m < mc; m += MR) {
        int64_t mr = mc - m < MR ? mc - m : MR;
        for (int64_t n = 0; n < ncp; n += NR) {
            const float *a = ap + m * KB, *b = bp + n;
            float *c = ct + m * NB + n;
            switch (mr) {
            case 4: tile(4, kc, a, KB, b, NB, c, NB); break;
            case 3: tile(3, kc, a, KB, b, NB, c, NB); break;
            case 2: tile(2, kc, a, KB, b, NB, c, NB); break;
            default: tile(1, kc, a, KB, b, NB, c, NB); break;
            }
        }
    }
}

/* A matrix view: element (i, j) at p + i * si + j * sj. */
typedef struct {
    const char *p;
    gp_dtype t;
    int64_t si, sj;
} mview;

/* bp[k][j] = B(k0 + k, n0 + j) for k < kc, j < nc; columns nc..ncp are zero. */
static void pack_b(float *bp, const mview *B, int64_t k0, int64_t kc, int64_t n0, int64_t nc,
                   int64_t ncp)
{
    int64_t es = (int64_t)gp_dtype_size(B->t);
    if (B->si == es && B->sj != es) {
        /* Columns are contiguous (a transposed B, as a Linear weight [N, K]): load, then scatter. */
        float col[KB];
        for (int64_t j = 0; j < nc; j++) {
            gp_cpu_load_row(col, B->p + k0 * B->si + (n0 + j) * B->sj, kc, B->si, B->t);
            for (int64_t k = 0; k < kc; k++)
                bp[k * NB + j] = col[k];
        }
    } else {
        for (int64_t k = 0; k < kc; k++)
            gp_cpu_load_row(bp + k * NB, B->p + (k0 + k) * B->si + n0 * B->sj, nc, B->sj, B->t);
    }
    for (int64_t k = 0; k < kc; k++)
        for (int64_t j = nc; j < ncp; j++)
            bp[k * NB + j] = 0.0f;
}

/* One matmul after shape handling: nbat batches of out[M, N] = A[M, K] B[K, N]. */
typedef struct {
    gp_t4 o, a, b; /* batch dims in [0], [1]; a dim of 1 broadcasts */
    int64_t M, N, K;
    int64_t sam, sak, sbk, sbn, som, son; /* byte strides of A (m, k), B (k, n), out (m, n) */
} mm_problem;

/* A and B of batch bi, and out's batch base. */
static void mm_batch(const mm_problem *q, int64_t bi, mview *A, mview *B, char **po)
{
    int64_t b0 = bi / q->o.ne[1], b1 = bi % q->o.ne[1];
    A->p = q->a.p + (q->a.ne[0] == 1 ? 0 : b0 * q->a.nb[0]) + (q->a.ne[1] == 1 ? 0 : b1 * q->a.nb[1]);
    A->t = q->a.t;
    A->si = q->sam;
    A->sj = q->sak;
    B->p = q->b.p + (q->b.ne[0] == 1 ? 0 : b0 * q->b.nb[0]) + (q->b.ne[1] == 1 ? 0 : b1 * q->b.nb[1]);
    B->t = q->b.t;
    B->si = q->sbk;
    B->sj = q->sbn;
    *po = q->o.p + b0 * q->o.nb[0] + b1 * q->o.nb[1];
}

/* The blocked path: work items are (batch, column block, row block) tiles of out. */
static void mm_gemm(const mm_problem *q, int ith, int nth)
{
    int64_t M = q->M, N = q->N, K = q->K;
    int64_t nbat = q->o.ne[0] * q->o.ne[1], mblk = (M + MB - 1) / MB, nblk = (N + NB - 1) / NB;
    int64_t i0, i1;
    _Alignas(64) float ap[MB * KB];
    _Alignas(64) float bp[KB * NB];
    _Alignas(64) float ct[MB * NB];
    gp_share(nbat * nblk * mblk, ith, nth, &i0, &i1);
    for (int64_t item = i0; item < i1; item++) {
        /* Items run batch, then column block, then row block. */
        int64_t bi = item / (nblk * mblk), nbi = (item / mblk) % nblk, mbi = item % mblk;
        mview A, B;
        char *po;
        mm_batch(q, bi, &A, &B, &po);
        int64_t m0 = mbi * MB, mc = M - m0 < MB ? M - m0 : MB;
        int64_t n0 = nbi * NB, nc = N - n0 < NB ? N - n0 : NB, ncp = (nc + NR - 1) / NR * NR;
        for (int64_t i = 0; i < mc * NB; i++)
            ct[i] = 0.0f;
        for (int64_t k0 = 0; k0 < K; k0 += KB) {
            int64_t kc = K - k0 < KB ? K - k0 : KB;
            for (int64_t i = 0; i < mc; i++)
                gp_cpu_load_row(ap + i * KB, A.p + (m0 + i) * A.si + k0 * A.sj, kc, A.sj, A.t);
            pack_b(bp, &B, k0, kc, n0, nc, ncp);
            block(mc, ncp, kc, ap, bp, ct);
        }
        for (int64_t i = 0; i < mc; i++)
            gp_cpu_store_row(po + (m0 + i) * q->som + n0 * q->son, q->son, q->o.t, ct + i * NB, nc);
    }
}

/* The dot path, for at most DM rows against a B whose columns are contiguous in k (a Linear weight
 * [N, K], decoding): packing B would cost as much as the product. Rows of B are converted in
 * chunks of DK; each out element is a dot product in 8 lanes (k to lane k % 8), lanes summed
 * pairwise at the end. Stack: (DM DK + DN DK + DM DN 8) floats = 28 KiB. */
enum { DM = 8, DN = 16, DK = 256 };

/* acc[m][j][0..8) += lanes of sum over k < kc of ap[m][k] * wp[j][k], for m < mc, j < nc. */
GP_CLONES static void dot_block(int64_t mc, int64_t nc, int64_t kc, const float *ap,
                                const float *wp, float *acc)
{
    int64_t k8 = kc / 8 * 8;
    for (int64_t m = 0; m < mc; m++) {
        const float *a = ap + m * DK;
        float *c = acc + m * DN * 8;
        int64_t j = 0;
        for (; j + 4 <= nc; j += 4) {
            v8 s0, s1, s2, s3;
            V8_LOAD(s0, c + (j + 0) * 8);
            V8_LOAD(s1, c + (j + 1) * 8);
            V8_LOAD(s2, c + (j + 2) * 8);
            V8_LOAD(s3, c + (j + 3) * 8);
            const float *w = wp + j * DK;
            for (int64_t k = 0; k < k8; k += 8) {
                v8 va, w0, w1, w2, w3;
                V8_LOAD(va, a + k);
                V8_LOAD(w0, w + k);
                V8_LOAD(w1, w + DK + k);
                V8_LOAD(w2, w + 2 * DK + k);
                V8_LOAD(w3, w + 3 * DK + k);
                s0 += va * w0;
                s1 += va * w1;
                s2 += va * w2;
                s3 += va * w3;
            }
            V8_STORE(c + (j + 0) * 8, s0);
            V8_STORE(c + (j + 1) * 8, s1);
            V8_STORE(c + (j + 2) * 8, s2);
            V8_STORE(c + (j + 3) * 8, s3);
        }
        for (; j < nc; j++) {
            v8 s0;
            V8_LOAD(s0, c + j * 8);
            for (int64_t k = 0; k < k8; k += 8) {
                v8 va, w0;
                V8_LOAD(va, a + k);
                V8_LOAD(w0, wp + j * DK + k);
                s0 += va * w0;
            }
            V8_STORE(c + j * 8, s0);
        }
        /* The last chunk's tail: k8 is a multiple of 8, so element k8 + i goes to lane i. */
        for (j = 0; j < nc; j++)
            for (int64_t k = k8; k < kc; k++)
                c[j * 8 + (k - k8)] += a[k] * wp[j * DK + k];
    }
}

static void mm_dot(const mm_problem *q, int ith, int nth)
{
    int64_t M = q->M, N = q->N, K = q->K, nbat = q->o.ne[0] * q->o.ne[1];
    int64_t nblk = (N + DN - 1) / DN, i0, i1;
    _Alignas(64) float ap[DM * DK];
    _Alignas(64) float wp[DN * DK];
    _Alignas(64) float acc[DM * DN * 8];
    gp_share(nbat * nblk, ith, nth, &i0, &i1);
    for (int64_t item = i0; item < i1; item++) {
        mview A, B;
        char *po;
        mm_batch(q, item / nblk, &A, &B, &po);
        int64_t n0 = item % nblk * DN, nc = N - n0 < DN ? N - n0 : DN;
        for (int64_t i = 0; i < M * DN * 8; i++)
            acc[i] = 0.0f;
        for (int64_t k0 = 0; k0 < K; k0 += DK) {
            int64_t kc = K - k0 < DK ? K - k0 : DK;
            for (int64_t m = 0; m < M; m++)
                gp_cpu_load_row(ap + m * DK, A.p + m * A.si + k0 * A.sj, kc, A.sj, A.t);
            for (int64_t j = 0; j < nc; j++)
                gp_cpu_load_row(wp + j * DK, B.p + (n0 + j) * B.sj + k0 * B.si, kc, B.si, B.t);
            dot_block(M, nc, kc, ap, wp, acc);
        }
        for (int64_t m = 0; m < M; m++) {
            float row[DN];
            for (int64_t j = 0; j < nc; j++) {
                const float *l = acc + (m * DN + j) * 8;
                row[j] = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
            }
            gp_cpu_store_row(po + m * q->som + n0 * q->son, q->son, q->o.t, row, nc);
        }
    }
}

void gp_cpu_matmul(const gp_attrs *at, const gp_ktensor *out, const gp_ktensor *in, int ith,
                   int nth)
{
    mm_problem q;
    q.o = gp_t4_of(out);
    q.a = gp_t4_of(&in[0]);
    q.b = gp_t4_of(&in[1]);
    int ta = at->i[0] != 0, tb = at->i[1] != 0;
    gp_t4 *o = &q.o, *a = &q.a, *b = &q.b;
    q.M = o->ne[2];
    q.N = o->ne[3];
    q.K = ta ? a->ne[2] : a->ne[3];
    q.sam = ta ? a->nb[3] : a->nb[2];
    q.sak = ta ? a->nb[2] : a->nb[3];
    q.sbk = tb ? b->nb[3] : b->nb[2];
    q.sbn = tb ? b->nb[2] : b->nb[3];
    q.som = o->nb[2];
    q.son = o->nb[3];
    GP_ASSERT((ta ? a->ne[3] : a->ne[2]) == q.M && (tb ? b->ne[2] : b->ne[3]) == q.N);
    GP_ASSERT((tb ? b->ne[3] : b->ne[2]) == q.K);

    /* A shared B (no batch dims of its own): fold a's batch dims into M when its rows and out's
     * are evenly spaced across them, so B is read once for all rows. */
    if (b->ne[0] == 1 && b->ne[1] == 1) {
        for (int d = 1; d >= 0; d--) {
            int64_t n = o->ne[d];
            if (n == 1 || (a->ne[d] == n && a->nb[d] == q.M * q.sam && o->nb[d] == q.M * q.som)) {
                q.M *= n;
                o->ne[d] = a->ne[d] = 1;
            } else {
                break;
            }
        }
    }
    /* The path depends on shapes only, never on nth. */
    if (q.M <= DM && q.sbk == (int64_t)gp_dtype_size(b->t))
        mm_dot(&q, ith, nth);
    else
        mm_gemm(&q, ith, nth);
}

/* ---- quantized weights (runtime/quant.h) ----
 * f32 activations times blocks dequantized on the fly (gp_quant_matmul_f32): the result is the
 * dequantized weights' product up to summation order, as transformers computes a GGUF model.
 * Threads split the output columns; the split changes no result, so every thread count gives the
 * same bits. */

void gp_cpu_matmul_quant(const gp_ktensor *out, const gp_ktensor *in, int ith, int nth)
{
    const gp_ktensor *x = &in[0], *w = &in[1];
    int64_t n0, n1, N = w->ne[0];
    /* Shares of whole 16-column groups, so the SIMD paths see full tiles. */
    gp_share((N + 15) / 16, ith, nth, &n0, &n1);
    n0 *= 16;
    n1 = n1 * 16 < N ? n1 * 16 : N;
    if (n0 < n1)
        gp_quant_matmul_f32(w->dtype, w->data, n0, n1, x->data, x->nb[0] / (int64_t)sizeof(float),
                            x->ne[0], x->ne[1], out->data, out->nb[0] / (int64_t)sizeof(float));
}
